"""The change data feed of a table: the row changes of every version in a range.

``Table.changes(start, end)`` covers the versions in (start, end] (Delta's ``table_changes``
and ``readChangeFeed``, with Delta's column names): each row changed by a version, with
``_change_type`` (insert, delete, update_preimage, update_postimage), ``_commit_version``
and ``_commit_timestamp``. Each version's changes come from the manifests and deletion
vectors that differ from its parent's (``lamina.data.changes``); nothing else is read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import VersionLog
from lamina.data.changes import CHANGE_TYPE, CHANGE_TYPES, change_schema, version_changes
from lamina.data.scan import Scan
from lamina.errors import ChangesUnavailable, InvalidArgument, VersionNotFound
from lamina.expr import Expr
from lamina.io import FileIO
from lamina.spec.lineage import has_lineage
from lamina.spec.tag import split_version_or_tag
from lamina.spec.version import VersionManifest
from lamina.timeutil import epoch_ms

if TYPE_CHECKING:
    from lamina.table.table import Table


# ChangeFeed.counts(): change rows per version and change type.
COUNTS_SCHEMA = pa.schema(
    [
        ("version", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("operation", pa.string()),
        *[(kind, pa.int64()) for kind in CHANGE_TYPES],
    ]
)


class ChangeFeed:
    """The changes of the versions in (``start``, ``end``] of a table, read lazily version by
    version. Built by ``Table.changes``; the range and its versions are checked when it is
    built (a range that cannot be answered raises then, before anything is read)."""

    def __init__(
        self, io: FileIO, versions: Sequence[VersionManifest], where: str | Expr | None, columns: Sequence[str] | None
    ) -> None:
        self.io = io
        self._versions = list(versions)  # start, then every version of the range, in order
        self._where = where
        # Rows follow the range's newest schema; the scan binds the predicate and checks columns.
        self._reader = Scan(io, self._versions[-1], where, columns)

    @property
    def start_version(self) -> int:
        return self._versions[0].version

    @property
    def end_version(self) -> int:
        return self._versions[-1].version

    @property
    def versions(self) -> list[int]:
        """The versions whose changes the feed holds, oldest first."""
        return [vm.version for vm in self._versions[1:]]

    @property
    def schema(self) -> pa.Schema:
        return change_schema(self._reader)

    @property
    def reader(self) -> Scan:
        """The scan of the range's newest version the rows are read through: its columns and predicate."""
        return self._reader

    def steps(self) -> list[tuple[VersionManifest, VersionManifest]]:
        """(parent, version) of each version of the range, oldest first: ``version_changes`` of
        one is that version's rows, so an engine's tasks can compute versions apart."""
        return list(zip(self._versions, self._versions[1:]))

    def _each_version(self, reader: Scan) -> Iterator[tuple[VersionManifest, pa.Table]]:
        for older, newer in self.steps():
            yield newer, version_changes(self.io, older, newer, reader)

    def by_version(self) -> Iterator[tuple[int, pa.Table]]:
        """(version, its changes) for each version of the range, oldest first."""
        for vm, changes in self._each_version(self._reader):
            yield vm.version, changes

    def counts(self) -> pa.Table:
        """How many change rows of each type every version of the range has (``where``
        applies; no column beyond its own is read): one row per version, oldest first, with
        its commit time and operation; a version without changes (compaction) counts zeros."""
        reader = Scan(self.io, self._versions[-1], self._where, [])
        rows = []
        for vm, changes in self._each_version(reader):
            types = pc.value_counts(changes.column(CHANGE_TYPE))
            counted = dict(zip(types.field("values").to_pylist(), types.field("counts").to_pylist()))
            rows.append(
                {
                    "version": vm.version,
                    "timestamp": vm.timestamp_ms,
                    "operation": vm.operation,
                    **{kind: counted.get(kind, 0) for kind in CHANGE_TYPES},
                }
            )
        return pa.Table.from_pylist(rows, schema=COUNTS_SCHEMA)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for _, t in self.by_version():
            yield from (b for b in t.to_batches() if b.num_rows)

    def to_arrow(self) -> pa.Table:
        parts = [t for _, t in self.by_version()]
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.to_arrow().to_pandas(**kwargs)

    def count(self) -> int:
        return sum(t.num_rows for _, t in self.by_version())


