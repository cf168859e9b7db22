"""Predicates between Lamina and Spark, with identical results on both sides.

- ``to_spark_column``: a bound Lamina predicate as a Spark Column that selects
  exactly the rows Lamina's Arrow filter selects (literals are built from their
  exact value, never parsed in the session time zone; NaN is kept out of > and >=,
  where Spark orders it above every number and Arrow never matches it).
- ``from_spark_filter``: a filter Spark pushes to the Python data source as a
  Lamina predicate, or None when Lamina cannot evaluate it with Spark's exact
  semantics (Spark then evaluates it itself).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import datasource as sds

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
    bind,
    visit,
)
from lamina.spec.schema import Schema
from lamina.spark._types import spark_type

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

    def _is_float(self, name: str) -> bool:
        return pa.types.is_floating(self.schema.field(name).type)

    def visit_true(self):
        return F.lit(True)

    def visit_false(self):
        return F.lit(False)

    def visit_and(self, l, r):
        return l & r

    def visit_or(self, l, r):
        return l | r

    def visit_not(self, c):
        return ~c

    def visit_compare(self, e: Compare):
        c, v = self._col(e.name), spark_literal(e.value, e.name)
        out = {"=": c == v, "!=": c != v, "<": c < v, "<=": c <= v, ">": c > v, ">=": c >= v}[e.op]
        if e.op in (">", ">=") and self._is_float(e.name):
            out = out & ~F.isnan(c)
        return out

    def visit_in(self, e: In):
        return self._col(e.name).isin([spark_literal(v, e.name) for v in e.values])

    def visit_not_in(self, e: NotIn):
        c = self._col(e.name)
        return c.isNotNull() & ~c.isin([spark_literal(v, e.name) for v in e.values])

    def visit_is_null(self, e: IsNull):
        return self._col(e.name).isNull()

    def visit_not_null(self, e: NotNull):
        return self._col(e.name).isNotNull()


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
# Spark orders NaN above every number and NaN = NaN; Arrow never matches NaN with < > =.
# On float columns only the comparisons where both agree for NaN rows are taken.
_FLOAT_SAFE = {"=", "<", "<="}


def _column(f: Any, schema: Schema) -> str | None:
    path = f.attribute
    if len(path) != 1:
        return None  # nested field
    name = path[0]
    if name in schema.names:
        return name
    matches = [n for n in schema.names if n.lower() == name.lower()]  # Spark resolves case-insensitively
    return matches[0] if len(matches) == 1 else None


def _has_nan(v: Any) -> bool:
    return isinstance(v, float) and v != v


def _convert(f: Any, schema: Schema) -> Expr | None:
    if isinstance(f, sds.Not):
        inner = f.child
        # NOT keeps the three-valued result only for = (a != v) and IS NULL; NOT of an
        # ordering on a float column would let NaN rows in (Spark) or out (Arrow).
        if isinstance(inner, sds.In) and any(v is None for v in inner.value):
            return None  # NOT (x IN (.., NULL)) is never TRUE in SQL
        if isinstance(inner, (sds.EqualTo, sds.In, sds.IsNull, sds.IsNotNull)):
            child = _convert(inner, schema)
            return None if child is None else Not(child)
        if isinstance(inner, tuple(_COMPARE)):
            name = _column(inner, schema)
            if name is None or pa.types.is_floating(schema.field(name).type):
                return None
            child = _convert(inner, schema)
            return None if child is None else Not(child)
        return None
    name = _column(f, schema)
    if name is None:
        return None
    is_float = pa.types.is_floating(schema.field(name).type)
    if type(f) in _COMPARE:
        op = _COMPARE[type(f)]
        if f.value is None or isinstance(f.value, (list, dict)) or _has_nan(f.value):
            return None
        if is_float and op not in _FLOAT_SAFE:
            return None
        return Compare(op, name, f.value)
    if isinstance(f, sds.EqualNullSafe):
        if isinstance(f.value, (list, dict)) or _has_nan(f.value):
            return None
        return IsNull(name) if f.value is None else Compare("=", name, f.value)
    if isinstance(f, sds.In):
        values = [v for v in f.value if v is not None]  # x IN (.., NULL) is never TRUE through the NULL
        if any(isinstance(v, (list, dict)) or _has_nan(v) for v in values):
            return None
        return In(name, tuple(values)) if values else AlwaysFalse()
    if isinstance(f, sds.IsNull):
        return IsNull(name)
    if isinstance(f, sds.IsNotNull):
        return NotNull(name)
    return None  # string pattern filters: Spark evaluates them


def from_spark_filter(f: Any, schema: Schema) -> Expr | None:
    """A pushed Spark filter as a bound Lamina predicate, or None if it is left to Spark."""
    try:
        e = _convert(f, schema)
        return None if e is None else bind(e, schema)
    except (LaminaError, ValueError, TypeError):
        return None
