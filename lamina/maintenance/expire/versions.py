"""``expire_versions``: which versions expire (older than the cutoff, beyond ``retain_last``,
superseded for the reader grace), and the run's steps in their order (the package's
docstring says why this order): expired tags, the versions retired, the files only they
needed, deleted branches, the slots. And the destructive rollback (``drop_versions_after``),
which drops the versions after its target.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from lamina.commit.log import VersionLog
from lamina.commit.slots import SlotListing
from lamina.commit.tags import TagStore
from lamina.errors import InvalidArgument
from lamina.io import FileIO
from lamina.maintenance.expire.files import _delete, _Garbage, _spare, collect_garbage, free_files, prepare
from lamina.maintenance.expire.reads import _each, _load_many, _Run
from lamina.maintenance.expire.report import ExpireReport, Progress
from lamina.maintenance.expire.slots import free_run_slots, range_records
from lamina.maintenance.expire.tags import expire_tags, free_branches
from lamina.spec.features import SLOT_RANGE_RECORDS, check_writer
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.properties import TableProperties
from lamina.spec.slot import Tombstone
from lamina.spec.version import VersionManifest
from lamina.timeutil import duration_ms, epoch_ms, now_ms

DEFAULT_OLDER_THAN = timedelta(days=5)


def to_ms(t: Any, what: str) -> int:
    """A point in time, or an age (timedelta before now)."""
    return epoch_ms(t, what, timedelta_sign=-1)


def expire_versions(
    io: FileIO,
    log: VersionLog,
    *,
    older_than: Any = None,
    retain_last: int | None = None,
    reader_grace: Any = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    slots: SlotListing | None = None,
) -> ExpireReport:
    """Delete versions no longer needed, and every file only they needed.

    A version goes when (a) it is older than ``older_than`` -- it stopped being
    current before that time, so time travel to any instant after it still
    works -- and (b) it is not among the ``retain_last`` newest versions, and
    (c) its successor has been current for ``reader_grace``. Neither given:
    older than 5 days. Tags past their ``expires_at`` are deleted first.

    ``slots``: for a dry run only, the log's ``scan_slots()`` as the caller just made it
    (the explorer's preview shares its listing); not changed here. A real run lists itself.
    """
    started = time.monotonic()
    if slots is not None and not dry_run:
        raise InvalidArgument(
            "expire_versions takes a listing (slots) only for a dry run: a real run lists the log itself"
        )
    report = ExpireReport(dry_run)
    step = progress or (lambda *_: None)
    if retain_last is not None and (
        isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1
    ):
        raise InvalidArgument(
            f"retain_last must be an int >= 1 (the latest version is always kept), not {retain_last!r}"
        )
    latest = log.latest()
    check_writer(latest.writer_features, f"table {io.uri}")
    if older_than is None and retain_last is None:
        older_than = DEFAULT_OLDER_THAN
    cutoff = to_ms(older_than, "older_than") if older_than is not None else None
    grace_ms = (
        duration_ms(reader_grace, "reader_grace")
        if reader_grace is not None
        else TableProperties.EXPIRE_READER_GRACE_MS.get(latest.properties)
    )
    now = now_ms()
    floor = now - grace_ms
    store = TagStore(io, log)

    # 0. tags past their expiry time. A dry run deletes none, so from here on it leaves
    #    them out by name (``gone_tags``) wherever the real run would no longer find them.
    #    (A real run must not: a tag re-created under the name meanwhile is honoured.)
    expire_tags(io, log, store, now, dry_run, report)
    gone_tags = set(report.expired_tags) if dry_run else set()

    if slots is None:
        slots = log.scan_slots()
    else:  # the caller's, which the steps below must not change
        slots = SlotListing(
            slots.versions, dict(slots.tombstones), list(slots.strays), list(slots.freed), list(slots.records)
        )
    versions = slots.versions
    run = _Run(io, log, versions)
    expired, survivors = _choose(run, versions, cutoff, floor, grace_ms, retain_last, report, step)
    ranged = SLOT_RANGE_RECORDS in latest.writer_features
    if expired:
        prepared = prepare(run, expired, survivors[0])
        # 1. the versions stop being versions, oldest first, so the remaining ones stay
        #    contiguous: one range record per chunk (tables with range records), else a
        #    tombstone in each slot
        _retire(run, slots, expired, survivors[0], now, ranged, dry_run)
        step("versions", len(expired), len(expired))
        # 2. what is still needed, seen after the versions are gone; 3. the files
        tags = [t for t in store.list() if t.name not in gone_tags]
        latest = log.latest()
        free_files(run, prepared, expired, survivors, tags, latest, gone_tags, dry_run, report, step)
    # 4. branches deleted more than the reader grace ago: what only they held (main's run)
    if log.branch == MAIN_BRANCH:
        free_branches(io, log, floor, dry_run, expired, gone_tags, report)
    # 5. slots freed: the slot files of records old enough (or, on older tables, chunks of
    #    old tombstones below every retained version: record, then free)
    free_run_slots(io, log, latest, slots, survivors, now, ranged, dry_run, report)
    report.seconds = time.monotonic() - started
    return report


def _choose(
    run: _Run,
    versions: Sequence[int],
    cutoff: int | None,
    floor: int,
    grace_ms: int,
    retain_last: int | None,
    report: ExpireReport,
    step: Progress,
) -> tuple[list[int], list[int]]:
    """(the versions that expire, those that survive), oldest first, and in ``report`` why the
    others before the latest are kept."""
    candidates = versions[: max(0, len(versions) - (retain_last or 1))]
    step("plan", 0, len(candidates))
    # Versions expire oldest first while their successor was committed by the limit; commit
    # times rise along versions, so the last one to go is found by a binary search, one for
    # each bound (the first read, of the newest candidate's successor, serves both).
    by_age = len(candidates) if cutoff is None else run.expirable(len(candidates), cutoff)
    n = min(by_age, run.expirable(len(candidates), floor))
    report.cutoff_ms, report.reader_grace_ms, report.retain_last = cutoff, grace_ms, retain_last
    report.kept_by_retain_last = max(0, len(versions) - 1 - len(candidates))
    report.kept_by_age = len(candidates) - by_age
    report.kept_by_reader_grace = by_age - n
    report.held_by_reader_grace = report.kept_by_reader_grace > 0
    expired = list(versions[:n])
    survivors = list(versions[n:])
    step("plan", n, len(candidates))
    report.expired_versions = expired
    report.earliest_retained = survivors[0] if survivors else None
    return expired, survivors


def _retire(
    run: _Run, slots: SlotListing, expired: Sequence[int], survivor: int, now: int, ranged: bool, dry_run: bool
) -> None:
    """Step 1: ``expired`` stop being versions, oldest first, so the remaining ones stay
    contiguous: one range record per chunk (``ranged``: tables with range records), else a
    tombstone in each slot; ``slots`` updated to what the log now holds."""
    io, log = run.io, run.log
    if ranged:
        records = range_records(run, slots, survivor, now)
        if not dry_run:
            for ref, rec in records:
                io.put_new(ref.path, rec.to_json())
        slots.records.extend(ref for ref, _ in records)
        slots.freed.extend((ref.first, ref.last) for ref, _ in records)
        # the slot files now in recorded ranges: freed once their record is old enough
        recorded = [v for v in [*expired, *slots.tombstones] if slots.recorded(v)]
        slots.strays[:] = sorted({*slots.strays, *recorded})
        for v in recorded:
            slots.tombstones.pop(v, None)
    else:
        stones = {v: Tombstone(v, run.light(v_i).commit_id, "expired", now) for v_i, v in enumerate(expired)}
        if not dry_run:
            for i in range(0, len(expired), 64):
                _put_tombstones(io, log, [stones[v] for v in expired[i : i + 64]])
        slots.tombstones.update(stones)


def _put_tombstones(io: FileIO, log: VersionLog, stones: list[Tombstone]) -> None:
    """Overwrite each version's slot with its tombstone (in any order: the slot stays taken)."""
    _each(io, lambda t: io.put(log.version_path(t.version), t.to_json()), stones)


def drop_versions_after(io: FileIO, log: VersionLog, target: VersionManifest, rollback: VersionManifest) -> _Garbage:
    """Destructive rollback (Paimon's behaviour): after ``rollback`` (whose content
    equals ``target``) has committed, delete the versions between them and every
    file only those versions needed. Tags on them are kept, and so are their files."""
    # Versions, not a range: an earlier destructive rollback left tombstones in the run.
    between = [v for v in log.list_versions() if target.version < v < rollback.version]
    chain = [target] + _load_many(log, between) + [rollback]
    # Each dropped version becomes a tombstone rather than vanishing: its name stays taken,
    # so no writer whose base was in the run can put-if-absent into it (a fork), and a probe
    # forward from an old hint walks across the run to the rollback. Expiry frees the slots
    # with the rest of their chunk once they lie below every retained version.
    now = now_ms()
    _put_tombstones(
        io, log, [Tombstone(vm.version, vm.commit_id, "rollback", now, rollback.version) for vm in chain[1:-1]]
    )
    existing = log.list_versions()
    tags = TagStore(io, log).list()
    latest = log.latest()
    g = _spare(io, log, latest, collect_garbage(io, log, chain, set(between), tags, existing, latest))
    freed = _delete(io, g.files) + _delete(io, g.manifests)
    return _Garbage(g.manifests, g.files, freed, g.kept)
