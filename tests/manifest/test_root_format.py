"""Root manifests as Arrow IPC files (feature ``arrow-root-manifests``, docs/format.md "Manifest
tree"): what ``manifest.root-format=arrow`` writes, what ``parquet`` keeps, and what a reader
without the feature does (new tables carry their roots in their version manifests:
test_inline_roots.py). Rows read back are checked against DuckDB reading the table's data
files directly (the oracle knows nothing of manifests)."""

from __future__ import annotations

import os

import duckdb
import pyarrow as pa
import pytest

import lamina
from lamina.errors import CorruptMetadata, InvalidArgument, UnsupportedFeature
from lamina.manifest.files import clear_cache, read_manifest
from lamina.spec import content as C
from lamina.spec import features
from lamina.manifest import tree
from support.features import check_required_by_readers_and_writers
from lamina.spec.features import ARROW_LEAF_MANIFESTS, ARROW_ROOT_MANIFESTS, INLINE_ROOT_MANIFESTS

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def batch(start: int, n: int = 3) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "name": [f"n{i}" for i in range(start, start + n)]}, schema=SCHEMA)


def make(tmp_path, appends: int = 5, **props: str) -> lamina.Table:
    # inline-max-files 2: the appends also flush leaves, so roots reference leaves as well as files
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"manifest.inline-max-files": "2", **props})
    for i in range(appends):
        t.append(batch(10 * i))
    return t


def magic(t: lamina.Table, path: str) -> bytes:
    with open(os.path.join(t.io.uri, path), "rb") as f:
        return f.read(6)


def oracle_ids(t: lamina.Table) -> list[int]:
    """Every id in the table's data files, read by DuckDB (no file is removed in these tests)."""
    files = sorted(os.path.join(t.io.uri, "data", n) for n in os.listdir(os.path.join(t.io.uri, "data")))
    return sorted(r[0] for r in duckdb.execute("select id from read_parquet(?)", [files]).fetchall())


def read_fresh_ids(uri: str, version: int | None = None) -> list[int]:
    clear_cache()  # read the manifests from storage, not the writer's cached copies
    return sorted(lamina.open_table(uri, version=version).to_arrow().column("id").to_pylist())


def test_root_format_arrow_writes_arrow_roots_over_parquet_leaves(tmp_path):
    t = make(tmp_path, **{"manifest.root-format": "arrow", "manifest.leaf-format": "parquet"})
    assert ARROW_ROOT_MANIFESTS in t.metadata.reader_features and ARROW_ROOT_MANIFESTS in t.metadata.writer_features
    assert INLINE_ROOT_MANIFESTS not in t.metadata.reader_features + t.metadata.writer_features
    root = t.metadata.root_manifest
    assert root.endswith(".root.arrow") and magic(t, root) == b"ARROW1"
    clear_cache()
    entries = read_manifest(t.io, root)
    leaves = entries.filter(pa.compute.equal(entries.column("content"), C.LEAF)).column("path").to_pylist()
    assert leaves and all(p.endswith(".leaf.parquet") and magic(t, p)[:4] == b"PAR1" for p in leaves)
    assert read_fresh_ids(t.io.uri) == oracle_ids(t) == sorted(i for k in range(5) for i in range(10 * k, 10 * k + 3))
    # every version's root is one, and time travel reads through them
    for v in range(1, t.version + 1):
        assert read_fresh_ids(t.io.uri, v) == sorted(i for k in range(v) for i in range(10 * k, 10 * k + 3))


def test_root_format_parquet_keeps_parquet_roots_and_no_feature(tmp_path):
    t = make(tmp_path, **{"manifest.root-format": "PARQUET"})
    assert not {ARROW_ROOT_MANIFESTS, INLINE_ROOT_MANIFESTS} & set(t.metadata.reader_features + t.metadata.writer_features)
    assert t.metadata.root_manifest.endswith(".root.parquet") and magic(t, t.metadata.root_manifest)[:4] == b"PAR1"
    assert read_fresh_ids(t.io.uri) == oracle_ids(t)


def test_a_reader_without_the_feature_refuses_arrow_roots_and_reads_parquet_ones(tmp_path, monkeypatch):
    arrow = make(tmp_path / "a", **{"manifest.root-format": "arrow"})
    parquet = make(tmp_path / "p", **{"manifest.root-format": "parquet"})
    monkeypatch.setattr(features, "KNOWN_READER_FEATURES", features.KNOWN_READER_FEATURES - {ARROW_ROOT_MANIFESTS})
    with pytest.raises(UnsupportedFeature, match="arrow-root-manifests.*upgrade lamina"):
        lamina.open_table(arrow.io.uri)
    assert read_fresh_ids(parquet.io.uri) == oracle_ids(parquet)


def test_a_reader_or_writer_without_the_feature_refuses_the_table(tmp_path, monkeypatch):
    t = make(tmp_path, appends=1, **{"manifest.root-format": "arrow"})
    check_required_by_readers_and_writers(t, ARROW_ROOT_MANIFESTS, lambda t: t.append(batch(100)), monkeypatch)


