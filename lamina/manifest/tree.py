"""The manifest tree: a root manifest per version over leaf manifests.

Adaptive shape: small writes keep their data-file entries inline in the root;
once the root holds more than ``inline_max`` of them they are flushed into a
leaf. Removals rewrite only the leaves that hold the removed files
(copy-on-write); every other leaf is carried over by reference. Small leaves
are merged once ``merge_min_leaves`` of them accumulate, so the root stays
short however many commits the table has.

REMOVED entries: the version that removes a file records it with status
REMOVED and ``removed_version`` in the leaf (or root) it rewrites. Later
versions drop such entries the next time they rewrite that manifest.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.io import FileIO
from lamina.manifest.entries import conform
from lamina.manifest.files import read_manifest, read_manifests, write_manifest, write_root
from lamina.spec import content as C
from lamina.spec.features import ARROW_LEAF_MANIFESTS, ARROW_LEAF_MAX_FILES, ARROW_ROOT_MANIFESTS, INLINE_ROOT_MANIFESTS
from lamina.spec.properties import TableProperties

Pruner = Callable[[pa.Table], "pa.Array | pa.ChunkedArray"]


class MissingFiles(Exception):
    """Files a change removes are not live in the base version (a concurrent commit removed them)."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(f"{len(paths)} file(s) are no longer live: {paths[:5]}")
        self.paths = paths


@dataclass(frozen=True)
class TreeConfig:
    """The tree's shape: the table's ``manifest.*`` properties."""

    inline_max: int = TableProperties.MANIFEST_INLINE_MAX_FILES.default
    leaf_target: int = TableProperties.MANIFEST_LEAF_TARGET_FILES.default
    merge_min_leaves: int = TableProperties.MANIFEST_MERGE_MIN_LEAVES.default
    arrow_root: bool = False  # the root is an Arrow IPC file (feature arrow-root-manifests)
    # The largest root (its Arrow IPC bytes) the version manifest carries; 0: none (a table
    # without the feature inline-root-manifests).
    root_inline_max_bytes: int = 0
    # Leaves of at most ARROW_LEAF_MAX_FILES entries are Arrow IPC files (feature arrow-leaf-manifests).
    arrow_leaves: bool = False

    def leaf_is_arrow(self, entries: int) -> bool:
        """Whether a leaf of that many entries is written as an Arrow IPC file."""
        return self.arrow_leaves and entries <= ARROW_LEAF_MAX_FILES

    @classmethod
    def from_properties(
        cls,
        props: Mapping[str, str],
        arrow_root: bool = False,
        inline_root: bool = False,
        arrow_leaves: bool = False,
    ) -> TreeConfig:
        return cls(
            arrow_leaves=arrow_leaves,
            inline_max=TableProperties.MANIFEST_INLINE_MAX_FILES.get(props),
            leaf_target=TableProperties.MANIFEST_LEAF_TARGET_FILES.get(props),
            merge_min_leaves=TableProperties.MANIFEST_MERGE_MIN_LEAVES.get(props),
            arrow_root=arrow_root or inline_root,
            root_inline_max_bytes=TableProperties.MANIFEST_ROOT_INLINE_MAX_BYTES.get(props) if inline_root else 0,
        )

    @classmethod
    def of(cls, vm: Any) -> TreeConfig:
        """The shape of a version's tree (a ``VersionManifest``): its properties and features."""
        features = vm.writer_features
        return cls.from_properties(
            vm.properties,
            ARROW_ROOT_MANIFESTS in features,
            INLINE_ROOT_MANIFESTS in features,
            ARROW_LEAF_MANIFESTS in features,
        )


@dataclass(frozen=True)
class ChangeResult:
    root_path: str | None
    leaves_written: int
    leaves_carried: int
    files_added: int
    files_removed: int
    rows_added: int
    rows_removed: int
    root_inline: bytes | None = None  # the root's bytes, when the version manifest carries it


def _empty(mschema: pa.Schema) -> pa.Table:
    return mschema.empty_table()


def load_root(io: FileIO, root_path: str | None, mschema: pa.Schema, inline: bytes | None = None) -> pa.Table:
    """A version's root manifest (its ``root_manifest`` and ``root_inline``), in ``mschema``."""
    if root_path is None:
        return _empty(mschema)
    return conform(read_manifest(io, root_path, inline=inline), mschema)


def _live(t: pa.Table) -> pa.Table:
    removed = pc.equal(t.column("status"), C.REMOVED)
    if not pc.any(removed).as_py():
        return t  # the common case: no copy
    return t.filter(pc.invert(removed))


