"""Boolean row predicates as immutable trees, a builder and one visitor.

Leaves compare one column with literals, or (``Predicate``) are any boolean SQL expression
over columns (a term, ``lamina.expr.terms``: ``id + 1 > 18``, ``lower(s) IN (...)``,
``s LIKE 'a%'``); ``And``/``Or``/``Not`` combine them.
Semantics are SQL's three-valued logic: a comparison with null is unknown, and a
``where`` keeps only rows where the predicate is TRUE. Negation can therefore be
pushed to the leaves exactly (``NOT a = 1`` is ``a != 1``: both unknown on null),
which is what ``rewrite_not`` does before any evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from lamina.errors import InvalidPredicate
from lamina.expr.terms import Term, columns_of, ident, literal_sql, term_sql

T = TypeVar("T")

COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=")
_OP_ALIASES = {"==": "=", "<>": "!="}
NEGATED_OP = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
FLIPPED_OP = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


class Expr:
    """A boolean expression. Combine with ``&``, ``|`` and ``~``."""

    __slots__ = ()

    def __and__(self, other: Any) -> Expr:
        return And(self, _as_expr(other))

    def __rand__(self, other: Any) -> Expr:
        return And(_as_expr(other), self)

    def __or__(self, other: Any) -> Expr:
        return Or(self, _as_expr(other))

    def __ror__(self, other: Any) -> Expr:
        return Or(_as_expr(other), self)

    def __invert__(self) -> Expr:
        return negate(self)

    def __str__(self) -> str:
        return to_sql(self)


def _as_expr(e: Any) -> Expr:
    if isinstance(e, Expr):
        return e
    if isinstance(e, bool):
        return AlwaysTrue() if e else AlwaysFalse()
    if isinstance(e, Ref):
        return Compare("=", e.name, True)  # a bare boolean column
    raise InvalidPredicate(f"expected a predicate expression, got {type(e).__name__} {e!r}")


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidPredicate(f"column name must be a non-empty string, got {name!r}")


def _check_literal(value: Any, where: str) -> Any:
    if isinstance(value, Lit):
        value = value.value
    if value is None:
        raise InvalidPredicate(f"{where}: NULL never compares equal or unequal; use IS NULL / IS NOT NULL")
    if isinstance(value, (Ref, Expr)):
        raise InvalidPredicate(
            f"{where}: comparing a column with {value!r} is not supported; compare a column with a literal"
        )
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        raise InvalidPredicate(f"{where}: {value!r} is not a single literal; use isin / IN for lists")
    return value


@dataclass(frozen=True)
class AlwaysTrue(Expr):
    """Matches every row."""


@dataclass(frozen=True)
class AlwaysFalse(Expr):
    """Matches no row."""


@dataclass(frozen=True)
class Compare(Expr):
    """``name <op> value`` with op in = != < <= > >=."""

    op: str
    name: str
    value: Any

    def __post_init__(self) -> None:
        op = _OP_ALIASES.get(self.op, self.op)
        if op not in COMPARE_OPS:
            raise InvalidPredicate(f"unknown comparison operator {self.op!r}; use one of {', '.join(COMPARE_OPS)}")
        _check_name(self.name)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", _check_literal(self.value, f"{self.name} {op} ..."))


def _values_tuple(name: str, values: Any, what: str) -> tuple:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidPredicate(f"{name} {what}: expected a list of literals, got {values!r}")
    return tuple(_check_literal(v, f"{name} {what} (...)") for v in values)


@dataclass(frozen=True)
class In(Expr):
    """``name IN (values...)``."""

    name: str
    values: tuple

    def __post_init__(self) -> None:
        _check_name(self.name)
        object.__setattr__(self, "values", _values_tuple(self.name, self.values, "IN"))


@dataclass(frozen=True)
class NotIn(Expr):
    """``name NOT IN (values...)``; never true for a null ``name``."""

    name: str
    values: tuple

    def __post_init__(self) -> None:
        _check_name(self.name)
        object.__setattr__(self, "values", _values_tuple(self.name, self.values, "NOT IN"))


@dataclass(frozen=True)
class IsNull(Expr):
    name: str

    def __post_init__(self) -> None:
        _check_name(self.name)


@dataclass(frozen=True)
class NotNull(Expr):
    name: str

    def __post_init__(self) -> None:
        _check_name(self.name)


@dataclass(frozen=True)
class Predicate(Expr):
    """A boolean term: the row is kept where it is TRUE. Bound (``bind``), the term is typed
    and columns resolved; ``Compare``-like leaves it can be written as are rewritten to those."""

    term: Term

    def __post_init__(self) -> None:
        if not isinstance(self.term, Term):
            raise InvalidPredicate(f"Predicate needs a term, got {self.term!r}")


@dataclass(frozen=True)
class And(Expr):
    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        object.__setattr__(self, "left", _as_expr(self.left))
        object.__setattr__(self, "right", _as_expr(self.right))


@dataclass(frozen=True)
class Or(Expr):
    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        object.__setattr__(self, "left", _as_expr(self.left))
        object.__setattr__(self, "right", _as_expr(self.right))


@dataclass(frozen=True)
class Not(Expr):
    child: Expr

    def __post_init__(self) -> None:
        object.__setattr__(self, "child", _as_expr(self.child))


@dataclass(frozen=True)
class Lit:
    """A literal value, for symmetry with ``Ref`` in the builder: ``col("a") == lit(1)``."""

    value: Any


@dataclass(frozen=True, eq=False)
class Ref:
    """A column reference; comparison operators build predicates: ``col("id") >= 10``."""

    name: str

    def __post_init__(self) -> None:
        _check_name(self.name)

    def __hash__(self) -> int:
        return hash(("Ref", self.name))

    def __eq__(self, other: Any) -> Compare:  # type: ignore[override]
        return Compare("=", self.name, other)

    def __ne__(self, other: Any) -> Compare:  # type: ignore[override]
        return Compare("!=", self.name, other)

    def __lt__(self, other: Any) -> Compare:
        return Compare("<", self.name, other)

    def __le__(self, other: Any) -> Compare:
        return Compare("<=", self.name, other)

    def __gt__(self, other: Any) -> Compare:
        return Compare(">", self.name, other)

    def __ge__(self, other: Any) -> Compare:
        return Compare(">=", self.name, other)

    def isin(self, values: Iterable[Any]) -> In:
        return In(self.name, cast(tuple, values))  # In checks and normalizes what it is given

    def notin(self, values: Iterable[Any]) -> NotIn:
        return NotIn(self.name, cast(tuple, values))

    not_in = notin

    def is_null(self) -> IsNull:
        return IsNull(self.name)

    def is_not_null(self) -> NotNull:
        return NotNull(self.name)

    not_null = is_not_null

    def between(self, low: Any, high: Any, symmetric: bool = False) -> Expr:
        """Inclusive on both ends, as SQL BETWEEN; ``symmetric``: either bound may be the lower one."""
        return between(self.name, low, high, symmetric)


def between(name: str, low: Any, high: Any, symmetric: bool = False) -> Expr:
    """``name BETWEEN [SYMMETRIC] low AND high``.

    SYMMETRIC is ``BETWEEN low AND high OR BETWEEN high AND low``, written out rather than
    by ordering the bounds here: which bound is lower is only known once they are bound to
    the column's type (a string can be a date), and the disjunction means the same anyway.
    """
    asc = And(Compare(">=", name, low), Compare("<=", name, high))
    return Or(asc, And(Compare(">=", name, high), Compare("<=", name, low))) if symmetric else asc


def col(name: str) -> Ref:
    return Ref(name)


def lit(value: Any) -> Lit:
    return Lit(value)


def _balanced(cls: type, exprs: list[Expr]) -> Expr:
    """Balanced tree, so long AND/OR chains stay shallow."""
    if len(exprs) == 1:
        return exprs[0]
    mid = len(exprs) // 2
    return cls(_balanced(cls, exprs[:mid]), _balanced(cls, exprs[mid:]))


def and_(*exprs: Expr) -> Expr:
    """AND of any number of predicates (AlwaysTrue for none)."""
    return _balanced(And, [_as_expr(e) for e in exprs]) if exprs else AlwaysTrue()


def or_(*exprs: Expr) -> Expr:
    """OR of any number of predicates (AlwaysFalse for none)."""
    return _balanced(Or, [_as_expr(e) for e in exprs]) if exprs else AlwaysFalse()


# --- visitor ----------------------------------------------------------------------


class ExprVisitor(Generic[T]):
    """Post-order visitor: combinators receive their children's results."""

    def visit_true(self) -> T:
        raise NotImplementedError

    def visit_false(self) -> T:
        raise NotImplementedError

    def visit_and(self, left: T, right: T) -> T:
        raise NotImplementedError

    def visit_or(self, left: T, right: T) -> T:
        raise NotImplementedError

    def visit_not(self, child: T) -> T:
        raise NotImplementedError

    def visit_compare(self, e: Compare) -> T:
        raise NotImplementedError

    def visit_in(self, e: In) -> T:
        raise NotImplementedError

    def visit_not_in(self, e: NotIn) -> T:
        raise NotImplementedError

    def visit_is_null(self, e: IsNull) -> T:
        raise NotImplementedError

    def visit_not_null(self, e: NotNull) -> T:
        raise NotImplementedError

    def visit_predicate(self, e: Predicate) -> T:
        raise NotImplementedError


