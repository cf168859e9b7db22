"""The engine write session: how an engine (Spark today) writes into a Lamina table.

    with WriteSession(table) as session:           # checks the table may be written; registers the write id
        ... the engine writes Parquet files under session.data_dir, named with session.write_id ...
        session.add_files(files)                    # path, size, record_count, statistics
        session.commit(mode="overwrite", where="day = '2026-01-05'")

The engine writes data files wherever its tasks run, in paths that carry the session's
write id (under ``data_dir``, or named ``<write id>-...`` by ``lamina.data.writer``), so
orphan cleanup spares them while the session is open and an abort finds them; it hands
their statistics back, and the session commits them as one version through a transaction,
with the same conflict rules as every other change. Three ways to commit:

- ``commit``: append the added files, or overwrite the rows matching a predicate with them;
- ``commit_row_delta``: row-level positions to delete (merge, delete, update) computed by
  the engine against ``base``, plus the added files holding rewritten or inserted rows;
- ``commit_operation``: any operation that references the write's files (``t.maintenance.compact``
  with ``session=`` commits a compaction whose groups the engine rewrote this way).

A write that changes the table's schema (``schema_mode="merge"``) plans the change first
(``merged_schema``), writes its files for the new schema, and stages the change in the
session (``stage_schema_update``): it commits in the same version as the files.

A commit that fails, ``abort()``, or leaving the ``with`` block by an exception deletes what
the write put under ``data/`` and commits nothing; a commit whose outcome is unknown
(CommitStateUnknown) keeps the files, which the version may reference.

An engine write can also be one change of a larger transaction: ``WriteSession(table,
transaction=tx)`` (a ``table.transaction()``, or ``tx.table(ident)`` of a catalog transaction)
queues what ``commit``/``commit_row_delta``/``commit_operation`` would commit into ``tx``
instead, and hands the write over to it (``Transaction.adopt_engine_write``): the files
become visible when ``tx`` commits, with its other changes, and are deleted if it aborts.
Those calls then return None (the version is ``tx``'s, once it commits).

A distributed engine may plan a write in one process, write in others and commit in a
third: the session's state that travels is its ``write_id``. The committing process opens ``WriteSession(table, write_id=..., register=False)`` to take the
write over; tasks that name their files with write ids of their own (each registered by its
task with ``lamina.data.inflight.register_write``) are taken over with ``adopt``. A write
that starts before its table exists registers its id itself and is taken over the same way
once the table is created; until then ``lamina.data.inflight.discard_writes`` cleans it up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lamina.commit import CommitOptions, CommitResult, Operation
from lamina.data.inflight import discard_writes, finish_writes, new_write_id, register_write
from lamina.errors import CommitStateUnknown, InvalidArgument, StorageError
from lamina.expr import Expr
from lamina.manifest.entries import entries_from_user_files, manifest_schema_of
from lamina.operations import PositionDelta
from lamina.operations.schema import SchemaUpdate, UpdateSchema, widens_on_merge
from lamina.spec.layout import engine_data_dir
from lamina.spec.stats import stats_policy
from lamina.spec.version import VersionManifest

if TYPE_CHECKING:
    from lamina.table.table import Table
    from lamina.table.transaction import Transaction

log = logging.getLogger(__name__)


class WriteSession:
    """One engine write into ``table``, based on the version the table object holds (``base``).

    ``write_id``: continue a write started elsewhere (the engine's planning process, or before
    the table existed) instead of starting one; ``register``: put the write's in-flight marker
    now (False: it is in place already, put by whoever started the write). Either way the
    session removes the marker when it ends. Raises (UnsupportedFeature, CatalogManaged,
    TableOffline) before anything is written if the table may not be written.

    ``transaction``: a transaction on ``table`` the write's changes are queued into (see the
    module docstring); ``base`` is then what that transaction's changes so far are checked
    against (``Transaction.metadata``: with its staged schema or spec changes)."""

    def __init__(
        self,
        table: Table,
        *,
        write_id: str | None = None,
        register: bool = True,
        commit_options: CommitOptions | None = None,
        transaction: Transaction | None = None,
    ) -> None:
        if not register and write_id is None:
            raise InvalidArgument("register=False continues a write started elsewhere: pass its write_id")
        if transaction is not None:
            if transaction.table is not table:
                raise InvalidArgument("the transaction given is not on this table: pass its own table (tx.table)")
            transaction._check_open()
        table.check_writable()  # before the engine writes anything
        table.coordinator.check_commit(table.metadata)  # e.g. main of a catalog's table opened by path
        self.table = table
        self.transaction = transaction
        self.base: VersionManifest = table.metadata if transaction is None else transaction.metadata
        self.write_id = write_id or new_write_id()
        self.commit_options = commit_options
        self._write_ids = [self.write_id]
        self._entries: list[pa.Table] = []
        self._schema_update: UpdateSchema | None = None
        self._state = "open"
        if register:
            register_write(table.io, self.write_id)

    @property
    def data_dir(self) -> str:
        """Where an engine with its own data-file writer puts this write's files (relative to
        the table root); their partition directories go below it."""
        return engine_data_dir(self.write_id)

    @property
    def write_ids(self) -> list[str]:
        """The session's write id, then every adopted one."""
        return list(self._write_ids)

    def adopt(self, write_ids: Iterable[str]) -> None:
        """Make writes registered under other ids part of this one (an engine whose tasks each
        name their files with a write id of their own): their files are committed with the
        session's, an abort deletes them, and the end of the session removes their markers."""
        self._check_open()
        self._write_ids += [w for w in dict.fromkeys(write_ids) if w not in self._write_ids]

    @property
    def metadata(self) -> VersionManifest:
        """The version the engine writes files for: ``base``, with the schema change staged by
        ``stage_schema_update`` (the files follow that schema)."""
        return self.base if self._schema_update is None else self.base.next(schema=self._schema_update.planned_schema)

    def stage_schema_update(self, op: UpdateSchema) -> None:
        """Commit schema change ``op`` (see ``merged_schema``) in the same version as the files,
        before them: the engine writes its files for ``op.planned_schema`` (physical names,
        field ids). If a concurrent commit changed the table's schema meanwhile, the commit fails (CommitConflict) and deletes the files."""
        self._check_open()
        if self._entries:
            raise InvalidArgument("stage the schema update before adding files: they must be written for it")
        self._schema_update = op

    @property
    def manifest_schema(self) -> pa.Schema:
        return manifest_schema_of(self.metadata)

    # -- the files --------------------------------------------------------------------------

    def entries_of(self, files: pa.Table) -> pa.Table:
        """Manifest entries for files described as for ``Table.add_files`` (path, size,
        record_count, ``partition_path``, ``lower.<col>``/``upper.<col>``/``null_count.<col>``)."""
        vm = self.metadata
        return entries_from_user_files(
            files, vm.schema, vm.partition_spec, manifest_schema_of(vm), stats_policy(vm.schema, vm.properties)
        )

    def add_files(self, files: pa.Table) -> None:
        """Add data files the engine wrote (see ``entries_of``) to what the session commits."""
        self.add_entries(self.entries_of(files))

    def add_entries(self, entries: pa.Table) -> None:
        """Add data files already as manifest entries (e.g. built by the engine's tasks with
        ``lamina.manifest.entries.data_entries``)."""
        self._check_open()
        if entries.num_rows:
            self._entries.append(entries)

    @property
    def entries(self) -> pa.Table:
        """The entries of every file added so far."""
        return pa.concat_tables(self._entries) if self._entries else self.manifest_schema.empty_table()

    # -- commit ---------------------------------------------------------------------------

    def commit(
        self,
        mode: str = "append",
        *,
        where: str | Expr | None = None,
        app_transaction: tuple[str, int] | None = None,
        operation: str | None = None,
    ) -> CommitResult | None:
        """Commit the added files as one version: ``mode`` append, or overwrite of the rows
        matching ``where`` (all rows if None; files that only partly match are rewritten,
        named by the write id). Its ``CommitResult``; None if the session writes within a
        transaction (the transaction commits the files). Raises TransactionAlreadyCommitted
        (nothing committed, the files deleted) if ``app_transaction`` was committed before."""
        tx = self._transaction()
        tx.add_entries(
            self.entries,
            mode=mode,
            where=where,
            app_transaction=app_transaction,
            operation=operation,
            write_id=self.write_id,
        )
        return self._commit(tx)

    def commit_row_delta(
        self,
        operation: str,
        prune: Expr,
        positions: Mapping[tuple, np.ndarray | BitMap],
        *,
        mode: str | None = None,
        counts: Mapping[str, int] | None = None,
    ) -> tuple[CommitResult | None, PositionDelta]:
        """Commit a row-level change the engine computed against ``base``: for every file
        ``prune`` selects in it (keyed by ``lamina.data.deletes.file_key``), the physical row
        positions to delete (empty: untouched), an array or a ``pyroaring.BitMap``; the added
        files hold the rows written instead (updates, inserts; ``counts``: rows_updated /
        rows_inserted, for the summary).
        Applied like ``Table.delete``: deletion vectors merged into existing ones, or
        (``mode`` copy-on-write; default the table's ``write.delete.mode``) the files
        rewritten. Raises StaleRowDelta (nothing committed, the files deleted) if the files
        ``prune`` selects changed since ``base``: the engine recomputes in a new session.
        Returns the ``CommitResult`` (None: queued in a transaction) and the operation
        (``last_stats``: files touched, rows deleted)."""
        tx = self._transaction()
        op = PositionDelta(
            operation,
            prune,
            [self.base.schema.names[0]],
            lambda rows: None,  # type: ignore[arg-type, return-value]
            tx.row_mode(mode),
            self.write_id,
            positions=dict(positions),
            written=self.entries,
            counts=dict(counts or {}),
        )
        return self._commit(tx.add_operation(op)), op

    def commit_operation(self, op: Operation) -> CommitResult | None:
        """Commit an operation (``lamina.operations``) that references this write's files, as
        one version (if it changed nothing, nothing is committed and the files are deleted);
        None if the session writes within a transaction."""
        return self._commit(self._transaction().add_operation(op))

    def _transaction(self) -> Transaction:
        self._check_open()
        tx = self.transaction or self.table.transaction(commit_options=self.commit_options)
        if self._schema_update is not None:
            tx.stage_schema_update(self._schema_update)
        return tx

    def _commit(self, tx: Transaction) -> CommitResult | None:
        if tx is self.transaction:  # queued: the transaction commits the files, or deletes them
            tx.adopt_engine_write(self._write_ids, self.entries.column("path").to_pylist())
            self._state = "queued"
            return None
        try:
            result = tx.commit()
        except CommitStateUnknown:
            self._state = "unknown"  # the version may reference the files: keep them
            self._finish()
            raise
        except BaseException:
            if tx.state == "committed":  # the version landed, a commit hook failed: the files are its
                self._state = "committed"
                self._finish()
            else:
                self.abort()
            raise
        self._state = "committed"
        if result.version is None:  # nothing referenced the write's files: an empty directory at most
            self._discard(search=False)
        else:
            self._finish()
        return result

    # -- the end ----------------------------------------------------------------------------

    def abort(self) -> None:
        """Commit nothing, and delete what this write put under ``data/``: the files added,
        everything under ``data_dir``, and every file named by one of ``write_ids`` (files
        the engine's tasks wrote but never reported; one listing of ``data/``). Does nothing
        once the session has committed."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._discard(search=True)

    def _discard(self, search: bool) -> None:
        entries = self.entries
        discard_writes(self.table.io, self._write_ids, entries.column("path").to_pylist(), search=search)

    def _finish(self) -> None:
        try:
            finish_writes(self.table.io, self._write_ids)
        except StorageError as e:  # committed all the same; the markers expire
            log.warning("could not remove the in-flight markers of writes %s: %s", self._write_ids, e)

    def _check_open(self) -> None:
        if self._state != "open":
            raise InvalidArgument(f"the write session is {self._state}; open a new one")

    def __enter__(self) -> WriteSession:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._state == "open":
            self.abort()


def merged_schema(vm: VersionManifest, data: pa.Schema) -> UpdateSchema | None:
    """The schema change a write of rows of schema ``data`` into version ``vm`` makes with
    ``schema_mode="merge"`` (the columns ``vm`` lacks added, and where the table property
    ``schema.type-widening.enabled`` is true the columns ``data`` has wider widened:
    ``SchemaUpdate.union_by_name``; the schema it makes is its ``planned_schema``); None if
    none is needed.
    Planned once, so its added columns' physical names are fixed: an engine writes its files
    for the schema, and commits the change with them (``WriteSession.stage_schema_update``),
    in whichever process it commits."""
    planned: list[UpdateSchema] = []
    update = SchemaUpdate(vm, planned.append, strict=True)
    update.union_by_name(data, widen=widens_on_merge(vm)).commit()
    return planned[0] if planned else None
