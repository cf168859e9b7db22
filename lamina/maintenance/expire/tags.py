"""What a tag or a branch alone held, freed when it goes: a deleted tag's files (``free_tag``,
``delete_tag``), tags past their expiry time (an expiry run's first step), and what branches
deleted more than the reader grace ago held (``free_deleted_branches``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.log import VersionLog
from lamina.commit.tags import TagStore
from lamina.io import FileIO
from lamina.maintenance.expire.files import _branched, _delete, _Garbage, _is_in, _sizes, _spare, _spare_staged
from lamina.maintenance.expire.reads import _each
from lamina.maintenance.expire.report import ExpireReport
from lamina.maintenance.reachability import (
    live_entries,
    manifest_paths,
    paths_of,
    referenced_files,
    referenced_paths,
    root_of,
)
from lamina.spec.layout import MANIFESTS_DIR
from lamina.spec.tag import Tag
from lamina.spec.version import VersionManifest


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


def delete_tag(
    io: FileIO, log: VersionLog, name: str, dry_run: bool = False, gone_tags: Collection[str] = ()
) -> _Garbage:
    store = TagStore(io, log)
    tag = store.readable(name) if dry_run else store.delete(name)
    if tag is None:  # a damaged tag file: what only it held is left to orphan cleanup (TagStore.delete)
        return _Garbage([], [], 0, 0)
    return free_tag(io, log, tag, dry_run=dry_run, gone_tags=gone_tags)


def free_deleted_branches(
    io: FileIO,
    main_log: VersionLog,
    floor_ms: int,
    dry_run: bool = False,
    *,
    dropping: Collection[int] = (),
    dropping_tags: Collection[str] = (),
    already: Collection[str] = (),
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
    g = _spare_staged(
        io, main_log.latest(), _Garbage(manifests, files, 0, int(pc.sum(_is_in(mine, keep)).as_py() or 0))
    )
    if dry_run:
        return _Garbage(g.manifests, g.files, _sizes(io, g.manifests + g.files), g.kept)
    freed = _delete(io, g.files) + _delete(io, g.manifests)
    io.delete_many([p for _, _, own in gone for p in own])
    for r, _, _ in gone:
        store.mark_freed(r)
    return _Garbage(g.manifests, g.files, freed, g.kept)


def expire_tags(io: FileIO, log: VersionLog, store: TagStore, now: int, dry_run: bool, report: ExpireReport) -> None:
    """Step 0 of an expiry run: the tags past their expiry time deleted, and what only they
    held. A dry run deletes none, and counts those before as deleted (``gone_tags``)."""
    for tag in store.list():
        if tag.expires_at_ms is not None and tag.expires_at_ms <= now:
            report.expired_tags.append(tag.name)
            g = delete_tag(io, log, tag.name, dry_run=dry_run, gone_tags=report.expired_tags if dry_run else ())
            report.deleted_manifests += g.manifests
            report.deleted_files += g.files
            report.deleted_bytes += g.freed_bytes


def free_branches(
    io: FileIO,
    log: VersionLog,
    floor_ms: int,
    dry_run: bool,
    expired: Sequence[int],
    gone_tags: Collection[str],
    report: ExpireReport,
) -> None:
    """Step 4 of main's expiry run: what branches deleted before ``floor_ms`` only held
    (``free_deleted_branches``), beside what the run's earlier steps deleted."""
    g = free_deleted_branches(
        io,
        log,
        floor_ms,
        dry_run,
        dropping=expired,
        dropping_tags=gone_tags,
        already={*report.deleted_files, *report.deleted_manifests},
    )
    report.deleted_manifests += g.manifests
    report.deleted_files += g.files
    report.deleted_bytes += g.freed_bytes
