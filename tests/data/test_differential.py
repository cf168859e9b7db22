"""Differential test: Lamina's ``scan(where=...)`` against DuckDB's ``WHERE`` over the same rows.

Random small tables (nulls, NaN, +-0.0, +-inf, float32 edges, decimals at their precision's
edge, dates and timestamps with and without a zone around the epoch and day boundaries) are
written in several appends (and sometimes a delete, so deletion vectors are read too) to
tables with random partitionings (identity, bucket, truncate, year/month/day/hour), so that
pruning works over many files and partitions. Random predicates (comparisons either way
round, IN / NOT IN, [NOT] BETWEEN [SYMMETRIC], IS [NOT] NULL, AND / OR / NOT; literals at and
beyond the data's edges) must select exactly the rows DuckDB selects, through every read path,
and no file that pruning skips may hold a matching row.

DuckDB is the oracle for Lamina's semantics (docs/format.md, "Predicates: NULL, NaN and signed
zero"): SQL three-valued logic; NaN equal to NaN and above every other value, as DuckDB documents
for its floats ("NaN compares equal to NaN and greater than any other floating point number",
checked by ``test_duckdb_orders_nan_as_lamina``); -0.0 equal to 0.0. Where DuckDB's SQL would
mean something else the oracle's text says what Lamina means, explicitly:

- a float32 column is compared by its exact value, as a DOUBLE (DuckDB would round the
  literal to FLOAT: ``0.1::FLOAT = 0.1`` is true there, false in Lamina and Spark);
- a non-integral literal against an integer or decimal column is compared exactly, as
  DECIMAL(38, 4), and NaN / +-inf against them as DOUBLE;
- BETWEEN SYMMETRIC (DuckDB has no SYMMETRIC) is written out as its definition,
  ``BETWEEN a AND b OR BETWEEN b AND a``; IN lists as ORs of equalities;
- timestamps with a zone are compared as instants (session zone UTC, literals with an offset).

CI runs a fixed number of examples (derandomized, tests/conftest.py). A longer run:

    LAMINA_DIFF_EXAMPLES=2000 .venv/bin/python -m pytest -q tests/data/test_differential.py
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import os
import tempfile
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import EvaluationError
from lamina.expr import bind, to_arrow_filter
from support import sql_expressions

EXAMPLES = int(os.environ.get("LAMINA_DIFF_EXAMPLES", "30"))
PREDICATES_PER_TABLE = 8

NAN, INF = float("nan"), float("inf")
F32_MAX = float(np.finfo(np.float32).max)
D = decimal.Decimal
UTC = dt.timezone.utc


@dataclass(frozen=True)
class Lit:
    """A literal as Lamina's SQL writes it, and the DuckDB comparison that means what Lamina
    means by it: ``column`` is a template for the column side, ``duck`` the literal side."""

    lamina: str
    duck: str
    column: str = "{c}"


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _double(v: float) -> Lit:
    text = repr(v) if v == v and abs(v) != INF else {"nan": "'NaN'", "inf": "'Infinity'", "-inf": "'-Infinity'"}[repr(v)]
    return Lit(text, f"CAST({_sql_str(repr(v))} AS DOUBLE)", "CAST({c} AS DOUBLE)")


def _int(n: int) -> Lit:
    return Lit(str(n), f"CAST({n} AS HUGEINT)", "CAST({c} AS HUGEINT)")


def _int_vs_float(n: int) -> Lit:
    """An integer literal against a float column (within 2**53, where doubles are exact)."""
    assert abs(n) <= 2**53
    return Lit(str(n), _double(float(n)).duck, "CAST({c} AS DOUBLE)")


def _exact(text: str) -> Lit:
    """A decimal number, compared exactly (Lamina reads ``1.255`` as that decimal value)."""
    return Lit(text, f"CAST({_sql_str(text)} AS DECIMAL(38, 4))", "CAST({c} AS DECIMAL(38, 4))")


def _date(d: dt.date, column: str) -> Lit:
    """A DATE literal against a date (``d``), naive (``ts``) or zoned (``tz``) column: midnight (UTC)."""
    text = d.isoformat()
    duck = {"d": f"DATE '{text}'", "ts": f"TIMESTAMP '{text} 00:00:00'", "tz": f"TIMESTAMPTZ '{text} 00:00:00+00:00'"}[column]
    return Lit(f"DATE '{text}'", duck)


def _timestamp(t: dt.datetime, column: str) -> Lit:
    """A TIMESTAMP literal against a date (``d``), naive (``ts``) or zoned (``tz``) column."""
    text = t.isoformat(sep=" ")
    if column == "tz":
        instant = (t if t.tzinfo else t.replace(tzinfo=UTC)).isoformat(sep=" ")
        return Lit(f"TIMESTAMP '{text}'", f"TIMESTAMPTZ '{instant}'")
    if column == "d":
        return Lit(f"TIMESTAMP '{text}'", f"TIMESTAMP '{text}'", "CAST({c} AS TIMESTAMP)")
    return Lit(f"TIMESTAMP '{text}'", f"TIMESTAMP '{text}'")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    values: tuple  # the data's values (nulls are added)
    literals: tuple  # Lit: the data's values and beyond


DATES = (dt.date(1900, 1, 1), dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(2024, 3, 1))
TIMES = (
    dt.datetime(1969, 12, 31, 23, 59, 59, 999_999), dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1, 0, 59, 59),
    dt.datetime(2024, 2, 29, 23, 0), dt.datetime(2024, 3, 1, 0, 0, 0, 1), dt.datetime(1900, 1, 1, 12, 30),
)
F64 = (NAN, -0.0, 0.0, INF, -INF, 1e308, -1e308, 1.5, -2.5, 3.0, 5e-324, 16777216.0)
F32 = (NAN, -0.0, 0.0, INF, -INF, F32_MAX, -F32_MAX, 16777216.0, 1.5, float(np.float32(0.1)), 3.0, -2.5)
DECS = (D("-9999999.99"), D("9999999.99"), D("-1.28"), D("-0.05"), D("0.00"), D("0.01"), D("10.65"), D("-128.00"), D("-50.00"))
STRS = ("", "a", "ab", "b", "é", "😀", "it's", "zz", "B", "ß", "İ", " a ", "a%c", "x\\y", "É")
I32 = (-(2**31), -(2**31) + 5, -11, -1, 0, 7, 10, 99, 2**31 - 1)
I64 = (-(2**63), -(2**63) + 999, -1001, -1, 0, 1000, 2**53 + 1, 2**63 - 1)

COLUMNS = (
    Column("i", pa.int32(), I32, tuple(map(_int, I32 + (2**31, -(2**31) - 1, 3_000_000_000, 5)))
           + tuple(map(_exact, ("2.5", "-0.5", "10000000000.5"))) + tuple(map(_double, (NAN, INF, -INF)))),
    Column("k", pa.int64(), I64, tuple(map(_int, I64 + (2**63, -(2**63) - 1, 2**53)))
           + tuple(map(_exact, ("0.5", "-1000.5"))) + (_double(NAN),)),
    Column("f", pa.float64(), F64, tuple(map(_double, F64 + (1e39, -1e39, 16777217.0, 0.1, 2.0)))
           + tuple(map(_int_vs_float, (0, 3, -2, 2**53)))),
    Column("g", pa.float32(), F32, tuple(map(_double, F32 + (1e39, -1e39, 16777217.0, 16777218.0, 0.1, 3.4028235677973366e38))) + (_int_vs_float(0), _int_vs_float(16777217))),
    Column("dec", pa.decimal128(9, 2), DECS, tuple(_exact(str(v)) for v in DECS)
           + tuple(map(_exact, ("1.255", "-9999999.995", "10000000", "-10000000.5", "0.005", "-1.285")))
           + tuple(map(_double, (NAN, INF, -INF)))),
    Column("s", pa.string(), STRS, tuple(Lit(_sql_str(v), _sql_str(v)) for v in STRS + ("aa", "zzz", "\U0010ffff"))),
    Column("d", pa.date32(), DATES, tuple(_date(v, "d") for v in DATES + (dt.date(1, 1, 1), dt.date(9999, 12, 31)))
           + tuple(_timestamp(v, "d") for v in (dt.datetime(2024, 2, 29, 10), dt.datetime(1969, 12, 31, 23, 59)))),
    Column("ts", pa.timestamp("us"), TIMES, tuple(_timestamp(v, "ts") for v in TIMES + (dt.datetime(2024, 3, 1),))
           + tuple(_date(v, "ts") for v in DATES)),
    Column("tz", pa.timestamp("us", "UTC"), tuple(t.replace(tzinfo=UTC) for t in TIMES),
           tuple(_timestamp(v, "tz") for v in TIMES + (dt.datetime(2024, 2, 29, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),))
           + tuple(_date(v, "tz") for v in DATES)),
)
BY_NAME = {c.name: c for c in COLUMNS}
STRUCT = pa.struct([("x", pa.int64()), ("y", pa.string())])
# Columns only expressions use (tests/support/sql_expressions.py): small integers for
# arithmetic, and nested values.
EXTRA = (
    Column("n", pa.int64(), (-5, -1, 0, 1, 2, 3, 7, 10), ()),
    Column("st", STRUCT, ({"x": 1, "y": "a"}, {"x": -3, "y": "é"}, {"x": None, "y": None}, {"x": 7, "y": "ab"}), ()),
    Column("arr", pa.list_(pa.int64()), ([1, 2], [], [None, 3], [5], [2, 2, 2]), ()),
    Column("m", pa.map_(pa.string(), pa.int64()), ([("a", 1)], [("b", 2)], [], [("a", None), ("b", 3)]), ()),
)
SCHEMA = pa.schema([("id", pa.int64())] + [(c.name, c.type) for c in COLUMNS + EXTRA])

PARTITIONS = (
    "i", "f", "g", "s", "d", "dec",
    "bucket(5, i)", "bucket(3, k)", "bucket(4, dec)", "bucket(3, s)", "bucket(2, d)", "bucket(3, ts)", "bucket(2, tz)",
    "truncate(10, i)", "truncate(1000, k)", "truncate(50, dec)", "truncate(1, s)",
    "year(d)", "month(d)", "day(ts)", "month(ts)", "hour(ts)", "day(tz)", "hour(tz)", "year(tz)",
)
OPS = ("=", "!=", "<", "<=", ">", ">=")
FLIPPED = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


# --- predicates: (Lamina SQL, DuckDB SQL) ----------------------------------------------------------


def _duck_cmp(name: str, op: str, lit: Lit) -> str:
    return f"{lit.column.format(c=name)} {op} {lit.duck}"


@st.composite
def leaves(draw) -> tuple[str, str]:
    col = draw(st.sampled_from(COLUMNS))
    c = col.name
    lit = st.sampled_from(col.literals)
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "not_in", "between", "null", "not_null"]))
    if kind == "cmp":
        op, v = draw(st.sampled_from(OPS)), draw(lit)
        text = f"{v.lamina} {FLIPPED[op]} {c}" if draw(st.booleans()) else f"{c} {'<>' if op == '!=' else op} {v.lamina}"
        return text, _duck_cmp(c, op, v)
    if kind in ("in", "not_in"):
        vs = draw(st.lists(lit, min_size=1, max_size=5))
        any_equal = "(" + " OR ".join(_duck_cmp(c, "=", v) for v in vs) + ")"
        listed = ", ".join(v.lamina for v in vs)
        return (f"{c} IN ({listed})", any_equal) if kind == "in" else (f"{c} NOT IN ({listed})", f"NOT {any_equal}")
    if kind == "between":
        lo, hi = draw(lit), draw(lit)
        symmetric, negated = draw(st.booleans()), draw(st.booleans())
        duck = f"({_duck_cmp(c, '>=', lo)} AND {_duck_cmp(c, '<=', hi)})"
        if symmetric:
            duck = f"({duck} OR ({_duck_cmp(c, '>=', hi)} AND {_duck_cmp(c, '<=', lo)}))"
        text = f"{c} {'NOT ' if negated else ''}BETWEEN {'SYMMETRIC ' if symmetric else ''}{lo.lamina} AND {hi.lamina}"
        return text, f"NOT {duck}" if negated else duck
    return (f"{c} IS NULL", f"{c} IS NULL") if kind == "null" else (f"{c} IS NOT NULL", f"{c} IS NOT NULL")


def _combined(children):
    def pair(word):
        return st.tuples(children, children).map(lambda p: (f"({p[0][0]} {word} {p[1][0]})", f"({p[0][1]} {word} {p[1][1]})"))

    return st.one_of(pair("AND"), pair("OR"), children.map(lambda c: (f"NOT ({c[0]})", f"NOT ({c[1]})")))


predicates = st.recursive(leaves(), _combined, max_leaves=6)


# --- tables ----------------------------------------------------------------------------------------


@dataclass
class Case:
    rows: pa.Table
    partition_by: list[str]
    cuts: list[int]  # append boundaries
    deleted: list[int]  # ids deleted after the appends (deletion vectors)


@st.composite
def cases(draw) -> Case:
    n = draw(st.integers(10, 60))
    data = {"id": pa.array(range(n), pa.int64())}
    for col in COLUMNS + EXTRA:
        # an index into the column's values, a quarter of them past its end: null
        picks = draw(st.lists(st.integers(0, len(col.values) * 4 // 3), min_size=n, max_size=n))
        data[col.name] = pa.array([col.values[i] if i < len(col.values) else None for i in picks], col.type)
    partition_by = draw(st.lists(st.sampled_from(PARTITIONS), max_size=2, unique=True))
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=1, max_size=4, unique=True)))
    deleted = sorted(draw(st.sets(st.integers(0, n - 1), max_size=6))) if draw(st.booleans()) else []
    return Case(pa.table(data, schema=SCHEMA), partition_by, cuts, deleted)


def _table(root: str, case: Case) -> lamina.Table:
    t = lamina.create_table(f"{root}/t", SCHEMA, partition_by=case.partition_by or None)
    bounds = [0, *case.cuts, case.rows.num_rows]
    for a, b in zip(bounds, bounds[1:]):
        t.append(case.rows.slice(a, b - a))
    if case.deleted:
        t.delete(f"id IN ({', '.join(map(str, case.deleted))})")
    return lamina.open_table(t.uri)


def _ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


@contextlib.contextmanager
def _case_table(duck, case: Case):
    """The case's table (in a temp dir), the paths of all its files and all its live rows;
    DuckDB's view ``t`` holds the same live rows. Checks the two agree."""
    live = case.rows.filter(pc.invert(pc.is_in(case.rows.column("id"), pa.array(case.deleted, pa.int64()))))
    # A table of DuckDB's own: DuckDB gives a WHERE on a registered Arrow table to pyarrow's
    # scanner, whose comparisons are IEEE's (NaN > 0 is false there, true in DuckDB's SQL).
    duck.register("live", live)
    duck.execute("CREATE OR REPLACE TABLE t AS SELECT * FROM live")
    duck.unregister("live")
    with tempfile.TemporaryDirectory() as root:
        t = _table(root, case)
        everything = t.scan().to_arrow()
        assert _ids(everything) == _ids(live)
        yield t, set(t.scan().plan().entries.column("path").to_pylist()), everything
        flush_hints()  # the last commit's hint is written in the background: before the directory goes


