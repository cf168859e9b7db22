"""What a version (or a tag's copy of one) references, read with as few manifests as possible.

Every maintenance job asks the same questions: which manifests make up a
version's tree, which data and deletion-vector files are live in it, and what
did one version change relative to its parent. They are answered here, column-
projected (``path``, ``added_version``, ``removed_version``, ``status``,
``dv_path``) and in Arrow, so sets of millions of paths stay vectorized.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.log import VersionLog
from lamina.commit.tags import TagStore
from lamina.errors import NotFound
from lamina.io import FileIO
from lamina.manifest.entries import conform, manifest_schema_of
from lamina.manifest.files import read_manifests
from lamina.manifest.tree import load_root
from lamina.spec import content as C
from lamina.spec.layout import PENDING_DIR, is_inline_root, parse_pending_name
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-reach")

# The entry columns maintenance needs: lifetimes and what files an entry points at.
GC_COLUMNS = ["content", "status", "path", "size", "added_version", "removed_version", "dv_path"]
GC_SCHEMA = pa.schema([f for f in C.BASE_FIELDS if f.name in GC_COLUMNS])


def _gc(t: pa.Table) -> pa.Table:
    return conform(t, GC_SCHEMA)


def root_of(io: FileIO, vm: VersionManifest) -> pa.Table:
    """The root manifest's rows (GC columns); empty for a version with no files."""
    return _gc(load_root(io, vm.root_manifest, manifest_schema_of(vm), vm.root_inline))


def leaf_paths(root: pa.Table) -> pa.Array:
    return root.filter(pc.equal(root.column("content"), C.LEAF)).column("path").combine_chunks()


def manifest_paths(io: FileIO, vm: VersionManifest, root: pa.Table | None = None) -> pa.Array:
    """The root manifest and every leaf the version's tree references (manifest files only: a
    root the version manifest carries is no file)."""
    if vm.root_manifest is None:
        return pa.array([], pa.string())
    root = root_of(io, vm) if root is None else root
    if is_inline_root(vm.root_manifest):
        return leaf_paths(root)
    return pa.concat_arrays([pa.array([vm.root_manifest], pa.string()), leaf_paths(root)])


def _data_rows(root: pa.Table) -> pa.Table:
    return root.filter(pc.equal(root.column("content"), C.DATA))


def entries_of(io: FileIO, root: pa.Table, leaves: Iterable[str] | None = None) -> pa.Table:
    """Data-file entries (every status) of the root's inline rows and ``leaves`` (default: all its leaves)."""
    paths = leaf_paths(root).to_pylist() if leaves is None else list(leaves)
    parts = [_data_rows(root)] + [_gc(t) for t in read_manifests(io, paths, GC_COLUMNS)]
    return pa.concat_tables(parts)


def _live(entries: pa.Table) -> pa.Table:
    return entries.filter(pc.not_equal(entries.column("status"), C.REMOVED))


def live_entries(
    io: FileIO, vm: VersionManifest, root: pa.Table | None = None, leaves: Iterable[str] | None = None
) -> pa.Table:
    """Live data-file entries of a version: path, added_version, size, dv_path (of the root's
    inline rows and ``leaves``, default all its leaves)."""
    if vm.root_manifest is None:
        return GC_SCHEMA.empty_table()
    root = root_of(io, vm) if root is None else root
    return _live(entries_of(io, root, leaves))


def referenced_files(entries: pa.Table) -> pa.Array:
    """Data files plus the deletion-vector files those entries point at."""
    dv = entries.column("dv_path").drop_null()
    return pa.concat_arrays(
        [entries.column("path").combine_chunks(), dv.combine_chunks() if len(dv) else pa.array([], pa.string())]
    )


def written_by(io: FileIO, vm: VersionManifest, root: pa.Table, parent_root: pa.Table | None) -> pa.Table:
    """Entries in the manifests version ``vm`` wrote: its root's inline rows and its new leaves.

    A manifest keeps REMOVED entries only of the version that wrote it, so the
    REMOVED rows here are exactly the files ``vm`` removed from its parent.
    """
    leaves = leaf_paths(root)
    if parent_root is not None and len(leaves):
        leaves = leaves.filter(pc.invert(pc.is_in(leaves, value_set=leaf_paths(parent_root))))
    return entries_of(io, root, leaves.to_pylist())


def removed_by(
    io: FileIO, vm: VersionManifest, root: pa.Table, parent_root: pa.Table | None
) -> tuple[pa.Table, pa.Array]:
    """(entries of data files ``vm`` removed, DV files its REMOVED entries pointed at).

    A REMOVED entry whose path ``vm`` lists again as live is a replacement (a new
    deletion vector on the same data file): the data file goes on, only its old
    DV may have become garbage.
    """
    e = written_by(io, vm, root, parent_root)
    mask = pc.fill_null(
        pc.and_(pc.equal(e.column("status"), C.REMOVED), pc.equal(e.column("removed_version"), vm.version)), False
    )
    gone = e.filter(mask)
    still = _live(e).column("path")
    removed = gone.filter(pc.invert(pc.is_in(gone.column("path"), value_set=still))) if len(still) else gone
    return removed, gone.column("dv_path").drop_null().combine_chunks() if gone.num_rows else pa.array([], pa.string())


def added_by(io: FileIO, vm: VersionManifest, root: pa.Table, parent_root: pa.Table | None) -> pa.Table:
    e = written_by(io, vm, root, parent_root)
    return e.filter(pc.equal(e.column("added_version"), vm.version))


