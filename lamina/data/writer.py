"""Writing data files: rows -> Parquet files laid out by partition, with their stats.

Nothing written here is visible until a commit references it; every file name
starts with the write id so cleanup can tell which write left it behind.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lamina.data.deletes import strictly_increasing
from lamina.io import FileIO
from lamina.manifest.entries import column_stats, cut_bounds
from lamina.spec import content as C
from lamina.spec.layout import new_data_path
from lamina.spec.lineage import LINEAGE_COLUMNS, LINEAGE_FIELDS, split_lineage, with_lineage
from lamina.spec.partition import PartitionSpec
from lamina.spec.properties import TableProperties, WriterProperties
from lamina.spec.schema import Schema, field_id_of
from lamina.spec.stats import StatsPolicy

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-write")
_io_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-store")


def _partition_groups(pvals: pa.Table) -> list[tuple[int, np.ndarray]]:
    """Group row indices by partition tuple, vectorized: (first row, row indices) per group."""
    n = pvals.num_rows
    key = np.zeros(n, dtype=np.int64)
    for col in pvals.columns:
        enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
        codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        key = key * (len(enc.dictionary) + 1) + codes
    order = np.argsort(key, kind="stable")
    sk = key[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    ends = np.r_[starts[1:], n]
    return [(int(order[s]), order[s:e]) for s, e in zip(starts, ends)]


class PendingWrites:
    """Data files encoded and on their way to storage; ``wait()`` before the commit point."""

    def __init__(self, futures: list[Future[None]]) -> None:
        self._futures = futures

    def wait(self) -> None:
        for f in self._futures:
            f.result()  # re-raises a failed write: the commit then never happens
        self._futures = []


_DICTIONARY_SAMPLE_ROWS = 10_000
# Below this many rows a sample decides little and choosing costs (count_distinct per column,
# a visible share of a small append): the choice is by type (_schema_facts).
_DICTIONARY_MIN_ROWS = 8_192


def _dictionary_columns(data: pa.Table) -> list[str] | bool:
    """The columns worth dictionary-encoding: those with at most half as many distinct
    values as rows in a sample (the first rows).

    Parquet's writer otherwise dictionary-encodes every column until a row group's
    dictionary outgrows 1 MiB: for keys, timestamps or measurements that is mostly
    unique values, that is hashing every value for nothing and, below 1 MiB, a larger
    file that takes longer to encode. Small files dictionary-encode their string, binary and
    dictionary columns only: text repeats, numbers in a small file mostly do not, and each
    column given a dictionary costs (much of a small file's encoding time, and its size). Tables
    with nested columns keep Parquet's default (a choice per leaf column would need their
    Parquet paths)."""
    facts = _schema_facts(data.schema)
    if facts.nested:
        return True
    if data.num_rows < _DICTIONARY_MIN_ROWS:
        return facts.text or False
    sample = data.slice(0, _DICTIONARY_SAMPLE_ROWS)
    return [name for name, col in zip(sample.column_names, sample.columns) if _few_distinct(col)]


def _few_distinct(sample: pa.ChunkedArray) -> bool:
    # (the distinct values, null counted as one: ``unique`` is cheaper than
    # ``count_distinct(mode="all")``, a hash aggregate, on mostly distinct values)
    if pa.types.is_dictionary(sample.type):
        return True  # already a dictionary: Parquet writes it as one, no values hashed
    if _strictly_increasing(sample):
        return False  # every value distinct (ids, row ids, sorted keys): no need to hash them to know
    try:
        # A first look at the sample's head: nearly every value distinct there (keys, amounts,
        # free text, other ids), the column is not one to give a dictionary, for a fraction of
        # the hashing. Only values that repeat the head's with a period of
        # thousands of rows would have been judged otherwise.
        head = sample.slice(0, _DISTINCT_HEAD_ROWS)
        if len(sample) > 2 * _DISTINCT_HEAD_ROWS and len(pc.unique(head)) >= 0.95 * _DISTINCT_HEAD_ROWS:
            return False
        return len(pc.unique(sample)) * 2 <= len(sample)
    except pa.ArrowNotImplementedError:  # a type without the kernel (null, ...): Parquet decides
        return True


_DISTINCT_HEAD_ROWS = 2_000


def _strictly_increasing(sample: pa.ChunkedArray) -> bool:
    """Whether an integer column's sample, without nulls, strictly increases: one comparison
    pass, a twentieth of hashing its values."""
    if not pa.types.is_integer(sample.type) or sample.null_count or len(sample) < 2:
        return False
    return strictly_increasing((sample.combine_chunks() if isinstance(sample, pa.ChunkedArray) else sample).to_numpy())


class _SchemaFacts(NamedTuple):
    statistics_columns: list[str] | bool
    nested: bool  # a column is nested
    text: list[str]  # the string, binary and dictionary columns
    # Parquet's own schema reads back as these names, types and nullability: the Arrow schema
    # pyarrow stores in a file's footer (ARROW:schema) adds nothing a reader needs (_write_one)
    parquet_reads_back: bool


_facts_lock = threading.Lock()
_facts: list[tuple[pa.Schema, _SchemaFacts]] = []  # the latest physical schemas first


def _text_like(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_dictionary(t)
    )


def _schema_facts(schema: pa.Schema) -> _SchemaFacts:
    """What the writer decides by a data file's schema alone. Memoized by schema equality over
    the few latest schemas, not a hash: hashing a pyarrow schema hashes every field (on every
    file, which adds up on wide tables), comparing is one C++ call."""
    with _facts_lock:
        for known, facts in _facts:
            if known.equals(schema):
                return facts
    facts = _SchemaFacts(
        _statistics_columns(schema),
        any(pa.types.is_nested(f.type) for f in schema),
        [f.name for f in schema if _text_like(f.type)],
        _parquet_reads_back(schema),
    )
    with _facts_lock:
        _facts.insert(0, (schema, facts))
        del _facts[16:]
    return facts


def statistics_columns(schema: pa.Schema) -> list[str] | bool:
    """The Parquet leaf columns to write row-group statistics for: all but float ones (see
    ``_statistics_columns``; memoized)."""
    return _schema_facts(schema).statistics_columns


def _parquet_reads_back(schema: pa.Schema) -> bool:
    """Whether a file of ``schema`` written without the Arrow schema reads back as ``schema``
    (names, types, nullability): found by writing and reading an empty one. Not for a
    time zone other than UTC, second timestamps, date64, large strings or binaries."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink, store_schema=False)
    return pq.read_schema(pa.BufferReader(sink.getvalue())).equals(schema)


