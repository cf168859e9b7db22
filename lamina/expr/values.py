"""SQL value expressions over Arrow rows: ``update(set=...)`` values and merge conditions.

``amount * 1.1``, ``source.qty + target.qty``, ``upper(category)``,
``coalesce(source.note, 'none')``, ``source.op = 'D' AND target.qty > 0``,
``CASE WHEN source.x > target.x THEN source.x ELSE target.x END``: the expression language
of every ``where`` (docs/expressions.md), parsed, bound to the rows' columns and evaluated by
the same code (``lamina.expr.typer``, ``lamina.expr.compile``): Arrow's kernels on a whole
table at once, never row by row. Columns may be qualified (``source.x``, ``target.x``) when
the table has such columns (a merge's joined rows); a bare name is then the target's.
Anything else is an InvalidArgument naming the part that is not supported.

``current_date`` and ``current_timestamp`` are the statement's clock: an update or a merge
fixes it once (``at_clock``), so every row it writes reads the same time.

Comparisons, IN and CASE mean what they mean in a predicate (docs/format.md,
"Predicates: NULL, NaN and signed zero"): SQL's NULL logic, NaN equal to NaN and
above every other value, -0.0 equal to 0.0. A value is stored into its column by the
rule of a SQL assignment (``lamina.spec.write_types``: a number into any numeric column
when it converts exactly, other types by the write rule).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidArgument, InvalidPredicate, SchemaMismatch
from lamina.expr.compile import evaluate as evaluate_term
from lamina.expr.functions import castable, typed
from lamina.expr.parser import parse_term
from lamina.expr.terms import Column, Term, walk
from lamina.expr.typer import Resolver, bind_term
from lamina.spec.write_types import store

_PREFIX = "target"


@dataclass(frozen=True)
class SqlValue:
    """SQL value text with the clock of the statement it belongs to."""

    text: str
    now: _dt.datetime


def at_clock(value: Any, now: _dt.datetime) -> Any:
    """``value`` (a condition or a column's value) with ``now`` as its clock, if it is SQL text."""
    return SqlValue(value, now) if isinstance(value, str) else value


def values_at_clock(values: Mapping[str, Any] | None, now: _dt.datetime) -> dict[str, Any] | None:
    return None if values is None else {k: at_clock(v, now) for k, v in values.items()}


def statement_clock() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _shown(value: Any) -> Any:
    """What a user wrote: SQL text without its clock."""
    return value.text if isinstance(value, SqlValue) else value


def _bound(value: str | SqlValue, t: pa.Table, cast_to: pa.DataType | None = None) -> Term:
    """SQL text parsed and bound to ``t``'s columns (a bare name is ``target.<name>`` where
    the table has no column of that name and has that one), cast to ``cast_to`` if given."""
    text, now = (value.text, value.now) if isinstance(value, SqlValue) else (value, None)
    has_target = any(n.startswith(_PREFIX + ".") for n in t.column_names)
    try:
        term = bind_term(parse_term(text), Resolver(list(t.schema), _PREFIX if has_target else None), now)
        if cast_to is not None and not term.type.equals(cast_to):
            if not castable(term.type, cast_to):
                raise InvalidPredicate(f"it gives {term.type}, which cannot be cast to {cast_to}")
            term = typed(term, cast_to)
    except InvalidPredicate as e:
        raise InvalidArgument(f"expression {text!r}: {e}") from None
    return term


def evaluate(text: str | SqlValue, t: pa.Table) -> Any:
    """An Arrow array (or a scalar, for a constant) for every row of ``t``."""
    raw = text.text if isinstance(text, SqlValue) else text
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidArgument(f"expected a SQL expression string, got {text!r}")
    term = _bound(text, t)
    from lamina.expr.terms import Literal

    if isinstance(term, Literal):
        return term.value
    return evaluate_term(term, t)


def _evaluated(value: Any, t: pa.Table, typ: pa.DataType, what: str) -> Any:
    """``value`` (SQL text, a Python literal, or a callable on the table) for every row of ``t``."""
    if isinstance(value, (str, SqlValue)):
        try:
            out = evaluate_term(_bound(value, t), t)
        except InvalidArgument as e:
            raise InvalidArgument(f"{what}: {e}") from None
    else:
        out = value(t) if callable(value) else pa.scalar(value)
    if isinstance(out, pa.Scalar):
        out = pa.repeat(out, t.num_rows) if out.is_valid else pa.nulls(t.num_rows, typ)
    return out


def as_column(value: Any, t: pa.Table, typ: pa.DataType, what: str, column: str, cast: str | None = None) -> Any:
    """``value`` (SQL text, a Python literal, or a callable on the table) as the values of
    column ``column`` of ``typ``: a SQL assignment, by the rule of ``lamina.spec.write_types``
    (SchemaMismatch naming ``what`` if refused; ``cast="safe"``: pyarrow's safe casts)."""
    out = _evaluated(value, t, typ, what)
    try:
        return store(out, typ, column, cast=cast, assignment=True)
    except SchemaMismatch as e:
        raise SchemaMismatch(f"{what}: {_shown(value)!r} gives {out.type}; {e}") from None


def as_mask(value: Any, t: pa.Table, what: str) -> pa.Array:
    """A condition as a boolean mask; NULL counts as false (SQL)."""
    if isinstance(value, (str, SqlValue)):
        try:
            out = evaluate_term(_bound(value, t, pa.bool_()), t)
        except InvalidArgument as e:
            raise InvalidArgument(f"{what}: {e}") from None
    else:
        out = _evaluated(value, t, pa.bool_(), what)
    try:
        m = pc.cast(out, pa.bool_())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidArgument(f"{what}: {_shown(value)!r} gives {out.type}, which is not a condition ({e})") from None
    return pc.fill_null(m, False)


def qualified_columns(text: str, qualifier: str) -> list[str]:
    """The columns SQL expression ``text`` names with ``qualifier`` (``source.x``: ``["source.x"]``,
    case-insensitively), sorted; InvalidArgument if it does not parse."""
    try:
        term = parse_term(text)
    except InvalidPredicate as e:
        raise InvalidArgument(f"expression {text!r}: {e}") from None
    return sorted(
        {
            ".".join(c.path[:2])
            for c in walk(term)
            if isinstance(c, Column) and len(c.path) > 1 and c.path[0].lower() == qualifier.lower()
        }
    )
