"""What the table explorer shows, as JSON-ready dicts: read-only views over the catalog, the
version log, the manifests and the system tables (docs/ui.md documents every endpoint).

Nothing here writes: tables are opened by location or through the catalog and only read;
expiry is asked for its dry run. Only ``sample`` reads data files (the few files that hold
the requested rows); everything else reads version files and manifests. Version files and
manifests are immutable, so what is derived from one version is cached by its location.
"""

from __future__ import annotations

import io
import json
import math
import os
import shlex
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

import lamina
from lamina.catalog import Catalog, load_catalog, parse_identifier
from lamina.commit.log import SlotListing, VersionLog
from lamina.data.scan import Scan
from lamina.errors import (
    ExplorerError,
    LaminaError,
    NotFound,
    TableNotFound,
    VersionNotFound,
)
from lamina.maintenance import expire
from lamina.manifest.entries import manifest_schema_of
from lamina.manifest.files import read_manifest
from lamina.manifest.tree import live_data_entries
from lamina.operations import compaction
from lamina.spec import content as C
from lamina.spec.features import check_reader
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.version import VersionManifest
from lamina.table import system
from lamina.table.table import Table

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-ui")

SAMPLE_MAX_ROWS = 500  # rows one sample request may return
FILES_MAX_ROWS = 1000  # files one files request may return
SERIES_BYTES_POINTS = 48  # at most this many versions' live bytes are summed for the bytes plot
HISTORY_POINTS = 1000  # about this many versions spread over a long history are the plots' series
HISTORY_NEWEST = 200  # ... with the newest this many and every tagged version
TIMELINE_PAGE = 100
# Health thresholds: what a data engineer would act on.
SMALL_FILE_MIN_FILES = 8  # fewer small files than this in a table: not worth a compaction
DELETED_SHARE_ADVICE = 0.10  # a partition with this share of its rows deleted by DVs
VERSIONS_ADVICE = 100  # retained versions above which expiry is worth a look
CommandRef = tuple[str | None, str]  # how the CLI names a table: (catalog URI, ns.name), or (None, its location)


def _not_found(what: str) -> ExplorerError:
    return ExplorerError(what, 404)


class _Lru:
    """A small thread-safe LRU of values derived from files. Requests that ask for a key
    while it is being made wait for that one computation (the page's requests arrive
    together: one listing of the versions, not one per request)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Future] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, make: Callable[[], Any], valid: Callable[[Any], bool] | None = None) -> Any:
        """The value of ``key``, made once; ``valid(value)``: whether a cached value still
        holds (if not, it is made again)."""
        for _ in range(2):  # a stale value is dropped once, then made again
            with self._lock:
                found = self._items.get(key)
                mine = found is None
                fut: Future = Future() if found is None else found
                if mine:
                    self._items[key] = fut
                    while len(self._items) > self._size:
                        self._items.popitem(last=False)
                else:
                    self._items.move_to_end(key)
            if mine:
                try:
                    fut.set_result(make())
                except BaseException as e:
                    fut.set_exception(e)
                    self._drop(key, fut)
                    raise
                return fut.result()
            value = fut.result()  # the maker's error, if it failed
            if valid is None or valid(value):
                return value
            self._drop(key, fut)
        return make()

    def _drop(self, key: Any, fut: Future) -> None:
        with self._lock:
            if self._items.get(key) is fut:
                del self._items[key]


class _Rows:
    """A thread-safe LRU of many small immutable values, looked up and stored in bulk (no
    waiting on one another: two requests that miss the same rows both read them)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, keys: list[Any]) -> dict[Any, Any]:
        with self._lock:
            return {k: self._items[k] for k in keys if k in self._items}

    def put_many(self, items: dict[Any, Any]) -> None:
        with self._lock:
            self._items.update(items)
            for k in items:
                self._items.move_to_end(k)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def _int(s: dict, key: str) -> int | None:
    v = s.get(key)
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _jsonable(v: Any) -> Any:
    """A cell of an Arrow row as JSON: bytes as hex, times as ISO text, NaN as null."""
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)  # decimal, date, time, timedelta


