"""Exactness of the engine paths: DuckDB (``lamina.duckdb``), Polars (``lamina.polars``) and the
Arrow dataset (``to_pyarrow_dataset``) return exactly the version's rows a filter selects.

Random tables (partitioned or not, several appends, deletes that leave deletion vectors,
sometimes a compaction, sometimes a delete after it) and random predicates (comparisons,
IN, IS [NOT] NULL, AND / OR / NOT on integer, string, date and float columns, literals
inside and beyond the data, NaN in the float column). Each engine's oracle is the same
engine over the version's rows materialised by Lamina (``t.to_arrow()``, itself checked
against DuckDB by tests/data/test_differential.py): so the engine's own semantics apply on
both sides, and what is checked is that Lamina handed it exactly the live rows, and that
pruning by Lamina (of the filter the engine pushed, or the query's WHERE) never dropped a
file that holds a matching row. Results are compared as multisets.

    LAMINA_ENGINE_EXAMPLES=300 .venv/bin/python -m pytest -q tests/engines/test_engines_exactness.py
"""

from __future__ import annotations

import datetime as dt
import math
import os
import tempfile
from collections import Counter
from dataclasses import dataclass

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
import lamina.duckdb as ldb
from lamina.commit import flush_hints
import lamina.polars as lpl

EXAMPLES = int(os.environ.get("LAMINA_ENGINE_EXAMPLES", "25"))
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("s", pa.string()), ("d", pa.date32()), ("x", pa.float64())])
DAY0 = dt.date(2026, 1, 1)


def multiset(t: pa.Table) -> Counter:
    def norm(v):
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    if isinstance(t, pa.RecordBatchReader):  # (DuckDB's relation.arrow())
        t = t.read_all()
    cols = [t.column(n).to_pylist() for n in t.column_names]
    return Counter(tuple(norm(v) for v in row) for row in zip(*cols))


# -- predicates, rendered for each engine ------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    column: str
    op: str  # = != < <= > >= in isnull notnull
    value: object = None


@dataclass(frozen=True)
class Node:
    op: str  # and or not
    children: tuple


_SQL_OP = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _sql_lit(v) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, float):
        return "'NaN'::DOUBLE" if math.isnan(v) else repr(v)
    return str(v)


def to_sql(p) -> str:
    if isinstance(p, Node):
        if p.op == "not":
            return f"(NOT {to_sql(p.children[0])})"
        return "(" + f" {p.op.upper()} ".join(to_sql(c) for c in p.children) + ")"
    if p.op == "isnull":
        return f"({p.column} IS NULL)"
    if p.op == "notnull":
        return f"({p.column} IS NOT NULL)"
    if p.op == "in":
        return f"({p.column} IN ({', '.join(_sql_lit(v) for v in p.value)}))"
    return f"({p.column} {_SQL_OP[p.op]} {_sql_lit(p.value)})"


_COMPARE = {"=": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _with_operators(p, leaf):
    """The predicate built with ``~``, ``&`` and ``|`` from ``leaf(Leaf)`` (Polars and Arrow
    expressions both overload them)."""
    if isinstance(p, Leaf):
        return leaf(p)
    if p.op == "not":
        return ~_with_operators(p.children[0], leaf)
    out = _with_operators(p.children[0], leaf)
    for c in p.children[1:]:
        out = (out & _with_operators(c, leaf)) if p.op == "and" else (out | _with_operators(c, leaf))
    return out


def _polars_leaf(p: Leaf) -> pl.Expr:
    c = pl.col(p.column)
    if p.op == "isnull":
        return c.is_null()
    if p.op == "notnull":
        return c.is_not_null()
    if p.op == "in":
        return c.is_in(list(p.value))
    return getattr(c, _COMPARE[p.op])(p.value)


def _arrow_leaf(p: Leaf):
    c = ds.field(p.column)
    typ = SCHEMA.field(p.column).type
    if p.op == "isnull":
        return c.is_null()
    if p.op == "notnull":
        return c.is_valid()
    if p.op == "in":
        return c.isin(pa.array(list(p.value), typ))
    return getattr(c, _COMPARE[p.op])(pa.scalar(p.value, typ))


def to_polars(p) -> pl.Expr:
    return _with_operators(p, _polars_leaf)


def to_arrow(p):
    return _with_operators(p, _arrow_leaf)


_VALUES = {
    "id": st.integers(-5, 130),
    "k": st.integers(-3, 12),
    "s": st.sampled_from(["a", "b", "c", "m", "z", "", "b2"]),
    "d": st.integers(-3, 40).map(lambda n: DAY0 + dt.timedelta(days=n)),
    "x": st.one_of(st.floats(-2.0, 2.0, allow_nan=False), st.just(float("nan"))),
}


@st.composite
def leaves(draw):
    column = draw(st.sampled_from(SCHEMA.names))
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in", "isnull", "notnull"]))
    if op in ("isnull", "notnull"):
        return Leaf(column, op)
    if op == "in":
        return Leaf(column, op, tuple(draw(st.lists(_VALUES[column], min_size=1, max_size=3))))
    return Leaf(column, op, draw(_VALUES[column]))


predicates = st.recursive(
    leaves(),
    lambda children: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), st.lists(children, min_size=2, max_size=3)).map(lambda a: Node(a[0], tuple(a[1]))),
        children.map(lambda c: Node("not", (c,))),
    ),
    max_leaves=4,
)


