"""Pruning by terms: which files may hold a row where a boolean term is TRUE.

A file is skipped only when its statistics prove no row can match. Each term is bounded
over every manifest row at once (vectorized, with the term's own Arrow kernels):

- a column by its ``min``/``max`` statistics, narrowed by what its partition values say
  (an identity partition's value; the range of a year / month / day / hour partition;
  a truncated integer's range);
- a literal by itself;
- a call whose result moves with its arguments (``functions.Function.monotone``: ``x + 1``,
  ``x * 2``, ``-x``, casts between numbers or dates, ``date_trunc``, ``year``, ``floor``,
  a string's prefix ...) by the call on its arguments' bounds; ``month(ts)``, ``day(ts)``,
  ``hour(ts)`` ... only where the bounds share the year (month, day ...); ``abs`` and the
  product of two terms by their extremes; ``CASE``, ``COALESCE`` and ``IF`` by the union of
  their branches;
- anything else is unknown (the file is read).

Comparisons of two bounded terms, IN lists, ``LIKE 'abc%'`` and ``starts_with`` (a range of
strings), ``IS [NOT] NULL`` on a column, AND and OR are then decided from the bounds. Float
bounds are only used where no NaN can arise: a float column's bounds exist only for files
without NaN (docs/format.md), and arithmetic on bounds that reach an infinity is unknown.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lamina.expr import sqltypes as T
from lamina.expr.compile import to_arrow
from lamina.expr.functions import FIELD_WITHIN, FUNCTIONS, like_parts
from lamina.expr.terms import Call, Column, Literal, Term
from lamina.spec import content as C
from lamina.spec.transforms import transform_parts, transform_result_type

Bounds = tuple[pa.Array, pa.Array] | None  # (lo, hi) per manifest row, null where unknown; None: all unknown

_COMPARE = {"=", "!=", "<", "<=", ">", ">="}


def _array(x: Any) -> pa.Array:
    return x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x


class _Bounder:
    def __init__(self, pruner: Any) -> None:
        self.p = pruner
        self.n = pruner.n

    # -- truth --------------------------------------------------------------------------

    def may_be_true(self, t: Term) -> pa.Array:
        out = self._may(t)
        return pc.fill_null(out, True) if out.null_count else out

    def _may(self, t: Term) -> pa.Array:
        true = self.p.true
        if isinstance(t, Literal):
            return true if t.value.is_valid and t.value.as_py() is True else self.p.false
        if isinstance(t, Column):
            b = self.bounds(t)
            return true if b is None else pc.fill_null(pc.equal(b[1], True), True)
        assert isinstance(t, Call)
        fn, args = t.fn, t.args
        if fn == "and":
            return pc.and_(self.may_be_true(args[0]), self.may_be_true(args[1]))
        if fn == "or":
            return pc.or_(self.may_be_true(args[0]), self.may_be_true(args[1]))
        if fn in _COMPARE:
            return self._compare(fn, args[0], args[1])
        if fn == "not_distinct" and isinstance(args[1], Literal) and args[1].value.is_valid:
            return self._compare("=", args[0], args[1])
        if fn == "in":
            out = self.p.false
            for v in args[1:]:
                out = pc.or_(out, self.may_be_true(Call("=", (args[0], v), (), pa.bool_())))
            return out
        if fn in ("like", "starts_with"):
            return self._prefix(t)
        if fn in ("is_null", "is_not_null") and isinstance(args[0], Column) and len(args[0].path) == 1:
            from lamina.expr.expressions import IsNull, NotNull

            name = args[0].name
            return self.p.visit_is_null(IsNull(name)) if fn == "is_null" else self.p.visit_not_null(NotNull(name))
        if fn in ("is_true", "coalesce"):
            out = self.p.false
            for a in args:
                out = pc.or_(out, self.may_be_true(a))
            return out
        if fn == "case":
            out = self.p.false
            for v in [*args[1:-1:2], args[-1]]:
                out = pc.or_(out, self.may_be_true(v))
            return out
        return true

    def _compare(self, op: str, a: Term, b: Term) -> pa.Array:
        if _nan_literal(a) or _nan_literal(b):
            return self.p.true  # NaN is above every bound: leave it to the row filter
        ba, bb = self.bounds(a), self.bounds(b)
        if ba is None or bb is None:
            return self.p.true
        return may_compare(op, *ba, *bb)

    def _prefix(self, t: Call) -> pa.Array:
        """``s LIKE 'abc%...'`` and ``starts_with(s, 'abc')``: s in ['abc', the next prefix)."""
        if t.fn == "like":
            parts = like_parts(t.opts[1], t.opts[0])
            if not parts or parts[0][0] != "lit":
                return self.p.true
            prefix = parts[0][1]
            if [k for k, _ in parts] == ["lit"]:
                return self._compare("=", t.args[0], Literal(pa.scalar(prefix, t.args[0].type)))
        else:
            prefix = t.opts[0]
        b = self.bounds(t.args[0])
        if b is None or not prefix:
            return self.p.true
        lo, hi = b
        st = lo.type
        r = pc.greater_equal(hi, pa.scalar(prefix, st))
        after = next_prefix(prefix)
        if after is not None:
            r = pc.and_kleene(r, pc.less(lo, pa.scalar(after, st)))
        return pc.fill_null(r, True)

    # -- bounds -----------------------------------------------------------------------------

    def bounds(self, t: Term) -> Bounds:
        try:
            return self._bounds(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError, ValueError):
            return None  # (an overflow on a bound: nothing is concluded)

    def _bounds(self, t: Term) -> Bounds:
        if isinstance(t, Literal):
            if not isinstance(t.value, pa.Scalar) or not t.value.is_valid:
                return None  # (an INTERVAL; a NULL, which no comparison keeps: left to the row filter)
            a = pa.repeat(t.value, self.n)
            return a, a
        if isinstance(t, Column):
            return self._column(t)
        assert isinstance(t, Call)
        fn, args = t.fn, t.args
        if fn == "coalesce":
            return self._coalesce(args)
        if fn == "case":
            values = [*args[1:-1:2], args[-1]]
            return self._union(
                [self.bounds(v) for v in values if not (isinstance(v, Literal) and not v.value.is_valid)]
            )
        if fn == "nullif":
            return self.bounds(args[0])
        if fn == "abs":
            return self._abs(args[0])
        if fn == "*" and not any(isinstance(a, Literal) for a in args) and not T.is_decimal(t.type):
            return self._product(t)
        if fn in FIELD_WITHIN and FIELD_WITHIN[fn] is not None:
            return self._field_within(t)
        f = FUNCTIONS[fn]
        mono = f.monotone(t) if callable(f.monotone) else f.monotone
        if mono is None:
            return None
        los, his = [], []
        for a, m in zip(args, mono):
            if m == 0:
                if not isinstance(a, Literal):
                    return None
                los.append(a)
                his.append(a)
                continue
            b = self.bounds(a)
            if b is None:
                return None
            b = self._finite(a, b)
            lo, hi = b if m > 0 else (b[1], b[0])
            los.append(lo)
            his.append(hi)
        return self._nan_free(self._apply(t, los), self._apply(t, his))

    def _apply(self, t: Call, args: list) -> pa.Array:
        """The call ``t`` on per-row argument values (arrays; literals as they are)."""
        cols: dict[str, Any] = {}
        terms: list[Term] = []
        for i, (a, v) in enumerate(zip(t.args, args)):
            if isinstance(v, Literal):
                terms.append(v)
            else:
                name = f"__b{i}"
                cols[name] = v
                terms.append(Column((name,), a.type))
        call = Call(t.fn, tuple(terms), t.opts, t.type)
        table = pa.table(cols) if cols else pa.table({"__n": pa.nulls(self.n, pa.int8())})
        out = ds.dataset(table).to_table(columns={"v": to_arrow(call)}, use_threads=False).column("v")
        return _array(out)

    def _finite(self, a: Term, b: tuple[pa.Array, pa.Array]) -> tuple[pa.Array, pa.Array]:
        """Float bounds reaching an infinity as unknown: arithmetic on them may make NaN."""
        if not T.is_float(a.type):
            return b
        lo, hi = b
        ok = pc.and_(pc.is_finite(lo), pc.is_finite(hi))
        nulls = pa.scalar(None, lo.type)
        return pc.if_else(ok, lo, nulls), pc.if_else(ok, hi, nulls)

    def _nan_free(self, lo: pa.Array, hi: pa.Array) -> Bounds:
        if T.is_float(lo.type):
            nulls = pa.scalar(None, lo.type)
            lo = pc.if_else(pc.is_nan(lo), nulls, lo)
            hi = pc.if_else(pc.is_nan(hi), nulls, hi)
        return lo, hi

    def _union(self, parts: list[Bounds]) -> Bounds:
        known = [p for p in parts if p is not None]
        if not known or len(known) < len(parts):
            return None
        if len(known) == 1:
            return known[0]
        return (
            pc.min_element_wise(*[p[0] for p in known], skip_nulls=False),
            pc.max_element_wise(*[p[1] for p in known], skip_nulls=False),
        )

    def _coalesce(self, args: tuple) -> Bounds:
        """The union of the arguments' bounds; in a file where the first is a column without
        nulls, that column's alone (the others are never reached)."""
        parts = [self.bounds(a) for a in args if not (isinstance(a, Literal) and not a.value.is_valid)]
        union = self._union(parts)
        first = args[0]
        if union is None or not (isinstance(first, Column) and len(first.path) == 1 and parts and parts[0] is not None):
            return union
        nulls = self.p._col(C.nulls_col(self.p.schema.field_id(first.name)), pa.int64())
        whole = pc.fill_null(pc.equal(nulls, 0), False)
        lo, hi = parts[0]
        return pc.if_else(whole, lo, union[0]), pc.if_else(whole, hi, union[1])

    def _abs(self, a: Term) -> Bounds:
        b = self.bounds(a)
        if b is None:
            return None
        lo, hi = b
        zero = pa.scalar(0, lo.type) if not T.is_decimal(lo.type) else pa.scalar(0, lo.type)
        neg_lo, neg_hi = pc.negate_checked(lo), pc.negate_checked(hi)
        new_lo = pc.if_else(pc.greater_equal(lo, zero), lo, pc.if_else(pc.less_equal(hi, zero), neg_hi, zero))
        new_hi = pc.if_else(
            pc.greater_equal(lo, zero),
            hi,
            pc.if_else(pc.less_equal(hi, zero), neg_lo, pc.max_element_wise(neg_lo, hi, skip_nulls=False)),
        )
        return new_lo, new_hi

    def _product(self, t: Call) -> Bounds:
        a, b = t.args
        ba, bb = self.bounds(a), self.bounds(b)
        if ba is None or bb is None:
            return None
        ba, bb = self._finite(a, ba), self._finite(b, bb)
        prods = [self._apply(t, [x, y]) for x in ba for y in bb]
        return self._nan_free(
            pc.min_element_wise(*prods, skip_nulls=False), pc.max_element_wise(*prods, skip_nulls=False)
        )

    def _field_within(self, t: Call) -> Bounds:
        """month(x), day(x), hour(x) ...: by the field of the bounds where both lie in one
        year (month, day ...), where the field grows with its argument."""
        x = t.args[0]
        b = self.bounds(x)
        if b is None:
            return None
        lo, hi = b
        parent = FIELD_WITHIN[t.fn]
        same = pc.equal(
            self._apply(Call("date_trunc", (x,), (parent,), _trunc_type(x.type)), [lo]),
            self._apply(Call("date_trunc", (x,), (parent,), _trunc_type(x.type)), [hi]),
        )
        flo, fhi = self._apply(t, [lo]), self._apply(t, [hi])
        nulls = pa.scalar(None, flo.type)
        return pc.if_else(same, flo, nulls), pc.if_else(same, fhi, nulls)

    # -- columns -----------------------------------------------------------------------------

    def _column(self, c: Column) -> Bounds:
        if len(c.path) != 1 or c.name not in self.p.schema.names:
            return None
        t = c.type
        if not T.is_ordered(t) or pa.types.is_null(t):
            return None
        fid = self.p.schema.field_id(c.name)
        lo, hi = self.p._bounds(C.min_col(fid), C.max_col(fid), t)
        lo, hi = _array(lo), _array(hi)
        for pf in self.p.by_source.get(fid, ()):
            derived = self._from_partition(pf, t)
            if derived is None:
                continue
            dlo, dhi = derived
            foreign = self.p._foreign(pf)
            if foreign is not None:
                dlo = pc.if_else(foreign, pa.scalar(None, t), dlo)
                dhi = pc.if_else(foreign, pa.scalar(None, t), dhi)
            lo = pc.max_element_wise(lo, dlo, skip_nulls=True)
            hi = pc.min_element_wise(hi, dhi, skip_nulls=True)
        return lo, hi

    def _from_partition(self, pf: Any, t: pa.DataType) -> Bounds:
        """The source column's bounds that a partition field's values imply."""
        name, width = transform_parts(pf.transform)
        if name == "identity":
            pt = t
        elif name in ("year", "month", "day", "hour") or (name == "truncate" and T.is_integer(t)):
            pt = transform_result_type(pf.transform, t)
        else:
            return None
        plo, phi = self.p._bounds(C.pmin_col(pf.field_id), C.pmax_col(pf.field_id), pt)
        plo, phi = _array(plo), _array(phi)
        if name == "identity":
            return plo, phi
        if name == "truncate":
            assert width is not None  # truncate[W] always has its width
            top = pa.scalar(width - 1, t)
            try:
                return plo, pc.add_checked(phi, top)
            except pa.ArrowInvalid:
                return plo, pc.if_else(
                    pc.less_equal(phi, pa.scalar(np.iinfo(t.to_pandas_dtype()).max - width + 1, t)),
                    pc.add(phi, top),
                    pa.scalar(None, t),
                )
        return _temporal_range(name, plo, phi, t)


