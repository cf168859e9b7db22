"""Predicates: parsing, building, binding, Arrow filtering and manifest pruning."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lamina.errors import InvalidPredicate
from lamina.expr import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    and_,
    bind,
    col,
    lit,
    may_match,
    or_,
    parse_predicate,
    referenced_columns,
    rewrite_not,
    to_arrow_filter,
    to_expr,
)
from lamina.spec import content as C
from lamina.spec.partition import PartitionSpec, parse_partition_by
from lamina.spec.schema import Schema

SCHEMA = Schema.from_arrow(
    pa.schema(
        [
            ("id", pa.int64()),
            ("f", pa.float64()),
            ("cat", pa.string()),
            ("d", pa.date32()),
            ("ts", pa.timestamp("us")),
        ]
    )
)
D0 = dt.date(2024, 1, 1)
T0 = dt.datetime(2024, 1, 1)


# --- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql,expected",
    [
        ("id = 1", Compare("=", "id", 1)),
        ("1 < id", Compare(">", "id", 1)),
        ("10 >= id", Compare("<=", "id", 10)),
        ("id <> 3", Compare("!=", "id", 3)),
        ("id != -3", Compare("!=", "id", -3)),
        ("f > -1.5", Compare(">", "f", -1.5)),
        ("f < 1e3", Compare("<", "f", 1000.0)),
        ("cat = 'it''s'", Compare("=", "cat", "it's")),
        ("cat IN ('a', 'b')", In("cat", ("a", "b"))),
        ("cat NOT IN ('a')", NotIn("cat", ("a",))),
        ("NOT cat IN ('a')", NotIn("cat", ("a",))),
        ("cat IS NULL", IsNull("cat")),
        ("cat IS NOT NULL", NotNull("cat")),
        ("id BETWEEN 1 AND 5", And(Compare(">=", "id", 1), Compare("<=", "id", 5))),
        ("d = DATE '2024-01-01'", Compare("=", "d", D0)),
        ("ts >= TIMESTAMP '2024-01-01 10:00:00'", Compare(">=", "ts", dt.datetime(2024, 1, 1, 10))),
        ("flag = TRUE", Compare("=", "flag", True)),
        ("flag", Compare("=", "flag", True)),
        ('"my col" = 1', Compare("=", "my col", 1)),
        ("`my col` = 1", Compare("=", "my col", 1)),
        ("NOT (id = 1 OR cat IS NULL)", Not(Or(Compare("=", "id", 1), IsNull("cat")))),
        ("(id = 1) AND ((cat = 'x'))", And(Compare("=", "id", 1), Compare("=", "cat", "x"))),
        ("TRUE", AlwaysTrue()),
        ("FALSE", AlwaysFalse()),
    ],
)
def test_parse(sql, expected):
    assert parse_predicate(sql) == expected


@pytest.mark.parametrize(
    "sql,needle",
    [
        ("id = (SELECT 1)", "subqueries are not supported"),
        ("id IN (SELECT 1)", "subquery"),
        ("id = NULL", "IS NULL"),
        ("id + 1 = NULL", "IS NULL"),
        ("cat RLIKE 'a.*'", "RLIKE"),
        ("id = CAST(1 AS ARRAY<INT>)", "CAST to"),
        ("ts > now() - INTERVAL '1-2' YEAR TO MONTH", "INTERVAL needs one number and one unit"),
        ("ts > now() - INTERVAL 1 FORTNIGHT", "unknown INTERVAL unit"),
        ("ts > now() - INTERVAL 1.5 MONTH", "months must be whole"),
        ("id IS 3", "IS takes NULL, TRUE or FALSE"),
        ("1; DROP TABLE x", "single boolean expression"),
        ("id = 1; DROP TABLE x", "single boolean expression"),
        ("id = 1 UNION SELECT 2", "single boolean expression"),
        ("id = 1 LIMIT 1", "single boolean expression"),
        ("id =", "could not parse"),
        ("cat = 'unterminated", "could not parse"),
        ("((id = 1)", "could not parse"),
        ("", "empty"),
        ("d = DATE 'yesterday'", "invalid DATE literal"),
        ("NOT " * 5000 + "id = 1", "nested"),
    ],
)
def test_parse_errors(sql, needle):
    with pytest.raises(InvalidPredicate) as e:
        parse_predicate(sql)
    assert needle in str(e.value)
    if needle not in ("nested", "empty"):
        assert "supported:" in str(e.value)  # tells the user what would work


def test_parse_long_chains_stay_shallow():
    e = parse_predicate(" OR ".join(f"id = {i}" for i in range(3000)))
    t = pa.table({"id": pa.array([5, 2999, 3000, None], pa.int64())})
    assert t.filter(to_arrow_filter(bind(e, SCHEMA)))["id"].to_pylist() == [5, 2999]


def test_to_expr():
    assert to_expr(None) == AlwaysTrue()
    assert to_expr("id = 1") == Compare("=", "id", 1)
    e = col("id") > 1
    assert to_expr(e) is e
    with pytest.raises(InvalidPredicate):
        to_expr(42)


# --- builder --------------------------------------------------------------------------------


def test_builder():
    assert (col("id") >= 10) == Compare(">=", "id", 10)
    assert (10 <= col("id")) == Compare(">=", "id", 10)
    assert (col("id") == lit(3)) == Compare("=", "id", 3)
    assert col("c").isin(["a", "b"]) == In("c", ("a", "b"))
    assert col("c").notin({"a"}) == NotIn("c", ("a",))
    assert col("x").is_null() == IsNull("x")
    assert col("x").is_not_null() == NotNull("x")
    assert ((col("a") == 1) & (col("b") == 2)) == And(Compare("=", "a", 1), Compare("=", "b", 2))
    assert ((col("a") == 1) | (col("b") == 2)) == Or(Compare("=", "a", 1), Compare("=", "b", 2))
    assert ~(col("a") == 1) == Compare("!=", "a", 1)
    assert ~((col("a") < 1) & col("b").isin([1])) == Or(Compare(">=", "a", 1), NotIn("b", (1,)))
    assert col("a").between(1, 2) == parse_predicate("a BETWEEN 1 AND 2")
    assert and_() == AlwaysTrue() and or_() == AlwaysFalse()
    assert referenced_columns(parse_predicate("a = 1 AND (b IS NULL OR NOT c IN (1))")) == {"a", "b", "c"}
    assert str(parse_predicate("\"my col\" = 'x' AND NOT b < 2")) == "(\"my col\" = 'x' AND (NOT b < 2))"
    for bad in [lambda: col("a") == None, lambda: col("a") == col("b"), lambda: Compare("~", "a", 1),  # noqa: E711
                lambda: col("a").isin("abc"), lambda: col("")]:
        with pytest.raises(InvalidPredicate):
            bad()


def test_rewrite_not_is_negation_normal_form():
    e = Not(And(Not(Compare("<", "a", 1)), Or(IsNull("b"), Not(NotIn("c", (1, 2))))))
    assert rewrite_not(e) == Or(Compare("<", "a", 1), And(NotNull("b"), NotIn("c", (1, 2))))


# --- binding -----------------------------------------------------------------------------------


def test_bind_coerces_literals():
    s = Schema.from_arrow(pa.schema([("i", pa.int32()), ("f", pa.float32()), ("d", pa.date32()), ("ts", pa.timestamp("ms", "UTC")),
                                     ("c", pa.string()), ("b", pa.bool_()), ("Mixed", pa.int64())]))
    def b(sql):
        return bind(sql, s)
    assert b("i = 5") == Compare("=", "i", pa.scalar(5, pa.int32()))
    assert b("i = '5'") == Compare("=", "i", pa.scalar(5, pa.int32()))
    assert b("f = 1") == Compare("=", "f", pa.scalar(1.0, pa.float32()))
    assert b("d = '2024-01-01'") == Compare("=", "d", pa.scalar(D0, pa.date32()))
    assert b("ts >= '2024-01-01'") == Compare(">=", "ts", pa.scalar(T0, pa.timestamp("ms", "UTC")))
    assert b("mixed = 1") == Compare("=", "Mixed", pa.scalar(1))  # unquoted names are case-insensitive
    # values the column cannot hold are rewritten exactly
    assert b("i < 10.5") == Compare("<=", "i", pa.scalar(10, pa.int32()))
    assert b("i > 10.5") == Compare(">=", "i", pa.scalar(11, pa.int32()))
    assert b("i = 10.5") == AlwaysFalse()
    assert b("i != 10.5") == NotNull("i")
    assert b("i < 3000000000") == Compare("<=", "i", pa.scalar(2**31 - 1, pa.int32()))
    assert b("i > 3000000000") == AlwaysFalse()
    assert b("d > TIMESTAMP '2024-01-01 10:00:00'") == Compare(">=", "d", pa.scalar(dt.date(2024, 1, 2), pa.date32()))
    assert b("d IN (TIMESTAMP '2024-01-01 10:00:00', DATE '2024-01-05')") == Compare("=", "d", pa.scalar(dt.date(2024, 1, 5)))
    assert b("NOT (i = 1 AND FALSE)") == AlwaysTrue()
    bound = b("NOT (i IN (1, 2) OR c IS NULL)")
    assert bound == And(NotIn("i", (pa.scalar(1, pa.int32()), pa.scalar(2, pa.int32()))), NotNull("c"))
    assert bind(bound, s) == bound  # idempotent


@pytest.mark.parametrize(
    "sql,needle",
    [
        ("nope = 1", "table columns are ['id', 'f', 'cat', 'd', 'ts']"),
        ("id = 'abc'", "column 'id' of type int64 with literal 'abc'"),
        ("cat = 1", "column 'cat' of type string"),
        ("d = 'not a date'", "column 'd' of type date32"),
        ("ts < TRUE", "column 'ts'"),
        ("id IN (1, 'x')", "'x'"),
    ],
)
def test_bind_errors(sql, needle):
    with pytest.raises(InvalidPredicate) as e:
        bind(sql, SCHEMA)
    assert needle in str(e.value)


# --- row filtering --------------------------------------------------------------------------------


def test_filter_sql_null_semantics():
    t = pa.table({"id": pa.array([1, 2, None], pa.int64()), "f": [1.0, float("nan"), None]})
    s = Schema.from_arrow(t.schema)

    def ids(sql):
        return t.filter(to_arrow_filter(bind(sql, s)))["id"].to_pylist()

    assert ids("id = 1") == [1]
    assert ids("id != 1") == [2]
    assert ids("NOT id = 1") == [2]  # null row is unknown, not true
    assert ids("NOT (id = 1 AND f = 5)") == [1, 2]
    assert ids("id NOT IN (1)") == [2]
    assert ids("NOT id IN (1, 5)") == [2]
    assert ids("id IS NULL") == [None]
    assert ids("NOT id IS NULL") == [1, 2]
    assert ids("id = 1 OR id IS NULL") == [1, None]
    assert ids("f != 1") == [2]  # NaN != 1 holds (IEEE)
    assert ids("f < 100") == [1]  # NaN is never ordered
    assert ids("f IN (0.0, 1.0)") == [1]
    assert ids("TRUE") == [1, 2, None] and ids("FALSE") == []


# --- pruning ---------------------------------------------------------------------------------------


def manifest_for(files: list[pa.Table], schema: Schema, spec: PartitionSpec, drop: frozenset = frozenset()) -> pa.Table:
    """One manifest row per file: record_count, min/max/null count per column, partition bounds."""
    cols: dict[str, list] = {"record_count": [], "spec_id": []}
    types: dict[str, pa.DataType] = {"record_count": pa.int64(), "spec_id": pa.int32()}
    ptype = spec.partition_type(schema)
    for f in files:
        cols["record_count"].append(f.num_rows)
        cols["spec_id"].append(spec.spec_id)
        for field in schema.arrow:
            fid = schema.field_id(field.name)
            mm = pc.min_max(f[field.name])
            if pa.types.is_floating(field.type) and pc.any(pc.is_nan(f[field.name])).as_py():
                mm = {"min": None, "max": None}  # as every writer: no bounds for a float column holding NaN
            for name, v, t in ((C.min_col(fid), mm["min"], field.type), (C.max_col(fid), mm["max"], field.type),
                               (C.nulls_col(fid), f[field.name].null_count, pa.int64())):
                cols.setdefault(name, []).append(v.as_py() if isinstance(v, pa.Scalar) else v)
                types[name] = t
        parts = spec.compute(f, schema)
        for pf, pfield in zip(spec.fields, ptype):
            mm = pc.min_max(parts[pf.name])
            for name, v in ((C.pmin_col(pf.field_id), mm["min"]), (C.pmax_col(pf.field_id), mm["max"])):
                cols.setdefault(name, []).append(v.as_py())
                types[name] = pfield.type
    return pa.table({k: pa.array(v, type=types[k]) for k, v in cols.items() if k not in drop})


def test_may_match_rules():
    files = [
        pa.table({"id": pa.array([1, 5], pa.int64()), "cat": ["a", "b"]}),
        pa.table({"id": pa.array([10, 20], pa.int64()), "cat": ["x", None]}),
        pa.table({"id": pa.array([None, None], pa.int64()), "cat": ["q", "q"]}),
        pa.table({"id": pa.array([7, 7], pa.int64()), "cat": ["a", "a"]}),
    ]
    s = Schema.from_arrow(files[0].schema)
    m = manifest_for(files, s, PartitionSpec())

    def mm(sql, manifest=m):
        return may_match(sql, manifest, s, PartitionSpec()).to_pylist()

    assert mm("id = 5") == [True, False, True, False]  # all-null file: bounds unknown
    assert mm("id < 5") == [True, False, True, False]
    assert mm("id <= 5") == [True, False, True, False]
    assert mm("id > 10") == [False, True, True, False]
    assert mm("id >= 20") == [False, True, True, False]
    assert mm("id != 7") == [True, True, True, False]
    assert mm("id IN (2, 3)") == [True, False, True, False]
    assert mm("id IN (" + ", ".join(map(str, range(100, 130))) + ", 15)") == [False, True, True, False]  # numpy path
    assert mm("id NOT IN (7, 8)") == [True, True, True, False]
    assert mm("cat IS NULL") == [False, True, False, False]
    assert mm("id IS NOT NULL") == [True, True, False, True]
    assert mm("id = 7 OR cat = 'x'") == [False, True, True, True]
    assert mm("NOT (id != 7)") == mm("id = 7")
    assert mm("FALSE") == [False] * 4 and mm("TRUE") == [True] * 4
    # absent statistics mean unknown: nothing is pruned
    bare = m.select(["record_count"])
    assert mm("id = 5 AND cat IS NULL AND id IS NOT NULL", bare) == [True] * 4
    assert may_match("id = 1", m.slice(0, 0), s).to_pylist() == []


def test_may_match_uses_partitions():
    s = Schema.from_arrow(pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")), ("cat", pa.string())]))
    spec = parse_partition_by(["day(ts)", "bucket(4, id)", "truncate(1, cat)"], s, spec_id=1)
    files = [
        pa.table({"id": pa.array([i], pa.int64()), "ts": pa.array([T0 + dt.timedelta(days=i)], pa.timestamp("us")),
                  "cat": [c]})
        for i, c in enumerate(["apple", "banana", "cherry", "avocado"])
    ]
    # Only partition bounds: prove that pruning comes from them.
    m = manifest_for(files, s, spec)
    m = m.select([c for c in m.column_names if c.startswith("pmin") or c.startswith("pmax") or c in ("record_count", "spec_id")])

    def mm(sql, manifest=m, sp=spec):
        return may_match(sql, manifest, s, sp).to_pylist()

    assert mm("ts >= TIMESTAMP '2024-01-03 12:00:00'") == [False, False, True, True]
    assert mm("ts < TIMESTAMP '2024-01-02 00:00:00'") == [True, True, False, False]  # inclusive: day 2 kept
    assert mm("cat = 'avocado'") == [True, False, False, True]
    assert mm("cat > 'b'") == [False, True, True, False]
    buckets = [spec.compute(f, s)["id_bucket_4"][0].as_py() for f in files]
    assert mm("id = 2") == [b == buckets[2] for b in buckets]
    assert mm("id != 2") == [True] * 4  # no projection for !=
    # rows written under another spec are not judged by this spec's partition columns
    other = m.set_column(m.column_names.index("spec_id"), "spec_id", pa.array([0, 1, 0, 1], pa.int32()))
    assert mm("ts >= TIMESTAMP '2024-01-03 12:00:00'", other) == [True, False, True, True]


# --- property: pruning never loses a matching row; SQL and built Exprs agree ------------------------

CATS = ["a", "b", "ab", "it's", "", "é"]
DATES = [D0 + dt.timedelta(days=i) for i in range(-3, 4)]
TIMES = [T0 + dt.timedelta(hours=7 * i, minutes=i) for i in range(-6, 7)]


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _sql_lit(v) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return _sql_str(v)
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return repr(v)


_LITERALS = {
    "id": st.one_of(st.integers(-12, 12), st.sampled_from([2.5, -0.5, 1e20])),
    "f": st.one_of(st.sampled_from([-2.0, -0.5, 0.0, -0.0, 1.5, 3.0]), st.integers(-3, 3)),
    "cat": st.sampled_from(CATS + ["zz", "a\nb"]),
    "d": st.one_of(st.sampled_from(DATES), st.sampled_from([d.isoformat() for d in DATES]),
                   st.sampled_from([T0 + dt.timedelta(hours=30), T0 - dt.timedelta(hours=5)])),
    "ts": st.one_of(st.sampled_from(TIMES), st.sampled_from(DATES)),
}
_OPS = ["=", "!=", "<", "<=", ">", ">="]
_FLIP = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


@st.composite
def leaf(draw):
    name = draw(st.sampled_from(list(_LITERALS)))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "notin", "null", "notnull", "between"]))
    if kind == "cmp":
        op, v = draw(st.sampled_from(_OPS)), draw(_LITERALS[name])
        if draw(st.booleans()):
            return Compare(op, name, v), f"{_sql_lit(v)} {_FLIP[op]} {name}"
        return Compare(op, name, v), f"{name} {'<>' if op == '!=' and draw(st.booleans()) else op} {_sql_lit(v)}"
    if kind in ("in", "notin"):
        vs = tuple(draw(st.lists(_LITERALS[name], min_size=1, max_size=12)))
        text = ", ".join(map(_sql_lit, vs))
        return (In(name, vs), f"{name} IN ({text})") if kind == "in" else (NotIn(name, vs), f"{name} NOT IN ({text})")
    if kind == "null":
        return IsNull(name), f"{name} IS NULL"
    if kind == "notnull":
        return NotNull(name), f"{name} IS NOT NULL"
    lo, hi = draw(_LITERALS[name]), draw(_LITERALS[name])
    return And(Compare(">=", name, lo), Compare("<=", name, hi)), f"{name} BETWEEN {_sql_lit(lo)} AND {_sql_lit(hi)}"


def _combine(children):
    def pair(cls, word):
        return st.tuples(children, children).map(lambda p: (cls(p[0][0], p[1][0]), f"({p[0][1]} {word} {p[1][1]})"))

    return st.one_of(pair(And, "AND"), pair(Or, "OR"), children.map(lambda c: (Not(c[0]), f"NOT ({c[1]})")))


predicates = st.recursive(leaf(), _combine, max_leaves=6)


@st.composite
def tables(draw):
    n = draw(st.integers(0, 40))
    nullable = lambda s: st.one_of(st.none(), s)  # noqa: E731
    floats = st.sampled_from([-2.0, -0.5, 0.0, -0.0, 1.5, 3.0, float("nan")])
    t = pa.table(
        {
            "id": pa.array(draw(st.lists(nullable(st.integers(-10, 10)), min_size=n, max_size=n)), pa.int64()),
            "f": pa.array(draw(st.lists(nullable(floats), min_size=n, max_size=n)), pa.float64()),
            "cat": pa.array(draw(st.lists(nullable(st.sampled_from(CATS)), min_size=n, max_size=n)), pa.string()),
            "d": pa.array(draw(st.lists(nullable(st.sampled_from(DATES)), min_size=n, max_size=n)), pa.date32()),
            "ts": pa.array(draw(st.lists(nullable(st.sampled_from(TIMES)), min_size=n, max_size=n)), pa.timestamp("us")),
        }
    )
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    bounds = [0, *cuts, n]
    files = [t.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]
    return t, files


SPECS = [[], ["cat"], ["day(ts)"], ["bucket(4, id)", "month(d)"], ["truncate(5, id)", "truncate(1, cat)"], ["hour(ts)", "year(d)"]]


def _eval3(e, row):
    """SQL three-valued evaluation of a bound expression on one row (None = unknown)."""
    if isinstance(e, AlwaysTrue):
        return True
    if isinstance(e, AlwaysFalse):
        return False
    if isinstance(e, (And, Or)):
        l, r = _eval3(e.left, row), _eval3(e.right, row)
        if isinstance(e, And):
            return False if False in (l, r) else None if None in (l, r) else True
        return True if True in (l, r) else None if None in (l, r) else False
    if isinstance(e, IsNull):
        return row[e.name] is None
    if isinstance(e, NotNull):
        return row[e.name] is not None
    x = row[e.name]
    if x is None:
        return None
    x = _spark_order(x)
    if isinstance(e, Compare):
        v = _spark_order(e.value.as_py())
        return {"=": x == v, "!=": x != v, "<": x < v, "<=": x <= v, ">": x > v, ">=": x >= v}[e.op]
    vs = [_spark_order(s.as_py()) for s in e.values]
    return any(x == v for v in vs) if isinstance(e, In) else all(x != v for v in vs)


def _spark_order(v):
    """A key comparing as Spark compares values: NaN equal to NaN and above every number."""
    if isinstance(v, float):
        return (1, 0.0) if v != v else (0, v)
    return v


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tables(), predicates, st.sampled_from(SPECS), st.frozensets(st.sampled_from(["min_1", "max_2", "nulls_3", "min_4", "max_5", "pmin_1000"])))
def test_pruning_never_drops_matching_rows(data, pred, partition_by, drop):
    table, files = data
    expr, sql = pred
    spec = parse_partition_by(partition_by, SCHEMA)

    parsed = parse_predicate(sql)
    assert rewrite_not(parsed) == rewrite_not(expr), sql

    bound = bind(expr, SCHEMA)
    numbered = table.append_column("_row", pa.array(range(table.num_rows), pa.int64()))

    def kept(e):
        return numbered.filter(to_arrow_filter(e))["_row"].to_pylist()

    oracle = [i for i, row in enumerate(table.to_pylist()) if _eval3(bound, row) is True]
    assert kept(bound) == oracle, (sql, bound)
    assert kept(bind(sql, SCHEMA)) == oracle

    manifest = manifest_for(files, SCHEMA, spec, drop)
    verdict = may_match(expr, manifest, SCHEMA, spec)
    assert verdict.type == pa.bool_() and len(verdict) == len(files) and verdict.null_count == 0
    assert verdict.equals(may_match(sql, manifest, SCHEMA, spec))
    for f, ok in zip(files, verdict.to_pylist()):
        if not ok:
            assert f.filter(to_arrow_filter(bound)).num_rows == 0, (sql, bound, f.to_pylist())


def test_pruning_is_effective_on_sorted_files():
    """Sanity check that the property test is not vacuous: disjoint files do get pruned."""
    ids = pa.array(np.arange(100), pa.int64())
    t = pa.table({"id": ids, "f": pa.array(np.arange(100) / 2), "cat": ["a"] * 100,
                  "d": pa.array([D0] * 100, pa.date32()), "ts": pa.array([T0] * 100, pa.timestamp("us"))})
    files = [t.slice(i, 10) for i in range(0, 100, 10)]
    m = manifest_for(files, SCHEMA, PartitionSpec())
    assert may_match("id BETWEEN 25 AND 34", m, SCHEMA).to_pylist() == [i in (2, 3) for i in range(10)]
    assert sum(may_match("f > 45.2 OR id IN (3, 4)", m, SCHEMA).to_pylist()) == 2
    assert not any(may_match("cat != 'a'", m, SCHEMA).to_pylist())


# --- NaN, signed zero and float32 literals (Spark's semantics; docs/format.md) ---------------------

NAN, INF = float("nan"), float("inf")


def kept(t: pa.Table, sql: str) -> list:
    """The ids of the rows of ``t`` that ``sql`` keeps (Lamina's row filter)."""
    return t.filter(to_arrow_filter(bind(sql, Schema.from_arrow(t.schema))))["id"].to_pylist()


def _spark_rows(rows: list[dict], name: str, op: str, v: float) -> list[int]:
    """Ids of ``rows`` where ``name <op> v`` holds as Spark has it (NaN = NaN, NaN above all)."""
    def holds(x):
        a, b = _spark_order(x), _spark_order(v)
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]

    return [r["id"] for r in rows if r[name] is not None and holds(r[name])]


