"""Orphan cleanup: files under the table that nothing references.

Orphans are what failed or crashed writers leave (data files and manifests
of commits that never landed) and what a crashed expiry did not finish. A
file is deleted only if (1) no existing version and no tag references it,
(2) it is older than ``older_than`` (default 3 days; at least the longest a
writer may take between writing a file and committing it), and (3) its path
carries no write id registered as in flight (``lamina.table.inflight``), so a
job that runs for days keeps its files whatever their age (iceberg #4194).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.log import VersionLog
from lamina.errors import InvalidArgument
from lamina.io import FileIO
from lamina.maintenance.expire import to_ms
from lamina.maintenance.reachability import referenced_paths
from lamina.spec.layout import HINT_PATH, TAGS_DIR, VERSIONS_DIR, WRITES_DIR
from lamina.table.inflight import live_write_ids, written_by

DEFAULT_ORPHAN_AGE = timedelta(days=3)
MIN_ORPHAN_AGE = timedelta(days=1)
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-orphans")

# Metadata that is never an orphan: it is what says what is referenced.
_PROTECTED_PREFIXES = (f"{VERSIONS_DIR}/", f"{TAGS_DIR}/", f"{WRITES_DIR}/")


@dataclass
class OrphanReport:
    dry_run: bool
    scanned: int = 0
    orphans: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    kept_young: int = 0  # unreferenced but younger than older_than
    kept_in_flight: int = 0  # unreferenced, carrying the id of a write still in flight
    seconds: float = 0.0


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
    if isinstance(older_than, timedelta) and older_than < MIN_ORPHAN_AGE and not allow_short_age:
        raise InvalidArgument(
            f"older_than={older_than} is shorter than {MIN_ORPHAN_AGE}: a writer still running could lose "
            "files it has written but not yet committed. Pass allow_short_age=True if no writer is running."
        )
    cutoff_ms = to_ms(older_than, "older_than")
    report = OrphanReport(dry_run)
    # List first: a file written after this listing is not considered at all, and one
    # listed here but committed later is younger than the cutoff (or in flight).
    listed = [o for o in io.walk() if o.path != HINT_PATH and not o.path.startswith(_PROTECTED_PREFIXES)]
    report.scanned = len(listed)
    in_flight = live_write_ids(io)
    referenced = referenced_paths(io, log, progress)
    if not listed:
        report.seconds = time.monotonic() - started
        return report
    paths = pa.array([o.path for o in listed], pa.string())
    modified = pa.array([int(o.last_modified.timestamp() * 1000) for o in listed], pa.int64())
    sizes = pa.array([o.size for o in listed], pa.int64())
    unreferenced = pc.invert(pc.is_in(paths, value_set=referenced)) if len(referenced) else pa.array([True] * len(paths))
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
    report.seconds = time.monotonic() - started
    return report