def _statistics_columns(schema: pa.Schema) -> list[str] | bool:
    """The Parquet leaf columns to write row-group statistics for: all but float ones.

    Parquet leaves NaN out of a float column's min/max, and readers that skip row groups
    by them (parquet-java under Spark, Arrow) would skip a group whose only rows matching
    ``x > 5`` or ``x != 0`` are NaN, which Spark's semantics (and Lamina's) select. Lamina
    prunes by its manifests' bounds, which are unknown for a float column holding NaN.
    """
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, schema).close()
    leaves = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    kept = []
    for i in range(len(leaves)):
        c = leaves.column(i)
        if c.physical_type not in ("FLOAT", "DOUBLE") and c.logical_type.type != "FLOAT16":
            kept.append(c.path)
    return True if len(kept) == len(leaves) else kept


# On local disk a small file is written in a few system calls, less than handing it to a
# store thread and waiting for it costs (on a busy machine a thread hand-off can wait a
# scheduler slice); larger local files and every object-store put still overlap with the
# manifests being built.
LOCAL_INLINE_PUT_BYTES = 1 << 20


def _encodings(data: pa.Table, integer_encoding: str) -> dict[str, list[str] | bool | dict[str, str] | None]:
    """The writer's ``use_dictionary`` and ``column_encoding`` for ``data``: dictionaries for
    the columns with few distinct values (``_dictionary_columns``); with ``integer_encoding``
    "delta", DELTA_BINARY_PACKED for the other integer, date and timestamp columns. Keys and
    times (ids, event times: increasing, or close) take a few bits per value instead of 8
    bytes through snappy, and decode faster, which is what a merge's key read and a
    compaction's read cost. Small files (under ``_DICTIONARY_MIN_ROWS`` rows: the integer
    encoding property's 8,192) and nested data get no delta encoding."""
    dictionary = _dictionary_columns(data)
    # (a bool: True for nested data, Parquet's default; False, none, only for a small file)
    if integer_encoding != "delta" or isinstance(dictionary, bool) or data.num_rows < _DICTIONARY_MIN_ROWS:
        return {"use_dictionary": dictionary}
    delta = {
        f.name: "DELTA_BINARY_PACKED"
        for f in data.schema
        if f.name not in dictionary
        and (pa.types.is_integer(f.type) or pa.types.is_date32(f.type) or pa.types.is_timestamp(f.type))
    }
    return {"use_dictionary": dictionary, "column_encoding": delta or None}