# -- random tables -----------------------------------------------------------------------------


@st.composite
def batches(draw, start: int):
    n = draw(st.integers(1, 25))
    rows = []
    for i in range(n):
        rows.append({
            "id": start + i,
            "k": draw(st.one_of(st.none(), st.integers(0, 9))),
            "s": draw(st.one_of(st.none(), st.sampled_from(["a", "b", "c", "m", "z", ""]))),
            "d": DAY0 + dt.timedelta(days=draw(st.integers(0, 30))),
            "x": draw(st.one_of(st.none(), st.floats(-1.0, 1.0, allow_nan=False), st.just(float("nan")))),
        })
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@dataclass
class History:
    partition: str | None
    steps: list  # ("append", table) | ("delete", predicate) | ("compact",)


@st.composite
def histories(draw):
    partition = draw(st.sampled_from([None, "k", "day(d)", "bucket(4, id)", "truncate(1, s)"]))
    steps, start = [], 0
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["append", "append", "delete", "compact"]))
        if kind == "append":
            b = draw(batches(start))
            start += b.num_rows
            steps.append(("append", b))
        elif kind == "delete":
            steps.append(("delete", draw(leaves())))
        else:
            steps.append(("compact",))
    if start and not any(s[0] == "delete" for s in steps):
        steps.append(("delete", Leaf("id", "in", tuple(range(0, start, 3)))))  # always some DVs
    return History(partition, steps)


def build(root: str, h: History) -> lamina.Table:
    t = lamina.create_table(root, SCHEMA, partition_by=h.partition)
    for step in h.steps:
        if step[0] == "append":
            t.append(step[1])
        elif step[0] == "delete":
            t.delete(_lamina_where(step[1]))
        else:
            t.maintenance.compact()
    flush_hints()  # (version hints are written in the background: done before the directory goes)
    return t


def _without_nan(p):
    def fix(v):
        return 0.0 if isinstance(v, float) and math.isnan(v) else v

    if isinstance(p, Node):
        return Node(p.op, tuple(_without_nan(c) for c in p.children))
    return Leaf(p.column, p.op, tuple(map(fix, p.value)) if p.op == "in" else fix(p.value))


def _lamina_where(p) -> str:
    """The predicate as Lamina's where text (Lamina's parser has no NaN literal: a NaN
    becomes 0.0, still a valid random predicate)."""
    return to_sql(_without_nan(p)).replace("<>", "!=")


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(histories(), st.lists(predicates, min_size=3, max_size=3))
def test_engines_return_exactly_the_live_rows_a_filter_selects(h, preds):
    with tempfile.TemporaryDirectory() as d:
        t = build(os.path.join(d, "t"), h)
        rows = t.to_arrow()
        con = duckdb.connect()
        ldb.register(con, t, "lam")
        # a table of DuckDB's own: a WHERE on a registered Arrow table goes to pyarrow's scanner,
        # whose NaN and NULL comparisons are not SQL's (x <= NaN kept a NULL x there)
        con.register("rows", rows)
        con.execute("CREATE TABLE oracle AS SELECT * FROM rows")
        con.unregister("rows")
        frame, lazy = pl.from_arrow(rows), lpl.scan(t)
        dataset = t.to_pyarrow_dataset()
        assert multiset(con.sql("SELECT * FROM lam").arrow()) == multiset(rows)
        assert multiset(lazy.collect().to_arrow()) == multiset(rows)
        assert multiset(dataset.to_table()) == multiset(rows)
        for p in preds:
            sql = to_sql(p)
            want_duck = multiset(con.sql(f"SELECT * FROM oracle WHERE {sql}").arrow())
            assert multiset(con.sql(f"SELECT * FROM lam WHERE {sql}").arrow()) == want_duck, sql
            # lamina.duckdb.sql prunes files by the WHERE's conjuncts before DuckDB reads them
            assert multiset(ldb.sql(f"SELECT * FROM lam WHERE {sql}", con=con, tables={"lam": t}).arrow()) == want_duck, sql
            # a view registered with the filter holds exactly the rows it selects
            ldb.register(con, t, "lam_where", where=sql)
            assert multiset(con.sql("SELECT * FROM lam_where").arrow()) == want_duck, sql
            want_polars = multiset(frame.filter(to_polars(p)).to_arrow())
            assert multiset(lazy.filter(to_polars(p)).collect().to_arrow()) == want_polars, sql
            want_arrow = multiset(rows.filter(to_arrow(p)))
            assert multiset(dataset.to_table(filter=to_arrow(p))) == want_arrow, sql
        con.close()


