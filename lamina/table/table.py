"""Table: the user API over one table location.

A Table object is pinned to the version it loaded (``table.version``); reads
use that version unless told otherwise, writes commit on top of the latest
version and move the object to what they committed.
"""

from __future__ import annotations

import copy
import time
import types
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.commit import CommitOptions, CommitResult, Committer, ObjectStoreCoordinator, TagStore, VersionLog
from lamina.commit.branches import BranchLog, BranchStore
from lamina.commit.coordinator import CommitCoordinator
from lamina.data.scan import Scan, ScanPlan
from lamina.errors import (
    AlreadyExists,
    CommitConflict,
    InvalidArgument,
    TableAlreadyExists,
    TableNotFound,
    TagNotFound,
    VersionNotFound,
)
from lamina.expr import Expr
from lamina.io import FileIO
from lamina.maintenance import expire
from lamina.operations import MergeBuilder, Rollback
from lamina.operations.lineage import EnableRowLineage
from lamina.operations.partition_spec import SpecUpdate
from lamina.operations.properties import UpdateProperties
from lamina.operations.publish import PublishBranch
from lamina.operations.rowlevel.delta import row_mode
from lamina.operations.rowlevel.source import SourceRead
from lamina.operations.schema import SchemaUpdate
from lamina.operations.sort_order import SortOrderUpdate
from lamina.spec.branch import BranchRecord
from lamina.spec.features import (
    ARROW_LEAF_MANIFESTS,
    ARROW_ROOT_MANIFESTS,
    DEFAULT_READER_FEATURES,
    DEFAULT_WRITER_FEATURES,
    INLINE_ROOT_MANIFESTS,
    check_reader,
    check_writer,
)
from lamina.spec.layout import FORMAT_VERSION, MAIN_BRANCH
from lamina.spec.lineage import ROW_LINEAGE
from lamina.spec.partition import PartitionSpec, parse_partition_by
from lamina.spec.properties import TableProperties, check_properties
from lamina.spec.schema import Schema
from lamina.spec.stats import check_column_modes
from lamina.spec.tag import split_version_or_tag
from lamina.spec.version import VersionManifest
from lamina.table import auto_tags, iceberg_view
from lamina.table.branches import Branches
from lamina.table.changes import ChangeFeed, change_feed, end_spec, start_spec
from lamina.table.convert import schema_of, to_arrow
from lamina.table.guards import writes
from lamina.table.inspect import Inspect
from lamina.table.maintenance import Maintenance
from lamina.table.tags import Tags
from lamina.table.transaction import Transaction
from lamina.timeutil import epoch_ms

