"""SQL ``where`` text -> ``Expr``, and SQL value text -> a term, via sqlglot.

The language is Spark SQL's expressions (docs/expressions.md; see ``SUPPORTED``); anything
else raises InvalidPredicate naming the offending part. The text is parsed as the WHERE of
``SELECT 1 WHERE ...`` and must yield exactly that one statement, so input such as
``1; DROP TABLE x`` or ``a = 1 UNION SELECT ...`` is refused. A comparison of a column
with a literal (and IN, BETWEEN, IS NULL on a column) becomes a ``Compare``-like leaf, as
before; any other boolean expression a ``Predicate`` over a term (``lamina.expr.terms``),
which the binder types and, where it can be written as such a leaf, rewrites to one.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import re
from typing import Any, NoReturn

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
    Predicate,
    Ref,
    _as_expr,
    _balanced,
    between,
)
from lamina.expr.terms import Call, Column, Literal, Term

SUPPORTED = (
    "supported: Spark SQL boolean expressions over columns: comparisons (= != <> < <= > >= <=>, "
    "IS [NOT] DISTINCT FROM) of any expressions, [NOT] IN (...), [NOT] BETWEEN [SYMMETRIC], IS [NOT] NULL/TRUE/FALSE, "
    "[NOT] LIKE / ILIKE [ESCAPE c], AND, OR, NOT; arithmetic + - * / % DIV; CASE, IF, COALESCE, NULLIF; CAST, TRY_CAST; "
    "string, date/time, math and nested-value functions (docs/expressions.md lists them); INTERVAL literals; "
    'quote odd column names as "my col" or `my col`'
)


class _LaminaDialect(Dialect):
    """Default SQL, but both "double quotes" and `backticks` quote identifiers."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]


_CMP: dict[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ARITH: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.IntDiv: "div",
}
# sqlglot's function nodes -> Lamina's function names (one argument, ``this``, unless listed below)
_UNARY: dict[type[exp.Expression], str] = {
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Length: "length",
    exp.Abs: "abs",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
    exp.Year: "year",
    exp.Month: "month",
    exp.Day: "day",
    exp.DayOfMonth: "day",
    exp.Hour: "hour",
    exp.Minute: "minute",
    exp.Second: "second",
    exp.Quarter: "quarter",
    exp.DayOfWeek: "dayofweek",
    exp.DayOfYear: "dayofyear",
}
_BINARY: dict[type[exp.Expression], str] = {
    exp.StartsWith: "starts_with",
    exp.EndsWith: "ends_with",
    exp.Contains: "contains",
    exp.DateAdd: "date_add",
    exp.DateSub: "date_sub",
    exp.DateDiff: "datediff",
    exp.AddMonths: "add_months",
}
_REFUSED: dict[type[exp.Expression], str] = {
    exp.RegexpLike: "RLIKE / regexp_like are not supported (Java's and Arrow's regular expressions differ); use LIKE",
}


class _Unsupported(Exception):
    pass


def _kind(node: exp.Expression) -> str:
    """What a node is, in words, for error messages."""
    if isinstance(node, (exp.Subquery, exp.Select, exp.Query)):
        return "subqueries are not supported"
    if type(node) in _REFUSED:
        return _REFUSED[type(node)]
    if isinstance(node, exp.Anonymous):
        return f"unknown function {node.name}()"
    if isinstance(node, exp.Func):
        return f"function {node.sql_name().lower()}() is not supported"
    return f"{type(node).__name__.upper()} is not supported"


def _fail(node: exp.Expression, what: str | None = None) -> NoReturn:
    text = node.sql() if isinstance(node, exp.Expression) else repr(node)
    raise _Unsupported(f"{what or _kind(node)}: {text}")


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _column(node: exp.Expression) -> str | None:
    """Column name if ``node`` is an unqualified column, else None."""
    node = _unparen(node)
    if isinstance(node, exp.Column) and not (node.table or node.args.get("db") or node.args.get("catalog")):
        if not isinstance(node.this, exp.Identifier):
            return None
        return node.name
    return None


def _number(text: str) -> Any:
    """A numeric literal: an integer, a DECIMAL (``1.5``: exact) or, with an exponent, a DOUBLE."""
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    if "e" in text.lower():
        return float(text)
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise _Unsupported(f"unreadable number {text}") from None


