"""Spark on tables whose schema evolved (renames, drops, a dropped name added again, nested
fields, widened types, a required column with a default): every Spark path reads the
table's logical rows, filters name the logical columns, time travel reads the old schema,
and Spark writes store physical names so every reader reads them back.

The expected rows are a model built here from the generated values (never by the code
under test); DuckDB evaluates the filters and replays the row-level changes on it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.errors import SchemaMismatch
from lamina.spark import compact, delete, merge, read, write
from lamina.spark.write import session_conf

pytestmark = pytest.mark.xdist_group("spark")

D0 = dt.date(2026, 1, 1)
V1 = pa.schema([
    ("id", pa.int64()), ("a", pa.int32()), ("f", pa.float32()), ("d", pa.date32()), ("p", pa.decimal128(5, 2)),
    ("n", pa.int32()), ("s", pa.struct([("x", pa.int32()), ("y", pa.string())])),
    ("tags", pa.list_(pa.struct([("k", pa.int32())]))), ("gone", pa.string()),
])
DELETED = (3, 10, 150)


def _old_row(i: int) -> dict:
    """Row ``i`` as written under the first schema."""
    return {
        "id": i, "a": i * 3, "f": i + 0.5, "d": None if i % 11 == 0 else D0 + dt.timedelta(days=i % 5),
        "p": decimal.Decimal(i).scaleb(-2), "n": i % 4, "s": {"x": -i, "y": f"y{i}"},
        "tags": [{"k": i}, {"k": i + 1}] if i % 2 else None, "gone": f"old-{i}",
    }


def _as_evolved(r: dict) -> dict:
    """What an old row reads as after the evolution (the model of the schema changes)."""
    return {
        "id": r["id"], "amount": r["a"], "f": r["f"],
        "d": None if r["d"] is None else dt.datetime.combine(r["d"], dt.time()), "p": r["p"], "n": r["n"],
        "s": {"z": r["s"]["x"], "y": r["s"]["y"], "w": None},
        "tags": None if r["tags"] is None else [{"kk": t["k"]} for t in r["tags"]],
        "gone": None, "q": 7,  # the dropped column's values never come back; q reads its default
    }


def _new_row(i: int) -> dict:
    return {
        "id": i, "amount": 10_000_000 + i, "f": i + 0.25, "d": dt.datetime(2026, 2, 1, i % 24), "p": decimal.Decimal(i).scaleb(-2),
        "n": i % 4, "s": {"z": i, "y": None, "w": f"w{i}"}, "tags": [{"kk": -i}], "gone": f"new-{i}", "q": i % 3,
    }


def build(root, properties: dict | None = None) -> tuple[str, list[tuple[int, pa.Table]], pa.Table]:
    """An evolved table: (uri, [(version, model of its rows then)] for the version before the
    schema changed and the one after the renames and the drop, the model of its rows now)."""
    uri = str(root / "evolved")
    t = lamina.create_table(uri, V1, properties=properties)
    for lo, hi in ((0, 120), (120, 240)):
        t.append(pa.Table.from_pylist([_old_row(i) for i in range(lo, hi)], schema=V1))
    t.delete(f"id IN {DELETED}")  # a deletion vector the readers must apply
    before = t.version
    with t.update_schema() as u:
        u.rename_column("a", "amount")
        u.update_column("amount", pa.int64())
        u.update_column("f", pa.float64())
        u.update_column("d", pa.timestamp("us"))
        u.update_column("p", pa.decimal128(12, 2))
        u.rename_column("s.x", "z")
        u.update_column("s.z", pa.int64())
        u.add_column("s.w", pa.string())
        u.rename_column("tags.element.k", "kk")
        u.drop_column("gone")
    renamed, renamed_schema = t.version, t.schema
    with t.update_schema() as u:
        u.add_column("gone", pa.string())
        u.add_column("q", pa.int32(), default=7, required=True)
    schema = t.schema
    new = [_new_row(i) for i in range(1000, 1060)]
    t.append(pa.Table.from_pylist(new, schema=schema))
    old = [_old_row(i) for i in range(240) if i not in DELETED]
    then = pa.Table.from_pylist(old, schema=V1)
    now = pa.Table.from_pylist([_as_evolved(r) for r in old] + new, schema=schema)
    mid = pa.Table.from_pylist([_as_evolved(r) for r in old], schema=renamed_schema)  # without gone and q
    return uri, [(before, then), (renamed, mid)], now


@pytest.fixture(scope="module")
def evolved(tmp_path_factory):
    return build(tmp_path_factory.mktemp("evolution"))


@pytest.fixture
def fresh(tmp_path):
    return build(tmp_path)


def rows(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def duck(model: pa.Table, where: str | None = None) -> list[dict]:
    """The model's rows matching ``where``, as DuckDB evaluates it."""
    con = duckdb.connect()
    con.register("model", model)
    return rows(con.sql("SELECT * FROM model" + (f" WHERE {where}" if where else "")).to_arrow_table())


