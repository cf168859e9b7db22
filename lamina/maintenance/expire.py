"""Version expiry and garbage collection that never frees what a tag or a retained version needs.

The rule. A data file's manifests record the one
interval ``[added_version, removed_version)`` in which it is live. After some
versions are deleted, a file is still needed iff some *kept point* -- an
existing version or a tag's version -- lies in its interval. Candidates are
only files whose removal was recorded by a version next to a deleted one, so
deciding costs what changed (the roots and the leaves those versions wrote),
not a walk over every tag's or version's full file list. The one case the
interval cannot describe -- a rollback re-adding a file an earlier version
removed, so the file has several intervals, some recorded only by versions
already deleted -- is flagged in the version manifest
(``last_readd_version``); on such a table the candidates are checked against
the full walk of every surviving version and tag instead (exact, slower).

Manifests are carried only from a version's parent, so the versions whose
roots reference one manifest form a contiguous run: a manifest referenced by
a deleted root is free unless the nearest surviving root on either side, or a
tag, references it.

Ordering, so that concurrent work stays safe:
1. the versions are recorded as expired first (oldest first), so nobody can
   open an expired version any more;
2. then tags are listed and the latest version re-read, so a tag created or a
   rollback committed during the run is honoured (``TagStore.create`` and
   rollback confirm their source version still exists after writing);
3. then manifests and data files go.

Reader safety: a version is expired only once its successor has been current
for ``reader_grace`` (default one hour, property ``expire.reader-grace-ms``):
a reader that opened it while it was current has had that long to finish.

Writer safety (slot reuse): expiry first writes one range record per chunk of
slots it expires, naming the commit each slot held; the expired versions' files
stay, so their names stay taken and a writer whose put-if-absent was delayed finds
the slot occupied and rebases. Once a record is older than
``expire.slot-retention-ms`` the slot files in its range are deleted (freed). A
put that lands in a freed slot is withdrawn by its own writer, which looks the
records up after every landing (lamina.spec.slot, docs/format.md). Tables
without the feature ``slot-range-records`` get a tombstone per expired slot and
chunks freed whole, as before.

What a run reads (one GET each on S3): the versions its decisions need, not every
version it expires (``_Run``).
"""

from __future__ import annotations

import bisect
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.log import RecordRef, SlotListing, VersionLog
from lamina.errors import AlreadyExists, CorruptMetadata, InvalidArgument, NotFound
from lamina.io import FileIO
from lamina.manifest.tree import TreeConfig
from lamina.maintenance.reports import short_repr
from lamina.maintenance.reachability import (
    leaf_paths,
    live_entries,
    manifest_paths,
    other_branches,
    paths_of,
    referenced_files,
    referenced_paths,
    removed_by,
    root_of,
    staged_versions,
)
from lamina.spec.features import BRANCHES, SLOT_RANGE_RECORDS, SLOT_TOMBSTONES, check_writer
from lamina.spec.layout import INLINE_ROOT_SUFFIX, MAIN_BRANCH, MANIFESTS_DIR, owned
from lamina.spec.properties import TableProperties
from lamina.spec.slot import (
    COMMIT_BLOCK,
    IRREGULAR,
    REMOVED,
    WROTE_LEAVES,
    SlotRecord,
    Tombstone,
    block_flags,
    block_start,
    chunk_range,
    commit_root_path,
    parse_block_entry,
    range_record_name,
    records_dir,
    short_id,
    slot_chunk_size,
)
from lamina.spec.tag import Tag
from lamina.spec.version import VersionManifest
from lamina.commit.tags import TagStore
from lamina.timeutil import duration_ms, epoch_ms, now_ms

DEFAULT_OLDER_THAN = timedelta(days=5)
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-expire")

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class ExpireReport:
    dry_run: bool
    expired_versions: list[int] = field(default_factory=list)
    earliest_retained: int | None = None
    expired_tags: list[str] = field(default_factory=list)
    deleted_manifests: list[str] = field(default_factory=list)
    deleted_files: list[str] = field(default_factory=list)  # data and deletion-vector files
    deleted_bytes: int = 0
    kept_for_tags: int = 0  # candidate data files kept because a tag or retained version needs them
    # True when versions older_than/retain_last would expire were kept because they were
    # superseded less than reader_grace ago (pass reader_grace=timedelta(0) if no reader runs)
    held_by_reader_grace: bool = False
    # Why the versions before the latest that did not expire were kept, each counted once, by
    # the first rule that keeps it: among the ``retain_last`` newest; superseded after the
    # ``older_than`` cutoff (younger than the retention); superseded less than the reader
    # grace ago. With the rules the run applied: the cutoff (epoch ms, None when only
    # ``retain_last`` was given), the grace and ``retain_last``.
    kept_by_retain_last: int = 0
    kept_by_age: int = 0
    kept_by_reader_grace: int = 0
    cutoff_ms: int | None = None
    reader_grace_ms: int = 0
    retain_last: int | None = None
    freed_slots: int = 0  # slot files deleted: their record is older than the slot retention
    branches: dict[str, "ExpireReport"] = field(default_factory=dict)  # each branch's, when main expired them too
    seconds: float = 0.0

    __repr__ = short_repr

    @property
    def deleted_version_files(self) -> int:
        return len(self.expired_versions)