if TYPE_CHECKING:
    pass


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
        self.coordinator = coordinator or ObjectStoreCoordinator(io, log.layout)
        self._committer = Committer(log, self.coordinator)
        self.tag_store = TagStore(io, log)
        self._main: Table | None = None  # on a branch's handle: the main table it came from

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
    def properties(self) -> Mapping[str, str]:
        """The version's table properties, read-only (``update_properties`` changes them)."""
        return types.MappingProxyType(self._vm.properties)

    def check_online(self, online: bool | None = None) -> None:
        """Raise TableOffline if the table may not be written now (catalog tables; see CatalogTable).
        ``online``: the flag as the caller just read it (no second look-up)."""

    def check_writable(self, online: bool | None = None) -> None:
        """Raise unless this table may be written now: the version this object holds needs no
        writer feature this Lamina lacks (UnsupportedFeature; CatalogManaged for a catalog's
        table opened by path), and the table is online (TableOffline). Every method marked
        ``@writes`` (lamina.table.guards) and every engine write session runs it before writing
        anything; the committer checks each base again."""
        check_writer(self._vm.writer_features, f"table {self.uri}")
        self.check_online(online)

    def refresh(self) -> Table:
        """Move to the latest version (BranchNotFound on a handle of a branch deleted since)."""
        if isinstance(self.log, BranchLog):
            self.log.check_not_deleted()
        self._vm = self.log.latest()
        check_reader(self._vm.reader_features, f"table {self.uri}")
        return self

    @property
    def branch_name(self) -> str:
        """The branch this object reads and writes (``main`` unless it came from ``branch``)."""
        return self.log.branch

    @property
    def main(self) -> Table:
        """The table's main branch (this object, unless it is a branch's handle)."""
        return self if self._main is None else self._main

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Versions newest first: version, timestamp, operation, summary, parent, commit id."""
        out: list[dict[str, Any]] = []
        wanted = [v for v in reversed(self.log.list_versions()) if v <= self.version]
        # Loaded a batch at a time: the slot records of a chunk are listed once per batch, not
        # once per version (on S3 a LIST each); the first batch no larger than the limit.
        at, size = 0, max(1, min(limit, 256)) if limit is not None else 256
        while at < len(wanted):
            batch, at, size = wanted[at : at + size], at + size, 256
            loaded = self.log.try_load_many(batch)
            for vm in (loaded[v] for v in batch if v in loaded):
                out.append(
                    {
                        "version": vm.version,
                        "timestamp": datetime.fromtimestamp(vm.timestamp_ms / 1000, tz=UTC),
                        "timestamp_ms": vm.timestamp_ms,
                        "operation": vm.operation,
                        "parent_version": vm.parent_version,
                        "commit_id": vm.commit_id,
                        "summary": vm.summary,
                        "branch": self.branch_name,
                    }
                )
                if limit is not None and len(out) >= limit:
                    return out
        return out

    # -- reads --------------------------------------------------------------------------

    def _resolve(self, version: int | str | None = None, timestamp: Any = None) -> VersionManifest:
        """The version of this handle's branch a read asks for: a version number, a tag name (a
        non-numeric ``version`` string, as a tag may not be a number, so `versionAsOf` takes
        either) or a timestamp; a timestamp before every retained version falls back to the
        newest tag at or before it. Branch names are ``_at``'s."""
        if version is not None and timestamp is not None:
            raise InvalidArgument("pass version or timestamp, not both")
        number, tag = split_version_or_tag(version)
        if tag is not None:
            vm = self.tag_store.get(tag).version
        elif number is not None:
            vm = self._vm if number == self._vm.version else self.log.load(number)
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

    def _at(self, version: int | str | None, timestamp: Any) -> tuple[Table, VersionManifest]:
        """What every call that picks a version resolves ``version``/``timestamp`` to (Spark
        SQL's ``VERSION AS OF`` and ``TIMESTAMP AS OF``): the handle whose log holds it and the
        version. ``version``: a version number of this handle's branch, a tag name, or a branch
        name (that branch's handle and latest: tags and branches share one namespace);
        ``timestamp``: this branch's version then; neither: this handle's version.
        InvalidArgument if both are given."""
        source, number, tag = self._source(version, timestamp)
        if source is not self:
            return source, source._vm
        return self, self._resolve(number if tag is None else tag, timestamp)

    def at(self, version: int | str | None = None, *, timestamp: Any = None) -> Table:
        """A handle pinned at a version (as delta-rs's ``load_as_version``): ``version`` and
        ``timestamp`` as for ``scan`` (a branch's name: a handle on that branch's latest);
        ``t.branch("dev").at(3)`` is version 3 of branch dev. Writes on it commit on top of the
        latest version, as on any handle."""
        source, vm = self._at(version, timestamp)
        pinned = copy.copy(source)
        pinned._vm = vm
        return pinned

    def scan(
        self,
        where: str | Expr | None = None,
        columns: Sequence[str] | None = None,
        version: int | str | None = None,
        timestamp: Any = None,
    ) -> Scan:
        """A read of this object's version, or of ``version`` (a version number of this
        branch, a tag name, or a branch name: that branch's latest) or ``timestamp`` (a
        datetime, an ISO 8601 string, or epoch milliseconds): Spark SQL's ``VERSION AS OF``
        and ``TIMESTAMP AS OF``. A version number of another branch:
        ``t.branch("dev").scan(version=3)``. Both given: InvalidArgument."""
        source, vm = self._at(version, timestamp)
        return Scan(self.io, vm, where, columns, log=source.log)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        return self.scan(**kwargs).to_arrow()

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.scan(**kwargs).to_pandas()

    def to_pyarrow_dataset(self, **kwargs: Any) -> Any:
        """A ``pyarrow.dataset.Dataset`` of a version (``version=``, ``timestamp=``;
        ``where=``, ``columns=`` as for ``scan``) that Arrow engines scan lazily."""
        return self.scan(**kwargs).to_pyarrow_dataset()

    def to_polars(self, **kwargs: Any) -> Any:
        """A version's rows as a Polars DataFrame (eager); ``lamina.polars.scan(table)`` is lazy."""
        return self.scan(**kwargs).to_polars()

    def plan(self, **kwargs: Any) -> ScanPlan:
        return self.scan(**kwargs).plan()

    # -- writes ---------------------------------------------------------------------------
    #
    # Every change is a transaction (lamina.table.transaction): the methods below are
    # one-operation transactions.

    @writes
    def transaction(self, *, commit_options: CommitOptions | None = None) -> Transaction:
        """Several changes as one version: ``with t.transaction() as tx: tx.append(...); tx.delete(...)``."""
        return Transaction(self, commit_options)

    def _committed(self, vm: VersionManifest, new: bool) -> None:
        """After a transaction: the object moves to the version it committed (``new``) or, if
        it committed nothing, to the latest version it looked at; a new version runs the
        commit hooks (automatic tags: main's versions only)."""
        self._vm = vm
        if new and self._main is None and TableProperties.TAG_AUTO_CREATE.key in vm.properties:
            auto_tags.on_commit(self, vm)
        if new:
            iceberg_view.on_commit(self, vm)

    def _one(self, tx: Transaction) -> CommitResult:
        return tx.commit()

    def _commit_operation(self, op: Any, commit_options: CommitOptions | None = None) -> CommitResult:
        """Commit ``op`` as a one-operation transaction; nothing committed if ``op`` is None."""
        return (
            CommitResult(None)
            if op is None
            else self._one(self.transaction(commit_options=commit_options).add_operation(op))
        )

    @writes
    def append(
        self,
        data: Any,
        *,
        app_transaction: tuple[str, int] | None = None,
        schema_mode: str | None = None,
        cast: str | None = None,
        commit_options: CommitOptions | None = None,
    ) -> CommitResult:
        """Append rows (a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame)
        as one new version; returns its ``CommitResult`` (``.version``, ``.metrics``), as every
        write does (``lamina.commit.result``).

        Types on write (docs/format.md): a column is stored as the table's type only when
        that loses nothing (int8 into int64, float32 into float64, timestamp[ns] whose values
        are whole microseconds into timestamp[us], ...); any other column (strings into a
        double, an int64 into an int8, an integer into a timestamp) is refused with
        SchemaMismatch naming it, and nothing is written. ``cast="safe"``: convert what
        pyarrow's safe cast converts instead (``'7'`` into int64), refusing a value that
        does not convert.

        ``app_transaction=(app_id, sequence)`` makes the append idempotent: it is recorded
        in the version, and an append whose sequence is not above the app's recorded one
        raises TransactionAlreadyCommitted with nothing committed. ``schema_mode="merge"``:
        columns of ``data`` the table lacks are added in the same version; a column the data
        holds wider is widened only where the table property ``schema.type-widening.enabled``
        is true (as Delta's ``delta.enableTypeWidening``), else it follows the rule above.
        """
        tx = self.transaction(commit_options=commit_options)
        return self._one(tx.append(data, app_transaction=app_transaction, schema_mode=schema_mode, cast=cast))

    @writes
    def overwrite(
        self,
        data: Any,
        where: str | Expr | None = None,
        *,
        schema_mode: str | None = None,
        cast: str | None = None,
        commit_options: CommitOptions | None = None,
    ) -> CommitResult:
        """Replace all rows (or those matching ``where``) with ``data``, as one version.

        With ``where``, every new row must match it (as Delta's replaceWhere), and
        files that only partly match are rewritten without the matching rows. Types and
        ``cast`` as for ``append``. ``schema_mode``: "merge" as for ``append``; "overwrite"
        (no ``where``) makes the table's schema ``data``'s.
        """
        tx = self.transaction(commit_options=commit_options)
        return self._one(tx.overwrite(data, where, schema_mode=schema_mode, cast=cast))

    @writes
    def update_schema(self, *, commit_options: CommitOptions | None = None) -> SchemaUpdate:
        """A schema change, one version, metadata only: ``with t.update_schema() as u:
        u.add_column("email", pa.string())`` (or ``...add_column(...).commit()``); see
        ``lamina.operations.schema``."""
        return SchemaUpdate(self.metadata, self._run_metadata(commit_options))

    @writes
    def update_spec(self, *, commit_options: CommitOptions | None = None) -> SpecUpdate:
        """A partition spec change, one version, metadata only: ``with t.update_spec() as u:
        u.add_field("ts", "hour")`` (or ``...add_field(...).commit()``); see
        ``lamina.operations.partition_spec``."""
        return SpecUpdate(self.metadata, self._run_metadata(commit_options))

    @writes
    def update_sort_order(self, *, commit_options: CommitOptions | None = None) -> SortOrderUpdate:
        """Replace the sort order writes and compaction use, one version: ``with
        t.update_sort_order() as s: s.asc("ts").desc("id")``; see ``lamina.operations.sort_order``."""
        return SortOrderUpdate(self.metadata, self._run_metadata(commit_options))

    @writes
    def update_properties(
        self,
        set: Mapping[str, Any] | None = None,
        remove: Iterable[str] | str = (),
        *,
        commit_options: CommitOptions | None = None,
    ) -> CommitResult:
        """Set and remove table properties in one version, metadata only; nothing is committed
        (the result's ``version`` is None) if that changes nothing (every key already so). Writes after it use the new
        settings. Refused with nothing committed: what ``create_table`` refuses, a key set and
        removed, a removal of a key the table does not set, and a change of a property the
        format fixes at creation (PropertyCannotChange, saying why); see
        ``lamina.operations.properties``."""
        op = UpdateProperties.of(self._vm, set, remove)
        return self._one(self.transaction(commit_options=commit_options).add_operation(op))

    def _run_metadata(self, commit_options: CommitOptions | None) -> Any:
        return lambda op: self._one(self.transaction(commit_options=commit_options).add_operation(op))

    @writes
    def add_files(
        self,
        files: pa.Table,
        *,
        mode: str = "append",
        where: str | Expr | None = None,
        app_transaction: tuple[str, int] | None = None,
        check_files: bool = True,
        commit_options: CommitOptions | None = None,
    ) -> CommitResult:
        """Register existing Parquet files in one version, without copying them.

        ``files`` columns: path, and optional size, record_count, ``partition_path``,
        ``lower.<col>``, ``upper.<col>``, ``null_count.<col>``, ``partition.<field>``. What is
        left out is read from the files (as pyiceberg's ``add_files``): sizes from a listing,
        and where the record count is missing, the footers' row counts and (unless some are
        given) column statistics and the partition values they imply. A path under ``data/`` is a
        file the table owns from then on (expiry deletes it once no version needs it); any
        other path relative to the root, or an absolute location on the table's store
        (``file:///...``, ``s3://bucket/...``), is an external file the table reads but never
        deletes (docs/format.md, "External files"). ``mode="overwrite"`` replaces all rows (or those matching
        ``where``; the caller guarantees the new files' rows match it) in the same version.
        ``app_transaction`` as for ``append`` (append mode only). The files' Parquet columns
        must be named as the table stores them: on a table whose schema evolved, by their
        physical names (``t.metadata.schema.physical_arrow``), which a rename does not change.

        Refused with nothing committed (InvalidArgument naming the files): a path under
        ``_lamina/`` or ``data/_dv/`` or not in canonical form, a location on another store, a
        path given twice, a file already in the table, and with ``check_files`` (default) a
        file that does not exist or whose size differs (one listing per directory of the
        files); a file that is no Parquet file or holds rows of several partitions.
        """
        tx = self.transaction(commit_options=commit_options)
        return self._one(
            tx.add_files(files, mode=mode, where=where, app_transaction=app_transaction, check_files=check_files)
        )

    # -- row-level changes --------------------------------------------------------------

    @writes
    def delete(
        self, where: str | Expr, *, mode: str | None = None, commit_options: CommitOptions | None = None
    ) -> CommitResult:
        """Delete the rows matching ``where`` as one version; if no row matched, nothing is
        committed (the result's ``version`` is None).

        Only files whose statistics may match are read. ``mode``: merge-on-read
        (deletion vectors, default; property ``write.delete.mode``) or copy-on-write.
        """
        return self._one(self.transaction(commit_options=commit_options).delete(where, mode=mode))

    @writes
    def update(
        self,
        where: str | Expr | None = None,
        set: Mapping[str, Any] | None = None,
        *,
        mode: str | None = None,
        cast: str | None = None,
        commit_options: CommitOptions | None = None,
    ) -> CommitResult:
        """Set columns of the rows matching ``where`` (all rows if None) in one version.

        ``set``: column -> SQL expression text (``"amount * 1.1"``), literal, or a
        callable on an Arrow table. Errors (unknown column, wrong type) surface
        before anything is committed. Each value is a SQL assignment (docs/format.md,
        Types on write): a number into any numeric column when it converts (``qty + 1``
        into an int32), anything else only by lossless widening (``'7'`` into an int64 is
        SchemaMismatch); ``cast="safe"``: pyarrow's safe casts.
        """
        return self._one(self.transaction(commit_options=commit_options).update(where, set, mode=mode, cast=cast))

    @writes
    def merge(
        self, source: Any, on: str | Sequence[str], *, mode: str | None = None, cast: str | None = None
    ) -> MergeBuilder:
        """Start a merge of ``source`` (Arrow/pandas) into this table on key column(s) ``on``.

        The source's columns that ``*_all`` clauses write follow the rule of ``append``
        (docs/format.md, Types on write), the clauses' ``set``/``values`` that of ``update``;
        ``cast="safe"``: pyarrow's safe casts for both. Refused clauses raise SchemaMismatch
        at ``execute()``, before anything is read or written."""

        def run(op: Any, options: CommitOptions | None) -> CommitResult:
            return self._one(self.transaction(commit_options=options).add_operation(op))

        rows = source if isinstance(source, SourceRead) else to_arrow(source)  # (a source being read: lamina.spark)
        return MergeBuilder(self._vm.schema, rows, on, row_mode(mode, self._vm.properties), run, cast=cast)

    def changes(
        self,
        start_version: int | str | None = None,
        end_version: int | str | None = None,
        *,
        start_timestamp: Any = None,
        end_timestamp: Any = None,
        where: str | Expr | None = None,
        columns: Sequence[str] | None = None,
    ) -> ChangeFeed:
        """The change data feed of the versions in (start, end]: every row they inserted,
        deleted or updated (pre- and post-image, paired by row id), with ``_change_type``,
        ``_commit_version`` and ``_commit_timestamp``. ``start_version``/``end_version``: a
        version number or a tag name; ``end`` defaults to the latest version; by timestamp the
        range holds the versions committed at or after ``start_timestamp`` and at or before
        ``end_timestamp``. Compaction yields no change rows. ``where`` and ``columns`` apply as
        in ``scan`` (the columns may include ``_row_id`` and ``_last_updated_version``); rows
        follow the schema of the range's last version.

        Raises ChangesUnavailable (naming the oldest start still answerable) for a range
        reaching expired versions or versions without row lineage."""
        start = start_spec(self, start_version, start_timestamp)
        end = end_spec(self, end_version, end_timestamp)
        return change_feed(self, start, end, where, columns)

    @writes
    def enable_row_lineage(self, *, commit_options: CommitOptions | None = None) -> CommitResult:
        """Give the table row lineage (``_row_id``, ``_last_updated_version``, the change feed)
        from a new version on; nothing committed if it has lineage already. Rows of the live files get ids
        in that version (a metadata-only commit: no data file is rewritten)."""
        return self._one(self.transaction(commit_options=commit_options).add_operation(EnableRowLineage()))

    def _fresh_latest(self) -> VersionManifest:
        """The latest version of this handle's branch: the handle's own, if it is known to be the
        newest (one HEAD on S3 instead of a listing and a GET; VersionLog.is_known_newest),
        else read."""
        return self._vm if self.log.is_known_newest(self._vm) else self.log.latest()

    # -- branches -------------------------------------------------------------------------
    #
    # A branch is a version log of its own (lamina.commit.branches, docs/branches.md): a
    # handle on it is a Table whose reads and writes go to that log.

    def branch(self, name: str) -> Table:
        """A handle on branch ``name`` at its latest version: every read and write works on it
        as on the table, in the branch's own versions (``main``: the table itself)."""
        main = self.main
        if name == MAIN_BRANCH:
            return main
        store = BranchStore(self.io)
        record = store.get(name)
        log = store.log(record, allow_list=main.log.allow_list)
        return main._handle(log, log.latest())

    def _handle(self, log: BranchLog, vm: VersionManifest) -> Table:
        h = copy.copy(self)  # a catalog's table stays one (its online check)
        h.log, h._vm, h._main = log, vm, self
        h.coordinator = ObjectStoreCoordinator(self.io, log.layout)
        h._committer = Committer(log, h.coordinator)
        h.tag_store = TagStore(self.io, log)
        check_reader(vm.reader_features, f"branch {log.branch!r} of {self.uri}")
        return h

    @property
    def tags(self) -> Tags:
        """The table's tags: ``t.tags.create("v1")``, ``t.tags.list()`` (lamina.table.tags)."""
        return Tags(self)

    @property
    def branches(self) -> Branches:
        """The table's branches: ``t.branches.create("dev")``, ``t.branches.publish("dev")``
        (lamina.table.branches); ``t.branch(name)`` is a handle on one."""
        return Branches(self)

    @property
    def inspect(self) -> Inspect:
        """The table's system tables as Arrow: ``t.inspect.snapshots()``, ``t.inspect.files()``
        (lamina.table.inspect)."""
        return Inspect(self)

    @property
    def maintenance(self) -> Maintenance:
        """Compaction, manifest rewrites, expiry, orphan removal, storage: ``t.maintenance.compact()``
        (lamina.table.maintenance)."""
        return Maintenance(self)

    def _source(self, version: int | str | None, timestamp: Any) -> tuple[Table, int | None, str | None]:
        """What a ``version``/``timestamp`` pair names: (this handle, a version number, None),
        (this handle, None, a tag name), or (a branch's handle, None, None) for a branch's name
        (its latest). InvalidArgument if both are given."""
        if version is not None and timestamp is not None:
            raise InvalidArgument("pass version or timestamp, not both")
        number, name = split_version_or_tag(version)
        if name is not None and (name == MAIN_BRANCH or BranchStore(self.io).exists(name)):
            return self.branch(name), None, None
        return self, number, name

    @property
    def branch_record(self) -> BranchRecord | None:
        """This handle's branch record (None on main)."""
        return self.log.record if isinstance(self.log, BranchLog) else None

    def _publish_operation(self, branch: str, expected_version: int | None) -> PublishBranch | None:
        """The operation publishing ``branch`` into this handle's branch; None if the branch
        has no commit (nothing to publish; CommitConflict if ``expected_version`` is not this
        branch's)."""
        into = self.branch_name
        if branch == into:
            raise InvalidArgument(f"cannot publish branch {branch!r} into itself")
        if branch == MAIN_BRANCH:
            raise InvalidArgument(
                "main was made from no other branch: publish a branch into main, not main into a branch"
            )
        src = self.branch(branch)
        record = src.branch_record
        assert record is not None
        head = src.metadata
        if head.commit_id == record.base.commit_id:  # no commit on the branch: nothing to publish
            current = self.log.latest().version
            if expected_version is not None and current != expected_version:
                raise CommitConflict(
                    f"not publishing branch {branch!r}: {into!r} is at version {current}, "
                    f"not {expected_version} as expected. Nothing was committed"
                )
            return None
        # The publish reads the branch's head as a reader does: expiry and a deletion of the
        # branch free nothing it needs for the reader grace (docs/branches.md).
        made = self.branch_record  # the target's, if it is a branch: what it was made from
        return PublishBranch(
            branch,
            record.base,
            head,
            into,
            expected_version,
            record.branch_id,
            src.log.load,
            made.base if made is not None else None,
        )

    # -- rollback, expiry, orphans --------------------------------------------------------

    @writes
    def rollback(
        self,
        version: int | str | None = None,
        *,
        timestamp: Any = None,
        destructive: bool = False,
        commit_options: CommitOptions | None = None,
    ) -> CommitResult:
        """Commit a new version whose content equals ``version``'s (a version number of this
        branch, or a tag name) or ``timestamp``'s.

        History is kept, so a rollback can itself be rolled back. With
        ``destructive=True`` the versions between the target and the rollback
        are then deleted with every file only they needed (Paimon's rollback);
        tags on them survive.
        """
        if version is None and timestamp is None:
            raise InvalidArgument("rollback needs a version (a number or a tag name) or a timestamp")
        tag = split_version_or_tag(version)[1]  # a tag's name is recorded in the summary
        try:
            target = self._resolve(version, timestamp)
        except TagNotFound:
            if tag is not None and tag in self.branches:
                raise InvalidArgument(
                    f"{tag!r} is a branch: a rollback goes back to a version of this branch or a tag; "
                    "to give this branch another's rows, publish that branch into it"
                ) from None
            raise
        # The files the rollback re-adds are the target's: a guard tag keeps them from an
        # expiry (or a deletion of the tag rolled back to) running until the commit lands.
        guard = self.tag_store.guard(target, "rollback")
        try:
            committed = self._one(self.transaction(commit_options=commit_options).add_operation(Rollback(target, tag)))
        finally:
            self.tag_store.drop_guard(guard)
        if destructive:
            expire.drop_versions_after(self.io, self.log, target, self._vm)
        return committed

    # -- the Iceberg view (lamina.iceberg, docs/iceberg.md) ---------------------------------

    @writes
    def set_iceberg_enabled(self, enabled: bool = True, *, commit_options: CommitOptions | None = None) -> CommitResult:
        """Turn the Iceberg view on (or off) from a new version (nothing committed if it already was); on,
        the view is brought up to date at once (every retained version). IcebergUnsupported,
        nothing committed, if a column has a type Iceberg lacks."""
        if enabled:
            iceberg_view.check_supported(self._fresh_latest())
        else:
            iceberg_view.wait(self)  # the view it freezes shows the versions this process committed
        op = UpdateProperties.of(
            self._fresh_latest(), {TableProperties.ICEBERG_ENABLED.key: "true" if enabled else "false"}
        )
        committed = self._one(self.transaction(commit_options=commit_options).add_operation(op))
        if enabled:
            self.sync_iceberg()
        return committed

    @writes
    def sync_iceberg(self) -> iceberg_view.SyncResult:
        """Bring the Iceberg view up to date: a snapshot for every retained version of main and
        the branches and for every tag, none for expired versions (InvalidArgument if the
        table does not enable the view)."""
        return iceberg_view.sync_all(self)

    def iceberg_synced(self, metadata_location: str) -> None:
        """Called after the Iceberg view got a new newest metadata file (its URI); a catalog's
        table names it in the catalog (lamina.catalog.CatalogTable)."""

    def iceberg_status(self) -> dict[str, Any]:
        """The Iceberg view: ``enabled``, ``sync_mode`` (``async``: written in the background;
        ``sync``: before a commit returns), its newest ``metadata`` file (a path, or None), the
        ``shown_version`` of main and the ``latest_version``, ``snapshots``, ``refs``, and
        ``problems`` (behind, a file missing) as fsck reports them."""
        return iceberg_view.status(self)

    def __repr__(self) -> str:
        return f"lamina.Table({self.uri!r}, version={self.version})"


