"""``lamina ui``: the local, read-only web explorer (lamina.ui) of a catalog or a table."""

from __future__ import annotations

import threading

import typer

from lamina.cli._catalogs import chosen, missing
from lamina.cli._output import console
from lamina.cli._output import fail as _fail
from lamina.errors import CatalogNotFound, InvalidArgument, LaminaError


def ui(
    target: str | None = typer.Argument(None, help="catalog URI or table location (default: --catalog)"),
    port: int = typer.Option(8765, "--port", "-p", help="port on the loopback address (0: any free port)"),
    host: str = typer.Option("127.0.0.1", "--host", help="loopback address to bind (127.0.0.1, ::1 or localhost)"),
    open_browser: bool = typer.Option(False, "--open/--no-open", help="open the page in this machine's browser"),
):
    """Serve a local, read-only web explorer of a catalog's tables or of one table."""
    from lamina.ui.server import serve

    uri, source = (target, "given as the target") if target else chosen()
    try:
        error = missing(uri, source) if uri.startswith("sqlite:") or "://" not in uri else None
    except LaminaError as e:
        _fail(e)
    if error is not None:  # a local path is a table's location or a directory catalog's warehouse
        _fail(error if "://" in uri else CatalogNotFound(f"{uri!r} is no table location, and {error}"))
    target = uri
    try:
        server, url = serve(target, host, port)
    except LaminaError as e:
        _fail(e)
    except OSError as e:
        _fail(InvalidArgument(f"cannot listen on {host}:{port} ({e.strerror}); pick another --port"))
    console.print(f"Lamina explorer of {target} at [bold]{url}[/bold] (read-only; Ctrl-C stops it)")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
        server.server_close()
