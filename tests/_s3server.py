"""A local S3 (moto server) for the S3 tests, reachable from subprocesses over HTTP.

moto 5.2.5 checks ``If-None-Match: *`` and stores the object in two separate
steps (moto/s3/responses.py ``put_object``), and its server is threaded, so two
concurrent conditional PUTs of one key could both succeed there, which real S3
never allows. Lamina's commits rely on that guarantee, so mutating requests are
serialized here: the emulator then has S3's atomic put-if-absent, nothing more.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from moto.server import ThreadedMotoServer

REGION = "us-east-1"
KEY = "test"
SECRET = "test"


class _SerializeWrites:
    """WSGI middleware: one mutating request (PUT/POST/DELETE) at a time."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE"):
            with self.lock:
                # Materialise the body inside the lock: the write happens while producing it.
                it = self.app(environ, start_response)
                try:
                    return list(it)
                finally:
                    if hasattr(it, "close"):
                        it.close()
        return self.app(environ, start_response)


class AtomicMotoServer(ThreadedMotoServer):
    def _server_entry(self) -> None:
        from werkzeug.serving import make_server

        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )

        app = _SerializeWrites(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


class S3Server:
    def __init__(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
        # port=0: the OS picks a free port; get_host_and_port() reports it.
        self._server = AtomicMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self._wait_until_up(host, port)

    @staticmethod
    def _wait_until_up(host: str, port: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((host, port), timeout=1.0):
                    return
            except OSError:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"moto server on {host}:{port} did not come up in {timeout}s") from None
                time.sleep(0.05)

    @property
    def storage_options(self) -> dict[str, str]:
        return {
            "endpoint": self.endpoint,
            "access_key_id": KEY,
            "secret_access_key": SECRET,
            "region": REGION,
            "allow_http": "true",
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def stop(self) -> None:
        self._server.stop()
