"""lamina.data.copy: staged Parquet files made data files as they are. When a file may be
copied; that its statistics are those of its rows; that the copy reads back as its rows plus
their lineage, in the table's physical names and types; that a damaged file or a copy that
does not read back stores nothing."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lamina.data import copy as cp
from lamina.data.copy import StagedFile, StagedFiles
from lamina.errors import FooterError
from lamina.errors import InvalidArgument
from lamina.io import FileIO
from lamina.manifest.entries import column_stats
from lamina.spec.lineage import LINEAGE_FIELDS
from lamina.spec.partition import parse_partition_by
from lamina.spec.properties import WriterProperties
from lamina.spec.schema import Schema
from lamina.spec.stats import full_policy, stats_policy
from support.staged import staged_files

ROWS = 40_000  # above COPY_MIN_ROWS


def orders(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "amount": pa.array(rng.integers(0, 10**6, n) / 100.0),
        "status": pa.array(np.array(["new", "paid", "shipped"], dtype=object)[rng.integers(0, 3, n)]),
        "day": pa.array(rng.integers(0, 1000, n).astype(np.int32)).cast(pa.date32()),
    })


staged = staged_files


WRITER = WriterProperties()


def test_a_staged_source_is_copyable_only_as_the_table_stores_it(tmp_path):
    table = orders(ROWS)
    schema = Schema.from_arrow(table.schema)
    s = staged(tmp_path, table)
    assert s.copyable(schema, None, (), WRITER)
    # the table lays rows out: partitioned or sorted
    spec = parse_partition_by(["day(day)"], schema)
    assert s.copyable(schema, parse_partition_by(None, schema), (), WRITER)  # unpartitioned
    assert not s.copyable(schema, spec, (), WRITER)
    assert not s.copyable(schema, None, [("id", "asc", "nulls-first")], WRITER)
    # another codec, too few or too many rows
    assert not s.copyable(schema, None, (), WriterProperties(parquet_compression="zstd"))
    assert not s.copyable(schema, None, (), WriterProperties(max_rows_per_file=ROWS - 1))
    assert not staged(tmp_path / "small", orders(cp.COPY_MIN_ROWS - 1)).copyable(schema, None, (), WRITER)
    # columns not the table's: another type, another nullability, another order, one more or fewer
    assert not staged(tmp_path / "t", table.set_column(0, "id", table["id"].cast(pa.int32()))).copyable(schema, None, (), WRITER)
    strict = Schema.from_arrow(pa.schema([f.with_nullable(f.name != "id") for f in table.schema]))
    assert not s.copyable(strict, None, (), WRITER)
    assert not staged(tmp_path / "o", table.select(["amount", "id", "status", "day"])).copyable(schema, None, (), WRITER)
    assert not staged(tmp_path / "x", table.append_column("x", table["id"])).copyable(schema, None, (), WRITER)
    assert not staged(tmp_path / "y", table.drop_columns(["day"])).copyable(schema, None, (), WRITER)
    # a nested table
    nested = table.append_column("tags", pa.array([[1]] * ROWS))
    assert not staged(tmp_path / "n", nested).copyable(Schema.from_arrow(nested.schema), None, (), WRITER)


_KINDS = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "int16": (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)),
    # (the edges drawn often: NaN beside numbers is what a footer's float bounds leave out)
    "float64": (pa.float64(), st.sampled_from([float("nan"), -0.0, 0.0, float("inf"), 1.5]) | st.floats(allow_nan=True)),
    "string": (pa.string(), st.sampled_from(["", "a" * 17, "é" * 20, "\U0010ffff"]) | st.text(max_size=40)),
    "binary": (pa.binary(), st.binary(max_size=40)),
    "bool": (pa.bool_(), st.booleans()),
    "date": (pa.date32(), st.dates()),
    "ts": (pa.timestamp("us", "UTC"), st.datetimes(timezones=st.just(dt.timezone.utc))),
    "ts_s": (pa.timestamp("s"), st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 1, 1))),
    "decimal": (pa.decimal128(12, 3), st.decimals(min_value=-10**8, max_value=10**8, places=3, allow_nan=False)),
}


@st.composite
def _tables(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=5))
    n = draw(st.integers(1, 50))
    return pa.table({f"k{i}": pa.array(draw(st.lists(st.none() | _KINDS[k][1], min_size=n, max_size=n)), _KINDS[k][0])
                     for i, k in enumerate(kinds)})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(table=_tables(), data=st.data())
@example(table=pa.table({"k0": pa.array([1.0, float("nan"), None, 3.0])}), data=None).via("NaN beside numbers")
def test_a_staged_files_statistics_are_its_rows_statistics(tmp_path_factory, table, data):
    """Whichever writer made the file (pyarrow, whose footer statistics are taken where exact;
    DuckDB and Polars, whose files are read for them) and however (row groups, statistics on
    or off, dictionaries): the statistics ``checked`` gives are ``column_stats`` of the rows,
    exact and with bounds truncated as the default policy says."""
    d = tmp_path_factory.mktemp("s")
    path = str(d / "f.parquet")
    writer = "pyarrow" if data is None else data.draw(st.sampled_from(["pyarrow", "duckdb", "polars"]))
    if writer == "pyarrow" and data is None:
        pq.write_table(table, path)
    elif writer == "pyarrow":
        pq.write_table(table, path, row_group_size=data.draw(st.integers(1, 60)), write_statistics=data.draw(st.booleans()),
                       use_dictionary=data.draw(st.booleans()))
    elif writer == "duckdb":
        import duckdb

        duckdb.from_arrow(table).write_parquet(path)
    else:
        import polars as pl

        if any(pa.types.is_decimal(t) or pa.types.is_unsigned_integer(t) for t in table.schema.types):
            writer = "pyarrow"
            pq.write_table(table, path)
        else:
            pl.from_arrow(table).write_parquet(path, row_group_size=data.draw(st.integers(1, 60)))
    f = StagedFile.read(path)
    schema = Schema.from_arrow(f.schema)
    rows = pq.read_table(path)
    for policy in (full_policy(schema), stats_policy(schema, {})):
        got = StagedFiles([f]).checked(schema, policy).result()[0]
        assert got == column_stats(rows, schema, policy), writer


def _copied(tmp_path, table: pa.Table, lineage: pa.Table | None, schema: Schema | None = None, **write):
    s = staged(tmp_path, table, **write)
    schema = schema or Schema.from_arrow(table.schema)
    io = FileIO(str(tmp_path / "t"))
    entries = s.copy(io, schema, stats_policy(schema, {}), "w1", WRITER, lineage)
    return io, entries


def test_a_copy_reads_back_as_its_rows_and_their_lineage(tmp_path):
    table = orders(ROWS)
    n = table.num_rows
    ids = np.where(np.arange(n) % 3 == 0, -1, np.arange(n) * 5)
    lineage = pa.table([pa.array(ids, mask=ids < 0), pa.nulls(n, pa.int64())], schema=pa.schema(LINEAGE_FIELDS))
    io, entries = _copied(tmp_path, table, lineage, row_group_size=15_000)
    (e,) = entries
    path = os.path.join(str(tmp_path / "t"), e["path"])
    assert e["path"].startswith("data/w1-") and e["record_count"] == n and e["size"] == os.path.getsize(path)
    r = pq.ParquetFile(path)
    schema = Schema.from_arrow(table.schema)
    assert r.schema_arrow.equals(pa.schema([*schema.physical_arrow, *LINEAGE_FIELDS]))
    assert r.read().equals(pa.Table.from_arrays([*table.columns, *lineage.columns], schema=r.schema_arrow))
    assert r.metadata.num_row_groups == 3
    amount = table.schema.get_field_index("amount")
    assert all(r.metadata.row_group(g).column(amount).statistics is None for g in range(3))  # floats: none, as the writer's
    assert r.metadata.row_group(0).column(0).statistics.has_min_max
    assert r.metadata.row_group(0).column(len(table.schema)).statistics.max == ids[:15_000].max()  # the ids' maximum
    import duckdb

    assert duckdb.sql(f"SELECT count(*), sum(id), count(_row_id) FROM '{path}'").fetchall()[0] == (n, int(np.arange(n).sum()), int((ids >= 0).sum()))


def test_a_copy_takes_the_tables_physical_names_and_field_ids(tmp_path):
    import lamina

    t = lamina.create_table(str(tmp_path / "evolved"), orders(1).schema)
    with t.update_schema() as u:
        u.rename_column("status", "state")
    schema = t.metadata.schema
    table = orders(ROWS).rename_columns(["id", "amount", "state", "day"])
    io, (e,) = _copied(tmp_path, table, None, schema)
    r = pq.ParquetFile(os.path.join(str(tmp_path / "t"), e["path"]))
    assert r.schema_arrow.names == [schema.physical_names[n] for n in schema.names]
    assert r.schema_arrow.equals(schema.physical_arrow)
    assert [f.metadata.get(b"PARQUET:field_id") for f in r.schema_arrow] == [f.metadata.get(b"PARQUET:field_id") for f in schema.physical_arrow]
    assert r.read().rename_columns(schema.names).equals(table.cast(schema.arrow))


def test_a_damaged_staged_file_fails_with_a_typed_error_and_stores_nothing(tmp_path):
    table = orders(ROWS)
    s = staged(tmp_path, table)
    f = s.files[0]
    at = f.metadata.row_group(0).column(2).data_page_offset
    raw = bytearray(f.data.to_pybytes())
    raw[at:at + 16] = b"\xff" * 16
    bad = StagedFiles([StagedFile(f.path, pa.py_buffer(bytes(raw)), f.metadata, f.schema)])
    schema = Schema.from_arrow(table.schema)
    io = FileIO(str(tmp_path / "t"))
    with pytest.raises(InvalidArgument, match="could not be read"):
        bad.copy(io, schema, stats_policy(schema, {}), "w1", WRITER)
    assert not os.path.exists(str(tmp_path / "t" / "data"))


def test_a_copy_that_does_not_read_back_is_a_footer_error_and_stores_nothing(tmp_path, monkeypatch):
    """Two files; the second's copy comes out without its lineage columns (as a join that lost
    them would): FooterError before either is stored."""
    real, calls = cp.joined, []

    def wrong(data, extra, **kw):
        calls.append(1)
        return real(data, extra if len(calls) == 1 else None, **kw)

    monkeypatch.setattr(cp, "joined", wrong)
    table = orders(ROWS)
    n = 2 * table.num_rows
    lineage = pa.table([pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())], schema=pa.schema(LINEAGE_FIELDS))
    s = staged(tmp_path, table, table)
    schema = Schema.from_arrow(table.schema)
    io = FileIO(str(tmp_path / "t"))
    with pytest.raises(FooterError):
        s.copy(io, schema, stats_policy(schema, {}), "w1", WRITER, lineage)
    assert len(calls) == 2 and not os.path.exists(str(tmp_path / "t" / "data"))
