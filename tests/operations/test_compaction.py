"""Compaction and manifest rewrite (issue 6, item 4)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import CorruptMetadata, InvalidArgument
from lamina.maintenance import fsck
from lamina.maintenance.compaction import CompactFiles
from lamina.table.inflight import new_write_id

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("cat", pa.string())])


def batch(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": list(range(lo, hi)), "cat": ["a" if i % 2 else "b" for i in range(lo, hi)]}, schema=SCHEMA)


def ids(t) -> list[int]:
    return sorted(t.column("id").to_pylist())


@pytest.fixture
def table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    for i in range(12):
        t.append(batch(i * 10, i * 10 + 10))
    yield t
    flush_hints()


def test_compaction_bin_packs_per_partition_and_applies_deletes(table):
    table.delete("id < 15")
    before = ids(table.to_arrow())
    r = table.compact(target_file_size=1 << 20, sort_by="id")
    # 24 files, 2 of them fully deleted (ids 0-9): 22 in, one file per partition out
    assert (r.files_before, r.files_after, r.groups) == (22, 2, 2)
    assert ids(table.to_arrow()) == before and table.scan().count() == 105
    assert table.files().column("dv_path").null_count == 2  # deletes folded into the outputs
    got = table.scan(where="cat = 'a'", columns=["id"]).to_arrow().column("id").to_pylist()
    assert got == sorted(got)  # sorted output
    assert table.compact(target_file_size=1 << 20).version is None  # nothing left to do
    for v in range(table.version + 1):
        assert table.scan(version=v).count() == table.log.load(v).summary["total-records"]
    assert fsck(table).ok
    with pytest.raises(InvalidArgument):
        table.compact(target_file_size=0)


def test_compaction_where_limits_the_inputs(table):
    r = table.compact(target_file_size=1 << 20, where="cat = 'a'")
    assert r.groups == 1 and r.input_files == 12 and r.files_after == 13


def test_concurrent_delete_on_an_input_is_carried_into_the_output(table):
    op = CompactFiles(table, None, 1 << 20, 1 << 19, [], new_write_id())
    op.apply(table.refresh().metadata)  # outputs computed from the inputs as they were
    other = lamina.open_table(table.uri)
    other.delete("id = 7 OR id = 8")  # lands first, on two of the inputs
    other.append(batch(500, 502))  # and an append: never a conflict
    table._commit(op)
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
    r = t.compact(target_file_size=1 << 20)
    assert (r.input_files, r.rows_written) == (7, 61) and r.output_files == 3  # 25 + 25 + 11 rows
    got = t.to_arrow()
    assert ids(got) == want and t.files().column("dv_path").null_count == 3
    assert sorted(got.filter(pa.compute.is_null(got.column("cat"))).column("id").to_pylist()) == [60, 62, 63, 64]
    for f in t.files().to_pylist():
        rows = pq.read_table(os.path.join(t.uri, f["path"]))
        assert f["record_count"] == rows.num_rows <= 25
        assert (f["lower.id"], f["upper.id"]) == (min(rows.column("id").to_pylist()), max(rows.column("id").to_pylist()))
        assert f["null_count.cat"] == rows.column("cat").null_count
    assert fsck(t).ok


def test_compaction_of_a_missing_input_is_corrupt_metadata(tmp_path):
    t = lamina.create_table(str(tmp_path / "gone"), SCHEMA)
    for i in range(3):
        t.append(batch(i * 10, i * 10 + 10))
    os.remove(os.path.join(t.uri, t.files().column("path")[1].as_py()))
    with pytest.raises(CorruptMetadata, match="missing"):
        t.compact(target_file_size=1 << 20)
    assert t.version == 3  # nothing committed


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
    r = t.compact(target_file_size=64 << 20)
    assert r.version == v + 1 and r.input_files == n and r.output_files == 1
    assert t.scan().count() == n and ids(t.to_arrow()) == sorted(list(range(10)) * (n // 10))


def test_rewrite_manifests_keeps_every_file_and_version(tmp_path):
    t = lamina.create_table(str(tmp_path / "m"), SCHEMA, properties={"manifest.inline-max-files": 2, "manifest.leaf-target-files": 3})
    for i in range(10):
        t.append(batch(i * 5, i * 5 + 5))
    leaves_before = (t.manifests().column("kind").to_pylist()).count("leaf")
    want = ids(t.to_arrow())
    t.rewrite_manifests()
    assert ids(t.to_arrow()) == want and leaves_before >= 3
    assert t.metadata.operation == "rewrite-manifests"
    assert sorted(t.files().column("added_version").to_pylist()) == sorted(t.files(version=t.version - 1).column("added_version").to_pylist())
    assert fsck(t).ok


def test_cli_compact(table):
    from typer.testing import CliRunner

    from lamina.cli.main import app

    r = CliRunner().invoke(app, ["compact", table.uri, "--target-mb", "1"])
    assert r.exit_code == 0 and "table files 24 -> 2" in r.output, r.output
    assert "nothing to compact" in CliRunner().invoke(app, ["compact", table.uri]).output


def test_stats_merged_from_row_groups_equal_the_whole_files_stats():
    """A streamed file's stats are merged from its row groups' (nulls add up, NaN makes a
    bound unknown, an all-null row group has no say); they must equal the stats of all
    its rows at once."""
    from lamina.manifest.entries import column_stats
    from lamina.spec.schema import Schema
    from lamina.table.writer import _merged_stats

    schema = Schema.from_arrow(pa.schema([pa.field("i", pa.int64()), pa.field("s", pa.string()), pa.field("f", pa.float64())]))
    parts = [
        pa.table({"i": [5, None, 3], "s": ["m", "b", None], "f": [1.0, 2.0, None]}),
        pa.table({"i": [None, None], "s": [None, None], "f": [None, None]}),
        pa.table({"i": [9, -1], "s": ["z", "c"], "f": [0.5, 7.0]}),
    ]
    parts = [p.cast(schema.arrow) for p in parts]
    whole = pa.concat_tables(parts)
    assert _merged_stats([column_stats(p, schema) for p in parts], schema) == column_stats(whole, schema)
    with_nan = parts + [pa.table({"i": [1], "s": ["a"], "f": [float("nan")]}).cast(schema.arrow)]
    merged = _merged_stats([column_stats(p, schema) for p in with_nan], schema)
    assert merged == column_stats(pa.concat_tables(with_nan), schema)
    assert [v for k, v in merged.items() if k in column_stats(whole, schema) and v is None]  # float bounds unknown


def test_large_files_dictionary_encode_only_repetitive_columns(tmp_path):
    """Data files of many rows dictionary-encode columns with few distinct values and leave
    unique ones (keys, measurements) plain; small files keep Parquet's default."""
    import pyarrow.parquet as pq

    from lamina.table.writer import _DICTIONARY_MIN_ROWS

    n = _DICTIONARY_MIN_ROWS * 2
    big = pa.table({"id": pa.array(range(n), pa.int64()), "cat": pa.array([f"c{i % 7}" for i in range(n)])})
    t = lamina.create_table(str(tmp_path / "t"), big.schema)
    t.append(big)
    t.append(big.slice(0, 100))

    def encodings(path):
        md = pq.read_metadata(os.path.join(t.uri, path))
        return {md.schema.column(c).name: md.row_group(0).column(c).encodings for c in range(md.num_columns)}

    large, small = sorted(t.scan().plan().paths, key=lambda p: -pq.read_metadata(os.path.join(t.uri, p)).num_rows)
    enc = encodings(large)
    assert "RLE_DICTIONARY" in enc["cat"] and "RLE_DICTIONARY" not in enc["id"]
    assert all("RLE_DICTIONARY" in e for e in encodings(small).values())  # Parquet's default
    assert sorted(t.to_arrow().column("id").to_pylist()) == sorted(list(range(n)) + list(range(100)))