def _typed_literal(node: exp.Cast) -> Any:
    """``DATE '...'``, ``TIMESTAMP '...'``, ``TIME '...'`` as a Python value."""
    text, to = node.this.this, node.to.this
    try:
        if to == exp.DataType.Type.DATE:
            return _dt.date.fromisoformat(text.strip())
        if to in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME, exp.DataType.Type.TIMESTAMPNTZ):
            return _dt.datetime.fromisoformat(text.strip())
        if to in (exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ):
            v = _dt.datetime.fromisoformat(text.strip())
            return v if v.tzinfo else v.replace(tzinfo=_dt.UTC)
        if to == exp.DataType.Type.TIME:
            return _dt.time.fromisoformat(text.strip())
    except ValueError:
        _fail(node, f"invalid {to.value} literal {text!r} (use ISO format, e.g. 2024-01-31 or 2024-01-31 10:00:00)")
    return _NOT_TYPED


_NOT_TYPED = object()


def _literal(node: exp.Expression) -> Any:
    """The value of a plain literal (a number, a string, a boolean, a typed date/time
    literal); _Unsupported for anything else (an expression: the caller makes it a term)."""
    node = _unparen(node)
    if isinstance(node, exp.Neg):
        v = _literal(node.this)
        if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
            _fail(node, "only numbers can be negated")
        return -v
    if isinstance(node, exp.Null):
        _fail(
            node, "NULL is not a comparable literal (comparisons with NULL are never true); use IS NULL / IS NOT NULL"
        )
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else _number(node.this)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        v = _typed_literal(node)
        if v is not _NOT_TYPED:
            return v
    _fail(node, "not a literal")


def _is_literal(node: exp.Expression) -> bool:
    try:
        _literal(node)
    except _Unsupported:
        return False
    return True


