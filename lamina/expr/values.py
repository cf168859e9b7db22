"""SQL value expressions over Arrow rows: ``update(set=...)`` values and merge conditions.

``amount * 1.1``, ``source.qty + target.qty``, ``upper(category)``,
``coalesce(source.note, 'none')``, ``source.op = 'D' AND target.qty > 0``,
``CASE WHEN source.x > target.x THEN source.x ELSE target.x END``:
parsed with sqlglot, evaluated with Arrow compute kernels on a whole table at
once (never row by row). Columns may be qualified (``source.x``, ``target.x``)
when the table has such columns (a merge's joined rows). Anything else is an
InvalidArgument naming the part that is not supported.

Comparisons, IN and CASE mean what they mean in a predicate (docs/format.md,
"Predicates: NULL, NaN and signed zero"): SQL's NULL logic, NaN equal to NaN and
above every other value, -0.0 equal to 0.0.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.spec.write_types import store

_COMPARISONS = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
}
_BINARY = {
    exp.Add: "add_checked",
    exp.Sub: "subtract_checked",
    exp.Mul: "multiply_checked",
    exp.Div: "divide",
    exp.And: "and_kleene",
    exp.Or: "or_kleene",
}
_LOGIC = (exp.And, exp.Or)
_FUNCS = {"UPPER": "utf8_upper", "LOWER": "utf8_lower", "ABS": "abs", "ROUND": "round", "LENGTH": "utf8_length"}


def parse(text: str) -> exp.Expression:
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"expected a SQL expression string, got {text!r}")
    try:
        return sqlglot.parse_one(text)
    except sqlglot.errors.ParseError as e:
        raise InvalidArgument(f"cannot parse expression {text!r}: {e}") from None


def _column(t: pa.Table, node: exp.Column, text: str) -> Any:
    name = node.name
    qual = node.table
    full = f"{qual}.{name}" if qual else name
    if full in t.column_names:
        return t.column(full)
    if not qual and f"target.{name}" in t.column_names:
        return t.column(f"target.{name}")
    raise InvalidArgument(f"expression {text!r} refers to {full!r}, which is not a column here ({t.column_names})")


def _nan_flags(v: Any) -> Any:
    """Where ``v`` is NaN (null where it is null); a plain False for a non-float ``v``."""
    return pc.is_nan(v) if pa.types.is_floating(v.type) else pa.scalar(False)


def compare(fn: str, left: Any, right: Any) -> Any:
    """``pc.<fn>(left, right)`` for a comparison ``fn`` (``equal``, ``less``, ...), with NaN
    equal to NaN and above every other value.

    Arrow's kernels follow IEEE 754, where NaN is unequal to and unordered with everything,
    itself included; -0.0 = 0.0 holds in both. A null on either side gives null.
    """
    if pa.types.is_null(left.type) or pa.types.is_null(right.type):
        return pa.scalar(None, pa.bool_())  # a NULL literal: no kernel takes it, and SQL says NULL
    out = getattr(pc, fn)(left, right)
    left_nan, right_nan = _nan_flags(left), _nan_flags(right)
    if isinstance(left_nan, pa.BooleanScalar) and isinstance(right_nan, pa.BooleanScalar) and not (
            left_nan.as_py() or right_nan.as_py()):
        return out  # neither side can be NaN
    on_nan = {
        "equal": pc.and_(left_nan, right_nan),
        "not_equal": pc.xor(left_nan, right_nan),
        "less": pc.and_not(right_nan, left_nan),
        "less_equal": right_nan,
        "greater": pc.and_not(left_nan, right_nan),
        "greater_equal": left_nan,
    }[fn]
    # ``out`` is null exactly where a side is null (NaN is a value): keep those nulls.
    return pc.if_else(pc.and_(pc.or_(left_nan, right_nan), pc.is_valid(out)), on_nan, out)


def evaluate(text_or_node: Any, t: pa.Table) -> Any:
    """An Arrow array (or scalar) for every row of ``t``."""
    text = text_or_node if isinstance(text_or_node, str) else text_or_node.sql()
    node = parse(text_or_node) if isinstance(text_or_node, str) else text_or_node
    return _eval(node, t, text)


def _eval(n: exp.Expression, t: pa.Table, text: str) -> Any:
    if isinstance(n, exp.Paren):
        return _eval(n.this, t, text)
    if isinstance(n, exp.Column):
        return _column(t, n, text)
    if isinstance(n, exp.Literal):
        if n.is_string:
            return pa.scalar(n.this)
        v = n.this
        return pa.scalar(int(v)) if v.lstrip("-").isdigit() else pa.scalar(float(v))
    if isinstance(n, exp.Boolean):
        return pa.scalar(bool(n.this))
    if isinstance(n, exp.Null):
        return pa.scalar(None)
    if isinstance(n, exp.Neg):
        return pc.negate_checked(_eval(n.this, t, text))
    if isinstance(n, exp.Not):
        return _kernel(n, text, pc.invert, _truth(_eval(n.this, t, text)))
    if isinstance(n, exp.Is) and isinstance(n.expression, exp.Null):
        return pc.is_null(_eval(n.this, t, text))
    if isinstance(n, exp.In) and n.expressions:
        # SQL's definition, an OR of equalities: NULL when nothing is equal and a side is
        # NULL (Arrow's is_in says false there, and hashes -0.0 apart from 0.0).
        subject = _eval(n.this, t, text)
        out = None
        for v in n.expressions:
            eq = _kernel(n, text, compare, "equal", subject, _eval(v, t, text))
            out = eq if out is None else pc.or_kleene(out, eq)
        return out
    if isinstance(n, exp.Case):
        return _case(n, t, text)
    if type(n) in _COMPARISONS:
        return _kernel(n, text, compare, _COMPARISONS[type(n)], _eval(n.left, t, text), _eval(n.right, t, text))
    if type(n) in _BINARY:
        left, right = _eval(n.left, t, text), _eval(n.right, t, text)
        if isinstance(n, _LOGIC):
            left, right = _truth(left), _truth(right)
        return _kernel(n, text, getattr(pc, _BINARY[type(n)]), left, right)
    if isinstance(n, exp.Coalesce):
        return pc.coalesce(*[_eval(a, t, text) for a in [n.this, *n.expressions]])
    if isinstance(n, exp.DPipe) or isinstance(n, exp.Concat):
        parts = [n.left, n.right] if isinstance(n, exp.DPipe) else n.expressions
        return pc.binary_join_element_wise(*[pc.cast(_eval(a, t, text), pa.string()) for a in parts], "")
    if isinstance(n, exp.Func):
        name = n.sql_name().upper()
        if name in _FUNCS:
            return getattr(pc, _FUNCS[name])(_eval(n.this, t, text))
    raise InvalidArgument(
        f"{n.sql()!r} in {text!r} is not supported in a value expression; use columns, literals, "
        "+ - * /, comparisons, AND/OR/NOT, IS NULL, IN (values), CASE, COALESCE, UPPER, LOWER, ABS, "
        "ROUND, LENGTH, ||"
    )


def _kernel(n: exp.Expression, text: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; Arrow's complaints (types that do not go together) as InvalidArgument."""
    try:
        return fn(*args)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidArgument(f"cannot evaluate {n.sql()!r} in {text!r}: {e}") from None


