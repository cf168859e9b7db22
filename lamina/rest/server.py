"""A read-only Iceberg REST catalog of a Lamina catalog (``lamina serve-iceberg``): Iceberg
clients (pyiceberg's ``RestCatalog``, DuckDB's ``ATTACH ... (TYPE iceberg)``, Trino, Spark)
find the catalog's tables by name and load their Iceberg view (docs/iceberg.md).

Routes (the REST catalog OpenAPI spec's): ``GET /v1/config``; ``GET /v1/namespaces``;
``GET|HEAD /v1/namespaces/{ns}``; ``GET /v1/namespaces/{ns}/tables``;
``GET|HEAD /v1/namespaces/{ns}/tables/{table}`` (loadTable: the view's newest metadata file
and its location); ``POST /v1/oauth/tokens`` (client credentials). Every other method or
route is refused: writes with 403 and a message saying Lamina is the writer.

What it serves comes only from the catalog: a table is found by name in the catalog's own
list (names are checked as the catalog checks them, never turned into paths), and what is
returned is the metadata file of that table's view, read from that table's location. No
other file is read or served, whatever a request's path or names carry.

Bound to a loopback address it needs no token; bound anywhere else it refuses to start
without one (``--token`` or ``LAMINA_ICEBERG_TOKEN``), and then every request but the token
exchange must carry ``Authorization: Bearer <token>``; the token endpoint hands it out for the
client secret equal to it (OAuth2 client credentials, as the spec's ``/v1/oauth/tokens``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lamina.catalog import load_catalog
from lamina.errors import InvalidArgument, LaminaError, TableNotFound
from lamina.iceberg import read_head

PREFIX = "/v1"
NAMESPACE_SEPARATOR = "\x1f"  # multi-level namespaces in a path (the spec's unit separator)
MAX_NAME = 256
READ_ONLY = (
    "this Iceberg REST catalog is read-only: Lamina is the writer of its tables. Write with lamina "
    "(Table.append, merge, ...) or lamina.spark; Iceberg clients see each commit"
)


class RestError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _name(text: str, what: str) -> str:
    """A namespace or table name from a request: decoded once, plain text only."""
    if (
        not text
        or len(text) > MAX_NAME
        or any(ord(c) < 32 and c != NAMESPACE_SEPARATOR for c in text)
        or "/" in text
        or "\\" in text
        or text in (".", "..")
    ):
        raise RestError(400, "BadRequestException", f"invalid {what} name {text[:80]!r}")
    return text


class IcebergRestCatalog:
    """The answers, independent of HTTP (the handler below maps routes to these)."""

    def __init__(self, catalog_uri: str, token: str | None = None) -> None:
        self.catalog = load_catalog(catalog_uri)
        self.token = token

    def _tables(self) -> dict[str, list[str]]:
        """Namespace -> names of its tables whose Iceberg view exists."""
        out: dict[str, list[str]] = {}
        for ns in self.catalog.list_namespaces():
            out[ns] = []
            for ident in self.catalog.list_tables(ns):
                name = ident.split(".", 1)[1] if "." in ident else ident
                out[ns].append(name)
        return out

    def config(self) -> dict[str, Any]:
        routes = [
            "GET /v1/{prefix}/namespaces",
            "GET /v1/{prefix}/namespaces/{namespace}",
            "HEAD /v1/{prefix}/namespaces/{namespace}",
            "GET /v1/{prefix}/namespaces/{namespace}/tables",
            "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        ]
        return {"defaults": {}, "overrides": {}, "endpoints": routes}

    def namespaces(self, parent: str | None) -> dict[str, Any]:
        if parent:
            self.namespace(parent)
            return {"namespaces": []}  # Lamina's namespaces have one level
        return {"namespaces": [[ns] for ns in sorted(self._tables())]}

    def namespace(self, ns: str) -> dict[str, Any]:
        ns = _name(ns, "namespace")
        if ns not in self._tables():
            raise RestError(404, "NoSuchNamespaceException", f"namespace does not exist: {ns}")
        return {"namespace": [ns], "properties": {}}

    def tables(self, ns: str) -> dict[str, Any]:
        ns = _name(ns, "namespace")
        tables = self._tables()
        if ns not in tables:
            raise RestError(404, "NoSuchNamespaceException", f"namespace does not exist: {ns}")
        names = [n for n in sorted(tables[ns]) if self._view(ns, n, quiet=True) is not None]
        return {"identifiers": [{"namespace": [ns], "name": n} for n in names]}

    def _view(self, ns: str, name: str, quiet: bool = False) -> Any:
        """The table's view (read_head) if it is in the catalog and has one."""
        ns, name = _name(ns, "namespace"), _name(name, "table")
        if name not in self._tables().get(ns, []):
            if quiet:
                return None
            raise RestError(404, "NoSuchTableException", f"table does not exist: {ns}.{name}")
        try:
            table = self.catalog.load_table(f"{ns}.{name}")
        except TableNotFound:
            if quiet:
                return None
            raise RestError(404, "NoSuchTableException", f"table does not exist: {ns}.{name}") from None
        head = read_head(table.io)
        if head is None:
            if quiet:
                return None
            raise RestError(
                404,
                "NoSuchTableException",
                f"table {ns}.{name} has no Iceberg view: turn it on with `lamina iceberg enable {ns}.{name}`",
            )
        return table, head

    def load_table(self, ns: str, name: str) -> dict[str, Any]:
        table, head = self._view(ns, name)
        return {"metadata-location": table.io.full_uri(head.path), "metadata": head.metadata, "config": {}}

    def oauth_token(self, form: dict[str, str]) -> dict[str, Any]:
        if form.get("grant_type") != "client_credentials":
            raise RestError(400, "unsupported_grant_type", "only the client_credentials grant is supported")
        if self.token is None:
            return {
                "access_token": "none",
                "token_type": "bearer",
                "expires_in": 3600,
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            }
        if not hmac.compare_digest(form.get("client_secret", ""), self.token):
            raise RestError(401, "invalid_client", "the client secret is not this catalog's token")
        return {
            "access_token": self.token,
            "token_type": "bearer",
            "expires_in": 3600,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }


