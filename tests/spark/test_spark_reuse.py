"""One DataFrame, many queries: the notebook pattern over ``format("lamina")``.

``r = spark.read.format("lamina").load(p)`` then ``r.where(a)``, ``r.where(b)``, … must each
return exactly the rows of their own predicate, whatever came before, with filter pushdown
on or off, for counts and collects, in unions and self-joins of ``r``, and for a SQL view.
Every expected result comes from DuckDB over the source rows, never from Lamina.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.spark.write import session_conf

from support.spark_results import bag, collect

pytestmark = pytest.mark.xdist_group("spark")

N = 2000
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
COLUMNS = ["id", "category", "amount"]


def rows(n: int = N, seed: int = 7, start: int = 0) -> pa.Table:
    """Sequential ids (so files hold disjoint id ranges and pruning bites), categories with
    NULLs, amounts with NULLs and NaN."""
    rng = np.random.default_rng(seed)
    amount = rng.normal(100, 30, n).round(1)
    amount[rng.random(n) < 0.03] = np.nan
    cats = np.array([f"c{i}" for i in range(8)], dtype=object)[rng.integers(0, 8, n)]
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "category": pa.array(cats, pa.string(), mask=rng.random(n) < 0.05),
        "amount": pa.array(amount, mask=rng.random(n) < 0.03),
    })


def new_table(uri: str, data: pa.Table) -> lamina.Table:
    t = lamina.create_table(uri, data.schema, properties={"write.max-rows-per-file": "100"})
    t.append(data)
    return t


class Oracle:
    """The same SQL over the same rows in DuckDB."""

    def __init__(self, data: pa.Table) -> None:
        self.con = duckdb.connect()
        # Copied into DuckDB's own storage: over a registered Arrow table DuckDB 1.5.5 pushes
        # comparisons into Arrow's scan, where every comparison with NaN is false.
        self.con.register("data_arrow", data)
        self.con.sql("CREATE TABLE data AS SELECT * FROM data_arrow")
        self.con.unregister("data_arrow")

    def rows(self, predicate: str | None, columns=COLUMNS) -> pa.Table:
        where = "" if predicate is None else f" WHERE {predicate}"
        return self.con.sql(f"SELECT {', '.join(columns)} FROM data{where}").to_arrow_table()

    def count(self, predicate: str | None) -> int:
        return self.rows(predicate).num_rows


@pytest.fixture(scope="module")
def shared(spark, tmp_path_factory):
    """One table (20 files of 100 rows) for every test here that does not write."""
    data = rows()
    uri = str(tmp_path_factory.mktemp("reuse") / "t")
    new_table(uri, data)
    return uri, Oracle(data)


def check(df, oracle: Oracle, predicate: str | None, columns: list[str] | None) -> None:
    """``df`` filtered by ``predicate``: its count (``columns`` None) or its rows of ``columns``."""
    q = df if predicate is None else df.where(predicate)
    if columns is None:
        assert q.count() == oracle.count(predicate), predicate
    else:
        assert bag(collect(q.select(*columns))) == bag(oracle.rows(predicate, columns)), (predicate, columns)


# The counts first (narrow, then widen with OR, then OR on another column), then
# collects of other columns, a repeat, no filter at all, a NOT, a float column with NaN and NULL.
NOTEBOOK = [
    ("id < 10", None),
    ("id < 10 OR id > 1990", None),
    ("category = 'c1' OR category = 'c2'", None),
    ("id < 10", ["amount"]),
    (None, None),
    ("NOT (id < 1990) AND category IN ('c3', 'c4')", COLUMNS),
    ("amount > 120 OR category IS NULL", ["id", "amount"]),
]


def test_one_dataframe_many_queries_with_and_without_pushdown(spark, shared):
    uri, oracle = shared
    r = spark.read.format("lamina").load(uri)
    for pushdown in ("true", "false"):  # the same DataFrame, then with pushdown turned off
        with session_conf(spark, {PUSHDOWN: pushdown}):
            for predicate, columns in NOTEBOOK:
                check(r, oracle, predicate, columns)


def test_scans_of_one_dataframe_in_one_query(spark, shared):
    """A union and a self-join put two scans of ``r`` with different filters in one plan."""
    uri, oracle = shared
    r = spark.read.format("lamina").load(uri)
    both = r.where("id < 10").unionAll(r.where("id > 1990"))
    assert bag(collect(both)) == bag(oracle.rows("id < 10 OR id > 1990"))
    joined = r.where("id < 10").alias("a").join(r.where("id >= 5 AND category = 'c1'").alias("b"), "id")
    assert bag(collect(joined.select("id"))) == bag(oracle.rows("id < 10 AND id >= 5 AND category = 'c1'", ["id"]))


def test_sql_view_and_fast_read_reused(spark, shared):
    from lamina.spark import read

    uri, oracle = shared
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW reused_v USING lamina OPTIONS (path '{uri}')")
    fast = read(spark, uri)
    for predicate, columns in NOTEBOOK[:3]:
        where = "" if predicate is None else f" WHERE {predicate}"
        assert spark.sql(f"SELECT count(*) AS n FROM reused_v{where}").collect()[0].n == oracle.count(predicate)
        check(fast, oracle, predicate, columns or COLUMNS)


def test_where_option_prunes_files_and_filters_rows(spark, shared):
    """``where`` belongs to the DataFrame: files are pruned by it, rows filtered exactly by it,
    and every query of the DataFrame sees only those rows."""
    from lamina.spark.datasource import LaminaDataSource

    uri, oracle = shared
    where = "id >= 150 AND id < 420 AND category IS NOT NULL"
    source = LaminaDataSource({"path": uri, "where": where})
    reader = source.reader(source.schema())
    files = [p for part in reader.partitions() for p, _ in part.files]
    assert len(files) == 4  # ids 100..499 of 20 files of 100 ids
    r = spark.read.format("lamina").option("where", where).load(uri)
    check(r, oracle, f"({where})", COLUMNS)
    check(r.where("category = 'c2'"), oracle, f"({where}) AND category = 'c2'", None)
    check(r, oracle, f"({where}) AND amount > 100", ["amount"])


def test_dataframe_reads_the_version_it_was_loaded_at(spark, tmp_path):
    """Schema and rows of one DataFrame (or temporary view) come from one version, for every
    query of it, also after commits; a new load (or a re-created view) sees them."""
    first, second = rows(300, seed=1), rows(300, seed=2, start=300)
    uri = str(tmp_path / "t")
    t = new_table(uri, first)
    r = spark.read.format("lamina").load(uri)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW pinned_v USING lamina OPTIONS (path '{uri}')")
    assert r.where("id < 10").count() == 10
    t.append(second)
    one = Oracle(first)
    check(r, one, None, COLUMNS)
    check(r, one, "id > 250 OR category = 'c1'", None)
    assert spark.sql("SELECT count(*) AS n FROM pinned_v WHERE id >= 0").collect()[0].n == first.num_rows
    both = pa.concat_tables([first, second])
    assert bag(collect(spark.read.format("lamina").load(uri))) == bag(both)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW pinned_v USING lamina OPTIONS (path '{uri}')")
    assert spark.sql("SELECT count(*) AS n FROM pinned_v").collect()[0].n == both.num_rows



def test_a_dataframe_queried_again_after_expiry_removed_its_version_says_so(spark, tmp_path):
    """A notebook's DataFrame reads the version it was loaded at; once expiry removed that
    version and its files, a new query of it fails saying the version is no longer kept, not
    that the table is corrupt (which `lamina fsck` would not confirm)."""
    from datetime import timedelta

    uri = str(tmp_path / "t")
    t = new_table(uri, rows(300))
    r = spark.read.format("lamina").load(uri)
    assert r.where("id < 10").count() == 10
    pinned = t.version
    t.overwrite(rows(50, seed=3, start=1000))
    assert pinned in t.maintenance.expire_versions(retain_last=1, older_than=timedelta(0), reader_grace=timedelta(0)).expired_versions
    with pytest.raises(Exception, match=f"version {pinned} of .* is no longer kept") as e:
        r.where("id >= 0").count()
    assert "CorruptMetadata" not in str(e.value)
    assert spark.read.format("lamina").load(uri).count() == 50

# --- random sequences of queries on one DataFrame ---------------------------------------------

ATOMS = st.one_of(
    st.integers(-5, N + 5).map(lambda k: f"id < {k}"),
    st.integers(-5, N + 5).map(lambda k: f"id > {k}"),
    st.tuples(st.integers(0, N), st.integers(0, 300)).map(lambda a: f"id BETWEEN {a[0]} AND {a[0] + a[1]}"),
    st.integers(0, 8).map(lambda i: f"category = 'c{i}'"),
    st.sets(st.integers(0, 8), min_size=1, max_size=3).map(lambda s: "category IN (" + ", ".join(f"'c{i}'" for i in sorted(s)) + ")"),
    st.sampled_from(["category IS NULL", "category IS NOT NULL", "amount IS NULL"]),
    st.integers(40, 160).map(lambda x: f"amount > {x}"),
    st.integers(40, 160).map(lambda x: f"amount <= {x}"),
)
PREDICATES = st.recursive(
    ATOMS,
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda p: f"({p[0]}) AND ({p[1]})"),
        st.tuples(inner, inner).map(lambda p: f"({p[0]}) OR ({p[1]})"),
        inner.map(lambda p: f"NOT ({p})"),
    ),
    max_leaves=4,
)
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["count", "collect", "union"]),
        PREDICATES,
        PREDICATES,
        st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=3, unique=True),
        st.sampled_from(["true", "false"]),
    ),
    min_size=2,
    max_size=4,
)


@settings(max_examples=5, deadline=None)
@given(steps=STEPS)
def test_random_query_sequences_on_one_dataframe(spark, shared, steps):
    uri, oracle = shared
    r = spark.read.format("lamina").load(uri)
    for kind, p, q, columns, pushdown in steps:
        with session_conf(spark, {PUSHDOWN: pushdown}):
            if kind == "count":
                assert r.where(p).count() == oracle.count(p), p
            elif kind == "collect":
                assert bag(collect(r.where(p).select(*columns))) == bag(oracle.rows(p, columns)), p
            else:
                got = r.where(p).select(*columns).unionAll(r.where(q).select(*columns))
                want = pa.concat_tables([oracle.rows(p, columns), oracle.rows(q, columns)])
                assert bag(collect(got)) == bag(want), (p, q)


def test_a_schema_given_to_the_read_is_refused(spark, shared):
    """A schema other than the one of the version read cannot be honoured (as Delta refuses it)."""
    uri, _ = shared
    schema = spark.read.format("lamina").load(uri).schema
    with pytest.raises(Exception, match=r"remove \.schema"):
        spark.read.format("lamina").schema(schema).load(uri).count()
