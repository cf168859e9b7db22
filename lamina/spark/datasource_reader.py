"""The ``lamina`` data source's batch reader: a version's planned files in balanced read tasks.

The driver plans the files with Lamina's planner, pinned to the version resolved at
``load()`` and pruned by the ``where`` option; each task reads its files with Lamina's own
reader and yields Arrow batches (see ``LaminaReader`` for why no filter is pushed). The
streaming reader (``lamina.spark.stream_source``) reads its files the same way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

import lamina
from lamina.data import deletes
from lamina.data.scan import Scan
from lamina.expr import AlwaysTrue, Expr, to_arrow_filter
from lamina.io import FileIO
from lamina.spark._types import batch_schema
from lamina.spark.datasource_options import _int_opt, _opt, _ref, columns_opt
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID

TARGET_SPLIT_BYTES = 128 * 2**20  # as spark.sql.files.maxPartitionBytes
# What a read task needs of a planned file's entry (besides its deletion vector's dv_* columns).
_READ_ENTRY_COLUMNS = ("path", "size", FIRST_ROW_ID, DATA_VERSION)


class FilesPartition(InputPartition):
    """The data files one read task reads: their planned entries (path, size, deletion vector)."""

    def __init__(self, entries: pa.Table) -> None:
        super().__init__(entries)
        self.entries = entries

    @property
    def files(self) -> list[tuple[str, deletes.DV | None]]:
        """(table-relative path, deletion vector or None) of each file."""
        return list(zip(self.entries.column("path").to_pylist(), deletes.dvs_of_plan(self.entries)))


def balanced_bins(sizes: np.ndarray, bins: int) -> np.ndarray:
    """Bin of each file so bins hold about equal bytes: largest first, dealt in snake order
    (0..k-1, k-1..0, …), vectorized. Returns the bin index per input position."""
    n = len(sizes)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    bins = max(1, min(bins, n))
    order = np.argsort(-sizes, kind="stable")
    rank = np.arange(n)
    rnd, pos = np.divmod(rank, bins)
    dealt = np.where(rnd % 2 == 0, pos, bins - 1 - pos)
    out = np.empty(n, dtype=np.int64)
    out[order] = dealt
    return out


class LaminaReader(DataSourceReader):
    """Reads one version of a table, restricted to the ``where`` option.

    Spark 4.3 plans a Python data source's read (this reader, pickled, and its partitions)
    once per DataFrame and reuses that plan for every query of the DataFrame, and for
    every scan of it within one query (unions, self-joins), whatever their filters: the
    plan is kept on the provider instance the DataFrame holds and is replaced only by a
    query with filters Spark hands to the source. So this reader holds nothing that belongs to one
    query: it takes no pushed filters (no ``pushFilters``; Spark evaluates each query's
    filters itself) and reads what belongs to the DataFrame: its options and its version.

    The tasks read their files with Lamina's own reader (``Scan.read_files``: deleted rows
    dropped, evolved schemas mapped from physical names, defaults filled), on the version's
    metadata the reader carries.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, version: int) -> None:
        table = _ref(options).open()
        self.uri, self.storage = table.uri, dict(table.io.options)  # reads go by location: no catalog needed
        self.branch = table.branch_name
        scan = table.scan(where=_opt(options, "where"), columns=columns_opt(options), version=version)
        self.version = version  # partitions() and read() see this version whatever commits later
        self.metadata = scan.vm
        self.columns = scan.columns
        self.out_schema = batch_schema(schema)
        self.predicate: Expr = scan.predicate
        self.num_partitions = _int_opt(options, "numPartitions")

    def _scan(self) -> Scan:
        return Scan(
            FileIO(self.uri, self.storage or None),
            self.metadata,
            self.predicate,
            self.columns,
            log=_LogByLocation(self.uri, self.storage, self.branch),
        )

    def partitions(self) -> list[FilesPartition]:
        entries = self._scan().plan().entries
        return [FilesPartition(e) for e in split_by_size(entries, self.num_partitions)] or [FilesPartition(entries)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilesPartition)  # one of self.partitions()
        scan = self._scan()
        yield from read_entries(scan, partition.entries, list(scan.output_columns), self.out_schema)


class _LogByLocation:
    """The log of a read's table (or branch), opened by location only when a task asks it
    whether the read's version is still kept: when a file the version references is missing,
    as when a DataFrame is queried again after expiry removed its version (Scan._raise_if_no_longer_kept).
    A task carries no open log."""

    def __init__(self, uri: str, storage: Mapping[str, Any], branch: str) -> None:
        self.uri, self.storage, self.branch = uri, storage, branch

    def is_live(self, version: int) -> bool:
        table = lamina.open_table(self.uri, storage_options=self.storage or None)
        return (table if self.branch == table.branch_name else table.branch(self.branch)).log.is_live(version)


def split_by_size(entries: pa.Table, parts: int | None = None) -> list[pa.Table]:
    """``entries`` (planned files; only path, size, the deletion vector and the row lineage
    kept) in groups of about equal bytes, one per read task: ``parts`` groups, or enough for
    128 MB each and at least the driver's cores. No files: no groups."""
    entries = entries.select([c for c in entries.column_names if c in _READ_ENTRY_COLUMNS or c.startswith("dv_")])
    if entries.num_rows == 0:
        return []
    sizes = entries.column("size").to_numpy()
    k = parts or max(math.ceil(int(sizes.sum()) / TARGET_SPLIT_BYTES), os.cpu_count() or 1)
    assigned = balanced_bins(sizes, k)
    order = np.argsort(assigned, kind="stable")
    cuts = np.flatnonzero(np.diff(assigned[order])) + 1
    grouped = entries.take(pa.array(order))
    bounds = [0, *cuts.tolist(), entries.num_rows]
    return [grouped.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]


def read_entries(scan: Scan, entries: pa.Table, columns: list[str], out_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The live rows of the files ``entries`` (deleted rows dropped) of ``scan``'s version that
    match its predicate, as Arrow batches of ``out_schema`` (what Spark expects)."""
    if not entries.num_rows:
        return
    filt = None if isinstance(scan.predicate, AlwaysTrue) else to_arrow_filter(scan.predicate)
    # Two reads ahead of the rows handed to Spark: a task holds a few files' rows at most.
    for t in scan.read_files(entries, columns, filt, tasks_ahead=2):
        for b in t.to_batches():
            if b.num_rows:
                yield b.cast(out_schema)
