"""Multi-table transactions through a SQL catalog (consistent multi-table reads are
``lamina.catalog.snapshot``'s).

    with catalog.transaction() as tx:
        tx.table("shop.orders").append(day)
        tx.table("shop.staging").delete(where="day = '2026-01-05'")
        tx.table("shop.daily").merge(summary, on="day").when_matched_update_all().when_not_matched_insert_all().execute()

A catalog transaction is one single-table transaction per table (``lamina.table.transaction``:
each call checks its input and writes its data files at once), committed together:

1. each table's operations are applied to its latest version (the usual per-table conflict
   rules) and the resulting version manifests are staged under unique names
   (``_lamina/versions/pending/``), all carrying one timestamp;
2. **the commit point**: one SQL transaction swaps every table's row from the version its
   changes were applied to, inserts the rows of tables created and deletes those dropped,
   checks that each table only read is still at the version its reads were checked against,
   and records the transaction's id in ``lamina_transactions``; if any row moved, nothing
   changes, the tables that moved are re-applied on their newest versions, and the commit
   is tried again (bounded);
3. each version is published under its final name (as a single-table catalog commit does
   after its swap), then its hint.

**Isolation** (``catalog.transaction(isolation_level=...)``, Iceberg's names):

- ``"serializable"`` (the default): a delete, update or merge of a table that moved is
  planned again on its newest version (its predicate and ``set`` expressions evaluated on
  the rows there), as the single-table committer does, so concurrent changes to the same rows
  serialize: the transaction takes effect after them. Reads through the transaction
  (``tx.table(x).scan(...)`` / ``to_arrow``, of the version it loaded) are recorded; if a
  concurrent commit deleted or rewrote rows a read saw, or added rows it would see (files its
  predicate's statistics rule out are not read), the commit raises CatalogTransactionConflict:
  a change derived from a read (a move: read, delete, append elsewhere) is never applied to a
  state the read did not see. Reads made outside the transaction are not known to it.
- ``"snapshot"``: reads are not checked; a delete, update or merge is re-applied only if the
  rows it matched at the version the transaction loaded are still there, else
  CatalogTransactionConflict (the first committer wins on the same rows, as DuckLake's and
  Delta Lake's delete-delete conflicts): for writes derived from reads made outside it.

At either level a conflict that re-planning cannot fix raises, naming the table, with nothing
committed to any table: a concurrent schema change of the columns an operation was planned on,
a file it removes removed first, a Spark delete or merge whose files changed (its positions
were found by a job that is over), a table dropped or taken offline.

Catalog readers read the rows, so they see every table of a transaction move or none. A
crash after 2 leaves rows pointing at staged manifests, which the next load of each table
publishes (``SqlCoordinator.complete``); maintenance by path keeps what staged versions
above a table's latest reference. An unknown outcome of 2 (the connection dropped during
COMMIT) is resolved by looking the transaction's id up in ``lamina_transactions``.

The shared timestamp makes ``catalog.snapshot(at=...)`` atomic too: each table is read as
of that time, and a transaction's versions are all at or before it, or all after it.
Path readers of one table see that table's versions in order; a path reader of several
tables may see one table's new version before another's is published (docs/catalog.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.catalog.base import CatalogTable, TableInfo, parse_identifier
from lamina.catalog.coordinator import CatalogVersionLog, Row, SqlCoordinator
from lamina.commit import Base, CommitOptions, CommitResult
from lamina.commit.committer import Committer, step
from lamina.errors import (
    CatalogTableAlreadyExists,
    CatalogTableNotFound,
    CatalogTransactionConflict,
    CommitConflict,
    CommitRetriesExhausted,
    CommitStateUnknown,
    CorruptMetadata,
    InvalidArgument,
    StorageError,
    TableOffline,
)
from lamina.expr import Expr, bind, referenced_columns, to_expr
from lamina.io import FileIO
from lamina.operations.rowlevel.delete_update import delete_rows
from lamina.operations.rowlevel.delta import RowDelta
from lamina.operations.schema import PlannedColumns
from lamina.spec.features import CATALOG_COMMITS, check_writer
from lamina.spec.layout import pending_path
from lamina.spec.properties import MERGE_ON_READ
from lamina.spec.slot import next_block_commits
from lamina.spec.version import VersionManifest
from lamina.table.transaction import Transaction

if TYPE_CHECKING:
    from lamina.catalog.sql import SqlCatalog
    from lamina.data.scan import Scan

log = logging.getLogger(__name__)


class TableChanges(Transaction):
    """One table's part of a catalog transaction: every change of ``Transaction`` (append,
    overwrite, delete, update, merge, schema/spec/sort-order/property updates, tags), committed
    with the catalog transaction, never on its own; and reads of the version the transaction
    loaded the table at (``scan``, ``to_arrow``), which a serializable transaction checks at
    its commit."""

    def __init__(
        self, table: CatalogTable, commit_options: CommitOptions | None = None, *, record_reads: bool = False
    ) -> None:
        super().__init__(table, commit_options)
        self._record_reads = record_reads
        self.reads: list[RowDelta] = []  # the rows each recorded read could see (deletes never committed)

    def scan(self, where: str | Expr | None = None, columns: Sequence[str] | None = None) -> Scan:
        """A read of the table at the version the transaction loaded it at, before any change
        to it in the transaction (a read after one would not see it: refused). Under
        ``isolation_level="serializable"`` the read is recorded: if a concurrent commit changes
        rows it could see before the transaction commits, the commit raises
        CatalogTransactionConflict (so changes derived from it stay right)."""
        self._check_open()
        if self.operations:
            raise InvalidArgument(
                f"read {self.table.uri} through the transaction before changing it: a read sees the version the "
                "transaction loaded, without the changes queued on it"
            )
        schema = self.table.metadata.schema
        pred = bind(to_expr(where), schema)  # bad input raises here, before anything is recorded
        scan = self.table.scan(pred, columns)
        if self._record_reads:
            read = delete_rows(schema, pred, MERGE_ON_READ)
            # the columns it returns too: a concurrent drop or rename of one changes what it saw
            shown = [c for c in (columns or schema.names) if c in schema.names]
            read.planned = PlannedColumns.of(schema, referenced_columns(pred) | set(shown))
            self.reads.append(read)
        return scan

    def to_arrow(self, where: str | Expr | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """``scan(where, columns).to_arrow()``."""
        return self.scan(where, columns).to_arrow()

    def commit(self) -> CommitResult:
        raise InvalidArgument(
            "this table's changes commit with their catalog transaction: leave the `with catalog.transaction()` "
            "block or call its commit()"
        )

    def abort(self) -> None:
        raise InvalidArgument("abort the catalog transaction instead: its tables commit or abort together")

    def __enter__(self) -> TableChanges:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


@dataclass
class _Member:
    """A table the transaction changes, and what the current attempt prepared for it."""

    ident: str
    table: CatalogTable
    changes: TableChanges
    created: VersionManifest | None = None  # version 0 of a table this transaction creates
    base: VersionManifest | None = None
    vm: VersionManifest | None = None  # the version this attempt commits (None: no change)
    staged: list[tuple[VersionManifest, str, bytes]] = field(default_factory=list)  # (version, pending path, bytes)

    @property
    def coordinator(self) -> SqlCoordinator:
        return self.table.coordinator  # type: ignore[return-value]

    @property
    def base_version(self) -> int:
        """The version the current attempt builds on (set by preparing it)."""
        assert self.base is not None, "the transaction's attempt prepares every member first"
        return self.base.version


class _Refused(Exception):
    """A row of the transaction was not where the attempt expected it: roll back."""


SERIALIZABLE, SNAPSHOT = "serializable", "snapshot"
ISOLATION_LEVELS = (SERIALIZABLE, SNAPSHOT)  # Iceberg's isolation-level values; the first is the default


def check_isolation_level(level: Any) -> str:
    """``level`` if it is one of ISOLATION_LEVELS, else InvalidArgument."""
    if level not in ISOLATION_LEVELS:
        raise InvalidArgument(f"isolation_level must be one of {list(ISOLATION_LEVELS)}, not {level!r}")
    return level


class CatalogTransaction:
    """Changes to several tables of a SQL catalog, visible to catalog readers all at once or
    not at all. ``catalog.transaction()`` makes one; see the module's docstring."""

    def __init__(
        self, catalog: SqlCatalog, commit_options: CommitOptions | None = None, isolation_level: str = SERIALIZABLE
    ) -> None:
        self.catalog = catalog
        self.commit_options = commit_options
        self.isolation_level = check_isolation_level(isolation_level)
        self.attempts = 0  # after commit: the attempts it took (1: no table moved under it)
        self.id = uuid.uuid4().hex
        self.versions: dict[str, int | None] = {}  # after commit: each table's new version (None: unchanged)
        self._members: dict[str, _Member] = {}
        self._drops: dict[str, tuple[TableInfo, bool]] = {}
        self._state = "open"
        self._in_doubt = False  # the SQL commit was sent and not refused: it may have committed

    @property
    def state(self) -> str:
        """open, committed, aborted, or unknown (the outcome could not be told: files are kept)."""
        return self._state

    # -- what it changes ----------------------------------------------------------------

    def table(self, identifier: Any) -> TableChanges:
        """The changes to ``identifier`` in this transaction (the same object on every call)."""
        self._check_open()
        ident = _ident(identifier)
        if ident in self._drops:
            raise InvalidArgument(f"table {ident} is dropped in this transaction; it cannot also be changed")
        member = self._members.get(ident)
        if member is None:
            table, entry = self.catalog._load(ident)  # one catalog read: the row gives the version and the flag
            table.check_writable(online=entry.online)  # before the caller writes a data file for nothing
            changes = TableChanges(table, self.commit_options, record_reads=self.isolation_level == SERIALIZABLE)
            member = _Member(ident, table, changes)
            self._members[ident] = member
        return member.changes

    def create_table(
        self,
        identifier: Any,
        schema: pa.Schema,
        partition_by: str | Iterable[str] | None = None,
        properties: Mapping[str, Any] | None = None,
        location: str | None = None,
    ) -> TableChanges:
        """A table created when the transaction commits (its row is inserted in the same SQL
        transaction); the changes returned apply to it, in the same commit."""
        from lamina.catalog.sql import check_location_free
        from lamina.table.table import initial_version

        self._check_open()
        ident = _ident(identifier)
        if ident in self._members or ident in self._drops:
            raise InvalidArgument(f"table {ident} is already part of this transaction")
        cat = self.catalog
        ns, name = parse_identifier(ident)
        if not cat.namespace_exists(ns):
            from lamina.errors import NamespaceNotFound

            raise NamespaceNotFound(f"no namespace {ns!r} in {cat.uri}; create it first (catalog.create_namespace)")
        if cat.table_exists(ident):
            raise CatalogTableAlreadyExists(f"table {ident} already exists in {cat.uri}")
        vm0 = initial_version(schema, partition_by, properties, extra_writer_features=(CATALOG_COMMITS,))
        io = FileIO(location or cat.default_location(ident), cat.storage_options)
        if any(m.table.io.uri == io.uri for m in self._members.values()):
            raise InvalidArgument(f"another table of this transaction lives at {io.uri}")
        check_location_free(io)
        coord = cat._coordinator(vm0.table_uuid, ident, io)
        coord.log.unborn = vm0
        table = CatalogTable(io, coord.log, vm0, coord)._bind_catalog(cat, ident, lambda: True)
        member = _Member(ident, table, TableChanges(table, self.commit_options), created=vm0)
        self._members[ident] = member
        return member.changes

    def drop_table(self, identifier: Any, purge: bool = False) -> None:
        """Drop ``identifier`` when the transaction commits (``purge``: then delete its files)."""
        self._check_open()
        ident = _ident(identifier)
        if ident in self._members:
            raise InvalidArgument(f"table {ident} has changes in this transaction; it cannot also be dropped")
        self._drops[ident] = (self.catalog.table_info(ident), purge)

    # -- the commit ---------------------------------------------------------------------

    def commit(self) -> dict[str, int | None]:
        """Commit every table's changes at once; each table's new version (None for a table
        whose changes changed nothing)."""
        self._check_open()
        if not self._drops and not any(
            m.changes.operations or m.changes.queued_tags or m.created for m in self._members.values()
        ):
            raise InvalidArgument("the catalog transaction has no changes to commit")
        options = self.commit_options or CommitOptions()
        try:
            # (Whether each table is still online is not looked up again here: the SQL commit
            # swaps only online rows, and a refusal by an offline row raises TableOffline.)
            for m in self._members.values():  # nothing may point at a file not yet written
                m.changes.wait_for_writes()
            self._run(options)
        except CommitStateUnknown:
            self._state = "unknown"
            for m in self._members.values():
                m.changes.end("unknown")
            raise
        except BaseException:
            if not (self._in_doubt and self._committed_after_all()):
                self._abort()
            raise
        self._finish()
        return dict(self.versions)

    def _committed_after_all(self) -> bool:
        """After an error (an interrupt, say) once the SQL commit was sent: whether it
        committed all the same. Then nothing may be deleted (the rows point at the staged
        versions and their files; the next load of each table publishes it); nor if that
        cannot be told."""
        try:
            committed = self.catalog._transaction_committed(self.id)
        except Exception as e:
            log.warning("could not tell whether catalog transaction %s committed (%s); its files are kept", self.id, e)
            committed, state = True, "unknown"
        else:
            state = "committed"
        if committed:
            self._state = state
            for m in self._members.values():
                m.changes._state = state
        return committed

    def _run(self, options: CommitOptions) -> None:
        deadline = time.monotonic() + options.max_seconds
        stale = list(self._members.values())  # the members to (re-)apply on their newest version
        attempt = 0
        while True:
            attempt += 1
            self.attempts = attempt
            # Each table's manifests are written on a thread of its own (Parquet encoding and
            # storage calls release the GIL; the tables share nothing until the SQL commit).
            _parallel([lambda m=m, again=attempt > 1: self._prepare(m, fresh=again) for m in stale])
            self._stage()
            refused = self._sql_commit(options)
            if refused is None:
                return
            self._drop_staged()
            stale = []
            for table_id, row in refused:
                m = next((m for m in self._members.values() if m.table.uuid == table_id), None)
                stale.append(self._check_refusal(m, table_id, row))
            if attempt >= options.max_attempts or time.monotonic() >= deadline:
                raise CommitRetriesExhausted(
                    f"gave up the catalog transaction on {', '.join(self._idents())} after {attempt} attempts: "
                    f"{', '.join(m.ident for m in stale)} kept changing. Nothing was committed to any table."
                )
            options.back_off(attempt)

    def _prepare(self, m: _Member, fresh: bool) -> None:
        """Apply ``m``'s operations to its newest version (``fresh``) or the one it holds, once
        what the isolation level needs unchanged since the transaction loaded it is checked."""
        ops = m.changes.operations
        if m.created is not None:
            base = m.created
        elif fresh or m.changes.reads or any(op.refresh_base for op in ops):
            base = m.table.log.latest()  # (a read is checked against the newest version at once)
        else:
            base = m.table.metadata
        m.base, m.vm = base, None
        try:
            self._check_unchanged(m, base)
            if not ops:
                return
            check_writer(base.writer_features, f"table {m.table.uri}")
            m.vm = Committer(m.table.log, m.coordinator)._prepare(base, ops, uuid.uuid4().hex)
        except CommitConflict as e:
            raise CatalogTransactionConflict(
                f"table {m.ident}: {e} Nothing was committed to any table of the transaction.",
                m.ident,
                e.files,
            ) from None

    def _check_unchanged(self, m: _Member, base: VersionManifest) -> None:
        """Raise CommitConflict if a commit between the version the transaction loaded ``m`` at
        and ``base`` changed rows the isolation level needs unchanged.

        Serializable: the rows each read through the transaction could see (deleted or
        rewritten, or new rows it would see added); its deletes, updates and merges are then
        planned again on ``base`` (what they match and the values they set), as if the
        transaction ran after that commit. Snapshot: the rows its deletes, updates and merges
        match at the loaded version (deleted or rewritten): the first committer wins, as in
        DuckLake and Delta Lake (applied to the newest version such a change would match fewer
        rows while the other tables' changes still commit: a row moved to another table by
        two transactions would land there twice)."""
        read = m.table.metadata
        if m.created is not None or base.version == read.version:
            return
        io = m.table.io
        at, now = Base(io, read, read.version + 1), Base(io, base, base.version + 1)
        if self.isolation_level == SERIALIZABLE:
            for r in m.changes.reads:
                try:
                    files = r.rows_changed_since(at, now, added=True)
                except CommitConflict:  # (from the columns it was planned on)
                    raise CommitConflict(
                        f"a concurrent schema change (now #{base.schema.schema_id}) changed columns that its read "
                        f"(where {r.where}) used or returned."
                    ) from None
                if files:
                    raise CommitConflict(
                        f"a concurrent commit changed rows that its read (where {r.where}) saw, or added rows it "
                        f"would see (in {_some(files)}).",
                        files=files,
                    )
            return
        for op in m.changes.operations:
            if isinstance(op, RowDelta):
                files = op.rows_changed_since(at, now)
                if files:
                    raise CommitConflict(
                        f"its {op.operation} matches rows that a concurrent commit deleted or rewrote "
                        f"(in {_some(files)}).",
                        files=files,
                    )

    def _stage(self) -> None:
        """Stamp every version with one timestamp and stage it (version 0 of a created table
        too, under the commit id of its first version)."""
        versions = [m.vm for m in self._members.values() if m.vm is not None]
        stamp = max([int(time.time() * 1000)] + [vm.timestamp_ms for vm in versions])
        for m in self._members.values():
            m.staged = []
            if m.created is not None:
                commit_id = m.vm.commit_id if m.vm is not None else uuid.uuid4().hex
                # Versions 0 and 1 share the stamp too (timestamps need only not decrease along
                # versions), so a read as of any time sees the table with its rows or not at all.
                m.created = m.created.next(timestamp_ms=stamp, commit_id=commit_id)
                if m.vm is not None:  # its block list names version 0 by the id it now has
                    m.vm = m.vm.next(parent_version=0, block_commits=next_block_commits(m.created))
                m.staged.append((m.created, pending_path(0, commit_id), m.created.to_json()))
            if m.vm is not None:
                m.vm = m.vm.next(timestamp_ms=stamp)
                m.staged.append((m.vm, pending_path(m.vm.version, m.vm.commit_id), m.vm.to_json()))
        staged = [(m, s) for m in self._members.values() for s in m.staged]
        _parallel([lambda m=m, s=s: m.table.io.put_new(s[1], s[2]) for m, s in staged])
        step("staged")

    def _sql_commit(self, options: CommitOptions) -> list[tuple[str, Row | None]] | None:
        """The commit point. None once committed; else the rows that refused it."""
        swaps = [
            (m.table.uuid, m.base_version, m.staged[-1][0], m.staged[-1][1])
            for m in self._members.values()
            if m.created is None and m.vm is not None
        ]
        inserts = [
            (m.table.uuid, m.ident, m.table.io.uri, m.staged[-1][0], m.staged[-1][1])
            for m in self._members.values()
            if m.created is not None
        ]
        drops = [info.uuid for info, _ in self._drops.values()]
        if not swaps and not inserts and not drops:
            return None  # nothing changed (e.g. deletes that matched no row)
        # A table read (and checked) but not changed must still be at the version its reads were
        # checked against (Iceberg's assert-ref-snapshot-id requirement).
        asserts = [
            (m.table.uuid, m.base_version)
            for m in self._members.values()
            if m.created is None and m.vm is None and m.changes.reads
        ]
        record = {m.ident: m.staged[-1][0].version for m in self._members.values() if m.staged}
        for _ in range(options.resolve_attempts):
            try:
                step("before-sql-commit")
                self._in_doubt = True
                refused = self.catalog._commit_many(self.id, swaps, inserts, drops, record, asserts)
                self._in_doubt = not refused
                step("sql-committed")
                return refused or None
            except StorageError as e:
                log.warning("catalog transaction %s has an unknown outcome (%s); resolving by its id", self.id, e)
            try:
                if self.catalog._transaction_committed(self.id):
                    step("sql-committed")
                    return None
            except StorageError as e:
                log.warning("could not look catalog transaction %s up: %s", self.id, e)
        raise CommitStateUnknown(
            f"could not tell whether catalog transaction {self.id} committed ({', '.join(self._idents())}): "
            f"the catalog kept failing. Look for it with catalog.transaction_committed({self.id!r}) before retrying."
        )

    def _check_refusal(self, m: _Member | None, table_id: str, row: Row | None) -> _Member:
        """Raise unless a re-apply can fix what refused the commit (a row that moved); the
        member to re-apply."""
        if m is None:  # a table being dropped
            ident = next(i for i, (info, _) in self._drops.items() if info.uuid == table_id)
            raise CatalogTableNotFound(f"table {ident} was dropped concurrently; nothing was committed")
        if m.created is not None:
            raise CatalogTableAlreadyExists(
                f"table {m.ident} (or its location {m.table.uri}) was created concurrently; nothing was committed"
            )
        if row is None:
            raise CatalogTableNotFound(f"table {m.ident} was dropped concurrently; nothing was committed")
        if not row.online and m.vm is not None:  # (a table only read may go offline)
            raise TableOffline(f"table {m.ident} went offline; nothing was committed to any table of the transaction")
        if row.version < m.base_version:
            raise CorruptMetadata(
                f"table {m.ident}: the catalog row went back from version {m.base_version} to {row.version}"
            )
        return m

    def _finish(self) -> None:
        """After the commit point: publish every version under its final name, then hints,
        tags, and purges. A failure here loses nothing (the next load publishes)."""
        self._state = "committed"  # whatever stops what follows (an interrupt), it is committed
        published: set[str] = set()

        def publish(m: _Member) -> None:
            for vm, staged, data in m.staged:
                try:
                    m.coordinator._publish_final(vm.version, data, vm.commit_id, staged)
                except (StorageError, CorruptMetadata) as e:
                    log.warning(
                        "version %d of %s is committed but not yet published (%s); its next load publishes it",
                        vm.version,
                        m.ident,
                        e,
                    )
                    return
                step("published")
            published.add(m.ident)

        _parallel([lambda m=m: publish(m) for m in self._members.values() if m.staged])
        for m in self._members.values():
            vm = m.vm or m.created
            if m.created is not None:
                table_log = m.table.log
                assert isinstance(table_log, CatalogVersionLog)  # a catalog table's
                table_log.unborn = None
            if vm is not None and m.ident in published:
                # (Unpublished, the table object stays at its base: a commit from it then rebases
                # through the row, which publishes first; a swap must build on a published version.)
                if m.table.log.hint_due(vm.version):
                    m.table.log.write_hint(vm, wait=False)
                m.changes.landed(vm)
            m.changes.version = None if m.vm is None else m.vm.version
            m.changes.end("committed")
            self.versions[m.ident] = m.changes.version if m.created is None else (m.vm or m.created).version
            if m.changes.queued_tags:
                m.changes.create_tags(vm if vm is not None else m.table.metadata)
        for _ident, (info, purge) in self._drops.items():
            if purge:
                from lamina.catalog.sql import _purge

                _purge(FileIO(info.location, self.catalog.storage_options))

    def abort(self) -> None:
        """Discard the transaction: nothing is committed, the data files it wrote are deleted."""
        self._check_open()
        self._abort()

    def _abort(self) -> None:
        self._state = "aborted"
        self._drop_staged()
        for m in self._members.values():
            if m.changes._state == "open":
                Transaction._abort(m.changes)

    def _drop_staged(self) -> None:
        for m in self._members.values():
            if m.staged:
                for _, path, _ in m.staged:
                    m.coordinator._drop(path)
                m.staged = []

    def _idents(self) -> list[str]:
        return [*self._members, *self._drops]

    def _check_open(self) -> None:
        if self._state != "open":
            raise InvalidArgument(
                f"the catalog transaction is {self._state}; start a new one with catalog.transaction()"
            )

    def __enter__(self) -> CatalogTransaction:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._state != "open":
            return
        if exc_type is not None:
            self._abort()
        else:
            self.commit()

    def __repr__(self) -> str:
        return f"lamina.CatalogTransaction({self.id!r}, {self._idents()}, {self._state})"


def _some(files: list[str]) -> str:
    return f"{', '.join(files[:3])}{', ...' if len(files) > 3 else ''}"


def _ident(identifier: Any) -> str:
    ns, name = parse_identifier(identifier)
    return f"{ns}.{name}"


# Kept for the process (starting threads per commit costs more than a small table's puts).
# Its jobs never submit to it themselves, so they cannot wait on each other.
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-catalog-tx")


def _parallel(jobs: list) -> None:
    """Run independent jobs (one per table: its manifests, its puts) side by side; the first
    error is raised once every job has ended."""
    if len(jobs) <= 1:
        for job in jobs:
            job()
        return
    futures = [_pool.submit(job) for job in jobs]
    for f in futures:
        f.exception()  # wait for all: none may still write once the caller cleans up
    for f in futures:
        f.result()