def staged_versions(io: FileIO, latest: int) -> list[VersionManifest]:
    """Versions a SQL catalog may have committed but not yet published: manifests staged
    for a version above ``latest`` (its writer stopped between the row swap and the
    publish; the next catalog reader or writer publishes it). Maintenance by path keeps
    what they reference, as if they were published."""
    out = []
    for name in io.list_names(PENDING_DIR):
        v = parse_pending_name(name)
        if v is None or v <= latest:
            continue
        path = f"{PENDING_DIR}/{name}"
        try:
            out.append(VersionManifest.from_json(io.get(path), path))
        except NotFound:  # published (and dropped) meanwhile: then it is a version
            continue
    return out


def other_branches(io: FileIO, log: VersionLog, dropping_branch: str | None = None) -> list[VersionManifest]:
    """Every version the table's other branches keep: each other log's versions (main's, when
    ``log`` is a branch's) and every branch's base (``log``'s own too: its copy is kept while
    the branch exists). ``dropping_branch``: a branch id to leave out (a dry run of its deletion)."""
    from lamina.commit.branches import BranchLog, BranchStore

    store = BranchStore(io)
    records = [r for r in store.list() if r.branch_id != dropping_branch]
    own = log.record.branch_id if isinstance(log, BranchLog) and log.record is not None else None
    logs: list[VersionLog] = [store.log(r) for r in records if r.branch_id != own]
    if own is not None:
        logs.append(VersionLog(io))
    out = [r.base for r in records]
    for other in logs:
        out += log_versions(other)
    return out


def log_versions(log: VersionLog) -> list[VersionManifest]:
    """Every version ``log`` keeps (one expired between the listing and the read is not there)."""
    return list(log.try_load_many(log.list_versions()).values())


def kept_versions(
    io: FileIO,
    log: VersionLog,
    versions: list[VersionManifest] | None = None,
    *,
    dropping: Collection[int] = (),
    dropping_tags: Collection[str] = (),
    dropping_branch: str | None = None,
) -> list[VersionManifest]:
    """Every version whose files must stay: existing versions (``versions`` if the caller
    has loaded them), tags' copies, staged commits, and every other branch's versions and base.

    ``dropping`` / ``dropping_tags``: versions and tags the caller is about to delete and
    still lists (a dry run deletes nothing), left out so that it sees what the real run
    would free, not what these still hold.

    A damaged version file raises CorruptMetadata: nothing is freed on a table whose
    history cannot be read (fail closed)."""
    # try_load: a version expired between the listing and the read is simply not there
    vms = (
        list(versions)
        if versions is not None
        else [
            vm
            for vm in _pool.map(log.try_load, [v for v in log.list_versions() if v not in dropping])
            if vm is not None
        ]
    )
    latest = max((vm.version for vm in vms), default=-1)
    vms += [t.version for t in TagStore(io, log).list() if t.name not in dropping_tags]
    vms += staged_versions(io, latest)
    vms += other_branches(io, log, dropping_branch)
    return vms


def referenced_paths(
    io: FileIO,
    log: VersionLog,
    progress: Callable[[str, int, int], None] | None = None,
    *,
    dropping: Collection[int] = (),
    dropping_tags: Collection[str] = (),
    dropping_branch: str | None = None,
) -> pa.Array:
    """Every manifest, data file and DV file referenced by a kept version (``kept_versions``,
    which says what ``dropping`` and ``dropping_tags`` leave out).

    Each distinct leaf is read once (leaves are shared between versions).
    """
    kept = kept_versions(io, log, dropping=dropping, dropping_tags=dropping_tags, dropping_branch=dropping_branch)
    return paths_of(io, kept, progress)


def paths_of(
    io: FileIO, vms: list[VersionManifest], progress: Callable[[str, int, int], None] | None = None
) -> pa.Array:
    """Every manifest, data file and DV file the versions ``vms`` reference."""
    return paths_of_each(io, [vms], progress)[0]


def paths_of_each(
    io: FileIO,
    groups: Sequence[Sequence[VersionManifest]],
    progress: Callable[[str, int, int], None] | None = None,
) -> list[pa.Array]:
    """``paths_of`` each group of versions (a tag's, a branch's, ...), each distinct root and
    leaf read once however many groups share it."""
    step = progress or (lambda *_: None)
    groups = [[vm for vm in g if vm.root_manifest is not None] for g in groups]
    by_root = {vm.root_manifest: vm for g in groups for vm in g}  # versions sharing a root share its files
    step("versions", len(by_root), len(by_root))
    roots = dict(zip(by_root, _pool.map(lambda vm: root_of(io, vm), by_root.values())))
    leaves = (
        pc.unique(pa.concat_arrays([leaf_paths(r) for r in roots.values()])) if roots else pa.array([], pa.string())
    )
    step("leaves", 0, len(leaves))
    in_leaf = dict(
        zip(leaves.to_pylist(), (_files(_gc(t)) for t in read_manifests(io, leaves.to_pylist(), GC_COLUMNS)))
    )
    step("leaves", len(leaves), len(leaves))
    out = []
    for g in groups:
        names = sorted({vm.root_manifest for vm in g if vm.root_manifest is not None})
        own = pc.unique(pa.concat_arrays([leaf_paths(roots[n]) for n in names])) if names else pa.array([], pa.string())
        parts = [pa.array([n for n in names if not is_inline_root(n)], pa.string()), own]
        parts += [_files(_data_rows(roots[n])) for n in names] + [in_leaf[leaf] for leaf in own.to_pylist()]
        out.append(pc.unique(pa.concat_arrays(parts)))
    return out


def _files(entries: pa.Table) -> pa.Array:
    """The data and DV files of ``entries``' live rows."""
    return referenced_files(_live(entries))