def to_ms(t: Any, what: str) -> int:
    """A point in time, or an age (timedelta before now)."""
    return epoch_ms(t, what, timedelta_sign=-1)


class _LightVersion:
    """What expiry reads of a version it may delete: its JSON, parsed lazily. Building a
    full VersionManifest (schema, partition spec) for each of a thousand versions costs
    more than deciding about them; only the few whose roots are opened need one."""

    def __init__(self, version: int, j: dict[str, Any], raw: bytes, where: str) -> None:
        self._where = where
        self.version = version
        self.timestamp_ms = int(j["timestamp_ms"])
        self.parent_version = j.get("parent_version")
        self.commit_id = j.get("commit_id")
        self.root_manifest = j.get("root_manifest")
        self.summary = j.get("summary") or {}
        blocks = j.get("block_commits")
        self.block_commits = tuple(blocks) if isinstance(blocks, list) else None
        self._raw = raw  # the version file may be a tombstone before the full manifest is needed
        self._full: Any = None

    def __getattr__(self, name: str) -> Any:  # schema, partition_spec, ...: the full manifest
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._full_manifest(), name)

    def _full_manifest(self) -> VersionManifest:
        if self._full is None:
            self._full = VersionManifest.from_json(self._raw, self._where)
        return self._full


def _load_light(log: VersionLog, v: int) -> Any:
    try:
        raw = log.io.get(log.version_path(v))
        j = json.loads(raw)
        if not isinstance(j, dict) or j.get("tombstone") or int(j["version"]) != v:
            return log.load(v)  # the full path says what is wrong
        return _LightVersion(v, j, raw, log.version_path(v))
    except (ValueError, KeyError, TypeError):
        return log.load(v)
    except NotFound:
        return log.load(v)


