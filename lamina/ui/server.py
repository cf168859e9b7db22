"""The explorer's HTTP server: the page (package data under ``static/``) and its JSON API,
on a loopback address only, GET only (docs/ui.md).

Every response carries a Content-Security-Policy that lets the page load nothing but its
own files and call nothing but its own API, so it works offline and fetches nothing from
elsewhere. A request whose Host header is not a loopback name is refused too (a web page
elsewhere cannot reach the explorer by rebinding a DNS name to 127.0.0.1).
"""

from __future__ import annotations

import ipaddress
import json
import sys
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from lamina.errors import (
    ExplorerError,
    InvalidArgument,
    LaminaError,
    SchemaMismatch,
    TableNotFound,
    VersionNotFound,
)
from lamina.ui.api import FILES_MAX_ROWS, SAMPLE_MAX_ROWS, TIMELINE_PAGE, Explorer

# The page's files: served by name from this fixed list, never from a path in the URL.
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
LOOPBACK_NAMES = ("localhost",)


def _bounded(raw: str | None, default: int, maximum: int, what: str) -> int:
    """A query parameter as a count: ``default`` if absent, at most ``maximum``; refused if negative or no integer."""
    if raw is None or raw == "":
        return default
    try:
        n = int(raw)
    except ValueError:
        raise ExplorerError(f"{what} must be an integer, not {raw!r}") from None
    if n < 0:
        raise ExplorerError(f"{what} must be >= 0, not {n}")
    return min(n, maximum)


def check_loopback(host: str) -> str:
    """``host`` if it is a loopback address or ``localhost``; InvalidArgument otherwise (the
    explorer shows table contents and has no authentication)."""
    if host in LOOPBACK_NAMES:
        return host
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise InvalidArgument(
        f"the explorer binds only to a loopback address (127.0.0.1, ::1 or localhost), not {host!r}: it has no "
        "authentication; reach it from elsewhere through an SSH tunnel (ssh -L 8765:127.0.0.1:8765 host)"
    )


def _host_is_loopback(header: str | None) -> bool:
    if not header:
        return False
    host = urllib.parse.urlsplit("//" + header).hostname or ""
    try:
        check_loopback(host)
        return True
    except InvalidArgument:
        return False


def _static(name: str) -> bytes:
    return resources.files("lamina.ui").joinpath("static", name).read_bytes()


def _status_of(e: LaminaError) -> int:
    if isinstance(e, ExplorerError):
        return e.status
    if isinstance(e, (TableNotFound, VersionNotFound)):
        return 404
    if isinstance(e, (InvalidArgument, SchemaMismatch, ValueError)):
        return 400
    return 500


class _Handler(BaseHTTPRequestHandler):
    explorer: Explorer  # set on the class made per server
    server_version = "lamina-ui"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints the address
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", _CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, doc: Any) -> None:
        self._send(status, json.dumps(doc, separators=(",", ":"), allow_nan=False).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message, "status": status})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if not _host_is_loopback(self.headers.get("Host")):
            return self._error(403, "the explorer answers only requests addressed to a loopback host")
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        try:
            if not parts or parts == ["index.html"]:
                return self._send(200, _static("index.html"), _STATIC["index.html"])
            if parts[0] == "static" and len(parts) == 2 and parts[1] in _STATIC:
                return self._send(200, _static(parts[1]), _STATIC[parts[1]])
            if parts[0] == "api":
                return self._json(200, route(self.explorer, parts[1:], query))
            return self._error(404, f"no page {url.path!r}; the explorer is at /")
        except LaminaError as e:
            return self._error(_status_of(e), str(e))
        except Exception as e:  # a bug: answer JSON, say what, no traceback to the page
            print(f"lamina ui: {self.path}: {type(e).__name__}: {e}", file=sys.stderr)
            return self._error(500, f"internal error ({type(e).__name__}); see the server's output")

    def _refuse(self) -> None:
        self._error(405, "the explorer is read-only: only GET requests")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse


def route(ex: Explorer, parts: list[str], query: dict[str, str]) -> Any:
    """The JSON answer to ``/api/<parts...>?<query>`` (docs/ui.md)."""
    if parts == ["catalog"]:
        return ex.catalog_page()
    if len(parts) not in (2, 3) or parts[0] != "tables":
        raise ExplorerError(f"no API endpoint /api/{'/'.join(parts)}; see docs/ui.md", 404)
    t = ex.table(parts[1], query.get("branch") or None)
    what = parts[2] if len(parts) == 3 else "overview"
    version = lambda: ex.resolve(t, query.get("version"), query.get("tag") or None)  # noqa: E731
    offset = lambda: _bounded(query.get("offset"), 0, 1 << 62, "offset")  # noqa: E731
    endpoints: dict[str, Callable[[], Any]] = {
        "overview": lambda: {**ex.overview(t), "key": parts[1]},
        "history": lambda: ex.history(t),
        "versions": lambda: ex.versions_page(
            t, offset(), _bounded(query.get("limit"), TIMELINE_PAGE, TIMELINE_PAGE, "limit")
        ),
        "bytes": lambda: ex.bytes_series(t),
        "files": lambda: ex.files(t, version(), offset(), _bounded(query.get("limit"), 100, FILES_MAX_ROWS, "limit")),
        "layout": lambda: ex.layout(t, version()),
        "sample": lambda: ex.sample(t, version(), offset(), _bounded(query.get("limit"), 50, SAMPLE_MAX_ROWS, "limit")),
        "health": lambda: ex.health(t),
        "expiry": lambda: ex.expiry(t),
    }
    if what not in endpoints:
        raise ExplorerError(f"no API endpoint {what!r} for a table; there are {', '.join(endpoints)}", 404)
    return endpoints[what]()


class _ExplorerServer(ThreadingHTTPServer):
    """``server_close()`` closes the socket, and the explorer too when the server opened it
    (``serve``): a catalog explorer holds the catalog's connection."""

    owned_explorer: Explorer | None = None

    def server_close(self) -> None:
        super().server_close()
        if self.owned_explorer is not None:
            self.owned_explorer.close()


def start_server(explorer: Explorer, host: str = "127.0.0.1", port: int = 0) -> _ExplorerServer:
    """A server for ``explorer`` on ``host``:``port`` (0: any free port), serving in a daemon
    thread; ``server.server_address`` says where, ``server.shutdown()`` stops it."""
    check_loopback(host)
    handler = type("ExplorerHandler", (_Handler,), {"explorer": explorer})
    server = _ExplorerServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="lamina-ui", daemon=True).start()
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    address, port = server.server_address[:2]
    host = address.decode() if isinstance(address, bytes) else str(address)
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/"


def serve(target: str, host: str = "127.0.0.1", port: int = 8765) -> tuple[ThreadingHTTPServer, str]:
    """Start the explorer of ``target`` (a catalog URI or a table location); ``shutdown()``
    stops it, then ``server_close()`` closes its socket and the explorer."""
    explorer = Explorer(target)
    try:
        server = start_server(explorer, host, port)
    except BaseException:
        explorer.close()
        raise
    server.owned_explorer = explorer
    return server, url_of(server)