def live_data_entries(
    io: FileIO,
    root_path: str | None,
    mschema: pa.Schema,
    prune: Pruner | None = None,
    columns: list[str] | None = None,
    inline: bytes | None = None,
) -> pa.Table:
    """Live data-file entries of a version, pruned by ``prune`` at both levels.

    ``columns`` limits which manifest columns are read from leaves (the base
    columns plus the statistics ``prune`` uses): planning reads no more than it needs.
    ``inline``: the version's ``root_inline``.
    """
    if columns is not None and "status" not in columns:
        columns = [*columns, "status"]  # liveness is decided on it
    root = _live(load_root(io, root_path, mschema, inline))
    if prune is not None and root.num_rows:
        root = root.filter(prune(root))
    out_schema = mschema if columns is None else pa.schema([mschema.field(c) for c in columns])
    is_leaf = pc.equal(root.column("content"), C.LEAF)
    leaf_paths = root.filter(is_leaf).column("path").to_pylist()
    parts = [conform(root.filter(pc.invert(is_leaf)), out_schema)]
    if leaf_paths:
        leaves = [conform(t, out_schema) for t in read_manifests(io, leaf_paths, columns)]
        entries = _live(pa.concat_tables(leaves))
        if prune is not None and entries.num_rows:
            entries = entries.filter(prune(entries))
        parts.append(entries)
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def _null_if_any_null(col: pa.ChunkedArray, agg: str) -> object:
    if col.null_count:
        return None
    if len(col) == 0:
        return None
    if pa.types.is_floating(col.type) and pc.any(pc.is_nan(col)).as_py():
        return None  # Arrow's min/max skip NaN (a NaN partition value): the bound would leave it out
    return getattr(pc, agg)(col).as_py()


def leaf_summary(entries: pa.Table, path: str, size: int, version: int, mschema: pa.Schema) -> dict:
    """The root row describing a leaf: counts, and bounds over its live files.

    A bound is unknown (null) if any live file's bound is unknown, so pruning on
    the summary can never skip a leaf that holds a match.
    """
    live = _live(entries)
    av = entries.column("added_version")
    row: dict = {
        "content": C.LEAF,
        "status": C.ADDED,
        "path": path,
        "size": size,
        "record_count": pc.sum(live.column("record_count")).as_py() or 0,
        "file_count": live.num_rows,
        "added_version": pc.min(av).as_py() if len(av) else version,
        "max_added_version": pc.max(av).as_py() if len(av) else version,
        "removed_version": None,
        "spec_id": 0,
        "partition_path": None,
    }
    for name in mschema.names:
        if name in row:
            # Bookkeeping columns are set above; ``max_added_version`` starts with "max_" but
            # is no column bound (its entries hold null: taken as one it nulled the summary,
            # and removals read every leaf instead of pruning by added_version).
            continue
        if not live.num_rows:  # a leaf left with removed entries only (a delete that touched all its files)
            row[name] = 0 if name.startswith("nulls_") else None
        elif name.startswith(("min_", "pmin_")):
            row[name] = _null_if_any_null(live.column(name), "min")
        elif name.startswith(("max_", "pmax_")):
            row[name] = _null_if_any_null(live.column(name), "max")
        elif name.startswith("nulls_"):
            col = live.column(name)
            row[name] = None if col.null_count else (pc.sum(col).as_py() or 0)
    return row


def _set_removed(t: pa.Table, mask: pa.Array, version: int) -> pa.Table:
    status = pc.if_else(mask, pa.scalar(C.REMOVED, pa.int8()), t.column("status"))
    removed = pc.if_else(mask, pa.scalar(version, pa.int64()), t.column("removed_version"))
    t = t.set_column(t.schema.get_field_index("status"), t.schema.field("status"), status)
    return t.set_column(t.schema.get_field_index("removed_version"), t.schema.field("removed_version"), removed)


def _joined(tables: list[pa.Table]) -> pa.Table:
    """The rows of ``tables`` (one schema) as a table of one record batch, in one concatenation:
    what the root's encoding works on (a concatenation of tables would leave a chunk per table
    in every column, for the encoding to combine again)."""
    batches = [b for t in tables for b in t.to_batches()]
    return pa.Table.from_batches([pa.concat_batches(batches)]) if batches else pa.concat_tables(tables)


def _np(t: pa.Table, name: str, null: int = -1) -> np.ndarray:
    col = t.column(name)
    return (col.fill_null(null) if col.null_count else col).to_numpy()


