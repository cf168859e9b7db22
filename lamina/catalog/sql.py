"""SQL catalogs: SQLite (embedded, the default) and PostgreSQL (server), one schema, one code path.

Two tables. ``lamina_namespaces(name)`` and ``lamina_tables`` with one row per
table: ``id`` (the table uuid), ``namespace``, ``name``, ``location``,
``schema_json``, ``online``, and the commit pointer ``version``,
``manifest_path`` (final name of that version's manifest), ``pending_path``
(where it was staged before the swap) and ``commit_id``. The pointer is only
ever changed by the compare-and-swap in ``_swap`` (see ``coordinator.py``).

Every statement is parameterized; names are validated before they get here
anyway. The connections (and what their failures become) are ``sql_backends.py``'s.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from lamina.catalog import iceberg_names
from lamina.catalog.base import Catalog, CatalogTable, TableInfo, check_name, parse_identifier
from lamina.catalog.coordinator import CatalogVersionLog, Row, SqlCoordinator
from lamina.catalog.snapshot import CatalogSnapshot, SnapshotEntry
from lamina.catalog.sql_backends import Backend, PostgresBackend, SqliteBackend, redact
from lamina.catalog.transaction import SERIALIZABLE, CatalogTransaction, _Refused
from lamina.commit import CommitOptions, Committer, flush_hints
from lamina.commit.committer import step
from lamina.data.inflight import live_write_ids
from lamina.errors import (
    CatalogError,
    CatalogTableAlreadyExists,
    CatalogTableNotFound,
    InvalidCatalogUri,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    StorageError,
    TableInUse,
    TableNotFound,
    VersionNotFound,
)
from lamina.iceberg import flush as iceberg_flush
from lamina.io import FileIO
from lamina.spec.features import CATALOG_COMMITS
from lamina.spec.layout import DATA_DIR, META_DIR, version_path
from lamina.spec.version import VersionManifest
from lamina.table import iceberg_view
from lamina.table.table import initial_version
from lamina.timeutil import epoch_ms

log = logging.getLogger(__name__)

SCHEMA_DDL = [
    """CREATE TABLE IF NOT EXISTS lamina_namespaces (
        name VARCHAR(128) PRIMARY KEY,
        created_ms BIGINT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS lamina_tables (
        id VARCHAR(64) PRIMARY KEY,
        namespace VARCHAR(128) NOT NULL REFERENCES lamina_namespaces(name),
        name VARCHAR(128) NOT NULL,
        location TEXT NOT NULL UNIQUE,
        schema_json TEXT NOT NULL,
        online INTEGER NOT NULL DEFAULT 1,
        version BIGINT NOT NULL,
        manifest_path TEXT NOT NULL,
        pending_path TEXT,
        commit_id VARCHAR(64),
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        UNIQUE (namespace, name)
    )""",
    # One row per committed catalog transaction (lamina.catalog.transaction): how an unknown
    # outcome of its COMMIT is resolved, and the catalog's record of multi-table commits.
    """CREATE TABLE IF NOT EXISTS lamina_transactions (
        id VARCHAR(64) PRIMARY KEY,
        committed_ms BIGINT NOT NULL,
        tables_json TEXT NOT NULL
    )""",
]

_COLS = "id, namespace, name, location, schema_json, online, version, manifest_path"


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- the catalog ------------------------------------------------------------------------


def _read(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a read-only method again once if it failed on the connection: a connection dropped
    by a server restart or an idle timeout is reopened, and a read is safe to repeat."""

    @functools.wraps(fn)
    def method(self: SqlCatalog, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except StorageError:
            return fn(self, *args, **kwargs)

    return method


class SqlCatalog(Catalog):
    def __init__(
        self,
        backend: Backend,
        warehouse: str | None,
        storage_options: Mapping[str, Any] | None = None,
        *,
        init_lock: str | None = None,
    ) -> None:
        self._db = backend
        self.uri = backend.uri
        self.warehouse = warehouse.rstrip("/") if warehouse else None
        self.storage_options = dict(storage_options or {})
        self._reopen: tuple[str, str | None] = (self.uri, None)  # set by open_sqlite / open_postgres
        with self._db.tx() as q:
            if init_lock:
                q(init_lock)  # PostgreSQL: CREATE IF NOT EXISTS races itself across sessions
            for ddl in SCHEMA_DDL:
                q(ddl)

    def close(self) -> None:
        iceberg_flush()  # a view update queued by this process names its metadata file in the catalog
        self._db.close()

    def __repr__(self) -> str:
        return f"lamina.SqlCatalog({self.uri!r})"

    # -- the catalog's Iceberg names (lamina.catalog.iceberg_names) ---------------------------

    @property
    def is_postgres(self) -> bool:
        return isinstance(self._db, PostgresBackend)

    def sql_transaction(self) -> Any:
        """A write transaction on the catalog's database (``with ... as q: q(sql, params)``)."""
        return self._db.tx()

    def publish_iceberg_name(self, identifier: str, metadata_location: str) -> None:
        """Name ``identifier``'s Iceberg view in the catalog's Iceberg tables (derived state)."""
        iceberg_names.publish(self, identifier, metadata_location)

    def _forget_iceberg_name(self, identifier: str) -> None:
        iceberg_flush()  # a view update queued earlier would name the table again after this
        try:
            iceberg_names.forget(self, identifier)
        except Exception as e:
            log.warning("the Iceberg name of %s was not removed: %s", identifier, e)

    def reopen_uri(self) -> tuple[str, str | None]:
        return self._reopen

    # -- namespaces -------------------------------------------------------------------------

    def create_namespace(self, namespace: str) -> None:
        check_name(namespace, "namespace")
        try:
            with self._db.tx() as q:
                if q("SELECT 1 FROM lamina_namespaces WHERE name = ?", (namespace,)).fetchone():
                    raise NamespaceAlreadyExists(f"namespace {namespace!r} already exists in {self.uri}")
                q("INSERT INTO lamina_namespaces (name, created_ms) VALUES (?, ?)", (namespace, _now_ms()))
        except self._db.IntegrityError:
            raise NamespaceAlreadyExists(f"namespace {namespace!r} already exists in {self.uri}") from None

    @_read
    def list_namespaces(self) -> list[str]:
        with self._db.tx(write=False) as q:
            return [r[0] for r in q("SELECT name FROM lamina_namespaces ORDER BY name").fetchall()]

    @_read
    def namespace_exists(self, namespace: str) -> bool:
        check_name(namespace, "namespace")
        with self._db.tx(write=False) as q:
            return q("SELECT 1 FROM lamina_namespaces WHERE name = ?", (namespace,)).fetchone() is not None

    def drop_namespace(self, namespace: str) -> None:
        check_name(namespace, "namespace")
        with self._db.tx() as q:
            n = q("SELECT COUNT(*) FROM lamina_tables WHERE namespace = ?", (namespace,)).fetchone()[0]
            if n:
                raise NamespaceNotEmpty(f"namespace {namespace!r} holds {n} table(s); drop or rename them first")
            if q("DELETE FROM lamina_namespaces WHERE name = ?", (namespace,)).rowcount == 0:
                raise NamespaceNotFound(f"no namespace {namespace!r} in {self.uri}")

    def _require_namespace(self, q: Callable[..., Any], namespace: str) -> None:
        if not q("SELECT 1 FROM lamina_namespaces WHERE name = ?", (namespace,)).fetchone():
            raise NamespaceNotFound(
                f"no namespace {namespace!r} in {self.uri}; create it first (catalog.create_namespace)"
            )

    # -- tables -------------------------------------------------------------------------------

    def _info(self, r: Any) -> TableInfo:
        return TableInfo(
            namespace=r[1],
            name=r[2],
            uuid=r[0],
            location=r[3],
            schema_json=r[4],
            online=bool(r[5]),
            version=int(r[6]),
            manifest_path=r[7],
        )

    @_read
    def table_info(self, identifier: Any) -> TableInfo:
        ns, name = parse_identifier(identifier)
        with self._db.tx(write=False) as q:
            r = q(f"SELECT {_COLS} FROM lamina_tables WHERE namespace = ? AND name = ?", (ns, name)).fetchone()
        if r is None:
            raise CatalogTableNotFound(f"no table {ns}.{name} in {self.uri}")
        return self._info(r)

    @_read
    def tables(self, namespace: str | None = None) -> list[TableInfo]:
        with self._db.tx(write=False) as q:
            if namespace is None:
                rows = q(f"SELECT {_COLS} FROM lamina_tables ORDER BY namespace, name").fetchall()
            else:
                check_name(namespace, "namespace")
                self._require_namespace(q, namespace)
                rows = q(
                    f"SELECT {_COLS} FROM lamina_tables WHERE namespace = ? ORDER BY name", (namespace,)
                ).fetchall()
        return [self._info(r) for r in rows]

    def table_exists(self, identifier: Any) -> bool:
        try:
            self.table_info(identifier)
            return True
        except CatalogTableNotFound:
            return False

    def _default_location(self, ns: str, name: str) -> str:
        if self.warehouse is None:
            raise CatalogError(
                f"catalog {self.uri} has no warehouse: pass location= or add ?warehouse=<path or s3://...> to the URI"
            )
        return f"{self.warehouse}/{ns}/{name}"

    def default_location(self, identifier: Any) -> str:
        return self._default_location(*parse_identifier(identifier))

    def create_table(
        self,
        identifier: Any,
        schema: pa.Schema,
        partition_by: str | Iterable[str] | None = None,
        properties: Mapping[str, Any] | None = None,
        location: str | None = None,
    ) -> CatalogTable:
        ns, name = parse_identifier(identifier)
        ident = f"{ns}.{name}"
        # Everything that can be refused is checked before a file is written.
        vm = initial_version(schema, partition_by, properties, extra_writer_features=(CATALOG_COMMITS,))
        with self._db.tx() as q:
            self._require_namespace(q, ns)
            if q("SELECT 1 FROM lamina_tables WHERE namespace = ? AND name = ?", (ns, name)).fetchone():
                raise CatalogTableAlreadyExists(f"table {ident} already exists in {self.uri}")
        io = FileIO(location or self._default_location(ns, name), self.storage_options)
        loc = io.uri
        check_location_free(io)
        # Version 0 is committed like every version: through the table's coordinator (staged,
        # row inserted -- the commit point --, then published). A crash in between is
        # completed by the next load.
        coordinator = self._coordinator(vm.table_uuid, ident, io)
        Committer(coordinator.log, coordinator).create(vm)
        table = self._open(vm.table_uuid, ident, loc)
        iceberg_view.on_commit(table, table.metadata)  # (iceberg.enabled on create)
        return table

    def _insert_table(self, table_id: str, ident: str, location: str, vm: VersionManifest, staged: str) -> None:
        """The catalog row of a new table at version 0 (its commit point; see SqlCoordinator.create)."""
        ns, name = parse_identifier(ident)
        now = _now_ms()
        try:
            with self._db.tx() as q:
                self._require_namespace(q, ns)
                if q("SELECT 1 FROM lamina_tables WHERE namespace = ? AND name = ?", (ns, name)).fetchone():
                    raise CatalogTableAlreadyExists(f"table {ident} already exists in {self.uri}")
                if q("SELECT 1 FROM lamina_tables WHERE location = ?", (location,)).fetchone():
                    raise CatalogTableAlreadyExists(f"another table of {self.uri} already lives at {location}")
                q(
                    "INSERT INTO lamina_tables (id, namespace, name, location, schema_json, online, version, "
                    "manifest_path, pending_path, commit_id, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, 1, 0, ?, ?, ?, ?, ?)",
                    (
                        table_id,
                        ns,
                        name,
                        location,
                        json.dumps(vm.schema.to_json()),
                        version_path(0),
                        staged,
                        vm.commit_id,
                        now,
                        now,
                    ),
                )
        except self._db.IntegrityError:
            raise CatalogTableAlreadyExists(
                f"table {ident} (or its location {location}) was created concurrently"
            ) from None

    def _coordinator(self, table_id: str, ident: str, io: FileIO) -> SqlCoordinator:
        log_ = CatalogVersionLog(io, table_uuid=table_id, table_identifier=ident)
        coord = SqlCoordinator(self, table_id, log_, ident)
        log_.coordinator = coord
        return coord

    def _open(self, table_id: str, ident: str, location: str) -> CatalogTable:
        coord = self._coordinator(table_id, ident, FileIO(location, self.storage_options))
        log_ = coord.log
        vm = log_.latest()
        table = CatalogTable(log_.io, log_, vm, coord)
        return table._bind_catalog(self, ident, lambda: self._online_by_id(table_id, ident))

    def load_table(self, identifier: Any) -> CatalogTable:
        return self._load(identifier)[0]

    def _load(self, identifier: Any) -> tuple[CatalogTable, TableInfo]:
        """The table at the version its catalog row names, and the row's entry: one catalog
        read (a catalog transaction loads every table it changes this way)."""
        info, row = self._entry_row(identifier)
        coord = self._coordinator(info.uuid, info.identifier, FileIO(info.location, self.storage_options))
        coord.complete(row)  # committed, its publish not done yet (the writer stopped after the swap)
        table = CatalogTable(coord.log.io, coord.log, coord.log.load(row.version), coord)
        return table._bind_catalog(self, info.identifier, lambda: self._online_by_id(info.uuid, info.identifier)), info

    @_read
    def _entry_row(self, identifier: Any) -> tuple[TableInfo, Row]:
        ns, name = parse_identifier(identifier)
        with self._db.tx(write=False) as q:
            r = q(
                f"SELECT {_COLS}, pending_path, commit_id FROM lamina_tables WHERE namespace = ? AND name = ?",
                (ns, name),
            ).fetchone()
        if r is None:
            raise CatalogTableNotFound(f"no table {ns}.{name} in {self.uri}")
        info = self._info(r)
        return info, Row(info.version, info.manifest_path, r[-2], r[-1], info.online)

    @_read
    def _online_by_id(self, table_id: str, ident: str) -> bool:
        with self._db.tx(write=False) as q:
            r = q("SELECT online FROM lamina_tables WHERE id = ?", (table_id,)).fetchone()
        if r is None:
            raise CatalogTableNotFound(f"table {ident} (uuid {table_id}) was dropped from {self.uri}")
        return bool(r[0])

    def is_online(self, identifier: Any) -> bool:
        return self.table_info(identifier).online

    def set_online(self, identifier: Any, online: bool) -> None:
        ns, name = parse_identifier(identifier)
        with self._db.tx() as q:
            n = q(
                "UPDATE lamina_tables SET online = ?, updated_ms = ? WHERE namespace = ? AND name = ?",
                (1 if online else 0, _now_ms(), ns, name),
            ).rowcount
        if n == 0:
            raise CatalogTableNotFound(f"no table {ns}.{name} in {self.uri}")

    def rename_table(self, old: Any, new: Any) -> None:
        ons, oname = parse_identifier(old)
        nns, nname = parse_identifier(new)
        try:
            with self._db.tx() as q:
                if not q("SELECT 1 FROM lamina_tables WHERE namespace = ? AND name = ?", (ons, oname)).fetchone():
                    raise CatalogTableNotFound(f"no table {ons}.{oname} in {self.uri}")
                self._require_namespace(q, nns)
                if q("SELECT 1 FROM lamina_tables WHERE namespace = ? AND name = ?", (nns, nname)).fetchone():
                    raise CatalogTableAlreadyExists(
                        f"cannot rename {ons}.{oname} to {nns}.{nname}: that table exists; drop it first"
                    )
                # Only the name changes: the location, and so every path reader, stays put.
                q(
                    "UPDATE lamina_tables SET namespace = ?, name = ?, updated_ms = ? WHERE namespace = ? AND name = ?",
                    (nns, nname, _now_ms(), ons, oname),
                )
        except self._db.IntegrityError:
            raise CatalogTableAlreadyExists(f"{nns}.{nname} was created concurrently; nothing was renamed") from None
        self._forget_iceberg_name(f"{ons}.{oname}")  # (the new name is published by the table's next sync)

    def drop_table(self, identifier: Any, purge: bool = False, *, force: bool = False) -> None:
        info = self.table_info(identifier)
        io = FileIO(info.location, self.storage_options)
        if purge and not force:
            live = live_write_ids(io)
            if live:
                raise TableInUse(
                    f"table {info.identifier} has {len(live)} write(s) in flight ({sorted(live)[:3]}...): "
                    "purging now would delete files under them. Take it offline, wait for them, or pass force=True. "
                    "Nothing was dropped."
                )
        with self._db.tx() as q:
            if q("DELETE FROM lamina_tables WHERE id = ?", (info.uuid,)).rowcount == 0:
                raise CatalogTableNotFound(f"no table {info.identifier} in {self.uri} (dropped concurrently)")
        self._forget_iceberg_name(info.identifier)
        # The row is gone first, so no commit can land while the files go.
        if purge:
            _purge(io)

    def register_table(self, identifier: Any, location: str) -> CatalogTable:
        """Adopt an existing Lamina table written by this kind of catalog (e.g. after a drop without purge)."""
        ns, name = parse_identifier(identifier)
        io = FileIO(location, self.storage_options)
        vm = CatalogVersionLog(io).latest()
        if CATALOG_COMMITS not in vm.writer_features:
            raise CatalogError(
                f"{io.uri} is a path table (its commits are put-if-absent); registering it would let path "
                "writers and the catalog both commit. Create a catalog table and copy the data instead."
            )
        now = _now_ms()
        try:
            with self._db.tx() as q:
                self._require_namespace(q, ns)
                if q("SELECT 1 FROM lamina_tables WHERE namespace = ? AND name = ?", (ns, name)).fetchone():
                    raise CatalogTableAlreadyExists(f"table {ns}.{name} already exists in {self.uri}")
                q(
                    "INSERT INTO lamina_tables (id, namespace, name, location, schema_json, online, version, "
                    "manifest_path, pending_path, commit_id, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, 1, ?, ?, NULL, ?, ?, ?)",
                    (
                        vm.table_uuid,
                        ns,
                        name,
                        io.uri,
                        json.dumps(vm.schema.to_json()),
                        vm.version,
                        version_path(vm.version),
                        vm.commit_id,
                        now,
                        now,
                    ),
                )
        except self._db.IntegrityError:
            raise CatalogTableAlreadyExists(f"table {vm.table_uuid} at {io.uri} is already in {self.uri}") from None
        return self._open(vm.table_uuid, f"{ns}.{name}", io.uri)

    # -- the commit point (RowStore for SqlCoordinator) ---------------------------------------

    def _swap(self, table_id: str, expected: int, vm: VersionManifest, pending: str) -> Row | None:
        with self._db.tx() as q:
            n = q(
                "UPDATE lamina_tables SET version = ?, manifest_path = ?, pending_path = ?, commit_id = ?, "
                "schema_json = ?, updated_ms = ? WHERE id = ? AND version = ? AND online = 1",
                (
                    vm.version,
                    version_path(vm.version),
                    pending,
                    vm.commit_id,
                    json.dumps(vm.schema.to_json()),
                    _now_ms(),
                    table_id,
                    expected,
                ),
            ).rowcount
            if n == 1:
                return None
            r = q(
                "SELECT version, manifest_path, pending_path, commit_id, online FROM lamina_tables WHERE id = ?",
                (table_id,),
            ).fetchone()
        if r is None:
            raise CatalogTableNotFound(f"table {table_id} was dropped from {self.uri}; nothing was committed")
        return Row(int(r[0]), r[1], r[2], r[3], bool(r[4]))

    @_read
    def _row(self, table_id: str) -> Row:
        with self._db.tx(write=False) as q:
            r = q(
                "SELECT version, manifest_path, pending_path, commit_id, online FROM lamina_tables WHERE id = ?",
                (table_id,),
            ).fetchone()
        if r is None:
            raise CatalogTableNotFound(f"table {table_id} was dropped from {self.uri}")
        return Row(int(r[0]), r[1], r[2], r[3], bool(r[4]))

    # -- multi-table transactions and snapshots (lamina.catalog.transaction) ------------------

    def transaction(
        self, *, commit_options: CommitOptions | None = None, isolation_level: str = SERIALIZABLE
    ) -> CatalogTransaction:
        """Changes to several tables committed at once: ``with catalog.transaction() as tx:
        tx.table("ns.a").append(...); tx.table("ns.b").delete(where=...)``. ``isolation_level``:
        ``"serializable"`` (default) or ``"snapshot"`` (see lamina.catalog.transaction)."""
        return CatalogTransaction(self, commit_options, isolation_level)

    def snapshot(self, at: Any = None) -> CatalogSnapshot:
        """Every table at one catalog state: the rows as they are now (one read), or with
        ``at`` (a datetime, ISO string or epoch ms) each table's version as of that time."""
        taken = _now_ms()
        with self._db.tx(write=False) as q:
            rows = q(
                "SELECT id, namespace, name, location, version FROM lamina_tables ORDER BY namespace, name"
            ).fetchall()
        entries = {f"{r[1]}.{r[2]}": SnapshotEntry(f"{r[1]}.{r[2]}", r[0], r[3], int(r[4])) for r in rows}
        if at is None:
            return CatalogSnapshot(self, entries, taken)
        ms = epoch_ms(at, "at")
        pinned = {}
        for ident, e in entries.items():
            coord = self._coordinator(e.uuid, ident, FileIO(e.location, self.storage_options))
            try:
                vm = coord.log.load(e.version)
            except (VersionNotFound, TableNotFound):
                coord.complete(self._row(e.uuid))  # committed, its publish not done yet
                vm = coord.log.load(e.version)
            try:
                if vm.timestamp_ms > ms:
                    vm = coord.log.at_timestamp(ms, latest=vm)
            except VersionNotFound:
                continue  # created after ``at`` (or its versions before it were expired)
            if vm.version == 0 and _created_with_changes(coord.log, vm):
                continue  # a transaction created it with its first changes at once, after ``at``
            pinned[ident] = SnapshotEntry(ident, e.uuid, e.location, vm.version)
        return CatalogSnapshot(self, pinned, taken, ms)

    @_read
    def transaction_committed(self, transaction_id: str) -> bool:
        """Whether the catalog transaction of that id committed (it is recorded in the same
        SQL transaction as its rows' swaps)."""
        with self._db.tx(write=False) as q:
            return q("SELECT 1 FROM lamina_transactions WHERE id = ?", (transaction_id,)).fetchone() is not None

    _transaction_committed = transaction_committed

    def _commit_many(
        self,
        tx_id: str,
        swaps: list[tuple[str, int, VersionManifest, str]],
        inserts: list[tuple[str, str, str, VersionManifest, str]],
        drops: list[str],
        record: Mapping[str, int],
        asserts: Iterable[tuple[str, int]] = (),
    ) -> list[tuple[str, Row | None]]:
        """The commit point of a catalog transaction: every swap, insert and delete in one SQL
        transaction, or none; ``asserts`` (table id, version): rows that must still be at that
        version, left as they are. Returns the rows that refused (empty: committed)."""
        refused: list[tuple[str, Row | None]] = []
        now = _now_ms()
        rows = sorted(
            [(t, e, (vm, staged)) for t, e, vm, staged in swaps] + [(t, e, None) for t, e in asserts],
            key=lambda r: r[0],
        )
        try:
            with self._db.tx() as q:
                # One lock order for every transaction (PostgreSQL would otherwise deadlock two
                # transactions that swap the same rows in opposite orders). A row asserted is
                # locked too (shared), so no swap of it can commit before this transaction does.
                for table_id, expected, swap in rows:
                    if swap is None:
                        r = q(
                            f"SELECT version FROM lamina_tables WHERE id = ?{self._db.lock_shared}", (table_id,)
                        ).fetchone()
                        if r is None or int(r[0]) != expected:
                            refused.append((table_id, None))
                        continue
                    vm, staged = swap
                    n = q(
                        "UPDATE lamina_tables SET version = ?, manifest_path = ?, pending_path = ?, commit_id = ?, "
                        "schema_json = ?, updated_ms = ? WHERE id = ? AND version = ? AND online = 1",
                        (
                            vm.version,
                            version_path(vm.version),
                            staged,
                            vm.commit_id,
                            json.dumps(vm.schema.to_json()),
                            now,
                            table_id,
                            expected,
                        ),
                    ).rowcount
                    if n != 1:
                        refused.append((table_id, None))
                for table_id, ident, location, vm, staged in inserts:
                    ns, name = parse_identifier(ident)
                    self._require_namespace(q, ns)
                    taken = q(
                        "SELECT 1 FROM lamina_tables WHERE (namespace = ? AND name = ?) OR location = ?",
                        (ns, name, location),
                    ).fetchone()
                    if taken:
                        refused.append((table_id, None))
                        continue
                    q(
                        "INSERT INTO lamina_tables (id, namespace, name, location, schema_json, online, version, "
                        "manifest_path, pending_path, commit_id, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)",
                        (
                            table_id,
                            ns,
                            name,
                            location,
                            json.dumps(vm.schema.to_json()),
                            vm.version,
                            version_path(vm.version),
                            staged,
                            vm.commit_id,
                            now,
                            now,
                        ),
                    )
                for table_id in drops:
                    if q("DELETE FROM lamina_tables WHERE id = ?", (table_id,)).rowcount != 1:
                        refused.append((table_id, None))
                if refused:
                    raise _Refused()
                step("sql-swapped")  # crash tests: every row changed, not yet recorded nor committed
                q(
                    "INSERT INTO lamina_transactions (id, committed_ms, tables_json) VALUES (?, ?, ?)",
                    (tx_id, now, json.dumps(dict(record), sort_keys=True)),
                )
        except _Refused:
            pass
        except self._db.IntegrityError:
            # A row inserted concurrently (PostgreSQL checks uniqueness at the insert).
            return [(table_id, None) for table_id, *_ in inserts] or [(t, None) for t, *_ in swaps]
        if not refused:
            return []
        found: list[tuple[str, Row | None]] = []
        for table_id, _ in refused:
            try:
                found.append((table_id, self._row(table_id)))
            except CatalogTableNotFound:
                found.append((table_id, None))
        return found


def _created_with_changes(log_: CatalogVersionLog, vm0: VersionManifest) -> bool:
    """Whether version 0 is that of a table a catalog transaction created together with its
    first changes: staged under the commit id of version 1, and stamped just before it (the
    table existed for no reader before version 1)."""
    vm1 = log_.try_load(1)
    return vm1 is not None and vm1.commit_id == vm0.commit_id


def check_location_free(io: FileIO) -> None:
    """Refuse a location that holds a Lamina table (any table, at any version: its first
    versions may be expired) before a new table writes a file there."""
    try:
        existing = CatalogVersionLog(io).latest()
    except TableNotFound:
        return
    raise CatalogTableAlreadyExists(
        f"{io.uri} already holds a Lamina table (uuid {existing.table_uuid}); choose another location"
    )


def _purge(io: FileIO) -> None:
    # A version hint this process queued (commits return before their hint is written) would
    # otherwise land after the purge and leave the table's directory behind.
    flush_hints()
    # Only what the table owns: files beside data/ and _lamina/ (a table adopted in place) are
    # not the table's to delete.
    local = io.local_path("")
    if local is not None:
        for owned_dir in (DATA_DIR, META_DIR):
            shutil.rmtree(os.path.join(io.uri, owned_dir), ignore_errors=True)
        try:
            os.rmdir(io.uri)  # the directory too, once nothing else is left in it
        except OSError:
            pass
        return
    io.delete_many([o.path for prefix in (DATA_DIR, META_DIR) for o in io.walk(prefix)])


# --- URIs ---------------------------------------------------------------------------------


def sqlite_path(uri: str) -> str:
    """The absolute path of the database file a ``sqlite:`` catalog URI names."""
    p = urllib.parse.urlsplit(uri)
    if p.netloc:
        raise InvalidCatalogUri(
            f"{uri!r}: SQLite catalogs are sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    path = p.path[1:] if p.path.startswith("/") else p.path
    if not path or path.endswith("/"):
        raise InvalidCatalogUri(f"{uri!r}: name the database file, e.g. sqlite:///warehouse/catalog.db")
    return os.path.abspath(os.path.expanduser(path))


def open_sqlite(uri: str, warehouse: str | None, storage_options: Mapping[str, Any] | None) -> SqlCatalog:
    path = sqlite_path(uri)
    p = urllib.parse.urlsplit(uri)
    q = dict(urllib.parse.parse_qsl(p.query))
    warehouse = warehouse or q.get("warehouse") or os.path.dirname(path)
    cat = SqlCatalog(SqliteBackend(path, uri), warehouse, storage_options)
    cat._reopen = (f"sqlite:///{path}?" + urllib.parse.urlencode({"warehouse": warehouse}), None)
    return cat


def open_postgres(
    uri: str, warehouse: str | None, storage_options: Mapping[str, Any] | None, password: str | None = None
) -> SqlCatalog:
    p = urllib.parse.urlsplit(uri)
    try:
        _ = p.port  # raises ValueError for a bad port
    except ValueError as e:  # 'abc', 99999
        raise InvalidCatalogUri(
            f"{redact(uri)!r}: {e}; a port is a number from 1 to 65535, e.g. postgresql://user@host:5432/db"
        ) from None
    if not p.hostname and "host=" not in p.query:
        raise InvalidCatalogUri(f"{redact(uri)!r}: name the server, postgresql://user@host:port/database")
    query = urllib.parse.parse_qsl(p.query)
    warehouse = warehouse or dict(query).get("warehouse")
    rest = [(k, v) for k, v in query if k != "warehouse"]
    if not any(k == "connect_timeout" for k, _ in rest):
        rest.append(("connect_timeout", "10"))  # fail fast on an unreachable server
    secret = urllib.parse.unquote(p.password) if p.password else password
    given = rest + ([("password", password)] if password and not p.password else [])
    conninfo = urllib.parse.urlunsplit(("postgresql", p.netloc, p.path, urllib.parse.urlencode(given), ""))
    backend = PostgresBackend(conninfo, redact(uri), secret)
    # Serialize schema creation across sessions (CREATE TABLE IF NOT EXISTS is not race-free).
    cat = SqlCatalog(backend, warehouse, storage_options, init_lock="SELECT pg_advisory_xact_lock(7318323)")
    netloc = p.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    plain = urllib.parse.urlunsplit(
        (
            "postgresql",
            f"{user}@{netloc[2]}" if netloc[1] else netloc[2],
            p.path,
            urllib.parse.urlencode(rest + ([("warehouse", warehouse)] if warehouse else [])),
            "",
        )
    )
    cat._reopen = (plain, secret)
    return cat
