"""Which plan applies a table's deletes in DuckDB, and Polars' cached plans staying exact.

A one-table query on a fresh connection must not pay for loading the ``delta`` extension
(its signature check dwarfs the query); a query joining tables gets ``delta_scan``, whose
plans DuckDB can reorder. Either way the answer is the live rows, checked against DuckDB's
own ``read_parquet`` over the same files minus the deleted keys. Polars caches plans per
table version: a delete after a read must show in the next read."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
import lamina.duckdb as ldb
import lamina.polars as lpl
from lamina.duckdb import extensions


@pytest.fixture
def table_with_deletes(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    for start in range(0, 3000, 1000):
        ids = pa.array(range(start, start + 1000), pa.int64())
        t.append(pa.table({"id": ids, "v": pc.multiply(ids, 2)}))
    t.delete("id % 7 = 0")
    return t


def _oracle_count_and_sum(t) -> tuple[int, int]:
    live = [i for i in range(3000) if i % 7]
    return len(live), sum(2 * i for i in live)


def test_a_one_table_query_applies_deletes_without_loading_delta(table_with_deletes):
    con = duckdb.connect()
    got = ldb.sql("SELECT count(*), sum(v) FROM t", con=con, tables={"t": table_with_deletes}).fetchone()
    assert got == _oracle_count_and_sum(table_with_deletes)
    assert not extensions.is_loaded(con, "delta")


def test_a_join_reads_through_delta_scan_and_stays_exact(table_with_deletes):
    if extensions.extension_file("delta") is None:
        pytest.skip("the delta extension (duckdb-extension-delta, the test extra) is not installed")
    con = duckdb.connect()
    got = ldb.sql(
        "SELECT count(*), sum(a.v) FROM t a JOIN t b ON a.id = b.id", con=con, tables={"t": table_with_deletes}
    ).fetchone()
    assert got == _oracle_count_and_sum(table_with_deletes)
    assert extensions.is_loaded(con, "delta")


def test_polars_reads_the_new_version_after_a_delete(table_with_deletes):
    t = table_with_deletes
    first = lpl.scan(t).collect()
    assert first.height == _oracle_count_and_sum(t)[0]
    t.delete("id < 100")
    again = lpl.scan(lamina.open_table(t.uri)).collect()
    assert sorted(again["id"].to_list()) == [i for i in range(100, 3000) if i % 7]
    assert lpl.scan(lamina.open_table(t.uri), version=t.version - 1).collect().height == first.height
