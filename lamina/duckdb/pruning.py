"""Which parts of a DuckDB WHERE Lamina prunes files by: the conjuncts it parses, on columns of
types and through functions that DuckDB and Lamina evaluate alike, so that Lamina's bounds
hold for the rows DuckDB keeps (DuckDB still filters every row)."""

from __future__ import annotations

import datetime as _dt

import pyarrow as pa
import sqlglot
from sqlglot import exp

from lamina.errors import InvalidPredicate
from lamina.expr import AlwaysTrue, And, Expr, Not, Or, Predicate, and_, conjuncts, parse_predicate, referenced_columns
from lamina.expr.terms import Call, Literal, walk
from lamina.spec.schema import Schema

__all__ = ["pruning_predicate", "where_conjuncts", "where_text"]


def _is_prunable(t: pa.DataType) -> bool:
    """Types whose comparisons DuckDB and Lamina evaluate alike. Not floats (Lamina compares a
    float32 column with a literal exactly, DuckDB rounds the literal to FLOAT); zoned
    timestamps only against literals with an offset (``_zoned_literals``)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)
        or pa.types.is_timestamp(t)
    )


def _leaves(e: Expr) -> list[Expr]:
    if isinstance(e, (And, Or)):
        return _leaves(e.left) + _leaves(e.right)
    if isinstance(e, Not):
        return _leaves(e.child)
    return [e]


def _zoned_literals(e: Expr, schema: Schema) -> bool:
    """Whether every literal compared with a zoned timestamp column names its offset: DuckDB
    reads a literal without one in the session's time zone, Lamina as UTC."""
    for leaf in _leaves(e):
        name = getattr(leaf, "name", None)
        if name is None or getattr(schema.field(name).type, "tz", None) is None:
            continue
        values = getattr(leaf, "values", None) or ([leaf.value] if hasattr(leaf, "value") else [])
        if not all(isinstance(v, _dt.datetime) and v.tzinfo is not None for v in values):
            return False
    return True


# Functions of expressions whose values DuckDB computes as Lamina does (its SQL and Spark's
# agree on them), so that Lamina's bounds for them hold for DuckDB's rows. Not: casts to
# integers (DuckDB rounds, Spark truncates), ``x[i]`` (from 1 in DuckDB), DIV and ``//``,
# DECIMAL ``/``, substring from 0 or before, current_date and current_timestamp (DuckDB's
# session time zone), LIKE with a backslash (no default escape in DuckDB), lower/upper.
_DUCKDB_ALIKE = {
    "=",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "and",
    "or",
    "not",
    "in",
    "not_in",
    "is_null",
    "is_not_null",
    "not_distinct",
    "distinct",
    "+",
    "-",
    "*",
    "neg",
    "abs",
    "like",
    "not_like",
    "starts_with",
    "ends_with",
    "contains",
    "coalesce",
    "case",
    "date_trunc",
    "year",
    "month",
    "day",
    "hour",
    "quarter",
    "dayofyear",
    "length",
    "concat",
    "trim",
}


def _alike_in_duckdb(e: Expr) -> bool:
    """Whether every expression leaf of ``e`` (unbound) calls only ``_DUCKDB_ALIKE`` functions,
    as DuckDB means them."""
    for leaf in _leaves(e):
        if not isinstance(leaf, Predicate):
            continue
        for node in walk(leaf.term):
            if not isinstance(node, Call):
                continue
            if node.fn not in _DUCKDB_ALIKE:
                return False
            if node.fn in ("like", "not_like") and any(
                isinstance(a, Literal) and "\\" in str(a.value) for a in node.args
            ):
                return False
    return True


def pruning_predicate(conjuncts: list[str], schema: Schema) -> Expr:
    """The conjuncts (SQL text) Lamina can prune files by, ANDed: those it parses, on columns
    of ``schema`` of types both engines compare alike, calling functions both compute alike.
    The rest are left to DuckDB."""
    kept: list[Expr] = []
    for text in conjuncts:
        try:
            e = parse_predicate(text)
        except InvalidPredicate:
            continue
        cols = referenced_columns(e)
        if (
            cols
            and all(c in schema.names and _is_prunable(schema.field(c).type) for c in cols)
            and _zoned_literals(e, schema)
            and _alike_in_duckdb(e)
            and not _zoned_terms(e, schema)
        ):
            kept.append(e)
    return and_(*kept) if kept else AlwaysTrue()


def _zoned_terms(e: Expr, schema: Schema) -> bool:
    """Whether an expression leaf of ``e`` reads a zoned timestamp column (DuckDB's functions
    of those read its session's time zone)."""
    return any(
        isinstance(leaf, Predicate)
        and any(getattr(schema.field(c).type, "tz", None) is not None for c in referenced_columns(leaf))
        for leaf in _leaves(e)
    )


def where_text(where: str) -> str:
    """``where`` as one DuckDB boolean expression (refusing statements or query clauses)."""
    try:
        stmt = sqlglot.parse_one(f"SELECT 1 WHERE {where}", read="duckdb")
    except Exception as e:  # sqlglot's ParseError / TokenError: bad input
        raise InvalidPredicate(f"could not parse where {where!r}: {e}") from None
    if not isinstance(stmt, exp.Select) or [k for k, v in stmt.args.items() if v and k not in ("expressions", "where")]:
        raise InvalidPredicate(f"where {where!r} must be one boolean expression")
    return stmt.args["where"].this.sql("duckdb")


def where_conjuncts(text: str) -> list[str]:
    """The top-level AND operands of ``text`` (one DuckDB boolean expression), as DuckDB SQL."""
    condition = sqlglot.parse_one(text, read="duckdb")
    assert isinstance(condition, exp.Expression)  # (every node sqlglot builds is one: Expr is its trait)
    return [c.sql("duckdb") for c in conjuncts(condition)]
