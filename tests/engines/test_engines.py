"""DuckDB, Polars and Arrow datasets over Lamina tables: pruning really skips files, time
travel, catalogs, evolved schemas, row lineage, object stores, bad input.

Pruning is checked by what cannot be faked: a data file that no row of the filter can be in
is removed from disk, so a read that opened it would fail; the same read without the filter
must fail (the file is live), the filtered one must answer exactly."""

from __future__ import annotations

import os
import uuid
from collections import Counter

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pyarrow.dataset as ds
import pytest

import lamina
import lamina.duckdb as ldb
import lamina.polars as lpl
from lamina.errors import (
    BranchNotFound, CorruptMetadata, InvalidArgument, InvalidPredicate, LaminaError, TagNotFound, VersionNotFound,
)
from support import BUCKET

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def rows(t) -> Counter:
    if isinstance(t, pa.RecordBatchReader):
        t = t.read_all()
    if isinstance(t, pl.DataFrame):
        t = t.to_arrow()
    return Counter(zip(*(t.column(n).to_pylist() for n in t.column_names)))


@pytest.fixture
def table(tmp_path):
    """Three files of ids 0-9, 10-19, 20-29, and rows 3 and 14 deleted (deletion vectors)."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(3):
        t.append(pa.table({"id": list(range(i * 10, i * 10 + 10)), "s": [f"s{j}" for j in range(10)]}))
    t.delete("id IN (3, 14)")
    return t


def _drop_file_of(t: lamina.Table, row_id: int) -> None:
    """Remove the data file holding ``row_id`` from disk (it stays in the version)."""
    for task in t.plan():
        if task.path.endswith(".parquet"):
            f = ds.dataset(task.uri).to_table(columns=["id"])
            if row_id in f.column("id").to_pylist():
                os.remove(task.uri)
                return
    raise AssertionError(f"no file holds {row_id}")


def test_duckdb_register_reads_live_rows(table):
    con = duckdb.connect()
    rel = ldb.register(con, table, "events")
    assert rows(rel.arrow()) == rows(table.to_arrow())
    assert con.sql("SELECT count(*) FROM events WHERE id < 5").fetchall()[0][0] == 4  # 3 is deleted
    assert con.sql("SELECT s FROM events WHERE id = 14").fetchall() == []


def test_duckdb_where_and_sql_prune_files_by_statistics(table):
    _drop_file_of(table, 25)  # the third file is gone from disk
    con = duckdb.connect()
    with pytest.raises(duckdb.Error):  # it is still live: a plain read opens it
        ldb.register(con, table, "all_rows")
        con.sql("SELECT count(*) FROM all_rows").fetchall()
    ldb.register(con, table, "early", where="id < 15")
    assert sorted(r[0] for r in con.sql("SELECT id FROM early").fetchall()) == [i for i in range(15) if i not in (3, 14)]
    q = "SELECT count(*), sum(e.id) FROM events e WHERE e.id BETWEEN 5 AND 12 AND e.s <> 'x'"
    assert ldb.sql(q, tables={"events": table}).fetchall() == [(8, sum(range(5, 13)))]
    # no pruning through an outer join: the filter decides which rows are NULL-extended
    with pytest.raises(duckdb.Error):
        ldb.sql("SELECT count(*) FROM (SELECT 1 AS k) o LEFT JOIN events e ON true WHERE e.id < 5", tables={"events": table}).fetchall()


def test_polars_pushes_its_filter_into_lamina_planning(table):
    _drop_file_of(table, 25)
    lf = lpl.scan(table)
    with pytest.raises(Exception):
        lf.select(pl.len()).collect()
    got = lf.filter((pl.col("id") >= 5) & (pl.col("id") < 15)).collect()
    assert sorted(got["id"].to_list()) == [i for i in range(5, 15) if i != 14]
    assert lf.filter(pl.col("id").is_in([1, 3, 12])).select(pl.col("id").sort()).collect()["id"].to_list() == [1, 12]


def test_expressions_prune_files_where_the_engine_computes_them_alike(table):
    """An expression in DuckDB's WHERE prunes files when Lamina and DuckDB compute it alike;
    one they compute otherwise (a cast to an integer: DuckDB rounds, Spark truncates) is left
    to DuckDB, and so reads the file that is gone. Polars pushes ``str.starts_with``."""
    _drop_file_of(table, 25)
    q = "SELECT count(*) FROM events WHERE id + 1 < 16 AND length(s) = 2"
    assert ldb.sql(q, tables={"events": table}).fetchall() == [(13,)]
    con = duckdb.connect()
    ldb.register(con, table, "early", where="CASE WHEN id > 100 THEN 1000 ELSE id * 2 END < 30")
    assert con.sql("SELECT count(*) FROM early").fetchall() == [(13,)]
    with pytest.raises(duckdb.Error):
        ldb.sql("SELECT count(*) FROM events WHERE CAST(id AS INT) < 15", tables={"events": table}).fetchall()
    assert sorted(table.scan(where="id - 1 < 14 AND s LIKE 's%'").to_arrow().column("id").to_pylist()) == [
        i for i in range(15) if i not in (3, 14)]


def test_polars_starts_with_prunes_by_prefix(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for p in ("a", "b", "c"):
        t.append(pa.table({"id": list(range(3)), "s": [f"{p}{i}" for i in range(3)]}))
    _drop_file_of_prefix = [task.uri for task in t.plan() if "b0" in ds.dataset(task.uri).to_table().column("s").to_pylist()]
    os.remove(_drop_file_of_prefix[0])
    lf = lpl.scan(t)
    assert sorted(lf.filter(pl.col("s").str.starts_with("c")).collect()["s"].to_list()) == ["c0", "c1", "c2"]
    with pytest.raises(Exception):
        lf.filter(pl.col("s").str.ends_with("0")).collect()  # not pushed by Polars: every file is read


def test_arrow_dataset_skips_files_by_their_statistics(table):
    dataset = table.to_pyarrow_dataset()
    assert isinstance(dataset, ds.Dataset)
    _drop_file_of(table, 25)
    assert rows(table.scan(where="id < 20").to_arrow()) == rows(dataset.to_table(filter=ds.field("id") < 20))
    with pytest.raises(Exception):
        dataset.to_table()


def test_polars_limit_projection_and_eager(table):
    lf = lpl.scan(table)
    assert lf.head(3).collect().height == 3
    assert lpl.scan(table, columns=["s"]).collect().columns == ["s"]
    assert rows(table.to_polars()) == rows(table.to_arrow())
    assert rows(table.to_polars(where="id > 20", columns=["id"])) == Counter((i,) for i in range(21, 30))


def test_time_travel_by_version_tag_and_timestamp(table):
    table.tags.create("two_files", 2)
    v2 = table.scan(version=2).to_arrow()
    con = duckdb.connect()
    ldb.register(con, table, "v2", version=2)
    assert rows(con.sql("FROM v2").arrow()) == rows(v2)
    assert rows(lpl.scan(table, version="two_files").collect()) == rows(v2)
    assert rows(table.to_pyarrow_dataset(version=2).to_table()) == rows(v2)
    stamp = table.history()[-3]["timestamp"]  # version 2 (history is newest first; 4 versions)
    assert rows(ldb.sql(f"SELECT * FROM t AT (TIMESTAMP => '{stamp.isoformat()}')", tables={"t": table}).arrow()) == rows(v2)
    assert ldb.sql("SELECT count(*) FROM t FOR VERSION AS OF 'two_files'", tables={"t": table}).fetchall()[0][0] == 20
    assert ldb.sql("SELECT count(*) FROM t AT (VERSION => 1)", tables={"t": table}).fetchall()[0][0] == 10
    with pytest.raises(VersionNotFound):
        ldb.register(con, table, "nope", version=99)
    with pytest.raises(TagNotFound):
        lpl.scan(table, version="nope")


def test_sql_names_tables_by_location_and_joins_them(table, tmp_path):
    other = lamina.create_table(str(tmp_path / "names"), pa.schema([("id", pa.int64()), ("name", pa.string())]))
    other.append(pa.table({"id": [1, 3, 14, 20], "name": ["one", "three", "fourteen", "twenty"]}))
    q = f'SELECT n.name FROM "{table.io.uri}" e JOIN "{other.io.uri}" n ON e.id = n.id ORDER BY n.id'
    assert ldb.sql(q).fetchall() == [("one",), ("twenty",)]  # 3 and 14 are deleted


def test_catalog_tables_by_name(table, tmp_path):
    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/cat.db", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("sales")
    t = cat.create_table("sales.orders", SCHEMA)
    t.append(pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]}))
    t.delete("id = 2")
    con = duckdb.connect()
    assert ldb.register_catalog(con, cat) == ["sales.orders"]
    assert con.sql("SELECT sum(id) FROM sales.orders").fetchall()[0][0] == 4
    assert ldb.sql("SELECT count(*) FROM orders", catalog=cat).fetchall()[0][0] == 2
    assert ldb.sql("SELECT count(*) FROM sales.orders AT (VERSION => 1)", catalog=cat).fetchall()[0][0] == 3


def test_evolved_schema_and_lineage_read_through_every_engine(table):
    table.update_schema().rename_column("s", "label").commit()
    table.append(pa.table({"id": [100], "label": ["new"]}))
    want = table.to_arrow()
    assert want.column_names == ["id", "label"]
    con = duckdb.connect()
    ldb.register(con, table, "ev")
    assert rows(con.sql("SELECT * FROM ev").arrow()) == rows(want)
    # a renamed top-level column is still read by DuckDB itself, by its physical name
    assert "read_parquet" in con.sql("SELECT sql FROM duckdb_views() WHERE view_name = 'ev'").fetchall()[0][0]
    assert rows(lpl.scan(table).collect()) == rows(want)
    assert rows(lpl.scan(table).filter(pl.col("label") == "new").collect()) == Counter([(100, "new")])
    assert rows(table.to_pyarrow_dataset().to_table()) == rows(want)
    lineage = table.to_pyarrow_dataset(columns=["id", "_row_id"]).to_table()
    assert rows(lineage) == rows(table.scan(columns=["id", "_row_id"]).to_arrow())
    # a column with a default: rows written before it read the default in every engine
    table.update_schema().add_column("n", pa.int64(), default=7).commit()
    table.append(pa.table({"id": [101], "label": ["newer"], "n": [1]}))
    want = table.to_arrow()
    assert Counter(want.column("n").to_pylist()) == Counter({7: want.num_rows - 1, 1: 1})
    ldb.register(con, table, "ev")
    assert rows(con.sql("SELECT * FROM ev").arrow()) == rows(want)
    assert rows(lpl.scan(table).collect()) == rows(want)
    assert rows(lpl.scan(table).filter(pl.col("n") == 7).collect()) == rows(want.filter(pa.compute.equal(want["n"], 7)))
    assert rows(table.to_pyarrow_dataset().to_table()) == rows(want)


def test_bad_input_is_refused_and_creates_nothing(table):
    con = duckdb.connect()
    for bad in ("1; DROP TABLE x", "id > 1 UNION SELECT 1", "id >"):
        with pytest.raises(InvalidPredicate):
            ldb.register(con, table, "v", where=bad)
    assert con.sql("SELECT count(*) FROM duckdb_views() WHERE view_name = 'v'").fetchall()[0][0] == 0
    for bad in ("DROP TABLE t", "INSERT INTO t VALUES (1, 'a')", "SELECT 1; SELECT 2", "SELEC 1"):
        with pytest.raises(InvalidArgument):
            ldb.sql(bad, tables={"t": table})
    with pytest.raises(LaminaError):
        ldb.sql("SELECT * FROM t AT (VERSION => 1 + 1)", tables={"t": table})
    with pytest.raises(CorruptMetadata):  # a live file gone: Lamina says so, as for its own reads
        _drop_file_of(table, 25)
        table.to_arrow()


def test_empty_table_and_pruned_to_nothing(tmp_path):
    t = lamina.create_table(str(tmp_path / "e"), SCHEMA)
    con = duckdb.connect()
    assert ldb.register(con, t, "e").fetchall() == []
    assert lpl.scan(t).collect().shape == (0, 2)
    assert t.to_pyarrow_dataset().to_table().num_rows == 0
    t.append(pa.table({"id": [1], "s": ["a"]}))
    assert ldb.register(con, t, "e2", where="id > 5").fetchall() == []
    assert lpl.scan(t).filter(pl.col("id") > 5).collect().height == 0


def test_object_store_tables(s3):
    opts = s3.storage_options
    t = lamina.create_table(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}", SCHEMA, storage_options=opts)
    t.append(pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]}))
    t.append(pa.table({"id": [4, 5], "s": ["d", None]}))
    t.delete("id = 2")
    want = rows(t.to_arrow())
    con = duckdb.connect()
    assert rows(ldb.register(con, t, "remote").arrow()) == want
    assert rows(t.to_pyarrow_dataset().to_table()) == want
    assert rows(lpl.scan(t).collect()) == want
    assert rows(lpl.scan(t).filter(pl.col("id") > 3).collect()) == Counter([(4, "d"), (5, None)])


def _view_sql(con, name: str) -> str:
    return con.sql(f"SELECT sql FROM duckdb_views() WHERE view_name = '{name}'").fetchall()[0][0].replace(" ", "")


def test_files_without_a_later_column_read_null(table):
    """Files written before a column was added lack it: DuckDB reads NULL there (a group of
    files of their own, the column a typed NULL), never with union_by_name (which reads
    every file's footer at each bind)."""
    con = duckdb.connect()
    ldb.register(con, table, "before")
    assert "union_by_name" not in _view_sql(con, "before") and "CAST(NULL" not in _view_sql(con, "before")
    table.update_schema().add_column("extra", pa.string()).commit()
    table.append(pa.table({"id": [50], "s": ["t"], "extra": ["x"]}))
    want = table.to_arrow()
    ldb.register(con, table, "after")
    assert "CAST(NULLASVARCHAR)" in _view_sql(con, "after")
    assert rows(con.sql("SELECT * FROM after").arrow()) == rows(want)
    assert con.sql("SELECT count(*) FROM after WHERE extra IS NULL").fetchall()[0][0] == want.num_rows - 1
    assert rows(lpl.scan(table).collect()) == rows(want)
    assert rows(ldb.register(con, table, "late", where="extra = 'x'").arrow()) == Counter([(50, "t", "x")])


def test_a_file_added_without_a_column_reads_null(table):
    """add_files registers any Parquet file; one without statistics is asked for its columns."""
    import pyarrow.parquet as pq

    path = "data/added-by-hand.parquet"
    pq.write_table(pa.table({"id": [70, 71]}), table.io.local_path(path))
    size = os.path.getsize(table.io.local_path(path))
    table.add_files(pa.table({"path": [path], "size": [size], "record_count": [2]}))
    want = table.to_arrow()
    assert Counter(want.column("s").to_pylist())[None] == 2
    con = duckdb.connect()
    assert rows(ldb.register(con, table, "added").arrow()) == rows(want)
    assert rows(lpl.scan(table).collect()) == rows(want)


def test_engines_read_a_branch(tmp_path):
    """DuckDB's register and sql (AT (BRANCH => ...)) and Polars' scan read a branch's latest,
    never main's; main reads as before."""
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2]}))
    b = t.branches.create("etl")
    b.append(pa.table({"id": [3]}))
    b.delete("id = 1")
    con = duckdb.connect()
    ldb.register(con, t, "v", version="etl")
    assert sorted(r[0] for r in con.sql("select id from v").fetchall()) == [2, 3]
    assert sorted(r[0] for r in ldb.sql(f"select id from \"{t.uri}\" AT (BRANCH => 'etl')").fetchall()) == [2, 3]
    assert sorted(r[0] for r in ldb.sql(f"select id from \"{t.uri}\"").fetchall()) == [1, 2]
    assert sorted(lpl.scan(t.uri, version="etl").collect()["id"].to_list()) == [2, 3]
def test_sql_reads_a_branch_beside_main(table):
    """``AT (BRANCH => 'x')`` reads the branch's latest version; main's rows are another
    reference of the same table in the same query."""
    b = table.branches.create("fix", version=2)  # ids 0-19 (main deleted 3 and 14 later, at version 4)
    b.delete("id = 5")
    b.append(pa.table({"id": [100], "s": ["new"]}))
    q = "SELECT * FROM t AT (BRANCH => 'fix') WHERE id >= 4"
    assert rows(ldb.sql(q, tables={"t": table}).arrow()) == rows(b.to_arrow(where="id >= 4"))
    only_main = ("SELECT m.id FROM t m ANTI JOIN (SELECT id FROM t AT (BRANCH => 'fix')) f ON m.id = f.id ORDER BY m.id")
    assert ldb.sql(only_main, tables={"t": table}).fetchall() == [(5,)] + [(i,) for i in range(20, 30)]
    assert ldb.sql("SELECT count(*) FROM t AT (BRANCH => 'main')", tables={"t": table}).fetchall() == [(28,)]
    with pytest.raises(BranchNotFound):
        ldb.sql("SELECT * FROM t AT (BRANCH => 'nope')", tables={"t": table})