def rows_of(t: pa.Table) -> list[dict[str, Any]]:
    return [{k: _jsonable(v) for k, v in r.items()} for r in t.to_pylist()]


def _bounded(raw: str | None, default: int, maximum: int, what: str) -> int:
    if raw is None or raw == "":
        return default
    try:
        n = int(raw)
    except ValueError:
        raise ExplorerError(f"{what} must be an integer, not {raw!r}") from None
    if n < 0:
        raise ExplorerError(f"{what} must be >= 0, not {n}")
    return min(n, maximum)


class Explorer:
    """The tables one explorer serves: every table of a catalog, or one table by location.

    Tables are addressed by key only: ``ns.name`` of the catalog, or the one table's key in
    location mode. A key never becomes a path, so no request can open anything else."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.catalog: Catalog | None = None
        self.location: str | None = None
        self.single_key: str | None = None
        self._listings = _Lru(64)  # (table, log, latest version, its commit id) -> SlotListing
        # (table, log, table uuid, version) -> that version's history row: a live version's file
        # never changes (expiry records it and a rollback tombstones it, which the listing shows)
        self._version_rows = _Rows(100_000)
        self._manifest_bytes = _Lru(100_000)  # (table, root or leaf manifest) -> live data bytes in it
        self._files = _Lru(16)  # (table, root manifest) -> live data entries
        self._partitions = _Lru(16)  # (table, root manifest) -> partition_stats of its live files
        self._health = _Lru(16)  # (table, version, commit id, root manifest, how the CLI names it) -> advice
        if _is_table_location(target):
            self.location = lamina.open_table(target).uri
            self.single_key = _key_of_location(self.location)
        else:
            self.catalog = load_catalog(target)
            self.single_key = None

    @property
    def uri(self) -> str:
        return self.location if self.location is not None else self.catalog.uri  # type: ignore[union-attr]

    def close(self) -> None:
        if self.catalog is not None:
            self.catalog.close()

    # -- catalog page ------------------------------------------------------------------

    def catalog_page(self) -> dict[str, Any]:
        if self.catalog is None:
            t = self.table(self.single_key)  # type: ignore[arg-type]
            entries: list[tuple[Any, ...]] = [(self.single_key, "", self.single_key, t.uri, True, t)]
            namespaces: list[str] = []
        else:
            infos = self.catalog.tables()
            namespaces = self.catalog.list_namespaces()
            entries = [(i.identifier, i.namespace, i.name, i.location, i.online, None) for i in infos]
        cat = self.catalog

        def one(e: tuple) -> dict[str, Any]:
            key, ns, name, location, online, table = e
            row: dict[str, Any] = {"key": key, "namespace": ns, "name": name, "location": location, "online": online}
            try:
                t = table if table is not None else cat.load_table(key)  # type: ignore[union-attr]
                vm = t.metadata
                row |= {
                    "version": vm.version,
                    "rows": _int(vm.summary, "total-records"),
                    "files": _int(vm.summary, "total-files"),
                    "bytes": self._live_bytes(t, vm.root_manifest, vm.root_inline),
                    "last_commit_ms": vm.timestamp_ms,
                    "last_operation": vm.operation,
                }
            except LaminaError as e:
                row["error"] = str(e)
            return row

        tables = list(_pool.map(one, entries))
        return {
            "kind": "catalog" if self.catalog is not None else "table",
            "uri": self.uri,
            "namespaces": namespaces,
            "tables": tables,
        }

    # -- tables ---------------------------------------------------------------------------

    def table(self, key: str, branch: str | None = None) -> Table:
        """The table ``key`` names, at its latest version (``branch``: that branch's handle)."""
        if self.catalog is None:
            if key != self.single_key:
                raise _not_found(f"no table {key!r} here; this explorer serves {self.single_key!r}")
            t = lamina.open_table(self.location)  # type: ignore[arg-type]
        else:
            try:
                parse_identifier(key)
            except LaminaError as e:
                raise _not_found(str(e)) from None
            try:
                t = self.catalog.load_table(key)
            except TableNotFound as e:
                raise _not_found(str(e)) from None
        if branch is not None and branch != MAIN_BRANCH:
            try:
                t = t.branch(branch)
            except VersionNotFound as e:
                raise _not_found(str(e)) from None
        return t

    def resolve(self, t: Table, version: str | None, tag: str | None) -> VersionManifest:
        """The version a request names (a version number, or a tag), or the latest."""
        try:
            if tag:
                return t.tag_store.get(tag).version
            if version not in (None, ""):
                try:
                    number = int(version)
                except ValueError:
                    raise ExplorerError(f"version must be an integer, not {version!r}; pass tag= for a tag") from None
                return t.metadata if number == t.version else t.log.load(number)
        except VersionNotFound as e:
            raise _not_found(str(e)) from None
        return t.metadata

    def live_files(self, t: Table, vm: VersionManifest) -> pa.Table:
        """The live data entries of ``vm`` (manifests only; cached by root manifest)."""
        if vm.root_manifest is None:
            return manifest_schema_of(vm).empty_table()
        return self._files.get(
            (t.uri, vm.root_manifest),
            lambda: live_data_entries(t.io, vm.root_manifest, manifest_schema_of(vm), inline=vm.root_inline),
        )

    def partitions(self, t: Table, vm: VersionManifest) -> list[dict[str, Any]]:
        """``partition_stats`` of ``vm``'s live files (the layout plots and the health advice)."""
        return self._partitions.get((t.uri, vm.root_manifest), lambda: partition_stats(self.live_files(t, vm)))

    def overview(self, t: Table) -> dict[str, Any]:
        vm = t.metadata
        tags = system.tags(t)
        branches = system.branches(t, count_versions=lambda log, head: len(self.slots(t.uri, log, head).versions))
        specs = [s.to_json() for s in vm.all_partition_specs]
        return {
            "key": None,
            "location": t.uri,
            "uuid": vm.table_uuid,
            "branch": t.branch_name,
            "version": vm.version,
            "timestamp_ms": vm.timestamp_ms,
            "operation": vm.operation,
            "rows": _int(vm.summary, "total-records"),
            "files": _int(vm.summary, "total-files"),
            "schema_id": vm.schema.schema_id,
            "schema": [_jsonable(c) for c in vm.schema.describe()],
            "partition_spec": vm.partition_spec.to_json(),
            "partition_specs": specs,
            "sort_order": None if vm.sort_order is None else vm.sort_order.to_json(),
            "properties": dict(vm.properties),
            "reader_features": list(vm.reader_features),
            "writer_features": list(vm.writer_features),
            "format_version": vm.format_version,
            "tags": rows_of(tags),
            "branches": rows_of(branches),
        }

    # -- history --------------------------------------------------------------------------

    def slots(self, uri: str, log: VersionLog, head: VersionManifest) -> SlotListing:
        """The slots of ``log`` whose latest version is ``head``: one listing per latest version,
        shared by every request (keyed by the latest's commit id: a commit lists again), and
        listed again when the oldest listed version is gone (expiry records the oldest versions
        as expired first, without a commit): loading it (a GET and a look at its chunk's
        slot records) checks it."""

        def oldest_still_there(listing: SlotListing) -> bool:
            return not listing.versions or log.is_live(listing.versions[0])

        key = (uri, log.layout.versions_dir, head.version, head.commit_id)
        return self._listings.get(key, log.scan_slots, oldest_still_there)

    def versions_of(self, t: Table) -> list[int]:
        """Every retained version of ``t``'s branch up to its version, oldest first."""
        return [v for v in self.slots(t.uri, t.log, t.metadata).versions if v <= t.version]

    def history(self, t: Table) -> dict[str, Any]:
        """The plots' series: every retained version of a short history, oldest first; of a
        long one (more than HISTORY_POINTS + HISTORY_NEWEST versions) about HISTORY_POINTS
        spread over it, the newest HISTORY_NEWEST and every tagged version (``sampled``;
        ``total``: the versions there are). Each version is read once per explorer."""
        versions = self.versions_of(t)
        tagged = {tag.tagged_version for tag in t.tag_store.list()}
        points = versions
        if len(versions) > HISTORY_POINTS + HISTORY_NEWEST:
            points = spread(versions, HISTORY_POINTS, tagged | set(versions[-HISTORY_NEWEST:]))
        rows = self._history_rows(t, points)
        out: dict[str, Any] = {c: [r[c] for r in rows] for c in _HISTORY_SCHEMA.names[1:-1]}
        for k in _SERIES:
            out[k.replace("-", "_")] = [r["summary"][k] or 0 for r in rows]
        return out | {"branch": t.branch_name, "total": len(versions), "sampled": len(points) < len(versions)}

    def _history_rows(self, t: Table, versions: list[int]) -> list[dict[str, Any]]:
        """The history rows of ``versions`` (those still versions), oldest first: the cached
        ones, and the others read in one parallel pass."""
        prefix = (t.uri, t.log.layout.versions_dir, t.metadata.table_uuid)
        cached = self._version_rows.get_many([(*prefix, v) for v in versions])
        rows = {key[-1]: r for key, r in cached.items()}
        missing = [v for v in versions if v not in rows]
        if missing:
            read = {r["version"]: r for r in read_history(t, missing).to_pylist()}
            self._version_rows.put_many({(*prefix, v): r for v, r in read.items()})
            rows |= read
        return [rows[v] for v in versions if v in rows]

    def versions_page(self, t: Table, offset: int, limit: int) -> dict[str, Any]:
        """Versions newest first, ``[offset, offset + limit)``, each with its whole summary
        and the tags on it (the timeline)."""
        versions = self.versions_of(t)[::-1]
        page = versions[offset : offset + limit]
        tags: dict[int, list[str]] = {}
        for tag in t.tag_store.list():
            tags.setdefault(tag.tagged_version, []).append(tag.name)
        rows = []
        for v, raw in zip(page, _read_version_files(t, page)):
            j = _version_json(raw)
            if j is None:
                continue
            rows.append(
                {
                    "version": v,
                    "timestamp_ms": j.get("timestamp_ms"),
                    "operation": j.get("operation"),
                    "parent_version": j.get("parent_version"),
                    "commit_id": j.get("commit_id"),
                    "summary": j.get("summary") or {},
                    "tags": sorted(tags.get(v, [])),
                }
            )
        return {"total": len(versions), "offset": offset, "limit": limit, "versions": rows}

    def bytes_series(self, t: Table) -> dict[str, Any]:
        """Live data bytes at up to SERIES_BYTES_POINTS versions spread over the history
        (every version of a short one), summed from each version's root manifest and its
        leaves (a manifest's total is cached: manifests are immutable and shared by versions)."""
        every = self.versions_of(t)
        versions = every if len(every) <= SERIES_BYTES_POINTS else spread(every, SERIES_BYTES_POINTS - 3)

        def one(v: int) -> tuple[int, int] | None:
            vm = t.metadata if v == t.version else t.log.try_load(v)
            if vm is None:
                return None
            return v, self._live_bytes(t, vm.root_manifest, vm.root_inline)

        points = [p for p in _pool.map(one, versions) if p is not None]
        return {
            "version": [p[0] for p in points],
            "bytes": [p[1] for p in points],
            "sampled": len(versions) < len(every),
        }

    def _live_bytes(self, t: Table, manifest: str | None, carried: bytes | None = None, leaf: bool = False) -> int:
        """Bytes of the live data files under ``manifest`` (a root: ``carried``, its bytes if its
        version manifest carries it; or a leaf)."""
        if manifest is None:
            return 0

        def total() -> int:
            if leaf:  # only data files: their live bytes (no paths read)
                m = read_manifest(t.io, manifest, ["status", "size"])
                return int(pc.sum(m.column("size").filter(pc.not_equal(m.column("status"), C.REMOVED))).as_py() or 0)
            m = read_manifest(t.io, manifest, ["content", "status", "path", "size"], inline=carried)
            m = m.filter(pc.not_equal(m.column("status"), C.REMOVED))
            is_leaf = pc.equal(m.column("content"), C.LEAF)
            inline = int(pc.sum(m.filter(pc.invert(is_leaf)).column("size")).as_py() or 0)
            return inline + sum(self._live_bytes(t, p, leaf=True) for p in m.filter(is_leaf).column("path").to_pylist())

        return self._manifest_bytes.get((t.uri, manifest), total)

    # -- a version's files ----------------------------------------------------------------

    def files(self, t: Table, vm: VersionManifest, offset: int, limit: int) -> dict[str, Any]:
        e = self.live_files(t, vm)
        page = e.slice(offset, limit)
        cols = [
            "path",
            "size",
            "record_count",
            "added_version",
            "spec_id",
            "partition_path",
            "dv_path",
            "dv_cardinality",
        ]
        return {
            "version": vm.version,
            "total": e.num_rows,
            "offset": offset,
            "limit": limit,
            "files": rows_of(
                page.select(cols).rename_columns(
                    [
                        "path",
                        "size",
                        "record_count",
                        "added_version",
                        "spec_id",
                        "partition",
                        "dv_path",
                        "dv_cardinality",
                    ]
                )
            ),
        }

    def layout(self, t: Table, vm: VersionManifest) -> dict[str, Any]:
        """Per partition: files, live rows, bytes, rows deleted by deletion vectors; and the
        data-file size histogram (powers of two)."""
        e = self.live_files(t, vm)
        return {
            "version": vm.version,
            "partitions": self.partitions(t, vm),
            "size_histogram": size_histogram(e),
            "files": e.num_rows,
            "bytes": int(pc.sum(e.column("size")).as_py() or 0),
            "rows": int(pc.sum(e.column("record_count")).as_py() or 0),
        }

    def sample(self, t: Table, vm: VersionManifest, offset: int, limit: int) -> dict[str, Any]:
        """Rows [offset, offset + limit) of ``vm`` in file order: only the files that hold
        them are read (the manifests tell each file's live row count)."""
        e = self.live_files(t, vm)
        counts = e.column("record_count").to_numpy() if e.num_rows else np.zeros(0, dtype=np.int64)
        ends = np.cumsum(counts)
        total = int(ends[-1]) if len(ends) else 0
        check_reader(vm.reader_features, f"version {vm.version} of {t.uri}")
        scan = Scan(t.io, vm)
        cols = list(scan.output_columns)
        first = int(np.searchsorted(ends, offset, side="right"))
        parts, got, skip = [], 0, offset - (int(ends[first - 1]) if first > 0 else 0)
        i = first
        while got < limit and i < e.num_rows:  # bounded: at most `limit` rows' worth of files
            rows = scan.read_entries(e.slice(i, 1), cols, None).slice(skip, limit - got)
            parts.append(rows)
            got += rows.num_rows
            skip = 0
            i += 1
        data = pa.concat_tables(parts) if parts else scan.arrow_schema_of(tuple(cols)).empty_table()
        return {
            "version": vm.version,
            "total": total,
            "offset": offset,
            "limit": limit,
            "columns": cols,
            "rows": rows_of(data),
            "files_read": i - first,
        }

    # -- health ---------------------------------------------------------------------------

    def health(self, t: Table) -> dict[str, Any]:
        """Small files and deleted rows, from the latest version's manifests (the expiry
        preview is ``expiry``: a dry run that can take longer, which the page asks last)."""
        vm = t.metadata
        ref = command_ref(self, t)

        def advice() -> list[dict[str, Any]]:
            return compaction_advice(self.live_files(t, vm), vm, ref) + deletes_advice(self.partitions(t, vm), ref)

        # from the version's manifests alone (immutable): once per version
        return {
            "version": vm.version,
            "advice": self._health.get((t.uri, vm.version, vm.commit_id, vm.root_manifest, ref), advice),
        }

    def expiry(self, t: Table) -> dict[str, Any]:
        """What ``lamina expire`` (default policy) would drop and free, by its own dry run."""
        advice = expiry_advice(t, command_ref(self, t), self.slots(t.uri, t.log, t.metadata))
        return {"version": t.version, "advice": advice}


# What the history plots need of each version file; everything else in it is skipped by the
# JSON reader (one multi-threaded parse of all the files, not one json.loads per version).
_SERIES = (
    "added-files",
    "removed-files",
    "added-records",
    "removed-records",
    "total-files",
    "total-records",
    "deleted-rows",
)
_HISTORY_SCHEMA = pa.schema(
    [
        ("tombstone", pa.bool_()),
        ("version", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("operation", pa.string()),
        ("parent_version", pa.int64()),
        ("commit_id", pa.string()),
        ("summary", pa.struct([(k, pa.int64()) for k in _SERIES])),
    ]
)


def _read_version_file(t: Table, v: int) -> bytes | None:
    """Version ``v``'s file as stored; None if it expired meanwhile. (A branch's base
    version is not in the branch's directory: its log finds it.)"""
    path = t.log.version_path(v)
    try:
        local = t.log.io.local_path(path)
        if local is not None:
            with open(local, "rb") as f:
                return f.read()
        return t.log.io.get(path)
    except (NotFound, FileNotFoundError):
        vm = t.log.try_load(v)
        return None if vm is None else vm.to_json()


def _read_version_files(t: Table, versions: list[int]) -> list[bytes | None]:
    """``_read_version_file`` of each version: in parallel from an object store, one after
    another from local disk (a small file's read costs less than handing it to a thread)."""
    read = lambda v: _read_version_file(t, v)  # noqa: E731
    return list(map(read, versions) if t.log.io.is_local else _pool.map(read, versions))


def _version_json(raw: bytes | None) -> dict[str, Any] | None:
    """A version file's JSON; None for a tombstone or an unreadable one (the history skips it)."""
    if raw is None:
        return None
    try:
        j = json.loads(raw)
    except ValueError:
        return None
    return j if isinstance(j, dict) and not j.get("tombstone") else None


def read_history(t: Table, versions: list[int]) -> pa.Table:
    """The history rows (``_HISTORY_SCHEMA`` but the tombstone flag) of ``versions`` that are
    still versions, oldest first: one multi-threaded Arrow JSON parse of their files."""
    raws = [r for r in _read_version_files(t, versions) if r is not None]
    try:
        doc = pa_json.read_json(
            io.BytesIO(b"\n".join(r.strip() for r in raws)),
            parse_options=pa_json.ParseOptions(explicit_schema=_HISTORY_SCHEMA, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid:  # a writer stored a series field as other than a number: one by one
        js = [j for j in map(_version_json, raws) if j is not None]
        for j in js:
            j["summary"] = {k: _int(j.get("summary") or {}, k) for k in _SERIES}
        doc = pa.Table.from_pylist(js, schema=_HISTORY_SCHEMA)
    doc = doc.filter(pc.invert(pc.fill_null(doc.column("tombstone"), False)))
    return doc.sort_by("version").drop_columns(["tombstone"])


def spread(versions: list[int], points: int, also: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """About ``points`` (at most ``points`` + 3) of ``versions`` (ascending) spread evenly over
    their span, the oldest and the newest among them, and those in ``also``. The spread ones
    are the multiples of a power of two, so they stay the same as versions are added (a
    refresh after a commit reads only the new ones)."""
    v = np.asarray(versions, dtype=np.int64)
    if len(v) <= points:
        return versions
    span = int(v[-1] - v[0])
    stride = 1 << max(0, math.ceil(math.log2(max(1, span) / points)))
    keep = (v % stride) == 0
    keep[0] = keep[-1] = True
    if also:
        keep |= np.isin(v, np.fromiter(also, dtype=np.int64, count=len(also)))
    return v[keep].tolist()


def _is_table_location(target: str) -> bool:
    """A table location (it holds ``_lamina/``), rather than a catalog."""
    scheme = urllib.parse.urlsplit(target).scheme.lower()
    if scheme in ("sqlite", "postgresql", "postgres"):
        return False
    if scheme in ("", "file"):
        path = urllib.parse.urlsplit(target).path if scheme == "file" else target
        return os.path.isdir(os.path.join(path, "_lamina"))
    try:
        lamina.open_table(target)
        return True
    except LaminaError:
        return False


def _key_of_location(uri: str) -> str:
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "table"


def command_ref(ex: Explorer, t: Table) -> CommandRef:
    """How the CLI names this table: (catalog URI, ns.name), or (None, its location)."""
    ident = getattr(t, "identifier", None)
    if ex.catalog is None or not ident:
        return None, t.uri
    return ex.catalog.reopen_uri()[0], ident


def _cli(ref: CommandRef, command: str, *args: str) -> str:
    """``lamina [--catalog URI] COMMAND TABLE ARGS``, quoted for a POSIX shell."""
    catalog, table = ref
    return " ".join(_quote(a) for a in ["lamina", *(["--catalog", catalog] if catalog else []), command, table, *args])


def _quote(arg: str) -> str:
    """``arg`` for a POSIX shell, readably: a predicate with 'literals' in double quotes."""
    if "'" in arg and not any(c in arg for c in '"$`\\!'):
        return f'"{arg}"'
    return shlex.quote(arg)


def partition_stats(e: pa.Table) -> list[dict[str, Any]]:
    """Files, live rows, bytes and DV-deleted rows per partition (one group_by)."""
    if not e.num_rows:
        return []
    part = pc.fill_null(e.column("partition_path"), "")
    dv = pc.fill_null(e.column("dv_cardinality"), 0)
    t = pa.table({"partition": part, "size": e.column("size"), "rows": e.column("record_count"), "deleted": dv})
    g = t.group_by("partition").aggregate([("size", "count"), ("size", "sum"), ("rows", "sum"), ("deleted", "sum")])
    g = g.sort_by("partition")
    out = []
    for r in g.to_pylist():
        physical = r["rows_sum"] + r["deleted_sum"]
        out.append(
            {
                "partition": r["partition"],
                "files": r["size_count"],
                "bytes": r["size_sum"],
                "rows": r["rows_sum"],
                "deleted_rows": r["deleted_sum"],
                "deleted_share": (r["deleted_sum"] / physical) if physical else 0.0,
            }
        )
    return out


def size_histogram(e: pa.Table) -> list[dict[str, Any]]:
    """Data files per size bucket [2^k, 2^(k+1)) bytes, every bucket from the smallest to the
    largest file's (empty ones too, so the plot's axis is honest)."""
    if not e.num_rows:
        return []
    size = np.maximum(e.column("size").to_numpy(), 1)
    k = np.floor(np.log2(size)).astype(np.int64)
    lo, hi = int(k.min()), int(k.max())
    counts = np.bincount(k - lo, minlength=hi - lo + 1)
    return [{"min_bytes": 1 << (lo + i), "max_bytes": 1 << (lo + i + 1), "files": int(c)} for i, c in enumerate(counts)]


def _mib(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{int(n)} B"


def compaction_advice(e: pa.Table, vm: VersionManifest, ref: CommandRef) -> list[dict[str, Any]]:
    """Small files, by the compaction planner itself (default target, files under 3/4 of it),
    with the files it would write (bytes / target, per group)."""
    target = compaction.DEFAULT_TARGET
    groups = compaction.plan_groups(e, target, target * 3 // 4, vm.partition_spec, vm.all_partition_specs)
    if not groups:
        return []
    idx = np.concatenate(groups)
    size = e.column("size").to_numpy()
    inputs = len(idx)
    if inputs < SMALL_FILE_MIN_FILES:
        return []
    group_bytes = np.add.reduceat(size[idx], np.cumsum([0] + [len(g) for g in groups[:-1]]))
    outputs = int(np.maximum(1, -(-group_bytes // target)).sum())  # ceil(bytes / target), at least 1 a group
    parts = len(pc.unique(pc.fill_null(e.column("partition_path").take(pa.array(idx)), "")))
    return [
        {
            "kind": "small-files",
            "severity": "warn" if inputs >= 4 * outputs else "info",
            "message": (
                f"{inputs:,} files under {_mib(target * 3 // 4)} (or carrying deletes) in {parts:,} partition(s), "
                f"{_mib(int(size[idx].sum()))} in all: compaction would write ~{outputs:,} file(s)"
            ),
            "command": _cli(ref, "compact"),
            "facts": {"input_files": inputs, "output_files": outputs, "partitions": parts, "target_bytes": target},
        }
    ]


def deletes_advice(partitions: list[dict[str, Any]], ref: CommandRef) -> list[dict[str, Any]]:
    """Partitions where deletion vectors hide a large share of the rows: every read skips them."""
    out = []
    for p in partitions:
        if p["deleted_share"] >= DELETED_SHARE_ADVICE:
            where = ["--where", _where_of(p["partition"])] if p["partition"] else []
            out.append(
                {
                    "kind": "deleted-rows",
                    "severity": "warn" if p["deleted_share"] >= 0.2 else "info",
                    "message": (
                        f"{p['deleted_share']:.0%} of rows in partition {p['partition'] or '(unpartitioned)'} are "
                        f"deleted ({p['deleted_rows']:,} of {p['rows'] + p['deleted_rows']:,}): "
                        f"compacting it drops them from its files"
                    ),
                    "command": _cli(ref, "compact", *where),
                    "facts": {
                        "partition": p["partition"],
                        "deleted_rows": p["deleted_rows"],
                        "share": p["deleted_share"],
                    },
                }
            )
    return out


def _where_of(partition: str) -> str:
    """A --where selecting a partition path ``a=1/b=x`` (compaction plans by the files'
    statistics, so naming the partition fields' values picks its files)."""
    terms = []
    for part in partition.split("/"):
        name, _, value = part.partition("=")
        value = urllib.parse.unquote(value)
        terms.append(f"{name} = '{value}'" if not value.lstrip("-").isdigit() else f"{name} = {value}")
    return " AND ".join(terms)


def expiry_advice(t: Table, ref: CommandRef, slots: SlotListing) -> list[dict[str, Any]]:
    """What ``lamina expire`` (default policy) would free, by its own dry run over ``slots``
    (the log's listing, shared with the other requests); the facts say too when the versions it would drop were
    committed (``expired_from_ms``, ``expired_to_ms``: the time plot shades that span)."""
    try:
        # (the maintenance function itself: t.maintenance.expire_versions is a write method, refused
        # on an offline catalog table even for a dry run)
        rep = expire.expire_versions(t.io, t.log, dry_run=True, slots=slots)
    except LaminaError as e:
        return [
            {
                "kind": "expiry",
                "severity": "info",
                "message": f"expiry cannot be previewed: {e}",
                "command": None,
                "facts": {},
            }
        ]
    versions = len(slots.versions)
    tags = len(t.tag_store.list())
    span = [t.log.try_load(v) for v in rep.expired_versions[:1] + rep.expired_versions[-1:]]
    facts = {
        "retained_versions": versions,
        "expired_versions": rep.expired_versions,
        "deleted_bytes": rep.deleted_bytes,
        "deleted_files": len(rep.deleted_files),
        "deleted_manifests": len(rep.deleted_manifests),
        "kept_for_tags": rep.kept_for_tags,
        "tags": tags,
        "earliest_retained": rep.earliest_retained,
        "expired_from_ms": span[0].timestamp_ms if span and span[0] else None,
        "expired_to_ms": span[-1].timestamp_ms if span and span[-1] else None,
    }
    if not rep.expired_versions and versions < VERSIONS_ADVICE:
        return [
            {
                "kind": "expiry",
                "severity": "ok",
                "message": f"{versions:,} versions retained; none older than the default 5 days (nothing to expire)",
                "command": None,
                "facts": facts,
            }
        ]
    if not rep.expired_versions:
        return [
            {
                "kind": "expiry",
                "severity": "info",
                "message": (
                    f"{versions:,} versions retained, none older than 5 days: "
                    f"keep fewer with --retain-last (tags keep their files)"
                ),
                "command": _cli(ref, "expire", "--retain-last", "100", "--dry-run"),
                "facts": facts,
            }
        ]
    return [
        {
            "kind": "expiry",
            "severity": "warn" if rep.deleted_bytes > 1 << 30 else "info",
            "message": (
                f"{versions:,} versions retained: expire would drop {len(rep.expired_versions):,} of them and free "
                f"{_mib(rep.deleted_bytes)} ({len(rep.deleted_files):,} files), keeping {tags} tag(s)"
            ),
            "command": _cli(ref, "expire"),
            "facts": facts,
        }
    ]


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


__all__ = ["Explorer", "SAMPLE_MAX_ROWS", "FILES_MAX_ROWS"]
