"""What the table explorer shows, as JSON-ready dicts: read-only views over the catalog, the
version log, the manifests and the system tables (docs/ui.md documents every endpoint).

Nothing here writes: tables are opened by location or through the catalog and only read;
expiry is asked for its dry run. Only ``sample`` reads data files (the few files that hold
the requested rows); everything else reads version files and manifests. Version files and
manifests are immutable, so what is derived from one version is cached by its location.
"""

from __future__ import annotations

import os
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lamina
from lamina.catalog import Catalog, load_catalog, parse_identifier
from lamina.commit.log import VersionLog
from lamina.commit.slots import SlotListing
from lamina.data.scan import Scan
from lamina.errors import (
    ExplorerError,
    LaminaError,
    TableNotFound,
    VersionNotFound,
)
from lamina.manifest.entries import manifest_schema_of
from lamina.manifest.files import read_manifest
from lamina.manifest.tree import live_data_entries
from lamina.spec import content as C
from lamina.spec.features import check_reader
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.version import VersionManifest
from lamina.table import system
from lamina.table.table import Table
from lamina.ui.caches import Lru, RowCache
from lamina.ui.health import CommandRef, compaction_advice, deletes_advice, expiry_advice
from lamina.ui.history import HISTORY_SCHEMA, SERIES, read_history, read_version_files, spread, version_json
from lamina.ui.jsonable import int_or_none, jsonable, rows_of
from lamina.ui.layout import partition_stats, size_histogram
from lamina.ui.pool import pool

SAMPLE_MAX_ROWS = 500  # rows one sample request may return
FILES_MAX_ROWS = 1000  # files one files request may return
SERIES_BYTES_POINTS = 48  # at most this many versions' live bytes are summed for the bytes plot
HISTORY_POINTS = 1000  # about this many versions spread over a long history are the plots' series
HISTORY_NEWEST = 200  # ... with the newest this many and every tagged version
TIMELINE_PAGE = 100


def _not_found(what: str) -> ExplorerError:
    return ExplorerError(what, 404)


class Explorer:
    """The tables one explorer serves: every table of a catalog, or one table by location.

    Tables are addressed by key only: ``ns.name`` of the catalog, or the one table's key in
    location mode. A key never becomes a path, so no request can open anything else."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.catalog: Catalog | None = None
        self.location: str | None = None
        self.single_key: str | None = None
        self._listings = Lru(64)  # (table, log, latest version, its commit id) -> SlotListing
        # (table, log, table uuid, version) -> that version's history row: a live version's file
        # never changes (expiry records it and a rollback tombstones it, which the listing shows)
        self._version_rows = RowCache(100_000)
        self._manifest_bytes = Lru(100_000)  # (table, root or leaf manifest) -> live data bytes in it
        self._files = Lru(16)  # (table, root manifest) -> live data entries
        self._partitions = Lru(16)  # (table, root manifest) -> partition_stats of its live files
        self._health = Lru(16)  # (table, version, commit id, root manifest, how the CLI names it) -> advice
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
                    "rows": int_or_none(vm.summary, "total-records"),
                    "files": int_or_none(vm.summary, "total-files"),
                    "bytes": self._live_bytes(t, vm.root_manifest, vm.root_inline),
                    "last_commit_ms": vm.timestamp_ms,
                    "last_operation": vm.operation,
                }
            except LaminaError as e:
                row["error"] = str(e)
            return row

        tables = list(pool.map(one, entries))
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
            "rows": int_or_none(vm.summary, "total-records"),
            "files": int_or_none(vm.summary, "total-files"),
            "schema_id": vm.schema.schema_id,
            "schema": [jsonable(c) for c in vm.schema.describe()],
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
        out: dict[str, Any] = {c: [r[c] for r in rows] for c in HISTORY_SCHEMA.names[1:-1]}
        for k in SERIES:
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
        for v, raw in zip(page, read_version_files(t, page)):
            j = version_json(raw)
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

        points = [p for p in pool.map(one, versions) if p is not None]
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


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


__all__ = ["Explorer", "SAMPLE_MAX_ROWS", "FILES_MAX_ROWS"]
