"""The data file writer: column statistics merged from row groups equal the whole file's; no
row-group statistics for float columns (they leave NaN out); dictionary encoding only where
values repeat."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from support.column_samples import SAMPLES as _SAMPLES, same_rows as _same_rows

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
    unique ones (keys, measurements) plain; small files dictionary-encode their text only."""
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
    enc = encodings(small)
    assert "RLE_DICTIONARY" in enc["cat"] and "RLE_DICTIONARY" not in enc["id"]
    assert sorted(t.to_arrow().column("id").to_pylist()) == sorted(list(range(n)) + list(range(100)))


def test_written_files_carry_no_float_row_group_statistics(tmp_path):
    """Other readers (Spark's Parquet reader, Arrow) skip row groups by min/max, which leave
    NaN out; so Lamina writes none for float columns, and keeps them for the rest."""
    import lamina
    import pyarrow.parquet as pq

    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("f", pa.float64()), ("g", pa.float32())]),
                            properties={"write.parquet.small-file-bytes": "0"})  # (a small file has no footer statistics)
    t.append(pa.table({"id": pa.array([1, 2], pa.int64()), "f": [1.0, NAN], "g": pa.array([1, 2], pa.float32())}))
    path = t.io.local_path(t.scan().plan()[0].path)
    rg = pq.read_metadata(path).row_group(0)
    assert [rg.column(i).is_stats_set for i in range(3)] == [True, False, False]


def _encodings_of(path) -> dict[str, tuple]:
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    return {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).encodings for i in range(meta.num_columns)}


def test_integer_date_and_time_columns_are_delta_encoded_unless_plain_is_asked(tmp_path):
    """A large file's integer, date and timestamp columns without a dictionary are written
    DELTA_BINARY_PACKED (``write.parquet.integer-encoding``, default ``delta``), with
    ``plain`` not; either way every value reads back the same, by Lamina and by DuckDB
    (another reader of the encoding), extremes, nulls and decreasing runs included."""
    import duckdb
    import numpy as np

    n = 20_000
    rng = np.random.default_rng(5)
    u64 = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2)
    u64[:3] = [0, 2**64 - 1, 2**63]
    big = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    big[:2] = [-(2**63), 2**63 - 1]
    data = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)[::-1]),
        "big": pa.array(big, mask=np.arange(n) % 97 == 0),
        "u64": pa.array(u64), "i8": pa.array(rng.integers(-128, 128, n, dtype=np.int8)),
        "day": pa.array(np.arange(n).astype("datetime64[D]")),
        "ts": pa.array((np.arange(n) * 1_000_003).astype("datetime64[us]")).cast(pa.timestamp("us", "UTC")),
        "few": pa.array(np.arange(n) % 4, pa.int32()),  # repeats: a dictionary
        "f": pa.array(rng.random(n)),
    })
    for encoding, delta_columns in [(None, {"id", "big", "u64", "day", "ts"}), ("PLAIN", set())]:
        props = {} if encoding is None else {"write.parquet.integer-encoding": encoding}
        t = lamina.create_table(str(tmp_path / str(encoding)), data.schema, properties=props)
        t.append(data)
        (path,) = [str(tmp_path / str(encoding) / f.path) for f in t.scan().plan()]
        enc = _encodings_of(path)
        assert {c for c, e in enc.items() if "DELTA_BINARY_PACKED" in e} == delta_columns
        assert "RLE_DICTIONARY" in enc["few"] and "RLE_DICTIONARY" in enc["i8"]  # 256 values: repeats
        assert t.to_arrow().equals(data)
        con = duckdb.connect()
        assert con.sql(f"SELECT * FROM read_parquet('{path}')").arrow().read_all().select(["id", "big", "i8", "day"]).equals(
            data.select(["id", "big", "i8", "day"]))
        con.close()


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=40),
       increasing=st.booleans(), typ=st.sampled_from([pa.int64(), pa.int32(), pa.uint64(), pa.int8()]))
