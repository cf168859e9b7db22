"""The expressions of a statement: column references resolved to the target or source row,
literals, and WHERE clauses as Lamina predicates where they mean exactly the same.

- ``Scope.qualify`` rewrites the column references of a condition or value (``t.amount``,
  ``s.amount``, ``amount``) for the engine that evaluates it: ``target.amount`` /
  ``source.amount`` for a merge (``lamina.spark.merge``'s names), the bare column for an
  update or delete. An unqualified name is the target's or the source's column, whichever
  has it; one both have is ambiguous (Spark's AMBIGUOUS_REFERENCE); one neither has is left
  as written (a lambda variable, or Spark's error to raise).
- ``lamina_predicate`` turns a WHERE into a Lamina predicate, which prunes files by their
  statistics, only where it selects exactly the rows Spark would: comparisons, IN, BETWEEN,
  IS [NOT] NULL, AND, OR, NOT of a column with a literal of the column's kind, timestamp
  literals read in the session time zone as Spark reads them. Anything else is None: Spark
  evaluates the WHERE itself (every file is read).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyarrow as pa
from sqlglot import exp

from lamina.errors import InvalidArgument, LaminaError
from lamina.expr import AlwaysFalse, AlwaysTrue, And, Compare, Expr, In, IsNull, Not, NotIn, NotNull, Or, between, bind
from lamina.spark.statements.statement import refuse, text_of
from lamina.spec.schema import Schema

TARGET, SOURCE = "target", "source"


def parts_of(column: exp.Column) -> list[str]:
    return [p.name for p in column.parts]


def column_of(parts: Sequence[str]) -> exp.Column | exp.Dot:
    """A column reference of ``parts`` (``["target", "amount"]``), each part quoted."""
    idents = [exp.to_identifier(p, quoted=True) for p in parts]
    if len(idents) == 1:
        return exp.Column(this=idents[0])
    if len(idents) == 2:
        return exp.Column(this=idents[1], table=idents[0])
    if len(idents) == 3:
        return exp.Column(this=idents[2], table=idents[1], db=idents[0])
    return exp.Dot.build([exp.Column(this=idents[1], table=idents[0]), *idents[2:]])  # deeper struct fields


def _find(name: str, columns: Sequence[str]) -> str | None:
    """``name`` among ``columns``: exactly, else case-insensitively (Spark's default resolution)."""
    if name in columns:
        return name
    found = [c for c in columns if c.lower() == name.lower()]
    return found[0] if len(found) == 1 else None


@dataclass
class Side:
    """One row a statement's expressions see: what qualifies its columns and which it has."""

    role: str  # TARGET or SOURCE
    aliases: set[str]  # lower-cased names that qualify its columns (alias, table name)
    columns: list[str]

    def owns(self, qualifier: str) -> bool:
        return qualifier.lower() in self.aliases


@dataclass
class Scope:
    """The rows an expression may name: ``target`` (always) and ``source`` (merges). ``prefix``:
    qualify each resolved column by its side's role (a merge), or leave it bare (update, delete)."""

    target: Side
    source: Side | None = None
    prefix: bool = True
    sides: list[Side] = field(init=False)

    def __post_init__(self) -> None:
        self.sides = [s for s in (self.target, self.source) if s is not None]

    def side_of(self, column: exp.Column) -> tuple[Side, list[str]] | None:
        """The side a column reference names and its parts within that side's row; None for a
        name neither side has (left as written)."""
        parts = parts_of(column)
        if len(parts) > 1:
            owners = [s for s in self.sides if s.owns(parts[0])]
            if owners:
                side = owners[0]
                name = _find(parts[1], side.columns)
                if name is None:
                    raise InvalidArgument(
                        f"{text_of(column)}: the {side.role} has no column {parts[1]!r} "
                        f"(it has {', '.join(side.columns)})"
                    )
                return side, [name, *parts[2:]]
        having = [(s, n) for s in self.sides if (n := _find(parts[0], s.columns)) is not None]
        if len(having) > 1:
            raise InvalidArgument(
                f"{text_of(column)} is ambiguous: both the target and the source have a column {parts[0]!r}; "
                "qualify it with the table's alias"
            )
        if not having:
            return None
        side, name = having[0]
        return side, [name, *parts[1:]]

    def qualify(
        self, node: exp.Expression, allowed: Sequence[str] = (TARGET, SOURCE), what: str = ""
    ) -> exp.Expression:
        """``node`` with every column reference resolved (see the module docstring); a column of a
        side not in ``allowed`` is refused (InvalidArgument naming it and ``what``)."""

        if node.find(exp.Select, exp.Subquery) is not None:
            raise refuse(
                f"{what} {text_of(node)}", "subqueries are not supported in a statement's conditions and values"
            )

        def fix(n: exp.Expression) -> exp.Expression:
            if not isinstance(n, exp.Column) or isinstance(n.this, exp.Star):
                return n
            found = self.side_of(n)
            if found is None:
                return n
            side, parts = found
            if side.role not in allowed:
                raise InvalidArgument(
                    f"{what}: {text_of(n)} names the {side.role}'s column, but only "
                    f"{' and '.join(allowed)} columns may be named there"
                )
            return column_of([side.role, *parts] if self.prefix else parts)

        return node.copy().transform(fix)

    def target_column(self, node: exp.Expression, what: str) -> str:
        """The target column an assignment (``SET t.amount = ...``) or insert list names: top-level only."""
        if not isinstance(node, exp.Column):
            raise refuse(f"{what} {text_of(node)}", "assign to a column of the table")
        parts = parts_of(node)
        if len(parts) > 1 and self.target.owns(parts[0]):
            parts = parts[1:]
        if len(parts) != 1:
            raise refuse(
                f"{what} {text_of(node)}", "assignments to struct fields are not supported; assign the whole column"
            )
        name = _find(parts[0], self.target.columns)
        if name is None:
            raise InvalidArgument(
                f"{what} {text_of(node)}: the table has no column {parts[0]!r} "
                f"(it has {', '.join(self.target.columns)})"
            )
        return name


# -- literals ------------------------------------------------------------------------------------


def literal_value(node: exp.Expression, what: str) -> Any:
    """A literal as a Python value: string, number (int, else Decimal), boolean or None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        v = literal_value(node.this, what)
        if isinstance(v, bool) or not isinstance(v, (int, Decimal)):
            raise refuse(f"{what} {text_of(node)}", "expected a literal")
        return -v
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        return _number(node.this, what)
    raise refuse(f"{what} {text_of(node)}", "expected a literal (a string, number, TRUE/FALSE or NULL)")


def _number(text: str, what: str) -> int | Decimal:
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    try:
        return Decimal(text)
    except InvalidOperation:
        raise refuse(f"{what} {text}", "unreadable number") from None


def property_value(node: exp.Expression) -> str:
    """A TBLPROPERTIES value as the string Spark keeps (``'a'``, ``1``, ``true``)."""
    v = literal_value(node, "TBLPROPERTIES")
    if v is None:
        raise refuse("TBLPROPERTIES", "a property value cannot be NULL")
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


# -- WHERE as a Lamina predicate -----------------------------------------------------------------

_CMP = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _NotExact(Exception):
    """The predicate has a part Lamina would not evaluate exactly as Spark."""


def lamina_predicate(node: exp.Expression | None, schema: Schema, time_zone: str) -> Expr | None:
    """The WHERE ``node`` (columns bare, as ``Scope(prefix=False)`` leaves them) as a bound Lamina
    predicate selecting exactly Spark's rows, or None where it might not (see the module docstring)."""
    if node is None:
        return bind(AlwaysTrue(), schema)
    try:
        zone = ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    try:
        return bind(_Translate(schema.arrow, zone).expr(node), schema)
    except (_NotExact, LaminaError):
        return None


class _Translate:
    def __init__(self, schema: pa.Schema, zone: ZoneInfo | None) -> None:
        self.schema, self.zone = schema, zone

    def column(self, node: exp.Expression) -> pa.Field | None:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            parts = parts_of(node)
            if len(parts) == 1 and parts[0] in self.schema.names:
                return self.schema.field(parts[0])
            raise _NotExact
        return None

    def value(self, node: exp.Expression, f: pa.Field) -> Any:
        """``node`` as a literal of column ``f``'s kind, read as Spark reads it for that column."""
        t = f.type
        typed = None
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
            typed, node = node.to.this, node.this
        try:
            v = literal_value(node, "WHERE")
        except LaminaError:
            raise _NotExact from None
        if v is None:
            raise _NotExact
        if pa.types.is_boolean(t):
            if isinstance(v, bool) and typed is None:
                return v
        elif pa.types.is_integer(t):
            if isinstance(v, int) and not isinstance(v, bool) and typed is None:
                return v
        elif pa.types.is_floating(t) or pa.types.is_decimal(t):
            if isinstance(v, (int, Decimal)) and not isinstance(v, bool) and typed is None:
                return v if pa.types.is_decimal(t) or isinstance(v, int) else float(v)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            if isinstance(v, str) and typed is None:
                return v
        elif pa.types.is_date(t):
            if (
                isinstance(v, str)
                and typed in (None, exp.DataType.Type.DATE)
                and re.fullmatch(r"\d{4}-\d{2}-\d{2}", v.strip())
            ):
                return dt.date.fromisoformat(v.strip())
        elif pa.types.is_timestamp(t) and isinstance(v, str):
            return self.timestamp(v, t, typed)
        raise _NotExact

    def timestamp(self, text: str, t: pa.DataType, typed: Any) -> dt.datetime:
        """A timestamp string compared with a timestamp column: zone-aware columns (Spark's
        TIMESTAMP) read a string without offset in the session time zone; wall-clock columns
        (TIMESTAMP_NTZ) read it as it is."""
        T = exp.DataType.Type
        s = text.strip()
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?(Z|[+-]\d{2}:\d{2})?", s):
            raise _NotExact
        v = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
        if t.tz is None:
            if v.tzinfo is not None or typed not in (None, T.TIMESTAMPNTZ):
                raise _NotExact
            return v
        if typed not in (None, T.TIMESTAMP, T.TIMESTAMPTZ, T.TIMESTAMPLTZ):
            raise _NotExact
        if v.tzinfo is None:
            if self.zone is None:
                raise _NotExact
            v = v.replace(tzinfo=self.zone)
        return v.astimezone(dt.UTC)

    def expr(self, node: exp.Expression) -> Expr:
        if isinstance(node, exp.Paren):
            return self.expr(node.this)
        if isinstance(node, exp.And):
            return And(self.expr(node.this), self.expr(node.expression))
        if isinstance(node, exp.Or):
            return Or(self.expr(node.this), self.expr(node.expression))
        if isinstance(node, exp.Not):
            inner = node.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
            if isinstance(inner, exp.In):
                name, values = self.in_list(inner)
                return NotIn(name, values)
            if isinstance(inner, exp.Is):
                e = self.expr(inner)
                if isinstance(e, IsNull):
                    return NotNull(e.name)
            return Not(self.expr(inner))
        for cls, op in _CMP.items():
            if type(node) is cls:
                left, right = self.column(node.this), self.column(node.expression)
                if left is not None and right is None:
                    return Compare(op, left.name, self.value(node.expression, left))
                if right is not None and left is None:
                    return Compare(_FLIP[op], right.name, self.value(node.this, right))
                raise _NotExact
        if isinstance(node, exp.In):
            return In(*self.in_list(node))
        if isinstance(node, exp.Is):
            f = self.column(node.this)
            if f is None or not isinstance(node.expression, exp.Null):
                raise _NotExact
            return IsNull(f.name)
        if isinstance(node, exp.Between):
            f = self.column(node.this)
            if f is None or node.args.get("symmetric"):
                raise _NotExact
            return between(f.name, self.value(node.args["low"], f), self.value(node.args["high"], f))
        if isinstance(node, exp.Boolean):
            return AlwaysTrue() if node.this else AlwaysFalse()
        f = self.column(node)
        if f is not None and pa.types.is_boolean(f.type):
            return Compare("=", f.name, True)
        raise _NotExact

    def in_list(self, node: exp.In) -> tuple[str, tuple]:
        f = self.column(node.this)
        if (
            f is None
            or node.args.get("query")
            or node.args.get("unnest")
            or node.args.get("field")
            or not node.expressions
        ):
            raise _NotExact
        return f.name, tuple(self.value(v, f) for v in node.expressions)
