"""Orphan cleanup: files the table owns (under ``data/`` and ``_lamina/``) that nothing references.

Orphans are what failed or crashed writers leave (data files and manifests
of commits that never landed) and what a crashed expiry did not finish. A
file is deleted only if (1) no existing version, no tag and no version a SQL
catalog committed but has not yet published references it, and it is no table
metadata (version slots are, except slot files inside freed chunks),
(2) it is older than ``older_than`` (default 3 days; at least the longest a
writer may take between writing a file and committing it), and (3) its path
carries no write id registered as in flight (``lamina.data.inflight``), so a
job that runs for days keeps its files whatever their age (iceberg #4194).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.branches import BranchStore
from lamina.commit.log import VersionLog
from lamina.data.inflight import live_write_ids, written_by
from lamina.errors import InvalidArgument
from lamina.iceberg import gc as iceberg_gc
from lamina.iceberg.gc import is_view_file
from lamina.io import FileIO, ObjectInfo
from lamina.maintenance.expire.versions import to_ms
from lamina.maintenance.reachability import referenced_paths
from lamina.maintenance.reports import short_repr
from lamina.spec.features import check_writer
from lamina.spec.layout import (
    BRANCH_LOGS_DIR,
    BRANCHES_DIR,
    DATA_DIR,
    HINT_PATH,
    META_DIR,
    PENDING_DIR,
    TAGS_DIR,
    VERSIONS_DIR,
    WRITES_DIR,
    parse_pending_name,
    version_path,
)
from lamina.spec.slot import FREED_DIR
from lamina.spec.version import VersionManifest
from lamina.timeutil import now_ms

DEFAULT_ORPHAN_AGE = timedelta(days=3)
MIN_ORPHAN_AGE = timedelta(days=1)
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-orphans")

# Metadata that is never an orphan: it is what says what is referenced.
_PROTECTED_PREFIXES = (f"{VERSIONS_DIR}/", f"{TAGS_DIR}/", f"{WRITES_DIR}/", f"{FREED_DIR}/")


@dataclass
class OrphanReport:
    dry_run: bool
    scanned: int = 0
    orphans: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    kept_young: int = 0  # unreferenced but younger than older_than
    kept_in_flight: int = 0  # unreferenced, carrying the id of a write still in flight
    seconds: float = 0.0

    __repr__ = short_repr


def remove_orphans(
    io: FileIO,
    log: VersionLog,
    older_than: Any = DEFAULT_ORPHAN_AGE,
    *,
    dry_run: bool = False,
    allow_short_age: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> OrphanReport:
    started = time.monotonic()
    # The guard holds whatever form the age or time takes (timedelta, datetime, ISO string,
    # epoch ms): a cutoff later than now - MIN_ORPHAN_AGE reaches files of writes in flight.
    cutoff_ms = to_ms(older_than, "older_than")
    min_age_ms = int(MIN_ORPHAN_AGE.total_seconds() * 1000)
    if cutoff_ms > now_ms() - min_age_ms and not allow_short_age:
        raise InvalidArgument(
            f"older_than={older_than!r} is shorter than the minimum age of {MIN_ORPHAN_AGE} (it reaches files "
            "written since then): a writer still running could lose files it has written but not yet "
            "committed. Pass an older time, or allow_short_age=True if no writer is running."
        )
    # Through a catalog, this also publishes a version its writer committed but stopped
    # before publishing; by path, such staged versions count as referenced (kept_versions).
    latest = log.latest()
    check_writer(latest.writer_features, f"table {io.uri}")
    report = OrphanReport(dry_run)
    # List first: a file written after this listing is not considered at all, and one
    # listed here but committed later is younger than the cutoff (or in flight).
    _, listed = list_table(io, log, latest)
    report.scanned = len(listed)
    in_flight = live_write_ids(io)
    referenced = referenced_paths(io, log, progress)
    if not listed:
        _view_garbage(io, cutoff_ms, dry_run, report)
        report.seconds = time.monotonic() - started
        return report
    paths = pa.array([o.path for o in listed], pa.string())
    modified = pa.array([int(o.last_modified.timestamp() * 1000) for o in listed], pa.int64())
    sizes = pa.array([o.size for o in listed], pa.int64())
    unreferenced = (
        pc.invert(pc.is_in(paths, value_set=referenced)) if len(referenced) else pa.array([True] * len(paths))
    )
    flight = written_by(paths, in_flight)
    young = pc.greater(modified, cutoff_ms)
    report.kept_in_flight = int(pc.sum(pc.and_(unreferenced, flight)).as_py() or 0)
    report.kept_young = int(pc.sum(pc.and_(pc.and_(unreferenced, pc.invert(flight)), young)).as_py() or 0)
    doomed = pc.and_(unreferenced, pc.and_(pc.invert(flight), pc.invert(young)))
    report.orphans = paths.filter(doomed).to_pylist()
    report.deleted_bytes = int(pc.sum(sizes.filter(doomed)).as_py() or 0)
    if not dry_run and report.orphans:
        step = progress or (lambda *_: None)
        for i in range(0, len(report.orphans), 1000):
            io.delete_many(report.orphans[i : i + 1000])
            step("delete", min(i + 1000, len(report.orphans)), len(report.orphans))
    _view_garbage(io, cutoff_ms, dry_run, report)
    report.seconds = time.monotonic() - started
    return report


def list_table(io: FileIO, log: VersionLog, latest: VersionManifest) -> tuple[list[ObjectInfo], list[ObjectInfo]]:
    """Every object under the table, and those of them that are orphans unless a kept version
    references them (they are no table metadata, or slot files expiry may free)."""
    # Slot files in recorded ranges are no version: an expired version's file, a tombstone an
    # interrupted expiry did not delete after writing its chunk's record, or a late put its
    # writer withdraws. fsck calls them unreferenced and expiry deletes them once their record
    # is older than the slot retention (a writer that saw the slot empty within it skips the
    # record check: lamina.commit.log.VersionLog.slot_cannot_have_been_freed); so does orphan
    # cleanup, after the same age check as any orphan (else they stay until the next expiry,
    # on a table that may get none).
    strays = {version_path(v) for v in log.scan_slots().freeable_strays(now_ms(), latest.properties)}
    # Only what the table owns is listed: files beside data/ and _lamina/ (a table adopted in
    # place, another format's log) are no table's, neither orphans nor its storage.
    walked = [o for prefix in (DATA_DIR, META_DIR) for o in io.walk(prefix)]
    # Branch records are read after the listing: a branch's log files are written after its
    # record, so every log file listed belongs to a branch read here, or to a deleted one.
    live_branches = {r.branch_id for r in BranchStore(io).list()}
    return walked, [o for o in walked if o.path in strays or _may_be_orphan(o.path, latest.version, live_branches)]


def _view_garbage(io: FileIO, cutoff_ms: int, dry_run: bool, report: OrphanReport) -> None:
    """The Iceberg view's files that its newest metadata no longer needs, older than the
    cutoff (lamina.iceberg.gc: never one a kept snapshot references)."""
    garbage = iceberg_gc.collect(io, older_than_ms=max(0, now_ms() - cutoff_ms), dry_run=dry_run)
    report.orphans += garbage.files
    report.deleted_bytes += garbage.bytes


def _may_be_orphan(path: str, latest: int, live_branches: set[str]) -> bool:
    """Metadata that says what is referenced is never an orphan; a manifest staged by the
    SQL catalog for a version already published (or lost) is one, and so is anything a
    deleted branch's log holds but its deletion marker (which stays, so a put delayed past
    the deletion is refused)."""
    if path == HINT_PATH or path.startswith(f"{BRANCHES_DIR}/") or is_view_file(path):
        return False  # (the Iceberg view's files: its own collection decides, below)
    if path.startswith(f"{BRANCH_LOGS_DIR}/"):
        branch_id, slash, _ = path[len(BRANCH_LOGS_DIR) + 1 :].partition("/")
        return bool(slash) and branch_id not in live_branches  # a marker (no slash) stays
    if path.startswith(f"{PENDING_DIR}/"):
        v = parse_pending_name(path[len(PENDING_DIR) + 1 :])
        return v is not None and v <= latest
    return not path.startswith(_PROTECTED_PREFIXES)
