"""FileIO: the only way Lamina touches storage, one implementation over obstore.

A FileIO is rooted at a table location; every path it takes is relative to
that root ("_lamina/versions/..."), so hostile absolute paths cannot escape it.
Store errors are mapped to Lamina's typed exceptions here, through
``lamina.io.store_errors``, and nowhere else. The rule for a path inside a table is
``lamina.io.paths``'s, the S3 settings of a table's options ``lamina.io.s3``'s.
"""

from __future__ import annotations

import builtins
import errno
import functools
import os
import stat
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import numpy as np
import obstore
import obstore.exceptions as oe
import pyarrow as pa
import pyarrow.compute as pc
from obstore.store import LocalStore, MemoryStore, S3Store

from lamina.errors import AlreadyExists, InvalidUri, NotFound, PermissionDenied, StorageError
from lamina.io.paths import PATH_RULES, URI_PATTERN, VALID_PATH_EXAMPLE, check_relative, is_uri
from lamina.io.s3 import S3_OPTION_ENV, s3_settings
from lamina.io.store_errors import translate
from lamina.timeutil import sleep_jitter

# PATH_RULES, VALID_PATH_EXAMPLE and S3_OPTION_ENV are named here too: lamina.operations.append and
# lamina.spark import them from this module (their homes are lamina.io.paths and lamina.io.s3).
__all__ = [
    "PATH_RULES",
    "S3_OPTION_ENV",
    "URI_PATTERN",
    "VALID_PATH_EXAMPLE",
    "FileIO",
    "ObjectInfo",
    "check_local_directory",
    "is_uri",
    "make_local_directory",
    "s3_settings",
    "staging_suffix",
]

T = TypeVar("T")

# memory://name stores live for the process and are shared by every FileIO that names them.
_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()


@dataclass(frozen=True)
class ObjectInfo:
    path: str  # relative to the FileIO root
    size: int
    last_modified: datetime


def _store_input(data: Any) -> Any:
    """What obstore takes: bytes as they are, and any other buffer (an Arrow buffer of an
    encoded Parquet file) as a zero-copy uint8 array (obstore refuses Arrow buffers and
    memoryviews)."""
    return data if isinstance(data, bytes) else np.frombuffer(data, dtype=np.uint8)


def _is_true(v: Any) -> bool:
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def check_local_directory(
    path: str,
    what: str = "table location",
    expected: str = "a table location is the directory holding _lamina/ (for a file of a table, pass the table's directory)",
    error: type[InvalidUri] = InvalidUri,
) -> None:
    """Refuse a local directory location that can never be one: a file, a path inside a
    file, a symbolic link loop. A path that does not exist yet is fine (created later)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise error(
            f"{what} {path!r} is inside a file (one of its parent directories is a file); {expected}: pass another path"
        ) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise error(
                f"{what} {path!r} cannot be resolved: its symbolic links form a loop (ELOOP); "
                "point the links at a directory or pass the real path"
            ) from None
        raise translate(e, f"open {what} {path}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {path!r} is a file, not a directory: {expected}")


def make_local_directory(path: str, what: str) -> None:
    """``os.makedirs(path, exist_ok=True)`` with the OS error translated (read-only, no space, ...)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise translate(e, f"create {what} {path}") from e


# put_new: attempts, the first backoff (doubling, full jitter), and objects too large
# for one conditional PUT.
PUT_NEW_ATTEMPTS = 6
PUT_NEW_BACKOFF_S = 0.01
_MULTIPART_BYTES = 64 * 2**20
# put_in_place: the most padding written to keep a file's length (beyond it the file is replaced).
_IN_PLACE_MAX_PAD = 4096


_kept_lock = threading.Lock()  # (scopes start and end rarely: one lock for every FileIO)


class _KeptObjects:
    """The objects ``FileIO.keeping_gets`` keeps: by path, up to a number of bytes."""

    def __init__(self, prefix: str, max_bytes: int) -> None:
        self.prefix, self.max_bytes, self.users = prefix, max_bytes, 0
        self._bytes = 0
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def get(self, path: str, fetch: Callable[[], bytes]) -> bytes:
        with self._lock:
            hit = self._objects.get(path)
        if hit is not None:
            return hit
        data = fetch()
        with self._lock:
            if path not in self._objects and self._bytes + len(data) <= self.max_bytes:
                self._objects[path] = data
                self._bytes += len(data)
        return data


