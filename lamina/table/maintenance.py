"""``t.maintenance``: what keeps a table's layout healthy (as pyiceberg's ``tbl.maintenance``).

Compaction and manifest rewrites commit a version like any write; expiry and orphan removal
delete what no retained version needs, committing none (docs/maintenance.md). Each call works
on this object's branch; ``remove_orphans`` and ``storage`` are table-wide.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from lamina.commit import CommitOptions, CommitResult
from lamina.commit.branches import BranchStore
from lamina.data.inflight import new_write_id
from lamina.errors import BranchNotFound, InvalidArgument
from lamina.expr import Expr, to_expr
from lamina.maintenance import expire, orphans, storage
from lamina.operations import CompactFiles, CompactionResult, RewriteManifests, compaction
from lamina.table import iceberg_view
from lamina.table.guards import writes
from lamina.timeutil import duration_ms

if TYPE_CHECKING:
    from lamina.table.engine import WriteSession
    from lamina.table.table import Table


class Maintenance:
    """The maintenance of ``table``: ``compact``, ``rewrite_manifests``, ``expire_versions``,
    ``remove_orphans``, ``storage``."""

    def __init__(self, table: Table) -> None:
        self._table = table

    @writes
    def compact(
        self,
        *,
        target_file_size: int = compaction.DEFAULT_TARGET,
        min_file_size: int | None = None,
        where: str | Expr | None = None,
        sort_by: Any = None,
        commit_options: CommitOptions | None = None,
        progress: Any = None,
        rewrite_groups: Any = None,
        session: WriteSession | None = None,
    ) -> CompactionResult:
        """Bin-pack small files (and files with deletion vectors) per partition into
        ~``target_file_size`` files, in one version. See ``lamina.operations.compaction``.

        An engine does the rewriting with ``rewrite_groups`` (see ``CompactFiles``) and a
        ``session`` (``lamina.table.WriteSession`` on this table): the outputs carry
        the session's write id, and the session commits them (with its commit options), or
        deletes them if the compaction fails."""
        t = self._table
        if session is not None:
            if session.table is not t:
                raise InvalidArgument("compact(session=...) takes a write session opened on this table object")
            if commit_options is not None:
                raise InvalidArgument("the commit options of a compaction in a write session are the session's")
        target = compaction.check_target(target_file_size)
        # ``where`` and the sort order are bound at the base the commit loads (the latest
        # version), not on a refresh of this handle first: on an object store that is one
        # LIST and one GET less.
        op = CompactFiles(
            to_expr(where) if where is not None else None,
            target,
            min_file_size if min_file_size is not None else target * 3 // 4,
            sort_by,
            session.write_id if session is not None else new_write_id(),
            progress,
            rewrite_groups,
        )
        if session is not None:
            commit = session.commit_operation(op)
        else:
            commit = t._commit_operation(op, commit_options)
        last = op.last
        # (not applied yet when queued in a session's transaction, which commits it later)
        before = last.get("files_before", int(t.metadata.summary.get("total-files", 0)))
        if commit is None or commit.version is None:
            return CompactionResult(
                version=None,
                files_before=before,
                files_after=before,
                input_files=0,
                output_files=0,
                groups=0,
                bytes_read=0,
                rows_written=0,
            )
        return CompactionResult(
            version=commit.version,
            operation=commit.operation,
            metrics=commit.metrics,
            files_before=before,
            files_after=int(t.metadata.summary.get("total-files", 0)),
            input_files=last["input_files"],
            output_files=last["output_files"],
            groups=last["groups"],
            bytes_read=last["bytes_read"],
            rows_written=last["rows_written"],
        )

    @writes
    def rewrite_manifests(self, *, commit_options: CommitOptions | None = None) -> CommitResult:
        """Rewrite the leaf manifests (same files), grouped by partition, in one version."""
        return self._table._commit_operation(RewriteManifests(), commit_options)

    @writes
    def expire_versions(
        self,
        older_than: Any = None,
        retain_last: int | None = None,
        *,
        reader_grace: Any = None,
        dry_run: bool = False,
        progress: Any = None,
        branches: bool = True,
    ) -> expire.ExpireReport:
        """Delete old versions and the files only they needed; tags and branches keep theirs.

        See ``lamina.maintenance.expire`` for the rules (reader grace: versions are
        expired only once superseded for ``reader_grace``, default one hour). On a branch's
        handle, that branch's versions, by its retention (``t.branches.create(retain_last=,
        max_age=)``) where the call leaves it open. On main with ``branches`` (default), every
        branch's versions too, each by its own retention where set, else by the call's
        (``report.branches``: each branch's report).
        """
        t = self._table
        report = self._expire_own(older_than, retain_last, reader_grace, dry_run, progress)
        if t.main is t and branches:
            for record in BranchStore(t.io).list():
                try:
                    h = t.branch(record.name)
                except BranchNotFound:  # deleted meanwhile
                    continue
                report.branches[record.name] = Maintenance(h)._expire_own(
                    older_than, retain_last, reader_grace, dry_run, None, prefer_own=True
                )
        iceberg_view.after_expiry(
            t, dry_run, None if reader_grace is None else duration_ms(reader_grace, "reader_grace")
        )
        return report

    def _expire_own(
        self,
        older_than: Any,
        retain_last: int | None,
        reader_grace: Any,
        dry_run: bool,
        progress: Any,
        prefer_own: bool = False,
    ) -> expire.ExpireReport:
        """Expire this object's branch: its retention fills what the call leaves open, or
        (``prefer_own``: main expiring its branches) replaces it where set."""
        t = self._table
        record = t.branch_record
        if record is not None:
            own_age = (
                None if record.max_age_ms is None else datetime.now(UTC) - timedelta(milliseconds=record.max_age_ms)
            )
            if prefer_own:
                older_than = own_age if own_age is not None else older_than
                retain_last = record.retain_last if record.retain_last is not None else retain_last
            else:
                older_than = older_than if older_than is not None else own_age
                retain_last = retain_last if retain_last is not None else record.retain_last
        return expire.expire_versions(
            t.io,
            t.log,
            older_than=older_than,
            retain_last=retain_last,
            reader_grace=reader_grace,
            dry_run=dry_run,
            progress=progress,
        )

    @writes
    def remove_orphans(
        self,
        older_than: Any = orphans.DEFAULT_ORPHAN_AGE,
        *,
        dry_run: bool = False,
        allow_short_age: bool = False,
        progress: Any = None,
    ) -> orphans.OrphanReport:
        """Delete files nothing references, older than ``older_than`` and not in flight (Delta's
        ``VACUUM``, Iceberg's ``remove_orphan_files``)."""
        t = self._table
        return orphans.remove_orphans(  # table-wide: every branch's files are walked
            t.io, t.main.log, older_than, dry_run=dry_run, allow_short_age=allow_short_age, progress=progress
        )

    def storage(self) -> storage.StorageReport:
        """Where the table's bytes are: what its current version (main's latest) reads, the
        total under its location, and what keeps the rest (older versions, tags, branches:
        each with what only it keeps), as ``lamina info`` prints (lamina.maintenance.storage)."""
        return storage.storage_report(self._table.io, self._table.main.log)

    def __repr__(self) -> str:
        return f"lamina.Maintenance({self._table.uri!r})"