def data_files(uri: str) -> set[str]:
    return {os.path.join(d, n) for d, _, names in os.walk(os.path.join(uri, "data")) for n in names}


def test_every_spark_path_reads_the_logical_rows(spark, evolved):
    uri, _, model = evolved
    want = duck(model)
    assert rows(lamina.open_table(uri).to_arrow()) == want
    assert rows(read(spark, uri).toArrow()) == want
    # Spark's row-based Parquet reader casts narrow file columns up as the vectorized one does;
    # a date read as a wall-clock timestamp does not depend on the session time zone.
    conf = {"spark.sql.parquet.enableVectorizedReader": "false", "spark.sql.session.timeZone": "America/Los_Angeles"}
    with session_conf(spark, conf):
        assert rows(read(spark, uri).toArrow()) == want
    assert rows(spark.read.format("lamina").load(uri).toArrow()) == want
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW evolved_t USING lamina OPTIONS (path '{uri}')")
    assert rows(spark.sql("SELECT * FROM evolved_t").toArrow()) == want
    assert rows(read(spark, uri, columns=["id", "q", "gone"]).toArrow()) == duck(model.select(["id", "q", "gone"]))


@pytest.mark.parametrize("where", [
    "amount >= 300 AND amount < 10000030",  # renamed and widened
    "q = 7",  # read as its default from the files written before it existed
    "q != 7 OR gone IS NULL",
    "gone = 'new-1005' OR gone = 'old-5'",  # the dropped column's old values never match
    "f > 100.0 AND n IN (1, 2)",
    "d IS NULL",
])
def test_filters_name_the_logical_columns(spark, evolved, where):
    uri, _, model = evolved
    want = duck(model, where)
    assert want  # every filter keeps some rows
    assert rows(read(spark, uri, where=where).toArrow()) == want
    assert rows(read(spark, uri).where(where).toArrow()) == want  # Spark's filter, pushed to the physical column
    assert rows(spark.read.format("lamina").option("where", where).load(uri).toArrow()) == want
    assert rows(spark.read.format("lamina").load(uri).where(where).toArrow()) == want


def test_time_travel_reads_the_schema_of_its_version(spark, evolved):
    """The version before the schema changed, and the one after the renames and the drop."""
    uri, versions, _ = evolved
    for version, then in versions:
        want = duck(then)
        got = read(spark, uri, version=version).toArrow()
        assert got.column_names == then.column_names and rows(got) == want
        ds = spark.read.format("lamina").option("versionAsOf", str(version)).load(uri).toArrow()
        assert ds.column_names == then.column_names and rows(ds) == want


def _sdf(spark, t: pa.Table):
    from lamina.spark._types import spark_schema

    return spark.createDataFrame(t, schema=spark_schema(t.schema))


def test_spark_writes_store_physical_names_and_read_back(spark, fresh):
    """Appends (native and data source), an overwrite, a delete, a merge and a compaction into
    the evolved table; DuckDB replays each change on the model."""
    uri, _, model = fresh
    t = lamina.open_table(uri)
    con = duckdb.connect()
    con.register("m0", model)
    con.sql("CREATE TABLE model AS SELECT * FROM m0")
    before = data_files(uri)

    added = pa.Table.from_pylist([_new_row(i) for i in range(2000, 2040)], schema=t.schema).drop_columns(["q"])
    write(_sdf(spark, added), uri)  # q is not in the DataFrame: its write default
    con.register("added", added)
    con.sql("INSERT INTO model BY NAME SELECT *, 7 AS q FROM added")
    for f in data_files(uri) - before:
        names = pq.read_schema(f).names
        assert "a" in names and "amount" not in names and "q" not in names  # physical names
    # Footer statistics keyed right: the new file alone can hold these amounts.
    t.refresh()
    planned = t.scan(where="amount >= 10002000").plan().paths
    assert planned and all(os.path.join(uri, p) in data_files(uri) - before for p in planned)

    more = pa.Table.from_pylist([_new_row(i) for i in range(3000, 3010)], schema=t.schema)
    _sdf(spark, more).write.format("lamina").mode("append").save(uri)
    con.register("more", more)
    con.sql("INSERT INTO model SELECT * FROM more")

    repl = pa.Table.from_pylist([_new_row(i) for i in range(3000, 3005)], schema=t.schema)
    write(_sdf(spark, repl), uri, "overwrite", where="amount >= 10003000")
    con.register("repl", repl)
    con.sql("DELETE FROM model WHERE amount >= 10003000")
    con.sql("INSERT INTO model SELECT * FROM repl")

    delete(spark, uri, "amount < 90 OR gone = 'new-2001'")
    con.sql("DELETE FROM model WHERE amount < 90 OR gone = 'new-2001'")

    src = spark.createDataFrame([(40, 5), (2002, 6), (9999, 7)], "id long, amount long")
    merge(uri, src, on="id").when_matched_update({"amount": "source.amount"}) \
        .when_not_matched_insert({"id": "source.id", "amount": "source.amount", "q": "1"}).execute()
    con.sql("UPDATE model SET amount = 5 WHERE id = 40")
    con.sql("UPDATE model SET amount = 6 WHERE id = 2002")
    con.sql("INSERT INTO model (id, amount, q) VALUES (9999, 7, 1)")
    # an insert that does not set q stores its write default, as an append does
    merge(uri, spark.createDataFrame([(9998, 8)], "id long, amount long"), on="id") \
        .when_not_matched_insert({"id": "source.id", "amount": "source.amount"}).execute()
    con.sql("INSERT INTO model (id, amount, q) VALUES (9998, 8, 7)")

    want = rows(con.sql("SELECT * FROM model").to_arrow_table())
    t.refresh()
    assert rows(t.to_arrow()) == want
    assert rows(read(spark, uri).toArrow()) == want
    compact(spark, uri)
    t.refresh()
    assert rows(t.to_arrow()) == want and rows(read(spark, uri).toArrow()) == want
    assert rows(spark.read.format("lamina").load(uri).toArrow()) == want


