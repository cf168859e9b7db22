"""The change data feed from Spark: ``spark.read.format("lamina").option("readChangeFeed", "true")``.

Delta's options and semantics: ``startingVersion`` / ``endingVersion`` are both inclusive
(the changes *of* versions a..b), so they map to Lamina's ``Table.changes(a - 1, b)``, whose
range is (start, end]; ``startingTimestamp`` / ``endingTimestamp`` select the versions
committed at or after / at or before them. The range is resolved and checked when the
DataFrame is loaded (bad input fails then, before a task runs) and pinned: every query of
the DataFrame reads the same versions. Each read task computes the changes of some of the
range's versions with Lamina's change engine (``lamina.data.changes.version_changes``: only
the manifests, files and deletion vectors that differ are read); versions that move rows
without changing them (compaction) get no task. ``lamina.spark.read_changes`` is the Spark
twin of ``Table.changes``: same arguments, same (start, end] range.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

import lamina
from lamina.data.changes import NO_DATA_CHANGE, change_schema, version_changes
from lamina.data.scan import Scan
from lamina.errors import InvalidArgument
from lamina.expr import Expr
from lamina.io import FileIO
from lamina.spark._target import TableRef
from lamina.spark._types import batch_schema, spark_schema
from lamina.spark.datasource_options import _bool_opt, _int_opt, _opt, _ref, columns_opt, timestamp_opt
from lamina.spark.datasource_reader import balanced_bins
from lamina.spec.version import VersionManifest
from lamina.table.changes import ChangeFeed, resolve_start

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

READ_CHANGE_FEED = "readChangeFeed"


def reads_changes(options: Mapping[str, str]) -> bool:
    return _bool_opt(options, READ_CHANGE_FEED)


def _starting_version(options: Mapping[str, str]) -> int | None:
    """``startingVersion`` as a number (None if absent or ``latest``, a streaming start)."""
    v = _opt(options, "startingVersion")
    if v is None or v.strip().lower() == "latest":
        return None
    version = _int_opt(options, "startingVersion")
    if version is None or version < 0:
        raise InvalidArgument(
            f"option startingVersion must be a version number >= 0 (or 'latest' when streaming), got {v!r}"
        )
    return version


def _one_of(options: Mapping[str, str], version: str, timestamp: str) -> None:
    if _opt(options, version) is not None and _opt(options, timestamp) is not None:
        raise InvalidArgument(f"pass either {version} or {timestamp}, not both")


def _range_options(
    options: Mapping[str, str], streaming: bool
) -> tuple[int | None, str | int | None, int | None, str | int | None]:
    """(startingVersion, startingTimestamp, endingVersion, endingTimestamp), checked."""
    _one_of(options, "startingVersion", "startingTimestamp")
    _one_of(options, "endingVersion", "endingTimestamp")
    start, start_ts = _starting_version(options), timestamp_opt(options, "startingTimestamp")
    end, end_ts = _int_opt(options, "endingVersion"), timestamp_opt(options, "endingTimestamp")
    if streaming and (end is not None or end_ts is not None):
        raise InvalidArgument(
            "endingVersion and endingTimestamp apply to batch reads; a stream reads every new version"
        )
    if start is not None and end is not None and end < start:
        raise InvalidArgument(
            f"endingVersion {end} is before startingVersion {start}; both are inclusive (the changes of versions "
            f"{start}..{end} need endingVersion >= startingVersion)"
        )
    return start, start_ts, end, end_ts


def _after(start: int | None) -> int | None:
    """The version a range with Delta's inclusive ``startingVersion`` starts after. Version 0
    creates the table and holds no rows: a range starting there starts after it."""
    return None if start is None else max(start - 1, 0)


def feed_of(table: lamina.Table, options: Mapping[str, str], *, streaming: bool = False) -> ChangeFeed | None:
    """The change feed the options name (Delta's inclusive ``startingVersion``..``endingVersion``,
    or by timestamp), checked now; None when no start is given (a stream from its snapshot or
    from ``latest``). ``streaming``: the end is the latest version (ending options refused)."""
    start, start_ts, end, end_ts = _range_options(options, streaming)
    if start is None and start_ts is None:
        return None
    return table.changes(
        _after(start),
        end,
        start_timestamp=start_ts,
        end_timestamp=end_ts,
        where=_opt(options, "where"),
        columns=columns_opt(options),
    )


def start_of(table: lamina.Table, options: Mapping[str, str]) -> int | None:
    """The version a stream of appends starts after, by ``startingVersion`` or
    ``startingTimestamp`` (as ``feed_of``, without the change feed's need of row lineage);
    None when neither is given (or ``startingVersion`` is ``latest``)."""
    start, start_ts, _, _ = _range_options(options, True)
    if start is None and start_ts is None:
        return None
    return resolve_start(table, _after(start), start_ts).version


def changes_spark_schema(scan: Scan) -> StructType:
    """The Spark schema of change rows read through ``scan`` (its columns, then the change columns)."""
    return spark_schema(change_schema(scan))


class ChangesPartition(InputPartition):
    """Versions one read task computes the changes of: (parent, version) manifests."""

    def __init__(self, steps: list[tuple[VersionManifest, VersionManifest]]) -> None:
        super().__init__([new.version for _, new in steps])
        self.steps = steps


def change_partitions(
    steps: Sequence[tuple[VersionManifest, VersionManifest]], parts: int | None
) -> list[ChangesPartition]:
    """The versions of ``steps`` in about ``parts`` read tasks (default: the driver's cores), by
    the rows each version added and removed; versions that change no row (compaction) are left out."""
    steps = [s for s in steps if s[1].operation not in NO_DATA_CHANGE]
    if not steps:
        return []
    weight = np.array(
        [1 + int(new.summary.get("added-records", 0)) + int(new.summary.get("removed-records", 0)) for _, new in steps],
        dtype=np.int64,
    )
    bins = balanced_bins(weight, parts or os.cpu_count() or 1)
    return [ChangesPartition([s for s, b in zip(steps, bins) if b == k]) for k in range(int(bins.max()) + 1)]


class ChangeRows:
    """What a task needs to compute changes: the table's location and a scan of the version
    whose schema the rows follow (columns, predicate). Pickled into every task."""

    def __init__(
        self,
        uri: str,
        storage: Mapping[str, Any],
        vm: VersionManifest,
        predicate: Expr,
        columns: Sequence[str] | None,
        out_schema: pa.Schema,
    ) -> None:
        self.uri, self.storage = uri, dict(storage)
        self.vm, self.predicate, self.columns = vm, predicate, None if columns is None else list(columns)
        self.out_schema = out_schema

    def scan(self) -> Scan:
        return Scan(FileIO(self.uri, self.storage or None), self.vm, self.predicate, self.columns)

    def read(self, steps: Sequence[tuple[VersionManifest, VersionManifest]]) -> Iterator[pa.RecordBatch]:
        scan = self.scan()
        for older, newer in steps:
            for b in version_changes(scan.io, older, newer, scan).to_batches():
                if b.num_rows:
                    yield b.cast(self.out_schema)


class LaminaChangesReader(DataSourceReader):
    """The change feed of the range the DataFrame pinned at ``load()`` (its versions after
    ``start``, up to ``end``), one task per group of versions."""

    def __init__(self, options: Mapping[str, str], schema: StructType, start: int, end: int) -> None:
        table = _ref(options).open()
        feed = table.changes(start, end, where=_opt(options, "where"), columns=columns_opt(options))
        self.steps = feed.steps()
        scan = feed.reader
        self.rows = ChangeRows(table.uri, table.io.options, scan.vm, scan.predicate, scan.columns, batch_schema(schema))
        self.num_partitions = _int_opt(options, "numPartitions")

    def partitions(self) -> list[ChangesPartition]:
        return change_partitions(self.steps, self.num_partitions) or [ChangesPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangesPartition)  # one of self.partitions()
        yield from self.rows.read(partition.steps)


def read_changes(
    spark: SparkSession,
    target: str | lamina.Table,
    start_version: int | str | None = None,
    end_version: int | str | None = None,
    *,
    start_timestamp: Any = None,
    end_timestamp: Any = None,
    start_tag: str | None = None,
    end_tag: str | None = None,
    where: str | Expr | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    catalog: Any = None,
    branch: str | None = None,
) -> DataFrame:
    """A DataFrame of the changes of the versions in (start, end]: ``Table.changes`` in Spark,
    same arguments and rows (``_change_type``, ``_commit_version``, ``_commit_timestamp`` after
    the columns); ``branch``: of that branch's versions. The range is resolved and checked now; the rows are computed by Spark tasks
    through ``format("lamina").option("readChangeFeed", "true")`` (any store)."""
    from lamina.spark.datasource import register
    from lamina.spark.read import where_option

    ref = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch)
    for number, tag, end in ((start_version, start_tag, "start"), (end_version, end_tag, "end")):
        if number is not None and tag is not None:
            raise InvalidArgument(f"pass {end}_version or {end}_tag, not both (a tag's name is a version too)")
    feed = ref.open().changes(
        start_version if start_tag is None else start_tag,
        end_version if end_tag is None else end_tag,
        start_timestamp=start_timestamp,
        end_timestamp=end_timestamp,
        where=where,
        columns=columns,
    )
    if not feed.versions:  # an empty range (start == end), which Delta's inclusive options cannot name
        return spark.createDataFrame([], changes_spark_schema(feed.reader))
    register(spark)
    reader = (
        spark.read.format("lamina")
        .options(**ref.data_source_options())
        .option(READ_CHANGE_FEED, "true")
        .option("startingVersion", str(feed.start_version + 1))
        .option("endingVersion", str(feed.end_version))
    )
    if where is not None:
        text = where if isinstance(where, str) else where_option(feed.reader)
        if text is None:
            raise InvalidArgument(
                f"read_changes: where {where!r} has no Lamina SQL form (a literal such as inf or bytes); "
                "pass it as SQL text"
            )
        reader = reader.option("where", text)
    if columns is not None:
        reader = reader.option("columns", json.dumps(list(columns)))
    return reader.load()