def visit(expr: Expr, visitor: ExprVisitor[T]) -> T:
    """Run ``visitor`` over ``expr`` bottom-up (iteratively, so deep trees cannot overflow the stack)."""
    stack: list[tuple[Any, bool]] = [(expr, False)]
    out: list[T] = []
    while stack:
        node, expanded = stack.pop()
        if isinstance(node, (And, Or)):
            if not expanded:
                stack += [(node, True), (node.right, False), (node.left, False)]
            else:
                r, l = out.pop(), out.pop()
                out.append(visitor.visit_and(l, r) if isinstance(node, And) else visitor.visit_or(l, r))
        elif isinstance(node, Not):
            if not expanded:
                stack += [(node, True), (node.child, False)]
            else:
                out.append(visitor.visit_not(out.pop()))
        elif isinstance(node, Compare):
            out.append(visitor.visit_compare(node))
        elif isinstance(node, In):
            out.append(visitor.visit_in(node))
        elif isinstance(node, NotIn):
            out.append(visitor.visit_not_in(node))
        elif isinstance(node, IsNull):
            out.append(visitor.visit_is_null(node))
        elif isinstance(node, NotNull):
            out.append(visitor.visit_not_null(node))
        elif isinstance(node, Predicate):
            out.append(visitor.visit_predicate(node))
        elif isinstance(node, AlwaysTrue):
            out.append(visitor.visit_true())
        elif isinstance(node, AlwaysFalse):
            out.append(visitor.visit_false())
        else:
            raise InvalidPredicate(f"not a predicate expression: {node!r}")
    return out[0]


