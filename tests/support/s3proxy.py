"""An HTTP proxy in front of the test S3 server (moto or radosgw) that plays the network's
tricks on chosen requests, so the S3 client (obstore) sees them exactly as it would:

- ``hold(match)``: the next matching request waits in the proxy until the test releases
  it, then goes to the server: a PUT that lands as late as the test wants;
- ``lose_response(match)``: the next matching request reaches the server and is carried
  out, then the client's connection is closed without an answer, so the client retries a
  request that already landed (and its conditional PUT gets 412).

Requests are forwarded byte for byte (the Host header included, so signatures stay
valid). Event-driven: nothing here sleeps.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

Match = Callable[[str, str], bool]  # (method, path) -> bool

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class Hold:
    def __init__(self) -> None:
        self.arrived = threading.Event()  # the request reached the proxy and is waiting
        self.release = threading.Event()  # let it through
        self.done = threading.Event()  # the server has answered it


class S3Proxy:
    def __init__(self, upstream: str) -> None:
        u = urllib.parse.urlparse(upstream)
        self._upstream = (u.hostname, u.port)
        self._lock = threading.Lock()
        self._rules: list[tuple[str, Match, Hold]] = []
        self.log: list[tuple[str, str, int | None]] = []  # (method, path, status or None if lost)
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def storage_options(self, direct: dict[str, str]) -> dict[str, str]:
        return {**direct, "endpoint": self.endpoint}

    def hold(self, match: Match) -> Hold:
        h = Hold()
        with self._lock:
            self._rules.append(("hold", match, h))
        return h

    def lose_response(self, match: Match) -> Hold:
        h = Hold()
        h.release.set()
        with self._lock:
            self._rules.append(("lose", match, h))
        return h

    def _take(self, method: str, path: str) -> tuple[str, Hold] | None:
        with self._lock:
            for i, (kind, match, h) in enumerate(self._rules):
                if match(method, path):
                    del self._rules[i]
                    return kind, h
        return None

    def stop(self) -> None:
        with self._lock:
            for _, _, h in self._rules:
                h.release.set()
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: S3Proxy

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _forward(self) -> None:
        body = self._body()
        rule = self.owner._take(self.command, self.path)
        if rule is not None:
            rule[1].arrived.set()
            if not rule[1].release.wait(timeout=120):
                self.close_connection = True
                return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(*self.owner._upstream, timeout=60)
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if rule is not None:
            rule[1].done.set()
        if rule is not None and rule[0] == "lose":
            self.owner.log.append((self.command, self.path, None))
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.owner.log.append((self.command, self.path, resp.status))
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward
