"""Predicates between Lamina and Spark, with identical results on both sides.

Lamina's predicates follow Spark's NaN semantics (NaN = NaN, NaN above every other
value, -0.0 = 0.0; docs/format.md), so a comparison means the same on both sides.
Expressions (``Predicate`` leaves: ``id + 1 > 18``, ``s LIKE 'a%'``) follow Spark's SQL
semantics too (docs/expressions.md): those whose every function Spark computes exactly as
Lamina does (and, where a row may fail, with ANSI mode on, as Lamina fails) are handed to
Spark as its own SQL; the others (``lower`` and ``upper``, whose case mappings differ;
functions of zoned timestamps, which Spark reads in the session's time zone; TRY_CAST and
casts from strings, which Spark reads more leniently; ...) are evaluated by Lamina's own
engine inside Spark, as an Arrow UDF over the columns they read.

- ``to_spark_column``: a bound Lamina predicate as a Spark Column that selects
  exactly the rows Lamina's Arrow filter selects (literals are built from their
  exact value, never parsed in the session time zone). A float comparison that NaN
  rows satisfy is kept from Spark's Parquet row-group filtering: Parquet statistics
  leave NaN out, so parquet-java would skip a row group whose only match is a NaN.
- ``from_spark_filter``: a filter Spark pushes to the Python data source as a
  Lamina predicate, or None when Lamina cannot evaluate it with Spark's exact
  semantics (Spark then evaluates it itself). The data source does not take pushed
  filters on Spark 4.3, which reuses one planned read for every query of a DataFrame
  (docs/spark.md); the translation stays, tested, for a Spark that plans per scan.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import datasource as sds
from pyspark.sql import functions as F

from lamina.errors import LaminaError
from lamina.expr import (
    AlwaysFalse,
    AlwaysTrue,
    Compare,
    Expr,
    ExprVisitor,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Predicate,
    bind,
    visit,
)
from lamina.expr.binder import is_nan
from lamina.expr.compile import evaluate, raises
from lamina.expr.evaluator import nan_satisfies
from lamina.expr.terms import Call, Interval, Literal, Term, columns_of, sql_type
from lamina.expr.terms import Column as TermColumn
from lamina.spark._types import spark_type
from lamina.spec.schema import Schema

_EPOCH = dt.datetime(1970, 1, 1)
_US = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _micros(s: pa.Scalar) -> int:
    unit = s.type.unit
    if unit == "ns":
        raise LaminaError("nanosecond timestamps are not supported by Spark")
    return s.value * _US[unit]


def spark_literal(s: pa.Scalar, column: str) -> Column:
    """A Spark literal holding exactly the value of Arrow scalar ``s``."""
    t = s.type
    if pa.types.is_timestamp(t):
        us = _micros(s)
        if t.tz is not None:
            return F.timestamp_micros(F.lit(us))
        # Wall-clock time: a string cast to TIMESTAMP_NTZ involves no time zone.
        text = (_EPOCH + dt.timedelta(microseconds=us)).isoformat(sep=" ", timespec="microseconds")
        return F.lit(text).cast("timestamp_ntz")
    if pa.types.is_date(t):
        return F.date_from_unix_date(F.lit(s.cast(pa.date32()).value))
    value = s.as_py()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return F.lit(bytearray(value))
    return F.lit(value).cast(spark_type(t, column))


class _ToSpark(ExprVisitor[Column]):
    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def _col(self, name: str) -> Column:
        return F.col(f"`{name.replace('`', '``')}`")

    def _nan_kept(self, e: Compare | In | NotIn, out: Column) -> Column:
        """``out`` (Spark's own comparison, which already treats NaN as Lamina does), OR-ed
        with isnan when NaN rows satisfy it: an OR with isnan is not pushed into the
        Parquet scan, whose row-group statistics know nothing of NaN."""
        return out | F.isnan(self._col(e.name)) if nan_satisfies(e) else out

    def visit_true(self) -> Column:
        return F.lit(True)

    def visit_false(self) -> Column:
        return F.lit(False)

    def visit_and(self, left: Column, right: Column) -> Column:
        return left & right

    def visit_or(self, left: Column, right: Column) -> Column:
        return left | right

    def visit_not(self, child: Column) -> Column:
        return ~child

    def visit_compare(self, e: Compare) -> Column:
        c, v = self._col(e.name), spark_literal(e.value, e.name)
        return self._nan_kept(e, {"=": c == v, "!=": c != v, "<": c < v, "<=": c <= v, ">": c > v, ">=": c >= v}[e.op])

    def _isin(self, e: In | NotIn) -> Column:
        # NaN explicitly, not as a list member: an IN of many values becomes a hash set,
        # whose NaN handling is not Spark's documented equality.
        values = [v for v in e.values if not is_nan(v)]
        c = self._col(e.name)
        out = c.isin([spark_literal(v, e.name) for v in values]) if values else F.lit(False)
        return out | F.isnan(c) if len(values) < len(e.values) else out

    def visit_in(self, e: In) -> Column:
        return self._nan_kept(e, self._isin(e))

    def visit_not_in(self, e: NotIn) -> Column:
        return self._nan_kept(e, self._col(e.name).isNotNull() & ~self._isin(e))

    def visit_is_null(self, e: IsNull) -> Column:
        return self._col(e.name).isNull()

    def visit_not_null(self, e: NotNull) -> Column:
        return self._col(e.name).isNotNull()

    def visit_predicate(self, e: Predicate) -> Column:
        text = spark_sql(e.term, _ansi())
        return F.expr(text) if text is not None else lamina_column(e.term, self.schema)


# --- expressions ------------------------------------------------------------------------------


def _ansi() -> bool:
    """Whether the active session fails on overflow and division by zero (Spark 4's default)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return False
    return str(session.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _string(v: str) -> str:
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _literal_sql(s: pa.Scalar) -> str | None:
    """A Spark SQL literal holding exactly the value of ``s`` (None for what it cannot say)."""
    t = s.type
    if not s.is_valid:
        return f"CAST(NULL AS {sql_type(t)})" if not pa.types.is_null(t) else "NULL"
    if pa.types.is_timestamp(t):
        us = _micros(s)
        if t.tz is not None:
            return f"timestamp_micros({us})"
        return f"TIMESTAMP_NTZ '{(_EPOCH + dt.timedelta(microseconds=us)).isoformat(sep=' ', timespec='microseconds')}'"
    if pa.types.is_date(t):
        return f"DATE '{s.as_py().isoformat()}'"
    v = s.as_py()
    if pa.types.is_boolean(t):
        return "TRUE" if v else "FALSE"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _string(v)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        text = repr(v) if isinstance(v, float) else str(v)
        text = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text)
        return f"CAST('{text}' AS {sql_type(t)})"
    return None


def _plain(t: pa.DataType) -> bool:
    """Integers and doubles: arithmetic Spark computes as Arrow does."""
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _zoneless(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or (pa.types.is_timestamp(t) and t.tz is None)


_SPARK_FIELDS = {
    "year": "year",
    "quarter": "quarter",
    "month": "month",
    "day": "dayofmonth",
    "dayofweek": "dayofweek",
    "dayofyear": "dayofyear",
    "hour": "hour",
    "minute": "minute",
    "second": "second",
}
_SPARK_SAME = {"and": "AND", "or": "OR", "=": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def spark_sql(term: Term, ansi: bool) -> str | None:
    """``term`` (bound) as Spark SQL that computes exactly what Lamina computes, or None
    where some part of it would not (see the module doc). ``ansi``: the session fails on
    overflow and division by zero as Lamina does; without it a term that can fail is None."""
    if not ansi and raises(term):
        return None
    try:
        return _sql(term)
    except _Lamina:
        return None


class _Lamina(Exception):
    """A part Spark would compute otherwise: Lamina evaluates the term."""


def _sql(t: Term) -> str:
    if isinstance(t, TermColumn):
        return ".".join(_q(p) for p in t.path)
    if isinstance(t, Literal):
        text = _literal_sql(t.value) if isinstance(t.value, pa.Scalar) else None
        if text is None:
            raise _Lamina
        return text
    assert isinstance(t, Call)
    fn, a = t.fn, t.args
    arg_types = [x.type for x in a]
    if fn in _SPARK_SAME:
        return f"({_sql(a[0])} {_SPARK_SAME[fn]} {_sql(a[1])})"
    if fn == "not":
        return f"(NOT {_sql(a[0])})"
    if fn in ("is_null", "is_not_null"):
        return f"({_sql(a[0])} IS {'NOT ' if fn == 'is_not_null' else ''}NULL)"
    if fn in ("is_true", "is_not_true", "is_false", "is_not_false"):
        return f"({_sql(a[0])} IS {fn[3:].replace('_', ' ').upper()})"
    if fn in ("distinct", "not_distinct"):
        same = f"({_sql(a[0])} <=> {_sql(a[1])})"
        return same if fn == "not_distinct" else f"(NOT {same})"
    if fn in ("in", "not_in"):
        x = _sql(a[0])
        any_equal = "(" + " OR ".join(f"({x} = {_sql(v)})" for v in a[1:]) + ")"  # (NaN as =, not a hash set's)
        return any_equal if fn == "in" else f"(NOT {any_equal})"
    if fn in ("+", "-", "*", "/", "%", "div") and all(_plain(x) for x in arg_types):
        return f"({_sql(a[0])} {fn.upper()} {_sql(a[1])})"
    if fn == "neg" and _plain(t.type):
        return f"(- {_sql(a[0])})"
    if fn == "abs":
        return f"abs({_sql(a[0])})"
    if fn in ("like", "not_like"):
        escape, pattern = t.opts
        out = f"({_sql(a[0])} LIKE {_string(pattern)} ESCAPE {_string(escape)})"
        return out if fn == "like" else f"(NOT {out})"
    if fn in ("starts_with", "ends_with", "contains"):
        name = {"starts_with": "startswith", "ends_with": "endswith", "contains": "contains"}[fn]
        return f"{name}({_sql(a[0])}, {_string(t.opts[0])})"
    if fn in ("trim", "ltrim", "rtrim"):
        side = {"trim": "BOTH", "ltrim": "LEADING", "rtrim": "TRAILING"}[fn]
        return f"trim({side} {_string(t.opts[0])} FROM {_sql(a[0])})"
    if fn == "length":
        return f"length({_sql(a[0])})"
    if fn == "substring":
        pos, length = t.opts
        return f"substring({_sql(a[0])}, {pos}{'' if length is None else f', {length}'})"
    if fn == "concat":
        return f"concat({', '.join(_sql(x) for x in a)})"
    if fn == "case":
        pairs = " ".join(f"WHEN {_sql(a[i])} THEN {_sql(a[i + 1])}" for i in range(0, len(a) - 1, 2))
        return f"(CASE {pairs} ELSE {_sql(a[-1])} END)"
    if fn == "coalesce":
        return f"coalesce({', '.join(_sql(x) for x in a)})"
    if fn == "nullif" and a[0].type.equals(a[1].type):
        return f"nullif({_sql(a[0])}, {_sql(a[1])})"
    if fn == "cast":
        src, dst = arg_types[0], t.type
        if (
            (_plain(src) or pa.types.is_decimal(src))
            and (_plain(dst) or pa.types.is_decimal(dst))
            or (_zoneless(src) and _zoneless(dst))
            or (pa.types.is_integer(src) and pa.types.is_string(dst))
        ):
            return f"CAST({_sql(a[0])} AS {sql_type(dst)})"
    if fn in ("date_trunc", "trunc") and _zoneless(arg_types[0]):
        if fn == "trunc":
            return f"trunc({_sql(a[0])}, {_string(t.opts[0])})"
        return f"date_trunc({_string(t.opts[0])}, {_sql(a[0])})"
    if fn in _SPARK_FIELDS and _zoneless(arg_types[0]):
        return f"{_SPARK_FIELDS[fn]}({_sql(a[0])})"
    if fn in ("date_add", "date_sub", "datediff", "add_months"):
        return f"{fn}({_sql(a[0])}, {_sql(a[1])})"
    if fn == "interval_add" and _zoneless(arg_types[0]):
        assert isinstance(a[1], Literal)  # a bound interval_add adds a literal interval
        iv: Interval = a[1].value
        x = _sql(a[0])
        if pa.types.is_date(t.type):
            x = f"add_months({x}, {iv.months})" if iv.months else x
            return f"date_add({x}, {iv.days})" if iv.days else x
        for amount, unit in ((iv.months, "MONTH"), (iv.days, "DAY"), (iv.micros, "MICROSECOND")):
            if amount:
                x = f"({x} + INTERVAL '{amount}' {unit})"
        return x
    if fn == "field":
        return f"{_sql(a[0])}.{_q(t.opts[0])}"
    if fn in ("list_get", "try_list_get"):
        return f"{'try_' if fn == 'try_list_get' else ''}element_at({_sql(a[0])}, {t.opts[0]})"
    if fn in ("round", "floor", "ceil") and not pa.types.is_floating(arg_types[0]):
        return f"{fn}({_sql(a[0])}{f', {t.opts[0]}' if fn == 'round' else ''})"
    raise _Lamina


def lamina_column(term: Term, schema: Schema) -> Column:
    """``term`` (bound to ``schema``) as a Spark Column computed by Lamina's engine: an Arrow
    UDF over the columns it reads, each cast to the table's Arrow type first."""
    names = sorted(columns_of(term))
    types = [schema.field(n).type for n in names]
    out = (
        spark_type(term.type, "expression") if not pa.types.is_null(term.type) else spark_type(pa.bool_(), "expression")
    )

    def run(*arrays: pa.Array) -> pa.Array:
        columns = [a.cast(typ) if not a.type.equals(typ) else a for a, typ in zip(arrays, types)]
        rows = len(arrays[0]) if arrays else 0
        table = pa.Table.from_arrays(columns, names=names) if names else pa.table({"_": pa.nulls(rows)})
        return evaluate(term, table).combine_chunks()

    # A scalar UDF, by run's type hints: the stubs have no overload without functionType,
    # and passing it makes Spark warn that type hints are preferred.
    udf = F.arrow_udf(run, out)  # type: ignore[call-overload]
    return udf(*[F.col(_q(n)) for n in names])


def to_spark_column(predicate: Expr, schema: Schema) -> Column | None:
    """``predicate`` (bound to ``schema``) as a Spark Column; None for AlwaysTrue."""
    if isinstance(predicate, AlwaysTrue):
        return None
    return visit(predicate, _ToSpark(schema))


# --- filters pushed by Spark --------------------------------------------------------

_COMPARE = {
    sds.EqualTo: "=",
    sds.GreaterThan: ">",
    sds.GreaterThanOrEqual: ">=",
    sds.LessThan: "<",
    sds.LessThanOrEqual: "<=",
}
_Compared = sds.EqualTo | sds.GreaterThan | sds.GreaterThanOrEqual | sds.LessThan | sds.LessThanOrEqual
# Every filter Spark pushes but Not: each names the column it tests.
_Leaf = (
    sds.EqualTo
    | sds.EqualNullSafe
    | sds.GreaterThan
    | sds.GreaterThanOrEqual
    | sds.LessThan
    | sds.LessThanOrEqual
    | sds.In
    | sds.IsNull
    | sds.IsNotNull
    | sds.StringStartsWith
    | sds.StringEndsWith
    | sds.StringContains
)


def _column(f: _Leaf, schema: Schema) -> str | None:
    path = f.attribute
    if len(path) != 1:
        return None  # nested field
    name = path[0]
    if name in schema.names:
        return name
    matches = [n for n in schema.names if n.lower() == name.lower()]  # Spark resolves case-insensitively
    return matches[0] if len(matches) == 1 else None


def _convert(f: sds.Filter, schema: Schema) -> Expr | None:
    if isinstance(f, sds.Not):
        inner = f.child
        # NOT keeps the three-valued result of comparisons, IN and IS [NOT] NULL (not of
        # <=>, which is never null).
        if isinstance(inner, sds.In) and any(v is None for v in inner.value):
            return None  # NOT (x IN (.., NULL)) is never TRUE in SQL
        if isinstance(inner, (*_COMPARE, sds.In, sds.IsNull, sds.IsNotNull)):
            child = _convert(inner, schema)
            return None if child is None else Not(child)
        return None
    if not isinstance(f, _Leaf):
        return None  # a kind of filter this translation does not know
    name = _column(f, schema)
    if name is None:
        return None
    if isinstance(f, _Compared):
        if f.value is None or isinstance(f.value, (list, dict)):
            return None
        return Compare(_COMPARE[type(f)], name, f.value)
    if isinstance(f, sds.EqualNullSafe):
        if isinstance(f.value, (list, dict)):
            return None
        return IsNull(name) if f.value is None else Compare("=", name, f.value)
    if isinstance(f, sds.In):
        values = [v for v in f.value if v is not None]  # x IN (.., NULL) is never TRUE through the NULL
        if any(isinstance(v, (list, dict)) for v in values):
            return None
        return In(name, tuple(values)) if values else AlwaysFalse()
    if isinstance(f, sds.IsNull):
        return IsNull(name)
    if isinstance(f, sds.IsNotNull):
        return NotNull(name)
    patterns = {sds.StringStartsWith: "starts_with", sds.StringEndsWith: "ends_with", sds.StringContains: "contains"}
    if isinstance(f, (sds.StringStartsWith, sds.StringEndsWith, sds.StringContains)) and isinstance(f.value, str):
        return Predicate(Call(patterns[type(f)], (TermColumn((name,)), Literal(f.value))))
    return None


def from_spark_filter(f: sds.Filter, schema: Schema) -> Expr | None:
    """A pushed Spark filter as a bound Lamina predicate, or None if it is left to Spark."""
    try:
        e = _convert(f, schema)
        return None if e is None else bind(e, schema)
    except (LaminaError, ValueError, TypeError):
        return None
