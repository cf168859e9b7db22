"""Publishing a branch into another: a fast-forward, or the branch's changes re-applied.

``PublishBranch(name, base, head)`` is applied to the target branch's latest version like
any operation, so it retries and rebases as every commit does:

- **Fast-forward**: the target's latest is still the version the branch was made from (same
  commit id). The new version takes the branch head's content as it is (root manifest,
  schema, specs, properties, row-id counter): metadata only, one version file.
- **Otherwise, a rebase**: the branch's change is its file-level diff from its base to its
  head (files it removed, files it added, data files given a new deletion vector). Every
  file the branch removed or gave a new deletion vector must still be live in the target
  with the deletion vector it had at the base; otherwise the branch rewrote rows the target
  changed since, and the publish fails (PublishConflict naming those files). Files the
  branch added are added, with fresh row ids. A schema, partition spec, sort order or
  property change made on the branch is applied if the target still has the base's;
  if the target changed it too, that is a conflict.

The version numbers a branch's manifests record are the branch's own, so a fast-forward's
file intervals do not describe the target's history: the version is flagged
(``last_readd_version``) and expiry decides about its files by the full walk, exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lamina.commit import REMOVED_SCHEMA, Base, Change, Operation, removed_of
from lamina.commit.checks import (
    require_added_files_new,
    require_files_unchanged_since_branch,
    require_last_published_kept,
    require_live,
    require_row_ids_unclaimed,
    require_unchanged_since_branch,
    require_version,
)
from lamina.data.changes import changed_entries
from lamina.data.deletes import file_key_array
from lamina.manifest.entries import conform, fill_constant, manifest_schema_of
from lamina.manifest.tree import live_data_entries
from lamina.spec.features import BRANCHES
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID, ROW_ID, has_lineage
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-publish")
_NOTHING_REMOVED = REMOVED_SCHEMA.empty_table()


# The target's version records, per branch published into it, the branch's last version
# published (as ``app_transactions`` records an application's last sequence: carried forward
# by every commit, so it is exactly as durable as the publish). A later publish of the branch
# re-applies only what the branch did since, and publishing the same version again is a no-op.
PUBLISHED_KEY = "lamina.branch:"


def same_content(a: VersionManifest, b: VersionManifest) -> bool:
    """Whether two versions hold the same files and metadata (a fast-forward from one to a
    descendant of the other loses nothing)."""
    return (
        a.root_manifest == b.root_manifest
        and a.schema == b.schema
        and a.all_partition_specs == b.all_partition_specs
        and a.partition_spec == b.partition_spec
        and a.sort_order == b.sort_order
        and a.properties == b.properties
    )


@dataclass
class PublishBranch(Operation):
    branch: str
    base: VersionManifest  # the version the branch was made from (its record's copy)
    head: VersionManifest  # the branch's version being published
    into: str = "main"
    expected_version: int | None = None  # publish only onto this version of the target
    branch_id: str = ""
    load: Callable[[int], VersionManifest] | None = None  # a version of the branch, by number
    # the version the target was made from, when the target is a branch (None: main)
    target_base: VersionManifest | None = None

    skip_if_noop: ClassVar[bool] = True  # the head was published already: nothing to commit
    conflict_checks = (
        require_version,
        require_last_published_kept,
        require_unchanged_since_branch,
        require_files_unchanged_since_branch,
        require_added_files_new,
        require_row_ids_unclaimed,
        require_live,
    )

    @property
    def key(self) -> str:
        return f"{PUBLISHED_KEY}{self.branch_id}"

    def since(self, target: VersionManifest) -> VersionManifest:
        """The branch's version its changes are counted from: its base, or the version of it
        last published into ``target``."""
        last = target.app_transactions.get(self.key)
        if last is None or self.load is None:
            return self.base
        with require_last_published_kept(self.branch, self.into, last):
            return self.load(last)

    def apply(self, base: Base) -> Change:
        target = base.metadata
        require_version(target, self.expected_version, self.branch, self.into)
        last = target.app_transactions.get(self.key)
        if last is not None and last >= self.head.version:
            return Change("publish", base.empty(), _NOTHING_REMOVED)  # published already
        since = self.since(target)
        summary = {"branch": self.branch, "branch-version": self.head.version, "branch-base-version": since.version}
        if same_content(self.head, since):
            return Change("publish", base.empty(), _NOTHING_REMOVED)  # the branch changed nothing since
        if same_content(target, since):
            summary["publish"] = "fast-forward"
            return Change(
                "publish",
                base.empty(),
                _NOTHING_REMOVED,
                summary=summary,
                tree=self.head,
                app_transactions={self.key: self.head.version},
            )
        summary["publish"] = "rebase"
        change = self._rebase(base, since, summary)
        if change.is_empty:
            # The branch changed nothing since (e.g. made and published with no commit of its
            # own while the target moved): no version, as for a fast-forward of nothing.
            return change
        # Publishes the branch received since, which the target had received as far as the
        # branch's ``since`` had: their changes are in the diff just re-applied, so the target
        # records them too (or publishing that other branch later would apply them again).
        received = {
            k: v
            for k, v in self.head.app_transactions.items()
            if k.startswith(PUBLISHED_KEY)
            and k != self.key
            and since.app_transactions.get(k) != v
            and since.app_transactions.get(k) == target.app_transactions.get(k)
        }
        change.app_transactions = {**received, self.key: self.head.version}
        return change

    def _rebase(self, base: Base, since: VersionManifest, summary: dict[str, Any]) -> Change:
        target = base.metadata
        change = Change("publish", base.empty(), _NOTHING_REMOVED, summary=summary)
        # Metadata the branch changed: taken if the target still has the base's.
        for attr, what in (
            ("schema", "schema"),
            ("partition_spec", "partition spec"),
            ("sort_order", "sort order"),
            ("properties", "table properties"),
        ):
            mine, theirs, was = getattr(self.head, attr), getattr(target, attr), getattr(since, attr)
            if mine == was or mine == theirs:
                continue
            require_unchanged_since_branch(self.branch, self.into, since.version, what, theirs, was)
            setattr(change, attr, mine)
        gone, new = changed_entries(base.io, since, self.head, full=True)
        # When the target or the branch took files from elsewhere than its own writes (a
        # publish, a rollback re-adding files), or the target is a branch (``target_base``: made,
        # perhaps, from this branch after it added them), a file the branch added may be live in
        # the target already (the same change reached both): adding it again would make one file
        # live twice. Main is made from nothing: it holds another log's files only by those ways.
        shared = _received(target) or _received(self.head) or self.target_base is not None
        if not (gone.num_rows or (shared and new.num_rows)):
            have = hkeys = None
        else:
            have = base.live_entries(["path", "added_version", "dv_path", "dv_offset"])
            hkeys = file_key_array(have)
        fresh_new = new.filter(pc.invert(pc.is_in(new.column("path"), value_set=gone.column("path"))))
        if shared and have is not None:
            self._refuse_held(
                fresh_new,
                have.column("path"),
                f"are already live there: its changes reached {self.into!r} "
                f"before (published there, or {self.into!r} was made from a version holding them)",
            )
        self._refuse_what_the_target_was_made_with(base, fresh_new)
        if gone.num_rows:
            assert have is not None and hkeys is not None  # (read above: files are gone)
            gkeys = file_key_array(gone)
            lost = gone.filter(pc.invert(pc.is_in(gkeys, value_set=hkeys))) if len(hkeys) else gone
            require_files_unchanged_since_branch(
                self.branch, self.into, since.version, sorted(set(lost.column("path").to_pylist()))
            )
            change.removed = removed_of(have.filter(pc.is_in(hkeys, value_set=gkeys)))
        meta = target.next(
            schema=change.schema or target.schema, partition_spec=change.partition_spec or target.partition_spec
        )
        mschema = manifest_schema_of(meta)
        if new.num_rows:
            added = conform(new, mschema)
            if has_lineage(target) and FIRST_ROW_ID in mschema.names:
                # Files new on the branch get fresh ids from the target's counter (the
                # committer assigns them); a data file given a new DV keeps its rows' ids.
                fresh = pc.invert(pc.is_in(added.column("path"), value_set=gone.column("path")))
                self._check_stored_ids(base, since, added.filter(fresh))
                firsts = pc.if_else(fresh, pa.nulls(added.num_rows, pa.int64()), added.column(FIRST_ROW_ID))
                versions = pc.if_else(fresh, pa.nulls(added.num_rows, pa.int64()), added.column(DATA_VERSION))
                added = added.set_column(added.schema.get_field_index(FIRST_ROW_ID), FIRST_ROW_ID, firsts)
                added = added.set_column(added.schema.get_field_index(DATA_VERSION), DATA_VERSION, versions)
            change.added = fill_constant(added, added_version=base.version, status=1, removed_version=None)
            # A file that reached both logs from elsewhere may have been live in the target once
            # and removed since (compacted away): added again, its path has two intervals in the
            # target's history, so expiry must decide about it by the full walk.
            change.readds = shared
        return change

    def _refuse_what_the_target_was_made_with(self, base: Base, fresh_new: pa.Table) -> None:
        """A target branch made from a version holding files this branch added (made from this
        branch after it wrote them) had their rows from the start, even if it has rewritten or
        removed the files since (compaction, an update): adding them again would bring those
        rows back a second time. Refused, naming them."""
        made = self.target_base
        if made is None or not fresh_new.num_rows or made.root_manifest is None:
            return
        held = live_data_entries(
            base.io, made.root_manifest, manifest_schema_of(made), columns=["path"], inline=made.root_inline
        )
        self._refuse_held(
            fresh_new,
            held.column("path"),
            f"were live in the version {self.into!r} was made from, so it "
            "had their rows from the start (it has rewritten or removed them since)",
        )

    def _refuse_held(self, fresh_new: pa.Table, held: pa.ChunkedArray, why: str) -> None:
        """PublishConflict naming the files of ``fresh_new`` (files the branch added) whose paths
        are among ``held``, for the reason ``why``; nothing if none is."""
        both = fresh_new.filter(pc.is_in(fresh_new.column("path"), value_set=held))
        require_added_files_new(self.branch, self.into, sorted(set(both.column("path").to_pylist())), why)

    def _check_stored_ids(self, base: Base, since: VersionManifest, fresh: pa.Table) -> None:
        """Rows the branch inserted and then rewrote (an update of rows it appended) store row
        ids from the branch's counter, which the target has handed out since: they cannot
        get fresh ones without rewriting the files. Refused rather than duplicated."""
        start = since.next_row_id or 0

        def stored_max(path: str) -> int | None:
            local = base.io.local_path(path)
            meta = (
                pq.read_metadata(local) if local is not None else pq.read_metadata(pa.BufferReader(base.io.get(path)))
            )
            # leaf paths (row groups index leaves): a struct's field named _row_id is not it
            paths = [meta.schema.column(j).path for j in range(meta.num_columns)]
            if ROW_ID not in paths:
                return None
            i = paths.index(ROW_ID)
            top = None
            for g in range(meta.num_row_groups):
                st = meta.row_group(g).column(i).statistics
                if st is None or not st.has_min_max:
                    return start  # unknown: assume the worst
                top = st.max if top is None else max(top, st.max)
            return top

        paths = fresh.column("path").to_pylist()
        clash = [p for p, m in zip(paths, _pool.map(stored_max, paths)) if m is not None and m >= start]
        require_row_ids_unclaimed(self.branch, self.into, clash)


def _received(vm: VersionManifest) -> bool:
    """Whether the version's history took files from another log (a publish) or re-added some."""
    return vm.last_readd_version is not None or any(k.startswith(PUBLISHED_KEY) for k in vm.app_transactions)


class EnableBranches(Operation):
    """Give the table writer feature ``branches`` (lamina.spec.features): a writer that knows
    no branches must not expire or clean up what a branch needs. Metadata only, once."""

    conflict_checks = ()  # a writer feature: turned on by whichever commit lands, on any base
    skip_if_noop = True

    def apply(self, base: Base) -> Change:
        have = BRANCHES in base.metadata.writer_features
        return Change("enable-branches", base.empty(), _NOTHING_REMOVED, writer_features=() if have else (BRANCHES,))
