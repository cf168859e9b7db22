"""Binding: resolve columns against a schema and coerce literals to the column's type.

After ``bind`` every literal is a ``pa.Scalar`` of exactly its column's Arrow type,
Not is gone (negation normal form) and constant branches are folded, so filtering
and pruning need no further checks.

A literal the column type cannot represent exactly (``int_col < 10.5``, a timestamp
with a time part against a date column, an out-of-range integer) is rewritten to
the equivalent predicate on representable values: ``int_col < 10.5`` becomes
``int_col <= 10``, ``int_col = 10.5`` becomes FALSE, ``int_col != 10.5`` becomes
``int_col IS NOT NULL``; so does ``float32_col < 1e39`` (above every finite float32,
below +inf): float columns compare by exact value, as if widened to double.

NaN follows Spark (docs/format.md, "Predicates: NULL, NaN and signed zero"): NaN
equals NaN and sorts above every other value, +inf included; -0.0 equals 0.0.
Comparisons with a NaN literal become = / != NaN (``x < 'NaN'`` is ``x != 'NaN'``),
so the evaluators only meet NaN in equalities and IN lists.

Wide predicates are folded: an OR of equalities on one column becomes one IN (an
AND of inequalities one NOT IN) and chains are balanced; a predicate that still has
more than ``MAX_TERMS`` comparisons is refused (Arrow's filter gets quadratically
slow on wide expressions and crashes beyond about ten thousand terms).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from lamina.errors import InvalidPredicate
from lamina.expr import sqltypes as ST
from lamina.expr.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    Expr,
    ExprVisitor,
    In,
    IsNull,
    NotIn,
    NotNull,
    Or,
    Predicate,
    _balanced,
    rewrite_not,
    visit,
)
from lamina.expr.parser import to_expr
from lamina.expr.terms import Call, Column, Literal, Term, term_sql
from lamina.expr.typer import Resolver, bind_term, uncast
from lamina.spec.schema import Schema

_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=_dt.UTC)
_US_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}
_MIN_DAY = (_dt.date.min - _EPOCH.date()).days
_MAX_DAY = (_dt.date.max - _EPOCH.date()).days
_WIDE = decimal.Context(prec=400, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)  # exact scaling
# +-inf as integers beyond every type's range; NaN above even that (never equal to a value).
_INF_INT = 1 << 200
_NAN_FLOOR = (_INF_INT + 1, False)
MAX_TERMS = 1000
_FOLD_FROM = 8  # comparisons; a narrower predicate gains nothing from folding (and stays as written)


class _Mismatch(Exception):
    pass


@dataclass(frozen=True)
class _Coerced:
    """A literal mapped onto a column type.

    ``exact`` is set when the type holds the value. Otherwise ``lo``/``hi`` are the
    nearest representable values strictly below/above it (None if there is none).
    """

    exact: pa.Scalar | None
    lo: pa.Scalar | None = None
    hi: pa.Scalar | None = None


def _between(n: int, exact: bool, lo_lim: int, hi_lim: int, make) -> _Coerced:
    """``n`` exact, or ``v`` in (n, n+1) when not exact; on an integer domain [lo_lim, hi_lim]."""
    if exact and lo_lim <= n <= hi_lim:
        return _Coerced(make(n))
    below, above = (n - 1, n + 1) if exact else (n, n + 1)
    lo = None if below < lo_lim else make(min(below, hi_lim))
    hi = None if above > hi_lim else make(max(above, lo_lim))
    return _Coerced(None, lo, hi)


def _rational_floor(v: Any) -> tuple[int, bool]:
    """(floor(v), v is integral) for a number; +-inf as huge ints, NaN (which sorts above
    every number, equal to none) just above +inf and not integral."""
    if isinstance(v, bool):
        raise _Mismatch
    if isinstance(v, int):
        return v, True
    if isinstance(v, float):
        if math.isnan(v):
            return _NAN_FLOOR
        if math.isinf(v):
            return _INF_INT * (1 if v > 0 else -1), True
        f = math.floor(v)
        return f, f == v
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return _NAN_FLOOR
        if v.is_infinite():
            return _INF_INT * (1 if v > 0 else -1), True
        f = int(v.to_integral_value(rounding=decimal.ROUND_FLOOR))
        return f, f == v
    raise _Mismatch


def _number(v: Any) -> Any:
    """Numbers pass; numeric strings ('42', '1.5') are read; anything else mismatches."""
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s)
        except ValueError:
            try:
                return decimal.Decimal(s) if s.lower() not in ("nan", "inf", "-inf", "infinity") else float(s)
            except decimal.InvalidOperation:
                raise _Mismatch from None
    if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
        return v
    raise _Mismatch


def _int_limits(t: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(t.to_pandas_dtype())
    return int(info.min), int(info.max)


def _coerce_int(v: Any, t: pa.DataType) -> _Coerced:
    fl = _rational_floor(_number(v))
    lo, hi = _int_limits(t)
    return _between(fl[0], fl[1], lo, hi, lambda n: pa.scalar(n, type=t))


def _coerce_decimal(v: Any, t: pa.DataType) -> _Coerced:
    v = _number(v)
    d = decimal.Decimal(repr(v)) if isinstance(v, float) and math.isfinite(v) else decimal.Decimal(v)
    # Work on the unscaled integer: decimal(p, s) holds integers in (-10**p, 10**p) / 10**s.
    fl = _rational_floor(d.scaleb(t.scale, _WIDE) if d.is_finite() else d)
    lim = 10**t.precision - 1
    return _between(fl[0], fl[1], -lim, lim, lambda n: pa.scalar(decimal.Decimal(n).scaleb(-t.scale, _WIDE), type=t))


def _as_utc_naive(d: _dt.datetime) -> _dt.datetime:
    return d.astimezone(_dt.UTC).replace(tzinfo=None) if d.tzinfo else d


def _datetime(v: Any) -> _dt.datetime | _dt.date:
    if isinstance(v, str):
        s = v.strip()
        try:
            return _dt.date.fromisoformat(s)
        except ValueError:
            try:
                return _dt.datetime.fromisoformat(s)
            except ValueError:
                raise _Mismatch from None
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v
    raise _Mismatch


def _micros(d: _dt.datetime) -> int:
    """Exact microseconds since the epoch (naive = UTC)."""
    delta = _as_utc_naive(d) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _coerce_date(v: Any, t: pa.DataType) -> _Coerced:
    d = _datetime(v)
    if isinstance(d, _dt.datetime):
        days, rem = divmod(_micros(d), 86_400_000_000)
        exact = rem == 0
    else:
        days, exact = (d - _EPOCH.date()).days, True
    return _between(days, exact, _MIN_DAY, _MAX_DAY, lambda n: pa.scalar(_EPOCH.date() + _dt.timedelta(days=n), type=t))


def _coerce_timestamp(v: Any, t: pa.DataType) -> _Coerced:
    d = _datetime(v)
    if not isinstance(d, _dt.datetime):
        d = _dt.datetime(d.year, d.month, d.day)
    # A naive literal against a tz-aware column is read as UTC (the stored instant's zone).
    us = _micros(d)
    per = _US_PER_UNIT[t.unit]
    n, exact = (us * 1000, True) if per is None else (us // per, us % per == 0)
    lo, hi = _int_limits(pa.int64())
    return _between(n, exact, lo, hi, lambda k: pa.scalar(k, type=t))


def _coerce_time(v: Any, t: pa.DataType) -> _Coerced:
    if isinstance(v, str):
        try:
            v = _dt.time.fromisoformat(v.strip())
        except ValueError:
            raise _Mismatch from None
    if not isinstance(v, _dt.time):
        raise _Mismatch
    us = ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    per = _US_PER_UNIT[t.unit]
    n, exact = (us * 1000, True) if per is None else (us // per, us % per == 0)
    units_per_day = 86_400_000_000 * 1000 if per is None else 86_400_000_000 // per
    return _between(n, exact, 0, units_per_day - 1, lambda k: pa.scalar(k, type=t))


def _coerce_bool(v: Any, t: pa.DataType) -> _Coerced:
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        v = v.strip().lower() == "true"
    if not isinstance(v, (bool, np.bool_)):
        raise _Mismatch
    return _Coerced(pa.scalar(bool(v), type=t))


def _coerce_float(v: Any, t: pa.DataType) -> _Coerced:
    v = _number(v)
    if isinstance(v, decimal.Decimal):
        v = float(v)  # a DECIMAL literal meets a float column as a DOUBLE (Spark), its nearest
    if isinstance(v, float) and not math.isfinite(v) or isinstance(v, decimal.Decimal) and not v.is_finite():
        return _Coerced(pa.scalar(float(v), type=t))  # NaN and +-inf are values of every float type
    kind = np.dtype(t.to_pandas_dtype()).type
    exact = Fraction(v)
    with np.errstate(over="ignore"):
        # The nearest value of the column's type (within one step of it, so a neighbour of v).
        try:
            near = kind(float(v))
        except OverflowError:  # an integer beyond every double
            near = kind(math.copysign(math.inf, v))
        if math.isinf(near):  # beyond the type's finite range: between its largest value and inf
            top = np.finfo(kind).max
            lo, hi = (kind(top), near) if near > 0 else (near, kind(-top))
        elif Fraction(float(near)) == exact:
            return _Coerced(pa.scalar(near, type=t))
        elif Fraction(float(near)) > exact:
            lo, hi = np.nextafter(near, kind(-math.inf)), near
        else:
            lo, hi = near, np.nextafter(near, kind(math.inf))
    return _Coerced(None, pa.scalar(lo, type=t), pa.scalar(hi, type=t))


def _coerce_string(v: Any, t: pa.DataType) -> _Coerced:
    if not isinstance(v, str):
        raise _Mismatch
    return _Coerced(pa.scalar(v, type=t))


def _coerce_binary(v: Any, t: pa.DataType) -> _Coerced:
    if isinstance(v, str):
        v = v.encode("utf-8")
    if not isinstance(v, (bytes, bytearray, memoryview)):
        raise _Mismatch
    v = bytes(v)
    if pa.types.is_fixed_size_binary(t) and len(v) != t.byte_width:
        raise _Mismatch
    return _Coerced(pa.scalar(v, type=t))


def _coercer(t: pa.DataType):
    checks = [
        (pa.types.is_boolean, _coerce_bool),
        (pa.types.is_integer, _coerce_int),
        # (not half floats: Arrow has no comparison kernel for them, nor casts them implicitly to a type that has)
        (lambda x: pa.types.is_floating(x) and not pa.types.is_float16(x), _coerce_float),
        (pa.types.is_decimal, _coerce_decimal),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x), _coerce_string),
        (
            lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x) or pa.types.is_fixed_size_binary(x),
            _coerce_binary,
        ),
        (pa.types.is_date, _coerce_date),
        (pa.types.is_timestamp, _coerce_timestamp),
        (pa.types.is_time, _coerce_time),
    ]
    for pred, fn in checks:
        if pred(t):
            return fn
    return None


def coerce_literal(value: Any, t: pa.DataType, column: str) -> _Coerced:
    """Map ``value`` onto column type ``t`` (InvalidPredicate if it makes no sense for it)."""
    fn = _coercer(t)
    if fn is None:  # (whatever the literal: an Arrow scalar of the column's own type too)
        raise InvalidPredicate(
            f"column {column!r} has type {t}, which cannot be compared with a literal; "
            "only IS NULL / IS NOT NULL apply to it"
        )
    v = value
    if isinstance(v, pa.Scalar):
        if v.type.equals(t) and v.is_valid:
            return _Coerced(v)
        v = v.as_py()
    elif isinstance(v, np.generic):
        v = v.item()
    if v is None:
        raise InvalidPredicate(f"column {column!r}: NULL cannot be compared; use IS NULL / IS NOT NULL")
    try:
        return fn(v, t)
    except (_Mismatch, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        raise InvalidPredicate(
            f"cannot compare column {column!r} of type {t} with literal {v!r} ({type(v).__name__})"
        ) from None


def is_nan(v: Any) -> bool:
    """Whether a (bound) literal is a float NaN."""
    if isinstance(v, pa.Scalar):
        return pa.types.is_floating(v.type) and v.is_valid and math.isnan(v.as_py())
    return isinstance(v, float) and math.isnan(v)


def _compare(op: str, name: str, c: _Coerced) -> Expr:
    if c.exact is not None:
        if is_nan(c.exact):
            # NaN sorts above every value and equals itself: orderings against it are
            # (in)equalities (x < NaN: x != NaN; x <= NaN: any non-null x).
            eq, ne = Compare("=", name, c.exact), Compare("!=", name, c.exact)
            return {"=": eq, ">=": eq, "!=": ne, "<": ne, "<=": NotNull(name), ">": AlwaysFalse()}[op]
        return Compare(op, name, c.exact)
    # Value strictly between lo and hi: rewrite onto the nearest representable bounds.
    if op == "=":
        return AlwaysFalse()
    if op == "!=":
        return NotNull(name)
    if op in ("<", "<="):
        return Compare("<=", name, c.lo) if c.lo is not None else AlwaysFalse()
    return Compare(">=", name, c.hi) if c.hi is not None else AlwaysFalse()


def _add_value(out: dict[Any, pa.Scalar], v: pa.Scalar) -> None:
    """Add bound literal ``v`` to a set of distinct values (keyed by value; NaN is one value)."""
    key = v.as_py()
    if isinstance(key, float):
        out.setdefault(repr(key), v)
        if key == 0.0:
            # Arrow's is_in hashes bits, so 0.0 would miss -0.0 although they compare equal.
            for z in (0.0, -0.0):
                out.setdefault(repr(z), pa.scalar(z, type=v.type))
    else:
        out.setdefault((type(key), key), v)


def _exact_set(name: str, t: pa.DataType, values: tuple) -> tuple[pa.Scalar, ...]:
    """Distinct representable values; others can never be equal and are dropped."""
    out: dict[Any, pa.Scalar] = {}
    for v in values:
        c = coerce_literal(v, t, name)
        if c.exact is not None:
            _add_value(out, c.exact)
    return tuple(out.values())


def _and(l: Expr, r: Expr, *more: Expr) -> Expr:
    if more:
        return _and(_and(l, r), *more)
    # Kleene logic makes these folds exact: FALSE AND unknown = FALSE, TRUE AND x = x.
    if isinstance(l, AlwaysFalse) or isinstance(r, AlwaysFalse):
        return AlwaysFalse()
    if isinstance(l, AlwaysTrue):
        return r
    if isinstance(r, AlwaysTrue):
        return l
    return And(l, r)


def _or(l: Expr, r: Expr, *more: Expr) -> Expr:
    if more:
        return _or(_or(l, r), *more)
    if isinstance(l, AlwaysTrue) or isinstance(r, AlwaysTrue):
        return AlwaysTrue()
    if isinstance(l, AlwaysFalse):
        return r
    if isinstance(r, AlwaysFalse):
        return l
    return Or(l, r)


class _Binder(ExprVisitor[Expr]):
    def __init__(self, schema: Schema, now: _dt.datetime | None = None):
        self.schema = schema
        self.leaves = 0  # comparisons seen (each resolves one column)
        self.lower: dict[str, list[str]] = {}
        for n in schema.names:
            self.lower.setdefault(n.lower(), []).append(n)
        self._resolver: Resolver | None = None  # (made for the first expression leaf: a wide schema's is not free)
        self.now = now or _dt.datetime.now(_dt.UTC)  # the statement's clock (current_date, ...)

    @property
    def resolver(self) -> Resolver:
        if self._resolver is None:
            self._resolver = Resolver(list(self.schema.arrow))
        return self._resolver

    def field(self, name: str) -> pa.Field:
        self.leaves += 1
        if name not in self.schema.names:
            # Unquoted SQL identifiers are case-insensitive: accept a unique case-insensitive match.
            cands = self.lower.get(name.lower(), [])
            if len(cands) != 1:
                raise InvalidPredicate(f"unknown column {name!r} in predicate; table columns are {self.schema.names}")
            name = cands[0]
        return self.schema.field(name)

    def visit_true(self):
        return AlwaysTrue()

    def visit_false(self):
        return AlwaysFalse()

    def visit_and(self, l, r):
        return _and(l, r)

    def visit_or(self, l, r):
        return _or(l, r)

    def visit_not(self, c):
        raise AssertionError("bind works on negation normal form")

    def visit_compare(self, e):
        f = self.field(e.name)
        return _compare(e.op, f.name, coerce_literal(e.value, f.type, f.name))

    def visit_in(self, e):
        f = self.field(e.name)
        values = _exact_set(f.name, f.type, e.values)
        if not values:
            return AlwaysFalse()
        return Compare("=", f.name, values[0]) if len(values) == 1 else In(f.name, values)

    def visit_not_in(self, e):
        f = self.field(e.name)
        values = _exact_set(f.name, f.type, e.values)
        if not values:
            return NotNull(f.name)  # NOT IN excludes nulls even when it excludes no value
        return Compare("!=", f.name, values[0]) if len(values) == 1 else NotIn(f.name, values)

    def visit_is_null(self, e):
        return IsNull(self.field(e.name).name)

    def visit_not_null(self, e):
        return NotNull(self.field(e.name).name)

    def visit_predicate(self, e):
        self.leaves += 1
        return as_leaves(bind_term(e.term, self.resolver, self.now), self.schema)


# --- a bound boolean term as leaves ------------------------------------------------------------


def _top_column(t: Term) -> Column | None:
    t = uncast(t)
    return t if isinstance(t, Column) and len(t.path) == 1 else None


def _exact_leaf(op: str, subject: Term, value: pa.Scalar, schema: Schema) -> Expr | None:
    """``subject op value`` where the literal is compared exactly with ``subject``'s own
    values (as a ``Compare`` on a column; on other integer, DECIMAL and date/time terms as
    the comparison of the nearest values it can hold), or None to keep the comparison."""
    col = _top_column(subject)
    if col is not None and _coercer(col.type) is not None:
        return _compare(op, col.name, coerce_literal(value, col.type, col.name))
    inner = uncast(subject)
    t = inner.type
    if not (ST.is_integer(t) or ST.is_decimal(t) or ST.is_temporal(t)) or not value.is_valid:
        return None
    c = coerce_literal(value, t, term_sql(inner))
    leaf = _compare(op, "_", c)
    if isinstance(leaf, (AlwaysTrue, AlwaysFalse)):
        return leaf
    if isinstance(leaf, NotNull):
        return Predicate(Call("is_not_null", (inner,), (), pa.bool_()))
    assert isinstance(leaf, Compare)  # a valid literal compares as itself (or folds, above)
    return Predicate(Call(leaf.op, (inner, Literal(leaf.value, t)), (), pa.bool_()))


def as_leaves(term: Term, schema: Schema) -> Expr:
    """A bound boolean term (at the top of a WHERE, in negation normal form) as an ``Expr``:
    AND / OR as And / Or, a column compared with literals as Compare / In / IsNull ... (the
    leaves every engine and the pruner know), a constant as AlwaysTrue / AlwaysFalse (a
    NULL keeps no row), anything else a Predicate."""
    t = term.type
    if not (pa.types.is_boolean(t) or pa.types.is_null(t)):
        raise InvalidPredicate(f"a where must be a boolean expression, not {ST.describe(t)}: {term_sql(term)}")
    if isinstance(term, Literal):
        return AlwaysTrue() if term.value.is_valid and term.value.as_py() is True else AlwaysFalse()
    if isinstance(term, Column):
        return Compare("=", term.name, pa.scalar(True)) if len(term.path) == 1 else Predicate(term)
    assert isinstance(term, Call)
    fn, args = term.fn, term.args
    if fn in ("and", "or"):
        parts = [as_leaves(a, schema) for a in args]
        return _and(*parts) if fn == "and" else _or(*parts)
    if fn == "not" and isinstance(args[0], Column) and len(args[0].path) == 1:
        return Compare("=", args[0].name, pa.scalar(False))
    if fn in ("=", "!=", "<", "<=", ">", ">="):
        a, b = args
        for subject, other, op in ((a, b, fn), (b, a, _FLIP[fn])):
            if isinstance(other, Literal) and not isinstance(subject, Literal):
                leaf = _exact_leaf(op, subject, other.value, schema)
                if leaf is not None:
                    return leaf
        return Predicate(term)
    if fn in ("in", "not_in"):
        col = _top_column(args[0])
        literals = [v for v in args[1:] if isinstance(v, Literal)]
        if (
            col is not None
            and _coercer(col.type) is not None
            and len(literals) == len(args) - 1
            and all(v.value.is_valid for v in literals)
        ):
            values = tuple(v.value for v in literals)
            exact = _exact_set(col.name, col.type, values)
            if fn == "in":
                return (
                    AlwaysFalse()
                    if not exact
                    else Compare("=", col.name, exact[0])
                    if len(exact) == 1
                    else In(col.name, exact)
                )
            return (
                NotNull(col.name)
                if not exact
                else Compare("!=", col.name, exact[0])
                if len(exact) == 1
                else NotIn(col.name, exact)
            )
        return Predicate(term)
    if fn in ("is_null", "is_not_null") and isinstance(args[0], Column) and len(args[0].path) == 1:
        return IsNull(args[0].name) if fn == "is_null" else NotNull(args[0].name)
    return Predicate(term)


_FLIP = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


# --- folding wide predicates -----------------------------------------------------------------


@dataclass
class _Chain:
    """The operands of a run of one connective (And or Or) while folding."""

    cls: type
    items: deque


class _Fold(ExprVisitor[Any]):
    """Flatten And/Or runs (merging the smaller run into the larger: linear-logarithmic on
    any tree shape), fold each run's equalities per column into one IN (And: inequalities
    into one NOT IN), rebuild balanced, and count the comparisons left."""

    def __init__(self) -> None:
        self.leaves = 0

    def _leaf(self, e):
        self.leaves += 1
        return e

    visit_compare = visit_in = visit_not_in = visit_is_null = visit_not_null = visit_predicate = _leaf

    def visit_true(self):
        return AlwaysTrue()

    def visit_false(self):
        return AlwaysFalse()

    def visit_not(self, c):
        raise AssertionError("folding works on negation normal form")

    def _run(self, cls: type, l: Any, r: Any) -> _Chain:
        left, right = (self._items(cls, x) for x in (l, r))
        if len(left) >= len(right):
            left.extend(right)
            return _Chain(cls, left)
        right.extendleft(reversed(left))
        return _Chain(cls, right)

    def _items(self, cls: type, x: Any) -> deque:
        return x.items if isinstance(x, _Chain) and x.cls is cls else deque([self.close(x)])

    def visit_and(self, l, r):
        return self._run(And, l, r)

    def visit_or(self, l, r):
        return self._run(Or, l, r)

    def close(self, x: Any) -> Expr:
        """A run as a balanced tree of its folded operands (anything else as it is)."""
        if not isinstance(x, _Chain):
            return x
        op, set_cls = ("=", In) if x.cls is Or else ("!=", NotIn)
        items: list[Any] = []
        values: dict[str, dict[Any, pa.Scalar]] = {}
        for e in x.items:
            if isinstance(e, Compare) and e.op == op:
                found: tuple = (e.value,)
            elif isinstance(e, set_cls):
                found = e.values
            else:
                items.append(e)
                continue
            if e.name not in values:
                values[e.name] = {}
                items.append(e.name)  # where the folded leaf goes
            else:
                self.leaves -= 1
            for v in found:
                _add_value(values[e.name], v)
        for i, e in enumerate(items):
            if isinstance(e, str):
                vs = tuple(values[e].values())
                items[i] = Compare(op, e, vs[0]) if len(vs) == 1 else set_cls(e, vs)
        return _balanced(x.cls, items)


def fold(expr: Expr) -> Expr:
    """``expr`` (bound) with wide And/Or runs folded and balanced (see the module doc);
    InvalidPredicate if more than ``MAX_TERMS`` comparisons remain."""
    folder = _Fold()
    out = folder.close(visit(expr, folder))
    if folder.leaves > MAX_TERMS:
        raise InvalidPredicate(
            f"predicate has {folder.leaves:,} comparisons after folding equalities on one column into IN lists; "
            f"at most {MAX_TERMS:,} are supported. Write a long list of values as `column IN (...)`"
        )
    return out


def bind(expr: Expr | str | None, schema: Schema, now: _dt.datetime | None = None) -> Expr:
    """Resolve ``expr`` against ``schema``: check columns, coerce literals, type and fold
    terms, push down NOT, fold wide predicates. ``now``: the statement's clock (what
    ``current_date`` and ``current_timestamp`` read; default: the time of this call).

    Raises InvalidPredicate for unknown columns or functions, literals that do not fit the
    column, types that do not go together, or predicates too wide to evaluate (``MAX_TERMS``).
    Idempotent: binding a bound expression returns an equal one.
    """
    binder = _Binder(schema, now)
    bound = visit(rewrite_not(to_expr(expr)), binder)
    return fold(bound) if binder.leaves > _FOLD_FROM else bound