def _each(io: FileIO, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``fn`` over ``items``: in order on local disk (a local call costs microseconds, less than
    a thread hand-off), on the pool elsewhere (each call is a round trip)."""
    if io.is_local or len(items) <= 1:
        return [fn(x) for x in items]
    return list(_pool.map(fn, items))


def _load_many(log: VersionLog, versions: Sequence[int]) -> list[Any]:
    return _each(log.io, lambda v: _load_light(log, v), versions)


def _roots(io: FileIO, vms: Sequence[Any]) -> list[pa.Table]:
    return _each(io, lambda vm: root_of(io, vm), vms)


def _is_in(values: pa.Array, among: pa.Array) -> pa.Array:
    if not len(among) or not len(values):
        return pa.array(np.zeros(len(values), dtype=bool))
    return pc.is_in(values, value_set=among)


def _needed(a: np.ndarray, r: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Row i is needed iff some kept point k has a[i] <= k < r[i] (kept sorted ascending)."""
    if not len(kept):
        return np.zeros(len(a), dtype=bool)
    i = np.searchsorted(kept, a, side="left")
    return (i < len(kept)) & (kept[np.minimum(i, len(kept) - 1)] < r)


# Past this many paths an object store's sizes come from listing their directories (a page
# per 1,000 objects) rather than a HEAD per path.
_HEADS_MAX = 16


def _size_list(io: FileIO, paths: list[str]) -> list[int | None]:
    """Each path's size, None where nothing is there."""
    if not io.is_local and len(paths) > _HEADS_MAX:
        return io.sizes(pa.array(paths, pa.string())).to_pylist()

    def one(p: str) -> int | None:
        try:
            return io.size(p)
        except NotFound:
            return None

    return _each(io, one, paths)


def _sizes(io: FileIO, paths: list[str], known: dict[str, int] | None = None) -> int:
    """The bytes of ``paths`` (``known``: sizes already read, by path)."""
    known = known or {}
    rest = [p for p in paths if p not in known]
    return sum(known[p] for p in paths if p in known) + sum(z or 0 for z in _size_list(io, rest))


@dataclass
class _Garbage:
    manifests: list[str]
    files: list[str]
    freed_bytes: int
    kept: int


def _spare_staged(io: FileIO, latest: VersionManifest, g: _Garbage) -> _Garbage:
    """``g`` without what a version a SQL catalog committed but has not yet published needs
    (by path only; through the catalog, loading the latest version published it already)."""
    staged = staged_versions(io, latest.version)
    if not staged or not (g.files or g.manifests):
        return g
    needed = paths_of(io, staged)

    def keep(paths: list[str]) -> list[str]:
        arr = pa.array(paths, pa.string())
        return arr.filter(pc.invert(_is_in(arr, needed))).to_pylist()

    return _Garbage(keep(g.manifests), keep(g.files), g.freed_bytes, g.kept)


def _spare_branches(io: FileIO, log: VersionLog, latest: VersionManifest, g: _Garbage) -> _Garbage:
    """``g`` without what another branch keeps (its versions, its base) or a tag holds: their
    files' intervals are recorded in other logs' numbering, so they are checked by path. On
    a table that has or had branches, tags are checked by path even when no other branch is
    left: a tag made on a branch (since deleted) names a version of that branch's log, whose
    number says nothing about this log's intervals. Costs one listing of the branch records
    on a table without branches."""
    if not (g.files or g.manifests):
        return g
    others = other_branches(io, log)
    tags = TagStore(io, log).list()
    if not others and not (tags and _branched(latest)):
        return g
    needed = paths_of(io, others + [t.version for t in tags])

    def keep(paths: list[str]) -> list[str]:
        arr = pa.array(paths, pa.string())
        return arr.filter(pc.invert(_is_in(arr, needed))).to_pylist()

    return _Garbage(keep(g.manifests), keep(g.files), g.freed_bytes, g.kept)


def _spare(io: FileIO, log: VersionLog, latest: VersionManifest, g: _Garbage) -> _Garbage:
    """``g`` without what staged catalog commits, other branches and tags of them need, and
    without external files (the table references them but does not own them)."""
    g = _spare_branches(io, log, latest, _spare_staged(io, latest, g))
    return _Garbage(g.manifests, [p for p in g.files if owned(p)], g.freed_bytes, g.kept)


def _branched(latest: VersionManifest) -> bool:
    """Whether the table has (or had) branches: its tags may then name versions of any branch's log."""
    return BRANCHES in latest.writer_features


def collect_garbage(
    io: FileIO,
    log: VersionLog,
    chain: Sequence[VersionManifest],
    deleted: set[int],
    tags: Sequence[Tag],
    existing: Sequence[int],
    latest: VersionManifest,
    gone_tags: Collection[str] = (),
) -> _Garbage:
    """What deleting the versions ``deleted`` frees.

    ``chain``: consecutive versions (each the parent of the next) spanning the
    deleted ones plus the nearest survivor after them (and before, if any);
    ``existing``: every version that survives; ``tags``: every tag that stays;
    ``gone_tags``: tags a dry run counts as deleted though they are still there.
    """
    # Read only the roots that can matter: a version that removed nothing (no file, no
    # record) and wrote no leaf (its summary says so) adds no candidate, so most roots are
    # never opened.
    def _n(vm: VersionManifest, key: str) -> int:
        v = vm.summary.get(key)
        return 1 if v is None else int(v)  # unknown (older writer): read it

    # (A deletion vector replaced is a DV file dropped although no data file was removed:
    # such a version removed records.)
    removing = [i for i in range(1, len(chain)) if _n(chain[i], "removed-files") or _n(chain[i], "removed-records")]
    need = {0, len(chain) - 1} | set(removing) | {i - 1 for i in removing}
    need |= {i for i, vm in enumerate(chain) if vm.version in deleted and _n(vm, "leaves-written")}
    need |= {i for i, vm in enumerate(chain) if vm.version not in deleted}
    # after a destructive rollback's gap a root carries leaves of a parent long gone
    need |= {i for i in range(1, len(chain)) if chain[i].parent_version != chain[i - 1].version}
    order = sorted(need)
    roots = dict(zip(order, _roots(io, [chain[i] for i in order])))
    # Manifests: referenced by a deleted root and by no surviving root in the chain nor any tag.
    # Every leaf a deleted root referenced is in the first deleted root or was written
    # by a deleted version, so those roots (plus each deleted root's own path) suffice.
    gone = [pa.array([vm.root_manifest for vm in chain if vm.version in deleted and vm.root_manifest], pa.string())]
    gone += [manifest_paths(io, chain[i], roots[i]) for i in order if chain[i].version in deleted]
    return decide_garbage(
        io, log,
        removals=[(chain[i], roots[i], roots[i - 1]) for i in removing],
        candidate_manifests=pa.concat_arrays(gone),
        alive=[(chain[i], roots[i]) for i in order if chain[i].version not in deleted],
        deleted=deleted, tags=tags, existing=existing, latest=latest, gone_tags=gone_tags,
    )


def decide_garbage(
    io: FileIO,
    log: VersionLog,
    *,
    removals: Sequence[tuple[Any, pa.Table, pa.Table]],
    candidate_manifests: pa.Array,
    alive: Sequence[tuple[Any, pa.Table]],
    deleted: set[int],
    tags: Sequence[Tag],
    existing: Sequence[int],
    latest: VersionManifest,
    gone_tags: Collection[str] = (),
) -> _Garbage:
    """The files and manifests deleting the versions ``deleted`` frees, given what they changed.

    ``removals``: (version, its root, its parent's root) of every version whose removals may
    have become garbage -- those after the first deleted one, up to the nearest survivor
    after them; ``candidate_manifests``: every manifest a deleted version's root references,
    and those roots; ``alive``: (version, root) of the survivors next to the deleted run.
    """
    changes = [removed_by(io, vm, root, parent_root) for vm, root, parent_root in removals]
    removed = pa.concat_tables([c[0] for c in changes]) if changes else None
    dropped_dvs = pc.unique(pa.concat_arrays([c[1] for c in changes])) if changes else pa.array([], pa.string())
    files: list[str] = []
    kept = 0
    full_walk: pa.Array | None = None
    if latest.last_readd_version is not None and ((removed is not None and removed.num_rows) or len(dropped_dvs)):
        # A rollback once re-added files: a path may have several intervals, some
        # recorded only by versions already gone. Decide by the full walk instead, without
        # the deleted versions: a real run has expired them already, a dry run has not,
        # and counting them would keep (and under-report) what only they reference.
        full_walk = referenced_paths(io, log, dropping=deleted, dropping_tags=gone_tags)
    if removed is not None and removed.num_rows:
        kept_points = np.unique(np.array(list(existing) + [t.tagged_version for t in tags], dtype=np.int64))
        a = removed.column("added_version").to_numpy()
        r = removed.column("removed_version").to_numpy()
        paths = removed.column("path").combine_chunks()
        if full_walk is None:
            keep = _is_in(paths, paths.filter(pa.array(_needed(a, r, kept_points))))
        else:
            keep = _is_in(paths, full_walk)
        kept = len(pc.unique(paths.filter(keep)))
        files = pc.unique(paths.filter(pc.invert(keep))).to_pylist()
    if len(dropped_dvs):
        # A DV file serves many entries from the version that wrote it until the last
        # of them is replaced: one interval, so the surviving roots next to the deleted
        # run and the tags tell whether anything still points at it.
        if full_walk is None:
            alive_dvs = [_live_dvs(io, vm, root) for vm, root in alive]
            alive_dvs += [_live_dvs(io, t.version, None) for t in tags]
            full_walk = pa.concat_arrays(alive_dvs) if alive_dvs else pa.array([], pa.string())
        files += dropped_dvs.filter(pc.invert(_is_in(dropped_dvs, full_walk))).to_pylist()
    manifests: list[str] = []
    cand = pc.unique(candidate_manifests.drop_null())
    cand = cand.filter(pc.invert(pc.ends_with(cand, INLINE_ROOT_SUFFIX)))  # a carried root is no file
    if len(cand):
        held = [manifest_paths(io, vm, root) for vm, root in alive]
        held += [manifest_paths(io, t.version) for t in tags]
        if held:
            cand = cand.filter(pc.invert(_is_in(cand, pa.concat_arrays(held))))
        manifests = cand.to_pylist()
    return _Garbage(manifests, files, 0, kept)


def _live_dvs(io: FileIO, vm: VersionManifest, root: pa.Table | None) -> pa.Array:
    dv = live_entries(io, vm, root).column("dv_path").drop_null()
    return dv.combine_chunks() if len(dv) else pa.array([], pa.string())


def _put_tombstones(io: FileIO, log: VersionLog, stones: list[Tombstone]) -> None:
    """Overwrite each version's slot with its tombstone (in any order: the slot stays taken)."""
    _each(io, lambda t: io.put(log.version_path(t.version), t.to_json()), stones)


def _delete(io: FileIO, paths: list[str], known: dict[str, int] | None = None) -> int:
    """Delete ``paths`` the table owns (an external file it no longer references is not its
    to delete); returns the bytes freed (sizes read first, so it is exact)."""
    paths = [p for p in paths if owned(p)]
    if not paths:
        return 0
    freed = _sizes(io, paths, known)
    io.delete_many(paths)
    return freed


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
        raise InvalidArgument("expire_versions takes a listing (slots) only for a dry run: a real run lists the log itself")
    report = ExpireReport(dry_run)
    step = progress or (lambda *_: None)
    if retain_last is not None and (isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1):
        raise InvalidArgument(f"retain_last must be an int >= 1 (the latest version is always kept), not {retain_last!r}")
    latest = log.latest()
    check_writer(latest.writer_features, f"table {io.uri}")
    if older_than is None and retain_last is None:
        older_than = DEFAULT_OLDER_THAN
    cutoff = to_ms(older_than, "older_than") if older_than is not None else None
    grace_ms = (
        duration_ms(reader_grace, "reader_grace") if reader_grace is not None
        else TableProperties.EXPIRE_READER_GRACE_MS.get(latest.properties)
    )
    now = now_ms()
    floor = now - grace_ms
    store = TagStore(io, log)

    # 0. tags past their expiry time. A dry run deletes none, so from here on it leaves
    #    them out by name (``gone_tags``) wherever the real run would no longer find them.
    #    (A real run must not: a tag re-created under the name meanwhile is honoured.)
    for tag in store.list():
        if tag.expires_at_ms is not None and tag.expires_at_ms <= now:
            report.expired_tags.append(tag.name)
            g = delete_tag(io, log, tag.name, dry_run=dry_run, gone_tags=report.expired_tags if dry_run else ())
            report.deleted_manifests += g.manifests
            report.deleted_files += g.files
            report.deleted_bytes += g.freed_bytes
    gone_tags = set(report.expired_tags) if dry_run else set()

    if slots is None:
        slots = log.scan_slots()
    else:  # the caller's, which the steps below must not change
        slots = SlotListing(slots.versions, dict(slots.tombstones), list(slots.strays), list(slots.freed), list(slots.records))
    versions = slots.versions
    candidates = versions[: max(0, len(versions) - (retain_last or 1))]
    step("plan", 0, len(candidates))
    run = _Run(io, log, versions)
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
    expired = versions[:n]
    survivors = versions[n:]
    step("plan", n, len(candidates))
    report.expired_versions = expired
    report.earliest_retained = survivors[0] if survivors else None
    ranged = SLOT_RANGE_RECORDS in latest.writer_features
    if expired:
        run.prepare(expired, survivors[0])
        # 1. the versions stop being versions, oldest first, so the remaining ones stay
        #    contiguous: one range record per chunk (tables with range records), else a
        #    tombstone in each slot
        if ranged:
            records = run.records(slots, survivors[0], now)
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
        step("versions", len(expired), len(expired))
        # 2. what is still needed, seen after the versions are gone
        tags = [t for t in store.list() if t.name not in gone_tags]
        latest = log.latest()
        g = _spare(io, log, latest, run.garbage(expired, survivors, tags, latest, gone_tags))
        report.kept_for_tags = g.kept
        report.deleted_manifests += g.manifests
        report.deleted_files += g.files
        # 3. the files
        if dry_run:
            report.deleted_bytes += _sizes(io, g.manifests + g.files, run.sizes)
        else:
            step("files", 0, len(g.files) + len(g.manifests))
            report.deleted_bytes += _delete(io, g.files) + _delete(io, g.manifests, run.sizes)
            step("files", len(g.files) + len(g.manifests), len(g.files) + len(g.manifests))
    # 4. branches deleted more than the reader grace ago: what only they held (main's run)
    if log.branch == MAIN_BRANCH:
        g = free_deleted_branches(io, log, floor, dry_run, dropping=expired, dropping_tags=gone_tags,
                                  already={*report.deleted_files, *report.deleted_manifests})
        report.deleted_manifests += g.manifests
        report.deleted_files += g.files
        report.deleted_bytes += g.freed_bytes
    # 5. slots freed: the slot files of records old enough (or, on older tables, chunks of
    #    old tombstones below every retained version: record, then free)
    if ranged:
        doomed = [log.version_path(v) for v in slots.freeable_strays(now, latest.properties)]
        if doomed and not dry_run:
            io.delete_many(doomed)
        report.freed_slots = len(doomed)
    elif SLOT_TOMBSTONES in latest.writer_features and survivors:
        report.freed_slots = free_slots(io, log, latest, slots, survivors[0], now, dry_run)
    report.seconds = time.monotonic() - started
    return report


class _Run:
    """What one expiry reads of the versions it may expire, read as little as it can: the
    versions its decisions need, one per block for who occupied the slots (``block_commits``),
    and the roots of the versions that removed files or wrote leaves."""

    def __init__(self, io: FileIO, log: VersionLog, versions: Sequence[int]) -> None:
        self.io = io
        self.log = log
        self.versions = versions
        self._light: dict[int, Any] = {}
        self._full: dict[int, VersionManifest] = {}
        # (short id, flags) of a version, from a later version's block list or its own manifest
        self._who: dict[int, tuple[str, int]] = {}
        self.sizes: dict[str, int] = {}  # sizes of manifests found by name (see garbage)

    def light(self, i: int) -> Any:
        """The ``i``-th version (light: its JSON, parsed lazily)."""
        v = self.versions[i]
        hit = self._light.get(v)
        if hit is None:
            hit = self._light[v] = _load_light(self.log, v)
        return hit

    def _load(self, vs: Sequence[int]) -> None:
        todo = [v for v in vs if v not in self._light]
        for vm in _load_many(self.log, todo):
            self._light[vm.version] = vm

    def expirable(self, n: int, limit: int) -> int:
        """How many of the first ``n`` versions expire: the ``i``-th does iff its successor was
        committed by ``limit``. Commit times rise along versions, so the answer is the largest
        ``k`` whose ``k``-th version was committed by the limit (a binary search; the common
        answer, all ``n``, costs one read)."""
        if n == 0:
            return 0
        if self.light(n).timestamp_ms <= limit:
            return n
        lo, hi = 0, n - 1  # the answer is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.light(mid).timestamp_ms <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- who occupied the slots --------------------------------------------------------

    def learn_blocks(self, expired: Sequence[int], survivor: int) -> None:
        """(short id, flags) of every version in ``expired``: from one version per block (the
        newest version of the block at or below ``survivor``, whose ``block_commits`` names every
        slot before it in the block), or from each version where a block list is missing."""
        if all(v in self._who for v in expired):
            return
        by_block: dict[int, list[int]] = {}
        for v in expired:
            by_block.setdefault(block_start(v), []).append(v)
        live = sorted(set(expired) | {survivor})
        carriers = []
        for start, vs in by_block.items():
            end = min(start + COMMIT_BLOCK - 1, survivor)
            carriers.append(live[bisect.bisect_right(live, end) - 1])
        self._load(carriers)
        missing: list[int] = []
        for (start, vs), c in zip(by_block.items(), carriers):
            vm = self._light[c]
            entries = _entries(vm, start)
            if entries is None:
                missing += vs
                continue
            for v in vs:
                self._who[v] = entries[v - start] if v < c else (short_id(vm.commit_id), block_flags(self.full(v)))
        self._load(missing)
        for v in missing:
            self._who[v] = (short_id(self._light[v].commit_id), block_flags(self.full(v)))

    def full(self, v: int) -> VersionManifest:
        """Version ``v`` as a VersionManifest (read if not yet)."""
        hit = self._full.get(v)
        if hit is None:
            if v not in self._light:
                self._load([v])
            light = self._light[v]
            hit = self._full[v] = light._full_manifest() if isinstance(light, _LightVersion) else light
        return hit

    def records(self, slots: SlotListing, survivor: int, now: int) -> list[tuple[RecordRef, SlotRecord]]:
        """The range records that expire every slot below ``survivor`` not yet recorded: its
        version's first occupant, a tombstone's commit, or None for a hole (nothing there,
        nothing committed there: no delayed put may land as a version). One per run of
        unrecorded slots within a chunk."""
        expired = [v for v in self.versions if v < survivor]
        self.learn_blocks(expired, survivor)
        live = set(expired)
        low = min([*expired, *(v for v in slots.tombstones if v < survivor and not slots.recorded(v))], default=survivor)
        size = slot_chunk_size(self.full(survivor).properties)
        out: list[tuple[RecordRef, SlotRecord]] = []
        run: list[int] = []

        def flush() -> None:
            if run:
                ids = tuple(self._who[v][0] if v in live else (
                    slots.tombstones[v].commit_id if v in slots.tombstones else None) for v in run)
                path = f"{records_dir(self.log.layout.freed_dir, *chunk_range(run[0], size))}/{range_record_name(run[0], run[-1], now)}"
                out.append((RecordRef(path, run[0], run[-1], now, False), SlotRecord(run[0], run[-1], ids, now)))
                run.clear()

        for v in range(low, survivor):
            if slots.recorded(v) or (run and chunk_range(v, size) != chunk_range(run[0], size)):
                flush()
            if not slots.recorded(v):
                run.append(v)
        flush()
        return out

    # -- garbage -----------------------------------------------------------------------

    def prepare(self, expired: Sequence[int], survivor: int) -> None:
        """Read what ``garbage`` will need of the versions, while they can still be read (the
        versions are expired next: a branch's base slot, say, reads as nothing after that)."""
        run = [*expired, survivor]
        self.learn_blocks(expired, survivor)
        flags = {v: self._who[v][1] for v in expired}
        flags[survivor] = block_flags(self.full(survivor))
        self._regular = (
            all(not f & IRREGULAR for f in flags.values())
            and all(b - a == 1 for a, b in zip(run, run[1:]))  # no tombstone or hole inside the run
        )
        # the versions that removed files (their roots and their parents' tell what) and the
        # expired ones after the first that wrote leaves (their roots are read for those)
        self._removing = [v for v in run[1:] if flags[v] & REMOVED]
        self._readers = [v for v in expired[1:] if flags[v] & WROTE_LEAVES]
        if not self._regular:
            need = run
        else:
            need = sorted({expired[0], survivor, *self._removing, *(v - 1 for v in self._removing), *self._readers})
        self._need = need
        self._load(need)
        for v in need:
            self.full(v)

    def garbage(
        self, expired: Sequence[int], survivors: Sequence[int], tags: Sequence[Tag], latest: VersionManifest,
        gone_tags: Collection[str],
    ) -> _Garbage:
        """What expiring ``expired`` (the oldest versions, up to ``survivors[0]``) frees
        (``prepare`` first)."""
        s = survivors[0]
        deleted = set(expired)
        run = [*expired, s]
        if not self._regular:
            # A rollback re-added files, a branch's tree was published, or slots in the run were
            # dropped: the general computation over every version of the run.
            chain = [self.full(v) for v in run]
            return collect_garbage(self.io, self.log, chain, deleted, tags, survivors, latest, gone_tags)
        arrow = TreeConfig.of(self.full(s)).arrow_root  # as the committer named the roots
        first = self.full(expired[0])
        # Roots by name: every expired version's own root (a version that wrote none -- its
        # root is its parent's, or it has no files -- names a file that is not there; one
        # listing of the manifests tells which are, on S3); the first expired root and those
        # of the versions that wrote leaves are read for their leaves (every leaf an expired
        # root referenced is in the first one or was written by an expired version).
        named = [commit_root_path(self._who[v][0], v, arrow) for v in expired]
        self.sizes = {p: z for p, z in zip(named, _size_list(self.io, named)) if z is not None}
        own = [p for p in named if p in self.sizes]
        roots = dict(zip(self._need, _each(self.io, lambda v: root_of(self.io, self.full(v)), self._need)))
        gone = [pa.array(own + [first.root_manifest], pa.string())]
        gone += [leaf_paths(roots[v]) for v in [expired[0], *self._readers]]
        return decide_garbage(
            self.io, self.log,
            removals=[(self.full(v), roots[v], roots[v - 1]) for v in self._removing],
            candidate_manifests=pa.concat_arrays(gone),
            alive=[(self.full(s), roots[s])],
            deleted=deleted, tags=tags, existing=survivors, latest=latest, gone_tags=gone_tags,
        )


def _entries(vm: Any, start: int) -> list[tuple[str, int]] | None:
    """The (short id, flags) of slots ``start``.. before ``vm`` in its block, from its
    ``block_commits``; None if it has none that fits (an older writer's, or damaged)."""
    raw = vm.block_commits
    if raw is None or len(raw) != vm.version - start:
        return None
    try:
        return [parse_block_entry(e, f"version {vm.version}") for e in raw]
    except CorruptMetadata:
        return None  # read the versions themselves instead


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


def _neighbours(tags: Sequence[Tag], existing: Sequence[int], log: VersionLog, version: int) -> list[VersionManifest]:
    """The nearest kept points on either side of ``version``: previous tag, next tag or version."""
    before = [t for t in tags if t.tagged_version < version]
    after_tags = [t for t in tags if t.tagged_version > version]
    after_versions = [v for v in existing if v > version]
    out = [before[-1].version] if before else []
    nxt_tag = after_tags[0].version if after_tags else None
    nxt_ver = after_versions[0] if after_versions else None
    if nxt_ver is not None and (nxt_tag is None or nxt_ver <= nxt_tag.version):
        out.append(log.load(nxt_ver))
    elif nxt_tag is not None:
        out.append(nxt_tag)
    return out


def free_tag(io: FileIO, log: VersionLog, tag: Tag, dry_run: bool = False, gone_tags: Collection[str] = ()) -> _Garbage:
    """Files only ``tag`` held (it has been deleted): its files minus its neighbours'.

    ``gone_tags``: other tags a dry run counts as deleted though they are still there."""
    existing = log.list_versions()
    gone = {tag.name, *gone_tags}
    tags = [t for t in TagStore(io, log).list() if t.name not in gone]
    t = tag.tagged_version
    latest = log.latest()
    # With branches, tags and versions of different logs share numbers: neither "the same
    # number" nor "the nearest numbers" says which files are held, so the full walk decides.
    branched = _branched(latest)
    if not branched and (t in existing or any(o.tagged_version == t for o in tags)):
        return _Garbage([], [], 0, 0)  # the version itself, or another tag, holds all of it
    root = root_of(io, tag.version)
    mine = live_entries(io, tag.version, root)
    ms = manifest_paths(io, tag.version, root)
    if latest.last_readd_version is None and not branched:
        neighbours = _neighbours(tags, existing, log, t)
        parts = [referenced_files(live_entries(io, vm)) for vm in neighbours]
        keep = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
        alive = [manifest_paths(io, vm) for vm in neighbours]
        if alive:
            ms = ms.filter(pc.invert(_is_in(ms, pa.concat_arrays(alive))))
    else:  # files re-added by a rollback (their lifetimes are not one interval), or branches
        # A dry run has not deleted the tag: leave it out of the walk, or it keeps its own
        # files. A real run has, and must see a tag re-created under the name meanwhile.
        keep = referenced_paths(io, log, dropping_tags=gone if dry_run else ())
        ms = ms.filter(pc.invert(_is_in(ms, keep)))
    mine_files = pc.unique(referenced_files(mine))
    mask = _is_in(mine_files, keep)
    files = mine_files.filter(pc.invert(mask)).to_pylist()
    kept = int(pc.sum(mask).as_py() or 0)
    g = _spare(io, log, latest, _Garbage(ms.to_pylist(), files, 0, kept))
    if dry_run:
        return _Garbage(g.manifests, g.files, _sizes(io, g.manifests + g.files), kept)
    freed = _delete(io, g.files) + _delete(io, g.manifests)
    return _Garbage(g.manifests, g.files, freed, kept)


def delete_tag(io: FileIO, log: VersionLog, name: str, dry_run: bool = False, gone_tags: Collection[str] = ()) -> _Garbage:
    store = TagStore(io, log)
    tag = store.readable(name) if dry_run else store.delete(name)
    if tag is None:  # a damaged tag file: what only it held is left to orphan cleanup (TagStore.delete)
        return _Garbage([], [], 0, 0)
    return free_tag(io, log, tag, dry_run=dry_run, gone_tags=gone_tags)


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
    _put_tombstones(io, log, [Tombstone(vm.version, vm.commit_id, "rollback", now, rollback.version) for vm in chain[1:-1]])
    existing = log.list_versions()
    tags = TagStore(io, log).list()
    latest = log.latest()
    g = _spare(io, log, latest, collect_garbage(io, log, chain, set(between), tags, existing, latest))
    freed = _delete(io, g.files) + _delete(io, g.manifests)
    return _Garbage(g.manifests, g.files, freed, g.kept)


def free_deleted_branches(
    io: FileIO, main_log: VersionLog, floor_ms: int, dry_run: bool = False, *, dropping: Collection[int] = (),
    dropping_tags: Collection[str] = (), already: Collection[str] = (),
) -> _Garbage:
    """Free what branches deleted before ``floor_ms`` (now minus the reader grace: a publish or
    a read of such a branch has finished) held and nothing else references: their versions'
    and bases' files minus every kept version's, branch's and tag's; then their logs' files.
    The deletion markers stay (a put delayed past all this is still refused).

    ``dropping`` / ``dropping_tags``: main's versions and tags the caller's run expires (a dry
    run still lists them: left out, it sees what the real run frees); ``already``: the files
    the caller's run deletes itself (a file main's expired versions and a deleted branch both
    held), neither deleted nor counted again here."""
    from lamina.commit.branches import BranchStore

    store = BranchStore(io)
    gone = [(r, store.log(r), [o.path for o in io.list(r.layout.root)]) for r, at in store.deleted() if at <= floor_ms]
    if not gone:
        return _Garbage([], [], 0, 0)
    vms = [r.base for r, _, _ in gone]
    for _, lg, _ in gone:
        vms += [vm for vm in _each(io, lg.try_load, lg.list_versions()) if vm is not None]
    mine = paths_of(io, vms)
    keep = referenced_paths(io, main_log, dropping=dropping, dropping_tags=dropping_tags)
    doomed = [p for p in mine.filter(pc.invert(_is_in(mine, keep))).to_pylist() if p not in already]
    manifests = [p for p in doomed if p.startswith(MANIFESTS_DIR + "/")]
    files = [p for p in doomed if not p.startswith(MANIFESTS_DIR + "/")]
    g = _spare_staged(io, main_log.latest(), _Garbage(manifests, files, 0, int(pc.sum(_is_in(mine, keep)).as_py() or 0)))
    if dry_run:
        return _Garbage(g.manifests, g.files, _sizes(io, g.manifests + g.files), g.kept)
    freed = _delete(io, g.files) + _delete(io, g.manifests)
    io.delete_many([p for _, _, own in gone for p in own])
    for r, _, _ in gone:
        store.mark_freed(r)
    return _Garbage(g.manifests, g.files, freed, g.kept)