def test_dictionary_choice_is_by_distinct_values(values, increasing, typ):
    """A sampled column gets a dictionary when at most half its values (null counted as one) are
    distinct, whether that is found by hashing them or, for strictly increasing integers
    (all distinct), by one comparison pass."""
    from lamina.data.writer import _few_distinct

    lo, hi = (0, 2**64 - 1) if typ == pa.uint64() else (-(2 ** (typ.bit_width - 1)), 2 ** (typ.bit_width - 1) - 1)
    values = [None if v is None else lo + (v - -(2**63)) % (hi - lo + 1) for v in values]
    if increasing:
        values = sorted({v for v in values if v is not None})
    sample = pa.chunked_array([pa.array(values[: len(values) // 2], typ), pa.array(values[len(values) // 2 :], typ)], typ)
    assert _few_distinct(sample) == (len(set(values)) * 2 <= len(values))


def _footer_has_arrow_schema(table) -> list[bool]:
    import pyarrow.parquet as pq

    return [b"ARROW:schema" in (pq.read_metadata(os.path.join(table.uri, p)).metadata or {})
            for p in table.inspect.files().column("path").to_pylist()]


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.sampled_from(list(_SAMPLES)), min_size=1, max_size=4))
def test_small_files_read_back_as_written_with_or_without_the_arrow_schema(tmp_path_factory, kinds):
    """A small file stores the Arrow schema only where Parquet's own would read back other
    types; either way every type a table may have reads back exactly as appended, before
    and after compaction."""
    from lamina.data.writer import _parquet_reads_back

    rows = pa.table({f"c{i}": pa.array(_SAMPLES[k], k) for i, k in enumerate(kinds)})
    table = lamina.create_table(str(tmp_path_factory.mktemp("t") / "t"), rows.schema)
    table.append(rows)
    table.append(rows.slice(1))
    plain = _parquet_reads_back(table.schema)
    assert _footer_has_arrow_schema(table) == [not plain, not plain]
    expected = pa.concat_tables([rows, rows.slice(1)]).cast(table.schema)  # (a large string is stored as a string)
    assert _same_rows(table.to_arrow(), expected)
    table.maintenance.compact()
    assert _same_rows(table.to_arrow(), expected)


def test_files_of_common_columns_carry_no_arrow_schema_but_zoned_or_second_timestamps_do(tmp_path):
    """What a file of integers, strings, doubles, dates and plain or UTC timestamps stores of
    its schema is enough; a named time zone, or seconds (Parquet's coarsest unit is the
    millisecond), need the Arrow schema."""
    plain = [pa.int64(), pa.string(), pa.float64(), pa.date32(), pa.timestamp("us"), pa.timestamp("us", "UTC")]
    for name, extra in [("plain", None), ("zoned", pa.timestamp("ms", "Europe/Paris")), ("seconds", pa.timestamp("s"))]:
        kinds = plain + ([extra] if extra is not None else [])
        rows = pa.table({f"c{i}": pa.array(_SAMPLES[k], k) for i, k in enumerate(kinds)})
        t = lamina.create_table(str(tmp_path / name), rows.schema)
        t.append(rows)
        assert _footer_has_arrow_schema(t) == [extra is not None], name
        assert _same_rows(t.to_arrow(), rows)


# Values at the edges of each flat kind's order, beside its sample: bounds from a footer must
# order them as Arrow does (signed integers; strings and binaries bytewise, unsigned), and
# values over 4 KiB, whose bounds Parquet's writer leaves out, must not be taken as absent.
_EDGES: dict[pa.DataType, list] = {
    pa.string(): ["\U0010ffff", "a" * 5_000, "z" * 5_000, "\x00"],
    pa.large_string(): ["\ue000", "b" * 4_097],
    pa.binary(): [b"\xff" * 5_000, b"\xff\x00", b"\x80"],
    pa.large_binary(): [b"\xfe", b"\x00" * 4_097],
    pa.int64(): [2**63 - 1, -1],
    pa.uint64(): [2**63, 2**64 - 2],
    pa.int8(): [0],
    pa.timestamp("s"): [-1, 2**33],
    pa.timestamp("us", "UTC"): [-(2**62), 2**62],
    pa.date32(): [-1, 2**30],
}
_FLAT = [k for k in _SAMPLES if not pa.types.is_nested(k)]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kinds=st.lists(st.sampled_from(_FLAT), min_size=1, max_size=5),
       n=st.integers(1, 30), group_rows=st.integers(1, 12), truncate=st.booleans())
def test_statistics_from_the_footer_equal_the_values_statistics(data, kinds, n, group_rows, truncate):
    """``column_stats`` given the footer of the file its rows were written as (the writer's
    options, row groups of any size) gives what going over the values gives: null counts,
    bounds, null bounds of a column of nulls, the cut of truncated string bounds, NaN for
    floats (computed), for every flat kind, edges of each order and over-4-KiB values included."""
    import pyarrow.parquet as pq

    from lamina.data.writer import _encodings, statistics_columns
    from lamina.manifest.entries import column_stats
    from lamina.spec.schema import Schema
    from lamina.spec.stats import full_policy, stats_policy

    cols = {}
    for i, k in enumerate(kinds):
        pool = _SAMPLES[k] + _EDGES.get(k, [])
        cols[f"c{i}"] = pa.array(data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)), k)
    rows = pa.table(cols)
    schema = Schema.from_arrow(rows.schema)
    footer: list = []
    pq.write_table(rows, pa.BufferOutputStream(), row_group_size=group_rows, write_statistics=statistics_columns(rows.schema),
                   metadata_collector=footer, **_encodings(rows, "delta"))
    policy = stats_policy(schema, {}) if truncate else full_policy(schema)
    assert footer[0].num_row_groups == -(-n // group_rows)
    assert column_stats(rows, schema, policy, footer=footer[0]) == column_stats(rows, schema, policy)


def test_appended_files_statistics_equal_the_values_statistics_around_nested_columns(tmp_path):
    """Through an append: a large file's statistics (taken from its footer where the columns
    are flat and stored as they are) equal those of its rows, with a nested column before a
    string one (the footer's leaves are not the columns then), a large string (stored as a
    string) and values over 4 KiB."""
    import numpy as np

    from lamina.manifest.entries import column_stats
    from lamina.spec.stats import stats_policy

    n = 30_000
    rng = np.random.default_rng(3)
    words = np.array(["a", "é", "\U0010ffff", "zz" * 3_000, None], dtype=object)
    flat = pa.table({"id": pa.array(rng.permutation(n), pa.int64()), "s": pa.array(words[rng.integers(0, 5, n)], pa.string()),
                     "day": pa.array(rng.integers(0, 20_000, n).astype(np.int32)).cast(pa.date32())})
    for name, extra in [("flat", {}), ("large", {"ls": pa.array(words[rng.integers(0, 5, n)], pa.large_string())}),
                        ("nested", {"l": pa.array([[i] for i in range(n)], pa.list_(pa.int64()))})]:
        rows = pa.table({**extra, **{c: flat.column(c) for c in flat.column_names}})
        t = lamina.create_table(str(tmp_path / name), rows.schema, properties={"write.parquet.small-file-bytes": "0"})
        t.append(rows)
        (entry,) = t.scan().plan(all_columns=True).entries.to_pylist()
        schema = t.metadata.schema
        want = column_stats(rows.cast(schema.arrow), schema, stats_policy(schema, t.metadata.properties))
        assert {k: entry[k] for k in want} == {k: (v.as_py() if isinstance(v, pa.Scalar) else v) for k, v in want.items()}, name
        assert sum(k.startswith("min_") and want[k] is not None for k in want) >= 3, name
    # A table whose columns were renamed stores them under their physical names: the same leaves.
    t = lamina.open_table(str(tmp_path / "flat"))
    t.update_schema().rename_column("s", "text").rename_column("id", "key").commit()
    t.append(flat.rename_columns(["key", "text", "day"]))
    assert t.metadata.schema.has_column_mapping
    schema = t.metadata.schema
    latest = t.scan().plan(all_columns=True).entries.sort_by([("added_version", "descending")]).to_pylist()[0]
    want = column_stats(flat.rename_columns(["key", "text", "day"]).cast(schema.arrow), schema, stats_policy(schema, t.metadata.properties))
    assert {k: latest[k] for k in want} == {k: (v.as_py() if isinstance(v, pa.Scalar) else v) for k, v in want.items()}


def test_a_column_nearly_all_distinct_in_its_first_rows_gets_no_dictionary():
    """The dictionary choice looks at a sample's first rows before hashing all of it: nearly
    all distinct there, no dictionary; otherwise the whole sample decides (at most half its
    values distinct: a dictionary), so a column that repeats after its first rows still gets one."""
    import numpy as np

    from lamina.data.writer import _DISTINCT_HEAD_ROWS, _few_distinct

    rng = np.random.default_rng(1)
    unique = pa.chunked_array([pa.array(rng.permutation(10_000) * 7, pa.int64())])
    repeats_late = pa.chunked_array([pa.array(np.concatenate([np.arange(1_500), np.zeros(8_500, np.int64)]))])
    few = pa.chunked_array([pa.array(rng.integers(0, 3_000, 10_000))])
    assert not _few_distinct(unique)
    assert _few_distinct(repeats_late)  # 1,500 distinct in the head: below 95%, the whole sample decides
    assert _few_distinct(few)  # ~2,900 distinct of 10,000
    assert len(np.unique(few.to_numpy()[:_DISTINCT_HEAD_ROWS])) < 0.95 * _DISTINCT_HEAD_ROWS


def test_statistics_of_a_string_column_holding_bytes_that_are_not_utf8_come_from_the_values():
    """Arrow does not validate a string column built from buffers: its footer bounds are then
    not strings, and its statistics are what going over the values gives, not an error."""
    import pyarrow.parquet as pq

    from lamina.manifest.entries import column_stats
    from lamina.spec.schema import Schema
    from lamina.spec.stats import full_policy

    offsets = pa.py_buffer(bytes([0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]))
    rows = pa.table({"s": pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"\xff\xfe")])})
    schema = Schema.from_arrow(rows.schema)
    footer: list = []
    pq.write_table(rows, pa.BufferOutputStream(), metadata_collector=footer)
    assert footer[0].row_group(0).column(0).statistics.has_min_max
    assert column_stats(rows, schema, full_policy(schema), footer=footer[0]) == column_stats(rows, schema, full_policy(schema))


