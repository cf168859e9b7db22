"""Optimistic commits: apply operations to the latest version, publish, rebase on conflict.

This is where every version of a table is made, version 0 included. A change is
data plus what it needs from the version it is applied to (pyiceberg's model):
``Operation.apply(base)`` turns the operation into manifest changes against
``base`` (a ``lamina.commit.base.Base``) and raises CommitConflict if ``base`` no
longer allows it (e.g. a file it removes was removed concurrently). Appends
apply to any base, so append vs append never conflicts. A transaction is a
sequence of operations applied in order, each seeing the ones before it, and
re-applied as a unit on every attempt.

Every attempt carries the same commit id, which is how an ambiguous outcome
(the conditional PUT may have landed but the answer was lost) is resolved:
the slot is read back and the commit is ours, someone else's, or absent (then
the same PUT is retried). A commit is never applied twice and never lost
silently: it either returns the version it landed as, or raises.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from lamina.commit.base import Base, Change, Operation, combine
from lamina.commit.checks import require_live
from lamina.commit.coordinator import CommitCoordinator
from lamina.commit.log import VersionLog
from lamina.errors import AlreadyExists, CommitRetriesExhausted, CommitStateUnknown, StorageError
from lamina.manifest.entries import conform, fill_constant, manifest_schema_of
from lamina.manifest.tree import ChangeResult, TreeConfig, apply_change
from lamina.spec.features import (
    COLUMN_MAPPING,
    EXTERNAL_FILES,
    HIDDEN_PARTITIONING,
    PARTITION_EVOLUTION,
    SLOT_RANGE_RECORDS,
    SLOT_TOMBSTONES,
    SORT_ORDERS,
    check_writer,
    with_features,
)
from lamina.spec.layout import has_external, random_hex
from lamina.spec.lineage import assign_row_ids, counter_of, has_lineage
from lamina.spec.properties import TableProperties
from lamina.spec.slot import Tombstone, commit_root_path, next_block_commits, slot_chunk_size
from lamina.spec.version import VersionManifest
from lamina.timeutil import sleep_jitter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitOptions:
    """Retry policy. Bounded by attempts and by wall time, whichever comes first."""

    max_attempts: int = TableProperties.COMMIT_RETRY_MAX_ATTEMPTS.default
    max_seconds: float = TableProperties.COMMIT_RETRY_MAX_SECONDS.default
    backoff_min_ms: float = TableProperties.COMMIT_RETRY_BACKOFF_MIN_MS.default
    backoff_max_ms: float = TableProperties.COMMIT_RETRY_BACKOFF_MAX_MS.default
    resolve_attempts: int = 5  # reads of the version slot to resolve an unknown outcome

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> CommitOptions:
        """The retry policy a table's ``commit.retry.*`` properties set."""
        return cls(
            max_attempts=TableProperties.COMMIT_RETRY_MAX_ATTEMPTS.get(props),
            max_seconds=TableProperties.COMMIT_RETRY_MAX_SECONDS.get(props),
            backoff_min_ms=TableProperties.COMMIT_RETRY_BACKOFF_MIN_MS.get(props),
            backoff_max_ms=TableProperties.COMMIT_RETRY_BACKOFF_MAX_MS.get(props),
        )

    def back_off(self, attempt: int) -> None:
        """Sleep before retry ``attempt`` (from 1): full jitter up to ``backoff_min_ms``,
        doubling per attempt, at most ``backoff_max_ms``."""
        sleep_jitter(min(self.backoff_max_ms, self.backoff_min_ms * 2 ** min(attempt - 1, 16)) / 1000.0)


# Hook for tests that kill a writer at each step of the commit (crash tests).
_step_hook: Callable[[str], None] | None = None


def step(name: str) -> None:
    """Mark a step of a commit for the crash tests' hook (``_step_hook``)."""
    if _step_hook is not None:
        _step_hook(name)