def test_row_filter_orders_nan_above_every_value_and_equal_to_itself():
    values = [NAN, INF, -INF, 0.0, -0.0, 1.0, 1e308, None]
    t = pa.table({"id": pa.array(range(len(values)), pa.int64()), "f": pa.array(values, pa.float64())})
    rows = t.to_pylist()
    for op in _OPS:
        for v in (NAN, INF, -INF, 0.0, -0.0, 1.0, 1e308):
            literal = {repr(NAN): "'NaN'", repr(INF): "'Infinity'", repr(-INF): "'-Infinity'"}.get(repr(v), repr(v))
            assert kept(t, f"f {op} {literal}") == _spark_rows(rows, "f", op, v), (op, v)

    def ids(sql):
        return kept(t, sql)
    assert ids("f IN ('NaN', 0.0)") == [0, 3, 4]
    assert ids("f NOT IN ('NaN', -0.0)") == [1, 2, 5, 6]
    assert ids("NOT (f IN (-0.0, 3, 1e308)) OR id IN (0)") == [0, 1, 2, 5]
    assert ids("f BETWEEN 1 AND 'NaN'") == [0, 1, 5, 6]


def test_nan_literal_against_exact_columns_sorts_above_every_number():
    t = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "i": pa.array([1, None, -5], pa.int32()),
                  "d": pa.array([decimal.Decimal("1.5"), None, decimal.Decimal("-2")], pa.decimal128(5, 1))})
    for col in ("i", "d"):
        def rows(sql):
            return len(kept(t, sql))

        assert rows(f"{col} < 'NaN'") == 2 and rows(f"{col} <= 'NaN'") == 2 and rows(f"{col} != 'NaN'") == 2
        assert rows(f"{col} > 'NaN'") == 0 and rows(f"{col} >= 'NaN'") == 0 and rows(f"{col} = 'NaN'") == 0


