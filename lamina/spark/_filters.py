"""Predicates between Lamina and Spark, with identical results on both sides.

Lamina's predicates follow Spark's NaN semantics (NaN = NaN, NaN above every other
value, -0.0 = 0.0; docs/format.md), so a comparison means the same on both sides.

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
from lamina.expr.binder import is_nan
from lamina.expr.evaluator import nan_satisfies
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

    def _nan_kept(self, e: Expr, out: Column) -> Column:
        """``out`` (Spark's own comparison, which already treats NaN as Lamina does), OR-ed
        with isnan when NaN rows satisfy it: an OR with isnan is not pushed into the
        Parquet scan, whose row-group statistics know nothing of NaN."""
        return out | F.isnan(self._col(e.name)) if nan_satisfies(e) else out

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
        return self._nan_kept(e, {"=": c == v, "!=": c != v, "<": c < v, "<=": c <= v, ">": c > v, ">=": c >= v}[e.op])

    def _isin(self, e: In | NotIn) -> Column:
        # NaN explicitly, not as a list member: an IN of many values becomes a hash set,
        # whose NaN handling is not Spark's documented equality.
        values = [v for v in e.values if not is_nan(v)]
        c = self._col(e.name)
        out = c.isin([spark_literal(v, e.name) for v in values]) if values else F.lit(False)
        return out | F.isnan(c) if len(values) < len(e.values) else out

    def visit_in(self, e: In):
        return self._nan_kept(e, self._isin(e))

    def visit_not_in(self, e: NotIn):
        return self._nan_kept(e, self._col(e.name).isNotNull() & ~self._isin(e))

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


def _column(f: Any, schema: Schema) -> str | None:
    path = f.attribute
    if len(path) != 1:
        return None  # nested field
    name = path[0]
    if name in schema.names:
        return name
    matches = [n for n in schema.names if n.lower() == name.lower()]  # Spark resolves case-insensitively
    return matches[0] if len(matches) == 1 else None


def _convert(f: Any, schema: Schema) -> Expr | None:
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
    name = _column(f, schema)
    if name is None:
        return None
    if type(f) in _COMPARE:
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
    return None  # string pattern filters: Spark evaluates them


def from_spark_filter(f: Any, schema: Schema) -> Expr | None:
    """A pushed Spark filter as a bound Lamina predicate, or None if it is left to Spark."""
    try:
        e = _convert(f, schema)
        return None if e is None else bind(e, schema)
    except (LaminaError, ValueError, TypeError):
        return None