@SETTINGS
@given(histories(), predicates)
def test_a_scans_where_makes_a_dataset_of_exactly_its_rows(h, p):
    with tempfile.TemporaryDirectory() as d:
        t = build(os.path.join(d, "t"), h)
        where = _lamina_where(p)
        want = t.scan(where=where).to_arrow()
        got = t.scan(where=where).to_pyarrow_dataset().to_table()
        assert multiset(got) == multiset(want)
        assert multiset(t.scan(where=where).to_reader().read_all()) == multiset(want)


def _qualified(p, alias: str):
    """The predicate with its columns named ``alias.column``."""
    if isinstance(p, Node):
        return Node(p.op, tuple(_qualified(c, alias) for c in p.children))
    return Leaf(f"{alias}.{p.column}", p.op, p.value)


def _with_row_groups(t: lamina.Table, root: str, start: int, n: int) -> None:
    """A file of ``n`` rows in row groups of 7, added as it is, then every 5th of its rows
    deleted: a deletion vector across several row groups of one file."""
    rows = pa.table({
        "id": pa.array(range(start, start + n), pa.int64()), "k": pa.array([i % 4 for i in range(n)], pa.int32()),
        "s": [f"g{i % 3}" for i in range(n)], "d": [DAY0 + dt.timedelta(days=i % 5) for i in range(n)],
        "x": [float(i) for i in range(n)],
    })
    path = f"data/rg-{start}.parquet"
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    pq.write_table(rows, os.path.join(root, path), row_group_size=7)
    t.add_files(pa.table({"path": [path]}))
    t.delete(f"id IN ({', '.join(str(i) for i in range(start, start + n, 5))})")


@settings(SETTINGS, max_examples=max(1, EXAMPLES // 2))
@given(histories(), histories(), predicates, st.sampled_from(["k", "s", "d"]))
def test_joins_of_tables_with_deletes_read_the_rows_scan_reads(h1, h2, p, key):
    """Two random tables (each also given a file whose deletion vector spans several row groups)
    joined on a column, filtered on one side, by DuckDB with 2 threads through ``sql`` (deletes
    in DuckDB's scan), ``register`` and the Arrow dataset: the rows DuckDB gives over ``scan()``'s."""
    with tempfile.TemporaryDirectory() as d:
        a, b = build(os.path.join(d, "a"), h1), build(os.path.join(d, "b"), h2)
        for t, h, start, n in ((a, h1, 10_000, 40), (b, h2, 20_000, 33)):
            if h.partition is None:  # (a file added as it is holds one partition's rows)
                _with_row_groups(t, os.path.join(d, "a" if t is a else "b"), start, n)
        con = duckdb.connect()
        con.execute("SET threads = 2")
        con.register("oa", a.scan().to_arrow())
        con.register("ob", b.scan().to_arrow())
        query = f"SELECT a.id AS a_id, b.id AS b_id, a.{key} FROM {{a}} a JOIN {{b}} b ON a.{key} = b.{key} WHERE " + to_sql(_qualified(p, "a"))
        want = multiset(con.sql(query.format(a="oa", b="ob")).arrow())
        assert multiset(ldb.sql(query.format(a="ta", b="tb"), con=con, tables={"ta": a, "tb": b}).arrow()) == want
        ldb.register(con, a, "ra")
        ldb.register(con, b, "rb")
        assert multiset(con.sql(query.format(a="ra", b="rb")).arrow()) == want
        con.register("da", a.to_pyarrow_dataset())
        con.register("db", b.to_pyarrow_dataset())
        assert multiset(con.sql(query.format(a="da", b="db")).arrow()) == want
        con.close()
