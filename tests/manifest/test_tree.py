"""The manifest tree (lamina.manifest.tree), driven directly through ``apply_change``.

A hypothesis model: random sequences of commits adding and removing data-file entries,
under random tree shapes (``TreeConfig``: inline limit, leaf size, merge threshold), must
leave ``live_data_entries`` equal to a plain Python dict of the live files, keep the
documented shape (docs/format.md, "Manifest tree": inline limit, leaf size, leaf
summaries, REMOVED entries recorded by the version that removed them), rewrite only what
a change touches (copy-on-write), and a pruning callback applied at both levels must keep
every entry whose own bounds admit the value.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.io import FileIO
from lamina.manifest.entries import data_entries, manifest_schema
from lamina.manifest.files import read_manifest
from lamina.manifest.tree import MissingFiles, TreeConfig, apply_change, live_data_entries, load_root
from lamina.spec import content as C
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema

SCHEMA = Schema.from_arrow(pa.schema([("x", pa.int64())]))  # field id 1: bounds min_1 / max_1
MSCHEMA = manifest_schema(SCHEMA, PartitionSpec())
LO, HI = "min_1", "max_1"


def memory_io() -> FileIO:
    return FileIO(f"memory://tree-{uuid.uuid4().hex[:12]}")


class Model:
    """The live files: path -> (added_version, record_count, lower bound, upper bound)."""

    def __init__(self) -> None:
        self.live: dict[str, tuple[int, int, int | None, int | None]] = {}
        self.n = 0

    def new_files(self, specs: list[tuple[int, int | None, int | None, str | None]], version: int) -> pa.Table:
        files = []
        for rows, lo, hi, part in specs:
            path = f"data/f{self.n:05d}.parquet"
            self.n += 1
            if lo is not None and hi is not None and lo > hi:
                lo, hi = hi, lo
            self.live[path] = (version, rows, lo, hi)
            files.append({"path": path, "size": 100 + rows, "record_count": rows, "partition_path": part,
                          LO: lo, HI: hi, "nulls_1": 0})
        return data_entries(files, MSCHEMA, version, 0)

    def removal(self, paths: list[str]) -> pa.Table:
        return pa.table({"path": pa.array(paths, pa.string()),
                         "added_version": pa.array([self.live[p][0] for p in paths], pa.int64())})


def entries_by_path(t: pa.Table) -> dict[str, tuple]:
    rows = t.select(["path", "added_version", "record_count", LO, HI]).to_pylist()
    return {r["path"]: (r["added_version"], r["record_count"], r[LO], r[HI]) for r in rows}


def tree_of(io: FileIO, root_path: str | None) -> tuple[pa.Table, dict[str, pa.Table]]:
    """The root's rows and every leaf it references (all entries, every status)."""
    root = load_root(io, root_path, MSCHEMA)
    leaves = root.filter(pc.equal(root.column("content"), C.LEAF)).column("path").to_pylist()
    return root, {p: read_manifest(io, p) for p in leaves}


def live(t: pa.Table) -> pa.Table:
    return t.filter(pc.not_equal(t.column("status"), C.REMOVED))


def bound(values: list, agg) -> object:
    """A leaf's bound over its live files: unknown if any file's is (docs/format.md)."""
    return None if not values or any(v is None for v in values) else agg(values)


def check_shape(io: FileIO, root_path: str | None, cfg: TreeConfig) -> None:
    root, leaves = tree_of(io, root_path)
    inline = live(root.filter(pc.equal(root.column("content"), C.DATA)))
    assert inline.num_rows <= max(cfg.inline_max, 0), "more live files inline than manifest.inline-max-files"
    for leaf_row in root.filter(pc.equal(root.column("content"), C.LEAF)).to_pylist():
        entries = leaves[leaf_row["path"]]
        alive = live(entries)
        assert alive.num_rows <= cfg.leaf_target, "a leaf over manifest.leaf-target-files"
        # the leaf's row in the root summarises its live files
        assert leaf_row["file_count"] == alive.num_rows
        assert leaf_row["record_count"] == sum(alive.column("record_count").to_pylist())
        assert leaf_row["added_version"] == min(entries.column("added_version").to_pylist())
        assert leaf_row["max_added_version"] == max(entries.column("added_version").to_pylist())
        assert leaf_row[LO] == bound(alive.column(LO).to_pylist(), min)
        assert leaf_row[HI] == bound(alive.column(HI).to_pylist(), max)


