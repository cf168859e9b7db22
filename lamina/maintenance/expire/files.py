"""What deleting versions frees: the manifests and the data and deletion-vector files only
they needed, decided from the intervals the manifests record (the rule in
``lamina.maintenance.expire``), spared what staged catalog commits, other branches, tags and
external files need, and deleted with the bytes it frees.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.log import VersionLog
from lamina.commit.tags import TagStore
from lamina.errors import NotFound
from lamina.io import FileIO
from lamina.maintenance.expire.reads import _each, _roots, _Run
from lamina.maintenance.expire.report import ExpireReport, Progress
from lamina.maintenance.reachability import (
    leaf_paths,
    live_entries,
    manifest_paths,
    other_branches,
    paths_of,
    referenced_paths,
    removed_by,
    root_of,
    staged_versions,
)
from lamina.manifest.tree import TreeConfig
from lamina.spec.features import BRANCHES
from lamina.spec.layout import INLINE_ROOT_SUFFIX, owned
from lamina.spec.slot import IRREGULAR, REMOVED, WROTE_LEAVES, block_flags, commit_root_path
from lamina.spec.tag import Tag
from lamina.spec.version import VersionManifest


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
        io,
        log,
        removals=[(chain[i], roots[i], roots[i - 1]) for i in removing],
        candidate_manifests=pa.concat_arrays(gone),
        alive=[(chain[i], roots[i]) for i in order if chain[i].version not in deleted],
        deleted=deleted,
        tags=tags,
        existing=existing,
        latest=latest,
        gone_tags=gone_tags,
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


def _delete(io: FileIO, paths: list[str], known: dict[str, int] | None = None) -> int:
    """Delete ``paths`` the table owns (an external file it no longer references is not its
    to delete); returns the bytes freed (sizes read first, so it is exact)."""
    paths = [p for p in paths if owned(p)]
    if not paths:
        return 0
    freed = _sizes(io, paths, known)
    io.delete_many(paths)
    return freed


@dataclass
class _Prepared:
    """What ``garbage`` needs of a run's versions, read by ``prepare`` while they can be read."""

    regular: bool  # every slot of the run a plain commit of its parent (no tombstone, hole, rollback)
    removing: list[int]  # the versions that removed files (their roots and their parents' tell what)
    readers: list[int]  # the expired ones after the first that wrote leaves (their roots are read for those)
    need: list[int]  # the versions whose roots are read


def prepare(run: _Run, expired: Sequence[int], survivor: int) -> _Prepared:
    """Read what ``garbage`` will need of the versions, while they can still be read (the
    versions are expired next: a branch's base slot, say, reads as nothing after that)."""
    versions = [*expired, survivor]
    run.learn_blocks(expired, survivor)
    flags = {v: run.who[v][1] for v in expired}
    flags[survivor] = block_flags(run.full(survivor))
    regular = (
        all(not f & IRREGULAR for f in flags.values())
        and all(b - a == 1 for a, b in zip(versions, versions[1:]))  # no tombstone or hole inside the run
    )
    # the versions that removed files (their roots and their parents' tell what) and the
    # expired ones after the first that wrote leaves (their roots are read for those)
    removing = [v for v in versions[1:] if flags[v] & REMOVED]
    readers = [v for v in expired[1:] if flags[v] & WROTE_LEAVES]
    if not regular:
        need = versions
    else:
        need = sorted({expired[0], survivor, *removing, *(v - 1 for v in removing), *readers})
    run.load(need)
    for v in need:
        run.full(v)
    return _Prepared(regular, removing, readers, need)


def garbage(
    run: _Run,
    prepared: _Prepared,
    expired: Sequence[int],
    survivors: Sequence[int],
    tags: Sequence[Tag],
    latest: VersionManifest,
    gone_tags: Collection[str],
) -> _Garbage:
    """What expiring ``expired`` (the oldest versions, up to ``survivors[0]``) frees
    (``prepare`` first)."""
    s = survivors[0]
    deleted = set(expired)
    versions = [*expired, s]
    if not prepared.regular:
        # A rollback re-added files, a branch's tree was published, or slots in the run were
        # dropped: the general computation over every version of the run.
        chain = [run.full(v) for v in versions]
        return collect_garbage(run.io, run.log, chain, deleted, tags, survivors, latest, gone_tags)
    arrow = TreeConfig.of(run.full(s)).arrow_root  # as the committer named the roots
    first = run.full(expired[0])
    # Roots by name: every expired version's own root (a version that wrote none -- its
    # root is its parent's, or it has no files -- names a file that is not there; one
    # listing of the manifests tells which are, on S3); the first expired root and those
    # of the versions that wrote leaves are read for their leaves (every leaf an expired
    # root referenced is in the first one or was written by an expired version).
    named = [commit_root_path(run.who[v][0], v, arrow) for v in expired]
    run.sizes = {p: z for p, z in zip(named, _size_list(run.io, named)) if z is not None}
    own = [p for p in named if p in run.sizes]
    roots = dict(zip(prepared.need, _each(run.io, lambda v: root_of(run.io, run.full(v)), prepared.need)))
    gone = [pa.array(own + [first.root_manifest], pa.string())]
    gone += [leaf_paths(roots[v]) for v in [expired[0], *prepared.readers]]
    return decide_garbage(
        run.io,
        run.log,
        removals=[(run.full(v), roots[v], roots[v - 1]) for v in prepared.removing],
        candidate_manifests=pa.concat_arrays(gone),
        alive=[(run.full(s), roots[s])],
        deleted=deleted,
        tags=tags,
        existing=survivors,
        latest=latest,
        gone_tags=gone_tags,
    )


def free_files(
    run: _Run,
    prepared: _Prepared,
    expired: Sequence[int],
    survivors: Sequence[int],
    tags: Sequence[Tag],
    latest: VersionManifest,
    gone_tags: Collection[str],
    dry_run: bool,
    report: ExpireReport,
    step: Progress,
) -> None:
    """Steps 2 and 3 of an expiry run, once ``expired`` are no longer versions: what is still
    needed, seen after the versions are gone (``tags``, ``latest``: read since), then the
    files only they needed, deleted (a dry run only sums their bytes)."""
    io, log = run.io, run.log
    g = _spare(io, log, latest, garbage(run, prepared, expired, survivors, tags, latest, gone_tags))
    report.kept_for_tags = g.kept
    report.deleted_manifests += g.manifests
    report.deleted_files += g.files
    if dry_run:
        report.deleted_bytes += _sizes(io, g.manifests + g.files, run.sizes)
    else:
        step("files", 0, len(g.files) + len(g.manifests))
        report.deleted_bytes += _delete(io, g.files) + _delete(io, g.manifests, run.sizes)
        step("files", len(g.files) + len(g.manifests), len(g.files) + len(g.manifests))