@pytest.fixture(scope="module")
def duck():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    yield con
    con.close()


def test_duckdb_orders_nan_as_lamina(duck):
    """The oracle's float semantics are the ones Lamina documents; a DuckDB that changed them
    would make the differential test meaningless, so this says so first."""
    checks = {
        "'NaN'::DOUBLE = 'NaN'::DOUBLE": True, "'NaN'::DOUBLE > 'Infinity'::DOUBLE": True,
        "'NaN'::DOUBLE <> 'NaN'::DOUBLE": False, "'NaN'::DOUBLE < 1e308": False, "-0.0::DOUBLE = 0.0::DOUBLE": True,
        "-0.0::DOUBLE < 0.0::DOUBLE": False, "'-Infinity'::DOUBLE < -1e308": True, "CAST(NULL AS DOUBLE) = 1.0": None,
    }
    for sql, want in checks.items():
        assert duck.execute(f"SELECT {sql}").fetchall() == [(want,)], sql


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases(), st.lists(predicates, min_size=PREDICATES_PER_TABLE, max_size=PREDICATES_PER_TABLE))
def test_scan_equals_duckdb(duck, case, preds):
    with _case_table(duck, case) as (t, every_file, everything):
        for n, (text, duck_sql) in enumerate(preds):
            want = sorted(r[0] for r in duck.execute(f"SELECT id FROM t WHERE {duck_sql}").fetchall())
            context = (text, duck_sql, case.partition_by)
            scan = t.scan(where=text)
            assert _ids(scan.to_arrow()) == want, context
            if n % 2:  # the file-by-file reader (pq.read_table with the pushed filter: to_batches, object stores)
                assert _ids(pa.Table.from_batches(list(scan.to_batches()), schema=SCHEMA)) == want, context
            else:  # the predicate's columns not among those read
                assert _ids(t.scan(where=text, columns=["id"]).to_arrow()) == want, context
            # the row filter alone over every row: pruning changed nothing
            exact = to_arrow_filter(bind(text, t.metadata.schema))
            assert _ids(everything.filter(exact)) == want, context
            # and no file pruning skipped holds a row the filter keeps, deleted or not
            for path in every_file - set(scan.plan().entries.column("path").to_pylist()):
                skipped = pq.read_table(t.io.local_path(path), schema=SCHEMA)
                assert skipped.filter(exact).num_rows == 0, (context, path)


