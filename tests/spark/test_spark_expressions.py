"""SQL expressions from Spark (issue 50): ``lamina.spark.read(where=...)``, ``lamina.spark.delete``
and ``lamina.spark.merge`` with arithmetic, functions, LIKE, CASE and casts select exactly the
rows the Arrow path (``Table.scan`` / ``Table.delete`` / ``Table.merge``) selects on a copy of
the same table. Each expression is run the way Spark gets it: as Spark's own SQL where Spark
computes it as Lamina does, else by Lamina's engine in an Arrow UDF (both kinds are here)."""

from __future__ import annotations

import datetime as dt
import decimal
import shutil

import pyarrow as pa
import pytest

import lamina
from lamina.expr import Predicate, bind
from lamina.spark import delete as spark_delete
from lamina.spark import merge as spark_merge
from lamina.spark import read as spark_read
from lamina.spark._filters import from_spark_filter, spark_sql

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([
    ("id", pa.int64()), ("s", pa.string()), ("f", pa.float64()), ("dec", pa.decimal128(7, 2)), ("d", pa.date32()),
    ("tz", pa.timestamp("us", "UTC")), ("p", pa.struct([("x", pa.int64())])),
])


def rows(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": [None if i % 11 == 0 else ("Ab" if i % 3 else "x%") + str(i % 7) for i in ids],
        "f": [float("nan") if i % 13 == 0 else (i - 50) / 4 for i in ids],
        "dec": pa.array([decimal.Decimal(i * 7 % 100) / 4 for i in ids], pa.decimal128(7, 2)),
        "d": [dt.date(2024, 1, 25) + dt.timedelta(days=i) for i in ids],
        "tz": pa.array([dt.datetime(2024, 3, 30, 22) + dt.timedelta(hours=3 * i) for i in ids], pa.timestamp("us", "UTC")),
        "p": [None if i % 17 == 0 else {"x": i % 5} for i in ids],
    }, schema=SCHEMA)


# (expression, whether Spark computes it itself: False is Lamina's engine in an Arrow UDF)
EXPRESSIONS = [
    ("id % 10 = 3 OR (id + 1) * 2 > 150", True),
    ("s LIKE 'Ab%' AND length(s) = 3", True),
    ("s NOT LIKE 'x\\%_'", True),
    ("CASE WHEN f > 0 THEN f ELSE -f END BETWEEN 2 AND 5", True),  # NaN: above every number, in Spark too
    ("date_add(d, 10) < DATE '2024-03-01' AND dayofweek(d) IN (1, 7)", True),
    ("coalesce(p.x, -1) = -1 OR substring(s, 2, 1) = 'b'", True),
    ("lower(s) IN ('ab1', 'x%2')", False),  # Java's and Arrow's case mappings differ: Lamina's
    ("hour(tz) = 1 AND CAST(tz AS DATE) > DATE '2024-04-01'", False),  # a zoned timestamp: UTC, not the session's
    ("dec / 3 > 5.5", False),  # DECIMAL division: Lamina's (Spark's rules, by Arrow)
    ("TRY_CAST(substring(s, 3) AS INT) = 4", False),
]


def pair(tmp_path) -> tuple[lamina.Table, lamina.Table]:
    t = lamina.create_table(str(tmp_path / "spark"), SCHEMA)
    for k in range(4):
        t.append(rows(50 * k, 50 * k + 50))
    t.delete("id = 7")
    shutil.copytree(t.uri, str(tmp_path / "arrow"), ignore=shutil.ignore_patterns("*#*"))
    return t, lamina.open_table(str(tmp_path / "arrow"))


def ids_of(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_expressions_where_spark_agrees_are_spark_sql():
    schema = lamina.spec.schema.Schema.from_arrow(SCHEMA)
    for text, native in EXPRESSIONS:
        e = bind(text, schema)
        leaves = [e.left, e.right] if hasattr(e, "left") else [e]
        assert any(isinstance(x, Predicate) for x in leaves), text
        assert all((spark_sql(x.term, ansi=True) is not None) == native for x in leaves if isinstance(x, Predicate)), text


def test_read_delete_and_merge_select_the_arrow_paths_rows(spark, tmp_path):
    t, arrow = pair(tmp_path)
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")  # (Lamina's zone is UTC)
    try:
        for text, _ in EXPRESSIONS:
            got = spark_read(spark, t.uri, where=text).select("id").toArrow()
            assert ids_of(got) == ids_of(arrow.scan(where=text).to_arrow()), text
        # a delete, through Spark, of rows an expression selects
        where = "id % 10 = 3 OR lower(s) = 'ab1' OR dec / 3 > 8"
        spark_delete(spark, t.uri, where)
        arrow.delete(where)
        assert ids_of(lamina.open_table(t.uri).to_arrow()) == ids_of(arrow.to_arrow())
        # a merge whose clauses are expressions (Spark SQL, evaluated by Spark; Lamina's own SQL in
        # the Arrow merge: the same language)
        src = rows(180, 230).to_pandas()
        src_df = spark.createDataFrame(src, schema="id bigint, s string, f double, dec decimal(7,2), d date, tz timestamp, p struct<x: bigint>")
        clauses = dict(
            update=({"f": "CASE WHEN source.f > target.f THEN source.f ELSE target.f + 1 END", "s": "concat(target.s, '!')"},
                    "target.id % 3 = 0 AND startswith(target.s, 'Ab')"),
            delete="target.id % 3 = 1",
            insert="source.id * 2 < 440 AND date_add(source.d, 1) > DATE '2024-01-01'",
        )
        for builder in (spark_merge(t.uri, src_df, on="id"), arrow.merge(pa.Table.from_pandas(src, schema=SCHEMA), on="id")):
            (builder.when_matched_update(set=clauses["update"][0], condition=clauses["update"][1])
                .when_matched_delete(condition=clauses["delete"])
                .when_not_matched_insert_all(condition=clauses["insert"]).execute())
        got = sorted(lamina.open_table(t.uri).to_arrow().select(["id", "s", "f"]).to_pylist(), key=lambda r: r["id"])
        want = sorted(lamina.open_table(arrow.uri).to_arrow().select(["id", "s", "f"]).to_pylist(), key=lambda r: r["id"])
        assert [(r["id"], r["s"], repr(r["f"])) for r in got] == [(r["id"], r["s"], repr(r["f"])) for r in want]
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_pushed_string_filters_are_predicates():
    from pyspark.sql import datasource as sds

    schema = lamina.spec.schema.Schema.from_arrow(SCHEMA)
    e = from_spark_filter(sds.StringStartsWith(("s",), "Ab"), schema)
    assert e == bind("starts_with(s, 'Ab')", schema)
    assert from_spark_filter(sds.StringContains(("s",), "%"), schema) == bind("contains(s, '%')", schema)