shapes = st.builds(TreeConfig, inline_max=st.integers(0, 4), leaf_target=st.integers(1, 5), merge_min_leaves=st.integers(2, 4))
bounds = st.one_of(st.none(), st.integers(0, 100))
new_file = st.tuples(st.integers(1, 50), bounds, bounds, st.sampled_from([None, "p=0", "p=1"]))
steps = st.lists(
    st.tuples(st.lists(new_file, max_size=6), st.lists(st.integers(0, 10_000), max_size=4, unique=True)),
    min_size=1,
    max_size=10,
)


@settings(max_examples=40, deadline=None)
@given(cfg=shapes, history=steps, probe=st.integers(-5, 105))
def test_the_tree_holds_exactly_the_model_live_files(cfg, history, probe):
    io = memory_io()
    model = Model()
    root_path = None
    for version, (specs, picks) in enumerate(history, start=1):
        candidates = sorted(model.live)
        doomed = sorted({candidates[i % len(candidates)] for i in picks}) if candidates else []
        removed = model.removal(doomed)
        rows_removed = sum(model.live[p][1] for p in doomed)
        for p in doomed:
            del model.live[p]
        added = model.new_files(specs, version)
        base_leaves = set(tree_of(io, root_path)[1])
        result = apply_change(io, root_path, MSCHEMA, version, added, removed, cfg)
        root_path = result.root_path
        assert (result.files_added, result.files_removed) == (added.num_rows, len(doomed))
        assert result.rows_added == sum(added.column("record_count").to_pylist())
        assert result.rows_removed == rows_removed
        # the live files are the model's, with their lifetimes and statistics
        assert entries_by_path(live_data_entries(io, root_path, MSCHEMA)) == model.live
        if not model.live:
            assert root_path is None or live_data_entries(io, root_path, MSCHEMA).num_rows == 0
        check_shape(io, root_path, cfg)
        root, leaves = tree_of(io, root_path)
        # every removal is recorded, in this version's tree, with the version that removed it
        everything = pa.concat_tables([root.filter(pc.equal(root.column("content"), C.DATA)), *leaves.values()])
        gone = everything.filter(pc.equal(everything.column("status"), C.REMOVED))
        recorded = {r["path"] for r in gone.to_pylist() if r["removed_version"] == version}
        assert recorded == set(doomed)
        # copy-on-write: a leaf holding no removed file and too big to be merged is carried as is
        new_leaves = set(leaves)
        assert result.leaves_written >= len(new_leaves - base_leaves)
        assert result.leaves_carried == len(new_leaves & base_leaves)
        for path in base_leaves:
            old = read_manifest(io, path)
            touched = bool(set(old.column("path").to_pylist()) & set(doomed))
            big = live(old).num_rows >= max(1, cfg.leaf_target // 2)
            if not touched and big:
                assert path in new_leaves, "an untouched leaf was rewritten"
    # pruning at both levels (leaf summaries, then entries) keeps every file that may hold x
    def may_hold(t: pa.Table) -> pa.Array:
        return pc.fill_null(pc.and_(pc.less_equal(t.column(LO), probe), pc.greater_equal(t.column(HI), probe)), True)

    want = {p for p, (_, _, lo, hi) in model.live.items() if lo is None or hi is None or lo <= probe <= hi}
    assert set(live_data_entries(io, root_path, MSCHEMA, may_hold).column("path").to_pylist()) == want
    cols = ["content", "path", "added_version", "record_count", LO, HI]
    narrow = live_data_entries(io, root_path, MSCHEMA, may_hold, cols)
    assert set(narrow.column("path").to_pylist()) == want and set(narrow.column_names) == set(cols) | {"status"}


def test_removing_a_file_that_is_not_live_raises_missing_files():
    io = memory_io()
    model = Model()
    cfg = TreeConfig(inline_max=1, leaf_target=2)
    first = apply_change(io, None, MSCHEMA, 1, model.new_files([(5, 0, 9, None)] * 3, 1), model.removal([]), cfg)
    gone = model.removal(["data/f00000.parquet"])
    second = apply_change(io, first.root_path, MSCHEMA, 2, MSCHEMA.empty_table(), gone, cfg)
    for base, removal in ((second.root_path, gone),  # removed already
                          (first.root_path, pa.table({"path": ["data/never.parquet"], "added_version": [1]}))):
        with pytest.raises(MissingFiles) as info:
            apply_change(io, base, MSCHEMA, 3, MSCHEMA.empty_table(), removal, cfg)
        assert info.value.paths == removal.column("path").to_pylist()
    assert set(entries_by_path(live_data_entries(io, second.root_path, MSCHEMA))) == {"data/f00001.parquet", "data/f00002.parquet"}


def test_appends_that_fit_inline_write_no_leaf_and_carry_every_leaf():
    io = memory_io()
    model = Model()
    cfg = TreeConfig(inline_max=2, leaf_target=4, merge_min_leaves=8)
    r = apply_change(io, None, MSCHEMA, 1, model.new_files([(1, 1, 1, None)] * 7, 1), model.removal([]), cfg)
    leaves = set(tree_of(io, r.root_path)[1])
    assert len(leaves) == 2 and r.leaves_written == 2  # 7 files over the inline limit: leaves of <= 4
    r = apply_change(io, r.root_path, MSCHEMA, 2, model.new_files([(1, 2, 2, None)], 2), model.removal([]), cfg)
    assert (r.leaves_written, r.leaves_carried) == (0, 2) and set(tree_of(io, r.root_path)[1]) == leaves


def test_a_leafs_max_added_version_is_the_newest_of_its_entries():
    """docs/format.md: a leaf's row in the root carries ``max_added_version``, "leaf: largest
    added_version over its entries"; removal uses [added_version, max_added_version] to find
    the leaves that can hold a file without reading the others."""
    io = memory_io()
    model = Model()
    cfg = TreeConfig(inline_max=0, leaf_target=10, merge_min_leaves=8)
    r = apply_change(io, None, MSCHEMA, 1, model.new_files([(1, 1, 1, None)], 1), model.removal([]), cfg)
    r = apply_change(io, r.root_path, MSCHEMA, 2, model.new_files([(1, 2, 2, None)], 2), model.removal([]), cfg)
    root, leaves = tree_of(io, r.root_path)
    for row in root.filter(pc.equal(root.column("content"), C.LEAF)).to_pylist():
        assert row["max_added_version"] == max(leaves[row["path"]].column("added_version").to_pylist()), row


def test_leaves_carried_counts_the_leaves_kept_by_reference_when_small_leaves_merge():
    """Three one-file leaves, then a fourth commit: the small leaves are merged, so no leaf
    of the base is carried. The count (a version's ``leaves-carried`` summary) must say 0,
    the number of base leaves in the new root -- not a negative number."""
    io = memory_io()
    model = Model()
    cfg = TreeConfig(inline_max=0, leaf_target=10, merge_min_leaves=3)
    r = None
    for v in range(1, 5):
        base = set(tree_of(io, r.root_path if r else None)[1])
        r = apply_change(io, r.root_path if r else None, MSCHEMA, v, model.new_files([(1, v, v, None)], v), model.removal([]), cfg)
        new = set(tree_of(io, r.root_path)[1])
        assert r.leaves_carried == len(new & base), (v, r)


def test_a_removal_reads_only_the_leaves_whose_added_versions_admit_the_file(monkeypatch):
    """Five one-file leaves, one per version; removing the file added by version 3 must read
    the one leaf whose [added_version, max_added_version] holds 3 (docs/format.md), not every
    leaf added at or before it."""
    import lamina.manifest.tree as tree

    io = memory_io()
    model = Model()
    cfg = TreeConfig(inline_max=0, leaf_target=10, merge_min_leaves=100)
    r = None
    for v in range(1, 6):
        r = apply_change(io, r.root_path if r else None, MSCHEMA, v, model.new_files([(1, v, v, None)], v), model.removal([]), cfg)
    holder = {p for p, leaf in tree_of(io, r.root_path)[1].items() if leaf.column("added_version").to_pylist() == [3]}
    read: list[str] = []

    def counting(io, paths, columns=None):
        read.extend(paths)
        return real(io, paths, columns)

    real = tree.read_manifests
    monkeypatch.setattr(tree, "read_manifests", counting)
    r = apply_change(io, r.root_path, MSCHEMA, 6, MSCHEMA.empty_table(), model.removal(["data/f00002.parquet"]), cfg)
    assert set(read) == holder and len(read) == 1
    assert r.files_removed == 1 and r.leaves_carried == 4