# --- expressions -----------------------------------------------------------------------------------


EXPRESSION_EXAMPLES = int(os.environ.get("LAMINA_DIFF_EXAMPLES", "12"))


def _duck_ids(duck, sql: str) -> list[int] | None:
    """The ids DuckDB selects, or None where DuckDB fails on a row (``evaluation_errors``)."""
    try:
        return sorted(r[0] for r in duck.execute(f"SELECT id FROM t WHERE {sql}").fetchall())
    except (duckdb.ConversionException, duckdb.OutOfRangeException, duckdb.InvalidInputException):
        return None


@settings(max_examples=EXPRESSION_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(cases(), st.lists(sql_expressions.predicates(), min_size=PREDICATES_PER_TABLE, max_size=PREDICATES_PER_TABLE))
def test_expressions_equal_duckdb(duck, case, preds):
    """Random expressions (arithmetic, casts, CASE, string and date functions, LIKE, nested
    values, columns compared with columns) over random tables: the pruned scan, the row filter
    over every row and DuckDB select the same rows, and no skipped file holds a match. Where
    the engines' semantics differ the DuckDB text says what Lamina means
    (``sql_expressions.DIFFERENCES``, by name)."""
    with _case_table(duck, case) as (t, every_file, everything):
        for n, (text, duck_sql) in enumerate(preds):
            context = (text, duck_sql, case.partition_by)
            want = _duck_ids(duck, duck_sql)
            exact = to_arrow_filter(bind(text, t.metadata.schema))
            if want is None:  # (evaluation_errors)
                continue
            try:
                assert _ids(everything.filter(exact)) == want, context
            except pa.ArrowInvalid as e:
                raise AssertionError((context, e)) from None
            scan = t.scan(where=text)
            assert _ids(scan.to_arrow()) == want, context
            if n % 2:
                assert _ids(pa.Table.from_batches(list(scan.to_batches()), schema=SCHEMA)) == want, context
            for path in every_file - set(scan.plan().entries.column("path").to_pylist()):
                skipped = pq.read_table(t.io.local_path(path), schema=SCHEMA)
                assert skipped.filter(exact).num_rows == 0, (context, path)


# --- pruning by monotone terms ---------------------------------------------------------------------

_NUMBER_LITS = ("0", "1", "-1", "3", "7", "10", "99", "1000", "-1001", "2.5", "-0.5", "1e300", "-1e300", "'NaN'")


@st.composite
def monotone_terms(draw) -> tuple[str, str]:
    """(term, a literal of its kind): a column under monotone functions (those pruning bounds
    through: arithmetic by constants, casts between numbers or dates, truncations, date parts
    within a larger unit, CASE and COALESCE), sometimes a function that is not monotone at all."""
    kind = draw(st.sampled_from(["num", "num", "date", "ts", "str"]))
    if kind == "num":
        x = draw(st.sampled_from(["i", "k", "n", "f", "g", "dec"]))
        for _ in range(draw(st.integers(1, 3))):
            x = draw(st.sampled_from([
                f"({x} + 3)", f"({x} - 2)", f"({x} * 2)", f"({x} * -3)", f"({x} / 4)", f"(- {x})", f"abs({x})",
                f"CAST({x} AS DOUBLE)", f"CAST({x} AS DECIMAL(38, 2))", f"floor({x})", f"round({x})", f"coalesce({x}, 5)",
                f"(CASE WHEN {x} > 3 THEN {x} ELSE 3 END)", f"IF({x} IS NULL, -1, {x})", f"nullif({x}, 0)",
                f"({x} % 7)", f"TRY_CAST({x} AS INT)"]))
        return x, draw(st.sampled_from(_NUMBER_LITS))
    if kind == "date":
        x = "d"
        fn = draw(st.sampled_from([
            "date_add({x}, 40)", "date_sub({x}, 400)", "({x} + INTERVAL 1 MONTH)", "({x} - INTERVAL '2' YEAR)",
            "trunc({x}, 'MM')", "CAST({x} AS TIMESTAMP_NTZ)", "coalesce({x}, DATE '2000-01-01')"]))
        lit = draw(st.sampled_from([f"DATE '{v.isoformat()}'" for v in DATES] + ["DATE '1971-01-01'", "DATE '2024-04-29'"]))
        if draw(st.booleans()):
            return draw(st.sampled_from(["year", "month", "day", "quarter", "dayofyear"])) + f"({fn.format(x=x)})", draw(
                st.sampled_from(["1", "2", "3", "12", "29", "31", "1969", "1970", "2024"]))
        return fn.format(x=x), lit
    if kind == "ts":
        x = draw(st.sampled_from(["ts", "tz"]))
        fn = draw(st.sampled_from([
            "date_trunc('hour', {x})", "date_trunc('day', {x})", "date_trunc('month', {x})", "date_trunc('year', {x})",
            "CAST({x} AS DATE)", "({x} + INTERVAL 90 MINUTE)", "({x} - INTERVAL 1 MONTH)"]))
        if draw(st.booleans()):
            return draw(st.sampled_from(["year", "month", "day", "hour", "minute"])) + f"({fn.format(x=x)})", draw(
                st.sampled_from(["0", "1", "2", "12", "23", "29", "59", "1969", "1970", "2024"]))
        lit = draw(st.sampled_from([f"TIMESTAMP '{v.isoformat(sep=' ')}'" for v in TIMES] + [f"DATE '{v.isoformat()}'" for v in DATES]))
        return fn.format(x=x), lit
    x = draw(st.sampled_from(["s", "substring(s, 1, 1)", "substring(s, 1, 2)", "coalesce(s, 'b')",
                              "(CASE WHEN s > 'b' THEN s ELSE 'b' END)", "lower(s)", "CAST(s AS STRING)"]))
    return x, draw(st.sampled_from([_sql_str(v) for v in STRS] + ["'aa'", "'zzz'"]))


@st.composite
def monotone_predicates(draw) -> str:
    term, lit = draw(monotone_terms())
    shape = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "between", "like"]))
    if shape == "like" and term.startswith(("s", "substring", "coalesce(s", "(CASE WHEN s", "lower", "CAST(s")):
        p = draw(st.sampled_from(["a%", "é%", "it''s%", "z%", "B_", "ab%", "%", "a\\%%"]))
        return draw(st.sampled_from([f"{term} LIKE '{p}'", f"starts_with({term}, '{p.rstrip('%')}')"]))
    if shape == "in":
        return f"{term} IN ({lit}, {draw(monotone_terms())[1] if False else lit})"
    if shape == "between":
        return f"{lit} BETWEEN {term} AND {term}" if draw(st.booleans()) else f"{term} BETWEEN {lit} AND {lit}"
    op = draw(st.sampled_from(OPS))
    return f"{term} {op} {lit}" if draw(st.booleans()) else f"{lit} {op} {term}"


