"""SQL value expressions over Arrow rows: ``update(set=...)`` values and merge conditions.

``amount * 1.1``, ``source.qty + target.qty``, ``upper(category)``,
``coalesce(source.note, 'none')``, ``source.op = 'D' AND target.qty > 0``:
parsed with sqlglot, evaluated with Arrow compute kernels on a whole table at
once (never row by row). Columns may be qualified (``source.x``, ``target.x``)
when the table has such columns (a merge's joined rows). Anything else is an
InvalidArgument naming the part that is not supported.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from lamina.errors import InvalidArgument

_BINARY = {
    exp.Add: "add_checked",
    exp.Sub: "subtract_checked",
    exp.Mul: "multiply_checked",
    exp.Div: "divide",
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
    exp.And: "and_kleene",
    exp.Or: "or_kleene",
}
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
        return pc.invert(_eval(n.this, t, text))
    if isinstance(n, exp.Is) and isinstance(n.expression, exp.Null):
        return pc.is_null(_eval(n.this, t, text))
    if isinstance(n, exp.In):
        vals = [_eval(v, t, text) for v in n.expressions]
        return pc.is_in(_eval(n.this, t, text), value_set=pa.array([v.as_py() for v in vals]))
    for cls, fn in _BINARY.items():
        if type(n) is cls:
            left, right = _eval(n.left, t, text), _eval(n.right, t, text)
            try:
                return getattr(pc, fn)(left, right)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidArgument(f"cannot evaluate {n.sql()!r} in {text!r}: {e}") from None
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
        "+ - * /, comparisons, AND/OR/NOT, IS NULL, IN, COALESCE, UPPER, LOWER, ABS, ROUND, LENGTH, ||"
    )


def as_column(value: Any, t: pa.Table, typ: pa.DataType, what: str) -> pa.Array:
    """``value`` (SQL text, a Python literal, or a callable on the table) as a column of ``typ``."""
    if callable(value):
        out = value(t)
    elif isinstance(value, str):
        out = evaluate(value, t)
    else:
        out = pa.scalar(value)
    if isinstance(out, pa.Scalar):
        out = pa.repeat(out, t.num_rows) if out.is_valid else pa.nulls(t.num_rows, typ)
    try:
        return pc.cast(out, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidArgument(f"{what}: {value!r} gives {out.type}, which does not fit {typ} ({e})") from None


def as_mask(value: Any, t: pa.Table, what: str) -> pa.Array:
    """A condition as a boolean mask; NULL counts as false (SQL)."""
    m = as_column(value, t, pa.bool_(), what)
    return pc.fill_null(m, False)
