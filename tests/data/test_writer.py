"""The data file writer: column statistics merged from row groups equal the whole file's; no
row-group statistics for float columns (they leave NaN out); dictionary encoding only where
values repeat."""

from __future__ import annotations

import os

import pyarrow as pa

import lamina

NAN = float("nan")


def test_stats_merged_from_row_groups_equal_the_whole_files_stats():
    """A streamed file's stats are merged from its row groups' (nulls add up, NaN makes a
    bound unknown, an all-null row group has no say); they must equal the stats of all
    its rows at once."""
    from lamina.manifest.entries import column_stats
    from lamina.spec.schema import Schema
    from lamina.data.writer import _merged_stats
    from lamina.spec.stats import full_policy

    schema = Schema.from_arrow(pa.schema([pa.field("i", pa.int64()), pa.field("s", pa.string()), pa.field("f", pa.float64())]))
    parts = [
        pa.table({"i": [5, None, 3], "s": ["m", "b", None], "f": [1.0, 2.0, None]}),
        pa.table({"i": [None, None], "s": [None, None], "f": [None, None]}),
        pa.table({"i": [9, -1], "s": ["z", "c"], "f": [0.5, 7.0]}),
    ]
    parts = [p.cast(schema.arrow) for p in parts]
    whole = pa.concat_tables(parts)
    assert _merged_stats([column_stats(p, schema, full_policy(schema)) for p in parts], schema) == column_stats(whole, schema, full_policy(schema))
    with_nan = parts + [pa.table({"i": [1], "s": ["a"], "f": [float("nan")]}).cast(schema.arrow)]
    merged = _merged_stats([column_stats(p, schema, full_policy(schema)) for p in with_nan], schema)
    assert merged == column_stats(pa.concat_tables(with_nan), schema, full_policy(schema))
    assert [v for k, v in merged.items() if k in column_stats(whole, schema, full_policy(schema)) and v is None]  # float bounds unknown


def test_large_files_dictionary_encode_only_repetitive_columns(tmp_path):
    """Data files of many rows dictionary-encode columns with few distinct values and leave
    unique ones (keys, measurements) plain; small files keep Parquet's default."""
    import pyarrow.parquet as pq

    from lamina.data.writer import _DICTIONARY_MIN_ROWS

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


def test_written_files_carry_no_float_row_group_statistics(tmp_path):
    """Other readers (Spark's Parquet reader, Arrow) skip row groups by min/max, which leave
    NaN out; so Lamina writes none for float columns, and keeps them for the rest."""
    import lamina
    import pyarrow.parquet as pq

    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("f", pa.float64()), ("g", pa.float32())]))
    t.append(pa.table({"id": pa.array([1, 2], pa.int64()), "f": [1.0, NAN], "g": pa.array([1, 2], pa.float32())}))
    path = t.io.local_path(t.scan().plan()[0].path)
    rg = pq.read_metadata(path).row_group(0)
    assert [rg.column(i).is_stats_set for i in range(3)] == [True, False, False]
