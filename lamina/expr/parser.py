"""SQL ``where`` text -> ``Expr``, via sqlglot.

Only a small, safe subset is accepted (see ``SUPPORTED``); anything else raises
InvalidPredicate naming the offending part. The text is parsed as the WHERE of
``SELECT 1 WHERE ...`` and must yield exactly that one statement, so input such as
``1; DROP TABLE x`` or ``a = 1 UNION SELECT ...`` is refused.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect

from lamina.errors import InvalidPredicate
from lamina.expr.expressions import (
    FLIPPED_OP,
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    Expr,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    Ref,
    _as_expr,
    _balanced,
    between,
)

SUPPORTED = (
    "supported: column <op> literal with = != <> < <= > >= (either side), col [NOT] IN (literals), "
    "col IS [NOT] NULL, col [NOT] BETWEEN [SYMMETRIC] a AND b, AND, OR, NOT, parentheses; literals: numbers, "
    "'strings', TRUE/FALSE, DATE '...', TIMESTAMP '...', TIME '...'; "
    'quote odd column names as "my col" or `my col`'
)


class _LaminaDialect(Dialect):
    """Default SQL, but both "double quotes" and `backticks` quote identifiers."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]


_CMP = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Unsupported(Exception):
    pass


def _kind(node: exp.Expression) -> str:
    """What a node is, in words, for error messages."""
    if isinstance(node, (exp.Subquery, exp.Select, exp.Query)):
        return "subqueries are not supported"
    if isinstance(node, (exp.Func, exp.Anonymous)):
        return "function calls are not supported"
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.DPipe)):
        return "arithmetic is not supported"
    if isinstance(node, exp.Column):
        return "comparing two columns is not supported"
    return f"{type(node).__name__.upper()} is not supported"


def _fail(node: exp.Expression, what: str | None = None) -> None:
    text = node.sql() if isinstance(node, exp.Expression) else repr(node)
    raise _Unsupported(f"{what or _kind(node)}: {text}")


def _column(node: exp.Expression) -> str | None:
    """Column name if ``node`` is an unqualified column, else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        if node.table or node.args.get("db") or node.args.get("catalog"):
            _fail(node, "qualified column names are not supported (use the bare column name)")
        if not isinstance(node.this, exp.Identifier):
            _fail(node)
        return node.name
    return None


def _literal(node: exp.Expression) -> Any:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        v = _literal(node.this)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            _fail(node, "only numbers can be negated")
        return -v
    if isinstance(node, exp.Null):
        _fail(node, "NULL is not a comparable literal (comparisons with NULL are never true); use IS NULL / IS NOT NULL")
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        text = node.this
        if node.is_string:
            return text
        if re.fullmatch(r"[0-9]+", text):
            return int(text)
        try:
            return float(text)
        except ValueError:
            _fail(node, "unreadable number")
    if isinstance(node, exp.Cast):
        inner = node.this
        if not (isinstance(inner, exp.Literal) and inner.is_string):
            _fail(node, "casts are not supported (only DATE '...', TIMESTAMP '...', TIME '...' literals)")
        text, to = inner.this, node.to.this
        try:
            if to == exp.DataType.Type.DATE:
                return _dt.date.fromisoformat(text.strip())
            if to in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME):
                return _dt.datetime.fromisoformat(text.strip())
            if to in (exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ):
                v = _dt.datetime.fromisoformat(text.strip())
                return v if v.tzinfo else v.replace(tzinfo=_dt.timezone.utc)
            if to == exp.DataType.Type.TIME:
                return _dt.time.fromisoformat(text.strip())
        except ValueError:
            _fail(node, f"invalid {to.value} literal {text!r} (use ISO format, e.g. 2024-01-31 or 2024-01-31 10:00:00)")
        _fail(node, f"typed literals of type {to.value} are not supported")
    _fail(node, f"expected a literal; {_kind(node)}")


def _comparison(node: exp.Expression, op: str) -> Expr:
    left, right = node.this, node.expression
    lname, rname = _column(left), _column(right)
    if lname is not None and rname is not None:
        _fail(node, "comparing two columns is not supported")
    if lname is not None:
        return Compare(op, lname, _literal(right))
    if rname is not None:
        return Compare(FLIPPED_OP[op], rname, _literal(left))
    for side in (left, right):
        if not isinstance(side, (exp.Literal, exp.Neg, exp.Boolean, exp.Cast, exp.Null, exp.Paren)):
            _fail(side, _kind(side) + " (a comparison needs a column on one side and a literal on the other)")
    _fail(node, "a comparison needs a column on one side and a literal on the other")
    raise AssertionError  # unreachable


def _in(node: exp.In) -> tuple[str, tuple]:
    name = _column(node.this)
    if name is None:
        _fail(node, "IN needs a column on its left")
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        _fail(node, "IN needs a list of literals, not a subquery")
    values = node.expressions
    if not values:
        _fail(node, "IN needs at least one value")
    return name, tuple(_literal(v) for v in values)


def _flatten(node: exp.Expression, cls: type) -> list[exp.Expression]:
    """Operands of a chain like a AND b AND c (iterative: sqlglot builds it left-deep)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cls):
            stack += [n.expression, n.this]
        else:
            out.append(n)
    return out