def _new_log(
    uri: str, storage_options: Mapping[str, Any] | None, identifier: str | None, allow_list: bool = True
) -> VersionLog:
    return VersionLog(FileIO(uri, storage_options), table_identifier=identifier, allow_list=allow_list)


def create_table(
    uri: str,
    schema: Any,
    partition_by: str | Iterable[str] | None = None,
    properties: Mapping[str, Any] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    identifier: str | None = None,
) -> Table:
    """Create a table at ``uri`` and commit its version 0 (empty).

    ``schema``: a pyarrow Schema, or data to take it from (a pyarrow Table, RecordBatch or
    RecordBatchReader, a pandas DataFrame), as pyiceberg's ``create_table`` takes a schema:
    the data's rows are not written, append them (``t.append(df)``). Columns are stored as
    Spark, Delta and Iceberg store them: string for large_string, a dictionary's value type,
    and timestamp[ns] (what pandas holds) as timestamp[us], which is logged as a warning
    naming the column (writes then keep whole microseconds and refuse a value with
    nanoseconds: docs/format.md, Types on write)."""
    return create_table_at(
        uri, initial_version(schema, partition_by, properties), storage_options=storage_options, identifier=identifier
    )


def create_table_at(
    uri: str,
    vm: VersionManifest,
    *,
    storage_options: Mapping[str, Any] | None = None,
    identifier: str | None = None,
) -> Table:
    """Create a table at ``uri`` whose version 0 is ``vm`` (``initial_version``'s, or one
    made from it: a converted table's, with the source's field ids and specs)."""
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
    table = Table(log.io, log, vm)
    try:
        table._committer.create(vm)
    except AlreadyExists:
        raise TableAlreadyExists(f"another writer created a table at {uri} at the same time") from None
    iceberg_view.on_commit(table, vm)
    return table