def change_feed(
    table: Table,
    start: VersionManifest | int,
    end: VersionManifest | int | None,
    where: str | Expr | None,
    columns: Sequence[str] | None,
) -> ChangeFeed:
    """The feed of ``table`` over (``start``, ``end``] (``end`` None: the latest version), every
    version of the range loaded and checked: present, and with row lineage (which pairs
    updates) from ``start`` on. ``start`` and ``end`` are versions already resolved (by time or
    tag), or version numbers (``start_spec``, ``end_spec``), loaded here in one batch with the
    versions between them: one listing of slot records per chunk for the whole range (on S3 a
    LIST, at about 12 times a GET's price), not one more for each end given by number."""
    log = table.log
    if end is None:
        end = log.latest()
    elif isinstance(end, int) and end > table.metadata.version:
        # Past this handle's version (up to which every version was committed), the end must be
        # found first: the versions up to a wrong end would otherwise each cost a GET of nothing.
        end = _loaded(table, end)
    first = start if isinstance(start, int) else start.version
    last = end if isinstance(end, int) else end.version
    numbered = [v for v in (start, end) if isinstance(v, int)]
    loaded = log.try_load_many(sorted({*numbered, *range(first + 1, last)}))
    if isinstance(start, int):
        start = loaded[first] if first in loaded else _not_loaded(table, first)
    if isinstance(end, int):
        end = loaded[last] if last in loaded else _not_loaded(table, last)
    if end.version < start.version:
        raise InvalidArgument(
            f"the change range ends at version {end.version}, before its start {start.version}; "
            "the range is (start, end]: pass an end at or after the start"
        )
    versions = [start]
    for v in range(start.version + 1, end.version):
        vm = loaded.get(v)
        if vm is None:
            raise _unavailable(log, end, f"version {v} of the range was expired or dropped by a destructive rollback")
        versions.append(vm)
    if end.version > start.version:
        versions.append(end)
    if not has_lineage(start):
        raise _unavailable(log, end, f"version {start.version} has no row lineage (changes are computed from it)")
    return ChangeFeed(table.io, versions, where, columns)


def _unavailable(log: VersionLog, end: VersionManifest, why: str) -> ChangesUnavailable:
    oldest = oldest_answerable(log, end)
    advice = (
        f"the oldest start version still answerable is {oldest}"
        if oldest is not None
        else "no earlier version can start a change range: turn row lineage on with table.enable_row_lineage()"
    )
    return ChangesUnavailable(f"cannot compute changes: {why}; {advice}", oldest)


def oldest_answerable(log: VersionLog, end: VersionManifest) -> int | None:
    """The oldest version from which every version up to ``end`` is retained and has row
    lineage (lineage, once on, stays on: a binary search); None if none before ``end``."""
    present = set(log.list_versions())
    lo = end.version
    while lo - 1 in present:
        lo -= 1
    if not has_lineage(end):
        return None
    hi = end.version
    while lo < hi:  # the first version of [lo, hi] with lineage
        mid = (lo + hi) // 2
        vm = log.try_load(mid)
        if vm is not None and has_lineage(vm):
            hi = mid
        else:
            lo = mid + 1
    return lo


def start_spec(table: Table, version: int | str | None, timestamp: Any) -> VersionManifest | int:
    """The version a change range starts after: loaded when given by time or tag name, else its
    number (checked to be one), which ``change_feed`` loads with the range. By timestamp: the
    newest version committed before it, so the range holds every version committed at or
    after it (Delta's ``startingTimestamp``)."""
    if (version is None) == (timestamp is None):
        raise InvalidArgument("changes needs exactly one of start_version or start_timestamp")
    if timestamp is not None:
        ms = epoch_ms(timestamp, "start_timestamp")
        try:
            return table.log.at_timestamp(ms - 1)
        except VersionNotFound:
            first = table.log.try_load(0)
            if first is not None and first.timestamp_ms >= ms:
                return first  # at or before the table's creation: every version
            raise
    return _spec(table, version)


def resolve_start(table: Table, version: int | str | None, timestamp: Any) -> VersionManifest:
    """``start_spec``, loaded."""
    spec = start_spec(table, version, timestamp)
    return _loaded(table, spec) if isinstance(spec, int) else spec


def end_spec(table: Table, version: int | str | None, timestamp: Any) -> VersionManifest | int | None:
    """The last version of a change range: loaded when given by time or tag name, else its
    number (checked to be one), or None (the latest). By timestamp: the newest version
    committed at or before it."""
    if version is not None and timestamp is not None:
        raise InvalidArgument("pass end_version or end_timestamp, not both")
    if version is None and timestamp is None:
        return None
    if timestamp is not None:
        return table.log.at_timestamp(epoch_ms(timestamp, "end_timestamp"))
    return _spec(table, version)


def _spec(table: Table, version: int | str | None) -> VersionManifest | int:
    """A version number, checked (``change_feed`` loads it), or a tag's version."""
    number, tag = split_version_or_tag(version)
    if tag is not None:
        return table.tag_store.get(tag).version
    if number is None or number < 0:
        raise InvalidArgument(f"a change range's versions are non-negative integers or tag names, not {version!r}")
    return number


def _loaded(table: Table, version: int) -> VersionManifest:
    vm = table.log.try_load(version)
    return vm if vm is not None else _not_loaded(table, version)


def _not_loaded(table: Table, version: int) -> NoReturn:
    """Why ``version`` could not be loaded: it does not exist yet, or it was expired."""
    latest = table.log.latest()
    if version > latest.version:
        raise VersionNotFound(f"version {version} does not exist: the latest version is {latest.version}")
    raise _unavailable(table.log, latest, f"version {version} was expired or dropped by a destructive rollback")