def _is_null(node: exp.Expression) -> bool:
    return isinstance(_unparen(node), exp.Null)


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """The operands of a sqlglot condition's top-level ANDs, in order, with the parentheses around
    them removed: ``a AND (b AND c)`` gives a, b, c (iterative: sqlglot builds chains left-deep)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        while isinstance(n, exp.Paren):
            n = n.this
        if isinstance(n, exp.And):
            stack += [n.expression, n.this]
        else:
            out.append(n)
    return out


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


# --- boolean structure ----------------------------------------------------------------------------


def _convert(node: exp.Expression) -> Expr:
    node = _unparen(node)
    if isinstance(node, (exp.And, exp.Or)):
        cls = And if isinstance(node, exp.And) else Or
        return _balanced(cls, [_convert(p) for p in _flatten(node, type(node))])
    if isinstance(node, exp.Not):
        inner = _unparen(node.this)
        e = _convert(inner)
        if isinstance(e, In):
            return NotIn(e.name, e.values)
        if isinstance(e, IsNull):
            return NotNull(e.name)
        return Not(e)
    for cmp_cls, op in _CMP.items():
        if type(node) is cmp_cls:
            left, right = node.this, node.expression
            if _is_null(left) or _is_null(right):
                _fail(
                    node,
                    "NULL is not a comparable literal (comparisons with NULL are never true); use IS NULL / IS NOT NULL",
                )
            lname, rname = _column(left), _column(right)
            if lname is not None and rname is None and _is_literal(right):
                return Compare(op, lname, _literal(right))
            if rname is not None and lname is None and _is_literal(left):
                return Compare(FLIPPED_OP[op], rname, _literal(left))
            return Predicate(term(node))
    if isinstance(node, exp.In):
        name = _column(node.this)
        values = node.expressions
        if name is not None and values and not _has_subquery(node) and all(_is_literal(v) for v in values):
            return In(name, tuple(_literal(v) for v in values))
        return Predicate(term(node))
    if isinstance(node, exp.Is):
        name = _column(node.this)
        if name is not None and isinstance(node.expression, exp.Null):
            return IsNull(name)
        return Predicate(term(node))
    if isinstance(node, exp.Between):
        name = _column(node.this)
        low, high = node.args["low"], node.args["high"]
        if name is not None and _is_literal(low) and _is_literal(high):
            return between(name, _literal(low), _literal(high), bool(node.args.get("symmetric")))
        return Predicate(term(node))
    if isinstance(node, exp.Boolean):
        return AlwaysTrue() if node.this else AlwaysFalse()
    name = _column(node)
    if name is not None:
        return _as_expr(Ref(name))  # a bare boolean column means `col = TRUE`
    return Predicate(term(node))


def _has_subquery(node: exp.In) -> bool:
    return bool(node.args.get("query") or node.args.get("unnest") or node.args.get("field"))


# --- terms ----------------------------------------------------------------------------------------------


def _path(node: exp.Expression) -> tuple[str, ...] | None:
    """A column and its fields (``payload.user.id``) as a path; None if ``node`` is none."""
    if isinstance(node, exp.Column):
        parts = [node.args.get(k) for k in ("catalog", "db", "table")] + [node.this]
        if not all(isinstance(p, exp.Identifier) for p in parts if p is not None):
            return None
        return tuple(p.name for p in parts if p is not None)
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier):
        inner = _path(node.this)
        return None if inner is None else (*inner, node.expression.name)
    return None


def _call(fn: str, *args: exp.Expression | None, opts: tuple = ()) -> Call:
    return Call(fn, tuple(term(a) for a in args if a is not None), opts)


def term(node: exp.Expression) -> Term:
    """A sqlglot expression as an (unbound) term; _Unsupported for what Lamina cannot do."""
    node = _unparen(node)
    path = _path(node)
    if path is not None:
        return Column(path)
    if isinstance(node, exp.Dot):
        inner = term(node.this)
        if not isinstance(node.expression, exp.Identifier):
            _fail(node)
        return Call("field", (inner,), (node.expression.name,))
    if isinstance(node, exp.Null):
        return Literal(None)
    if isinstance(node, (exp.Literal, exp.Boolean)):
        return Literal(_literal(node))
    if isinstance(node, exp.Neg):
        if _is_literal(node):
            return Literal(_literal(node))
        return _call("neg", node.this)
    if (
        isinstance(node, exp.Cast)
        and not isinstance(node, exp.TryCast)
        and isinstance(node.this, exp.Literal)
        and node.this.is_string
    ):
        v = _typed_literal(node)
        if v is not _NOT_TYPED:
            return Literal(v)
    if isinstance(node, (exp.Cast, exp.TryCast)):
        from lamina.expr.sqltypes import type_of_name

        try:
            to = type_of_name(node.to)
        except InvalidPredicate as e:
            _fail(node, str(e))
        safe = isinstance(node, exp.TryCast) or bool(node.args.get("safe"))
        return Call("try_cast" if safe else "cast", (term(node.this),), (to,))
    if type(node) in _ARITH:
        return _call(_ARITH[type(node)], node.this, node.expression)
    if isinstance(node, exp.DPipe):
        return _call("concat", node.this, node.expression)
    if type(node) in _CMP:
        return _call(_CMP[type(node)], node.this, node.expression)
    if isinstance(node, exp.NullSafeEQ):
        return _call("not_distinct", node.this, node.expression)
    if isinstance(node, exp.NullSafeNEQ):
        return _call("distinct", node.this, node.expression)
    if isinstance(node, (exp.And, exp.Or)):
        parts = [term(p) for p in _flatten(node, type(node))]
        fn = "and" if isinstance(node, exp.And) else "or"
        out = parts[0]
        for p in parts[1:]:
            out = Call(fn, (out, p))
        return out
    if isinstance(node, exp.Not):
        return _call("not", node.this)
    if isinstance(node, exp.Is):
        target = node.expression
        if isinstance(target, exp.Null):
            return _call("is_null", node.this)
        if isinstance(target, exp.Boolean):
            return _call("is_true" if target.this else "is_false", node.this)
        _fail(node, "IS takes NULL, TRUE or FALSE")
    if isinstance(node, exp.In):
        if _has_subquery(node):
            _fail(node, "IN needs a list of values, not a subquery")
        if not node.expressions:
            _fail(node, "IN needs at least one value")
        return _call("in", node.this, *node.expressions)
    if isinstance(node, exp.Between):
        x, low, high = term(node.this), term(node.args["low"]), term(node.args["high"])
        asc = Call("and", (Call(">=", (x, low)), Call("<=", (x, high))))
        if node.args.get("symmetric"):
            return Call("or", (asc, Call("and", (Call(">=", (x, high)), Call("<=", (x, low))))))
        return asc
    if isinstance(node, exp.Escape):
        like = node.this
        esc = node.expression
        if not isinstance(like, (exp.Like, exp.ILike)) or not (isinstance(esc, exp.Literal) and esc.is_string):
            _fail(node, "ESCAPE needs a LIKE and a one-character string")
        return _like(like, esc.this)
    if isinstance(node, (exp.Like, exp.ILike)):
        return _like(node, "\\")
    if isinstance(node, exp.Case):
        subject = term(node.this) if node.this is not None else None
        args: list[Term] = []
        for branch in node.args["ifs"]:
            cond = term(branch.this)
            args += [Call("=", (subject, cond)) if subject is not None else cond, term(branch.args["true"])]
        default = node.args.get("default")
        args.append(term(default) if default is not None else Literal(None))
        return Call("case", tuple(args))
    if isinstance(node, exp.If):
        false = node.args.get("false")
        return Call(
            "case", (term(node.this), term(node.args["true"]), term(false) if false is not None else Literal(None))
        )
    if isinstance(node, exp.Coalesce):
        return _call("coalesce", node.this, *node.expressions)
    if isinstance(node, exp.Nullif):
        return _call("nullif", node.this, node.expression)
    if type(node) in _UNARY:
        return _call(_UNARY[type(node)], node.this)
    if type(node) in _BINARY:
        if isinstance(node, (exp.DateAdd, exp.DateSub)) and isinstance(node.expression, exp.Interval):
            iv = term(node.expression)
            return Call("+" if isinstance(node, exp.DateAdd) else "-", (term(node.this), iv))
        return _call(_BINARY[type(node)], node.this, node.expression)
    if isinstance(node, exp.Trim):
        position = str(node.args.get("position") or "BOTH").upper()
        fn = {"BOTH": "trim", "LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        return _call(fn, node.this, node.expression)
    if isinstance(node, exp.Substring):
        return _call("substring", node.this, node.args.get("start") or exp.Literal.number(1), node.args.get("length"))
    if isinstance(node, exp.Concat):
        return _call("concat", *node.expressions)
    if isinstance(node, exp.Round):
        return _call("round", node.this, node.args.get("decimals"))
    if isinstance(node, exp.DateTrunc):
        unit = node.args.get("unit")
        return Call("date_trunc", (term(node.this),), (_unit_text(node, unit),))
    if isinstance(node, exp.Trunc):
        unit = node.args.get("decimals")
        if not (isinstance(unit, exp.Literal) and unit.is_string):
            _fail(node, "trunc(date, unit) needs a unit such as 'MM'; for numbers use floor/ceil/round")
        return Call("trunc", (term(node.this),), (unit.this,))
    if isinstance(node, exp.Extract):
        part = (
            node.this.name.lower() if isinstance(node.this, (exp.Var, exp.Identifier)) else str(node.this.this).lower()
        )
        extracted = {
            "year": "year",
            "quarter": "quarter",
            "month": "month",
            "day": "day",
            "hour": "hour",
            "minute": "minute",
            "second": "second",
            "dayofweek": "dayofweek",
            "dow": "dayofweek",
            "doy": "dayofyear",
            "dayofyear": "dayofyear",
        }.get(part)
        if extracted is None:
            _fail(node, f"EXTRACT of {part.upper()} is not supported")
        return _call(extracted, node.expression)
    if isinstance(node, exp.CurrentDate):
        return Call("current_date")
    if isinstance(node, (exp.CurrentTimestamp,)):
        return Call("current_timestamp")
    if isinstance(node, exp.Interval):
        return _interval(node)
    if isinstance(node, exp.Bracket):
        if len(node.expressions) != 1:
            _fail(node, "[] takes one index or key")
        return _call("subscript", node.this, node.expressions[0])
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name in ("now", "current_timestamp"):
            return Call("current_timestamp")
        if name == "current_date":
            return Call("current_date")
        return Call(name, tuple(term(a) for a in node.expressions))
    if isinstance(node, exp.Func) and type(node) not in _REFUSED:
        name = node.sql_name().lower()
        from lamina.expr.functions import FUNCTIONS

        if name in FUNCTIONS:
            nodes = [a for a in node.args.values() if isinstance(a, exp.Expression)]
            return Call(name, tuple(term(a) for a in nodes))
    _fail(node)
    raise AssertionError  # unreachable


def _unit_text(node: exp.Expression, unit: Any) -> str:
    if isinstance(unit, exp.Literal) and unit.is_string:
        return unit.this
    if isinstance(unit, (exp.Var, exp.Identifier)):
        return unit.name
    _fail(node, "the unit must be a string such as 'month'")
    raise AssertionError


def _like(node: exp.Like | exp.ILike, escape: str) -> Term:
    fn = "ilike" if isinstance(node, exp.ILike) else "like"
    if node.args.get("negate"):
        fn = "not_" + fn
    return Call(fn, (term(node.this), term(node.expression)), (escape,))


def _interval(node: exp.Interval) -> Term:
    from lamina.expr.typer import interval_of

    unit = node.args.get("unit")
    value = node.this
    if isinstance(unit, exp.IntervalSpan) or unit is None:
        text = value.this if isinstance(value, exp.Literal) else None
        m = re.fullmatch(r"\s*(-?[0-9.]+)\s+([a-zA-Z]+)\s*", text or "") if unit is None else None
        if m is None:
            _fail(node, "INTERVAL needs one number and one unit, e.g. INTERVAL 90 DAY")
        amount, unit_name = m.group(1), m.group(2)
    else:
        if not isinstance(value, exp.Literal):
            _fail(node, "INTERVAL needs a constant amount")
        amount, unit_name = value.this, unit.name
    try:
        return Literal(interval_of(amount, unit_name))
    except InvalidPredicate as e:
        _fail(node, str(e))
    raise AssertionError


def _parse_error(e: Exception) -> str:
    errors = getattr(e, "errors", None)
    if errors:
        first = errors[0]
        msg = f"{first.get('description', 'syntax error')} near {first.get('highlight') or first.get('end_context') or '?'!r}"
    else:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return _ANSI.sub("", msg).replace("SELECT 1 WHERE ", "")


def _where_node(sql: str, what: str) -> exp.Expression:
    """The one expression ``sql`` holds (parsed as the WHERE of ``SELECT 1 WHERE ...``)."""
    if not isinstance(sql, str):
        raise InvalidPredicate(f"{what} must be a string, got {type(sql).__name__}")
    if not sql.strip():
        raise InvalidPredicate(f"{what} is empty; " + SUPPORTED)
    try:
        statements = sqlglot.parse(f"SELECT 1 WHERE {sql}", read=_LaminaDialect)
    except RecursionError:
        raise InvalidPredicate(f"{what} is too deeply nested") from None
    except Exception as e:  # sqlglot raises ParseError/TokenError, but treat any failure as bad input
        raise InvalidPredicate(f"could not parse {what} {sql!r}: {_parse_error(e)}; {SUPPORTED}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise InvalidPredicate(
            f"{what} {sql!r} must be a single {'boolean ' if what == 'predicate' else ''}expression (no ';'); {SUPPORTED}"
        )
    stmt = statements[0]
    extra = (
        [k for k, v in stmt.args.items() if v and k not in ("expressions", "where")]
        if isinstance(stmt, exp.Select)
        else [type(stmt).__name__.upper()]
    )
    if not isinstance(stmt, exp.Select) or extra or stmt.args.get("where") is None:
        raise InvalidPredicate(
            f"{what} {sql!r} must be a single boolean expression, not a query clause ({', '.join(extra)}); {SUPPORTED}"
        )
    return stmt.args["where"].this


def parse_predicate(sql: str) -> Expr:
    """Parse a SQL boolean expression (the part after WHERE) into an ``Expr``."""
    node = _where_node(sql, "predicate")
    try:
        return _convert(node)
    except _Unsupported as e:
        raise InvalidPredicate(f"unsupported predicate {sql!r}: {e}; {SUPPORTED}") from None
    except RecursionError:
        raise InvalidPredicate("predicate is too deeply nested") from None


def parse_term(sql: str, what: str = "expression") -> Term:
    """Parse a SQL value expression (``amount * 1.1``, ``coalesce(source.note, 'none')``)
    into an unbound term."""
    node = _where_node(sql, what)
    try:
        return term(node)
    except _Unsupported as e:
        raise InvalidPredicate(f"unsupported {what} {sql!r}: {e}; {SUPPORTED}") from None
    except RecursionError:
        raise InvalidPredicate(f"{what} is too deeply nested") from None


def to_expr(where: str | Expr | None) -> Expr:
    """Normalize a ``where`` argument: None -> AlwaysTrue, str -> parsed, Expr -> itself."""
    if where is None:
        return AlwaysTrue()
    if isinstance(where, str):
        return parse_predicate(where)
    if isinstance(where, (Expr, Ref, bool)):
        return _as_expr(where)
    raise InvalidPredicate(f"where must be a SQL string or an Expr, got {type(where).__name__}")