# -- every data file is compressed as the table's codec says (issue 44, point 8) -----------------


def _codecs(t: lamina.Table) -> set[str]:
    """The codecs of every column chunk of every live data file, read from the files' footers."""
    import pyarrow.parquet as pq

    found = set()
    for path in t.inspect.files().column("path").to_pylist():
        md = pq.read_metadata(os.path.join(t.uri, path))
        found |= {md.row_group(g).column(c).compression for g in range(md.num_row_groups) for c in range(md.num_columns)}
    return found


_DAYS = pa.schema([("day", pa.date32()), ("carrier", pa.string()), ("delay", pa.float64()), ("flight", pa.int64())])


def _day_rows(day: int, n: int) -> pa.Table:
    import datetime

    return pa.table({
        "day": pa.array([datetime.date(2013, 1, 1) + datetime.timedelta(days=day)] * n, pa.date32()),
        "carrier": [("UA", "AA", "DL", "B6")[i % 4] for i in range(n)],
        "delay": [float((i * 7) % 60 - 10) for i in range(n)],
        "flight": [1000 + (i * 13) % 500 for i in range(n)],
    }, schema=_DAYS)


def test_a_table_with_default_properties_stores_compressed_parquet(tmp_path):
    """A day-partitioned table appended a day at a time (small files, as a daily load leaves
    them) stores every file with the default codec, as a 10-row append's file."""
    t = lamina.create_table(str(tmp_path / "t"), _DAYS, partition_by=["day"])
    for day in range(5):
        t.append(_day_rows(day, 1000))
    t.append(_day_rows(9, 10))
    assert len(t.inspect.files()) == 6
    assert _codecs(t) == {"SNAPPY"}


