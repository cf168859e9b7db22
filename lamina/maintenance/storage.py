"""What a table's storage holds: the bytes its current version reads (Delta's ``DESCRIBE
DETAIL`` sizeInBytes), everything under its location, and what keeps the rest.

Every object under the table's location is counted once, as one of:

- **live**: a data or deletion-vector file the current version (main's latest) reads;
- **held**: a file (data, deletion vector or manifest) the current version does not
  reference but a kept version does: an older version of main, a tag's, a branch's, or a
  commit a SQL catalog staged and has not yet published. Expiry frees what older versions
  hold, deleting a tag or a branch what it holds; each holder says what it keeps and what
  only it keeps;
- **unreferenced**: a file no kept version references and that is no table metadata, which
  orphan cleanup deletes once it is older than its age (and no write in flight wrote it);
- **metadata**: the rest: the current version's manifests, version files, tags, branch
  records, the hint, markers;

so live + held + unreferenced + metadata = total. What it reads is what orphan cleanup
reads: one listing of the table and every kept version's manifests (each leaf once). A
commit landing while it runs may show its new files as unreferenced.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.branches import BranchStore
from lamina.commit.log import VersionLog
from lamina.commit.tags import TagStore
from lamina.io import FileIO
from lamina.maintenance.orphans import list_table
from lamina.maintenance.reachability import log_versions, manifest_paths, paths_of_each, staged_versions
from lamina.maintenance.reports import short_repr
from lamina.spec.version import VersionManifest

# What a holder is.
VERSIONS = "versions"  # main's versions before the current one
TAG = "tag"
BRANCH = "branch"
STAGED = "staged"  # versions a SQL catalog committed and has not published yet


@dataclass(frozen=True)
class Holder:
    """Something that keeps files the current version does not reference."""

    kind: str  # VERSIONS, TAG, BRANCH or STAGED
    name: str  # the tag's or the branch's; "" for main's older versions and staged commits
    versions: tuple[int, ...]  # the versions it keeps (a branch's, numbered in its own log)
    files: int  # files it references that the current version does not
    bytes: int
    only_files: int  # of those, the files no other holder references: freed once it alone goes
    only_bytes: int

    __repr__ = short_repr


@dataclass(frozen=True)
class StorageReport:
    """Where a table's bytes are (``Table.maintenance.storage()``; `lamina info` prints it)."""

    location: str
    version: int  # the current version: main's latest
    live_files: int  # data and deletion-vector files the current version reads
    live_bytes: int
    total_files: int  # every object under the location
    total_bytes: int
    held_files: int  # referenced by a holder, not by the current version
    held_bytes: int
    unreferenced_files: int  # referenced by nothing, no metadata: orphan cleanup's
    unreferenced_bytes: int
    metadata_files: int  # the rest: the current version's manifests, version files, tags, ...
    metadata_bytes: int
    holders: tuple[Holder, ...]  # main's older versions first, then tags, branches, staged commits

    __repr__ = short_repr


def storage_report(io: FileIO, log: VersionLog) -> StorageReport:
    """Where the bytes under the table at ``io`` are (``log``: its main log)."""
    latest = log.latest()
    walked, may_be_orphans = list_table(io, log, latest)
    listed = pa.array([o.path for o in walked], pa.string())
    sizes = pa.array([o.size for o in walked], pa.int64())
    kinds: list[tuple[str, str, list[VersionManifest]]] = []  # (kind, name, versions) of each holder
    kinds.append((VERSIONS, "", [vm for vm in log_versions(log) if vm.version != latest.version]))
    kinds += [(TAG, t.name, [t.version]) for t in TagStore(io, log).list()]
    store = BranchStore(io)
    kinds += [(BRANCH, r.name, [r.base, *log_versions(store.log(r))]) for r in store.list()]
    staged = staged_versions(io, latest.version)
    if staged:
        kinds.append((STAGED, "", staged))
    # Each set of paths as a mask over the listing: a referenced file that is missing is
    # fsck's business, not storage.
    current, *held_by = (
        _among(listed, paths) for paths in paths_of_each(io, [[latest], *(vms for _, _, vms in kinds)])
    )
    beyond = [pc.and_not(mask, current) for mask in held_by]
    holding = _sum([pc.cast(mask, pa.int64()) for mask in beyond], len(walked))  # how many holders keep each file
    alone = pc.equal(holding, 1)
    holders = tuple(
        Holder(
            kind,
            name,
            tuple(sorted({vm.version for vm in vms})),
            *_size(mask, sizes),
            *_size(pc.and_(mask, alone), sizes),
        )
        for (kind, name, vms), mask in zip(kinds, beyond)
    )
    live = pc.and_not(current, _among(listed, manifest_paths(io, latest)))
    held = pc.greater(holding, 0)
    unreferenced = pc.and_not(
        pc.and_not(_among(listed, pa.array([o.path for o in may_be_orphans], pa.string())), current), held
    )
    metadata = pc.invert(pc.or_(pc.or_(live, held), unreferenced))
    return StorageReport(
        io.uri,
        latest.version,
        *_size(live, sizes),
        len(walked),
        int(pc.sum(sizes).as_py() or 0),
        *_size(held, sizes),
        *_size(unreferenced, sizes),
        *_size(metadata, sizes),
        holders,
    )


def _among(listed: pa.Array, paths: pa.Array) -> pa.Array:
    """Which of the listed objects ``paths`` names."""
    return pc.is_in(listed, value_set=paths) if len(paths) else pa.array([False] * len(listed), pa.bool_())


def _sum(counts: list[pa.Array], n: int) -> pa.Array:
    out = pa.array([0] * n, pa.int64())
    for c in counts:
        out = pc.add(out, c)
    return out


def _size(mask: pa.Array, sizes: pa.Array) -> tuple[int, int]:
    """(files, bytes) of the listed objects ``mask`` selects."""
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0), int(pc.sum(sizes.filter(mask)).as_py() or 0)
