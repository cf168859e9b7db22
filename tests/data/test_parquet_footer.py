"""lamina.data.parquet_footer: the Thrift compact codec of Parquet footers, and files joined
from other files' column chunks, read back by pyarrow and DuckDB."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lamina.data import parquet_footer as pf
from lamina.data.parquet_footer import decode, encode, footer_of, joined
from lamina.errors import FooterError


def _parquet(table: pa.Table, **kw) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **kw)
    return sink.getvalue()


def _footer_bytes(data) -> bytes:
    raw = bytes(data)
    (n,) = struct.unpack("<I", raw[-8:-4])
    return raw[-8 - n:-8]


SAMPLE = pa.table({
    "i": pa.array(range(40), pa.int64()),
    "s": pa.array([f"v{i % 7}" if i % 5 else None for i in range(40)], pa.string()),
    "f": pa.array([i / 3 for i in range(40)], pa.float64()),
    "d": pa.array([dt.date(2026, 1, 1 + i % 28) for i in range(40)], pa.date32()),
    "b": pa.array([i % 2 == 0 for i in range(40)], pa.bool_()),
    "dec": pa.array([decimal.Decimal(i) / 100 for i in range(40)], pa.decimal128(9, 2)),
    "nested": pa.array([{"x": i, "ys": [i, i + 1]} for i in range(40)]),
})


@pytest.mark.parametrize("options", [
    {},
    {"row_group_size": 3},  # 14 row groups: a list of more than 15 elements in the footer
    {"write_statistics": False, "use_dictionary": False, "compression": "none"},
    {"data_page_version": "2.0", "compression": "zstd"},
    {"write_page_index": True, "sorting_columns": [pq.SortingColumn(0)]},
    {"store_schema": False, "write_page_checksum": True},
], ids=["default", "many-row-groups", "plain", "v2-pages", "page-index", "checksums"])
def test_a_pyarrow_footer_decodes_and_encodes_to_the_same_bytes(options):
    table = SAMPLE.replace_schema_metadata({"k": "v" * 300})
    raw = _footer_bytes(_parquet(table, **options))
    assert encode(decode(raw)) == raw


@pytest.mark.parametrize("writer", ["duckdb", "polars"])
def test_other_writers_footers_decode_and_encode_to_the_same_bytes(tmp_path, writer):
    path = str(tmp_path / "f.parquet")
    flat = SAMPLE.drop_columns(["nested"])
    if writer == "duckdb":
        import duckdb

        duckdb.from_arrow(flat).write_parquet(path)
    else:
        import polars as pl

        pl.from_arrow(flat).write_parquet(path, row_group_size=16, statistics=True)
    raw = _footer_bytes(Path(path).read_bytes())
    assert encode(decode(raw)) == raw


def test_what_is_not_a_readable_footer_is_a_footer_error():
    data = _parquet(SAMPLE)
    raw = bytes(data)
    with pytest.raises(FooterError):
        footer_of(b"not parquet at all")
    with pytest.raises(FooterError):
        footer_of(raw[:-4] + b"PARE")  # an encrypted footer's magic
    with pytest.raises(FooterError):
        footer_of(raw[:-8] + struct.pack("<I", len(raw)) + b"PAR1")  # a length past the start
    footer = _footer_bytes(raw)
    for cut in (1, len(footer) // 2, len(footer) - 1):
        with pytest.raises(FooterError):
            decode(footer[:cut])
    with pytest.raises(FooterError):
        decode(footer + b"\x00")


def _join(data, extra=None, names=None, field_ids=None, without_stats=(), key_value=()):
    n = len(pq.read_schema(pa.BufferReader(data)))
    return joined(data, extra, names=names or [f"c{i}" for i in range(n)], field_ids=field_ids or [None] * n,
                  without_stats=list(without_stats), key_value=list(key_value))


def test_a_nested_file_or_row_groups_that_do_not_line_up_are_not_joined():
    with pytest.raises(FooterError, match="nested"):
        _join(_parquet(SAMPLE.select(["i", "nested"])))
    flat = _parquet(SAMPLE.select(["i", "s"]), row_group_size=20)
    with pytest.raises(FooterError, match="line up"):
        _join(flat, _parquet(pa.table({"x": pa.array(range(40))}), row_group_size=10))
    with pytest.raises(FooterError, match="columns"):
        joined(flat, None, names=["a"], field_ids=[None], without_stats=[], key_value=[])


_KINDS = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)),
    "float64": (pa.float64(), st.floats(allow_nan=True)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=True)),
    "string": (pa.string(), st.text(max_size=12)),
    "binary": (pa.binary(), st.binary(max_size=12)),
    "bool": (pa.bool_(), st.booleans()),
    "date": (pa.date32(), st.dates()),
    "ts": (pa.timestamp("us", "UTC"), st.datetimes(timezones=st.just(dt.timezone.utc))),
    "decimal": (pa.decimal128(12, 3), st.decimals(min_value=-10**8, max_value=10**8, places=3, allow_nan=False)),
}


@st.composite
def _tables(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=6))
    n = draw(st.integers(1, 60))
    cols = {}
    for i, k in enumerate(kinds):
        typ, values = _KINDS[k]
        cols[f"k{i}"] = pa.array(draw(st.lists(st.none() | values, min_size=n, max_size=n)), typ)
    return pa.table(cols)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=_tables(), data=st.data())
def test_a_joined_file_reads_as_its_columns_and_the_appended_ones(table, data):
    """Random flat tables written with random writer options, joined with an appended file of
    as many rows in row groups of the same sizes, renamed, given field ids, some statistics
    dropped: pyarrow and DuckDB read every value back, under the new names, with the field ids
    and statistics as asked; the file's own chunks keep their offsets."""
    import duckdb

    n = table.num_rows
    group = data.draw(st.integers(1, n))
    options = dict(
        row_group_size=group,
        compression=data.draw(st.sampled_from(["snappy", "none", "zstd", "gzip", "lz4"])),
        use_dictionary=data.draw(st.booleans()),
        data_page_version=data.draw(st.sampled_from(["1.0", "2.0"])),
        write_page_index=data.draw(st.booleans()),
        write_statistics=data.draw(st.booleans()),
    )
    src = _parquet(table, **options)
    extra_rows = pa.table({"_x": pa.array(np.arange(n, dtype=np.int64) * 7), "_y": pa.nulls(n, pa.int64())})
    extra = _parquet(extra_rows, row_group_size=group, compression=options["compression"]) if data.draw(st.booleans()) else None
    names = [f"p{i}_{c}" for i, c in enumerate(table.column_names)]
    ids = [data.draw(st.none() | st.integers(1, 10**6)) for _ in names]
    without = data.draw(st.lists(st.integers(0, len(names) - 1), unique=True))
    out = joined(src, extra, names=names, field_ids=ids, without_stats=without, key_value=[(b"k", b"v")])

    r = pq.ParquetFile(pa.BufferReader(out))
    got = r.read()
    want = table.rename_columns(names)
    if extra is not None:
        for c in extra_rows.column_names:
            want = want.append_column(c, extra_rows.column(c))
    assert got.column_names == want.column_names
    for a, b in zip(got.columns, want.columns):
        assert a.type.equals(b.type) and _values(a) == _values(b)
    md, before = r.metadata, pq.read_metadata(pa.BufferReader(src))
    assert md.metadata == {b"k": b"v"}
    assert [md.schema.column(i).name for i in range(len(names))] == names
    for i, fid in enumerate(ids):
        assert (r.schema_arrow.field(i).metadata or {}).get(b"PARQUET:field_id") == (None if fid is None else str(fid).encode())
    for g in range(md.num_row_groups):
        for i in range(len(names)):
            a, b = md.row_group(g).column(i), before.row_group(g).column(i)
            assert (a.data_page_offset, a.total_compressed_size) == (b.data_page_offset, b.total_compressed_size)
            if i in without:
                assert a.statistics is None
            else:
                assert (a.statistics is None) == (b.statistics is None)
    path = _tmp_write(out)
    try:
        con = duckdb.connect()
        con.execute("CREATE TABLE t AS SELECT * FROM read_parquet($p)", {"p": path})
    finally:
        os.remove(path)
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == n
    for name, k in zip(names, table.column_names):
        assert con.execute(f'SELECT count("{name}") FROM t').fetchone()[0] == n - table.column(k).null_count


def _values(col) -> list:
    return [("nan" if isinstance(v, float) and v != v else v) for v in col.to_pylist()]


def _tmp_write(data: bytes) -> str:
    fd, path = tempfile.mkstemp(suffix=".parquet")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def test_the_codec_keeps_fields_it_does_not_know():
    """A struct field of an id no Parquet version has (a future one) survives a round trip,
    as do booleans, doubles, maps, sets and negative numbers."""
    fields = [[1, pf._I32, -7], [2, pf._TRUE, True], [3, pf._TRUE, False], [4, pf._DOUBLE, struct.pack("<d", 2.5)],
              [7, pf._MAP, (pf._BINARY, pf._I64, [(b"a", -(2**62)), (b"b", 3)])], [8, pf._SET, (pf._I16, [1, -2, 300])],
              [40, pf._LIST, (pf._TRUE, [True, False, True])], [41, pf._STRUCT, [[1, pf._BYTE, 200]]], [1000, pf._BINARY, b"x" * 200]]
    assert decode(encode(fields)) == fields
