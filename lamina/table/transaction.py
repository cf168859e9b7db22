"""Transactions: several changes to one table, committed as one version.

    with table.transaction() as tx:
        tx.append(new_rows)
        tx.delete(where="status = 'void'")
        tx.create_tag("eod-2026-01-05")

Each call checks its input and writes its new data files at once (errors surface
where they are made); the operations are applied in order at commit, each seeing
the ones before it, and re-applied as a unit on every retry with the same
conflict rules. Leaving the block by an exception commits nothing and deletes
the data files the transaction wrote. ``Table.append`` and the other changes are
one-operation transactions.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import Base, CommitOptions, Operation
from lamina.commit.checks import require_app_transactions_new
from lamina.commit.committer import with_metadata
from lamina.commit.result import CommitResult
from lamina.data.footer_stats import complete_files
from lamina.data.inflight import discard_writes, finish_writes, new_write_id
from lamina.data.writer import PendingWrites
from lamina.errors import CommitStateUnknown, InvalidArgument, LaminaError, StorageError, TagAlreadyExists
from lamina.expr import AlwaysTrue, Expr, bind, referenced_columns, to_arrow_filter, to_expr
from lamina.expr.values import statement_clock, values_at_clock
from lamina.manifest.entries import entries_from_user_files, manifest_schema_of
from lamina.operations import (
    AppendFiles,
    MergeBuilder,
    Overwrite,
    RowDelta,
    check_added_files,
    check_added_paths,
    check_not_in_table,
)
from lamina.operations.partition_spec import SpecUpdate
from lamina.operations.properties import UpdateProperties
from lamina.operations.rowlevel.delete_update import check_assignments, delete_rows, file_fn_update, updated_rows_fn
from lamina.operations.rowlevel.delta import row_mode
from lamina.operations.schema import PlannedColumns, SchemaUpdate, UpdateSchema, widens_on_merge
from lamina.operations.sort_order import SortOrderUpdate
from lamina.spec.lineage import counter_of
from lamina.spec.stats import stats_policy
from lamina.spec.tag import validate_tag_name
from lamina.spec.version import VersionManifest
from lamina.spec.write_types import check_cast_mode
from lamina.table.convert import app_transactions, to_arrow

if TYPE_CHECKING:
    from lamina.table.table import Table

log = logging.getLogger(__name__)


def _wait_all(pending: Sequence[PendingWrites]) -> None:
    """Wait for every write still landing (what the version references must exist first)."""
    for p in pending:
        p.wait()


class Transaction:
    """Changes to one table, made visible together as one version (or not at all)."""

    def __init__(self, table: Table, commit_options: CommitOptions | None = None) -> None:
        self.table = table
        self.commit_options = commit_options
        self.version: int | None = None  # what ``commit`` committed (None: nothing changed)
        self.result: CommitResult | None = None  # what ``commit`` returned, once it has
        self._ops: list[Operation] = []
        self._pending: list[PendingWrites] = []
        self._written: list[str] = []  # data files written by this transaction's calls
        # Engine writes handed over by their write sessions (WriteSession(..., transaction=)):
        # their ids, whose in-flight markers end with the transaction, and their files.
        self._engine_write_ids: list[str] = []
        self._engine_files: list[str] = []
        self._tags: list[tuple[str, int | None]] = []
        self._state = "open"
        self._staged: VersionManifest | None = None  # the metadata after this transaction's metadata changes

    @property
    def state(self) -> str:
        """open, committed (its version landed, or nothing changed), aborted, or unknown (the
        commit's outcome could not be told: its files are kept)."""
        return self._state

    # -- what the changes see -----------------------------------------------------------

    @property
    def metadata(self) -> VersionManifest:
        """The version the transaction's input is checked against: the table's when it began,
        with the metadata changes (partition spec, sort order) queued so far, so the writes
        after them use them."""
        return self._staged or self.table.metadata

    def _queue_metadata(self, op: Operation) -> None:
        """Queue a metadata-only operation and stage its result for the calls after it."""
        vm = self.metadata
        change = op.apply(Base(self.table.io, vm, vm.version + 1))
        self.add_operation(op)
        self._staged = with_metadata(vm, change)

    def update_spec(self) -> SpecUpdate:
        """A partition spec change in this transaction (see ``Table.update_spec``): what the
        calls after its ``commit()`` write uses the new spec; it commits with the transaction."""
        self._check_open()
        return SpecUpdate(self.metadata, self._queue_metadata)

    def update_sort_order(self) -> SortOrderUpdate:
        """A sort order change in this transaction (see ``Table.update_sort_order``)."""
        self._check_open()
        return SortOrderUpdate(self.metadata, self._queue_metadata)

    def update_properties(self, set: Mapping[str, Any] | None = None, remove: Iterable[str] | str = ()) -> Transaction:
        """Set and remove table properties in this transaction (see ``Table.update_properties``):
        the calls after it write with the new settings; it commits with the transaction."""
        self._check_open()
        self._queue_metadata(UpdateProperties.of(self.metadata, set, remove))
        return self

    def _base(self) -> Base:
        """The latest version, for the checks a call makes before its operation is queued."""
        vm = self.table.log.latest()
        return Base(self.table.io, vm, vm.version + 1)

    # -- changes ------------------------------------------------------------------------

    def add_operation(self, op: Operation, *, pending: PendingWrites | None = None) -> Transaction:
        """Queue an operation (``lamina.operations``); ``pending``: its data files' writes still in
        flight."""
        self._check_open()
        if op.refresh_base:
            # It reads the files of the version it applies to, which holds the earlier
            # operations' files: those must have reached storage first.
            for p in self._pending:
                p.wait()
        self._ops.append(op)
        if pending is not None:
            self._pending.append(pending)
        return self

    def _write(
        self, rows: pa.Table, write_id: str, pending: PendingWrites | None = None, row_ids_from: int | None = None
    ) -> pa.Table:
        vm = self.metadata
        entries = Base(self.table.io, vm, vm.version + 1).write(
            rows, write_id, pending=pending, row_ids_from=row_ids_from
        )
        self._written.extend(entries.column("path").to_pylist())
        return entries

    def update_schema(self) -> SchemaUpdate:
        """A schema change in this transaction (see ``Table.update_schema``): the calls after its
        ``commit()`` see the new schema; it commits with the transaction."""
        self._check_open()
        return SchemaUpdate(self.metadata, self.stage_schema_update, strict=True)

    def stage_schema_update(self, op: UpdateSchema) -> None:
        """Queue schema change ``op``: the calls after it see its schema (an engine write
        session stages the change its files were written for)."""
        self._queue_metadata(op)

    def _evolve(self, data: pa.Table, schema_mode: str | None, allowed: tuple[str, ...], where: Any = None) -> None:
        """Queue the schema change ``schema_mode`` asks for ``data``, if any."""
        if schema_mode is None:
            return
        if schema_mode not in allowed:
            raise InvalidArgument(f"schema_mode must be one of {list(allowed)} here, got {schema_mode!r}")
        if schema_mode == "overwrite" and where is not None:
            raise InvalidArgument(
                "schema_mode='overwrite' replaces the schema, so it overwrites every row: drop where="
            )
        update = self.update_schema()
        if schema_mode == "overwrite":
            update.replace_with(data.schema)
        else:
            update.union_by_name(data.schema, widen=widens_on_merge(self.metadata))
        update.commit()

    def append(
        self,
        data: Any,
        *,
        app_transaction: tuple[str, int] | None = None,
        schema_mode: str | None = None,
        cast: str | None = None,
    ) -> Transaction:
        """Append rows (see ``Table.append``)."""
        self._check_open()
        data = to_arrow(data)
        check_cast_mode(cast)
        self._evolve(data, schema_mode, ("merge",))
        rows = self.metadata.schema.conform(data, cast)  # schema errors before any file is written
        apps = app_transactions(app_transaction)
        if apps:
            require_app_transactions_new(self.table.log.latest(), apps)  # before writing a file for nothing
        pending = PendingWrites([])  # the data file reaches storage while manifests are built (on object stores)
        # The entries are built for the version after this one, with the row ids its commit would
        # give them there: on that attempt the committer takes them as they are.
        vm = self.metadata
        counter = counter_of(vm)
        entries = self._write(rows, new_write_id(), pending, row_ids_from=counter)
        row_ids = None if counter is None else (counter, counter + rows.num_rows)
        return self.add_operation(
            AppendFiles(entries, app_transactions=apps, built_for=vm.version + 1, row_ids=row_ids),
            pending=pending,
        )

    def overwrite(
        self, data: Any, where: str | Expr | None = None, *, schema_mode: str | None = None, cast: str | None = None
    ) -> Transaction:
        """Replace all rows, or those matching ``where``, with ``data`` (see ``Table.overwrite``)."""
        self._check_open()
        data = to_arrow(data)
        check_cast_mode(cast)
        self._evolve(data, schema_mode, ("merge", "overwrite"), where)
        rows = self.metadata.schema.conform(data, cast)
        predicate = bind(to_expr(where), self.metadata.schema)
        if not isinstance(predicate, AlwaysTrue) and rows.num_rows:
            matching = rows.filter(to_arrow_filter(predicate)).num_rows
            if matching != rows.num_rows:
                raise InvalidArgument(
                    f"{rows.num_rows - matching} of {rows.num_rows} new rows do not match the overwrite "
                    f"predicate {where!r}; every row written by overwrite(where=...) must match it"
                )
        write_id = new_write_id()
        planned = PlannedColumns.of(self.metadata.schema, referenced_columns(predicate))
        return self.add_operation(Overwrite(predicate, self._write(rows, write_id), write_id, planned=planned))

    def add_files(
        self,
        files: pa.Table,
        *,
        mode: str = "append",
        where: str | Expr | None = None,
        app_transaction: tuple[str, int] | None = None,
        check_files: bool = True,
    ) -> Transaction:
        """Register existing data files (see ``Table.add_files``)."""
        self._check_open()
        if mode not in ("append", "overwrite"):
            raise InvalidArgument(f"mode must be 'append' or 'overwrite', not {mode!r}")
        apps = app_transactions(app_transaction)
        if apps:
            if mode != "append":
                raise InvalidArgument("app_transaction applies to appends only, not to overwrite")
            require_app_transactions_new(self.table.log.latest(), apps)  # before reading any file for nothing
        vm = self.metadata
        policy = stats_policy(vm.schema, vm.properties)
        if "path" in files.column_names:
            check_added_paths(files.column("path"), self.table.io)  # before a file is read
        files = complete_files(
            files, self.table.io, vm.schema, vm.partition_spec, {fid for _, fid, _ in policy.kept(vm.schema)}
        )
        entries = entries_from_user_files(files, vm.schema, vm.partition_spec, manifest_schema_of(vm), policy)
        check_added_files(entries, self.table.io, check_files)
        if mode == "overwrite":  # (appends check every base they are applied to)
            check_not_in_table(entries, self._base())
        return self.add_entries(
            entries, mode=mode, where=where, app_transaction=app_transaction, operation="add-files", refuse_present=True
        )

    def add_entries(
        self,
        entries: pa.Table,
        *,
        mode: str = "append",
        where: str | Expr | None = None,
        app_transaction: tuple[str, int] | None = None,
        operation: str | None = None,
        write_id: str | None = None,
        refuse_present: bool = False,
    ) -> Transaction:
        """Queue data files already written (manifest-format ``entries``; the engine write
        session's path). Overwrite rewrites files that only partly match ``where``; their
        remainders carry ``write_id`` in their names. ``refuse_present``: an append refuses
        files already live in the version it lands on."""
        apps = app_transactions(app_transaction)
        if mode == "append":
            op: Operation = AppendFiles(
                entries, operation=operation or "append", app_transactions=apps, refuse_present=refuse_present
            )
        elif mode == "overwrite":
            if apps:
                raise InvalidArgument("app_transaction applies to appends only, not to overwrite")
            predicate = bind(to_expr(where), self.metadata.schema)
            op = Overwrite(
                predicate,
                entries,
                write_id or new_write_id(),
                readds=refuse_present,
                operation=operation or "overwrite",
                planned=PlannedColumns.of(self.metadata.schema, referenced_columns(predicate)),
            )
        else:
            raise InvalidArgument(f"mode must be 'append' or 'overwrite', not {mode!r}")
        return self.add_operation(op)

    def row_mode(self, mode: str | None) -> str:
        """The row-level write mode: ``mode``, else the table's ``write.delete.mode``."""
        return row_mode(mode, self.metadata.properties)

    def delete(self, where: str | Expr, *, mode: str | None = None) -> Transaction:
        """Delete the rows matching ``where`` (see ``Table.delete``)."""
        if where is None:
            raise InvalidArgument("delete needs a predicate; to remove every row use overwrite with an empty table")
        schema = self.metadata.schema
        return self.add_operation(delete_rows(schema, bind(to_expr(where), schema), self.row_mode(mode)))

    def update(
        self,
        where: str | Expr | None = None,
        set: Mapping[str, Any] | None = None,
        *,
        mode: str | None = None,
        cast: str | None = None,
    ) -> Transaction:
        """Set columns of the rows matching ``where`` (see ``Table.update``)."""
        if not set:
            raise InvalidArgument("update needs set={column: value or SQL expression}")
        schema = self.metadata.schema
        for c in set:
            schema.field(c)
        check_cast_mode(cast)
        now = statement_clock()  # what current_date / current_timestamp read, in the where and the values
        values = values_at_clock(set, now)
        assert values is not None  # (set is not empty)
        check_assignments(values, schema.arrow, "update", cast)  # a value of a type the column cannot store: now
        pred = bind(to_expr(where), schema, now=now)
        filt = to_arrow_filter(pred) if not isinstance(pred, AlwaysTrue) else pc.scalar(True)
        return self.add_operation(
            RowDelta(
                "update",
                pred,
                list(schema.names),
                file_fn_update(filt, values, schema.arrow, cast),
                self.row_mode(mode),
                new_write_id(),
                planned=PlannedColumns.of(schema),
                where=pred,
                selected_fn=updated_rows_fn(values, schema.arrow, cast),
            )
        )

    def merge(
        self, source: Any, on: str | Sequence[str], *, mode: str | None = None, cast: str | None = None
    ) -> MergeBuilder:
        """A merge of ``source`` on key column(s) ``on``; its ``execute()`` queues it here (and
        returns None: the merge's counts are known once the transaction commits)."""

        def queue(op: RowDelta, options: Any) -> None:
            if options is not None:
                raise InvalidArgument("commit options of a merge in a transaction are the transaction's")
            self.add_operation(op)
            return None

        return MergeBuilder(
            self.metadata.schema, to_arrow(source), on, self.row_mode(mode), queue, queued=True, cast=cast
        )

    def publish(self, branch: str, *, expected_version: int | None = None) -> Transaction:
        """Publish branch ``branch`` into this transaction's table (see ``Table.branches.publish``), with
        the transaction's other changes (nothing if the branch has no commit)."""
        self._check_open()
        op = self.table._publish_operation(branch, expected_version)
        return self if op is None else self.add_operation(op)

    def create_tag(self, name: str, *, expires_at_ms: int | None = None) -> Transaction:
        """Tag the version this transaction commits (checked now, created once it has landed)."""
        self._check_open()
        validate_tag_name(name)
        if name in self.table.tag_store.names() or any(n == name for n, _ in self._tags):
            raise TagAlreadyExists(f"tag {name!r} already exists on {self.table.uri}")
        self._tags.append((name, expires_at_ms))
        return self

    # -- the end ------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Commit every change as one version: its ``CommitResult`` (``version`` None if together
        they changed nothing: a delete that matched no row commits nothing)."""
        self._check_open()
        table = self.table
        try:
            table.check_writable()
            if not self._ops and not self._tags:
                raise InvalidArgument("the transaction has no changes to commit")
            # An operation that reads the base's files starts from the latest version; appends
            # start from the version the table object holds (if stale, the put fails fast).
            base = table.log.latest() if any(op.refresh_base for op in self._ops) else table.metadata
            pending = self._pending
            vm = (
                table._committer.commit(
                    base,
                    self._ops,
                    self.commit_options,
                    before_publish=functools.partial(_wait_all, pending) if pending else None,
                )
                if self._ops
                else None
            )
        except CommitStateUnknown:
            self._end("unknown")  # the version may reference the files: keep them
            raise
        except BaseException:
            self._abort()
            raise
        self.version = None if vm is None else vm.version
        self._end("committed")
        table._committed(vm if vm is not None else base, vm is not None)
        self._create_tags(vm if vm is not None else base)
        self.result = CommitResult.of(vm)
        return self.result

    def _create_tags(self, vm: VersionManifest) -> None:
        failed = []
        for name, expires_at_ms in self._tags:
            try:
                self.table.tag_store.create(name, vm, expires_at_ms=expires_at_ms)
            except LaminaError as e:
                failed.append(f"{name!r} ({e})")
        if failed:
            raise TagAlreadyExists(
                f"version {vm.version} of {self.table.uri} was committed, but tags {', '.join(failed)} could not be "
                "created for it; create them with Table.tags.create(name, version)"
            )

    def abort(self) -> None:
        """Discard the transaction: nothing is committed, its data files are deleted."""
        self._check_open()
        self._abort()

    def adopt_engine_write(self, write_ids: Sequence[str], paths: Sequence[str]) -> None:
        """Take over an engine write whose files an operation of this transaction references
        (``WriteSession(table, transaction=tx)`` hands its write over this way): an abort deletes
        them (and whatever else carries ``write_ids`` under ``data/``), the end of the transaction
        removes the writes' in-flight markers."""
        self._check_open()
        self._engine_write_ids += [w for w in write_ids if w not in self._engine_write_ids]
        self._engine_files += list(paths)

    def _end(self, state: str) -> None:
        """The transaction ended (committed or unknown, its files kept): the engine writes it
        took over are done. One that committed nothing leaves their files unreferenced: deleted."""
        self._state = state
        if not self._engine_write_ids:
            return
        io = self.table.io
        if state == "committed" and self.version is None:
            discard_writes(io, self._engine_write_ids, self._engine_files, search=False)
            return
        try:
            finish_writes(io, self._engine_write_ids)
        except StorageError as e:  # committed all the same; the markers expire
            log.warning("could not remove the in-flight markers of writes %s: %s", self._engine_write_ids, e)

    def _abort(self) -> None:
        self._state = "aborted"
        if self._engine_write_ids:
            discard_writes(self.table.io, self._engine_write_ids, self._engine_files, search=True)
        for p in self._pending:
            try:
                p.wait()
            except Exception:  # a write that failed left nothing to delete
                pass
        if self._written:
            try:
                self.table.io.delete_many(self._written)
            except StorageError as e:  # unreferenced files: orphan cleanup removes them later
                log.warning("could not delete the data files of an aborted transaction: %s", e)

    # -- what a catalog transaction or an engine write reads of it (lamina.catalog.transaction,
    # lamina.spark): its queued work, and its end once the commit is decided elsewhere

    @property
    def operations(self) -> tuple[Operation, ...]:
        """The operations queued so far, in order."""
        return tuple(self._ops)

    @property
    def queued_tags(self) -> tuple[str, ...]:
        """The tags to create on the version this transaction commits."""
        return tuple(name for name, _ in self._tags)

    def wait_for_writes(self) -> None:
        """Wait until every data file the queued operations reference has reached storage."""
        for p in self._pending:
            p.wait()

    def landed(self, vm: VersionManifest) -> None:
        """Its version ``vm`` was committed (by a catalog transaction): the table moves to it."""
        self.table._committed(vm, True)

    def create_tags(self, vm: VersionManifest) -> None:
        """Create the queued tags on ``vm``."""
        self._create_tags(vm)

    def end(self, state: str) -> None:
        """The commit was decided elsewhere (``committed`` or ``unknown``): see ``_end``."""
        self._end(state)

    def check_open(self) -> None:
        """Raise InvalidArgument unless the transaction still takes changes."""
        self._check_open()

    def _check_open(self) -> None:
        if self._state != "open":
            raise InvalidArgument(f"the transaction is {self._state}; start a new one with table.transaction()")

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._state != "open":
            return
        if exc_type is not None:
            self._abort()
        else:
            self.commit()