def may_compare(op: str, alo: Any, ahi: Any, blo: Any, bhi: Any) -> pa.Array:
    """Whether ``a op b`` may hold for some a in [alo, ahi] and b in [blo, bhi] (per manifest
    row; bounds arrays or scalars, null where unknown: then True). NaN is in no bound."""
    if op == "=":
        r = pc.and_kleene(pc.less_equal(alo, bhi), pc.less_equal(blo, ahi))
    elif op == "!=":
        # only where both sides are one and the same value is a != impossible
        r = pc.invert(pc.and_kleene(pc.and_kleene(pc.equal(alo, ahi), pc.equal(blo, bhi)), pc.equal(alo, blo)))
    elif op == "<":
        r = pc.less(alo, bhi)
    elif op == "<=":
        r = pc.less_equal(alo, bhi)
    elif op == ">":
        r = pc.greater(ahi, blo)
    else:
        r = pc.greater_equal(ahi, blo)
    return pc.fill_null(r, True)


def _trunc_type(t: pa.DataType) -> pa.DataType:
    return pa.timestamp("us", "UTC") if pa.types.is_date(t) else t


def _nan_literal(t: Term) -> bool:
    return (
        isinstance(t, Literal)
        and isinstance(t.value, pa.Scalar)
        and t.value.is_valid
        and T.is_float(t.value.type)
        and t.value.as_py() != t.value.as_py()
    )