def check_truncated_is_corrupt(t: lamina.Table, manifest: str, kind: str) -> None:
    """``manifest`` cut to its first 40 bytes: reading the table says which is corrupt."""
    path = os.path.join(t.io.uri, manifest)
    with open(path, "rb") as f:
        head = f.read()[:40]
    with open(path, "wb") as f:
        f.write(head)
    clear_cache()
    with pytest.raises(CorruptMetadata, match=rf"{kind}\.arrow is corrupt or truncated.*lamina fsck"):
        lamina.open_table(t.io.uri).to_arrow()


def test_a_truncated_arrow_root_is_reported_as_corrupt(tmp_path):
    t = make(tmp_path, appends=2, **{"manifest.root-format": "arrow"})
    check_truncated_is_corrupt(t, t.metadata.root_manifest, "root")


def test_an_unknown_root_format_is_refused_at_creation(tmp_path):
    with pytest.raises(InvalidArgument, match=r"manifest\.root-format.*inline, arrow, parquet"):
        lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"manifest.root-format": "orc"})
    assert not os.path.exists(tmp_path / "t" / "_lamina")


# --- leaves (feature arrow-leaf-manifests) ------------------------------------------------------


def leaf_paths(t: lamina.Table, version: int | None = None) -> list[str]:
    clear_cache()
    vm = t.metadata if version is None else lamina.open_table(t.io.uri, version=version).metadata
    root = read_manifest(t.io, vm.root_manifest, inline=vm.root_inline)
    return root.filter(pa.compute.equal(root.column("content"), C.LEAF)).column("path").to_pylist()


def test_small_leaves_are_arrow_files_and_large_ones_parquet(tmp_path, monkeypatch):
    """A new table has arrow-leaf-manifests: a leaf of at most ARROW_LEAF_MAX_FILES entries is an
    Arrow IPC file, a larger one Parquet; reads, time travel and a delete that rewrites leaves
    return what DuckDB reads from the data files."""
    monkeypatch.setattr(tree, "ARROW_LEAF_MAX_FILES", 3)  # (1,024 in the format: fewer files here)
    # leaves of 3 entries are flushed, and every 3 of them merged into one of 9
    t = make(tmp_path, appends=12, **{"manifest.leaf-target-files": "9", "manifest.merge-min-leaves": "3"})
    assert ARROW_LEAF_MANIFESTS in t.metadata.reader_features and ARROW_LEAF_MANIFESTS in t.metadata.writer_features
    seen = set()
    for v in range(1, t.version + 1):
        for p in leaf_paths(t, v):
            entries = read_manifest(t.io, p).num_rows
            arrow = entries <= 3
            assert p.endswith(".leaf.arrow" if arrow else ".leaf.parquet"), (p, entries)
            assert magic(t, p) == b"ARROW1" if arrow else magic(t, p)[:4] == b"PAR1"
            seen.add(arrow)
        assert read_fresh_ids(t.io.uri, v) == sorted(i for k in range(v) for i in range(10 * k, 10 * k + 3))
    assert seen == {True, False}, "both kinds of leaf were written"
    want = sorted(set(oracle_ids(t)) - {1, 111})
    t.delete("id = 1 OR id = 111")
    assert read_fresh_ids(t.io.uri) == want
    assert any(p.endswith(".leaf.arrow") for p in leaf_paths(t))


def test_leaf_format_parquet_keeps_every_leaf_parquet_and_no_feature(tmp_path):
    t = make(tmp_path, **{"manifest.leaf-format": "Parquet"})
    assert ARROW_LEAF_MANIFESTS not in t.metadata.reader_features + t.metadata.writer_features
    leaves = leaf_paths(t)
    assert leaves and all(p.endswith(".leaf.parquet") and magic(t, p)[:4] == b"PAR1" for p in leaves)
    assert read_fresh_ids(t.io.uri) == oracle_ids(t)


def test_a_reader_or_writer_without_the_leaf_feature_refuses_the_table(tmp_path, monkeypatch):
    check_required_by_readers_and_writers(make(tmp_path, appends=3), ARROW_LEAF_MANIFESTS, lambda t: t.append(batch(100)), monkeypatch)


def test_a_truncated_arrow_leaf_is_reported_as_corrupt(tmp_path):
    t = make(tmp_path, appends=4)
    (leaf, *_) = [p for p in leaf_paths(t) if p.endswith(".leaf.arrow")]
    check_truncated_is_corrupt(t, leaf, "leaf")


def test_an_unknown_leaf_format_is_refused_at_creation(tmp_path):
    with pytest.raises(InvalidArgument, match=r"manifest\.leaf-format.*arrow, parquet"):
        lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"manifest.leaf-format": "inline"})
    assert not os.path.exists(tmp_path / "t" / "_lamina")
