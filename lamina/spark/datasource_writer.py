"""The ``lamina`` data source's writers: batch and streaming writes, one version each.

The tasks run Lamina's data-file writer on the executors; the driver commits one version
from the tasks' commit messages, through an engine write session
(``lamina.table.WriteSession``); a failed job commits nothing and removes what it wrote.
Streaming writes commit each micro-batch exactly once (the query's id, or the ``appId``
option, and the batch id recorded in the version).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

import lamina
from lamina.commit import CommitResult
from lamina.data.inflight import discard_writes, new_write_id, register_write
from lamina.data.writer import RowGroups, write_data_files
from lamina.errors import InvalidArgument, LaminaError, TableAlreadyExists, TransactionAlreadyCommitted
from lamina.expr import bind, to_arrow_filter, to_expr
from lamina.io import FileIO
from lamina.manifest.entries import data_entries, manifest_schema
from lamina.operations.schema import UpdateSchema
from lamina.spark._target import TableRef
from lamina.spark._types import arrow_schema, check_writable
from lamina.spark.checkpoint import location_of, query_id
from lamina.spark.datasource_options import (
    CHECKPOINT_OPTION,
    _bool_opt,
    _int_opt,
    _opt,
    _ref,
    partition_by_opt,
    save_mode_opt,
    storage_options,
)
from lamina.spec.partition import PartitionSpec, check_partition_by, parse_partition_by
from lamina.spec.properties import WriterProperties
from lamina.spec.schema import Schema
from lamina.spec.stats import StatsPolicy, stats_policy
from lamina.table import WriteSession
from lamina.table.engine import merged_schema

log = logging.getLogger(__name__)

WRITE_BUFFER_BYTES = 256 * 2**20  # rows buffered per task before files are written


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
    def _reported(messages: Sequence[WriterCommitMessage | None]) -> tuple[list[LaminaCommitMessage], list[str]]:
        """The tasks' messages (Spark passes None for a task it has no message of) and their write ids."""
        msgs: list[LaminaCommitMessage] = []
        for m in messages:
            if m is not None:
                assert isinstance(m, LaminaCommitMessage)  # what the tasks' write() returned
                msgs.append(m)
        return msgs, list(dict.fromkeys(m.write_id for m in msgs))

    def commit(
        self, messages: Sequence[WriterCommitMessage | None], app_transaction: tuple[str, int] | None = None
    ) -> CommitResult | None:
        """Commit every task's files as one version; None if ``app_transaction`` was already committed."""
        if self.skip:
            return None
        msgs, write_ids = self._reported(messages)
        if app_transaction is None and self.app_id is not None:
            assert self.app_seq is not None  # txnAppId and txnVersion go together (prepare)
            app_transaction = (self.app_id, self.app_seq)
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
                return CommitResult(None)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
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

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.target.commit(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
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

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.target.commit(messages, app_transaction=(self.application_id(), int(batchId)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.target.abort(messages)