def test_merge_schema_widens_only_where_the_table_enables_type_widening(spark, fresh):
    from pyspark.sql import functions as F

    uri, _, _ = fresh
    t = lamina.open_table(uri)
    version, files = t.version, data_files(uri)
    wide = spark.createDataFrame([(5001, 2**40, 1.5, 0)], "id long, n long, more double, q int")  # n is int
    with pytest.raises(SchemaMismatch, match="schema.type-widening.enabled") as e:
        write(wide, uri, schema_mode="merge")
    assert "column 'n' is bigint, the table has int" in str(e.value)
    with pytest.raises(Exception, match="schema.type-widening.enabled"):
        wide.write.format("lamina").mode("append").option("mergeSchema", "true").save(uri)
    t.refresh()
    assert t.version == version and data_files(uri) == files and "more" not in t.schema.names  # nothing at all
    # What it takes without widening: the values in the table's type.
    write(wide.withColumn("n", F.lit(3).cast("int")), uri, schema_mode="merge")
    t.refresh()
    assert t.schema.field("n").type == pa.int32() and t.schema.names[-1] == "more"
    assert t.to_arrow(where="id = 5001").select(["n", "more"]).to_pylist() == [{"n": 3, "more": 1.5}]


def test_merge_schema_adds_and_widens_in_the_same_version(spark, tmp_path):
    uri, _, model = build(tmp_path, {"schema.type-widening.enabled": "true"})
    t = lamina.open_table(uri)
    df = spark.createDataFrame(
        [(5000, 1, 2, {"z": 1, "y": "a", "w": "b", "v": 3}, "e1")],
        "id long, amount long, q int, s struct<z:long,y:string,w:string,v:int>, extra string",
    )
    version, files = t.version, data_files(uri)
    with pytest.raises(SchemaMismatch, match="mergeSchema") as e:
        write(df, uri)
    assert "extra column 'extra'" in str(e.value)
    with pytest.raises(Exception, match="mergeSchema"):
        df.write.format("lamina").mode("append").save(uri)
    t.refresh()
    assert t.version == version and data_files(uri) == files  # nothing written, nothing committed

    assert write(df, uri, schema_mode="merge").version == version + 1  # schema change and rows: one version
    t.refresh()
    assert t.schema.names == [*model.column_names, "extra"]
    assert t.schema.field("s").type.names == ["z", "y", "w", "v"]
    # The data source: a column widened (n: int -> bigint) and one added, in one version.
    wide = spark.createDataFrame([(5001, 2**40, 1.5, 0)], "id long, n long, more double, q int")
    wide.write.format("lamina").mode("append").option("mergeSchema", "true").save(uri)
    t.refresh()
    assert t.version == version + 2 and t.schema.field("n").type == pa.int64() and t.schema.names[-1] == "more"

    con = duckdb.connect()
    con.register("m0", model)
    want = duck(con.sql(
        "SELECT id, amount, f, d, p, CAST(n AS BIGINT) AS n, struct_insert(s, v := NULL::INT) AS s, tags, gone, q, "
        "NULL::VARCHAR AS extra, NULL::DOUBLE AS more FROM m0 "
        "UNION ALL SELECT 5000, 1, NULL, NULL, NULL, NULL, {'z': 1, 'y': 'a', 'w': 'b', 'v': 3}, NULL, NULL, 2, 'e1', NULL "
        "UNION ALL SELECT 5001, NULL, NULL, NULL, NULL, 1099511627776, NULL, NULL, NULL, 0, NULL, 1.5"
    ).to_arrow_table())
    assert rows(t.to_arrow()) == want
    assert rows(read(spark, uri).toArrow()) == want
    assert rows(spark.read.format("lamina").load(uri).toArrow()) == want
