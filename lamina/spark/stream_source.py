"""``spark.readStream.format("lamina")``: new versions of a table as micro-batches.

Offsets are Lamina versions, as JSON: ``{"version": v}`` means every version up to and
including ``v`` was delivered. A stream that starts without ``startingVersion`` or
``startingTimestamp`` first delivers the table as it is (Delta's initial snapshot): its
offsets are ``{"version": s, "snapshot_files": k}``, the first ``k`` data files (by path)
of version ``s`` delivered. A micro-batch from offset ``a`` to ``b`` is planned from
metadata alone on the driver side (version manifests and the manifests of the versions in
``(a, b]``) and read by the tasks: so a query restarted from its checkpoint plans exactly
the batch its offset log holds, and an availableNow run stops at the version that was
the latest when it started.

Spark keeps no initial offset in the checkpoint: a query restarted before its first batch
was committed asks ``initialOffset()`` again and replays that batch from it. So a stream
that starts at "the latest version" (the snapshot's, or ``startingVersion=latest``) starts
at ``{"version": -1}``, a marker, and the first batch's end offset, which Spark does log,
names that version: the replay plans the same batch.

By default a batch holds the rows the versions in ``(a, b]`` inserted: the data files an
append added, read whole; versions that only rewrite files (compaction, manifest
rewrites) or change metadata deliver nothing, and a version that deletes or updates rows
stops the query with ``ChangeCommitInStream`` unless ``skipChangeCommits`` is true (the
version is then skipped entirely, its inserted rows too), as in Delta. With
``readChangeFeed`` the batch is the change feed of ``(a, b]`` (``Table.changes``); the
initial snapshot comes as ``insert`` rows of version ``s``.

``maxFilesPerTrigger`` and ``maxBytesPerTrigger`` (Delta's soft limits: bytes as ``"512m"``,
``"1g"`` or a number) limit a batch to whole versions adding about that many data files or
bytes of data files, whichever is reached first (at least one version per batch; the snapshot
is split by files, in path order). A run with ``Trigger.AvailableNow`` keeps them; Spark's
``Trigger.Once`` (read everything) ignores them, as in Delta.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxBytes, ReadMaxFiles, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

import lamina
from lamina.data.changes import CHANGE_FIELDS, COMMIT_TIMESTAMP, INSERT, NO_DATA_CHANGE, changed_entries
from lamina.data.scan import Scan
from lamina.errors import ChangeCommitInStream, InvalidArgument, RowLineageNotEnabled, SchemaMismatch
from lamina.spark._types import batch_schema
from lamina.spark.changes import ChangeRows, ChangesPartition, change_partitions, feed_of, reads_changes, start_of
from lamina.spark.datasource_options import _bool_opt, _int_opt, _opt, _ref, _time_travel, columns_opt
from lamina.spark.datasource_reader import FilesPartition, read_entries, split_by_size
from lamina.spec.lineage import has_lineage
from lamina.spec.version import VersionManifest

BEFORE_START = -1
_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "p": 1 << 50,
    "pb": 1 << 50,
}


def bytes_opt(options: Mapping[str, str], name: str) -> int | None:
    """A size option as Spark reads one (``JavaUtils.byteStringAsBytes``): ``1048576``, ``512k``,
    ``64m``, ``1g`` (binary units, case-insensitive); at least 1."""
    v = _opt(options, name)
    if v is None:
        return None
    m = re.fullmatch(r"\s*([0-9]+)\s*([a-zA-Z]*)\s*", v)
    unit = _BYTE_UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None or int(m.group(1)) < 1:
        raise InvalidArgument(f"option {name} must be a size in bytes (e.g. 1048576, 512m, 1g), at least 1; got {v!r}")
    return int(m.group(1)) * unit


@dataclass(frozen=True)
class Offset:
    """Where a stream is: every version up to ``version`` delivered, or, while the initial
    snapshot of ``version`` is being delivered, its first ``snapshot_files`` files (by path)."""

    version: int
    snapshot_files: int | None = None

    @property
    def in_snapshot(self) -> bool:
        return self.snapshot_files is not None

    @property
    def before_start(self) -> bool:
        """The marker a stream from the latest version starts at (see the module docstring)."""
        return self.version == BEFORE_START

    def to_json(self) -> dict[str, int]:
        out = {"version": self.version}
        if self.snapshot_files is not None:
            out["snapshot_files"] = self.snapshot_files
        return out

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> Offset:
        try:
            files = j.get("snapshot_files")
            return cls(int(j["version"]), None if files is None else int(files))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InvalidArgument(
                f"offset {j!r} is not a Lamina stream offset ({{'version': n}}); the checkpoint belongs to another source"
            ) from None


def _files_added(vm: VersionManifest) -> int:
    """The data files a version adds rows in (what ``maxFilesPerTrigger`` counts): none for
    versions that only move rows."""
    return 0 if vm.operation in NO_DATA_CHANGE else int(vm.summary.get("added-files", 0))


class SnapshotPartition(FilesPartition):
    """Files of the initial snapshot (their live rows); with the change feed, as inserts of ``version``."""

    def __init__(self, entries: pa.Table, version: VersionManifest | None) -> None:
        super().__init__(entries)
        self.stamp = None if version is None else (version.version, version.timestamp_ms)


class LaminaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of new versions (see the module docstring). An instance plans offsets and
    batches in the driver's Python worker (it caches version manifests and the snapshot's
    files there); a copy pickled at the query's start reads the partitions in the tasks, so
    a partition carries all a task needs but the table's location and the stream's schema."""

    def __init__(self, options: Mapping[str, str], schema: StructType, version: int) -> None:
        if any(_time_travel(options).values()):
            raise InvalidArgument(
                "versionAsOf, timestampAsOf and tag do not apply to streaming reads; "
                "start a stream with startingVersion or startingTimestamp"
            )
        table = _ref(options).open()
        self.uri, self.storage, self.branch = table.uri, dict(table.io.options), table.branch_name
        self.changes = reads_changes(options)
        self.skip_change_commits = _bool_opt(options, "skipChangeCommits")
        self.max_files = _int_opt(options, "maxFilesPerTrigger")
        if self.max_files is not None and self.max_files < 1:
            raise InvalidArgument(f"option maxFilesPerTrigger must be at least 1, got {self.max_files}")
        self.max_bytes = bytes_opt(options, "maxBytesPerTrigger")
        self.options = dict(options)
        # The stream's schema is the one of ``version`` (the latest when it was loaded): rows of
        # every version are read through it (evolved columns mapped by physical name).
        self.schema_vm = table.log.load(version) if version != table.version else table.metadata
        if self.changes and not has_lineage(self.schema_vm):
            raise RowLineageNotEnabled(
                f"a change feed stream of {table.uri} needs row lineage (it pairs updates by row id); "
                "turn it on with table.enable_row_lineage() and stream from that version on"
            )
        scan = Scan(table.io, self.schema_vm, _opt(options, "where"), columns_opt(options))
        self.out_schema = batch_schema(schema)
        self.rows = ChangeRows(self.uri, self.storage, self.schema_vm, scan.predicate, scan.columns, self.out_schema)
        self._table: lamina.Table | None = table
        self._target: int | None = None  # availableNow: the last version this run delivers
        self._vms: dict[int, VersionManifest] = {}
        self._bytes: dict[int, int] = {}  # bytes of data files each version adds (maxBytesPerTrigger)
        self._snapshot: tuple[int, pa.Table] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # What the tasks need travels; the planning state (open table, caches) stays on the driver.
        return {**self.__dict__, "_table": None, "_vms": {}, "_bytes": {}, "_snapshot": None}

    # -- planning (driver) ------------------------------------------------------------------

    @property
    def table(self) -> lamina.Table:
        if self._table is None:  # reads go by location (no catalog needed), on the stream's branch
            self._table = lamina.open_table(self.uri, storage_options=self.storage or None, version=self.branch)
        return self._table

    def _latest(self) -> int:
        return self.table.refresh().version

    def _vm(self, version: int) -> VersionManifest:
        if version not in self._vms:
            self._vms[version] = self.table.log.load(version)
        return self._vms[version]

    def initialOffset(self) -> dict:
        """Where a new query starts: after ``startingVersion - 1`` (or the versions before
        ``startingTimestamp``); else before the start, which the first batch fixes: the latest
        version's snapshot, or (``startingVersion=latest``) the versions after it."""
        if self.changes:  # checked now: the range's versions retained, with row lineage
            feed = feed_of(self.table, self.options, streaming=True)
            start = None if feed is None else feed.start_version
        else:
            start = start_of(self.table, self.options)
        return Offset(BEFORE_START if start is None else start).to_json()

    @property
    def _from_latest(self) -> bool:
        """``startingVersion=latest``: no snapshot, only versions after the start."""
        return (_opt(self.options, "startingVersion") or "").strip().lower() == "latest"

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _top(self) -> int:
        return self._target if self._target is not None else self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return super().getDefaultReadLimit()

    def _budget(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        """(files, bytes) a batch may take: the options' limits, unless Spark asks for everything
        (``ReadAllAvailable``: Trigger.Once). Spark passes one limit (the default this source
        reports); the other option applies too."""
        if isinstance(limit, ReadMaxFiles):
            return limit.max_files, self.max_bytes
        if isinstance(limit, ReadMaxBytes):
            return self.max_files, limit.max_bytes
        return None, None

    def _bytes_added(self, version: int) -> int:
        """Bytes of the data files ``version`` adds rows in (what ``maxBytesPerTrigger`` counts)."""
        if version not in self._bytes:
            vm = self._vm(version)
            if vm.operation in NO_DATA_CHANGE or _files_added(vm) == 0:
                self._bytes[version] = 0
            else:
                _, new = changed_entries(self.table.io, self._vm(version - 1), vm)
                self._bytes[version] = int(pc.sum(new.column("size")).as_py() or 0)
        return self._bytes[version]

    @staticmethod
    def _over(files: tuple[int | None, int | None], took: tuple[int, int], cost: tuple[int, int]) -> bool:
        """Whether taking ``cost`` (files, bytes) after ``took`` passes a budget (something taken already)."""
        return (took[0] > 0 or took[1] > 0) and any(b is not None and t + c > b for b, t, c in zip(files, took, cost))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch: up to the latest version (availableNow: the one at the
        run's start); with ``maxFilesPerTrigger`` / ``maxBytesPerTrigger`` whole versions adding
        about that many data files or bytes, at least one version (the snapshot is split by files)."""
        at = Offset.from_json(start)
        budget = self._budget(limit)
        limited = budget != (None, None)
        took = (0, 0)
        if at.before_start:  # the first batch: it fixes the start (the snapshot's version)
            top = self._top()
            if self._from_latest:
                return Offset(top).to_json()  # an empty batch: only later versions are delivered
            files = self._snapshot_entries(top)
            k = self._snapshot_take(files, 0, budget) if limited else files.num_rows
            return Offset(top, k if k < files.num_rows else None).to_json()
        if at.snapshot_files is not None:  # in the snapshot
            files = self._snapshot_entries(at.version)
            k = self._snapshot_take(files, at.snapshot_files, budget) if limited else files.num_rows
            if k < files.num_rows:
                return Offset(at.version, k).to_json()
            rest = files.slice(at.snapshot_files)
            took = (rest.num_rows, int(pc.sum(rest.column("size")).as_py() or 0))
        top = self._top()
        if not limited:
            return Offset(max(top, at.version)).to_json()
        v = at.version
        while v < top:
            cost = (_files_added(self._vm(v + 1)), self._bytes_added(v + 1) if budget[1] is not None else 0)
            if self._over(budget, took, cost):
                break
            v, took = v + 1, (took[0] + cost[0], took[1] + cost[1])
        return Offset(v).to_json()

    def _snapshot_take(self, files: pa.Table, start: int, budget: tuple[int | None, int | None]) -> int:
        """How many of the snapshot's files (by path) a batch starting at file ``start`` delivers:
        up to the budget, at least one."""
        sizes = files.column("size").to_numpy()[start:]
        n = len(sizes)
        if budget[0] is not None:
            n = min(n, budget[0])
        if budget[1] is not None:
            n = min(n, int(np.searchsorted(np.cumsum(sizes), budget[1], side="right")))
        return start + max(n, 1) if len(sizes) else start

    def _snapshot_entries(self, version: int) -> pa.Table:
        """The live files of ``version`` ordered by path: the snapshot a stream starts with."""
        if self._snapshot is None or self._snapshot[0] != version:
            entries = (
                Scan(self.table.io, self._vm(version), _opt(self.options, "where"), self.rows.columns).plan().entries
            )
            self._snapshot = (version, entries.sort_by("path"))
        return self._snapshot[1]

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """The rows of the offsets ``(start, end]``, planned from metadata (the same plan
        whenever it is asked, so a restarted query replays its logged batch exactly)."""
        a, b = Offset.from_json(start), Offset.from_json(end)
        out: list[InputPartition] = []
        if a == b:
            return out
        if a.before_start:  # the first batch: the snapshot of the version its end names, or nothing
            if self._from_latest:
                return []
            a = Offset(b.version, 0)
        if a.snapshot_files is not None:  # in the snapshot
            files = self._snapshot_entries(a.version)
            upto = b.snapshot_files if b.snapshot_files is not None else files.num_rows
            chosen = files.slice(a.snapshot_files, upto - a.snapshot_files)
            stamp = self._vm(a.version) if self.changes else None
            out += [SnapshotPartition(e, stamp) for e in split_by_size(chosen)]
        if not b.in_snapshot and b.version > a.version:
            steps = [(self._vm(v - 1), self._vm(v)) for v in range(a.version + 1, b.version + 1)]
            self._check_schema(steps)
            if self.changes:
                out += change_partitions(steps, None)
            else:
                added = [e for e in (self._inserted(older, newer) for older, newer in steps) if e is not None]
                if added:
                    out += [
                        FilesPartition(e) for e in split_by_size(pa.concat_tables(added, promote_options="default"))
                    ]
        return out

    def _check_schema(self, steps: list[tuple[VersionManifest, VersionManifest]]) -> None:
        """Refuse versions after the stream's schema whose schema differs from it: the rows of a
        query have one schema. A restarted query takes the table's latest schema."""
        for _, vm in steps:
            if vm.version > self.schema_vm.version and vm.schema != self.schema_vm.schema:
                raise SchemaMismatch(
                    f"the schema of {self.uri} changed in version {vm.version}, after this stream started (with the "
                    f"schema of version {self.schema_vm.version}); restart the query from its checkpoint to read on "
                    "with the new schema"
                )

    def _inserted(self, older: VersionManifest, newer: VersionManifest) -> pa.Table | None:
        """The files whose rows ``newer`` inserted (with their deletion vectors as in ``newer``):
        the files it added, when it removed none and changed no deletion vector. None for a
        version that only moves rows (compaction) or changes metadata; a version that deletes
        or updates rows raises ``ChangeCommitInStream``, or is skipped with ``skipChangeCommits``."""
        if newer.operation in NO_DATA_CHANGE:
            return None
        gone, new = changed_entries(self.table.io, older, newer)
        if gone.num_rows == 0:
            return new if new.num_rows else None
        if self.skip_change_commits:
            return None
        raise ChangeCommitInStream(
            f"version {newer.version} of {self.uri} ({newer.operation}) deletes or updates rows, which a stream of "
            "appends cannot deliver; set option skipChangeCommits=true to skip such versions (their inserted rows "
            "too), or read the change feed with readChangeFeed=true"
        )

    def commit(self, end: dict) -> None:
        """Spark will not ask for what precedes ``end`` again: forget the version manifests
        (and the snapshot) before it. A Lamina table keeps no reader state."""
        done = Offset.from_json(end)
        self._vms = {v: vm for v, vm in self._vms.items() if v >= done.version}
        if not done.in_snapshot:
            self._snapshot = None

    # -- reading (tasks) --------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChangesPartition):
            yield from self.rows.read(partition.steps)
            return
        assert isinstance(partition, FilesPartition)  # one of self.partitions()
        scan = self.rows.scan()
        stamp = partition.stamp if isinstance(partition, SnapshotPartition) else None
        if stamp is None:
            yield from read_entries(scan, partition.entries, list(scan.output_columns), self.out_schema)
            return
        data_schema = pa.schema(list(self.out_schema)[: -len(CHANGE_FIELDS)])
        version, ts = stamp
        for b in read_entries(scan, partition.entries, list(scan.output_columns), data_schema):
            n = b.num_rows
            cols = [
                *b.columns,
                pa.repeat(pa.scalar(INSERT), n).cast(pa.string()),
                pa.repeat(pa.scalar(version, pa.int64()), n),
                pc.cast(
                    pa.repeat(pa.scalar(ts, pa.timestamp("ms", tz="UTC")), n),
                    self.out_schema.field(COMMIT_TIMESTAMP).type,
                ),
            ]
            yield pa.RecordBatch.from_arrays(cols, schema=self.out_schema)