def _truth(v: Any) -> Any:
    """A truth value: a NULL literal as a boolean NULL (Arrow's logic kernels take no null type)."""
    return pa.scalar(None, pa.bool_()) if pa.types.is_null(v.type) else v


def _case(n: exp.Case, t: pa.Table, text: str) -> Any:
    """``CASE [subject] WHEN c THEN v ... [ELSE d] END``: the first branch whose condition is
    TRUE (with a subject: that equals it); NULL conditions are not TRUE."""
    subject = _eval(n.this, t, text) if n.this is not None else None
    default = n.args.get("default")
    out = _eval(default, t, text) if default is not None else pa.scalar(None)
    for branch in reversed(n.args["ifs"]):  # built from the last branch, so the first wins
        cond = _eval(branch.this, t, text)
        if subject is not None:
            cond = _kernel(n, text, compare, "equal", subject, cond)
        is_true = _kernel(n, text, pc.fill_null, _truth(cond), False)
        out = _kernel(n, text, pc.if_else, is_true, _eval(branch.args["true"], t, text), out)
    return out


def _evaluated(value: Any, t: pa.Table, typ: pa.DataType) -> Any:
    """``value`` (SQL text, a Python literal, or a callable on the table) for every row of ``t``."""
    if callable(value):
        out = value(t)
    elif isinstance(value, str):
        out = evaluate(value, t)
    else:
        out = pa.scalar(value)
    if isinstance(out, pa.Scalar):
        out = pa.repeat(out, t.num_rows) if out.is_valid else pa.nulls(t.num_rows, typ)
    return out


def as_column(value: Any, t: pa.Table, typ: pa.DataType, what: str, column: str, cast: str | None = None) -> Any:
    """``value`` (SQL text, a Python literal, or a callable on the table) as the values of
    column ``column`` of ``typ``: a SQL assignment, by the rule of ``lamina.spec.write_types``
    (SchemaMismatch naming ``what`` if refused; ``cast="safe"``: pyarrow's safe casts)."""
    out = _evaluated(value, t, typ)
    try:
        return store(out, typ, column, cast=cast, assignment=True)
    except SchemaMismatch as e:
        raise SchemaMismatch(f"{what}: {value!r} gives {out.type}; {e}") from None


def as_mask(value: Any, t: pa.Table, what: str) -> pa.Array:
    """A condition as a boolean mask; NULL counts as false (SQL)."""
    out = _evaluated(value, t, pa.bool_())
    try:
        m = pc.cast(out, pa.bool_())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidArgument(f"{what}: {value!r} gives {out.type}, which is not a condition ({e})") from None
    return pc.fill_null(m, False)


def qualified_columns(text: str, qualifier: str) -> list[str]:
    """The columns SQL expression ``text`` names with ``qualifier`` (``source.x``: ``["source.x"]``,
    case-insensitively), sorted; InvalidArgument if it does not parse."""
    node = parse(text)
    return sorted({c.sql() for c in node.find_all(exp.Column) if c.table.lower() == qualifier.lower()})