class RowGroups(NamedTuple):
    """The table's row group limits (``write.parquet.row-group-size-bytes`` and
    ``write.parquet.row-group-limit``)."""

    max_bytes: int = TableProperties.WRITE_PARQUET_ROW_GROUP_SIZE_BYTES.default
    max_rows: int = TableProperties.WRITE_PARQUET_ROW_GROUP_LIMIT.default

    @classmethod
    def of(cls, writer: WriterProperties) -> RowGroups:
        return cls(writer.row_group_bytes, writer.row_group_rows)

    def rows_for(self, data: pa.Table) -> int:
        """Rows per row group for ``data``: at most ``max_rows``, and as many as fit in
        ``max_bytes`` of the rows' Arrow (uncompressed) size. parquet-java measures its
        buffered, encoded bytes instead, which compression makes smaller: Lamina's row
        groups of the same rows are at most as large, in bytes, as Spark's."""
        if data.num_rows == 0 or data.nbytes <= self.max_bytes:
            return max(1, min(self.max_rows, data.num_rows))
        return max(1, min(self.max_rows, self.max_bytes * data.num_rows // data.nbytes))


def _write_one(
    io: FileIO,
    path: str,
    data: pa.Table,
    compression: str,
    futures: list[Future[None]] | None = None,
    integer_encoding: str = "delta",
    small_file_bytes: int = 0,
    row_groups: RowGroups | None = None,
) -> tuple[int, pq.FileMetaData | None]:
    """Encode ``data`` as Parquet and store it at ``path``; returns its size, and its footer
    where it holds column statistics (``column_stats`` takes them from there). ``row_groups``:
    the table's row group limits (``RowGroups``; default: the properties' defaults).

    Every file is compressed with ``compression`` (the table's ``write.parquet.compression``):
    a table stores what its codec says, small files too (left uncompressed, the small files
    appends per partition leave took much more space, and compaction leaves a partition's
    one file as it is). Rows taking fewer than ``small_file_bytes`` in Arrow
    (``write.parquet.small-file-bytes``) are written without footer statistics: their
    statistics are in the manifest, which is what prunes them, and with one row group the
    footer's would prune nothing more, while parsing them is work on every read. Stored row
    ids keep theirs: a publish by rebase reads their maximum there. Nor do such files carry
    the Arrow schema (ARROW:schema) when Parquet's own schema reads back as the same names,
    types and nullability (``_parquet_reads_back``): decoding it is a fixed cost of every
    read, and readers conform every file to the table's schema anyway.

    With ``futures``, the store write is queued and its future appended, so the
    caller can build manifests while the bytes go to disk.
    """
    sink = pa.BufferOutputStream()
    small = data.nbytes < small_file_bytes
    footer: list[pq.FileMetaData] | None = None if small else []
    pq.write_table(
        data,
        sink,
        row_group_size=(row_groups or RowGroups()).rows_for(data),
        compression=compression,
        write_statistics=([c for c in LINEAGE_COLUMNS if c in data.column_names] or False)
        if small
        else statistics_columns(data.schema),
        store_schema=not (small and _schema_facts(data.schema).parquet_reads_back),
        metadata_collector=footer,
        **_encodings(data, integer_encoding),
    )
    buf = sink.getvalue()
    if futures is None or (io.is_local and buf.size <= LOCAL_INLINE_PUT_BYTES):
        io.put_new(path, buf)
    else:
        futures.append(_io_pool.submit(io.put_new, path, buf))
    return buf.size, (footer[0] if footer else None)


def write_data_files(
    io: FileIO,
    schema: Schema,
    spec: PartitionSpec | None,
    data: pa.Table,
    write_id: str,
    max_rows_per_file: int,
    compression: str = "snappy",
    pending: PendingWrites | None = None,
    *,
    stats: StatsPolicy,
    integer_encoding: str = "delta",
    small_file_bytes: int = 0,
    row_groups: RowGroups | None = None,
) -> list[dict[str, Any]]:
    """Write ``data`` (already conformed to ``schema``, optionally followed by the row lineage
    columns of lamina.spec.lineage) and return one entry dict per file, with the column
    statistics the table's policy ``stats`` keeps. Files of fewer than ``small_file_bytes``
    of rows: see ``_write_one``; ``row_groups``: the row group limits.

    With ``pending``, a single file's store write overlaps with what the caller does
    next; the caller must ``pending.wait()`` before committing.
    """
    if data.num_rows == 0:
        return []
    jobs: list[tuple[pa.Table, dict[str, Any], str | None]] = []
    groups: list[tuple[str | None, pa.Table, dict[str, Any]]]
    if spec is None or spec.is_unpartitioned:
        groups = [(None, data, {})]
    else:
        pvals = spec.compute(data, schema)
        groups = []
        for first, idx in _partition_groups(pvals):
            scalars = {pf.name: pvals.column(i)[first] for i, pf in enumerate(spec.fields)}
            row = {k: v.as_py() for k, v in scalars.items()}
            part = {C.pmin_col(pf.field_id): scalars[pf.name] for pf in spec.fields}
            part.update({C.pmax_col(pf.field_id): scalars[pf.name] for pf in spec.fields})
            groups.append((spec.path_for(row), data.take(pa.array(idx)), part))
    for pdir, rows, part in groups:
        for start in range(0, rows.num_rows, max_rows_per_file):
            jobs.append((rows.slice(start, max_rows_per_file), part, pdir))

    # One file: queue its store write and let the caller go on. Many files: they are
    # written in parallel right here.
    futures = pending._futures if pending is not None and len(jobs) == 1 else None

    def run(job: tuple[pa.Table, dict[str, Any], str | None]) -> dict[str, Any]:
        chunk, part, pdir = job
        path = new_data_path(pdir, write_id)
        chunk, lineage = split_lineage(chunk)  # stored after the schema's columns, no stats
        physical = schema.to_physical(chunk)
        size, footer = _write_one(
            io,
            path,
            with_lineage(physical, lineage),
            compression,
            futures,
            integer_encoding,
            small_file_bytes,
            row_groups,
        )
        # The footer's leaf columns are the rows' own, in order, when they are flat and stored
        # as they are (under their physical names: a renamed column is still the same leaf).
        if footer is not None and (
            _schema_facts(physical.schema).nested
            or not (physical is chunk or physical.schema.types == chunk.schema.types)
        ):
            footer = None
        entry = {"path": path, "size": size, "record_count": chunk.num_rows, "partition_path": pdir}
        entry.update(part)
        entry.update(column_stats(chunk, schema, stats, footer=footer))
        return entry

    if len(jobs) == 1:
        return [run(jobs[0])]
    return list(_pool.map(run, jobs))


ROW_GROUP_ROWS = 128 * 1024

# For data that lives briefly (compaction reads a file, encodes it into a row group, drops
# it): the system allocator keeps freed memory for reuse, whereas mimalloc (Arrow's default)
# soon returns it to the OS, so every row group faulted in and zeroed fresh pages again, a
# noticeable share of a compaction of small files.
SHORT_LIVED_POOL = pa.system_memory_pool()


def write_data_stream(
    io: FileIO,
    schema: Schema,
    tables: Iterable[pa.Table],
    write_id: str,
    max_rows_per_file: int,
    compression: str = "snappy",
    row_group_rows: int = ROW_GROUP_ROWS,
    memory_pool: pa.MemoryPool | None = None,
    *,
    stats: StatsPolicy,
    integer_encoding: str = "delta",
    row_groups: RowGroups | None = None,
) -> list[dict[str, Any]]:
    """Write a stream of tables (conformed to ``schema``) into unpartitioned data files of
    at most ``max_rows_per_file`` rows, in stream order; one entry dict per file.
    Row groups hold ``row_group_rows`` rows, fewer where ``row_groups`` (the table's limits)
    allow fewer for the first table's rows.

    Each row group is encoded as soon as its rows have arrived, so encoding overlaps
    with whatever produces ``tables`` (reads running on other threads). Statistics are
    computed per file from the rows written, as ``write_data_files`` does. ``memory_pool``:
    where the row groups and the encoded file are allocated (default: Arrow's).
    """
    entries: list[dict[str, Any]] = []
    buffered: list[pa.Table] = []
    buffered_rows = 0
    file: _StreamedFile | None = None

    def flush(rows: pa.Table) -> None:
        nonlocal file
        while rows.num_rows:
            if file is None:
                file = _StreamedFile(schema, stats, rows, compression, row_group_rows, memory_pool, integer_encoding)
            room = max_rows_per_file - file.rows
            file.write(rows.slice(0, room))
            rows = rows.slice(room)
            if file.rows >= max_rows_per_file:
                entries.append(file.close(io, write_id))
                file = None

    for t in tables:
        if not t.num_rows:
            continue
        if file is None and not entries and not buffered:  # the first rows: how many a row group holds
            row_group_rows = min(row_group_rows, (row_groups or RowGroups()).rows_for(t))
        buffered.append(t)
        buffered_rows += t.num_rows
        if buffered_rows >= row_group_rows:
            # Whole row groups, each one contiguous chunk (encoding many small chunks costs
            # more); the rest waits for more rows.
            rows = pa.concat_tables(buffered)
            whole = buffered_rows // row_group_rows * row_group_rows
            flush(rows.slice(0, whole).combine_chunks(memory_pool))
            rest = rows.slice(whole)
            buffered, buffered_rows = ([rest] if rest.num_rows else []), rest.num_rows
    if buffered:
        flush(pa.concat_tables(buffered).combine_chunks(memory_pool))
    if file is not None:
        entries.append(file.close(io, write_id))
    return entries


class _StreamedFile:
    """One data file being written row group by row group into memory."""

    def __init__(
        self,
        schema: Schema,
        policy: StatsPolicy,
        first: pa.Table,
        compression: str,
        row_group_rows: int,
        memory_pool: pa.MemoryPool | None,
        integer_encoding: str = "delta",
    ) -> None:
        self.schema = schema
        self.policy = policy
        self.row_group_rows = row_group_rows
        self.sink = pa.BufferOutputStream(memory_pool)
        # Rows that carry row lineage (a rewrite of existing rows) store it after the columns.
        self.lineage = split_lineage(first)[1] is not None
        physical = pa.schema([*schema.physical_arrow, *LINEAGE_FIELDS]) if self.lineage else schema.physical_arrow
        self.writer = pq.ParquetWriter(
            self.sink,
            physical,
            compression=compression,
            write_statistics=statistics_columns(physical),
            memory_pool=memory_pool,
            **_encodings(self._physical(first), integer_encoding),
        )
        self.stats: list[dict[str, Any]] = []  # column_stats of each write
        self.rows = 0

    def _physical(self, rows: pa.Table) -> pa.Table:
        data, lineage = split_lineage(rows)
        if self.lineage and lineage is None:
            lineage = split_lineage(data, fill=True)[1]
        return with_lineage(self.schema.to_physical(data), lineage if self.lineage else None)

    def write(self, rows: pa.Table) -> None:
        self.writer.write_table(self._physical(rows), row_group_size=self.row_group_rows)
        # Stats as the rows come (while the reads go on), merged at the end.
        self.stats.append(column_stats(rows, self.schema, self.policy, exact=True))
        self.rows += rows.num_rows

    def close(self, io: FileIO, write_id: str) -> dict[str, Any]:
        self.writer.close()
        buf = self.sink.getvalue()
        path = new_data_path(None, write_id)
        io.put_new(path, buf)
        entry = {"path": path, "size": buf.size, "record_count": self.rows, "partition_path": None}
        entry.update(cut_bounds(_merged_stats(self.stats, self.schema), self.schema, self.policy))
        return entry


def _merged_stats(parts: list[dict[str, Any]], schema: Schema) -> dict[str, Any]:
    """``column_stats`` of a file from those of its parts: null counts add up, bounds are
    the least minimum and greatest maximum; a bound unknown in one part (NaN) is unknown."""
    out: dict[str, Any] = {}
    for f in schema.arrow:
        fid = field_id_of(f)
        if C.nulls_col(fid) not in parts[0]:
            continue  # a column the policy keeps nothing of
        out[C.nulls_col(fid)] = sum(p[C.nulls_col(fid)] for p in parts)
        for key, pick in ((C.min_col(fid), pc.min), (C.max_col(fid), pc.max)):
            if key not in parts[0]:
                continue
            bounds = [p[key] for p in parts]
            if any(b is None for b in bounds):
                out[key] = None
            else:
                out[key] = pick(pa.array(bounds, type=bounds[0].type))  # nulls (all-null parts) skipped
    return out
