"""Table: the user API over one table location.

A Table object is pinned to the version it loaded (``table.version``); reads
use that version unless told otherwise, writes commit on top of the latest
version and move the object to what they committed.
"""

from __future__ import annotations

import functools
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import CommitOptions, Committer, ObjectStoreCoordinator, VersionLog
from lamina.commit.coordinator import CommitCoordinator
from lamina.errors import (
    AlreadyExists,
    InvalidArgument,
    VersionNotFound,
    SchemaMismatch,
    TableAlreadyExists,
    TableNotFound,
)
from lamina.expr import AlwaysTrue, Expr, bind, referenced_columns, to_arrow_filter, to_expr
from lamina.io import FileIO
from lamina.manifest.entries import data_entries, entries_from_user_files, manifest_schema
from lamina.spec.features import DEFAULT_READER_FEATURES, DEFAULT_WRITER_FEATURES, check_reader, check_writer
from lamina.spec.layout import FORMAT_VERSION, version_path
from lamina.spec.partition import PartitionSpec, parse_partition_by
from lamina.spec.properties import check_properties
from lamina.spec.schema import Schema
from lamina.spec.version import VersionManifest
from lamina.maintenance import auto_tags, compaction, expire, orphans
from lamina.spec.tag import Tag, split_version_or_tag
from lamina.table import rowlevel, system
from lamina.table.inflight import new_write_id
from lamina.table.operations import (
    AppendFiles,
    Overwrite,
    Rollback,
    check_added_files,
    check_app_transactions,
    check_not_in_table,
)
from lamina.table.tags import TagStore
from lamina.table.scan import Scan, ScanPlan
from lamina.table.writer import PendingWrites, write_data_files, write_data_stream
from lamina.timeutil import epoch_ms

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
            try:
                return pa.Table.from_pandas(data, preserve_index=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise _pandas_mismatch(data, e) from None
    except ImportError:  # pragma: no cover
        pass
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    raise SchemaMismatch(
        f"cannot write {type(data).__name__}: pass a pyarrow Table, RecordBatch, RecordBatchReader or pandas DataFrame"
    )


def _pandas_mismatch(df: Any, error: Exception) -> SchemaMismatch:
    """SchemaMismatch naming the DataFrame columns Arrow could not convert, and why (the
    usual cause: an object column holding values of several Python types)."""
    problems = []
    for name in df.columns:
        col = df[name]
        try:
            pa.array(col, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            kinds = sorted({type(v).__name__ for v in col.dropna()})
            problems.append(f"{name!r} holds {', '.join(kinds)} values" if len(kinds) > 1 else f"{name!r} ({', '.join(kinds)})")
    where = "; ".join(problems) if problems else str(error)
    return SchemaMismatch(
        f"the DataFrame cannot be converted to Arrow: column {where}. A column must hold one type: "
        "convert it first (e.g. df[col].astype(str) or pd.to_numeric(df[col])). Nothing was written."
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
    return epoch_ms(ts, "timestamp")


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
        self.tag_store = TagStore(io, log)

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

    def _check_online(self) -> None:
        """Raise TableOffline if the table may not be written now (catalog tables; see CatalogTable)."""

    def _check_writable(self) -> None:
        """Before anything is written: the version this object holds needs no writer feature
        this Lamina lacks (UnsupportedFeature), and the table is online. Every method in
        WRITE_METHODS runs it first; the committer checks each base again."""
        check_writer(self._vm.writer_features, f"table {self.uri}")
        self._check_online()

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

    def _resolve(self, version: int | str | None = None, timestamp: Any = None, tag: str | None = None) -> VersionManifest:
        """The version a read asks for. A non-numeric ``version`` string is a tag name
        (seed 003), so `versionAsOf` takes either; a timestamp before every
        retained version falls back to the newest tag at or before it."""
        given = sum(x is not None for x in (version, timestamp, tag))
        version, as_tag = split_version_or_tag(version)
        if given > 1:
            raise InvalidArgument("pass one of version, timestamp or tag, not several")
        tag = as_tag if as_tag is not None else tag
        if tag is not None:
            vm = self.tag_store.get(tag).version
        elif version is not None:
            vm = self._vm if version == self._vm.version else self.log.load(version)
        elif timestamp is not None:
            ms = _timestamp_ms(timestamp)
            try:
                vm = self.log.at_timestamp(ms)
            except VersionNotFound:
                older = [t for t in self.tag_store.list() if t.version.timestamp_ms <= ms]
                if not older:
                    raise
                vm = max(older, key=lambda t: (t.version.timestamp_ms, t.tagged_version)).version
        else:
            vm = self._vm
        check_reader(vm.reader_features, f"version {vm.version} of {self.uri}")
        return vm

    def scan(
        self,
        where: str | Expr | None = None,
        columns: Sequence[str] | None = None,
        version: int | str | None = None,
        timestamp: Any = None,
        tag: str | None = None,
    ) -> Scan:
        return Scan(self, self._resolve(version, timestamp, tag), where, columns)

    def _scan_at(self, vm: VersionManifest, where: str | Expr | None) -> Scan:
        return Scan(self, vm, where, None)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        return self.scan(**kwargs).to_arrow()

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.scan(**kwargs).to_pandas()

    def plan(self, **kwargs: Any) -> ScanPlan:
        return self.scan(**kwargs).plan()

    # -- writes ---------------------------------------------------------------------------

    def _write(
        self, data: pa.Table, write_id: str, pending: PendingWrites | None = None, max_rows: int | None = None
    ) -> list[dict[str, Any]]:
        vm = self._vm
        props = vm.properties
        limit = int(props.get("write.max-rows-per-file", DEFAULT_MAX_ROWS_PER_FILE))
        max_rows = limit if max_rows is None else min(max_rows, limit)
        if max_rows < 1:
            raise InvalidArgument("write.max-rows-per-file must be >= 1")
        return write_data_files(
            self.io, vm.schema, vm.partition_spec, data, write_id, max_rows,
            compression=props.get("write.parquet.compression", "snappy"),
            pending=pending,
        )

    def _write_stream(
        self, tables: Iterable[pa.Table], write_id: str, max_rows: int, memory_pool: pa.MemoryPool | None = None
    ) -> list[dict[str, Any]]:
        """``_write`` for an unpartitioned table, from a stream of tables (see write_data_stream)."""
        props = self._vm.properties
        max_rows = min(max_rows, int(props.get("write.max-rows-per-file", DEFAULT_MAX_ROWS_PER_FILE)))
        if max_rows < 1:
            raise InvalidArgument("write.max-rows-per-file must be >= 1")
        return write_data_stream(
            self.io, self._vm.schema, tables, write_id, max_rows,
            compression=props.get("write.parquet.compression", "snappy"), memory_pool=memory_pool,
        )

    def _entries(self, files: list[dict[str, Any]]) -> pa.Table:
        vm = self._vm
        return data_entries(files, self._mschema_of(vm), vm.version + 1, vm.partition_spec.spec_id)

    def _commit(self, op: Any, options: CommitOptions | None = None, pending: PendingWrites | None = None) -> int:
        # Start from the version this object holds: with one writer it is the latest, and
        # if it is stale the put-if-absent fails fast and the committer rebases.
        self._vm = self._committer.commit(self._vm, op, options, before_publish=pending.wait if pending else None)
        if "tag.auto-create" in self._vm.properties:
            auto_tags.on_commit(self, self._vm)
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
        check_files: bool = True,
        commit_options: CommitOptions | None = None,
    ) -> int:
        """Register existing data files (already under the table's ``data/``) in one version.

        ``files`` columns: path (relative to the table root), size, record_count, and
        optional ``partition_path``, ``lower.<col>``, ``upper.<col>``, ``null_count.<col>``,
        ``partition.<field>``. ``mode="overwrite"`` replaces all rows (or those matching
        ``where``; the caller guarantees the new files' rows match it) in the same version.
        ``app_transaction`` as for ``append`` (append mode only).

        Refused with nothing committed (InvalidArgument naming the files): a path outside
        ``data/`` or not in canonical form, a path given twice, a file already in the table,
        a missing size or record count, and with ``check_files`` (default) a file that does
        not exist or whose size differs (one listing per directory of the files).
        """
        if mode not in ("append", "overwrite"):
            raise InvalidArgument(f"mode must be 'append' or 'overwrite', not {mode!r}")
        apps = _app_transactions(app_transaction)
        if apps:
            if mode != "append":
                raise InvalidArgument("app_transaction applies to appends only, not to overwrite")
            check_app_transactions(self.log.latest(), apps)  # before reading any file for nothing
        vm = self._vm
        entries = entries_from_user_files(files, vm.schema, vm.partition_spec, self._mschema_of(vm))
        check_added_files(entries, self.io, check_files)
        if mode == "overwrite":  # (appends check every base they are applied to)
            check_not_in_table(entries, self, self.log.latest())
        return self._commit_entries(
            entries, mode=mode, where=where, app_transaction=app_transaction,
            operation="add-files", commit_options=commit_options, refuse_present=True,
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
        refuse_present: bool = False,
    ) -> int:
        """Commit data files already written (manifest-format ``entries``) as one version.

        Overwrite rewrites files that only partly match ``where``; the rewritten
        remainders carry ``write_id`` in their names. ``refuse_present``: an append
        refuses files already live in the version it lands on.
        """
        apps = _app_transactions(app_transaction)
        if mode == "append":
            op: Any = AppendFiles(self, entries, operation=operation, app_transactions=apps, refuse_present=refuse_present)
        elif mode == "overwrite":
            if apps:
                raise InvalidArgument("app_transaction applies to appends only, not to overwrite")
            predicate = bind(to_expr(where), self._vm.schema)
            wid = write_id or uuid.uuid4().hex[:16]
            op = Overwrite(self, predicate, entries, lambda rows: self._entries(self._write(rows, wid)), readds=refuse_present)
        else:
            raise InvalidArgument(f"mode must be 'append' or 'overwrite', not {mode!r}")
        return self._commit(op, commit_options)

    # -- row-level changes --------------------------------------------------------------

    def _row_mode(self, mode: str | None) -> str:
        return rowlevel.check_mode(mode or self._vm.properties.get("write.delete.mode", "merge-on-read"))

    def _commit_unless_noop(self, op: Any, options: CommitOptions | None) -> int | None:
        """Commit ``op`` (a ProbedApply), or nothing (None) if it changes nothing in the latest version."""
        self.refresh()
        probe = op.apply(self._vm)  # the commit's first attempt, on this same version, reuses it
        if not probe.removed.num_rows and not probe.added.num_rows:
            return None
        return self._commit(op, options)

    def delete(self, where: str | Expr, *, mode: str | None = None, commit_options: CommitOptions | None = None) -> int | None:
        """Delete the rows matching ``where`` as one version; None if no row matched (nothing committed).

        Only files whose statistics may match are read. ``mode``: merge-on-read
        (deletion vectors, default; property ``write.delete.mode``) or copy-on-write.
        """
        if where is None:
            raise InvalidArgument("delete needs a predicate; to remove every row use overwrite with an empty table")
        pred = bind(to_expr(where), self._vm.schema)
        op = rowlevel.RowDelta(
            self, "delete", pred, sorted(referenced_columns(pred)) or [self._vm.schema.names[0]],
            rowlevel.file_fn_delete(to_arrow_filter(pred)), self._row_mode(mode), new_write_id(),
        )
        return self._commit_unless_noop(op, commit_options)

    def update(
        self, where: str | Expr | None = None, set: Mapping[str, Any] | None = None, *,  # noqa: A002
        mode: str | None = None, commit_options: CommitOptions | None = None,
    ) -> int | None:
        """Set columns of the rows matching ``where`` (all rows if None) in one version.

        ``set``: column -> SQL expression text (``"amount * 1.1"``), literal, or a
        callable on an Arrow table. Errors (unknown column, wrong type) surface
        before anything is committed.
        """
        if not set:
            raise InvalidArgument("update needs set={column: value or SQL expression}")
        schema = self._vm.schema
        for c in set:
            schema.field(c)
        pred = bind(to_expr(where), schema)
        op = rowlevel.RowDelta(
            self, "update", pred, list(schema.names),
            rowlevel.file_fn_update(to_arrow_filter(pred) if not isinstance(pred, AlwaysTrue) else pc.scalar(True), dict(set), schema.arrow),
            self._row_mode(mode), new_write_id(),
        )
        return self._commit_unless_noop(op, commit_options)

    def merge(self, source: Any, on: str | Sequence[str], *, mode: str | None = None) -> "rowlevel.MergeBuilder":
        """Start a merge of ``source`` (Arrow/pandas) into this table on key column(s) ``on``."""
        return rowlevel.MergeBuilder(self, _to_arrow(source), list(on) if not isinstance(on, str) else on, mode)

    # -- layout maintenance ---------------------------------------------------------------

    def compact(
        self, *, target_file_size: int = compaction.DEFAULT_TARGET, min_file_size: int | None = None,
        where: str | Expr | None = None, sort_by: Any = None, commit_options: CommitOptions | None = None,
        progress: Any = None,
    ) -> "compaction.CompactionResult":
        """Bin-pack small files (and files with deletion vectors) per partition into
        ~``target_file_size`` files, in one version. See ``lamina.maintenance.compaction``."""
        return compaction.compact(
            self, target_file_size=target_file_size, min_file_size=min_file_size, where=where,
            sort_by=sort_by, commit_options=commit_options, progress=progress,
        )

    def rewrite_manifests(self, *, commit_options: CommitOptions | None = None) -> int:
        """Rewrite the leaf manifests (same files), grouped by partition, in one version."""
        self.refresh()
        return self._commit(compaction.RewriteManifests(self), commit_options)

    # -- tags ---------------------------------------------------------------------------

    def create_tag(
        self, name: str, version: int | None = None, *, timestamp: Any = None, expires_at: Any = None
    ) -> Tag:
        """Tag a version (default: the latest). Creating an existing tag is an error.

        ``expires_at``: a time, or an age (timedelta from now), after which
        ``expire_versions`` deletes the tag.
        """
        vm = self.log.latest() if version is None and timestamp is None else self._resolve(version, timestamp)
        return self.tag_store.create(name, vm, expires_at_ms=None if expires_at is None else _expiry_ms(expires_at))

    def replace_tag(
        self, name: str, version: int | None = None, *, timestamp: Any = None, expires_at: Any = None
    ) -> Tag:
        """Point an existing tag at another version; frees what only the old target held."""
        old = self.tag_store.get(name)
        vm = self.log.latest() if version is None and timestamp is None else self._resolve(version, timestamp)
        new = Tag(name, vm, int(time.time() * 1000), None if expires_at is None else _expiry_ms(expires_at), old.automatic)
        self.tag_store.put(new)
        if old.tagged_version != vm.version:
            expire.free_tag(self.io, self.log, old)
        return new

    def rename_tag(self, name: str, new_name: str) -> Tag:
        old = self.tag_store.get(name)
        tag = self.tag_store.create(new_name, old.version, expires_at_ms=old.expires_at_ms, confirm_version=False)
        self.tag_store.delete(name)
        return tag

    def delete_tag(self, name: str, *, dry_run: bool = False) -> "expire.ExpireReport":
        """Delete a tag and every file only it held (its version may be long expired)."""
        g = expire.delete_tag(self.io, self.log, name, dry_run=dry_run)
        return expire.ExpireReport(
            dry_run, deleted_manifests=g.manifests, deleted_files=g.files, deleted_bytes=g.freed_bytes, kept_for_tags=g.kept
        )

    def tag(self, name: str) -> Tag:
        return self.tag_store.get(name)

    def tags(self) -> list[Tag]:
        """Every tag, ordered by tagged version."""
        return self.tag_store.list()

    list_tags = tags

    # -- rollback, expiry, orphans --------------------------------------------------------

    def rollback(
        self,
        version: int | str | None = None,
        *,
        tag: str | None = None,
        timestamp: Any = None,
        destructive: bool = False,
        commit_options: CommitOptions | None = None,
    ) -> int:
        """Commit a new version whose content equals ``version``/``tag``/``timestamp``'s.

        History is kept, so a rollback can itself be rolled back. With
        ``destructive=True`` the versions between the target and the rollback
        are then deleted with every file only they needed (Paimon's rollback);
        tags on them survive.
        """
        if version is None and tag is None and timestamp is None:
            raise InvalidArgument("rollback needs a version, a tag or a timestamp")
        target = self._resolve(version, timestamp, tag)
        if tag is None and isinstance(version, str) and split_version_or_tag(version)[1] is not None:
            tag = version  # recorded in the summary, as rollback(tag=...) would
        # The files the rollback re-adds are the target's: a guard tag keeps them from an
        # expiry (or a deletion of the tag rolled back to) running until the commit lands.
        guard = self.tag_store.guard(target, "rollback")
        try:
            committed = self._commit(Rollback(self, target, tag), commit_options)
        finally:
            self.tag_store.drop_guard(guard)
        if destructive:
            expire.drop_versions_after(self.io, self.log, target, self._vm)
        return committed

    def expire_versions(
        self,
        older_than: Any = None,
        retain_last: int | None = None,
        *,
        reader_grace: Any = None,
        dry_run: bool = False,
        progress: Any = None,
    ) -> "expire.ExpireReport":
        """Delete old versions and the files only they needed; tags keep theirs.

        See ``lamina.maintenance.expire`` for the rules (reader grace: versions are
        expired only once superseded for ``reader_grace``, default one hour).
        """
        return expire.expire_versions(
            self.io, self.log, older_than=older_than, retain_last=retain_last,
            reader_grace=reader_grace, dry_run=dry_run, progress=progress,
        )

    def remove_orphans(
        self, older_than: Any = orphans.DEFAULT_ORPHAN_AGE, *, dry_run: bool = False,
        allow_short_age: bool = False, progress: Any = None,
    ) -> "orphans.OrphanReport":
        """Delete files nothing references, older than ``older_than`` and not in flight."""
        return orphans.remove_orphans(
            self.io, self.log, older_than, dry_run=dry_run, allow_short_age=allow_short_age, progress=progress
        )

    vacuum = remove_orphans

    # -- system tables ------------------------------------------------------------------

    def system_table(self, name: str, *, version: int | str | None = None, tag: str | None = None) -> pa.Table:
        """``$snapshots``, ``$tags``, ``$files`` or ``$manifests`` as an Arrow table."""
        vm = self._resolve(version, None, tag) if version is not None or tag is not None else self._vm
        return system.system_table(self, name, vm)

    def snapshots(self) -> pa.Table:
        return system.snapshots(self)

    def files(self, **kwargs: Any) -> pa.Table:
        return self.system_table("files", **kwargs)

    def manifests(self, **kwargs: Any) -> pa.Table:
        return self.system_table("manifests", **kwargs)

    def __repr__(self) -> str:
        return f"lamina.Table({self.uri!r}, version={self.version})"


# Every method that writes or deletes anything: refused (before any file is written) on a
# table that needs an unknown writer feature, or is offline in its catalog.
WRITE_METHODS = (
    "_commit_entries",  # data files written by an engine (Spark) and committed here
    "append", "overwrite", "add_files", "delete", "update", "merge", "rollback",
    "expire_versions", "remove_orphans", "vacuum", "create_tag", "replace_tag", "rename_tag", "delete_tag",
    "compact", "rewrite_manifests",
)


def _guarded(method: Any) -> Any:
    @functools.wraps(method)
    def guarded(self: Table, *args: Any, **kwargs: Any) -> Any:
        self._check_writable()
        return method(self, *args, **kwargs)

    return guarded


for _name in WRITE_METHODS:
    setattr(Table, _name, _guarded(getattr(Table, _name)))


def _expiry_ms(expires_at: Any) -> int:
    return epoch_ms(expires_at, "expires_at", timedelta_sign=+1)


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
    vm = initial_version(schema, partition_by, properties)
    try:
        # put_new: a retry after a lost answer finds our own version 0 (same bytes) and succeeds
        log.io.put_new(version_path(0), vm.to_json())
    except AlreadyExists:
        raise TableAlreadyExists(f"another writer created a table at {uri} at the same time") from None
    log.table_uuid = vm.table_uuid
    log.write_hint(vm)
    return Table(log.io, log, vm)


def initial_version(
    schema: pa.Schema,
    partition_by: str | Iterable[str] | None = None,
    properties: Mapping[str, Any] | None = None,
    extra_writer_features: Sequence[str] = (),
) -> VersionManifest:
    """Version 0 of a new table (empty); shared by create_table and the catalogs."""
    lschema = Schema.from_arrow(schema)
    spec = parse_partition_by(partition_by if not isinstance(partition_by, str) else [partition_by], lschema)
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    check_properties(props)
    reader_features = list(DEFAULT_READER_FEATURES)
    writer_features = list(DEFAULT_WRITER_FEATURES)
    if not spec.is_unpartitioned:
        reader_features.append("hidden-partitioning")
        writer_features.append("hidden-partitioning")
    writer_features.extend(f for f in extra_writer_features if f not in writer_features)
    return VersionManifest(
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


def open_table(
    uri: str,
    *,
    version: int | str | None = None,
    timestamp: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_list: bool = True,
    table_uuid: str | None = None,
    tag: str | None = None,
) -> Table:
    """Open the latest version of the table at ``uri`` (or ``version`` / ``timestamp`` / ``tag``;
    a non-numeric ``version`` is a tag name, as for ``scan``).

    ``allow_list=False`` trusts the version hint and never lists (for readers
    without list permission); ``table_uuid`` refuses a location that holds
    another table.
    """
    if sum(x is not None for x in (version, timestamp, tag)) > 1:
        raise InvalidArgument("pass one of version, timestamp or tag, not several")
    version, as_tag = split_version_or_tag(version)  # before any I/O: a bad one is refused as is
    tag = as_tag if as_tag is not None else tag
    log = _new_log(uri, storage_options, None, allow_list)
    log.table_uuid = table_uuid
    if version is not None:
        vm = log.load(version)
    else:
        vm = log.latest()
    table = Table(log.io, log, vm)
    if timestamp is not None or tag is not None:
        table._vm = table._resolve(None, timestamp, tag)
    check_reader(table._vm.reader_features, f"table {uri}")
    return table
