"""``spark.read.format("lamina")`` / ``df.write.format("lamina")``: Lamina as a PySpark Python data source.

Reads plan on the driver side with Lamina's planner, pinned to the version
resolved at ``load()``, prune by the ``where`` option, and yield Arrow batches
from balanced partitions of files; Spark evaluates the filters of each query
(see ``LaminaReader`` for why none are pushed). Writes run Lamina's data-file
writer on the executors and commit one version on the driver side from the
tasks' commit messages, through an engine write session
(``lamina.table.WriteSession``); a failed job commits nothing and removes
what it wrote. Streaming writes commit each micro-batch exactly once (the query's id,
or the ``appId`` option, and the batch id recorded in the version).

Options arrive lower-cased from Spark; the names below are matched case-insensitively.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

import lamina
from lamina.data import deletes
from lamina.data.inflight import discard_writes, new_write_id, register_write
from lamina.data.scan import Scan
from lamina.data.writer import RowGroups, write_data_files
from lamina.errors import InvalidArgument, LaminaError, TableAlreadyExists, TransactionAlreadyCommitted
from lamina.expr import AlwaysTrue, Expr, bind, to_arrow_filter, to_expr
from lamina.io import FileIO
from lamina.io.fileio import S3_OPTION_ENV
from lamina.manifest.entries import data_entries, manifest_schema
from lamina.operations.schema import UpdateSchema
from lamina.spark._target import TableRef
from lamina.spark._types import arrow_schema, batch_schema, check_writable, spark_schema
from lamina.spark.checkpoint import location_of, query_id
from lamina.spark.read import resolve_scan
from lamina.spark.registered import (
    check_registered_schema,
    is_registration,
    not_registered,
    registered_options,
    registration,
    with_registration,
)
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID
from lamina.spec.partition import PartitionSpec, check_partition_by, parse_partition_by
from lamina.spec.partition import split_top_level as split_entries
from lamina.spec.properties import WriterProperties
from lamina.spec.schema import Schema
from lamina.spec.stats import StatsPolicy, stats_policy
from lamina.table import WriteSession
from lamina.table.engine import merged_schema

log = logging.getLogger(__name__)

TARGET_SPLIT_BYTES = 128 * 2**20  # as spark.sql.files.maxPartitionBytes
WRITE_BUFFER_BYTES = 256 * 2**20  # rows buffered per task before files are written
_STORAGE_KEYS = set(S3_OPTION_ENV) | {"timeout", "max_retries"}
# What a read task needs of a planned file's entry (besides its deletion vector's dv_* columns).
_READ_ENTRY_COLUMNS = ("path", "size", FIRST_ROW_ID, DATA_VERSION)


# --- options -----------------------------------------------------------------------


def _opt(options: Mapping[str, str], name: str) -> str | None:
    v = options.get(name.lower())
    if v is None:
        v = options.get(name)
    return None if v is None or str(v).strip() == "" else str(v)


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """The object-store options among the data source options (``endpoint``, ``s3.region``, …)."""
    out = {}
    for k, v in options.items():
        key = k.lower()
        if key.startswith("s3."):
            key = key[3:]
        if key in _STORAGE_KEYS:
            out[key] = str(v)
    return out


def _path(options: Mapping[str, str]) -> str:
    uri = _opt(options, "path")
    if uri is None:
        raise InvalidArgument("the lamina data source needs a path: .load(uri), .save(uri) or option('path', uri)")
    return uri


def _int_opt(options: Mapping[str, str], name: str) -> int | None:
    v = _opt(options, name)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        raise InvalidArgument(f"option {name} must be an integer, got {v!r}") from None


def _bool_opt(options: Mapping[str, str], name: str) -> bool:
    v = _opt(options, name)
    if v is None:
        return False
    if v.lower() not in ("true", "false"):
        raise InvalidArgument(f"option {name} must be true or false, got {v!r}")
    return v.lower() == "true"


def timestamp_opt(options: Mapping[str, str], name: str) -> str | int | None:
    """A time option: ISO 8601 text, or epoch milliseconds (digits)."""
    ts = _opt(options, name)
    return int(ts) if ts is not None and ts.isdigit() else ts


def _json_strings(text: str) -> list[str] | None:
    """``text`` as a JSON array of strings; None if it is not one."""
    try:
        out = json.loads(text)
    except ValueError:
        return None
    return out if isinstance(out, list) and all(isinstance(n, str) for n in out) else None


def columns_opt(options: Mapping[str, str]) -> list[str] | None:
    """The ``columns`` option: the columns to read (table columns, ``_row_id``,
    ``_last_updated_version``), comma-separated or a JSON array of names; None: every column."""
    v = _opt(options, "columns")
    if v is None:
        return None
    if v.lstrip().startswith("["):
        names = _json_strings(v)
        if names is None:
            raise InvalidArgument(
                f"option columns must be a JSON array of column names or names separated by commas, got {v!r}"
            )
    else:
        names = [n.strip() for n in v.split(",")]
    if not names or any(not n for n in names):
        raise InvalidArgument(f"option columns names an empty column: {v!r}")
    return names


# Spark's own partitionBy(...) columns as a JSON array, under Spark's name for them
# (DataSourceUtils.PARTITIONING_COLUMNS_KEY): Spark 4.3 hands a Python data source none of
# them, batch or streaming; lamina.spark.dataframe_writer does.
PARTITION_COLUMNS_OPTION = "__partition_columns"
# Spark's save mode of a batch write, which Spark does not hand a Python data source (it
# refuses errorifexists and ignore): set by lamina.spark.dataframe_writer.
SAVE_MODE_OPTION = "__lamina_save_mode"
SAVE_MODES = ("errorifexists", "ignore", "append", "overwrite")
# A streaming query's checkpoint when Spark hands the sink none (the session's checkpoint root and
# the query's name): set by lamina.spark.dataframe_writer.
CHECKPOINT_OPTION = "__lamina_checkpoint"
# "true": read or write a table on an object store through this Python data source even where
# Spark's own Parquet reader and writer reach it (lamina.spark.dataframe_writer.native_store):
# what the benchmarks compare, and the fallback's tests use.
PYTHON_SOURCE_OPTION = "__lamina_python_source"


def partition_by_opt(options: Mapping[str, str]) -> list[str] | None:
    """The write's partitioning entries: Spark's ``partitionBy("month", "day(ts)")`` or the
    ``partitionBy`` option (``"day(ts), bucket(16, id)"``); each entry a column (identity) or a
    transform, as ``partition_by=`` takes them. None: not given."""
    text = _opt(options, "partitionBy")
    entries = None if text is None else [e.strip() for e in split_entries(text)]
    given = _opt(options, PARTITION_COLUMNS_OPTION)
    if given is None:
        return entries
    cols = _json_strings(given)
    if cols is None:
        raise InvalidArgument(
            f"option {PARTITION_COLUMNS_OPTION} must be a JSON array of partitionBy entries, got {given!r}"
        )
    cols = [c.strip() for c in cols]
    if entries is not None and entries != cols:
        raise InvalidArgument(
            f"partitionBy{tuple(cols)} and option partitionBy {text!r} differ: give the partitioning once"
        )
    return cols


def save_mode_opt(options: Mapping[str, str], overwrite: bool) -> str:
    """The write's save mode: the one lamina.spark.dataframe_writer passes, else what Spark's
    ``overwrite`` flag says (append or overwrite)."""
    mode = _opt(options, SAVE_MODE_OPTION)
    if mode is None:
        return "overwrite" if overwrite else "append"
    mode = mode.lower()
    if mode not in SAVE_MODES or (mode == "overwrite") != overwrite:
        raise InvalidArgument(f"option {SAVE_MODE_OPTION} {mode!r} does not fit a write with overwrite={overwrite}")
    return mode


def _time_travel(options: Mapping[str, str]) -> dict[str, Any]:
    return {
        "version": _opt(options, "versionAsOf"),  # a non-numeric value names a tag
        "timestamp": timestamp_opt(options, "timestampAsOf"),
        "tag": _opt(options, "tag"),
    }


def _ref(options: Mapping[str, str]) -> TableRef:
    """The table the options name: ``path`` is a location, or an identifier when ``catalog`` is
    set; ``branch``: that branch of it (reads and writes are the branch's)."""
    return TableRef.from_options(
        _path(options),
        storage_options(options),
        _opt(options, "catalog"),
        _opt(options, "catalog.password"),
        _opt(options, "branch"),
    )


# --- reading -------------------------------------------------------------------------


class FilesPartition(InputPartition):
    """The data files one read task reads: their planned entries (path, size, deletion vector)."""

    def __init__(self, entries: pa.Table) -> None:
        super().__init__(entries)
        self.entries = entries

    @property
    def files(self) -> list[tuple[str, Any]]:
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


# --- writing -------------------------------------------------------------------------


@dataclass
class LaminaCommitMessage(WriterCommitMessage):
    write_id: str  # the write id the task's files carry
    entries: pa.Table  # manifest-format entries of the data files one task wrote
    rows: int


@dataclass
class WriteTarget:
    """What every task of one write needs to know, decided on the driver side before any task runs.

    The tasks share the write id, so an abort finds the files of tasks Spark did not report.
    Spark commits (or aborts) a batch write with the writer it planned, but a streaming
    micro-batch with a writer made anew (another write id): the tasks' write id then comes
    from their messages, and the commit's write session adopts it."""

    ref: TableRef  # where to commit (through the catalog, if any)
    uri: str  # the table's location: where tasks write
    storage: dict[str, str]
    schema: Schema
    spec: PartitionSpec
    create_partition_by: list[str] | None  # set when the table does not exist yet
    mode: str  # what the commit does: append or overwrite
    where: str | None
    app_id: str | None
    app_seq: int | None
    settings: WriterProperties
    write_id: str
    stats: StatsPolicy  # the column statistics the table's entries keep
    # The schema change (mergeSchema) the tasks write for and the commit stages with their files.
    schema_update: UpdateSchema | None = None
    # Spark's save mode (errorifexists, ignore, append, overwrite): errorifexists and ignore create
    # the table or, if it exists, fail or write nothing (``skip``: the tasks write no file).
    save_mode: str = "append"
    skip: bool = False

    @classmethod
    def prepare(cls, options: Mapping[str, str], df_schema: StructType, overwrite: bool) -> WriteTarget:
        """The write planned on the driver side, every option checked: a bad option, a table
        that must (not) exist, a DataFrame that does not fit the table fail here, before any
        task runs."""
        ref = _ref(options)
        uri, storage = ref.location, dict(ref.io.options)
        partition_by = partition_by_opt(options)
        save_mode = save_mode_opt(options, overwrite)
        merge_schema = _bool_opt(options, "mergeSchema")
        table = ref.open_or_none()
        schema_update = None
        if table is not None:
            if save_mode == "errorifexists":
                raise TableAlreadyExists(
                    f"table {ref.name} already exists: mode('errorifexists'), Spark's default, writes a new table only; "
                    "use mode('append') to add the rows, mode('overwrite') to replace the table's, mode('ignore') to "
                    "leave it as it is"
                )
            table.check_writable()  # before any task writes a file
            if save_mode == "ignore":  # nothing to write: the table stays as it is
                return cls(
                    ref,
                    uri,
                    storage,
                    table.metadata.schema,
                    table.partition_spec,
                    None,
                    "append",
                    None,
                    None,
                    None,
                    WriterProperties.from_properties(table.properties),
                    new_write_id(),
                    stats_policy(table.metadata.schema, table.properties),
                    save_mode=save_mode,
                    skip=True,
                )
            if merge_schema:
                schema_update = merged_schema(table.metadata, arrow_schema(df_schema))
            schema = table.metadata.schema if schema_update is None else schema_update.planned_schema
            check_writable(df_schema, schema, uri)
            spec, props = table.partition_spec, table.properties
            check_partition_by(partition_by, spec, schema, ref.name)
            create = None
        else:
            schema = Schema.from_arrow(arrow_schema(df_schema))
            spec = parse_partition_by(partition_by, schema)
            props, create = {}, ([] if partition_by is None else partition_by)
        where = _opt(options, "replaceWhere")
        if where is not None:
            if not overwrite:
                raise InvalidArgument("replaceWhere applies to mode('overwrite') only")
            bind(to_expr(where), schema)  # a bad predicate fails here, before any task runs
        app_id, app_seq = _opt(options, "txnAppId"), _int_opt(options, "txnVersion")
        if (app_id is None) != (app_seq is None):
            raise InvalidArgument("txnAppId and txnVersion go together")
        return cls(
            ref,
            uri,
            storage,
            schema,
            spec,
            create,
            "overwrite" if overwrite else "append",
            where,
            app_id,
            app_seq,
            WriterProperties.from_properties(props),
            new_write_id(),
            stats_policy(schema, props),
            schema_update,
            save_mode,
        )

    # -- executor side ---------------------------------------------------------------

    def write_task(self, batches: Iterator[pa.RecordBatch]) -> LaminaCommitMessage:
        """Write one task's rows as data files named by the write id, registered in flight
        first; on failure remove them."""
        if self.skip:  # mode('ignore') on an existing table
            return self._message([], 0)
        io = FileIO(self.uri, self.storage or None)
        register_write(io, self.write_id)  # idempotent: every task of the write puts the same marker
        filt = None if self.where is None else to_arrow_filter(bind(to_expr(self.where), self.schema))
        files: list[dict[str, Any]] = []
        buffered: list[pa.RecordBatch] = []
        rows = nbytes = 0
        try:
            for b in batches:
                buffered.append(b)
                rows += b.num_rows
                nbytes += b.nbytes
                if nbytes >= WRITE_BUFFER_BYTES:
                    files += self._flush(io, buffered, filt)
                    buffered, nbytes = [], 0
            files += self._flush(io, buffered, filt)
        except BaseException:
            _delete_quietly(io, [f["path"] for f in files])  # the marker is the write's: other tasks share it
            raise
        return self._message(files, rows)

    def _message(self, files: list[dict[str, Any]], rows: int) -> LaminaCommitMessage:
        entries = data_entries(files, manifest_schema(self.schema, self.spec, policy=self.stats), 0, self.spec.spec_id)
        return LaminaCommitMessage(self.write_id, entries, rows)

    def _flush(self, io: FileIO, buffered: list[pa.RecordBatch], filt: Any) -> list[dict[str, Any]]:
        if not buffered:
            return []
        # The DataFrame's types passed the write rule on the driver (check_writable), on Spark's
        # view of the table's types, where an unsigned column is the next wider signed type: the
        # safe cast converts them, checking each value only there (a short into a uint8 column).
        data = self.schema.conform(pa.Table.from_batches(buffered), cast="safe")
        if filt is not None:
            matching = data.filter(filt).num_rows
            if matching != data.num_rows:
                raise InvalidArgument(
                    f"{data.num_rows - matching} rows do not match replaceWhere {self.where!r}; "
                    "every row written with replaceWhere must match it"
                )
        return write_data_files(
            io,
            self.schema,
            self.spec,
            data,
            self.write_id,
            self.settings.max_rows_per_file,
            self.settings.parquet_compression,
            stats=self.stats,
            integer_encoding=self.settings.parquet_integer_encoding,
            small_file_bytes=self.settings.parquet_small_file_bytes,
            row_groups=RowGroups.of(self.settings),
        )

    # -- driver side ------------------------------------------------------------------

    def _table(self) -> lamina.Table:
        """The target table, created now if it did not exist when the write was planned (by
        mode errorifexists or ignore only if no other writer created it meanwhile: TableAlreadyExists)."""
        if self.create_partition_by is None:
            return self.ref.open()
        return self.ref.create(
            self.schema,
            self.spec,
            self.create_partition_by or None,
            None,
            exclusive=self.save_mode in ("errorifexists", "ignore"),
        )

    @staticmethod
    def _reported(messages: list[Any]) -> tuple[list[Any], list[str]]:
        """The tasks' messages (Spark passes None for a task it has no message of) and their write ids."""
        msgs = [m for m in messages if m is not None]
        return msgs, list(dict.fromkeys(m.write_id for m in msgs))

    def commit(self, messages: list[Any], app_transaction: tuple[str, int] | None = None) -> int | None:
        """Commit every task's files as one version; None if ``app_transaction`` was already committed."""
        if self.skip:
            return None
        msgs, write_ids = self._reported(messages)
        if app_transaction is None and self.app_id is not None:
            app_transaction = (self.app_id, int(self.app_seq))  # type: ignore[arg-type]
        try:
            session = WriteSession(self._table(), write_id=self.write_id, register=False)
        except BaseException as e:  # no table to commit to (or it may not be written): nothing was committed
            discard_writes(
                FileIO(self.uri, self.storage or None),
                [self.write_id, *write_ids],
                [p for m in msgs for p in m.entries.column("path").to_pylist()],
                search=False,
            )
            if isinstance(e, TableAlreadyExists) and self.save_mode == "ignore":
                log.info("mode('ignore'): %s was created by another writer meanwhile; nothing written", self.ref.name)
                return None
            raise
        with session:
            if self.schema_update is not None:
                session.stage_schema_update(self.schema_update)
            session.adopt(write_ids)  # the tasks' write id (a streaming batch's is not this writer's)
            for m in msgs:
                session.add_entries(m.entries)
            try:
                return session.commit(self.mode, where=self.where, app_transaction=app_transaction)
            except TransactionAlreadyCommitted as e:  # the session removed the files
                log.info("skipping already committed write: %s", e)
                return None

    def abort(self, messages: list[Any]) -> None:
        """Remove what the write's tasks left. Spark may pass only Nones (a task that succeeded
        before another failed is not always reported), so the files are also found by write
        id. The table may not exist (a new table is created by the commit), so this works on
        the location, without a write session."""
        msgs, write_ids = self._reported(messages)
        paths = [p for m in msgs for p in m.entries.column("path").to_pylist()]
        discard_writes(FileIO(self.uri, self.storage or None), [self.write_id, *write_ids], paths)


def _delete_quietly(io: FileIO, paths: list[str]) -> None:
    if not paths:
        return
    try:
        io.delete_many(paths)
    except LaminaError as e:  # best effort: the files carry the write id, cleanup can find them
        log.warning("could not remove %d uncommitted files under %s: %s", len(paths), io.uri, e)


class LaminaWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.target = WriteTarget.prepare(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LaminaCommitMessage:
        return self.target.write_task(iterator)

    def commit(self, messages: list[Any]) -> None:
        self.target.commit(messages)

    def abort(self, messages: list[Any]) -> None:
        self.target.abort(messages)


class LaminaStreamWriter(DataSourceStreamArrowWriter):
    """Appends each micro-batch as one version recording ``{application id: batchId}``; a batch whose
    id is not above the recorded one (a restarted query replaying it) is skipped, never duplicated.

    The application id is the query's own, as Delta's sink takes it: the id Spark keeps in the
    query's checkpoint (``checkpointLocation``, which Spark hands the sink; or the session's
    checkpoint root and the query's name), read when the first batch commits
    (lamina.spark.checkpoint). ``appId`` overrides it (two sinks of one query into one table
    need their own); without a checkpoint Spark knows the query by, its ``queryName`` is the id."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidArgument("streaming writes to Lamina append; use outputMode('append')")
        self.app_id = _opt(options, "appId")
        self.checkpoint = _opt(options, "checkpointLocation") or _opt(options, CHECKPOINT_OPTION)
        self.query_name = _opt(options, "queryName")
        self.storage = storage_options(options)
        if self.app_id is None and self.checkpoint is None and self.query_name is None:
            raise InvalidArgument(
                "a streaming write to Lamina is exactly once by its query's id: give the query a checkpoint "
                "(option('checkpointLocation', ...)), or option('appId', <an id stable across restarts>)"
            )
        if self.app_id is None and self.checkpoint is not None:
            location_of(self.checkpoint)  # a checkpoint Lamina cannot read fails now, not at the first commit
        self.target = WriteTarget.prepare(options, schema, False)

    def application_id(self) -> str:
        """The id the table records batches under (see the class docstring)."""
        if self.app_id is None and self.checkpoint is not None:
            self.app_id = query_id(self.checkpoint, self.storage)
            if self.app_id is None:
                raise InvalidArgument(
                    f"the streaming query's checkpoint {self.checkpoint} holds no query id (no metadata "
                    "file): is it the query's checkpointLocation?"
                )
        return self.app_id or str(self.query_name)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LaminaCommitMessage:
        return self.target.write_task(iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        self.target.commit(messages, app_transaction=(self.application_id(), int(batchId)))

    def abort(self, messages: list[Any], batchId: int) -> None:
        self.target.abort(messages)


class LaminaDataSource(DataSource):
    """The ``lamina`` format. Options: path (a location, or ``ns.name`` with catalog), catalog (a
    catalog URI; commits go through it), catalog.password, branch (read or write that branch:
    versionAsOf/timestampAsOf are then the branch's), versionAsOf, timestampAsOf, tag, where
    (a Lamina predicate the DataFrame is restricted to: prunes files), columns (the columns to
    read, row lineage columns included), numPartitions, readChangeFeed with startingVersion /
    endingVersion / startingTimestamp / endingTimestamp (the change feed; lamina.spark.changes),
    streaming reads (maxFilesPerTrigger, skipChangeCommits; lamina.spark.stream_source),
    partitionBy (a new table's partitioning, as Spark's own partitionBy(...); an existing
    table's must match), replaceWhere (overwrite), txnAppId/txnVersion (idempotent batch
    writes), appId (streaming writes: overrides the query's id), and object-store options (endpoint, region, …). Save
    modes other than append and overwrite, Spark's partitionBy and saveAsTable reach it through
    lamina.spark.dataframe_writer (installed by ``register``)."""

    # The version read (the change feed's last one): set by schema(), pickled with the instance
    # (Spark asks not to override __init__).
    version: int | None = None
    # A change feed read's start (its range is (change_start, version]); None: not resolved.
    change_start: int | None = None

    @classmethod
    def name(cls) -> str:
        return "lamina"

    def schema(self) -> StructType:
        """The schema of the version to read, resolved now (at ``load()``) and kept on this
        instance, which Spark pickles into every reader of the DataFrame: all its queries read
        that version, with that schema. An invalid ``where``, ``columns`` or change range fails here."""
        from lamina.spark.changes import changes_spark_schema, feed_of, reads_changes

        table = _ref(self.options).open()
        columns = columns_opt(self.options)
        if reads_changes(self.options):
            if any(_time_travel(self.options).values()):
                raise InvalidArgument(
                    "versionAsOf, timestampAsOf and tag do not apply to readChangeFeed: "
                    "give the range with startingVersion/endingVersion (or the timestamps)"
                )
            feed = feed_of(table, self.options)
            if feed is not None:
                self.change_start, self.version = feed.start_version, feed.end_version
                return changes_spark_schema(feed.reader)
            scan = table.scan(where=_opt(self.options, "where"), columns=columns)  # a stream's: no range yet
            self.version = scan.version
            return changes_spark_schema(scan)
        scan = resolve_scan(table, where=_opt(self.options, "where"), columns=columns, **_time_travel(self.options))
        self.version = scan.version
        schema = spark_schema(scan.arrow_schema_of(scan.output_columns))
        if is_registration(self.options):  # CREATE TABLE ... USING lamina: Spark's catalog records this schema
            return with_registration(schema, registration(self.options, _STORAGE_KEYS))
        return schema

    def _registered(self, schema: StructType, what: str) -> dict[str, str]:
        """The options of a read or write of a table registered in Spark's catalog, which Spark
        gives only its recorded schema (lamina.spark.registered), with those of the query."""
        recorded = registered_options(schema)
        if recorded is None:
            raise not_registered(what)
        return {**recorded, **{k.lower(): v for k, v in self.options.items()}}

    def _registered_read(self, schema: StructType) -> tuple[dict[str, str], int]:
        """A registered table's read options and version: its latest, in the columns Spark recorded."""
        options = self._registered(schema, "reads")
        table = _ref(options).open()
        scan = resolve_scan(table, where=_opt(options, "where"), **_time_travel(options))
        current = spark_schema(scan.arrow_schema_of(scan.output_columns))
        options["columns"] = json.dumps(check_registered_schema(schema, current, table.uri))
        return options, scan.version

    def reader(self, schema: StructType) -> DataSourceReader:
        from lamina.spark.changes import LaminaChangesReader, reads_changes

        if self.version is None:  # Spark calls schema() unless it has one: a read given one, or a catalog table's
            options, version = self._registered_read(schema)
            return LaminaReader(options, schema, version)
        if reads_changes(self.options):
            if self.change_start is None:
                raise InvalidArgument(
                    "readChangeFeed needs option startingVersion or startingTimestamp: the first version whose "
                    "changes to read (inclusive, as in Delta); endingVersion/endingTimestamp (default: the latest)"
                )
            return LaminaChangesReader(self.options, schema, self.change_start, self.version)
        return LaminaReader(self.options, schema, self.version)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from lamina.spark.stream_source import LaminaStreamReader

        if self.version is None:  # spark.readStream.table(name) of a catalog table's
            options, version = self._registered_read(schema)
            return LaminaStreamReader(options, schema, version)
        return LaminaStreamReader(self.options, schema, self.version)

    def _write_options(self, schema: StructType) -> Mapping[str, str]:
        """A write's options: its own, or (INSERT INTO a Spark catalog table, which Spark hands
        no path) the registered table's."""
        return self.options if _opt(self.options, "path") is not None else self._registered(schema, "writes")

    def writer(self, schema: StructType, overwrite: bool) -> LaminaWriter:
        return LaminaWriter(self._write_options(schema), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> LaminaStreamWriter:
        return LaminaStreamWriter(self._write_options(schema), schema, overwrite)


def register(spark: Any) -> None:
    """Make ``format("lamina")`` available in ``spark``: the data source, the save modes,
    ``partitionBy``, ``saveAsTable`` and ``start()`` checks Spark does not give a Python data
    source (lamina.spark.dataframe_writer), and Spark's own reader and writer for tables on
    object stores S3A reaches (lamina.spark.dataframe_reader, dataframe_writer.native_store)."""
    from lamina.spark import dataframe_reader, dataframe_writer

    spark.dataSource.register(LaminaDataSource)
    dataframe_writer.install()
    dataframe_reader.install()