class Committer:
    def __init__(self, log_: VersionLog, coordinator: CommitCoordinator):
        self.log = log_
        self.coordinator = coordinator

    def create(self, vm: VersionManifest, options: CommitOptions | None = None) -> VersionManifest:
        """Commit version 0 (a new table): through the coordinator, like every version.

        Raises AlreadyExists if another table holds version 0. An unknown outcome is
        resolved by reading the slot back: our commit id there means it landed."""
        options = options or CommitOptions.from_properties(vm.properties)
        for _ in range(options.resolve_attempts):
            try:
                step("before-publish")
                self.coordinator.create(vm)
                break
            except (AlreadyExists, StorageError) as e:
                try:
                    there = self.log.read_slot(0)
                except StorageError as read_error:
                    log.warning("could not read version 0 back: %s", read_error)
                    continue
                if there is not None and not isinstance(there, Tombstone) and there.commit_id == vm.commit_id:
                    break  # ours: an earlier attempt landed and its answer was lost
                if isinstance(e, AlreadyExists):
                    raise
                if there is not None:
                    raise AlreadyExists(f"version 0 of {self.log.io.uri} is another table's") from None
        else:
            raise CommitStateUnknown(
                f"could not tell whether the table at {self.log.io.uri} was created (commit {vm.commit_id}): "
                "the store kept failing. Open it to check before retrying."
            )
        step("published")
        self.log.table_uuid = vm.table_uuid
        self.log.write_hint(vm)
        return vm

    def commit(
        self,
        base: VersionManifest,
        ops: Sequence[Operation],
        options: CommitOptions | None = None,
        before_publish: Callable[[], None] | None = None,
    ) -> VersionManifest | None:
        """Commit ``ops`` as one version (in order, each seeing the ones before); None if every
        operation is ``skip_if_noop`` and together they change nothing (nothing committed).

        ``before_publish`` runs once before the first publish attempt (e.g. waiting until
        data files are durable: nothing may point at a file not yet written). ``base`` need
        not be the latest version: if it is stale, the put finds its successor's slot taken
        (by a version or a tombstone) and the commit rebases.
        """
        options = options or CommitOptions.from_properties(base.properties)
        commit_id = random_hex(16)
        deadline = time.monotonic() + options.max_seconds
        attempt = 0
        while True:
            attempt += 1
            check_writer(base.writer_features, f"table {self.log.io.uri}")
            self.coordinator.check_commit(base)  # before any manifest is written
            prepared = self._prepare(base, ops, commit_id)
            if prepared is None:
                return None
            vm = prepared
            if before_publish is not None:
                before_publish()
                before_publish = None
            sent = time.monotonic()
            outcome = self._publish(vm, commit_id, options, base.properties)
            if isinstance(outcome, VersionManifest):
                self.log.saw_latest(outcome.version, sent)  # no slot above it existed before its put
                step("published")
                if self.log.hint_due(outcome.version):
                    # On local disk a hint is rewritten in place, cheaply: before
                    # returning, with no hand-off to the hint thread (whose wake-ups and GIL
                    # take-overs cost the next commit more than the write). On object stores
                    # it is a request: in the background.
                    self.log.write_hint(outcome, wait=self.log.io.is_local, after=lambda: step("hinted"))
                return outcome
            if attempt >= options.max_attempts or time.monotonic() >= deadline:
                raise CommitRetriesExhausted(
                    f"gave up committing {vm.operation} to {self.log.io.uri} after {attempt} attempts: "
                    f"version {vm.version} and later kept being taken by concurrent writers. "
                    "Nothing was committed; retry later or raise commit.retry.max-attempts."
                )
            # Lost the race: back off (full jitter) and rebase onto what won. A slot taken by a
            # version or a tombstone lies below the newest, which a probe forward from it finds;
            # a put withdrawn from a freed slot starts over from the general lookup.
            options.back_off(attempt)
            base = self.log.latest() if outcome is _WITHDRAWN else self.log.newest_from(vm.version)

    def _changes(self, base: VersionManifest, ops: Sequence[Operation]) -> tuple[list[Change], int | None]:
        """Each operation applied in order: the first to ``base``, each later one to ``base``
        plus the changes before it (a staged tree, written only if an operation looks); and
        the table's next row id after them.

        On a table with row lineage each change's added files get their row ids here, as it is
        staged (lamina.spec.lineage): a later operation of the transaction that rewrites rows an
        earlier one added (an update of rows just appended) reads them with their ids and keeps
        them, and the ids continue from the base's counter, so a rebase hands out fresh ones."""
        version = base.version + 1
        changes: list[Change] = []
        staged: list[VersionManifest] = [base]
        meta, next_row_id = base, counter_of(base)

        def view(i: int) -> VersionManifest:
            while len(staged) <= i:  # staged[k] = base + changes[:k]
                prev = staged[-1]
                change = changes[len(staged) - 1]
                staged.append(self._apply_tree(prev, change, version)[0])
            return staged[i]

        for i, op in enumerate(ops):
            seen: VersionManifest | Callable[[], VersionManifest] = base if i == 0 else functools.partial(view, i)
            change = op.apply(Base(self.log.io, seen, version))
            meta = with_metadata(meta, change)
            if has_lineage(meta) and change.added.num_rows:
                if change.row_ids is not None and change.row_ids[0] == (next_row_id or 0):
                    next_row_id = change.row_ids[1]  # given from this very counter: what it would give
                else:
                    added = conform(change.added, manifest_schema_of(meta))
                    if change.row_ids is not None:  # given from another counter: given afresh
                        added = fill_constant(added, first_row_id=None, data_version=None)
                    # A copy of the change: operations reuse their entries across attempts.
                    added, next_row_id = assign_row_ids(added, next_row_id or 0, version)
                    change = replace(change, added=added, row_ids=None)
            changes.append(change)
        return changes, next_row_id

    def _apply_tree(
        self,
        base: VersionManifest,
        change: Change,
        version: int,
        commit_id: str | None = None,
    ) -> tuple[VersionManifest, ChangeResult]:
        """``base`` with ``change`` applied to its manifest tree: the manifests of ``version``.
        ``commit_id``: the tree is the commit's own (its root is named by it and the version;
        a staged view of a transaction's earlier operations is not)."""
        new_base = with_metadata(base, change)
        cfg = TreeConfig.of(new_base)
        with require_live(change.operation):
            result = apply_change(
                self.log.io,
                base.root_manifest,
                manifest_schema_of(new_base),
                version,
                change.added,
                change.removed,
                cfg,
                base.root_inline,
                root_path=None if commit_id is None else commit_root_path(commit_id, version, cfg.arrow_root),
            )
        return new_base.next(root_manifest=result.root_path, root_inline=result.root_inline), result

    def _prepare(self, base: VersionManifest, ops: Sequence[Operation], commit_id: str) -> VersionManifest | None:
        changes, next_row_id = self._changes(base, ops)
        if all(op.skip_if_noop for op in ops) and all(c.is_empty for c in changes):
            return None
        change = combine(changes, base.version)
        if change.tree is not None:
            return self._take_tree(base, change, commit_id)
        changed = with_metadata(base, change)
        _, result = self._apply_tree(base, change, base.version + 1, commit_id)
        step("manifests-written")
        summary = {
            "added-files": result.files_added,
            "removed-files": result.files_removed,
            "added-records": result.rows_added,
            "removed-records": result.rows_removed,
            "total-files": int(base.summary.get("total-files", 0)) + result.files_added - result.files_removed,
            "total-records": int(base.summary.get("total-records", 0)) + result.rows_added - result.rows_removed,
            "leaves-written": result.leaves_written,
            "leaves-carried": result.leaves_carried,
        }
        summary.update(change.summary)
        apps = dict(base.app_transactions)
        if change.app_transactions:
            apps.update(change.app_transactions)
        vm = _successor(
            base,
            changed,
            change,
            commit_id,
            summary,
            next_row_id=next_row_id,
            root_manifest=result.root_path,
            root_inline=result.root_inline,
            app_transactions=apps,
            last_readd_version=base.version + 1 if change.readds else base.last_readd_version,
            # Tables created before slot records gain the features with their next commit.
            reader_features=changed.reader_features,
            writer_features=with_features(changed.writer_features, SLOT_TOMBSTONES, SLOT_RANGE_RECORDS),
        )
        return vm

    def _take_tree(self, base: VersionManifest, change: Change, commit_id: str) -> VersionManifest:
        """The next version with ``change.tree``'s content as it is: metadata only (a branch
        published by fast-forward). The tree's manifests record another log's version numbers,
        so the version is flagged as re-adding files: expiry then decides about files by the
        full walk rather than by the recorded intervals."""
        tree = change.tree
        assert tree is not None
        summary = {k: v for k, v in tree.summary.items() if k in ("total-files", "total-records")}
        summary.update(change.summary)
        return _successor(
            base,
            tree,
            change,
            commit_id,
            summary,
            next_row_id=tree.next_row_id,
            root_manifest=tree.root_manifest,
            root_inline=tree.root_inline,
            app_transactions={**base.app_transactions, **tree.app_transactions, **(change.app_transactions or {})},
            last_readd_version=base.version + 1,
            reader_features=tree.reader_features,
            writer_features=with_features(
                tree.writer_features, SLOT_TOMBSTONES, SLOT_RANGE_RECORDS, *base.writer_features
            ),
        )

    def _publish(
        self,
        vm: VersionManifest,
        commit_id: str,
        options: CommitOptions,
        base_properties: Mapping[str, str],
    ) -> VersionManifest | object:
        """The committed manifest; _LOST if another commit holds the slot; _WITHDRAWN if our put
        landed in a slot that had been freed (so it is not part of the table) and was taken back.
        Whether the slot could have been freed is judged by the retention of the base
        (``base_properties``), not of ``vm``: an expiry that freed the slot went by a version
        after the base, whose retention is at least the base's (it is never lowered) but not
        ``vm``'s own, when ``vm`` raises it.

        An outcome where our manifest is in the slot -- the put succeeded, or it was read back
        after an unknown outcome -- is acknowledged only once the slot is known never to have
        been freed before it landed: however long the put was delayed, a version is committed
        only as the first occupant of its slot, which makes it the successor of its base.
        """
        for _ in range(options.resolve_attempts):
            try:
                step("before-publish")
                self.coordinator.publish(vm)
                landed = True
            except AlreadyExists:
                landed = False
            except StorageError as e:
                log.warning("commit of version %d has an unknown outcome (%s); resolving by commit id", vm.version, e)
                landed = False
            if not landed:  # taken, or unknown: read the slot back
                try:
                    there = self.log.read_slot(vm.version)
                except StorageError as e:
                    log.warning("could not read version %d back: %s", vm.version, e)
                    continue
                if there is None:
                    continue  # the put did not land (or the slot was freed meanwhile): put again
                if isinstance(there, Tombstone) or there.commit_id != commit_id:
                    return _LOST
            if self.log.slot_cannot_have_been_freed(vm.version, base_properties):
                self.log.confirm(vm)
                return vm
            try:
                record = self.log.slot_record(vm.version, slot_chunk_size(vm.properties))
            except StorageError as e:
                log.warning("could not check whether slot %d was freed: %s", vm.version, e)
                continue  # the put again: it is ours or taken, and the check runs again
            # A record naming our commit: our put was the slot's first occupant, and its version
            # was expired since (we stalled that long before this check); it is committed.
            if record is None or record.names(vm.version, commit_id):
                self.log.confirm(vm)  # a branch deleted meanwhile: withdrawn, and raises
                return vm
            log.warning(
                "version %d of %s landed in a slot freed after its version expired (the put was delayed); "
                "withdrawing it and rebasing",
                vm.version,
                self.log.io.uri,
            )
            self._withdraw(vm)
            return _WITHDRAWN
        raise CommitStateUnknown(
            f"could not tell whether commit {commit_id} landed as version {vm.version} of {self.log.io.uri}: "
            "the store kept failing. Check `lamina history` for this commit id before retrying."
        )

    def _withdraw(self, vm: VersionManifest) -> None:
        """Delete our put from a freed slot (best effort: expiry deletes any it finds, and no
        reader takes a file in a freed chunk for a version)."""
        try:
            self.log.io.delete(self.log.version_path(vm.version))
        except StorageError as e:
            log.warning("could not withdraw version file %d: %s", vm.version, e)


