"""`lamina iceberg enable|disable|sync|status <table>`: the table's Iceberg view (docs/iceberg.md)."""

from __future__ import annotations

import threading

import typer

from lamina.cli._catalogs import chosen
from lamina.cli._output import console
from lamina.cli._output import fail as _fail
from lamina.cli._tables import open_target as _open
from lamina.errors import InvalidArgument, LaminaError

iceberg_app = typer.Typer(
    help="The Iceberg v3 view of a table: metadata Iceberg readers (pyiceberg, DuckDB, Trino, Spark) open as it is.",
    no_args_is_help=True,
)


def _switch(table: str, on: bool) -> None:
    t = _open(table)
    try:
        committed = t.set_iceberg_enabled(on)
        head = t.iceberg_status()
    except LaminaError as e:
        _fail(e)
    word = "on" if on else "off"
    what = f"version {committed.version}" if committed.committed else f"already {word}"
    shows = f": [bold]{head['metadata']}[/bold]" if on else "; Iceberg readers keep seeing the last version it showed"
    console.print(f"Iceberg view of {t.uri} {word} ({what}){shows}")


@iceberg_app.command("enable")
def enable(table: str):
    """Turn the view on (a new version) and write it for every retained version."""
    _switch(table, True)


@iceberg_app.command("disable")
def disable(table: str):
    """Turn the view off (a new version); its files stay, showing the last version it showed."""
    _switch(table, False)


@iceberg_app.command("sync")
def sync(table: str):
    """Bring the view up to date: a snapshot per retained version, every tag and branch."""
    t = _open(table)
    try:
        result = t.sync_iceberg()
        head = t.iceberg_status()
    except LaminaError as e:
        _fail(e)
    if result.metadata_path is None:
        console.print(f"Iceberg view of {t.uri} is up to date: {head['metadata']}")
    else:
        console.print(
            f"wrote {result.metadata_path}: {result.snapshots_added} snapshot(s) added, "
            f"{result.snapshots_removed} removed, {result.manifests_written} manifest(s), "
            f"{result.puffins_written} Puffin file(s)"
        )


@iceberg_app.command("status")
def status(table: str):
    """Whether the view is on, which metadata file is newest, and whether it shows the latest version."""
    t = _open(table)
    try:
        s = t.iceberg_status()
    except LaminaError as e:
        _fail(e)
    when = "in the background after each commit" if s["sync_mode"] == "async" else "before each commit returns"
    console.print(
        f"Iceberg view of {t.uri}: {'on' if s['enabled'] else 'off'}" + (f", written {when}" if s["enabled"] else "")
    )
    console.print(f"  metadata: {s['metadata'] or '-'}")
    if s["metadata"]:
        console.print(
            f"  shows version {s['shown_version']} of main (latest {s['latest_version']}), "
            f"{s['snapshots']} snapshot(s), refs: {', '.join(s['refs'])}"
        )
    for p in s["problems"]:
        console.print(f"  [yellow]{p}[/yellow]")
    if s["problems"]:
        raise typer.Exit(1)


def serve_iceberg(
    catalog: str | None = typer.Argument(None, help="catalog URI or warehouse directory (default: --catalog)"),
    port: int = typer.Option(8181, "--port", "-p", help="port (0: any free port)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind; beyond loopback a token is required"),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="LAMINA_ICEBERG_TOKEN",
        help="bearer token clients must send (or exchange as the OAuth2 client secret)",
    ),
):
    """Serve a read-only Iceberg REST catalog of a Lamina catalog's tables (their Iceberg views)."""
    from lamina.rest import serve

    target = catalog or chosen()[0]
    try:
        server, url = serve(target, host, port, token)
    except LaminaError as e:
        _fail(e)
    except OSError as e:
        _fail(InvalidArgument(f"cannot listen on {host}:{port} ({e.strerror}); pick another --port"))
    auth = "bearer token required" if token else "no token (loopback only)"
    console.print(f"Iceberg REST catalog of {target} at [bold]{url}[/bold] (read-only, {auth}; Ctrl-C stops it)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
        server.server_close()
