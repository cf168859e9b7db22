"""``MERGE INTO`` through lamina.spark.sql against DuckDB's MERGE INTO on the same rows: random
targets, sources and clause lists (several WHEN MATCHED / NOT MATCHED / NOT MATCHED BY SOURCE, with
and without conditions, every action), the table's rows and Delta's counts compared. DuckDB's
``RETURNING merge_action`` gives the oracle's counts. Whole-row clauses without conditions run
on the driver (Arrow), the others as a Spark job: both are drawn."""

from __future__ import annotations

import uuid

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.spark import sql

from support.spark_results import bag

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())])

MATCHED_CONDITIONS = ["s.a > 0", "t.a IS NULL", "s.b = t.b", "t.a + s.a > 1", "s.b IS NULL"]
MATCHED_ACTIONS = ["DELETE", "UPDATE SET *", "UPDATE SET a = t.a + s.a, b = s.b", "UPDATE SET b = 'u'"]
INSERT_CONDITIONS = ["s.a > 0", "s.b IS NOT NULL", "s.a IS NULL"]
INSERT_ACTIONS = ["INSERT *", "INSERT (id, a) VALUES (s.id, s.a * 2)", "INSERT (b, id) VALUES ('new', s.id)"]
BY_SOURCE_CONDITIONS = ["t.a > 0", "t.b = 'x'", "t.a IS NULL"]
BY_SOURCE_ACTIONS = ["DELETE", "UPDATE SET a = t.a - 1", "UPDATE SET b = 'gone'"]

values = st.one_of(st.none(), st.integers(-2, 3))
labels = st.sampled_from([None, "x", "y"])


def frame(ids: list) -> st.SearchStrategy:
    return st.tuples(*[st.tuples(st.just(i), values, labels) for i in ids])


@st.composite
def rows(draw, nulls: int) -> list[tuple]:
    """Rows with distinct non-null keys (a target row matched by two source rows is an error,
    in Delta as here) and up to ``nulls`` NULL keys, which never match."""
    ids = draw(st.lists(st.integers(0, 9), max_size=7, unique=True)) + [None] * draw(st.integers(0, nulls))
    return list(draw(frame(ids)))


@st.composite
def clauses(draw, kind: str, conditions: list[str], actions: list[str]) -> list[str]:
    """0-2 clauses of one kind; only the last may go without a condition (Spark's rule)."""
    n = draw(st.integers(0, 2))
    out = []
    for i in range(n):
        cond = draw(st.sampled_from(conditions)) if i < n - 1 or draw(st.booleans()) else None
        out.append(f"WHEN {kind}{'' if cond is None else f' AND {cond}'} THEN {draw(st.sampled_from(actions))}")
    return out


@st.composite
def merges(draw) -> tuple[list, list, list[str]]:
    whens = (draw(clauses("MATCHED", MATCHED_CONDITIONS, MATCHED_ACTIONS))
             + draw(clauses("NOT MATCHED", INSERT_CONDITIONS, INSERT_ACTIONS))
             + draw(clauses("NOT MATCHED BY SOURCE", BY_SOURCE_CONDITIONS, BY_SOURCE_ACTIONS)))
    if not whens:
        whens = ["WHEN NOT MATCHED THEN INSERT *"]
    return draw(rows(1)), draw(rows(2)), whens


def arrow(data: list[tuple]) -> pa.Table:
    return pa.table({n: [r[i] for r in data] for i, n in enumerate(SCHEMA.names)}, schema=SCHEMA)


def oracle(target: list, source: list, statement: str) -> tuple[pa.Table, dict[str, int]]:
    """DuckDB's MERGE of the same rows: the rows after it, and its counts by action."""
    con = duckdb.connect()
    con.register("target_rows", arrow(target))
    con.register("source_rows", arrow(source))
    con.execute("CREATE TABLE t AS SELECT * FROM target_rows")
    con.execute("CREATE TABLE s AS SELECT * FROM source_rows")
    actions = [r[0] for r in con.execute(statement.format(target="t", source="s") + " RETURNING merge_action").fetchall()]
    counts = {k: actions.count(k) for k in ("UPDATE", "DELETE", "INSERT")}
    return con.sql("SELECT * FROM t").to_arrow_table().cast(SCHEMA), counts


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=merges())
def test_merge_into_matches_duckdb(spark, tmp_path, case):
    target, source, whens = case
    statement = "MERGE INTO {target} t USING {source} s ON t.id = s.id " + " ".join(whens)
    want, counts = oracle(target, source, statement)

    t = lamina.create_table(str(tmp_path / uuid.uuid4().hex), SCHEMA)
    half = len(target) // 2
    for part in (target[:half], target[half:]):  # two files: matches in several files
        if part:
            t.append(arrow(part))
    view = f"merge_source_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame(arrow(source)).createOrReplaceTempView(view)
    try:
        got = sql(spark, statement.format(target=f"lamina.`{t.uri}`", source=view)).collect()[0].asDict()
    finally:
        spark.catalog.dropTempView(view)
    assert got == {"num_affected_rows": sum(counts.values()), "num_updated_rows": counts["UPDATE"],
                   "num_deleted_rows": counts["DELETE"], "num_inserted_rows": counts["INSERT"]}, statement
    assert bag(t.refresh().to_arrow()) == bag(want), statement
