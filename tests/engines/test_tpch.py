"""The TPC-H workload's 22 queries through every engine path, with and without deletes, against
DuckDB over raw Parquet files of the same rows (the live rows, computed by Arrow from the
generated data and the deleted keys, not by Lamina).

Scale factor 0.01 here (lineitem 60,175 rows in 4 files, each with a deletion vector);
the full scale, opt-in:

    LAMINA_TPCH_SCALE=1 .venv/bin/python -m pytest -q tests/engines/test_tpch.py

Paths: ``lamina.duckdb.sql`` (files with deletes read through DuckDB's delta extension),
``register`` with the delta extension made unavailable (the anti-join of ``file_row_number``),
``register`` of the version before the deletes, DuckDB over ``to_pyarrow_dataset()``, and
Polars' SQL over ``lamina.polars.scan`` (the queries Polars' SQL runs over raw Parquet too).
DuckDB runs with 2 threads."""

from __future__ import annotations

import os

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest

import lamina.duckdb as ldb
import lamina.polars as lpl
from lamina.duckdb import extensions

from tpch import TABLES, arrow_of, deleted_keys, generate, lamina_tables, live_rows, same_answer, tpch_connection

pytestmark = pytest.mark.slow  # TPC-H data and its 22 queries through every engine

SCALE = float(os.environ.get("LAMINA_TPCH_SCALE", "0.01"))


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    if tpch_connection() is None:
        pytest.skip("DuckDB's tpch extension is not installed (pip install duckdb-extension-tpch==1.5.5, in the test extra)")
    root = tmp_path_factory.mktemp("tpch")
    tables, queries = generate(SCALE)
    keys = deleted_keys(tables)
    live = live_rows(tables, keys)
    raw = {}
    for kind, rows in (("all", tables), ("live", live)):
        for name, t in rows.items():
            path = str(root / f"raw_{kind}_{name}.parquet")
            pq.write_table(t, path, row_group_size=max(1, t.num_rows // 3))
            raw[kind, name] = path
    lam = lamina_tables(str(root / "lamina"), tables, keys, rows_per_file=max(1000, tables["lineitem"].num_rows // 4))
    return queries, raw, lam


def duck() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET threads = 2")
    return con


def raw_answers(raw, kind: str, queries) -> dict[int, list]:
    con = duck()
    for name in TABLES:
        con.execute(f"CREATE VIEW {name} AS FROM read_parquet('{raw[kind, name]}')")
    return {n: con.sql(q).fetchall() for n, q in queries.items()}


def check(queries, want, run) -> None:
    wrong = [n for n, q in queries.items() if not same_answer(run(q), want[n])]
    assert not wrong, f"queries with wrong answers: {wrong}"


def test_tpch_through_lamina_duckdb_sql_with_deletes(workload):
    queries, raw, lam = workload
    want = raw_answers(raw, "live", queries)
    con = duck()
    check(queries, want, lambda q: ldb.sql(q, con=con, tables=lam).fetchall())
    # asked again on the same connection: the views made for these versions are reused
    check(queries, want, lambda q: ldb.sql(q, con=con, tables=lam).fetchall())
    assert "delta_scan" in con.sql("SELECT string_agg(sql) FROM duckdb_views() WHERE view_name LIKE '__lamina_view_%'").fetchone()[0]


def test_tpch_through_register_with_and_without_deletes(workload, monkeypatch):
    queries, raw, lam = workload
    con = duck()
    for name, t in lam.items():
        ldb.register(con, t, name, version=1)  # the append: no deletes yet
    check(queries, raw_answers(raw, "all", queries), lambda q: con.sql(q).fetchall())
    # without DuckDB's delta extension deletes are an anti-join of file_row_number
    load = extensions.load
    monkeypatch.setattr(extensions, "load", lambda c, name: False if name == "delta" else load(c, name))
    con = duck()
    for name, t in lam.items():
        ldb.register(con, t, name)
    assert "ANTI JOIN" in con.sql("SELECT sql FROM duckdb_views() WHERE view_name = 'lineitem'").fetchone()[0]
    check(queries, raw_answers(raw, "live", queries), lambda q: con.sql(q).fetchall())


def test_tpch_over_arrow_datasets_with_deletes(workload):
    queries, raw, lam = workload
    con = duck()
    for name, t in lam.items():
        con.register(name, t.to_pyarrow_dataset())
    check(queries, raw_answers(raw, "live", queries), lambda q: con.sql(q).fetchall())


def test_tpch_through_polars_sql_with_deletes(workload):
    queries, raw, lam = workload
    want_ctx = pl.SQLContext({name: pl.scan_parquet(raw["live", name]) for name in TABLES})
    got_ctx = pl.SQLContext({name: lpl.scan(t) for name, t in lam.items()})
    ran, wrong = 0, []
    for n, q in queries.items():
        try:
            want = want_ctx.execute(q).collect()
        except Exception:  # noqa: BLE001 - a query Polars' SQL cannot run at all (not Lamina's)
            continue
        ran += 1
        if not same_answer(got_ctx.execute(q).collect().rows(), want.rows()):
            wrong.append(n)
    assert ran >= 10, f"Polars' SQL ran only {ran} of the 22 queries over raw Parquet"
    assert not wrong, f"queries with wrong answers: {wrong}"
