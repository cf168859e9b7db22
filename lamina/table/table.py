"""Table: the user API over one table location.

A Table object is pinned to the version it loaded (``table.version``); reads
use that version unless told otherwise, writes commit on top of the latest
version and move the object to what they committed.
"""

from __future__ import annotations

import time
import uuid
from datetime import date, datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from lamina.commit import CommitOptions, Committer, ObjectStoreCoordinator, VersionLog
from lamina.commit.coordinator import CommitCoordinator
from lamina.errors import (
    AlreadyExists,
    InvalidArgument,
    SchemaMismatch,
    TableAlreadyExists,
    TableNotFound,
)
from lamina.expr import AlwaysTrue, Expr, bind, to_arrow_filter, to_expr
from lamina.io import FileIO
from lamina.manifest.entries import data_entries, entries_from_user_files, manifest_schema
from lamina.spec.features import DEFAULT_READER_FEATURES, DEFAULT_WRITER_FEATURES, check_reader
from lamina.spec.layout import FORMAT_VERSION, version_path
from lamina.spec.partition import PartitionSpec, parse_partition_by
from lamina.spec.schema import Schema
from lamina.spec.version import VersionManifest
from lamina.table.operations import AppendFiles, Overwrite, check_app_transactions
from lamina.table.scan import Scan, ScanPlan
from lamina.table.writer import PendingWrites, write_data_files

DEFAULT_MAX_ROWS_PER_FILE = 1_000_000


def _to_arrow(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    try:
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            return pa.Table.from_pandas(data, preserve_index=False)
    except ImportError:  # pragma: no cover
        pass
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    raise SchemaMismatch(
        f"cannot write {type(data).__name__}: pass a pyarrow Table, RecordBatch, RecordBatchReader or pandas DataFrame"
    )


def _app_transactions(app_transaction: tuple[str, int] | None) -> dict[str, int] | None:
    if app_transaction is None:
        return None
    try:
        app, seq = app_transaction
    except (TypeError, ValueError):
        raise InvalidArgument(f"app_transaction must be (app_id, sequence), got {app_transaction!r}") from None
    if not isinstance(app, str) or not app or isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise InvalidArgument(f"app_transaction must be (non-empty str, int >= 0), got {app_transaction!r}")
    return {app: seq}


def _timestamp_ms(ts: Any) -> int:
    if isinstance(ts, bool):
        raise InvalidArgument(f"timestamp {ts!r} is not a time")
    if isinstance(ts, (int, float)):
        return int(ts)
    if isinstance(ts, str):
        try:
            ts = datetime.fromisoformat(ts)
        except ValueError:
            raise InvalidArgument(f"timestamp {ts!r} is not ISO 8601 (e.g. '2026-01-31T12:00:00+00:00')") from None
    if isinstance(ts, date) and not isinstance(ts, datetime):
        ts = datetime(ts.year, ts.month, ts.day)
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=timezone.utc)
        return int(ts.timestamp() * 1000)
    raise InvalidArgument(f"timestamp must be a datetime, ISO string or epoch milliseconds, not {type(ts).__name__}")


