"""A bound term as one Arrow compute expression, and its values over a table.

The expression is Arrow's (``pyarrow.compute.Expression``): the same object filters a
table, a dataset scan and a Parquet read, evaluated by Arrow's kernels on whole batches.
SQL evaluates a branch only for the rows that take it (``CASE WHEN x = 0 THEN 0 ELSE 10 / x
END`` never divides by zero, nor does ``x <> 0 AND 10 / x > 1``), while Arrow computes every
argument for every row. So where a call can fail on a row (``functions.Function.raises``)
and not every row needs its value, its first argument is replaced by NULL on the rows that
do not: a NULL input fails nothing, and those rows' values are never looked at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lamina.errors import EvaluationError
from lamina.expr.functions import FUNCTIONS, fill, null_scalar
from lamina.expr.terms import Call, Column, Literal, Term, term_sql, walk

_TRUE = pc.scalar(True)


def raises(term: Term) -> bool:
    """Whether evaluating ``term`` can fail on some row (an ANSI error)."""
    return any(isinstance(t, Call) and FUNCTIONS[t.fn].raises(t) for t in walk(term))


def to_arrow(term: Term, names: Mapping[str, str] | None = None, demand: pc.Expression | None = None) -> pc.Expression:
    """``term`` (bound) as an Arrow expression. ``names``: a top-level column's name in the
    data, where it differs (physical names); ``demand``: the rows whose value is needed
    (None: every row)."""
    return _Compiler(names or {}).compile(term, demand)


class _Compiler:
    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names
        self._raises: dict[int, bool] = {}

    def _may_fail(self, t: Term) -> bool:
        key = id(t)
        if key not in self._raises:
            self._raises[key] = raises(t)
        return self._raises[key]

    def compile(self, t: Term, demand: pc.Expression | None) -> pc.Expression:
        if isinstance(t, Column):
            top = self.names.get(t.path[0], t.path[0])
            return pc.field(top, *t.path[1:]) if len(t.path) > 1 else pc.field(top)
        if isinstance(t, Literal):
            v = t.value
            return pc.scalar(v) if isinstance(v, pa.Scalar) else pc.scalar(None)
        assert isinstance(t, Call)
        f = FUNCTIONS[t.fn]
        args = self._arguments(t, demand)
        if demand is not None and args and f.raises(t):
            first = t.args[0]
            args[0] = pc.if_else(demand, args[0], null_scalar(first.type))
        if f.takes_validity:
            return f.arrow(t, args, valid=self._validity(t.args[0], args[0]))
        return f.arrow(t, args)

    def _validity(self, t: Term, compiled: pc.Expression) -> pc.Expression:
        """Where ``t`` (compiled: ``compiled``) is not NULL. Arrow evaluates every node of an
        expression as often as it occurs, so for a call that is NULL exactly where its argument
        is (``lower``, ``trim``: ``Function.strict``) it is the validity of that argument, the
        call not evaluated a second time."""
        while isinstance(t, Call) and FUNCTIONS[t.fn].strict and len(t.args) == 1:
            t = t.args[0]
            if isinstance(t, Column):
                return self.compile(t, None).is_valid()
        return compiled.is_valid()

    def _arguments(self, t: Call, demand: pc.Expression | None) -> list[pc.Expression]:
        """The arguments' expressions, each given the rows that need its value."""
        fn, terms = t.fn, t.args
        lazy = fn in ("case", "and", "or", "coalesce") and any(self._may_fail(a) for a in terms[1:])
        if not lazy:
            return [self.compile(a, demand) for a in terms]
        out: list[pc.Expression] = []
        need = demand if demand is not None else _TRUE
        if fn in ("and", "or"):
            left = self.compile(terms[0], demand)
            # AND needs its right side where the left is not FALSE; OR where it is not TRUE.
            right_need = need & (fill(left, True) if fn == "and" else ~fill(left, False))
            return [left, self.compile(terms[1], right_need)]
        if fn == "coalesce":
            for a in terms:
                e = self.compile(a, need)
                out.append(e)
                need = need & e.is_null()
            return out
        # case: cond1, value1, ..., else: a condition where no earlier one held, a value where its own did
        rest = need
        conds, values = terms[0:-1:2], terms[1:-1:2]
        for c, v in zip(conds, values):
            ce = self.compile(c, rest)
            taken = fill(ce, False)
            out += [ce, self.compile(v, rest & taken)]
            rest = rest & ~taken
        out.append(self.compile(terms[-1], rest))
        return out


def evaluate(term: Term, table: pa.Table) -> pa.ChunkedArray:
    """The value of ``term`` (bound to ``table``'s columns) for every row of ``table``.
    EvaluationError where a row makes it fail (overflow, division by zero, a cast)."""
    expr = to_arrow(term)
    try:
        out = ds.dataset(table).to_table(columns={"v": expr}, use_threads=False).column("v")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise evaluation_error(e, term_sql(term)) from None
    return out if out.type.equals(term.type) else out.cast(term.type)


_FAILURES = (
    "divide by zero",
    "overflow",
    "out of bounds",
    "failed to parse",
    "truncated",
    "cannot convert",
    "rescal",
    "not in range",
    "would cause data loss",
    "does not fit",
)


def is_evaluation_failure(e: Exception) -> bool:
    """Whether an Arrow error is a kernel failing on a value (not, say, an unreadable file)."""
    low = str(e).lower()
    return isinstance(e, pa.ArrowInvalid) and any(f in low for f in _FAILURES) and "parquet" not in low


def filter_rows(table: pa.Table, filt: Any, text: str) -> pa.Table:
    """``table.filter(filt)``, a row the filter fails on raised as EvaluationError."""
    try:
        return table.filter(filt)
    except pa.ArrowInvalid as e:
        if is_evaluation_failure(e):
            raise evaluation_error(e, text) from None
        raise


def evaluation_error(e: Exception, text: str) -> EvaluationError:
    """Arrow's failure evaluating ``text`` as the error a Spark user knows (ANSI mode)."""
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    low = msg.lower()
    if "divide by zero" in low:
        kind = "division by zero (DIVIDE_BY_ZERO)"
    elif "overflow" in low:
        kind = "arithmetic overflow (ARITHMETIC_OVERFLOW)"
    elif "out of bounds" in low or "index" in low:
        kind = "array index out of range (INVALID_ARRAY_INDEX)"
    elif any(
        w in low for w in ("parse", "truncated", "convert", "rescal", "not in range", "does not fit", "data loss")
    ):
        kind = "a value that does not fit the CAST (CAST_INVALID_INPUT / CAST_OVERFLOW); TRY_CAST gives NULL instead"
    else:
        kind = msg
    return EvaluationError(f"evaluating {text} failed on a row: {kind} [{msg}]; nothing was changed")
