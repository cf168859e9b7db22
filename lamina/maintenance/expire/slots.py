"""Expired slots kept taken, then freed: the range records that expire a run's slots (naming
each slot's commit, so a delayed put finds its slot occupied), and, once a record is older
than ``expire.slot-retention-ms``, the slot files deleted. Tables without range records get
a tombstone per slot (``lamina.maintenance.expire.versions``) and chunks freed whole
(``free_slots``).
"""

from __future__ import annotations

from collections.abc import Sequence

from lamina.commit.log import VersionLog
from lamina.commit.slots import RecordRef, SlotListing
from lamina.errors import AlreadyExists
from lamina.io import FileIO
from lamina.maintenance.expire.reads import _Run
from lamina.maintenance.expire.report import ExpireReport
from lamina.spec.features import SLOT_TOMBSTONES
from lamina.spec.properties import TableProperties
from lamina.spec.slot import SlotRecord, chunk_range, range_record_name, records_dir, slot_chunk_size
from lamina.spec.version import VersionManifest


def range_records(run: _Run, slots: SlotListing, survivor: int, now: int) -> list[tuple[RecordRef, SlotRecord]]:
    """The range records that expire every slot below ``survivor`` not yet recorded: its
    version's first occupant, a tombstone's commit, or None for a hole (nothing there,
    nothing committed there: no delayed put may land as a version). One per run of
    unrecorded slots within a chunk."""
    expired = [v for v in run.versions if v < survivor]
    run.learn_blocks(expired, survivor)
    live = set(expired)
    low = min([*expired, *(v for v in slots.tombstones if v < survivor and not slots.recorded(v))], default=survivor)
    size = slot_chunk_size(run.full(survivor).properties)
    out: list[tuple[RecordRef, SlotRecord]] = []
    chunk_run: list[int] = []

    def flush() -> None:
        if chunk_run:
            ids = tuple(
                run.who[v][0] if v in live else (slots.tombstones[v].commit_id if v in slots.tombstones else None)
                for v in chunk_run
            )
            first, last = chunk_run[0], chunk_run[-1]
            path = f"{records_dir(run.log.layout.freed_dir, *chunk_range(first, size))}/{range_record_name(first, last, now)}"
            out.append((RecordRef(path, first, last, now, False), SlotRecord(first, last, ids, now)))
            chunk_run.clear()

    for v in range(low, survivor):
        if slots.recorded(v) or (chunk_run and chunk_range(v, size) != chunk_range(chunk_run[0], size)):
            flush()
        if not slots.recorded(v):
            chunk_run.append(v)
    flush()
    return out


def free_slots(
    io: FileIO, log: VersionLog, latest: VersionManifest, slots: SlotListing, below: int, now: int, dry_run: bool
) -> int:
    """Free every chunk of slots lying wholly below version ``below`` whose slots all hold
    tombstones older than the slot retention (or nothing: holes a pre-tombstone expiry left).
    Each chunk's record goes first, then its files; slot files already inside freed chunks
    (late puts their writers did not withdraw) go too. Returns the slot files deleted."""
    size = slot_chunk_size(latest.properties)
    retention = TableProperties.EXPIRE_SLOT_RETENTION_MS.get(latest.properties)
    old_enough = now - retention
    freed = {first for first, _ in slots.freed}
    live = set(slots.versions).difference(slots.tombstones)  # versions just expired are tombstones now
    chunks = sorted({chunk_range(v, size) for v in live.union(slots.tombstones) if v < below})
    doomed: list[str] = [log.version_path(v) for v in slots.strays]
    for first, last in chunks:
        if first in freed or last >= below:
            continue
        stones = [slots.tombstones.get(v) for v in range(first, last + 1)]
        if any(v in live for v in range(first, last + 1)):
            continue  # a slot that is no tombstone (a damaged file): fsck reports it, nothing is freed
        if any(t is not None and t.at_ms is not None and t.at_ms > old_enough for t in stones):
            continue  # expired too recently
        record = SlotRecord(first, last, tuple(None if t is None else t.commit_id for t in stones), now, emptied=True)
        if not dry_run:
            try:
                io.put_new(log.layout.freed_path(first, last), record.to_json())
            except AlreadyExists:
                log.slot_record(first, size)  # a concurrent expiry freed it: its record must parse
        doomed += [log.version_path(v) for v in range(first, last + 1) if v in slots.tombstones]
    if not dry_run and doomed:
        io.delete_many(doomed)
    return len(doomed)


def free_run_slots(
    io: FileIO,
    log: VersionLog,
    latest: VersionManifest,
    slots: SlotListing,
    survivors: Sequence[int],
    now: int,
    ranged: bool,
    dry_run: bool,
    report: ExpireReport,
) -> None:
    """Step 5 of an expiry run: the slot files of records old enough (``ranged``: the table
    has range records), or, on older tables, chunks of old tombstones below every retained
    version (record, then free)."""
    if ranged:
        doomed = [log.version_path(v) for v in slots.freeable_strays(now, latest.properties)]
        if doomed and not dry_run:
            io.delete_many(doomed)
        report.freed_slots = len(doomed)
    elif SLOT_TOMBSTONES in latest.writer_features and survivors:
        report.freed_slots = free_slots(io, log, latest, slots, survivors[0], now, dry_run)