def staging_suffix() -> str:
    """The unique part of a local put's staging file name (``<name>#<digits>``): from the
    operating system's randomness, so two processes that seeded Python's ``random`` alike
    never pick the same staging file for the same name."""
    return str(int.from_bytes(os.urandom(8), "big"))


class FileIO:
    """Storage rooted at one table location (``file://``, plain path, ``memory://``, ``s3://``)."""

    def __init__(self, uri: str, options: Mapping[str, Any] | None = None) -> None:
        if not isinstance(uri, str) or not uri:
            raise InvalidUri(f"a table location must be a non-empty string, not {uri!r}")
        if "\x00" in uri:
            raise InvalidUri(f"table location {uri!r} contains a NUL character ('\\x00'); remove it")
        options = dict(options or {})
        self.options = options  # as given: what opens this location again (e.g. in a Spark worker)
        self.uri = uri.rstrip("/") if uri not in ("/",) else uri
        parsed = urllib.parse.urlparse(uri)
        scheme = parsed.scheme.lower()
        self.scheme = scheme or "file"
        self._local_root: str | None = None
        self._prefix = ""  # key prefix inside the store (memory:// shares one store per name)
        self._kept: _KeptObjects | None = None  # see keeping_gets
        self._stores: dict[str, FileIO] = {}  # the store roots external files are read from
        if scheme in ("", "file"):
            root = parsed.path if scheme == "file" else uri
            if scheme == "file" and parsed.netloc:
                raise InvalidUri(f"{uri!r}: file URIs take an absolute path, file:///path")
            root = os.path.abspath(os.path.expanduser(root))
            # A root that is a file, inside a file or a link loop is refused (check_local_directory)
            # when a call first trips over it, not with a stat on every open.
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
            cfg: dict[str, Any] = s3_settings(options)
            allow_http = _is_true(cfg.pop("allow_http", "false"))
            if "session_token" in cfg:
                cfg["token"] = cfg.pop("session_token")
            endpoint = cfg.get("endpoint", "")
            if endpoint.startswith("http://"):
                allow_http = True
            self._store = S3Store(
                bucket,
                prefix=parsed.path.strip("/") or None,
                config=cast(Any, cfg),  # obstore's S3Config keys, from the table's storage options
                client_options={"allow_http": allow_http, "timeout": options.get("timeout", "30s")},
                retry_config={
                    "max_retries": int(options.get("max_retries", 3)),
                    "retry_timeout": timedelta(seconds=30),
                },
            )
            self.lists_in_order = True  # S3 ListObjectsV2 is lexicographic
        else:
            raise InvalidUri(f"unsupported location {uri!r}: use a local path, file://, memory:// or s3://")

    # -- plumbing -----------------------------------------------------------------

    @property
    def store(self) -> Any:
        if self._store is None:
            self._check_root()
            make_local_directory(self._local_root, "table directory")  # type: ignore[arg-type]
            self._store = LocalStore(self._local_root, mkdir=True)
        return self._store

    def _key(self, path: str) -> str:
        check_relative(path)
        return f"{self._prefix}/{path}" if self._prefix else path

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (oe.BaseError, OSError) as e:
            raise translate(e, what) from e

    def full_uri(self, path: str) -> str:
        """A URI a user or another engine can open for ``path``."""
        if is_uri(path):
            io, rel = self.external(path)
            return io.full_uri(rel)
        if self._local_root is not None:
            return os.path.join(self._local_root, path)
        return f"{self.uri}/{path}"

    @property
    def is_local(self) -> bool:
        return self._local_root is not None

    def local_path(self, path: str) -> str | None:
        """The local filesystem path of ``path`` when the table is on local disk, else None."""
        if is_uri(path) and self._local_root is not None:
            io, rel = self.external(path)
            return io.local_path(rel)
        return os.path.join(self._local_root, check_relative(path)) if self._local_root is not None else None

    def _check_root(self) -> None:
        """InvalidUri if the local root is a file, inside a file or a symbolic link loop."""
        if self._local_root is not None:
            check_local_directory(self._local_root)

    # -- operations ----------------------------------------------------------------

    def get(self, path: str) -> bytes:
        if is_uri(path):
            io, rel = self.external(path)
            return io.get(rel)
        if self._local_root is not None:
            # A plain read is much cheaper than going through the object-store runtime for
            # the small metadata files on the hot path (open, hint, version manifests).
            try:
                with open(self.local_path(path), "rb") as f:  # type: ignore[arg-type]
                    return f.read()
            except FileNotFoundError as e:
                raise NotFound(f"get {path}: not found") from e
            except NotADirectoryError as e:
                self._check_root()
                raise NotFound(f"get {path}: not found") from e
            except IsADirectoryError as e:
                raise NotFound(f"get {path}: is a directory") from e
            except OSError as e:
                self._check_root()
                raise translate(e, f"get {path}") from e
        kept = self._kept
        if kept is not None and path.startswith(kept.prefix):
            return kept.get(path, lambda: self._get_remote(path))
        return self._get_remote(path)

    def _get_remote(self, path: str) -> bytes:
        key = self._key(path)
        return self._call(f"get {path}", lambda: obstore.get(self.store, key).bytes().to_bytes())

    def __getstate__(self) -> dict[str, Any]:
        # (a copy sent elsewhere, e.g. to a Spark worker, starts with nothing kept)
        return {**self.__dict__, "_kept": None, "_stores": {}}

    def external(self, uri: str) -> tuple[FileIO, str]:
        """The FileIO of the store root an absolute location lies in, and its path there:
        for reading a file outside the table's root, on the table's kind of store and with
        its options (``file://`` for a local table, another bucket of the same S3 endpoint).
        Only reads go through it: nothing writes or deletes a file outside the table."""
        scheme, _, rest = uri.partition("://")
        scheme = scheme.lower()
        same = {"file": ("file",), "s3": ("s3", "s3a"), "s3a": ("s3", "s3a"), "memory": ("memory",)}[self.scheme]
        if scheme not in same:
            raise InvalidUri(
                f"{uri!r} is not on the table's store ({self.scheme}): a table reads files of its own store"
            )
        if scheme == "file":
            if not rest.startswith("/"):
                raise InvalidUri(f"{uri!r}: file URIs take an absolute path, file:///path")
            root, path = "/", rest.lstrip("/")
        else:
            bucket, _, path = rest.partition("/")
            root = f"{scheme}://{bucket}"
        io = self._stores.get(root)
        if io is None:
            io = self._stores.setdefault(root, FileIO(root, self.options))
        check_relative(path)
        return io, path

    @contextmanager
    def keeping_gets(self, prefix: str, max_bytes: int = 256 << 20) -> Iterator[None]:
        """Within: the objects under ``prefix`` got from an object store are kept (up to
        ``max_bytes`` in all) and served again without a request. Only for objects that never
        change once written (data files: each has a name of its own), read more than once by
        one operation (the change feed reads a file's row ids, then its columns). Local disk
        keeps nothing: its reads are cheap and the page cache keeps them. Nested or concurrent
        scopes share one store of kept objects, emptied when the last one ends."""
        if self.is_local:
            yield
            return
        with _kept_lock:
            if self._kept is None:
                self._kept = _KeptObjects(prefix.rstrip("/") + "/", max_bytes)
            self._kept.users += 1
        try:
            yield
        finally:
            with _kept_lock:
                assert self._kept is not None
                self._kept.users -= 1
                if not self._kept.users:
                    self._kept = None

    def get_optional(self, path: str) -> bytes | None:
        """The object's bytes, or None if there is none. For lookups that usually miss (a
        freed-slot record): on local disk one stat answers, with no exception raised."""
        if self._local_root is not None and not os.path.isfile(self.local_path(path)):  # type: ignore[arg-type]
            return None
        try:
            return self.get(path)
        except NotFound:
            return None

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (a deletion vector inside a DV file)."""
        if is_uri(path):
            io, rel = self.external(path)
            return io.get_range(rel, offset, length)
        what = f"get {path}[{offset}:{offset + length}]"
        if self._local_root is not None:
            try:
                with open(self.local_path(path), "rb") as f:  # type: ignore[arg-type]
                    f.seek(offset)
                    return f.read(length)
            except (FileNotFoundError, NotADirectoryError) as e:
                raise NotFound(f"get {path}: not found") from e
            except OSError as e:
                raise translate(e, what) from e
        key = self._key(path)
        return self._call(what, lambda: bytes(obstore.get_range(self.store, key, start=offset, length=length)))

    def exists(self, path: str) -> bool:
        if is_uri(path):
            io, rel = self.external(path)
            return io.exists(rel)
        if self._local_root is not None:
            return os.path.isfile(self.local_path(path))  # type: ignore[arg-type]
        try:
            self._call(f"head {path}", lambda: obstore.head(self.store, self._key(path)))
            return True
        except NotFound:
            return False

    def put(self, path: str, data: Any) -> None:
        """Write ``path`` whatever is there (atomically: readers see the old or the new bytes)."""
        if self._local_root is not None:
            self._local_put(path, data, create=False)
            return
        data = _store_input(data)
        key = self._key(path)
        self._call(
            f"put {path}", lambda: obstore.put(self.store, key, data, use_multipart=len(data) > _MULTIPART_BYTES)
        )

    def put_in_place(self, path: str, data: bytes, fill: bytes = b" ") -> None:
        """Write ``data`` at ``path`` for readers that check what they read (the version hint).

        On local disk the existing file's bytes are overwritten where they are: one write at
        offset 0 of ``data`` padded with ``fill`` to at least the old length, so the file then
        holds one writer's bytes and no tail of older ones. Writes to a file are serialized, so
        the last writer's bytes win whole; a read racing the write may see a mix of old and new
        bytes, which is why only self-checking content belongs here. Why not ``put``: the
        replace it does creates a new file (an inode; on ext4 its allocation scans past every
        inode freed in the last minute, slow on a busy disk) and frees
        the old one (a minute of such scans for every later create, and the rename flushes the
        new file's data). A missing file, or one much larger than ``data``, is replaced by
        ``put``. On object stores this is ``put`` (atomic)."""
        if self._local_root is None:
            self.put(path, data)
            return
        local = self.local_path(path)
        assert local is not None
        try:
            fd = os.open(local, os.O_WRONLY)
        except (FileNotFoundError, NotADirectoryError):
            self.put(path, data)  # the first one (or a deleted one): created atomically
            return
        except OSError as e:
            raise translate(e, f"put {path}") from e
        try:
            old = os.fstat(fd).st_size
            if old > len(data) + _IN_PLACE_MAX_PAD:
                os.close(fd)
                fd = -1
                self.put(path, data)  # padding would cost more than a new file: shrink it
                return
            if old > len(data):
                data += fill * ((old - len(data) + len(fill) - 1) // len(fill))
            view = memoryview(data)
            offset = 0
            while offset < len(view):
                offset += os.pwrite(fd, view[offset:], offset)
        except OSError as e:
            raise translate(e, f"put {path}") from e
        finally:
            if fd >= 0:
                os.close(fd)

    def put_if_absent(self, path: str, data: Any) -> None:
        """Atomically create ``path``; raise AlreadyExists if anything is there (a commit point:
        the caller resolves an unknown outcome itself; see ``put_new`` for objects only one
        writer ever names)."""
        if self._local_root is not None:
            self._local_put(path, data, create=True)
            return
        data = _store_input(data)
        key = self._key(path)
        self._call(f"put-if-absent {path}", lambda: obstore.put(self.store, key, data, mode="create"))

    def _local_put(self, path: str, data: Any, create: bool) -> None:
        """A put on local disk with plain system calls, as obstore's LocalStore does it: the bytes
        go to a staging file next to ``path`` (named ``<name>#<digits>``, which obstore's
        listings skip), then are linked into place (``create``: fails if the name is taken, so a
        conditional create is atomic and never exposes a partly written file) or renamed over
        it. The same steps without a round trip through the store's runtime threads: about a
        third of the time of a small commit's writes on a busy machine."""
        final = self.local_path(path)
        assert final is not None
        name = f"{final}#{staging_suffix()}"
        staging: str | None = None  # set once this put has created it: only then is it this put's to remove
        what = f"{'put-if-absent' if create else 'put'} {path}"
        try:
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except (FileNotFoundError, NotADirectoryError):
                self._check_root()
                os.makedirs(os.path.dirname(final), exist_ok=True)
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            staging = name
            try:
                view = memoryview(data).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            if create:
                os.link(staging, final)  # FileExistsError if anything is there
            else:
                os.replace(staging, final)
                staging = None
        except OSError as e:
            raise translate(e, what) from e
        finally:
            if staging is not None:
                try:
                    os.unlink(staging)
                except OSError:
                    pass  # never created, or left for orphan cleanup (it is under the table root)

    def put_new(self, path: str, data: Any) -> None:
        """Create an object under a name only this write uses (a data file, a manifest, a
        deletion-vector file, a staged version), retrying transient failures. Also for names
        others may race for when identical bytes can only be this writer's own retry (version
        0 and tags carry a fresh uuid or timestamp; a freed-slot record differs in its time):
        the caller turns AlreadyExists into its own error.

        A put whose answer was lost may have landed, and so may the first try of a request
        the store client retried on its own, whose retry then finds the object (S3: 412).
        So an object already there is success if it holds exactly ``data``, and
        AlreadyExists if it holds anything else. Permission, read-only and missing-location
        errors are not retried; other storage errors are, ``PUT_NEW_ATTEMPTS`` times in all.
        """
        if self._local_root is None:  # (local writes take any buffer as it is)
            data = _store_input(data)
        last: StorageError | None = None
        for attempt in range(PUT_NEW_ATTEMPTS):
            if attempt:
                sleep_jitter(PUT_NEW_BACKOFF_S * 2**attempt)  # caps 20 ms .. 320 ms
            try:
                self._create_once(path, data)
                return
            except AlreadyExists:
                try:
                    if self._holds(path, data):
                        return
                except NotFound as e:  # it vanished between the two calls: create it again
                    last = e
                    continue
                except PermissionDenied:
                    raise
                except StorageError as e:
                    last = e
                    continue
                raise AlreadyExists(
                    f"put {path}: another object with different content is already there, under a name "
                    "that should be unique to this write; nothing refers to this write's object yet, so "
                    "retry the operation (it writes under new names) and run `lamina fsck` on the table"
                ) from None
            except (NotFound, PermissionDenied):
                raise
            except StorageError as e:
                last = e
        raise StorageError(
            f"put {path} failed {PUT_NEW_ATTEMPTS} times, the last with: {last}. Nothing refers to it yet: "
            "retry the operation once the store is healthy"
        ) from last

    def _create_once(self, path: str, data: Any) -> None:
        """One attempt of ``put_new``: AlreadyExists if anything is at ``path``. An atomic
        create on every store (on local disk a staged file linked into place), so no
        reader or retry ever meets a partly written object."""
        if self._local_root is not None:
            self._local_put(path, data, create=True)
            return
        key = self._key(path)
        if len(data) > _MULTIPART_BYTES:
            # The store API has no conditional multipart upload. The name is this write's
            # alone, so a plain put (a retry writes the same bytes) is as safe.
            self._call(f"put {path}", lambda: obstore.put(self.store, key, data, use_multipart=True))
        else:
            self._call(f"put {path}", lambda: obstore.put(self.store, key, data, mode="create"))

    def _holds(self, path: str, data: Any) -> bool:
        """Whether the object at ``path`` is exactly ``data`` (its size first: no download
        of an object that cannot match)."""
        return self.size(path) == len(data) and self.get(path) == bytes(data)

    def delete(self, path: str) -> None:
        if self._local_root is not None:
            self.delete_many([path])
            return
        key = self._key(path)
        try:
            self._call(f"delete {path}", lambda: obstore.delete(self.store, key))
        except NotFound:
            pass

    def delete_many(self, paths: list[str]) -> None:
        """Delete every path; ones already gone are fine (deletes are idempotent)."""
        if self._local_root is not None:
            # every path checked before the first delete, as the object stores' keys are: a
            # hostile path refuses the whole call, it does not stop it half done
            local = [os.path.join(self._local_root, check_relative(p)) for p in paths]  # never an external file
            for p, path in zip(paths, local):
                try:
                    os.unlink(path)
                except (FileNotFoundError, NotADirectoryError):
                    pass  # gone already (or its directory never was one)
                except OSError as e:
                    raise translate(
                        e, f"delete {p}" + (f" (and {len(paths) - 1} more)" if len(paths) > 1 else "")
                    ) from e
            return
        keys = [self._key(p) for p in paths]
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            try:
                self._call(f"delete {len(chunk)} objects", functools.partial(obstore.delete, self.store, chunk))
            except NotFound:
                for k in chunk:  # a batch stops at the first missing key on some stores
                    try:
                        self._call(f"delete {k}", functools.partial(obstore.delete, self.store, k))
                    except NotFound:
                        pass

    def size(self, path: str) -> int:
        """Size in bytes of one object (NotFound if absent)."""
        if is_uri(path):
            io, rel = self.external(path)
            return io.size(rel)
        local = self.local_path(path)
        if local is not None:
            try:
                st = os.stat(local)
            except (FileNotFoundError, NotADirectoryError):
                raise NotFound(f"{path}: not found") from None
            except OSError as e:
                raise translate(e, f"size of {path}") from e
            if not stat.S_ISREG(st.st_mode):
                # a directory is a prefix, no object (an object store has nothing there): like get
                raise NotFound(f"{path}: not found (a directory)")
            return st.st_size
        key = self._key(path)
        return int(self._call(f"head {path}", lambda: obstore.head(self.store, key))["size"])

    def sizes(self, paths: pa.Array) -> pa.Array:
        """Size of each object in ``paths`` (int64), null where there is none, vectorized:
        one listing of each distinct parent directory (not recursive), not a request per path."""
        paths = paths.cast(pa.string())
        external = pc.match_substring_regex(paths, URI_PATTERN)
        if pc.any(external).as_py():
            return self._sizes_with_external(paths, external)
        parents = pc.replace_substring_regex(paths, r"/?[^/]*$", "")
        names, sizes = [], []
        for parent in pc.unique(parents).to_pylist():
            listed = self.list_dir(parent)
            names.append(listed.column("path"))
            sizes.append(listed.column("size"))
        if not names:
            return pa.nulls(len(paths), pa.int64())
        index = pc.index_in(paths, value_set=pa.chunked_array(names, pa.string()).combine_chunks())
        return pc.take(pa.chunked_array(sizes, pa.int64()).combine_chunks(), index)

    def _sizes_with_external(self, paths: pa.Array, external: pa.Array) -> pa.Array:
        """``sizes`` of paths some of which are absolute locations: each group from its store."""
        out: list[Any] = [None] * len(paths)
        groups: dict[int, tuple[FileIO, list[int], list[str]]] = {}
        for i, (p, ext) in enumerate(zip(paths.to_pylist(), external.to_pylist())):
            io, rel = self.external(p) if ext else (self, p)
            groups.setdefault(id(io), (io, [], []))[1].append(i)
            groups[id(io)][2].append(rel)
        for io, idx, rels in groups.values():
            for i, size in zip(idx, io.sizes(pa.array(rels, pa.string())).to_pylist()):
                out[i] = size
        return pa.array(out, pa.int64())

    def list_dir(self, prefix: str) -> pa.Table:
        """The objects directly under directory ``prefix`` ("" for the root), not recursive:
        columns path (relative to the FileIO root) and size."""
        schema = pa.schema([("path", pa.string()), ("size", pa.int64())])
        if self._local_root is not None:
            base = os.path.join(self._local_root, check_relative(prefix)) if prefix else self._local_root
            try:
                with os.scandir(base) as it:
                    found = [(e.name, e.stat().st_size) for e in it if e.is_file()]
            except (FileNotFoundError, NotADirectoryError):
                found = []
            except OSError as e:
                raise translate(e, f"list {prefix}") from e
            lead = f"{prefix}/" if prefix else ""
            return pa.table({"path": [lead + n for n, _ in found], "size": [z for _, z in found]}, schema=schema)
        key = self._key(prefix) if prefix else (self._prefix or None)
        objects = self._call(f"list {prefix}", lambda: obstore.list_with_delimiter(self.store, key)["objects"])
        return pa.table(
            {"path": [self._strip(m["path"]) for m in objects], "size": [m["size"] for m in objects]}, schema=schema
        )

    def _strip(self, key: str) -> str:
        return key[len(self._prefix) + 1 :] if self._prefix else key

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under ``prefix`` (a directory, no trailing slash), sorted by path."""
        key = self._key(prefix)  # first: a path leaving the root is refused, on every store
        if self._local_root is not None and not os.path.isdir(self.local_path(prefix)):  # type: ignore[arg-type]
            return []

        def run() -> builtins.list[ObjectInfo]:
            out: builtins.list[ObjectInfo] = []
            for chunk in obstore.list(self.store, key, chunk_size=1000):
                out.extend(ObjectInfo(self._strip(m["path"]), m["size"], m["last_modified"]) for m in chunk)
            return out

        items = self._call(f"list {prefix}", run)
        items.sort(key=lambda o: o.path)
        return items

    def list_names(self, prefix: str) -> builtins.list[str]:
        """Sorted file names directly under ``prefix``: no subdirectories, nothing deeper (as
        ``list_dir``, without sizes); on local disk a plain directory read."""
        if self._local_root is not None:
            try:
                # is_file from the directory entry's type: no stat per name
                with os.scandir(os.path.join(self._local_root, check_relative(prefix))) as it:
                    return sorted(e.name for e in it if e.is_file())
            except FileNotFoundError:
                return []
            except NotADirectoryError:
                self._check_root()
                return []
            except OSError as e:
                self._check_root()
                raise translate(e, f"list {prefix}") from e
        # One level (a delimiter listing): a recursive listing would name deeper objects too.
        plen = len(prefix) + 1 if prefix else 0
        return sorted(p[plen:] for p in self.list_dir(prefix).column("path").to_pylist())

    def list_subdirs(self, prefix: str) -> builtins.list[str]:
        """Sorted names of the directories directly under ``prefix`` (local disk only: object
        stores have none; list the prefix recursively there)."""
        if self._local_root is None:
            raise NotImplementedError("list_subdirs is for local directories")
        try:
            with os.scandir(os.path.join(self._local_root, check_relative(prefix))) as it:
                return sorted(e.name for e in it if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise translate(e, f"list {prefix}") from e

    def list_first_page(self, prefix: str, offset: str | None = None) -> builtins.list[str]:
        """The first page (up to 1000) of names under ``prefix`` after ``offset``, in order.

        One LIST request on stores that list lexicographically (S3). Callers must
        only use it when ``lists_in_order`` is true.
        """
        key = self._key(prefix)
        off = self._key(f"{prefix}/{offset}") if offset else None
        plen = len(prefix) + 1

        def run() -> builtins.list[str]:
            stream = obstore.list(self.store, key, offset=off, chunk_size=1000)
            for chunk in stream:
                return sorted(self._strip(m["path"])[plen:] for m in chunk)
            return []

        return self._call(f"list {prefix}", run)

    def walk(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` (recursive, unordered)."""
        key = self._key(prefix) if prefix else (self._prefix or None)
        if self._local_root is not None and not os.path.isdir(self._local_root):
            return
        try:
            for chunk in obstore.list(self.store, key, chunk_size=1000):
                for m in chunk:
                    yield ObjectInfo(self._strip(m["path"]), m["size"], m["last_modified"])
        except (oe.BaseError, OSError) as e:
            raise translate(e, f"list {prefix}") from e
