"""What docs/storage.md says of ``s3://`` locations, checked on the requests obstore sends: a
local HTTP endpoint records each request (path, signed credential scope, headers) and
answers like an empty bucket. Storage option names, their ``s3.`` spellings and their
environment names; path-style requests unless the environment asks otherwise; every create
conditional (``If-None-Match: *``, the commit's put-if-absent); the schemes refused."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lamina.errors import AlreadyExists, InvalidUri, NotFound
from lamina.io import FileIO
from lamina.io.s3 import S3_OPTION_ENV

AWS_ENV = [name for names in S3_OPTION_ENV.values() for name in names] + ["AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_TOKEN"]


class Recorder:
    """An endpoint that records requests: GET and HEAD find nothing, a PUT is stored unless
    it is conditional and the key exists (then 412, as S3 answers)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.keys: set[str] = set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                if status == 200:
                    self.send_header("ETag", '"e"')
                self.end_headers()

            def do_GET(self) -> None:
                owner.requests.append({"method": self.command, "path": self.path, **self._signed()})
                self._answer(404)

            do_HEAD = do_GET

            def do_PUT(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append({"method": "PUT", "path": self.path, **self._signed()})
                conditional = self.headers.get("If-None-Match") == "*"
                if conditional and self.path in owner.keys:
                    self._answer(412)
                    return
                owner.keys.add(self.path)
                self._answer(200)

            def _signed(self) -> dict:
                auth = self.headers.get("Authorization", "")
                scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
                return {"key_id": scope[0] if scope else None, "region": scope[2] if scope else None,
                        "token": self.headers.get("x-amz-security-token"), "if_none_match": self.headers.get("If-None-Match")}

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def last(self) -> dict:
        return self.requests[-1]


@pytest.fixture(scope="module")
def recorder():
    r = Recorder()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def store(recorder, monkeypatch):
    """The endpoint, empty, in an environment without the AWS names these tests set."""
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    recorder.requests.clear()
    recorder.keys.clear()
    return recorder


def get(io: FileIO, path: str = "x") -> None:
    with pytest.raises(NotFound):
        io.get(path)


KEYS = {"access_key_id": "AKIDOPTION", "secret_access_key": "s"}


@pytest.mark.parametrize("prefix", ["", "s3."])
def test_each_option_reaches_the_signed_request(store, prefix):
    opts = {f"{prefix}endpoint": store.endpoint, f"{prefix}region": "eu-west-3", f"{prefix}session_token": "tok",
            **{f"{prefix}{k}": v for k, v in KEYS.items()}}
    get(FileIO("s3://bucket/lake/t", opts))  # an http:// endpoint allows http by itself
    seen = store.last()
    assert (seen["path"], seen["key_id"], seen["region"], seen["token"]) == ("/bucket/lake/t/x", "AKIDOPTION", "eu-west-3", "tok")


@pytest.mark.parametrize("endpoint", S3_OPTION_ENV["endpoint"])
@pytest.mark.parametrize("region", S3_OPTION_ENV["region"])
def test_the_environment_names_fill_what_the_options_leave_out(store, monkeypatch, endpoint, region):
    monkeypatch.setenv(endpoint, store.endpoint)
    monkeypatch.setenv(region, "ap-south-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "envtok")
    get(FileIO("s3://bucket/t"))
    assert (store.last()["key_id"], store.last()["region"], store.last()["token"]) == ("AKIDENV", "ap-south-1", "envtok")
    get(FileIO("s3://bucket/t", {"region": "us-west-2", **KEYS}))  # given options win
    assert (store.last()["key_id"], store.last()["region"]) == ("AKIDOPTION", "us-west-2")


def test_without_a_region_requests_are_signed_for_us_east_1(store):
    get(FileIO("s3a://bucket/t", {"endpoint": store.endpoint, **KEYS}))  # s3a:// is s3://
    assert (store.last()["path"], store.last()["region"]) == ("/bucket/t/x", "us-east-1")


def test_requests_are_path_style_unless_the_environment_asks_for_virtual_hosted(store, monkeypatch):
    opts = {"endpoint": store.endpoint, **KEYS}
    get(FileIO("s3://bucket/t", opts))
    assert store.last()["path"] == "/bucket/t/x"
    monkeypatch.setenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "true")
    get(FileIO("s3://bucket/t", opts))
    assert store.last()["path"] == "/t/x"  # the endpoint names the bucket


def test_every_create_is_conditional_and_the_check_of_the_guide_tells_an_existing_object(store):
    io = FileIO("s3://bucket/t", {"endpoint": store.endpoint, **KEYS})
    io.put_if_absent("_lamina/versions/slot.json", b"first")  # a commit point
    assert store.last()["if_none_match"] == "*"
    with pytest.raises(AlreadyExists):
        io.put_if_absent("_lamina/versions/slot.json", b"second")
    io.put_new("data/part.parquet", b"bytes")  # a data file, a manifest, ...
    assert store.last()["if_none_match"] == "*"
    io.put("_lamina/_latest_version.json", b"{}")  # the hint: overwritten, unconditionally
    assert store.last()["if_none_match"] is None


@pytest.mark.parametrize("uri", ["gs://bucket/t", "gcs://bucket/t", "az://container/t", "abfs://container@account/t"])
def test_gcs_and_azure_locations_are_refused(uri):
    with pytest.raises(InvalidUri, match="unsupported location"):
        FileIO(uri)
