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
from pathlib import Path
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


class RadosgwServer(S3Server):
    """A real S3 server: single-node Ceph radosgw started by the shared script (opt-in:
    LAMINA_S3_BACKEND=radosgw; needs the Debian packages radosgw ceph-mon ceph-osd).

    The script path defaults to ../shared/scripts/start-radosgw.sh next to the
    checkout; LAMINA_RADOSGW_SCRIPT overrides it.
    """

    KEY, SECRET = "test", "testsecret"

    def __init__(self) -> None:  # noqa: D107 - no moto here
        import os
        import subprocess

        here = os.path.dirname(os.path.abspath(__file__))
        script = os.environ.get(
            "LAMINA_RADOSGW_SCRIPT", os.path.join(here, "..", "..", "..", "shared", "scripts", "start-radosgw.sh")
        )
        if not os.path.exists(script):
            raise RuntimeError(f"LAMINA_S3_BACKEND=radosgw but {script} does not exist; set LAMINA_RADOSGW_SCRIPT")
        port = _free_port()
        self._dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"lamina-ceph-{port}")
        env = dict(os.environ, RGW_PORT=str(port), CEPH_DIR=self._dir)
        subprocess.run(["bash", script], check=True, env=env, stdout=subprocess.DEVNULL, timeout=300)
        self.endpoint = f"http://127.0.0.1:{port}"
        self._wait_until_up("127.0.0.1", port, timeout=60.0)

    @property
    def storage_options(self) -> dict[str, str]:
        return {**super().storage_options, "access_key_id": self.KEY, "secret_access_key": self.SECRET}

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.KEY,
            aws_secret_access_key=self.SECRET, region_name=REGION,
        )

    def stop(self) -> None:
        import glob
        import os
        import signal

        for pidfile in glob.glob(os.path.join(self._dir, "run", "*.pid")):
            try:
                os.kill(int(Path(pidfile).read_text().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3() -> S3Server:
    """moto by default; a real radosgw when LAMINA_S3_BACKEND=radosgw."""
    import os

    backend = os.environ.get("LAMINA_S3_BACKEND", "moto")
    if backend == "radosgw":
        return RadosgwServer()
    if backend != "moto":
        raise RuntimeError(f"LAMINA_S3_BACKEND must be moto or radosgw, not {backend!r}")
    return S3Server()
