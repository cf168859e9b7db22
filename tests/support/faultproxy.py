"""A TCP proxy that makes a real HTTP connection unreliable: for the S3 fault tests.

Between a client (obstore) and a server (moto) it forwards bytes both ways, and,
driven by a seeded random generator:

- ``reset_rate``: resets the connection at the start of a request, before any of it
  reaches the server (the request is not carried out: a connection reset);
- ``lost_rate``: resets the connection when the server starts answering a request,
  dropping the answer (the server carried the request out: a lost response). The
  client's retry of a conditional PUT then finds its own object (S3 answers 412).

A request starts with the client's first bytes after the previous answer began, so
a request or an answer split over several reads is decided once. Every decision is
counted in ``stats``.
"""

from __future__ import annotations

import random
import selectors
import socket
import struct
import threading
from collections import Counter


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a dropped connection looks to the peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class FaultProxy:
    def __init__(self, target: tuple[str, int], *, seed: int, reset_rate: float, lost_rate: float) -> None:
        self.target = target
        self.reset_rate, self.lost_rate = reset_rate, lost_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()
        self.enabled = True
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def _fault(self, rate: float) -> bool:
        if not self.enabled:
            return False
        with self._lock:
            return self._rng.random() < rate

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._pump, args=(client,), daemon=True).start()

    def _pump(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=10)
        except OSError:
            _reset(client)
            return
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, server)
        sel.register(server, selectors.EVENT_READ, client)
        in_request = False  # the client has sent a request the server has not begun to answer
        try:
            while not self._closed.is_set():
                for key, _ in sel.select(timeout=1.0):
                    src, dst = key.fileobj, key.data
                    data = src.recv(65536)
                    if not data:
                        return
                    if src is client and not in_request:
                        if self._fault(self.reset_rate):
                            self.stats["reset"] += 1
                            _reset(client)
                            return
                        in_request = True
                        self.stats["requests"] += 1
                    elif src is server and in_request:
                        in_request = False
                        if self._fault(self.lost_rate):
                            self.stats["lost"] += 1
                            _reset(client)
                            return
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            sel.close()
            client.close()  # a no-op after _reset
            server.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
