"""Binding terms: resolve columns, type every node (``lamina.expr.functions``), fold constants.

After ``bind_term`` every node has its Arrow type, every implicit coercion is an explicit
``cast`` call, ``current_date`` / ``current_timestamp`` are the statement's clock (read once
per bind, so once per statement), constant parts are folded to literals, and ``NOT`` is
pushed into comparisons and tests where it can be (``NOT a < b`` is ``a >= b``: exact under
SQL's NULL logic and Spark's total order, NaN on top).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidPredicate
from lamina.expr import sqltypes as T
from lamina.expr.functions import COMPARISONS, FUNCTIONS, NEGATED, bind_call, supported_functions
from lamina.expr.terms import INTERVAL_TYPE, Call, Column, Interval, Literal, Term, is_constant, term_sql, walk

_NEGATIONS = {
    "is_null": "is_not_null",
    "is_not_null": "is_null",
    "in": "not_in",
    "not_in": "in",
    "like": "not_like",
    "not_like": "like",
    "ilike": "not_ilike",
    "not_ilike": "ilike",
    "distinct": "not_distinct",
    "not_distinct": "distinct",
    "is_true": "is_not_true",
    "is_not_true": "is_true",
    "is_false": "is_not_false",
    "is_not_false": "is_false",
    **NEGATED,
}


@dataclass
class Resolver:
    """Columns by name: exact, else the one whose name matches ignoring case (unquoted SQL
    names are case-insensitive). A dotted path is a top-level name holding dots (a merge's
    ``source.x``) or a column and its nested fields (``payload.user.id``). ``default_prefix``:
    a bare name not found means ``<prefix>.<name>`` (a merge's target columns)."""

    fields: Sequence[pa.Field]
    default_prefix: str | None = None
    _by_name: dict = field(default_factory=dict, init=False)
    _by_lower: dict = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for f in self.fields:
            self._by_name[f.name] = f
            self._by_lower.setdefault(f.name.lower(), []).append(f)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def _top(self, name: str) -> pa.Field | None:
        if name in self._by_name:
            return self._by_name[name]
        cands = self._by_lower.get(name.lower(), [])
        return cands[0] if len(cands) == 1 else None

    def resolve(self, path: tuple[str, ...]) -> Column:
        for prefix in ((), (self.default_prefix,)) if self.default_prefix else ((),):
            full = (*prefix, *path)
            for k in range(len(full), 0, -1):
                f = self._top(".".join(full[:k]))
                if f is not None and (prefix == () or k > 1):
                    return self._nested(f, full[k:], path)
        raise InvalidPredicate(f"unknown column {'.'.join(path)!r} in predicate; table columns are {self.names}")

    def _nested(self, f: pa.Field, rest: tuple[str, ...], path: tuple[str, ...]) -> Column:
        resolved, t = [f.name], f.type
        for step in rest:
            if not pa.types.is_struct(t):
                raise InvalidPredicate(
                    f"{'.'.join(path)!r}: {'.'.join(resolved)} is {T.describe(t)}, not a struct; "
                    "use element_at(x, key) or x[index] for maps and arrays"
                )
            names = [t.field(i).name for i in range(t.num_fields)]
            match = [n for n in names if n == step] or [n for n in names if n.lower() == step.lower()]
            if len(match) != 1:
                raise InvalidPredicate(
                    f"{'.'.join(path)!r}: no field {step!r} in {'.'.join(resolved)}; its fields are {names}"
                )
            resolved.append(match[0])
            t = t.field(match[0]).type
        return Column(tuple(resolved), t)


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


@dataclass
class _Context:
    resolver: Resolver
    now: _dt.datetime


def bind_term(term: Term, resolver: Resolver, now: _dt.datetime | None = None) -> Term:
    """``term`` bound to ``resolver``'s columns (see the module doc); InvalidPredicate for an
    unknown column or function, types that do not go together, or a constant that must be one."""
    ctx = _Context(resolver, now or _now())
    try:
        return _bind(term, ctx)
    except RecursionError:
        raise InvalidPredicate("predicate is too deeply nested") from None


def _bind(term: Term, ctx: _Context) -> Term:
    if isinstance(term, Column):
        if term.type is not None:
            return term
        return ctx.resolver.resolve(term.path)
    if isinstance(term, Literal):
        return bind_literal(term)
    assert isinstance(term, Call)
    if term.type is not None:
        return term
    if term.fn == "current_date":
        return Literal(pa.scalar(ctx.now.date(), pa.date32()), pa.date32())
    if term.fn == "current_timestamp":
        t = pa.timestamp("us", "UTC")
        return Literal(pa.scalar(ctx.now, t), t)
    if term.fn not in FUNCTIONS:
        raise InvalidPredicate(
            f"unknown function {term.fn}() in {term_sql(term)}; supported: {', '.join(supported_functions())}"
        )
    if term.fn == "not":
        return negate_term(_bind(term.args[0], ctx))
    args = tuple(_bind(a, ctx) for a in term.args)
    bound = bind_call(Call(term.fn, args, term.opts))
    return fold(bound)


def bind_literal(term: Literal) -> Literal:
    v = term.value
    if isinstance(v, pa.Scalar):
        return Literal(v, v.type)
    if isinstance(v, Interval):
        return Literal(v, INTERVAL_TYPE)
    t = term.type or T.literal_type(v)
    return Literal(T.literal_scalar(v, t), t)


def negate_term(t: Term) -> Term:
    """NOT ``t``: for a bound ``t``, pushed into it where SQL's logic allows; an unbound
    ``t`` is wrapped (the binder pushes it in)."""
    if t.type is None:
        return Call("not", (t,))
    if isinstance(t, Literal):
        return fold(Call("not", (t,), (), pa.bool_()))
    if isinstance(t, Call) and t.type is not None and pa.types.is_boolean(t.type):
        if t.fn == "not":
            return t.args[0]
        if t.fn in ("and", "or"):
            return Call("or" if t.fn == "and" else "and", tuple(negate_term(a) for a in t.args), (), t.type)
        if t.fn in _NEGATIONS:
            return Call(_NEGATIONS[t.fn], t.args, t.opts, t.type)
    if t.type is not None and not (pa.types.is_boolean(t.type) or T.is_null(t.type)):
        raise InvalidPredicate(f"NOT needs a boolean, not {T.describe(t.type)}: {term_sql(t)}")
    return Call("not", (t,), (), pa.bool_())


def fold_cast(term: Literal, t: pa.DataType, strict: bool) -> Literal:
    """A literal cast to ``t`` at bind time (as the cast would compute it); a literal that
    does not fit is an InvalidPredicate for CAST (``strict``), a NULL for TRY_CAST."""
    v = term.value
    if isinstance(v, Interval) or term.type == INTERVAL_TYPE:
        raise InvalidPredicate(f"an INTERVAL cannot be cast to {T.describe(t)}")
    if not v.is_valid or T.is_null(v.type):
        return Literal(pa.scalar(None, t), t)
    from lamina.expr.functions import _cast_expr, castable

    if not castable(v.type, t):
        raise InvalidPredicate(f"CAST of {term_sql(term)} to {T.describe(t)} is not supported")
    try:
        out = _evaluate_constant(_cast_expr(pc.scalar(v), v.type, t, safe=not strict), t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError, ValueError) as e:
        raise InvalidPredicate(f"{term_sql(term)} cannot be cast to {T.describe(t)}: {_first_line(e)}") from None
    return Literal(out, t)


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _evaluate_constant(e: pc.Expression, t: pa.DataType) -> pa.Scalar:
    one = pa.table({"_": pa.array([0], pa.int8())})
    import pyarrow.dataset as ds

    out = ds.dataset(one).to_table(columns={"v": e}, use_threads=False).column("v")[0]
    return out if out.type.equals(t) else out.cast(t)


def fold(term: Term) -> Term:
    """``term`` (a bound call) as a literal when all its arguments are literals and computing
    it succeeds; a call that fails on its constants (``1 / 0``) is left to fail where it is
    evaluated (it may never be: ``CASE WHEN FALSE THEN 1 / 0 END``)."""
    if not isinstance(term, Call) or not is_constant(term) or term.type == INTERVAL_TYPE:
        return term
    if term.fn in ("interval_add",) and any(
        isinstance(a, Literal) and isinstance(a.value, Interval) for a in term.args
    ):
        if isinstance(term.args[0], Literal):
            return _fold_interval(term)
        return term
    if any(isinstance(a, Literal) and isinstance(a.value, Interval) for a in term.args):
        return term
    from lamina.expr.compile import to_arrow

    try:
        return Literal(_evaluate_constant(to_arrow(term), term.type), term.type)
    except (
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
        pa.ArrowTypeError,
        OverflowError,
        ValueError,
        InvalidPredicate,
    ):
        return term


def _fold_interval(term: Call) -> Term:
    from lamina.expr.compile import to_arrow

    try:
        return Literal(_evaluate_constant(to_arrow(term), term.type), term.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError, ValueError):
        return term


def interval_of(value: Any, unit: str) -> Interval:
    """An ``INTERVAL 'value' unit`` literal (units year, quarter, month, week, day, hour,
    minute, second, millisecond, microsecond; the plural too)."""
    unit = unit.lower().rstrip("s") if unit.lower() not in ("s",) else unit
    try:
        amount = decimal.Decimal(str(value).strip())
    except decimal.InvalidOperation:
        raise InvalidPredicate(f"INTERVAL {value!r} {unit}: the amount must be a number") from None
    months = {"year": 12, "quarter": 3, "month": 1}
    micros = {
        "week": 7 * 86_400_000_000,
        "day": 86_400_000_000,
        "hour": 3_600_000_000,
        "minute": 60_000_000,
        "second": 1_000_000,
        "millisecond": 1000,
        "microsecond": 1,
    }
    if unit in months:
        if amount != amount.to_integral_value():
            raise InvalidPredicate(f"INTERVAL {value} {unit.upper()}: months must be whole")
        return Interval(months=int(amount) * months[unit])
    if unit in ("week", "day") and amount == amount.to_integral_value():
        return Interval(days=int(amount) * (7 if unit == "week" else 1))
    if unit in micros:
        us = amount * micros[unit]
        if us != us.to_integral_value():
            raise InvalidPredicate(f"INTERVAL {value} {unit.upper()} is not a whole number of microseconds")
        return Interval(micros=int(us))
    raise InvalidPredicate(
        f"unknown INTERVAL unit {unit!r}; use YEAR, QUARTER, MONTH, WEEK, DAY, HOUR, MINUTE, SECOND, MILLISECOND or MICROSECOND"
    )


def comparison_parts(term: Term) -> tuple[str, Term, Term] | None:
    """(op, left, right) of a bound comparison call, else None."""
    if isinstance(term, Call) and term.fn in COMPARISONS:
        return term.fn, term.args[0], term.args[1]
    return None


def uncast(term: Term) -> Term:
    """``term`` without the implicit widening casts on top (``cast(int_col AS BIGINT)``
    is ``int_col`` to the exact literal rewriting)."""
    while isinstance(term, Call) and term.fn == "cast" and _widening(term.args[0].type, term.type):
        term = term.args[0]
    return term


def _widening(src: pa.DataType, dst: pa.DataType) -> bool:
    if T.is_integer(src) and T.is_integer(dst):
        return pa.types.is_signed_integer(src) == pa.types.is_signed_integer(dst) and dst.bit_width >= src.bit_width
    if T.is_integer(src) and T.is_decimal(dst):
        return dst.precision - dst.scale >= T.as_decimal(src).precision
    if T.is_decimal(src) and T.is_decimal(dst):
        return dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
    if pa.types.is_date(src) and pa.types.is_timestamp(dst):
        return True
    return False


def has_columns(term: Term) -> bool:
    return any(isinstance(t, Column) for t in walk(term))
