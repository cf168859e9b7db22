"""Compaction and manifest rewrite."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.commit import Base, flush_hints
from lamina.errors import CorruptMetadata, InvalidArgument, InvalidPredicate, SchemaMismatch
from lamina.maintenance import fsck
from lamina.operations.compaction import CompactFiles
from lamina.data.inflight import new_write_id

from support.small_files import SCHEMA, batch, ids, small_files


@pytest.fixture
def table(tmp_path):
    yield small_files(tmp_path)
    flush_hints()


def test_compaction_bin_packs_per_partition_and_applies_deletes(table):
    table.delete("id < 15")
    before = ids(table.to_arrow())
    r = table.maintenance.compact(target_file_size=1 << 20, sort_by="id")
    # 24 files, 2 of them fully deleted (ids 0-9): 22 in, one file per partition out
    assert (r.files_before, r.files_after, r.groups) == (22, 2, 2)
    assert ids(table.to_arrow()) == before and table.scan().count() == 105
    assert table.inspect.files().column("dv_path").null_count == 2  # deletes folded into the outputs
    got = table.scan(where="cat = 'a'", columns=["id"]).to_arrow().column("id").to_pylist()
    assert got == sorted(got)  # sorted output
    assert table.maintenance.compact(target_file_size=1 << 20).version is None  # nothing left to do
    for v in range(table.version + 1):
        assert table.scan(version=v).count() == table.log.load(v).summary["total-records"]
    assert fsck(table).ok
    with pytest.raises(InvalidArgument):
        table.maintenance.compact(target_file_size=0)


@pytest.mark.parametrize("bad, error", [({"sort_by": "nope"}, SchemaMismatch), ({"where": "nope > 1"}, InvalidPredicate),
                                        ({"sort_by": ["id", "nope"]}, SchemaMismatch)])
def test_compaction_by_an_unknown_column_fails_and_changes_nothing(table, bad, error):
    """A filter or sort column the table does not have: a typed error naming it, no version,
    no file written."""
    version, before = table.version, sorted(os.listdir(os.path.join(table.uri, "data")))
    with pytest.raises(error, match="nope"):
        table.maintenance.compact(target_file_size=1 << 20, **bad)
    assert lamina.open_table(table.uri).version == version
    assert sorted(os.listdir(os.path.join(table.uri, "data"))) == before


def test_compaction_binds_its_columns_at_the_latest_version(table):
    """A handle behind the latest compacts the latest: a column another writer added since
    sorts the outputs, a filter on it selects, and the files appended since are inputs."""
    other = lamina.open_table(table.uri)
    other.update_schema().add_column("rank", pa.int64()).commit()
    other.append(pa.table({"id": [1000, 1001], "cat": ["a", "a"], "rank": [2, 1]}))
    r = table.maintenance.compact(target_file_size=1 << 20, where="rank IS NULL OR rank > 0", sort_by="cat, rank")
    assert r.files_before == 25 and r.input_files == 25 and r.files_after == 2
    got = table.scan(where="cat = 'a'", columns=["rank"]).to_arrow().column("rank").to_pylist()
    n = len(got) - 2
    assert got in ([1, 2] + [None] * n, [None] * n + [1, 2])  # by rank within the partition (nulls at one end)


def test_compaction_where_limits_the_inputs(table):
    r = table.maintenance.compact(target_file_size=1 << 20, where="cat = 'a'")
    assert r.groups == 1 and r.input_files == 12 and r.files_after == 13


def test_concurrent_delete_on_an_input_is_carried_into_the_output(table):
    op = CompactFiles(None, 1 << 20, 1 << 19, [], new_write_id())
    vm = table.refresh().metadata
    op.apply(Base(table.io, vm, vm.version + 1))  # outputs computed from the inputs as they were
    other = lamina.open_table(table.uri)
    other.delete("id = 7 OR id = 8")  # lands first, on two of the inputs
    other.append(batch(500, 502))  # and an append: never a conflict
    table.transaction().add_operation(op).commit()
    got = ids(table.refresh().to_arrow())
    assert 7 not in got and 8 not in got and 500 in got and 501 in got  # no resurrection, no loss
    assert len(got) == 120 - 2 + 2


def test_streamed_compaction_splits_files_keeps_stats_and_reads_older_files(tmp_path):
    """Unpartitioned, no sort order: the output is written row group by row group while
    the inputs are read. Files roll over at write.max-rows-per-file, every file's stats
    describe its rows, deletes are applied, and a file written before a column existed
    (and with a narrower id type) reads with nulls."""
    t = lamina.create_table(str(tmp_path / "s"), SCHEMA, properties={"write.max-rows-per-file": 25})
    for i in range(6):
        t.append(batch(i * 10, i * 10 + 10))
    old = os.path.join(t.uri, "data/older.parquet")
    pq.write_table(pa.table({"id": pa.array(range(60, 65), pa.int32())}), old)
    t.add_files(pa.table({"path": ["data/older.parquet"], "size": [os.path.getsize(old)], "record_count": [5]}))
    t.delete("id < 3 OR id = 61")
    want = ids(t.to_arrow())
    r = t.maintenance.compact(target_file_size=1 << 20)
    assert (r.input_files, r.rows_written) == (7, 61) and r.output_files == 3  # 25 + 25 + 11 rows
    got = t.to_arrow()
    assert ids(got) == want and t.inspect.files().column("dv_path").null_count == 3
    assert sorted(got.filter(pa.compute.is_null(got.column("cat"))).column("id").to_pylist()) == [60, 62, 63, 64]
    for f in t.inspect.files().to_pylist():
        rows = pq.read_table(os.path.join(t.uri, f["path"]))
        assert f["record_count"] == rows.num_rows <= 25
        assert (f["lower.id"], f["upper.id"]) == (min(rows.column("id").to_pylist()), max(rows.column("id").to_pylist()))
        assert f["null_count.cat"] == rows.column("cat").null_count
    assert fsck(t).ok


def test_compaction_of_a_missing_input_is_corrupt_metadata(tmp_path):
    t = lamina.create_table(str(tmp_path / "gone"), SCHEMA)
    for i in range(3):
        t.append(batch(i * 10, i * 10 + 10))
    os.remove(os.path.join(t.uri, t.inspect.files().column("path")[1].as_py()))
    with pytest.raises(CorruptMetadata, match="missing"):
        t.maintenance.compact(target_file_size=1 << 20)
    assert t.version == 3  # nothing committed


@pytest.mark.slow  # ten thousand files
def test_ten_thousand_small_files_compact_in_one_version(tmp_path):
    t = lamina.create_table(str(tmp_path / "many"), SCHEMA)
    n = 10_000
    os.makedirs(os.path.join(t.uri, "data"))
    # 10 distinct files, each hard-linked 1,000 times under its own name: 10,000 inputs
    # without spending the test's time writing Parquet
    rows = []
    for i in range(10):
        src = os.path.join(t.uri, f"data/src-{i}.parquet")
        pq.write_table(batch(i, i + 1), src, compression="none")
        for j in range(n // 10):
            rel = f"data/seed-{i}-{j:04d}.parquet"
            os.link(src, os.path.join(t.uri, rel))
            rows.append((rel, os.path.getsize(src)))
    t.add_files(pa.table({"path": [r[0] for r in rows], "size": [r[1] for r in rows], "record_count": [1] * n}))
    v = t.version
    r = t.maintenance.compact(target_file_size=64 << 20)
    assert r.version == v + 1 and r.input_files == n and r.output_files == 1
    assert t.scan().count() == n and ids(t.to_arrow()) == sorted(list(range(10)) * (n // 10))


def test_rewrite_manifests_keeps_every_file_and_version(tmp_path):
    t = lamina.create_table(str(tmp_path / "m"), SCHEMA, properties={"manifest.inline-max-files": 2, "manifest.leaf-target-files": 3})
    for i in range(10):
        t.append(batch(i * 5, i * 5 + 5))
    leaves_before = (t.inspect.manifests().column("kind").to_pylist()).count("leaf")
    want = ids(t.to_arrow())
    t.maintenance.rewrite_manifests()
    assert ids(t.to_arrow()) == want and leaves_before >= 3
    assert t.metadata.operation == "rewrite-manifests"
    assert sorted(t.inspect.files().column("added_version").to_pylist()) == sorted(t.inspect.files(version=t.version - 1).column("added_version").to_pylist())
    assert fsck(t).ok