class _Nnf(ExprVisitor[tuple[Expr, Expr]]):
    """Each node -> (itself, its negation), both free of Not."""

    def visit_true(self):
        return AlwaysTrue(), AlwaysFalse()

    def visit_false(self):
        return AlwaysFalse(), AlwaysTrue()

    def visit_and(self, l, r):
        return And(l[0], r[0]), Or(l[1], r[1])

    def visit_or(self, l, r):
        return Or(l[0], r[0]), And(l[1], r[1])

    def visit_not(self, c):
        return c[1], c[0]

    def visit_compare(self, e):
        return e, Compare(NEGATED_OP[e.op], e.name, e.value)

    def visit_in(self, e):
        return e, NotIn(e.name, e.values)

    def visit_not_in(self, e):
        return e, In(e.name, e.values)

    def visit_is_null(self, e):
        return e, NotNull(e.name)

    def visit_not_null(self, e):
        return e, IsNull(e.name)

    def visit_predicate(self, e):
        from lamina.expr.typer import negate_term

        return e, Predicate(negate_term(e.term))


def rewrite_not(expr: Expr) -> Expr:
    """Negation normal form: push every Not into the leaves (exact under SQL 3-valued logic)."""
    return visit(expr, _Nnf())[0]


def negate(expr: Expr) -> Expr:
    """The logical negation of ``expr``, Not-free."""
    return visit(expr, _Nnf())[1]


class _Columns(ExprVisitor[set]):
    def visit_true(self):
        return set()

    visit_false = visit_true

    def visit_and(self, l, r):
        return l | r

    visit_or = visit_and

    def visit_not(self, c):
        return c

    def _leaf(self, e):
        return {e.name}

    visit_compare = visit_in = visit_not_in = visit_is_null = visit_not_null = _leaf

    def visit_predicate(self, e):
        return columns_of(e.term)


def referenced_columns(expr: Expr) -> set[str]:
    """Names of all columns ``expr`` reads."""
    return visit(expr, _Columns())


# --- SQL text (for messages and explain output) ---------------------------------------


def sql_literal(v: Any) -> str:
    """SQL text of a leaf's literal (a Python value or a bound Arrow scalar) that reads back
    as the same value."""
    return literal_sql(v)


class _Sql(ExprVisitor[str]):
    def visit_true(self):
        return "TRUE"

    def visit_false(self):
        return "FALSE"

    def visit_and(self, l, r):
        return f"({l} AND {r})"

    def visit_or(self, l, r):
        return f"({l} OR {r})"

    def visit_not(self, c):
        return f"(NOT {c})"

    def visit_compare(self, e):
        return f"{ident(e.name)} {e.op} {sql_literal(e.value)}"

    def visit_in(self, e):
        return f"{ident(e.name)} IN ({', '.join(map(sql_literal, e.values))})"

    def visit_not_in(self, e):
        return f"{ident(e.name)} NOT IN ({', '.join(map(sql_literal, e.values))})"

    def visit_is_null(self, e):
        return f"{ident(e.name)} IS NULL"

    def visit_not_null(self, e):
        return f"{ident(e.name)} IS NOT NULL"

    def visit_predicate(self, e):
        return term_sql(e.term)


def to_sql(expr: Expr) -> str:
    """SQL-like text of ``expr`` (for messages; literals of every type are not guaranteed to re-parse)."""
    return visit(expr, _Sql())