def test_float32_columns_compare_by_exact_value():
    f32 = np.float32
    values = [f32(16777216), f32(np.finfo(np.float32).max), f32(INF), f32(NAN), f32(0.1), f32(-0.0)]
    t = pa.table({"id": pa.array(range(len(values)), pa.int64()), "g": pa.array(values, pa.float32())})

    def ids(sql):
        return kept(t, sql)

    assert ids("g < 1e39") == [0, 1, 4, 5]  # 1e39 is above every finite float32, below +inf
    assert ids("g > 1e39") == [2, 3]
    assert ids("g != 1e39") == [0, 1, 2, 3, 4, 5]
    assert ids("g = 16777217") == [] and ids("g <= 16777217") == [0, 4, 5] and ids("g = 16777216") == [0]
    assert ids("g = 0.1") == [] and ids("g = 0.10000000149011612") == [4]  # float32(0.1) widened to double
    assert ids("g NOT IN (0, 16777216, 1e39, 1.5)") == [1, 2, 3, 4]
    assert ids("g = 0") == [5]


def test_pruning_keeps_files_whose_nan_rows_match():
    """Known bounds mean the file has no NaN (writers keep none for a float column holding
    NaN), so != and NOT IN prune like any type; a NaN partition value is never a bound."""
    s = Schema.from_arrow(pa.schema([("f", pa.float64())]))
    files = [pa.table({"f": pa.array(v, pa.float64())}) for v in ([1.0, 1.0], [1.0, NAN], [NAN, NAN], [-0.0, 0.0])]
    spec = parse_partition_by(["f"], s)
    m = manifest_for(files, s, PartitionSpec())

    def mm(sql):
        return may_match(sql, m, s).to_pylist()

    assert mm("f != 1") == [False, True, True, True]
    assert mm("f NOT IN (1, 0)") == [False, True, True, False]
    assert mm("f > 5") == [False, True, True, False]
    assert mm("f = 'NaN'") == [False, True, True, False]
    assert mm("f < 'NaN'") == [True, True, True, True]
    assert mm("f IN ('NaN')") == [False, True, True, False]
    assert mm("f = 0") == [False, True, True, True]
    # identity partitions: a NaN partition value is no bound (Arrow's min/max would skip it)
    parts = pa.table({"record_count": [1, 1], "spec_id": pa.array([0, 0], pa.int32()),
                      "pmin_1000": [NAN, 1.0], "pmax_1000": [NAN, 1.0]})
    assert may_match("f > 5", parts, s, spec).to_pylist() == [True, False]