class Table:
    def __init__(
        self,
        io: FileIO,
        log: VersionLog,
        vm: VersionManifest,
        coordinator: CommitCoordinator | None = None,
    ) -> None:
        self.io = io
        self.log = log
        self._vm = vm
        self.coordinator = coordinator or ObjectStoreCoordinator(io)
        self._committer = Committer(log, self.coordinator, self._mschema_of)

    # -- metadata ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self.io.uri

    @property
    def metadata(self) -> VersionManifest:
        return self._vm

    @property
    def version(self) -> int:
        return self._vm.version

    @property
    def uuid(self) -> str:
        return self._vm.table_uuid

    @property
    def schema(self) -> pa.Schema:
        return self._vm.schema.arrow

    @property
    def partition_spec(self) -> PartitionSpec:
        return self._vm.partition_spec

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._vm.properties)

    def _mschema_of(self, vm: VersionManifest) -> pa.Schema:
        return manifest_schema(vm.schema, vm.partition_spec)

    def refresh(self) -> "Table":
        """Move to the latest version."""
        self._vm = self.log.latest()
        check_reader(self._vm.reader_features, f"table {self.uri}")
        return self

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Versions newest first: version, timestamp, operation, summary, parent, commit id."""
        out = []
        for v in reversed(self.log.list_versions()):
            if v > self.version:
                continue
            vm = self.log.try_load(v)
            if vm is None:
                continue
            out.append(
                {
                    "version": vm.version,
                    "timestamp": datetime.fromtimestamp(vm.timestamp_ms / 1000, tz=timezone.utc),
                    "timestamp_ms": vm.timestamp_ms,
                    "operation": vm.operation,
                    "parent_version": vm.parent_version,
                    "commit_id": vm.commit_id,
                    "summary": vm.summary,
                }
            )
            if limit is not None and len(out) >= limit:
                break
        return out

    # -- reads --------------------------------------------------------------------------

    def _resolve(self, version: int | None, timestamp: Any) -> VersionManifest:
        if version is not None and timestamp is not None:
            raise InvalidArgument("pass either version or timestamp, not both")
        if version is not None:
            if isinstance(version, bool) or not isinstance(version, int):
                raise InvalidArgument(f"version must be an int, not {version!r}")
            vm = self._vm if version == self._vm.version else self.log.load(version)
        elif timestamp is not None:
            vm = self.log.at_timestamp(_timestamp_ms(timestamp))
        else:
            vm = self._vm
        check_reader(vm.reader_features, f"version {vm.version} of {self.uri}")
        return vm

    def scan(
        self,
        where: str | Expr | None = None,
        columns: Sequence[str] | None = None,
        version: int | None = None,
        timestamp: Any = None,
    ) -> Scan:
        return Scan(self, self._resolve(version, timestamp), where, columns)

    def _scan_at(self, vm: VersionManifest, where: str | Expr | None) -> Scan:
        return Scan(self, vm, where, None)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        return self.scan(**kwargs).to_arrow()

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.scan(**kwargs).to_pandas()

    def plan(self, **kwargs: Any) -> ScanPlan:
        return self.scan(**kwargs).plan()

    # -- writes ---------------------------------------------------------------------------

    def _write(self, data: pa.Table, write_id: str, pending: PendingWrites | None = None) -> list[dict[str, Any]]:
        vm = self._vm
        props = vm.properties
        max_rows = int(props.get("write.max-rows-per-file", DEFAULT_MAX_ROWS_PER_FILE))
        if max_rows < 1:
            raise InvalidArgument("write.max-rows-per-file must be >= 1")
        return write_data_files(
            self.io, vm.schema, vm.partition_spec, data, write_id, max_rows,
            compression=props.get("write.parquet.compression", "snappy"),
            pending=pending,
        )

    def _entries(self, files: list[dict[str, Any]]) -> pa.Table:
        vm = self._vm
        return data_entries(files, self._mschema_of(vm), vm.version + 1, vm.partition_spec.spec_id)

    def _commit(self, op: Any, options: CommitOptions | None = None, pending: PendingWrites | None = None) -> int:
        # Start from the version this object holds: with one writer it is the latest, and
        # if it is stale the put-if-absent fails fast and the committer rebases.
        self._vm = self._committer.commit(self._vm, op, options, before_publish=pending.wait if pending else None)
        return self._vm.version

    def append(
        self,
        data: Any,
        *,
        app_transaction: tuple[str, int] | None = None,
        commit_options: CommitOptions | None = None,
    ) -> int:
        """Append rows as one new version; returns the version committed.

        ``app_transaction=(app_id, sequence)`` makes the append idempotent: it is recorded
        in the version, and an append whose sequence is not above the app's recorded one
        raises TransactionAlreadyCommitted with nothing committed.
        """
        table = self._vm.schema.conform(_to_arrow(data))  # schema errors before any file is written
        apps = _app_transactions(app_transaction)
        if apps:
            check_app_transactions(self.log.latest(), apps)  # before writing a file for nothing
        pending = PendingWrites([])  # the data file reaches disk while manifests are built
        files = self._write(table, uuid.uuid4().hex[:16], pending)
        return self._commit(AppendFiles(self, self._entries(files), app_transactions=apps), commit_options, pending)

    def overwrite(self, data: Any, where: str | Expr | None = None, *, commit_options: CommitOptions | None = None) -> int:
        """Replace all rows (or those matching ``where``) with ``data``, as one version.

        With ``where``, every new row must match it (as Delta's replaceWhere), and
        files that only partly match are rewritten without the matching rows.
        """
        table = self._vm.schema.conform(_to_arrow(data))
        predicate = bind(to_expr(where), self._vm.schema)
        if not isinstance(predicate, AlwaysTrue) and table.num_rows:
            matching = table.filter(to_arrow_filter(predicate)).num_rows
            if matching != table.num_rows:
                raise InvalidArgument(
                    f"{table.num_rows - matching} of {table.num_rows} new rows do not match the overwrite "
                    f"predicate {where!r}; every row written by overwrite(where=...) must match it"
                )
        write_id = uuid.uuid4().hex[:16]
        files = self._write(table, write_id)
        op = Overwrite(self, predicate, self._entries(files), lambda rows: self._entries(self._write(rows, write_id)))
        return self._commit(op, commit_options)

    def add_files(
        self,
        files: pa.Table,
        *,
        mode: str = "append",
        where: str | Expr | None = None,
        app_transaction: tuple[str, int] | None = None,
        commit_options: CommitOptions | None = None,
    ) -> int:
        """Register existing data files (already under the table root) in one version.

        ``files`` columns: path (relative to the table root), size, record_count, and
        optional ``partition_path``, ``lower.<col>``, ``upper.<col>``, ``null_count.<col>``,
        ``partition.<field>``. ``mode="overwrite"`` replaces all rows (or those matching
        ``where``; the caller guarantees the new files' rows match it) in the same version.
        ``app_transaction`` as for ``append`` (append mode only).
        """
        vm = self._vm
        entries = entries_from_user_files(files, vm.schema, vm.partition_spec, self._mschema_of(vm))
        for p in entries.column("path").to_pylist()[:1]:
            if p.startswith("/") or ".." in p.split("/"):
                raise InvalidArgument(f"add_files paths must be relative to the table root, got {p!r}")
        return self._commit_entries(
            entries, mode=mode, where=where, app_transaction=app_transaction,
            operation="add-files", commit_options=commit_options,
        )

    def _commit_entries(
        self,
        entries: pa.Table,
        *,
        mode: str = "append",
        where: str | Expr | None = None,
        app_transaction: tuple[str, int] | None = None,
        operation: str = "append",
        write_id: str | None = None,
        commit_options: CommitOptions | None = None,
    ) -> int:
        """Commit data files already written (manifest-format ``entries``) as one version.

        Overwrite rewrites files that only partly match ``where``; the rewritten
        remainders carry ``write_id`` in their names.
        """
        apps = _app_transactions(app_transaction)
        if mode == "append":
            op: Any = AppendFiles(self, entries, operation=operation, app_transactions=apps)
        elif mode == "overwrite":
            if apps:
                raise InvalidArgument("app_transaction applies to appends only, not to overwrite")
            predicate = bind(to_expr(where), self._vm.schema)
            wid = write_id or uuid.uuid4().hex[:16]
            op = Overwrite(self, predicate, entries, lambda rows: self._entries(self._write(rows, wid)))
        else:
            raise InvalidArgument(f"mode must be 'append' or 'overwrite', not {mode!r}")
        return self._commit(op, commit_options)

    def __repr__(self) -> str:
        return f"lamina.Table({self.uri!r}, version={self.version})"


def _new_log(uri: str, storage_options: Mapping[str, Any] | None, identifier: str | None, allow_list: bool = True) -> VersionLog:
    return VersionLog(FileIO(uri, storage_options), table_identifier=identifier, allow_list=allow_list)


def create_table(
    uri: str,
    schema: pa.Schema,
    partition_by: str | Iterable[str] | None = None,
    properties: Mapping[str, Any] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    identifier: str | None = None,
) -> Table:
    """Create a table at ``uri`` and commit its version 0 (empty)."""
    log = _new_log(uri, storage_options, identifier)
    try:
        existing = log.latest()
    except TableNotFound:
        existing = None
    if existing is not None:
        raise TableAlreadyExists(
            f"a Lamina table (uuid {existing.table_uuid}, version {existing.version}) already exists at {uri}; "
            "open it with lamina.open_table, or choose another location"
        )
    lschema = Schema.from_arrow(schema)
    spec = parse_partition_by(partition_by if not isinstance(partition_by, str) else [partition_by], lschema)
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    reader_features = list(DEFAULT_READER_FEATURES)
    writer_features = list(DEFAULT_WRITER_FEATURES)
    if not spec.is_unpartitioned:
        reader_features.append("hidden-partitioning")
        writer_features.append("hidden-partitioning")
    vm = VersionManifest(
        version=0,
        parent_version=None,
        table_uuid=str(uuid.uuid4()),
        timestamp_ms=int(time.time() * 1000),
        operation="create",
        summary={"total-files": 0, "total-records": 0},
        schema=lschema,
        partition_spec=spec,
        properties=props,
        root_manifest=None,
        reader_features=tuple(reader_features),
        writer_features=tuple(writer_features),
        commit_id=uuid.uuid4().hex,
        format_version=FORMAT_VERSION,
    )
    try:
        log.io.put_if_absent(version_path(0), vm.to_json())
    except AlreadyExists:
        raise TableAlreadyExists(f"another writer created a table at {uri} at the same time") from None
    log.table_uuid = vm.table_uuid
    log.write_hint(vm)
    return Table(log.io, log, vm)


def open_table(
    uri: str,
    *,
    version: int | None = None,
    timestamp: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_list: bool = True,
    table_uuid: str | None = None,
) -> Table:
    """Open the latest version of the table at ``uri`` (or ``version`` / ``timestamp``).

    ``allow_list=False`` trusts the version hint and never lists (for readers
    without list permission); ``table_uuid`` refuses a location that holds
    another table.
    """
    log = _new_log(uri, storage_options, None, allow_list)
    log.table_uuid = table_uuid
    if version is not None:
        vm = log.load(version)
    else:
        vm = log.latest()
        if timestamp is not None:
            vm = log.at_timestamp(_timestamp_ms(timestamp), vm)
    check_reader(vm.reader_features, f"table {uri}")
    return Table(log.io, log, vm)