_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def _temporal_range(transform: str, plo: pa.Array, phi: pa.Array, t: pa.DataType) -> Bounds:
    """[start of the lowest partition, end of the highest) of a date or timestamp column,
    its end as the last value before the next partition starts."""

    def starts(p: pa.Array, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The first nanosecond of each partition value (+ step partitions), as int64 ns, and
        which values are known."""
        valid = p.is_valid().to_numpy(zero_copy_only=False)
        if transform == "day":
            v = p.cast(pa.int32()).fill_null(0).to_numpy().astype(np.int64) + step
            out = v.astype("datetime64[D]").astype("datetime64[ns]").astype(np.int64)
        elif transform == "hour":
            v = p.fill_null(0).to_numpy().astype(np.int64) + step
            out = v * 3_600_000_000_000
        else:
            v = p.fill_null(0).to_numpy().astype(np.int64) + step
            unit = "datetime64[Y]" if transform == "year" else "datetime64[M]"
            out = v.astype(unit).astype("datetime64[ns]").astype(np.int64)
        return np.where(valid, out, 0), valid

    lo_ns, lo_ok = starts(plo, 0)
    hi_ns, hi_ok = starts(phi, 1)
    if pa.types.is_date(t):
        day = 86_400 * 10**9
        lo = pa.array(lo_ns // day, pa.int32(), mask=~lo_ok).cast(pa.date32())
        hi = pa.array(hi_ns // day - 1, pa.int32(), mask=~hi_ok).cast(pa.date32())
        return lo, hi
    per = _UNIT_NS[t.unit]
    lo = pa.array(lo_ns // per, pa.int64(), mask=~lo_ok).cast(t)
    hi = pa.array(hi_ns // per - 1, pa.int64(), mask=~hi_ok).cast(t)
    return lo, hi


def next_prefix(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix``: its last character that
    can grow, grown (U+D7FF to U+E000: UTF-8 holds no surrogates), the ones after dropped;
    None when none can."""
    for i in range(len(prefix) - 1, -1, -1):
        c = ord(prefix[i])
        if c < 0x10FFFF:
            nxt = 0xE000 if c == 0xD7FF else c + 1
            return prefix[:i] + chr(nxt)
    return None


def may_be_true(term: Term, pruner: Any) -> pa.Array:
    """For each manifest row of ``pruner`` (``lamina.expr.evaluator._Pruner``): False only
    if no row of the file (or leaf) it describes can make ``term`` TRUE."""
    return _Bounder(pruner).may_be_true(term)
