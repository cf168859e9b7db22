"""FileIO: the only way Lamina touches storage, one implementation over obstore.

A FileIO is rooted at a table location; every path it takes is relative to
that root ("_lamina/versions/..."), so hostile absolute paths cannot escape it.
Store errors are mapped to Lamina's typed exceptions here and nowhere else.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterator, Mapping, TypeVar

import obstore
import obstore.exceptions as oe
from obstore.store import LocalStore, MemoryStore, S3Store

from lamina.errors import AlreadyExists, InvalidUri, NotFound, PermissionDenied, StorageError

T = TypeVar("T")

# memory://name stores live for the process and are shared by every FileIO that names them.
_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()

# Options recognised for s3:// (also read from the environment, AWS_* names).
S3_OPTION_ENV = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "allow_http": ("AWS_ALLOW_HTTP",),
}


@dataclass(frozen=True)
class ObjectInfo:
    path: str  # relative to the FileIO root
    size: int
    last_modified: datetime


def _translate(e: Exception, what: str) -> Exception:
    if isinstance(e, oe.AlreadyExistsError | oe.PreconditionError):
        return AlreadyExists(f"{what}: object already exists")
    if isinstance(e, oe.NotFoundError | FileNotFoundError):
        return NotFound(f"{what}: not found")
    if isinstance(e, oe.PermissionDeniedError | oe.UnauthenticatedError | PermissionError):
        return PermissionDenied(f"{what}: permission denied ({e}); check the store credentials")
    return StorageError(f"{what}: {type(e).__name__}: {e}")


def _as_bytes(data: Any) -> bytes:
    """obstore takes bytes, not Arrow buffers or memoryviews."""
    return data if isinstance(data, bytes) else bytes(data)


def _is_true(v: Any) -> bool:
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def _check_relative(path: str) -> str:
    if path.startswith("/") or "\\" in path or any(p in ("..", ".") for p in path.split("/")):
        raise InvalidUri(f"path {path!r} must be relative to the table root without '.', '..' or '\\'")
    return path


class FileIO:
    """Storage rooted at one table location (``file://``, plain path, ``memory://``, ``s3://``)."""

    def __init__(self, uri: str, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        self.options = options  # as given: what opens this location again (e.g. in a Spark worker)
        self.uri = uri.rstrip("/") if uri not in ("/",) else uri
        parsed = urllib.parse.urlparse(uri)
        scheme = parsed.scheme.lower()
        self.scheme = scheme or "file"
        self._local_root: str | None = None
        self._prefix = ""  # key prefix inside the store (memory:// shares one store per name)
        if scheme in ("", "file"):
            root = parsed.path if scheme == "file" else uri
            if scheme == "file" and parsed.netloc:
                raise InvalidUri(f"{uri!r}: file URIs take an absolute path, file:///path")
            root = os.path.abspath(os.path.expanduser(root))
            self._local_root = root
            self.uri = root
            self._store: Any = None  # created lazily: LocalStore needs the root to exist
            self.lists_in_order = False
        elif scheme == "memory":
            name = (parsed.netloc + parsed.path).strip("/")
            if not name:
                raise InvalidUri(f"{uri!r}: memory URIs need a name, memory://name")
            bucket, _, prefix = name.partition("/")
            with _MEMORY_LOCK:
                store = _MEMORY_STORES.setdefault(bucket, MemoryStore())
            self._store = store
            self._prefix = prefix.strip("/")
            # MemoryStore lists from a BTreeMap, but we do not rely on it.
            self.lists_in_order = False
        elif scheme in ("s3", "s3a"):
            bucket = parsed.netloc
            if not bucket:
                raise InvalidUri(f"{uri!r}: s3 URIs need a bucket, s3://bucket/path")
            cfg: dict[str, Any] = {}
            for key, envs in S3_OPTION_ENV.items():
                val = options.get(key)
                if val is None:
                    val = options.get(f"s3.{key}")
                if val is None:
                    val = next((os.environ[e] for e in envs if e in os.environ), None)
                if val is not None:
                    cfg[key] = val
            allow_http = _is_true(cfg.pop("allow_http", "false"))
            if "session_token" in cfg:
                cfg["token"] = cfg.pop("session_token")
            endpoint = cfg.get("endpoint", "")
            if endpoint.startswith("http://"):
                allow_http = True
            self._store = S3Store(
                bucket,
                prefix=parsed.path.strip("/") or None,
                config=cfg,
                client_options={"allow_http": allow_http, "timeout": options.get("timeout", "30s")},
                retry_config={"max_retries": int(options.get("max_retries", 3)), "retry_timeout": timedelta(seconds=30)},
            )
            self.lists_in_order = True  # S3 ListObjectsV2 is lexicographic
        else:
            raise InvalidUri(f"unsupported location {uri!r}: use a local path, file://, memory:// or s3://")

    # -- plumbing -----------------------------------------------------------------

    @property
    def store(self) -> Any:
        if self._store is None:
            os.makedirs(self._local_root, exist_ok=True)  # type: ignore[arg-type]
            self._store = LocalStore(self._local_root, mkdir=True)
        return self._store

    def _key(self, path: str) -> str:
        _check_relative(path)
        return f"{self._prefix}/{path}" if self._prefix else path

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (oe.BaseError, OSError) as e:
            raise _translate(e, what) from e

    def full_uri(self, path: str) -> str:
        """A URI a user or another engine can open for ``path``."""
        if self._local_root is not None:
            return os.path.join(self._local_root, path)
        return f"{self.uri}/{path}"

    @property
    def is_local(self) -> bool:
        return self._local_root is not None

    def local_path(self, path: str) -> str | None:
        """The local filesystem path of ``path`` when the table is on local disk, else None."""
        return os.path.join(self._local_root, _check_relative(path)) if self._local_root is not None else None

    # -- operations ----------------------------------------------------------------

    def get(self, path: str) -> bytes:
        if self._local_root is not None:
            # A plain read is ~5x cheaper than going through the object-store runtime for
            # the small metadata files on the hot path (open, hint, version manifests).
            try:
                with open(self.local_path(path), "rb") as f:  # type: ignore[arg-type]
                    return f.read()
            except (FileNotFoundError, NotADirectoryError) as e:
                raise NotFound(f"get {path}: not found") from e
            except IsADirectoryError as e:
                raise NotFound(f"get {path}: is a directory") from e
            except OSError as e:
                raise _translate(e, f"get {path}") from e
        key = self._key(path)
        return self._call(f"get {path}", lambda: obstore.get(self.store, key).bytes().to_bytes())

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (a deletion vector inside a DV file)."""
        if self._local_root is not None:
            try:
                with open(self.local_path(path), "rb") as f:  # type: ignore[arg-type]
                    f.seek(offset)
                    return f.read(length)
            except (FileNotFoundError, NotADirectoryError) as e:
                raise NotFound(f"get {path}: not found") from e
        key = self._key(path)
        return self._call(
            f"get {path}[{offset}:{offset + length}]",
            lambda: bytes(obstore.get_range(self.store, key, start=offset, length=length)),
        )

    def exists(self, path: str) -> bool:
        if self._local_root is not None:
            return os.path.isfile(self.local_path(path))  # type: ignore[arg-type]
        try:
            self._call(f"head {path}", lambda: obstore.head(self.store, self._key(path)))
            return True
        except NotFound:
            return False

    def put(self, path: str, data: Any) -> None:
        data = _as_bytes(data)
        key = self._key(path)
        self._call(f"put {path}", lambda: obstore.put(self.store, key, data, use_multipart=len(data) > 64 * 2**20))

    def put_data(self, path: str, data: Any) -> None:
        """Write a data file. On local disk a plain write into a fresh, uniquely named file
        (no overwrite to guard against, so the object-store staging is not needed)."""
        local = self.local_path(path)
        if local is None:
            self.put(path, data)
            return
        try:
            with open(local, "wb") as f:
                f.write(data)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "wb") as f:
                f.write(data)
        except OSError as e:
            raise _translate(e, f"put {path}") from e

    def put_if_absent(self, path: str, data: Any) -> None:
        """Atomically create ``path``; raise AlreadyExists if anything is there."""
        data = _as_bytes(data)
        key = self._key(path)
        self._call(f"put-if-absent {path}", lambda: obstore.put(self.store, key, data, mode="create"))

    def delete(self, path: str) -> None:
        key = self._key(path)
        try:
            self._call(f"delete {path}", lambda: obstore.delete(self.store, key))
        except NotFound:
            pass

    def delete_many(self, paths: list[str]) -> None:
        """Delete every path; ones already gone are fine (deletes are idempotent)."""
        if self._local_root is not None:
            for p in paths:
                try:
                    os.unlink(self.local_path(p))  # type: ignore[arg-type]
                except FileNotFoundError:
                    pass
            return
        keys = [self._key(p) for p in paths]
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            try:
                self._call(f"delete {len(chunk)} objects", lambda: obstore.delete(self.store, chunk))
            except NotFound:
                for k in chunk:  # a batch stops at the first missing key on some stores
                    try:
                        self._call(f"delete {k}", lambda: obstore.delete(self.store, k))
                    except NotFound:
                        pass

    def size(self, path: str) -> int:
        """Size in bytes of one object (NotFound if absent)."""
        local = self.local_path(path)
        if local is not None:
            try:
                return os.path.getsize(local)
            except FileNotFoundError:
                raise NotFound(f"{path}: not found") from None
        key = self._key(path)
        return int(self._call(f"head {path}", lambda: obstore.head(self.store, key))["size"])

    def _strip(self, key: str) -> str:
        return key[len(self._prefix) + 1 :] if self._prefix else key

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under ``prefix`` (a directory, no trailing slash), sorted by path."""
        if self._local_root is not None and not os.path.isdir(os.path.join(self._local_root, prefix)):
            return []
        key = self._key(prefix)

        def run() -> list[ObjectInfo]:
            out = []
            for chunk in obstore.list(self.store, key, chunk_size=1000):
                out.extend(ObjectInfo(self._strip(m["path"]), m["size"], m["last_modified"]) for m in chunk)
            return out

        items = self._call(f"list {prefix}", run)
        items.sort(key=lambda o: o.path)
        return items

    def list_names(self, prefix: str) -> list[str]:
        """Sorted file names directly under ``prefix``; on local disk a plain directory read."""
        if self._local_root is not None:
            try:
                return sorted(os.listdir(os.path.join(self._local_root, prefix)))
            except FileNotFoundError:
                return []
        plen = len(prefix) + 1
        return [o.path[plen:] for o in self.list(prefix)]

    def list_first_page(self, prefix: str, offset: str | None = None) -> list[str]:
        """The first page (up to 1000) of names under ``prefix`` after ``offset``, in order.

        One LIST request on stores that list lexicographically (S3). Callers must
        only use it when ``lists_in_order`` is true.
        """
        key = self._key(prefix)
        off = self._key(f"{prefix}/{offset}") if offset else None
        plen = len(prefix) + 1

        def run() -> list[str]:
            stream = obstore.list(self.store, key, offset=off, chunk_size=1000)
            for chunk in stream:
                return sorted(self._strip(m["path"])[plen:] for m in chunk)
            return []

        return self._call(f"list {prefix}", run)

    def walk(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` (recursive, unordered)."""
        key = self._key(prefix) if prefix else (self._prefix or None)
        if self._local_root is not None and not os.path.isdir(self._local_root):
            return iter(())
        try:
            for chunk in obstore.list(self.store, key, chunk_size=1000):
                for m in chunk:
                    yield ObjectInfo(self._strip(m["path"]), m["size"], m["last_modified"])
        except (oe.BaseError, OSError) as e:
            raise _translate(e, f"list {prefix}") from e