def _convert(node: exp.Expression) -> Expr:
    if isinstance(node, exp.Paren):
        return _convert(node.this)
    if isinstance(node, (exp.And, exp.Or)):
        cls = And if isinstance(node, exp.And) else Or
        return _balanced(cls, [_convert(p) for p in _flatten(node, type(node))])
    if isinstance(node, exp.Not):
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.In):
            return NotIn(*_in(inner))
        if isinstance(inner, exp.Is):
            e = _convert(inner)
            if isinstance(e, IsNull):
                return NotNull(e.name)
        return Not(_convert(inner))
    for cls, op in _CMP.items():
        if type(node) is cls:
            return _comparison(node, op)
    if isinstance(node, exp.In):
        return In(*_in(node))
    if isinstance(node, exp.Is):
        name = _column(node.this)
        if name is None or not isinstance(node.expression, exp.Null):
            _fail(node, "only `column IS [NOT] NULL` is supported")
        return IsNull(name)
    if isinstance(node, exp.Between):
        name = _column(node.this)
        if name is None:
            _fail(node, "BETWEEN needs a column on its left")
        return between(name, _literal(node.args["low"]), _literal(node.args["high"]), bool(node.args.get("symmetric")))
    if isinstance(node, exp.Boolean):
        return AlwaysTrue() if node.this else AlwaysFalse()
    name = _column(node)
    if name is not None:
        return _as_expr(Ref(name))  # a bare boolean column means `col = TRUE`
    _fail(node)
    raise AssertionError  # unreachable


def _parse_error(e: Exception) -> str:
    errors = getattr(e, "errors", None)
    if errors:
        first = errors[0]
        msg = f"{first.get('description', 'syntax error')} near {first.get('highlight') or first.get('end_context') or '?'!r}"
    else:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return _ANSI.sub("", msg).replace("SELECT 1 WHERE ", "")


def parse_predicate(sql: str) -> Expr:
    """Parse a SQL boolean expression (the part after WHERE) into an ``Expr``."""
    if not isinstance(sql, str):
        raise InvalidPredicate(f"predicate must be a string, got {type(sql).__name__}")
    if not sql.strip():
        raise InvalidPredicate("predicate is empty; " + SUPPORTED)
    try:
        statements = sqlglot.parse(f"SELECT 1 WHERE {sql}", read=_LaminaDialect)
    except RecursionError:
        raise InvalidPredicate("predicate is too deeply nested") from None
    except Exception as e:  # sqlglot raises ParseError/TokenError, but treat any failure as bad input
        raise InvalidPredicate(f"could not parse predicate {sql!r}: {_parse_error(e)}; {SUPPORTED}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise InvalidPredicate(f"predicate {sql!r} must be a single boolean expression (no ';'); {SUPPORTED}")
    stmt = statements[0]
    extra = [k for k, v in stmt.args.items() if v and k not in ("expressions", "where")] if isinstance(stmt, exp.Select) else [type(stmt).__name__.upper()]
    if not isinstance(stmt, exp.Select) or extra or stmt.args.get("where") is None:
        raise InvalidPredicate(
            f"predicate {sql!r} must be a single boolean expression, not a query clause ({', '.join(extra)}); {SUPPORTED}"
        )
    try:
        return _convert(stmt.args["where"].this)
    except _Unsupported as e:
        raise InvalidPredicate(f"unsupported predicate {sql!r}: {e}; {SUPPORTED}") from None
    except RecursionError:
        raise InvalidPredicate("predicate is too deeply nested") from None


def to_expr(where: "str | Expr | None") -> Expr:
    """Normalize a ``where`` argument: None -> AlwaysTrue, str -> parsed, Expr -> itself."""
    if where is None:
        return AlwaysTrue()
    if isinstance(where, str):
        return parse_predicate(where)
    if isinstance(where, (Expr, Ref, bool)):
        return _as_expr(where)
    raise InvalidPredicate(f"where must be a SQL string or an Expr, got {type(where).__name__}")
