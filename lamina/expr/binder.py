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
from collections import deque
from dataclasses import dataclass
from typing import Any

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
from lamina.expr.literals import Coerced, coerce_literal, coercer, is_nan
from lamina.expr.parser import to_expr
from lamina.expr.terms import Call, Column, Literal, Term, term_sql
from lamina.expr.typer import Resolver, bind_term, uncast
from lamina.spec.schema import Schema

# is_nan is named here too: lamina.spark._filters imports it from this module.
__all__ = ["MAX_TERMS", "as_leaves", "bind", "fold", "is_nan"]

MAX_TERMS = 1000
_FOLD_FROM = 8  # comparisons; a narrower predicate gains nothing from folding (and stays as written)


def _compare(op: str, name: str, c: Coerced) -> Expr:
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
    if col is not None and coercer(col.type) is not None:
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
            and coercer(col.type) is not None
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