@settings(max_examples=12, deadline=None)
@given(
    codec=st.sampled_from(["snappy", "zstd", "gzip", "lz4", "brotli", "none"]),
    appends=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 400)), min_size=2, max_size=8),
    partitioned=st.booleans(),
)
def test_appends_and_compaction_write_the_tables_codec(tmp_path_factory, codec, appends, partitioned):
    """Whatever the files' sizes, appends and the compaction of their small files write every
    file with the table's codec (Parquet names it in capitals; "none" is UNCOMPRESSED), and
    the compaction changes no row."""
    t = lamina.create_table(str(tmp_path_factory.mktemp("t") / "t"), _DAYS, partition_by=["day"] if partitioned else None,
                            properties={"write.parquet.compression": codec})
    for day, n in appends:
        t.append(_day_rows(day, n))
    expected = {"UNCOMPRESSED" if codec == "none" else codec.upper()}
    assert _codecs(t) == expected
    before = t.to_arrow().sort_by([("day", "ascending"), ("flight", "ascending"), ("delay", "ascending")])
    t.maintenance.compact(target_file_size=1 << 20)
    assert _codecs(t) == expected
    assert t.to_arrow().sort_by([("day", "ascending"), ("flight", "ascending"), ("delay", "ascending")]).equals(before)


# --- row groups sized by the table's properties ------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 30_000), row_limit=st.integers(1, 40_000), byte_limit=st.integers(1_000, 2_000_000))
def test_row_groups_within_the_row_and_byte_limits(tmp_path_factory, n, row_limit, byte_limit):
    """``write.parquet.row-group-limit`` / ``-size-bytes``: every row group of an append and of a
    compaction (the streaming writer) holds at most that many rows and about that many Arrow bytes."""
    import lamina

    data = pa.table({"id": np.arange(n, dtype=np.int64), "s": pa.array([f"v{i % 97}" * 3 for i in range(n)])})
    props = {"write.parquet.row-group-limit": str(row_limit), "write.parquet.row-group-size-bytes": str(byte_limit),
             "write.parquet.small-file-bytes": "0"}
    t = lamina.create_table(str(tmp_path_factory.mktemp("rg") / "t"), data.schema, properties=props)
    t.append(data.slice(0, n // 2))
    t.append(data.slice(n // 2))
    per_row = data.nbytes / n
    for when in ("append", "compact"):
        if when == "compact":
            t.maintenance.compact(target_file_size=1 << 30, min_file_size=1 << 30)
        groups = []
        for p in t.scan().plan().entries.column("path").to_pylist():
            md = pq.read_metadata(t.io.local_path(p))
            groups += [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        assert sum(groups) == n, when
        assert max(groups) <= row_limit, when
        # the rows' Arrow size, as the writer measured it (a row or two over: rounding per chunk)
        assert max(groups) <= max(1, byte_limit / per_row) * 1.05 + 1, when