@settings(max_examples=EXPRESSION_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases(), st.lists(monotone_predicates(), min_size=PREDICATES_PER_TABLE, max_size=PREDICATES_PER_TABLE))
def test_pruning_by_monotone_terms_never_drops_a_row(case, preds):
    """Terms that pruning bounds through (and some it cannot): the pruned scan returns exactly
    what the row filter keeps of every row, and no file it skips holds a row the filter keeps."""
    with tempfile.TemporaryDirectory() as root:
        t = _table(root, case)
        every_file = set(t.scan().plan().entries.column("path").to_pylist())
        everything = t.scan().to_arrow()
        pruned_any = False
        for text in preds:
            context = (text, case.partition_by)
            try:
                exact = to_arrow_filter(bind(text, t.metadata.schema))
            except lamina.errors.InvalidPredicate as e:  # a literal of another kind (a date part against a date)
                assert "cannot" in str(e) or "not supported" in str(e), (context, e)
                continue
            try:
                want = _ids(everything.filter(exact))
            except pa.ArrowInvalid:  # a row fails (an overflow: evaluation_errors), so may the scan
                continue
            scan = t.scan(where=text)
            assert _ids(scan.to_arrow()) == want, context
            skipped = every_file - set(scan.plan().entries.column("path").to_pylist())
            pruned_any |= bool(skipped)
            for path in skipped:
                assert pq.read_table(t.io.local_path(path), schema=SCHEMA).filter(exact).num_rows == 0, (context, path)
        flush_hints()