def _successor(
    base: VersionManifest,
    content: VersionManifest,
    change: Change,
    commit_id: str,
    summary: dict,
    **fields: object,
) -> VersionManifest:
    """Version ``base.version + 1`` made by ``change``, with ``content``'s schema, partition
    specs, sort order and properties, and ``fields``."""
    return base.next(
        version=base.version + 1,
        parent_version=base.version,
        # Monotonic along versions whatever the writer's clock says, so time
        # travel can binary-search version numbers.
        timestamp_ms=max(int(time.time() * 1000), base.timestamp_ms + 1),
        operation=change.operation,
        summary=summary,
        schema=content.schema,
        partition_spec=content.partition_spec,
        partition_specs=content.partition_specs,
        sort_order=content.sort_order,
        properties=content.properties,
        commit_id=commit_id,
        block_commits=next_block_commits(base),
        **fields,
    )


_LOST = object()
_WITHDRAWN = object()


def with_metadata(base: VersionManifest, change: Change) -> VersionManifest:
    """``base`` with the schema, partition spec, sort order and properties ``change`` sets
    (itself if none). A new partition spec joins the table's list of specs (files written
    under the earlier ones keep theirs), and the features say what a writer must keep (the
    spec list, the sort order) and what readers and writers must do (map evolved columns)."""
    # A file the table does not own needs readers that open it and writers that never delete it.
    external = (
        EXTERNAL_FILES not in base.reader_features and has_external(change.added.column("path"))
        if change.added.num_rows
        else False
    )
    if (
        change.schema is None
        and change.partition_spec is None
        and change.sort_order is None
        and change.properties is None
        and not change.writer_features
        and not external
    ):
        return base
    spec = change.partition_spec or base.partition_spec
    specs = base.all_partition_specs
    if spec not in specs:
        specs = (*specs, spec)
    sort_order = change.sort_order if change.sort_order is not None else base.sort_order
    features = [PARTITION_EVOLUTION] if len(specs) > 1 else []
    features += [SORT_ORDERS] if sort_order is not None else []
    partitioned = [HIDDEN_PARTITIONING] if not spec.is_unpartitioned else []
    schema = change.schema or base.schema
    # A schema whose file columns must be mapped needs readers and writers that map them.
    partitioned += [COLUMN_MAPPING] if schema.is_evolved else []
    partitioned += [EXTERNAL_FILES] if external else []
    return base.next(
        reader_features=with_features(base.reader_features, *partitioned),
        schema=schema,
        partition_spec=spec,
        partition_specs=specs if len(specs) > 1 else (),
        sort_order=sort_order,
        properties=change.properties if change.properties is not None else base.properties,
        writer_features=with_features(base.writer_features, *partitioned, *features, *change.writer_features),
    )