# --- BETWEEN SYMMETRIC ---------------------------------------------------------------------------


def test_between_symmetric():
    t = pa.table({"id": pa.array([0, 1, 2, 3, 4, None], pa.int64())})

    def ids(sql):
        return kept(t, sql)

    assert ids("id BETWEEN SYMMETRIC 3 AND 1") == [1, 2, 3]
    assert ids("id BETWEEN SYMMETRIC 1 AND 3") == [1, 2, 3]
    assert ids("id BETWEEN 3 AND 1") == []
    assert ids("id NOT BETWEEN SYMMETRIC 3 AND 1") == [0, 4]
    assert ids("NOT (id BETWEEN SYMMETRIC 1 AND 3)") == [0, 4]
    assert ids("id BETWEEN ASYMMETRIC 3 AND 1") == []
    assert ids("id BETWEEN SYMMETRIC 'NaN' AND 3") == [3, 4]
    assert ids("id NOT BETWEEN SYMMETRIC 1 AND 1") == [0, 2, 3, 4]
    assert rewrite_not(parse_predicate("id BETWEEN SYMMETRIC 3 AND 1")) == rewrite_not(col("id").between(3, 1, symmetric=True))


# --- wide predicates ---------------------------------------------------------------------------


@pytest.mark.slow  # thousands of terms
def test_wide_or_of_equalities_is_one_in_list():
    s = Schema.from_arrow(pa.schema([("id", pa.int64()), ("cat", pa.string())]))
    values = list(range(0, 30_000, 3))
    wide = bind(" OR ".join(f"id = {v}" for v in values), s)
    assert wide == bind(f"id IN ({', '.join(map(str, values))})", s)
    # mixed with other terms, in any tree shape: each column's equalities fold into one IN
    left_deep = Compare("=", "id", values[0])
    for v in values[1:2000]:
        left_deep = Or(left_deep, Or(Compare("=", "id", v), Compare("=", "cat", str(v % 7))))
    folded = bind(left_deep, s)
    assert isinstance(folded, Or) and {type(folded.left), type(folded.right)} == {In}
    assert bind(and_(*[Compare("!=", "id", v) for v in values[:5000]]), s) == bind(NotIn("id", tuple(values[:5000])), s)