def _handler(rest: IcebergRestCatalog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "lamina-iceberg-rest"

        def log_message(self, *args: Any) -> None:  # quiet: the CLI prints what it serves
            pass

        def _send(self, status: int, body: Any = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _error(self, e: RestError) -> None:
            self._send(e.status, {"error": {"message": e.message, "type": e.kind, "code": e.status}})

        def _authorized(self) -> bool:
            if rest.token is None:
                return True
            given = self.headers.get("Authorization", "")
            return given.startswith("Bearer ") and hmac.compare_digest(given[len("Bearer ") :], rest.token)

        def _parts(self) -> tuple[list[str], dict[str, str]]:
            url = urllib.parse.urlsplit(self.path)
            raw = url.path.split("/")
            if len(raw) < 2 or raw[0] != "" or raw[1] != PREFIX.strip("/"):
                raise RestError(404, "NotFoundException", "no such route")
            parts = [urllib.parse.unquote(p) for p in raw[2:]]
            query = dict(urllib.parse.parse_qsl(url.query))
            return parts, query

        def _route(self, method: str) -> None:
            try:
                parts, query = self._parts()
                if method == "POST" and parts == ["oauth", "tokens"]:
                    length = min(int(self.headers.get("Content-Length", "0") or 0), 1 << 16)
                    form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode("utf-8", "replace")))
                    return self._send(200, rest.oauth_token(form))
                if not self._authorized():
                    raise RestError(
                        401, "NotAuthorizedException", "this catalog needs a bearer token (Authorization header)"
                    )
                if method not in ("GET", "HEAD"):
                    raise RestError(403, "ForbiddenException", READ_ONLY)
                if parts == ["config"]:
                    return self._send(200, rest.config())
                if parts == ["namespaces"]:
                    return self._send(200, rest.namespaces(query.get("parent")))
                if len(parts) == 2 and parts[0] == "namespaces":
                    body = rest.namespace(parts[1])
                    return self._send(204 if method == "HEAD" else 200, None if method == "HEAD" else body)
                if len(parts) == 3 and parts[0] == "namespaces" and parts[2] == "tables":
                    return self._send(200, rest.tables(parts[1]))
                if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "tables":
                    body = rest.load_table(parts[1], parts[3])
                    return self._send(204 if method == "HEAD" else 200, None if method == "HEAD" else body)
                raise RestError(404, "NotFoundException", "no such route")
            except RestError as e:
                self._error(e)
            except LaminaError as e:
                self._error(RestError(500, type(e).__name__, str(e)))

        def do_GET(self) -> None:
            self._route("GET")

        def do_HEAD(self) -> None:
            self._route("HEAD")

        def do_POST(self) -> None:
            self._route("POST")

        def do_PUT(self) -> None:
            self._route("PUT")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


class _RestServer(ThreadingHTTPServer):
    """The HTTP server of one IcebergRestCatalog, which it opened: ``server_close()`` closes
    the catalog too (a PostgreSQL catalog holds a connection)."""

    def __init__(self, address: tuple[str, int], rest: IcebergRestCatalog) -> None:
        super().__init__(address, _handler(rest))
        self.rest = rest

    def server_close(self) -> None:
        super().server_close()
        self.rest.catalog.close()


def serve(
    catalog_uri: str, host: str = "127.0.0.1", port: int = 8181, token: str | None = None
) -> tuple[ThreadingHTTPServer, str]:
    """Start the server in a background thread; returns it and its URL. InvalidArgument,
    nothing started, when bound beyond loopback without a token. ``shutdown()`` stops it,
    then ``server_close()`` closes its socket and its catalog."""
    if not is_loopback(host) and not token:
        raise InvalidArgument(
            f"serving the Iceberg REST catalog on {host!r} (not a loopback address) needs a token: pass --token or set "
            "LAMINA_ICEBERG_TOKEN; clients send it as a bearer token or exchange it as the client secret"
        )
    rest = IcebergRestCatalog(catalog_uri, token)
    try:
        server = _RestServer((host, port), rest)
    except OSError:
        rest.catalog.close()
        raise
    threading.Thread(target=server.serve_forever, daemon=True, name="lamina-iceberg-rest").start()
    shown = f"[{host}]" if ":" in host else host
    return server, f"http://{shown}:{server.server_address[1]}"
