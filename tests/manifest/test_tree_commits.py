"""The manifest tree as commits shape it (lamina.manifest.tree): small writes inlined in the
root, then flushed to leaves that later versions carry by reference; a removal rewrites
only the leaf that held the file; leaf summaries keep a NaN partition."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.maintenance import fsck
from lamina.spec import content as C

from support.sample import SCHEMA, batch, ids

NAN = float("nan")


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def test_tree_inlines_small_writes_then_flushes_and_carries_leaves(uri):
    t = lamina.create_table(uri, SCHEMA, properties={"manifest.inline-max-files": "4", "manifest.leaf-target-files": "100", "manifest.merge-min-leaves": "3"})
    from lamina.manifest.files import read_manifest

    def root():
        return read_manifest(t.io, t.metadata.root_manifest, inline=t.metadata.root_inline)

    for i in range(4):
        t.append(batch(i, 1))
    r = root()
    assert pc.all(pc.equal(r.column("content"), C.DATA)).as_py() and r.num_rows == 4
    t.append(batch(4, 1))  # 5 > 4 inline: flushed to one leaf
    r = root()
    assert r.column("content").to_pylist() == [C.LEAF] and r.column("file_count").to_pylist() == [5]
    leaf = r.column("path")[0].as_py()
    t.append(batch(5, 1))
    r = root()
    assert sorted(r.column("content").to_pylist()) == [C.DATA, C.LEAF] and leaf in r.column("path").to_pylist()  # carried by reference
    assert t.metadata.summary["leaves-written"] == 0 and t.metadata.summary["leaves-carried"] == 1
    for i in range(6, 20):
        t.append(batch(i, 1))
    r = root()
    n_leaves = pc.sum(pc.equal(r.column("content"), C.LEAF)).as_py()
    assert n_leaves < 3  # small leaves were merged
    assert ids(t.scan().to_arrow()) == list(range(20))
    assert fsck(t).ok


def test_removal_rewrites_only_the_affected_leaf(uri):
    t = lamina.create_table(uri, SCHEMA, properties={"manifest.inline-max-files": "0", "manifest.leaf-target-files": "10", "write.max-rows-per-file": "1"})
    t.append(batch(0, 10))   # leaf A: ids 0..9
    t.append(batch(10, 10))  # leaf B: ids 10..19
    from lamina.manifest.files import read_manifest

    before = set(read_manifest(t.io, t.metadata.root_manifest, inline=t.metadata.root_inline).column("path").to_pylist())
    t.overwrite(batch(100, 1), where="id = 15 OR id = 100")
    after_root = read_manifest(t.io, t.metadata.root_manifest, inline=t.metadata.root_inline)
    after = set(after_root.column("path").to_pylist())
    assert len(before & after) == 1  # leaf A carried, leaf B rewritten (+ new leaf for the added file)
    assert t.metadata.summary["removed-files"] == 1
    assert ids(t.scan().to_arrow()) == [i for i in range(20) if i != 15] + [100]
    # the removal is recorded in the rewritten leaf with the version that removed it
    leaves = [read_manifest(t.io, p) for p in after - before if p]
    removed = [e for lf in leaves for e in lf.to_pylist() if e["status"] == C.REMOVED]
    assert len(removed) == 1 and removed[0]["removed_version"] == t.version


def test_leaf_summaries_keep_nan_partitions(tmp_path):
    """Identity-partitioned float column, files in leaf manifests: the leaf's partition bounds
    must not leave out a NaN partition (Arrow's min/max skip NaN)."""
    import lamina

    schema = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    t = lamina.create_table(str(tmp_path / "t"), schema, partition_by=["f"], properties={"manifest.inline-max-files": "1"})
    for i, v in enumerate([1.0, NAN, 2.0, -0.0]):
        t.append(pa.table({"id": pa.array([i], pa.int64()), "f": pa.array([v])}))
    t = lamina.open_table(t.uri)
    assert sorted(t.scan(where="f > 1.5").to_arrow()["id"].to_pylist()) == [1, 2]
    assert t.scan(where="f = 'NaN'").to_arrow()["id"].to_pylist() == [1]
    assert sorted(t.scan(where="f = 0").to_arrow()["id"].to_pylist()) == [3]


BOOKKEEPING = ["content", "status", "added_version", "removed_version", "record_count", "file_count"]


def _root_rows(t: lamina.Table) -> list[tuple]:
    """The latest root's bookkeeping, row by row, sorted (names are random: left out)."""
    from lamina.manifest.files import read_manifest

    vm = t.metadata
    root = read_manifest(t.io, vm.root_manifest, inline=vm.root_inline)
    cols = [root.column(c).to_pylist() if c in root.column_names else [None] * root.num_rows for c in BOOKKEEPING]
    return sorted(zip(*cols), key=repr)


@pytest.mark.parametrize("steps", [
    ["append"] * 12,
    ["append", "append", "delete", "append", "append", "tx2", "append", "append", "compact", "append", "append", "append"],
])
def test_appends_from_a_known_root_shape_make_the_roots_the_general_path_makes(tmp_path, monkeypatch, steps):
    """Appends to a root this process built take a shortcut (its shape, remembered); the roots
    they make are those the general path makes from the root's columns, in every way the
    tree records (statuses, versions, counts), through flushes to leaves, leaf merges, removals
    and transactions of several appends; and both tables read back the rows written."""
    from lamina.manifest import tree
    from lamina.manifest.files import clear_cache

    props = {"manifest.inline-max-files": "3", "manifest.merge-min-leaves": "2", "manifest.leaf-target-files": "4"}
    fast = lamina.create_table(str(tmp_path / "fast"), SCHEMA, properties=props)
    slow = lamina.create_table(str(tmp_path / "slow"), SCHEMA, properties=props)
    general = tree._append_inline
    taken = []

    def spy(*a, **k):
        out = general(*a, **k)
        taken.append(out is not None)
        return out

    expected: set[int] = set()
    for i, step in enumerate(steps):
        for t, shortcut in ((fast, True), (slow, False)):
            monkeypatch.setattr(tree, "_append_inline", spy if shortcut else (lambda *a, **k: None))
            if step == "append":
                t.append(batch(10 * i, 2))
            elif step == "tx2":
                with t.transaction() as tx:
                    tx.append(batch(10 * i, 1))
                    tx.append(batch(10 * i + 5, 1))
            elif step == "delete":
                t.delete(f"id = {10 * (i - 1)}")
            else:
                t.maintenance.compact()
        expected |= {10 * i, 10 * i + 1} if step == "append" else {10 * i, 10 * i + 5} if step == "tx2" else set()
        expected -= {10 * (i - 1)} if step == "delete" else set()
        assert _root_rows(fast) == _root_rows(slow), (i, step)
    assert any(taken) and not all(taken)  # the shortcut was taken, and so was the general path
    monkeypatch.setattr(tree, "_append_inline", general)
    clear_cache()
    for t in (fast, slow):
        assert ids(lamina.open_table(t.uri).to_arrow()) == sorted(expected)