@pytest.mark.slow  # a predicate at the size limit
def test_too_wide_predicate_is_a_typed_error():
    s = Schema.from_arrow(pa.schema([("id", pa.int64())]))
    ranges = " OR ".join(f"(id > {10 * i} AND id < {10 * i + 3})" for i in range(3000))
    with pytest.raises(InvalidPredicate) as e:
        bind(ranges, s)
    assert "6,000 comparisons" in str(e.value) and "IN (...)" in str(e.value)
    bind(" OR ".join(f"(id > {10 * i} AND id < {10 * i + 3})" for i in range(500)), s)  # 1,000: fine


def test_a_half_float_column_is_stored_and_tested_for_null_but_not_compared(tmp_path):
    """Arrow has no min/max or comparison kernel for half floats: such a column is written
    (null counts, no bounds), read back and tested for null; a comparison on it is an
    InvalidPredicate that says so, before anything is read or committed."""
    import lamina

    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("h", pa.float16()), ("i", pa.int64())]))
    rows = pa.table({"h": pa.array([1.5, None, -0.0], pa.float16()), "i": [1, 2, 3]})
    t.append(rows)
    assert t.to_arrow().select(["h", "i"]).to_pylist() == rows.to_pylist()
    assert t.scan("h IS NULL").to_arrow().column("i").to_pylist() == [2]
    for where in ("h > 1", "h IN (1.5)", "h = 'x'"):
        with pytest.raises(InvalidPredicate, match="'h' has type halffloat.*only IS NULL"):
            t.delete(where)
    assert t.version == 1
    t.delete("h IS NOT NULL")
    assert t.to_arrow().column("i").to_pylist() == [2]
