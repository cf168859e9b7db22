"""Value expressions (terms) inside predicates: ``id + 1``, ``lower(s)``, ``CASE ...``.

A term is an immutable tree of three node kinds:

- ``Column(path)``: a column, or a field nested in one (``payload.user.id`` is
  ``("payload", "user", "id")``);
- ``Literal(value)``: a constant (Python value before binding, ``pa.Scalar`` after;
  ``Interval`` for ``INTERVAL`` literals);
- ``Call(fn, args, opts)``: an operator or function (``+``, ``=``, ``like``, ``cast``, ...),
  ``opts`` holding what is fixed at parse time (a cast's target type, LIKE's escape).

Unbound terms come from the parser; ``lamina.expr.typer`` binds them to a schema (every
node gets its Arrow ``type``, implicit casts become explicit ``cast`` calls, constants are
folded), ``lamina.expr.compile`` turns a bound term into an Arrow compute expression and
``lamina.expr.bounds`` bounds it over a manifest's statistics. The semantics are Spark
SQL's (docs/expressions.md).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


class Term:
    """A value expression; see the module doc."""

    __slots__ = ()
    # Every kind of term has a type: a pa.DataType once bound, None before (declared here for
    # the checker; pyarrow has no stubs, so a DataType is Any to it either way).
    type: Any


@dataclass(frozen=True)
class Column(Term):
    path: tuple[str, ...]
    type: Any = None  # a pa.DataType once bound (see Term)

    @property
    def name(self) -> str:
        """The top-level column."""
        return self.path[0]


@dataclass(frozen=True)
class Literal(Term):
    value: Any
    type: Any = None  # a pa.DataType once bound (see Term)

    @property
    def is_null(self) -> bool:
        v = self.value
        return v is None or (isinstance(v, pa.Scalar) and not v.is_valid)


@dataclass(frozen=True)
class Call(Term):
    fn: str
    args: tuple[Term, ...] = ()
    opts: tuple = ()
    type: Any = None  # a pa.DataType once bound (see Term)


@dataclass(frozen=True)
class Interval:
    """An ``INTERVAL`` value: months, days and microseconds, kept apart as Spark keeps them
    (a month has no fixed length; a day is 24 hours, time zones being UTC)."""

    months: int = 0
    days: int = 0
    micros: int = 0

    def __neg__(self) -> Interval:
        return Interval(-self.months, -self.days, -self.micros)

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.months + other.months, self.days + other.days, self.micros + other.micros)


INTERVAL_TYPE = pa.month_day_nano_interval()  # the bound type of an Interval literal


def walk(term: Term) -> Iterator[Term]:
    """Every node of ``term``, parents before children (iteratively)."""
    stack = [term]
    while stack:
        t = stack.pop()
        yield t
        if isinstance(t, Call):
            stack.extend(reversed(t.args))


def columns_of(term: Term) -> set[str]:
    """The top-level columns ``term`` reads."""
    return {t.name for t in walk(term) if isinstance(t, Column)}


def calls_of(term: Term) -> set[str]:
    """The functions and operators ``term`` calls."""
    return {t.fn for t in walk(term) if isinstance(t, Call)}


def is_constant(term: Term) -> bool:
    """Whether ``term`` reads no column."""
    return not any(isinstance(t, Column) for t in walk(term))


# --- SQL text -----------------------------------------------------------------------------


def ident(name: str) -> str:
    if name.isidentifier() and name.isascii():
        return name
    return '"' + name.replace('"', '""') + '"'


_INFIX = {"+", "-", "*", "/", "%", "=", "!=", "<", "<=", ">", ">=", "||", "and", "or"}
_SQL_OP = {"and": "AND", "or": "OR"}


_SPECIAL_FLOATS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def sql_type(t: pa.DataType) -> str:
    """The SQL name of an Arrow type that ``CAST(... AS name)`` reads back as ``t``."""
    names = {
        pa.bool_(): "BOOLEAN",
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.string(): "STRING",
        pa.large_string(): "STRING",
        pa.binary(): "BINARY",
        pa.large_binary(): "BINARY",
        pa.date32(): "DATE",
    }
    if t in names:
        return names[t]
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz is not None else "TIMESTAMP_NTZ"
    if pa.types.is_map(t):
        return f"MAP<{sql_type(t.key_type)}, {sql_type(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"ARRAY<{sql_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return (
            "STRUCT<" + ", ".join(f"{t.field(i).name}: {sql_type(t.field(i).type)}" for i in range(t.num_fields)) + ">"
        )
    return str(t).upper()


def literal_sql(v: Any, t: pa.DataType | None = None) -> str:
    """SQL text of a literal value that the parser reads back as the same value (and, for
    a bound literal, the typer as the same type)."""
    if isinstance(v, pa.Scalar):
        t = v.type
        if not v.is_valid:
            return "NULL" if pa.types.is_null(t) else f"CAST(NULL AS {sql_type(t)})"
        if pa.types.is_timestamp(t):
            us = v.cast(pa.timestamp("us", t.tz)).value if t.unit != "ns" else v.value // 1000
            text = (_dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=us)).isoformat(sep=" ")
            return f"TIMESTAMP '{text}+00:00'" if t.tz is not None else f"TIMESTAMP_NTZ '{text}'"
        if pa.types.is_decimal(t):
            return f"CAST('{v.as_py()}' AS {sql_type(t)})"
        if pa.types.is_floating(t):
            f = v.as_py()
            return f"CAST('{_SPECIAL_FLOATS.get(repr(f), repr(f))}' AS {sql_type(t)})"
        if pa.types.is_integer(t) and t != pa.int32():
            return f"CAST({v.as_py()} AS {sql_type(t)})"
        v = v.as_py()
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, Interval):
        parts = []
        if v.months:
            parts.append(f"INTERVAL '{v.months}' MONTH")
        if v.days:
            parts.append(f"INTERVAL '{v.days}' DAY")
        if v.micros or not parts:
            parts.append(f"INTERVAL '{v.micros}' MICROSECOND")
        return "(" + " + ".join(parts) + ")" if len(parts) > 1 else parts[0]
    if isinstance(v, _dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, _dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, _dt.time):
        return f"TIME '{v.isoformat()}'"
    if isinstance(v, (bytes, bytearray)):
        return "X'" + bytes(v).hex() + "'"
    if isinstance(v, float):
        if v != v or abs(v) == float("inf"):
            return f"CAST('{_SPECIAL_FLOATS[repr(v)]}' AS DOUBLE)"
        text = repr(v)
        return text if "e" in text else text + "E0"
    if isinstance(v, decimal.Decimal):
        return str(v)
    return str(v)


def term_sql(term: Term) -> str:
    """SQL text of ``term`` (Lamina's dialect; reads back as the same term)."""
    if isinstance(term, Column):
        return ".".join(ident(p) for p in term.path)
    if isinstance(term, Literal):
        return literal_sql(term.value, term.type)
    assert isinstance(term, Call)
    fn, args = term.fn, [term_sql(a) for a in term.args]
    if fn in _INFIX and len(args) == 2:
        return f"({args[0]} {_SQL_OP.get(fn, fn)} {args[1]})"
    if fn == "neg":
        return f"(- {args[0]})"
    if fn == "not":
        return f"(NOT {args[0]})"
    if fn in ("is_null", "is_not_null"):
        return f"({args[0]} IS {'NOT ' if fn == 'is_not_null' else ''}NULL)"
    if fn in ("distinct", "not_distinct"):
        return f"({args[0]} IS {'NOT ' if fn == 'not_distinct' else ''}DISTINCT FROM {args[1]})"
    if fn in ("in", "not_in"):
        return f"({args[0]} {'NOT ' if fn == 'not_in' else ''}IN ({', '.join(args[1:])}))"
    if fn in ("like", "not_like", "ilike", "not_ilike"):
        word = ("NOT " if fn.startswith("not_") else "") + ("ILIKE" if fn.endswith("ilike") else "LIKE")
        pattern = args[1] if len(args) > 1 else _string(term.opts[1])  # (bound: the pattern is an option)
        escape = term.opts[0] if term.opts else "\\"
        return f"({args[0]} {word} {pattern} ESCAPE {_string(escape)})"
    if fn in ("starts_with", "ends_with", "contains") and len(args) == 1:
        return f"{fn}({args[0]}, {_string(term.opts[0])})"
    if fn in ("trim", "ltrim", "rtrim") and term.opts:
        return f"{fn}({args[0]}, {_string(term.opts[0])})"
    if fn == "substring" and len(args) == 1:
        pos, length = term.opts
        return f"substring({args[0]}, {pos}{'' if length is None else f', {length}'})"
    if fn == "round" and len(args) == 1:
        return f"round({args[0]}, {term.opts[0]})"
    if fn in ("cast", "try_cast"):
        return f"{fn.upper()}({args[0]} AS {sql_type(term.opts[0])})"
    if fn == "case":
        # args: cond1, value1, cond2, value2, ..., else
        pairs = " ".join(f"WHEN {args[i]} THEN {args[i + 1]}" for i in range(0, len(args) - 1, 2))
        return f"(CASE {pairs} ELSE {args[-1]} END)"
    if fn in ("date_trunc", "trunc"):
        unit = _string(term.opts[0])
        return f"date_trunc({unit}, {args[0]})" if fn == "date_trunc" else f"trunc({args[0]}, {unit})"
    if fn == "field":
        return f"{args[0]}.{ident(term.opts[0])}"
    if fn == "subscript":
        return f"{args[0]}[{args[1]}]"
    if fn == "map_get":
        return f"element_at({args[0]}, {literal_sql(term.opts[0])})"
    if fn in ("list_get", "try_list_get"):
        return f"{'try_' if fn == 'try_list_get' else ''}element_at({args[0]}, {term.opts[0]})"
    if fn == "interval_add":
        return f"({args[0]} + {args[1]})"
    if fn in ("current_date", "current_timestamp"):
        return f"{fn}()"
    return f"{fn}({', '.join(args)})"
