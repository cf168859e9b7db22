"""The engine write session: how an engine (Spark today) writes into a Lamina table.

    with WriteSession(table) as session:           # registers the write id (in flight)
        ... the engine writes Parquet files under session.data_dir ...
        session.add_files(files)                    # path, size, record_count, statistics
        session.commit(mode="overwrite", where="day = '2026-01-05'")

The engine writes data files wherever its tasks run, names them with the session's
write id (so orphan cleanup spares them while the session is open, and an abort
finds them), and hands their statistics back; the session commits them as one
version through a transaction, with the same conflict rules as every other change.
Leaving the block by an exception, or ``abort()``, deletes what the write id wrote.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from lamina.commit import CommitOptions
from lamina.data.inflight import files_of_writes, finish_write, new_write_id, register_write
from lamina.errors import CommitStateUnknown, StorageError
from lamina.expr import Expr
from lamina.manifest.entries import entries_from_user_files, manifest_schema_of
from lamina.operations import PositionDelta
from lamina.spec.layout import DATA_DIR
from lamina.spec.version import VersionManifest

if TYPE_CHECKING:
    from lamina.table.table import Table

log = logging.getLogger(__name__)

# Data files an engine writes go under data/<ENGINE_DIR_PREFIX><write id>/ (orphan cleanup and
# aborts recognise the write id in the path).
ENGINE_DIR_PREFIX = "spark-"


class WriteSession:
    """One engine write into ``table``, based on the version the table object holds.

    ``register=False`` skips the in-flight marker (a write that commits within moments)."""

    def __init__(self, table: "Table", *, write_id: str | None = None, register: bool = True,
                 commit_options: CommitOptions | None = None) -> None:
        table._check_writable()  # before the engine writes anything
        self.table = table
        self.base: VersionManifest = table.metadata
        self.write_id = write_id or new_write_id()
        self.commit_options = commit_options
        self._entries: list[pa.Table] = []
        self._registered = register
        self._state = "open"
        if register:
            register_write(table.io, self.write_id)

    @property
    def data_dir(self) -> str:
        """Where the engine puts this write's files, relative to the table root."""
        return f"{DATA_DIR}/{ENGINE_DIR_PREFIX}{self.write_id}"

    @property
    def manifest_schema(self) -> pa.Schema:
        return manifest_schema_of(self.base)

    def entries_of(self, files: pa.Table) -> pa.Table:
        """Manifest entries for files described as for ``Table.add_files`` (path, size,
        record_count, ``partition_path``, ``lower.<col>``/``upper.<col>``/``null_count.<col>``)."""
        vm = self.base
        return entries_from_user_files(files, vm.schema, vm.partition_spec, manifest_schema_of(vm))

    def add_files(self, files: pa.Table) -> None:
        """Add data files the engine wrote (see ``entries_of``) to what ``commit`` commits."""
        self.add_entries(self.entries_of(files))

    def add_entries(self, entries: pa.Table) -> None:
        """Add data files already as manifest entries (e.g. built by the engine's tasks)."""
        if entries.num_rows:
            self._entries.append(entries)

    @property
    def entries(self) -> pa.Table:
        return pa.concat_tables(self._entries) if self._entries else self.manifest_schema.empty_table()

    # -- commit ---------------------------------------------------------------------------

    def commit(
        self, mode: str = "append", *, where: str | Expr | None = None,
        app_transaction: tuple[str, int] | None = None, operation: str | None = None,
    ) -> int | None:
        """Commit the added files as one version: ``mode`` append, or overwrite of the rows
        matching ``where`` (all rows if None). Raises TransactionAlreadyCommitted (nothing
        committed) if ``app_transaction`` was committed before."""
        tx = self.table.transaction(commit_options=self.commit_options)
        tx.add_entries(self.entries, mode=mode, where=where, app_transaction=app_transaction,
                       operation=operation, write_id=self.write_id)
        return self._commit(tx)

    def commit_row_delta(
        self, operation: str, prune: Expr, positions: Mapping[tuple, np.ndarray], *,
        mode: str | None = None, counts: Mapping[str, int] | None = None,
    ) -> tuple[int | None, PositionDelta]:
        """Commit a row-level change computed by the engine against ``base``: for every file
        ``prune`` selects in it (by ``lamina.data.deletes.file_key``), the physical row
        positions to delete; the added files hold the rows written instead (updates,
        inserts). Applied like ``Table.delete``: deletion vectors merged into existing ones
        (or files rewritten, copy-on-write). Raises StaleRowDelta (nothing committed) if the
        files ``prune`` selects changed since ``base``: the engine recomputes."""
        tx = self.table.transaction(commit_options=self.commit_options)
        op = PositionDelta(
            operation, prune, [self.base.schema.names[0]], lambda rows: None,  # type: ignore[arg-type, return-value]
            tx.row_mode(mode), self.write_id, positions=dict(positions), written=self.entries,
            counts=dict(counts or {}),
        )
        tx.add_operation(op)
        return self._commit(tx), op

    def _commit(self, tx: Any) -> int | None:
        try:
            version = tx.commit()
        except CommitStateUnknown:
            self._state = "unknown"  # the version may reference the files: keep them
            self._finish()
            raise
        except BaseException:
            self.abort()
            raise
        self._state = "committed"
        self._finish()
        return version

    # -- the end ----------------------------------------------------------------------------

    def abort(self) -> None:
        """Nothing is committed; delete every file this write id put under ``data/``."""
        if self._state in ("committed", "unknown"):
            return
        self._state = "aborted"
        try:
            paths = files_of_writes(self.table.io, [self.write_id])
            if paths:
                self.table.io.delete_many(paths)
        except StorageError as e:  # left for orphan cleanup (the marker expires)
            log.warning("could not delete the files of aborted write %s: %s", self.write_id, e)
        self._finish()

    def _finish(self) -> None:
        if self._registered:
            self._registered = False
            finish_write(self.table.io, self.write_id)

    def __enter__(self) -> "WriteSession":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None or self._state == "open":
            self.abort()