def initial_version(
    schema: Any,
    partition_by: str | Iterable[str] | None = None,
    properties: Mapping[str, Any] | None = None,
    extra_writer_features: Sequence[str] = (),
) -> VersionManifest:
    """Version 0 of a new table (empty); shared by create_table and the catalogs. ``schema``: a
    pyarrow Schema or data to take it from (``lamina.table.convert.schema_of``)."""
    lschema = Schema.from_arrow(schema_of(schema))
    spec = parse_partition_by(partition_by if not isinstance(partition_by, str) else [partition_by], lschema)
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    check_properties(props)
    check_column_modes(props, lschema)
    reader_features = list(DEFAULT_READER_FEATURES)
    writer_features = list(DEFAULT_WRITER_FEATURES)
    if not spec.is_unpartitioned:
        reader_features.append("hidden-partitioning")
        writer_features.append("hidden-partitioning")
    root_format = TableProperties.MANIFEST_ROOT_FORMAT.get(props)
    if root_format in ("inline", "arrow"):
        reader_features.append(ARROW_ROOT_MANIFESTS)
        writer_features.append(ARROW_ROOT_MANIFESTS)
    if root_format == "inline":
        reader_features.append(INLINE_ROOT_MANIFESTS)
        writer_features.append(INLINE_ROOT_MANIFESTS)
    if TableProperties.MANIFEST_LEAF_FORMAT.get(props) == "arrow":
        reader_features.append(ARROW_LEAF_MANIFESTS)
        writer_features.append(ARROW_LEAF_MANIFESTS)
    lineage = TableProperties.ROW_LINEAGE_ENABLED.get(props) == "true"
    if lineage:
        writer_features.append(ROW_LINEAGE)
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
        next_row_id=0 if lineage else None,
        block_commits=(),  # the first version of its block
    )


def open_table(
    uri: str,
    *,
    version: int | str | None = None,
    timestamp: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_list: bool = True,
    table_uuid: str | None = None,
) -> Table:
    """Open the latest version of the table at ``uri``, or ``version`` / ``timestamp`` as for
    ``scan`` (``version``: a version number, a tag name, or a branch name: a handle on that
    branch's latest; a branch's version number is ``open_table(uri).branch("dev").at(3)``).

    ``allow_list=False`` trusts the version hint and never lists (for readers
    without list permission); ``table_uuid`` refuses a location that holds
    another table.
    """
    if version is not None and timestamp is not None:
        raise InvalidArgument("pass version or timestamp, not both")
    number, _ = split_version_or_tag(version)  # before any I/O: a bad one is refused as is
    log = _new_log(uri, storage_options, None, allow_list)
    log.table_uuid = table_uuid
    table = Table(log.io, log, log.load(number) if number is not None else log.latest())
    if number is None and (version is not None or timestamp is not None):
        table = table.at(version, timestamp=timestamp)
    check_reader(table._vm.reader_features, f"table {uri}")
    return table