def _age(t: pa.Table, version: int) -> pa.Table:
    """Rewrite for carrying into ``version``: old REMOVED entries go, ADDED becomes EXISTING."""
    return _aged(t, version, _np(t, "status"))[0]


def _aged(t: pa.Table, version: int, st: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """``_age`` given ``t``'s status column as numpy ``st``; also returns the new status column.

    numpy on the bookkeeping columns: on a small root that is cheaper than the fixed cost of
    each Arrow kernel call. ``removed_version`` is only read when an
    entry is REMOVED (a root never holds one here: the commit drops them first)."""
    removed = st == C.REMOVED
    if removed.any():
        keep = ~removed | (_np(t, "removed_version") == version)
        if not keep.all():
            t = t.filter(pa.array(keep))
            st = st[keep]
    aged = (st == C.ADDED) & (_np(t, "added_version") < version)
    if not aged.any():
        return t, st
    st = np.where(aged, C.EXISTING, st).astype(np.int8)
    i = t.schema.get_field_index("status")
    return t.set_column(i, t.schema.field(i), pa.array(st)), st


class _Writer:
    def __init__(self, io: FileIO, mschema: pa.Schema, version: int, cfg: TreeConfig) -> None:
        self.io, self.mschema, self.version, self.cfg = io, mschema, version, cfg
        self.written = 0
        self.written_paths: list[str] = []  # the leaves this change wrote (a few)

    def wrote(self, path: str) -> None:
        self.written += 1
        self.written_paths.append(path)

    def leaves(self, entries: pa.Table) -> list[dict]:
        """Write entries as leaves of at most leaf_target entries; return their root rows."""
        rows = []
        step = self.cfg.leaf_target
        for start in range(0, entries.num_rows, step):
            chunk = entries.slice(start, step)
            path, size = write_manifest(self.io, chunk, "leaf", self.cfg.leaf_is_arrow(chunk.num_rows))
            self.wrote(path)
            rows.append(leaf_summary(chunk, path, size, self.version, self.mschema))
        return rows


def apply_change(
    io: FileIO,
    base_root: str | None,
    mschema: pa.Schema,
    version: int,
    added: pa.Table,
    removed: pa.Table,
    cfg: TreeConfig,
    base_inline: bytes | None = None,
    root_path: str | None = None,
) -> ChangeResult:
    """Write the manifests of ``version``: the base tree (root ``base_root``, ``base_inline`` if
    its version carries it) plus ``added`` minus ``removed``. The new root is written as a file,
    or returned in the result for the version manifest to carry (``cfg.root_inline_max_bytes``).
    ``root_path``: the new root's name (a commit's: lamina.spec.slot.commit_root_path), else random.

    ``removed`` has columns ``path`` and ``added_version`` (used to find the leaves
    holding them without reading every leaf). Raises MissingFiles if a removed
    file is not live in the base.
    """
    w = _Writer(io, mschema, version, cfg)
    root = load_root(io, base_root, mschema, base_inline)
    if not removed.num_rows and added.num_rows:
        appended = _append_inline(io, root, base_root, conform(added, mschema), version, cfg, root_path)
        if appended is not None:
            return appended
    # The bookkeeping columns as numpy, read once and kept in step with ``root`` below
    # (each read of a column costs more than the arithmetic on a small root).
    content, status = _np(root, "content"), _np(root, "status")
    # Drop what earlier versions already recorded: old REMOVED inline entries and
    # leaves left with nothing live.
    stale = (status == C.REMOVED) | ((content == C.LEAF) & (_np(root, "file_count") == 0))
    if stale.any():
        root = root.filter(pa.array(~stale))
        content, status = content[~stale], status[~stale]
    root, status = _aged(root, version, status)

    files_removed = rows_removed = 0
    if removed.num_rows:
        want = removed.column("path")
        is_data = pc.equal(root.column("content"), C.DATA)
        hit = pc.and_kleene(is_data, pc.is_in(root.column("path"), value_set=want))
        n_inline = pc.sum(hit).as_py() or 0
        if n_inline:
            rows_removed += pc.sum(root.filter(hit).column("record_count")).as_py() or 0
            root = _set_removed(root, hit, version)
        found = set(root.filter(hit).column("path").to_pylist()) if n_inline else set()
        files_removed += n_inline
        remaining = removed.filter(
            pc.invert(pc.is_in(removed.column("path"), value_set=pa.array(list(found), pa.string())))
        )
        if remaining.num_rows:
            root, n, r, still = _remove_from_leaves(w, root, remaining)
            files_removed += n
            rows_removed += r
            if still:
                raise MissingFiles(still)
        content, status = _np(root, "content"), _np(root, "status")

    if added.num_rows:
        added = conform(added, mschema)
        inline_live = (content == C.DATA) & (status != C.REMOVED)
        n_inline = int(inline_live.sum())
        if n_inline + added.num_rows <= cfg.inline_max:
            root = _joined([root, added])
            content = np.concatenate([content, _np(added, "content")])
        else:
            # Flush inline files together with the new ones into leaves, grouped by partition
            # so leaf summaries stay tight for partition pruning.
            flush = pa.concat_tables([root.filter(pa.array(inline_live)), added])
            if flush.column("partition_path").null_count < flush.num_rows:
                flush = flush.sort_by([("partition_path", "ascending"), ("added_version", "ascending")])
            root = root.filter(pa.array(~inline_live))
            root = pa.concat_tables([root, pa.Table.from_pylist(w.leaves(flush), schema=mschema)])
            content = _np(root, "content")

    root, content = _merge_small_leaves(w, root, content)
    rows_added = int(_np(added, "record_count").sum()) if added.num_rows else 0
    # Carried = base leaves the new root still references: its leaves but those this change
    # wrote and kept. Not "minus leaves written": a leaf written by this change and then
    # merged away counts as written but is in no root, which made the difference negative.
    leaves = int((content == C.LEAF).sum())
    if leaves and w.written_paths:
        kept = pc.is_in(root.column("path"), value_set=pa.array(w.written_paths, pa.string()))
        leaves -= pc.sum(kept).as_py() or 0
    carried = leaves
    new_root = root_inline = None
    if root.num_rows:
        new_root, _, root_inline = write_root(io, root, cfg.arrow_root, cfg.root_inline_max_bytes, root_path)
        _remember_shape(io, new_root, _shape_of(root, version, cfg))
    return ChangeResult(
        new_root, w.written, carried, added.num_rows, files_removed, rows_added, rows_removed, root_inline
    )


@dataclass(frozen=True)
class _RootShape:
    """What a commit appending to a root needs to know of it, as the commit that built it knew
    it: its ``content`` and ``status`` columns (Python lists: a root is small, and on it each
    numpy or Arrow call costs more than the work), whether it holds anything stale (a REMOVED
    entry, a leaf with no live file), and how many of its leaves are small enough to merge."""

    version: int  # the version it was built for: its ADDED entries were added by it
    content: list[int]
    status: list[int]
    stale: bool
    small_leaves: int
    leaf_target: int  # what "small" was counted against

    @property
    def inline_live(self) -> int:
        return sum(1 for c, s in zip(self.content, self.status) if c == C.DATA and s != C.REMOVED)


# Shapes of the roots this process built lately, by (table, root name): names are unique, and a
# root is immutable, so a shape is right for as long as its root exists.
_shapes: OrderedDict[tuple[str, str], _RootShape] = OrderedDict()
_SHAPES_MAX = 64
_shapes_lock = threading.Lock()


def _shape_of(root: pa.Table, version: int, cfg: TreeConfig) -> _RootShape:
    content, status = _np(root, "content"), _np(root, "status")
    leaves = content == C.LEAF
    files = _np(root, "file_count")
    return _RootShape(
        version,
        content.tolist(),
        status.tolist(),
        stale=bool((status == C.REMOVED).any() or (leaves & (files == 0)).any()),
        small_leaves=int((leaves & (files < max(1, cfg.leaf_target // 2))).sum()),
        leaf_target=cfg.leaf_target,
    )


def _remember_shape(io: FileIO, root_path: str, shape: _RootShape) -> None:
    with _shapes_lock:
        _shapes[(io.uri, root_path)] = shape
        while len(_shapes) > _SHAPES_MAX:
            _shapes.popitem(last=False)


def _append_inline(
    io: FileIO,
    root: pa.Table,
    base_root: str | None,
    added: pa.Table,
    version: int,
    cfg: TreeConfig,
    root_path: str | None,
) -> ChangeResult | None:
    """``apply_change`` of files added inline to a root this process built (an append, most
    often), from its shape: what the general path reads from the root's columns and works
    out with numpy, a few list operations here. None when the general path must run: a root
    whose shape is not known, with stale entries, without room for the files, or due for a
    merge of its small leaves."""
    if base_root is None:
        return None
    with _shapes_lock:
        shape = _shapes.get((io.uri, base_root))
    if (
        shape is None
        or shape.stale
        or shape.leaf_target != cfg.leaf_target
        or shape.small_leaves >= cfg.merge_min_leaves
        or shape.inline_live + added.num_rows > cfg.inline_max
    ):
        return None
    status = shape.status
    if shape.version < version and C.ADDED in status:  # carried into a later version: ADDED becomes EXISTING
        status = [C.EXISTING if s == C.ADDED else s for s in status]
        i = root.schema.get_field_index("status")
        root = root.set_column(i, root.schema.field(i), pa.array(status, pa.int8()))
    root = _joined([root, added])
    content = shape.content + added.column("content").to_pylist()
    status = status + added.column("status").to_pylist()
    new_root, _, root_inline = write_root(io, root, cfg.arrow_root, cfg.root_inline_max_bytes, root_path)
    _remember_shape(
        io,
        new_root,
        _RootShape(
            version,
            content,
            status,
            stale=C.REMOVED in status,
            small_leaves=shape.small_leaves,
            leaf_target=cfg.leaf_target,
        ),
    )
    rows_added = int(_np(added, "record_count").sum())
    leaves = content.count(C.LEAF)
    return ChangeResult(new_root, 0, leaves, added.num_rows, 0, rows_added, 0, root_inline)


def _remove_from_leaves(w: _Writer, root: pa.Table, remaining: pa.Table) -> tuple[pa.Table, int, int, list[str]]:
    """Copy-on-write the leaves holding ``remaining`` files; returns the new root."""
    is_leaf = pc.equal(root.column("content"), C.LEAF).to_numpy(zero_copy_only=False)
    lo = root.column("added_version").to_numpy()
    hi = root.column("max_added_version").fill_null(np.iinfo(np.int64).max).to_numpy()
    av = np.sort(remaining.column("added_version").to_numpy())
    # A leaf can hold one of the files only if some file's added_version is within
    # the leaf's [min, max] added_version: one searchsorted over all leaves.
    first_ge = np.searchsorted(av, lo, side="left")
    candidate = is_leaf & (first_ge < len(av)) & (av[np.minimum(first_ge, len(av) - 1)] <= hi)
    idx = np.nonzero(candidate)[0]
    if not len(idx):
        return root, 0, 0, remaining.column("path").to_pylist()
    want = remaining.column("path")
    tables = read_manifests(w.io, root.column("path").take(pa.array(idx)).to_pylist())
    drop = np.zeros(root.num_rows, dtype=bool)
    new_rows: list[dict] = []
    found: set[str] = set()
    n_files = n_rows = 0
    for i, leaf in zip(idx, tables):
        leaf = conform(leaf, w.mschema)
        hit = pc.and_kleene(
            pc.is_in(leaf.column("path"), value_set=want), pc.not_equal(leaf.column("status"), C.REMOVED)
        )
        k = pc.sum(hit).as_py() or 0
        if not k:
            continue
        found.update(leaf.filter(hit).column("path").to_pylist())
        n_files += k
        n_rows += pc.sum(leaf.filter(hit).column("record_count")).as_py() or 0
        leaf = _age(_set_removed(leaf, hit, w.version), w.version)
        path, size = write_manifest(w.io, leaf, "leaf", w.cfg.leaf_is_arrow(leaf.num_rows))
        w.wrote(path)
        drop[i] = True
        new_rows.append(leaf_summary(leaf, path, size, w.version, w.mschema))
    root = root.filter(pa.array(~drop))
    if new_rows:
        root = pa.concat_tables([root, pa.Table.from_pylist(new_rows, schema=w.mschema)])
    missing = [p for p in remaining.column("path").to_pylist() if p not in found]
    return root, n_files, n_rows, missing


def _merge_small_leaves(w: _Writer, root: pa.Table, content: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """``root`` with its small leaves merged once ``merge_min_leaves`` of them accumulate; given
    and returning the root's content column as numpy."""
    is_leaf = content == C.LEAF
    if int(is_leaf.sum()) < w.cfg.merge_min_leaves:
        return root, content  # too few leaves of any size: no need to read their sizes
    small = is_leaf & (_np(root, "file_count") < max(1, w.cfg.leaf_target // 2))
    if int(small.sum()) < w.cfg.merge_min_leaves:
        return root, content
    paths = root.filter(pa.array(small)).column("path").to_pylist()
    merged = pa.concat_tables([_age(conform(t, w.mschema), w.version) for t in read_manifests(w.io, paths)])
    if merged.column("partition_path").null_count < merged.num_rows:
        merged = merged.sort_by([("partition_path", "ascending"), ("added_version", "ascending")])
    root = root.filter(pa.array(~small))
    root = pa.concat_tables([root, pa.Table.from_pylist(w.leaves(merged), schema=w.mschema)])
    return root, _np(root, "content")
