"""Evaluating predicates: row filters for Arrow, and file pruning over manifests.

``to_arrow_filter`` gives a ``pyarrow.compute.Expression`` with SQL WHERE
semantics (rows where the predicate is null are dropped) and Spark's NaN
semantics (NaN = NaN; NaN above every other value; docs/format.md).
``pushdown_filter`` is what a Parquet scan may be given instead: Parquet's
row-group statistics leave NaN out, and Arrow's scanner trusts them, so a
comparison that NaN rows satisfy must not reach it. ``may_match`` decides, for
every manifest row at once, whether the file (or leaf manifest) it describes
can hold a matching row; it may say True wrongly, never False wrongly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.expr.binder import bind
from lamina.expr.bounds import may_compare
from lamina.expr.compile import raises, to_arrow
from lamina.expr.expressions import (
    And,
    Compare,
    Expr,
    ExprVisitor,
    In,
    IsNull,
    NotIn,
    NotNull,
    Or,
    Predicate,
    rewrite_not,
    visit,
)
from lamina.expr.functions import fill
from lamina.expr.literals import is_nan
from lamina.expr.parser import to_expr
from lamina.expr.terms import Column as TermColumn
from lamina.expr.terms import walk
from lamina.spec import content as C
from lamina.spec.partition import PartitionField, PartitionSpec, fields_by_id, specs_with_field
from lamina.spec.schema import Schema
from lamina.spec.transforms import project_inclusive, transform_result_type

_SMALL_IN = 8  # IN lists up to this size are tested value by value; larger ones by binary search


# --- row filter --------------------------------------------------------------------------


def _value_set(values: tuple) -> pa.Array:
    if values and all(isinstance(v, pa.Scalar) for v in values):
        return pa.array(values, type=values[0].type)
    return pa.array([v.as_py() if isinstance(v, pa.Scalar) else v for v in values])


def _is_float(v: Any) -> bool:
    """Whether a bound literal is of a float type (where NaN needs its own rules)."""
    return isinstance(v, pa.Scalar) and pa.types.is_floating(v.type)


def _on_float(e: Expr) -> bool:
    """Whether bound leaf ``e`` compares a float column with literals."""
    if isinstance(e, Compare):
        return _is_float(e.value)
    return isinstance(e, (In, NotIn)) and bool(e.values) and _is_float(e.values[0])


def _without_nan(values: tuple) -> tuple[tuple, bool]:
    """An IN list's values other than NaN, and whether NaN was among them."""
    kept = tuple(v for v in values if not is_nan(v))
    return kept, len(kept) < len(values)


def nan_satisfies(e: Expr) -> bool:
    """Whether a NaN value satisfies leaf ``e`` (bound, negation normal form) on a float column.

    NaN is above every number and equal to NaN (the binder turns orderings against a NaN
    literal into = / !=), so: ``> v``, ``>= v``, ``!= v``, ``= NaN``, ``IN (.., NaN)`` and
    ``NOT IN (..)`` without NaN. False for non-float columns and for null tests.
    """
    if not _on_float(e):
        return False
    if isinstance(e, Compare):
        return e.op == "=" if is_nan(e.value) else e.op in (">", ">=", "!=")
    assert isinstance(e, (In, NotIn))  # what _on_float accepts besides a comparison
    has_nan = _without_nan(e.values)[1]
    return has_nan if isinstance(e, In) else not has_nan


class _ArrowFilter(ExprVisitor[pc.Expression]):
    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        self.names = names or {}

    def _field(self, name: str) -> pc.Expression:
        return pc.field(self.names.get(name, name))

    def visit_true(self):
        return pc.scalar(True)

    def visit_false(self):
        return pc.scalar(False)

    def visit_and(self, l, r):
        return l & r  # and_kleene: FALSE wins over null, as in SQL

    def visit_or(self, l, r):
        return l | r

    def visit_not(self, c):
        raise AssertionError("filters are built from negation normal form")

    def visit_compare(self, e: Compare):
        f, v = self._field(e.name), e.value
        if is_nan(v):
            # Arrow's = / != follow IEEE (NaN != NaN); the binder left only these two ops.
            return pc.is_nan(f) if e.op == "=" else ~pc.is_nan(f)
        out = {"=": f == v, "!=": f != v, "<": f < v, "<=": f <= v, ">": f > v, ">=": f >= v}[e.op]
        if e.op in (">", ">=") and _is_float(v):
            out = out | pc.is_nan(f)  # NaN is above every number (IEEE says neither)
        return out

    def visit_in(self, e: In):
        values, has_nan = _without_nan(e.values)
        f = self._field(e.name)
        out = f.isin(_value_set(values)) if values else pc.scalar(False)
        return out | pc.is_nan(f) if has_nan else out

    def visit_not_in(self, e: NotIn):
        values, has_nan = _without_nan(e.values)
        f = self._field(e.name)
        # is_in says false (not null) for a null input, so its inverse would keep nulls.
        out = f.is_valid() & ~f.isin(_value_set(values)) if values else f.is_valid()
        return out & ~pc.is_nan(f) if has_nan else out

    def visit_is_null(self, e: IsNull):
        return self._field(e.name).is_null()

    def visit_not_null(self, e: NotNull):
        return self._field(e.name).is_valid()

    def visit_predicate(self, e: Predicate):
        return to_arrow(e.term, self.names)


class _PushdownFilter(_ArrowFilter):
    """As _ArrowFilter, with every float comparison that NaN rows satisfy made TRUE.

    Parquet writers leave NaN out of row-group min/max (the format says to), and Arrow's
    scanner simplifies the filter as if every row lay within them: on a row group holding
    0.0 and NaN it takes ``x != 0`` for false and skips the group, NaN row and all. A
    comparison NaN never satisfies can only be simplified wrongly for NaN rows, to a
    value it cannot be below (FALSE): in negation normal form the filter then keeps a
    superset of the rows, and the exact filter is applied to what was read.
    """

    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        super().__init__(names)
        self.inexact = False

    def _guard(self, e: Expr, exact: pc.Expression) -> pc.Expression:
        if not _on_float(e):
            return exact
        # Any float comparison may be simplified wrongly for NaN rows (kept when they
        # should not be): the exact filter must follow.
        self.inexact = True
        return pc.scalar(True) if nan_satisfies(e) else exact

    def visit_compare(self, e: Compare):
        return self._guard(e, super().visit_compare(e))

    def visit_in(self, e: In):
        return self._guard(e, super().visit_in(e))

    def visit_not_in(self, e: NotIn):
        return self._guard(e, super().visit_not_in(e))

    def visit_predicate(self, e: Predicate):
        # Given to the scan as it is unless it reads a float: Arrow would simplify its
        # comparisons of such a column by row-group statistics that leave NaN out (see above),
        # so it is TRUE there and the exact filter follows.
        if any(isinstance(t, TermColumn) and _holds_float(t.type) for t in walk(e.term)):
            self.inexact = True
            return pc.scalar(True)
        return super().visit_predicate(e)


def _holds_float(t: pa.DataType) -> bool:
    """Whether values of ``t`` are or hold floats."""
    if pa.types.is_floating(t):
        return True
    return any(_holds_float(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else False


def predicate_may_fail(expr: Expr) -> bool:
    """Whether a bound predicate can fail on a row (an ANSI error: overflow, division by
    zero, a CAST that does not fit): some Predicate leaf can."""
    return _failing_leaves(expr)


def _failing_leaves(expr: Expr) -> bool:
    """Whether some Predicate leaf of ``expr`` can fail on a row."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, (And, Or)):
            stack += [e.left, e.right]
        elif isinstance(e, Predicate) and raises(e.term):
            return True
    return False


def _with_demands(expr: Expr, names: Mapping[str, str] | None, demand: pc.Expression | None) -> pc.Expression:
    """The filter of ``expr`` (bound, negation normal form, some leaf can fail), each leaf
    evaluated only where the ones before it leave its value needed: SQL's AND needs its
    right side where the left is not FALSE, OR where it is not TRUE (``x <> 0 AND 10 / x > 1``
    never divides by zero)."""
    if isinstance(expr, (And, Or)):
        left = _with_demands(expr.left, names, demand)
        need = fill(left, True) if isinstance(expr, And) else ~fill(left, False)
        right = _with_demands(expr.right, names, need if demand is None else demand & need)
        return left & right if isinstance(expr, And) else left | right
    if isinstance(expr, Predicate):
        return to_arrow(expr.term, names, demand)
    return visit(expr, _ArrowFilter(names))


def to_arrow_filter(expr: Expr | str | None, names: Mapping[str, str] | None = None) -> pc.Expression:
    """Arrow dataset / ``Table.filter`` expression keeping exactly the rows where ``expr`` is TRUE.

    Pass a bound expression (``bind``) for typed literals and the NaN rules; an unbound
    one relies on Arrow's implicit casts. Reading Parquet, give the scan ``pushdown_filter``.
    ``names``: column name -> the name to filter on instead (a column's physical name in
    the Parquet files of an evolved table).
    """
    e = rewrite_not(to_expr(expr))
    if _failing_leaves(e):
        try:
            return _with_demands(e, names, None)
        except RecursionError:
            pass  # too deep to evaluate lazily: every leaf on every row
    return visit(e, _ArrowFilter(names))


def pushdown_filter(expr: Expr | str | None, names: Mapping[str, str] | None = None) -> pc.Expression | None:
    """The filter to give a Parquet scan (``Dataset.to_table(filter=...)``,
    ``pq.read_table(filters=...)``) for bound ``expr``, or None when that is
    ``to_arrow_filter(expr)`` itself.

    When not None it keeps a superset of the matching rows, whatever the files'
    row-group statistics say about float columns holding NaN: read the columns
    ``expr`` references too and apply ``to_arrow_filter(expr)`` to the rows read.
    """
    v = _PushdownFilter(names)
    out = visit(rewrite_not(to_expr(expr)), v)
    return out if v.inexact else None


# --- pruning --------------------------------------------------------------------------------


def _numpy_keys(a: pa.Array) -> np.ndarray:
    """Values as a numpy array ordered like Arrow orders them (temporal types as integers)."""
    if pa.types.is_temporal(a.type):
        a = a.view(pa.int32() if a.type.bit_width == 32 else pa.int64())
    return a.to_numpy(zero_copy_only=False)


class _Pruner(ExprVisitor[pa.Array]):
    """Each node -> BooleanArray over manifest rows, True where a match is possible."""

    def __init__(self, manifest: pa.Table, schema: Schema, specs: tuple[PartitionSpec, ...]):
        self.m = manifest
        self.n = manifest.num_rows
        self.schema = schema
        self.specs = specs
        # A partition field id means one source and transform in every spec of a table, so
        # each field prunes every row that has its bounds; a file written under a spec
        # without the field has none (null: unknown).
        self.by_source: dict[int, list[PartitionField]] = {}
        for pf in fields_by_id(specs).values():
            self.by_source.setdefault(pf.source_id, []).append(pf)
        self.true = pa.array(np.ones(self.n, dtype=bool))
        self.false = pa.array(np.zeros(self.n, dtype=bool))
        self._foreign_of: dict[int, pa.Array] = {}

    def _foreign(self, pf: PartitionField) -> pa.Array | None:
        """Data-file rows written under a spec without ``pf``, or a spec not given (their
        bounds for it are not trusted, whatever a writer put there), when the manifest says
        which spec wrote each file; None when it does not (planning reads ``spec_id`` only
        on tables with several specs)."""
        if "spec_id" not in self.m.column_names:
            return None
        if pf.field_id not in self._foreign_of:
            having = specs_with_field(self.specs, pf.field_id)
            foreign = pc.invert(pc.is_in(self._col("spec_id", pa.int32()), value_set=pa.array(having, pa.int32())))
            if "content" in self.m.column_names:  # a leaf's bounds span its files: nulls where any lacks them
                foreign = pc.and_(foreign, pc.equal(self._col("content", pa.int8()), C.DATA))
            self._foreign_of[pf.field_id] = pc.fill_null(foreign, True)
        return self._foreign_of[pf.field_id]

    def _col(self, name: str, t: pa.DataType) -> pa.Array:
        """A manifest column as one array of type ``t``; all-null (unknown) if absent or unusable."""
        if name not in self.m.column_names:
            return pa.nulls(self.n, t)
        c = self.m.column(name)
        a = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
        if not a.type.equals(t):
            try:
                a = a.cast(t)  # e.g. a manifest written before the column type was widened
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return pa.nulls(self.n, t)
        return a

    def _bounds(self, lo_name: str, hi_name: str, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
        lo, hi = self._col(lo_name, t), self._col(hi_name, t)
        if pa.types.is_floating(t):
            # Writers keep no bounds for a float column holding NaN (format.md), so known
            # bounds say the file has none; a NaN bound (a NaN partition value, or a
            # foreign writer's) is taken as unknown, since Arrow's comparisons ignore NaN.
            lo = pc.if_else(pc.is_nan(lo), pa.scalar(None, t), lo)
            hi = pc.if_else(pc.is_nan(hi), pa.scalar(None, t), hi)
        return lo, hi

    def _test(self, op: str, v: Any, lo: pa.Array, hi: pa.Array, t: pa.DataType) -> pa.Array:
        """May some value in [lo, hi] satisfy ``x op v``? Null bounds (unknown) -> True."""
        if op in ("=", "<", "<=", ">", ">=", "!="):
            # != : only a file whose every non-null value is v fails; null rows never satisfy
            # it. (A NaN v is equal to no bound: every file with known bounds may match.)
            return may_compare(op, lo, hi, v, v)
        if op == "in":
            # Known bounds mean no NaN in the file: a NaN in the list matches nothing there.
            values = _without_nan(v)[0]
            r = self._any_in_range(values, lo, hi, t) if values else pc.or_(pc.is_null(lo), pc.is_null(hi))
        elif op == "not_in":
            r = pc.invert(pc.and_kleene(pc.equal(lo, hi), pc.is_in(lo, value_set=_value_set(v))))
        else:
            raise AssertionError(op)
        return pc.fill_null(r, True)

    def _any_in_range(self, values: tuple, lo: pa.Array, hi: pa.Array, t: pa.DataType) -> pa.Array:
        if len(values) <= _SMALL_IN:
            r = self.false
            for v in values:
                r = pc.or_kleene(r, pc.and_kleene(pc.less_equal(lo, v), pc.greater_equal(hi, v)))
            return r
        # Many values: for each row, binary-search the smallest value >= lo, check it is <= hi.
        vs = _value_set(values)
        vs = vs.take(pc.sort_indices(vs))
        keys = _numpy_keys(vs)
        unknown = pc.or_(lo.is_null(), hi.is_null())
        lo_k = _numpy_keys(lo.fill_null(vs[0]))
        hi_k = _numpy_keys(hi.fill_null(vs[0]))
        idx = np.searchsorted(keys, lo_k, side="left")
        cand = keys[np.minimum(idx, len(keys) - 1)]
        hit = (idx < len(keys)) & np.asarray(cand <= hi_k, dtype=bool)
        return pc.or_(pa.array(hit, type=pa.bool_()), unknown)

    def _leaf(self, name: str, op: str, v: Any) -> pa.Array:
        f = self.schema.field(name)
        fid, t = self.schema.field_id(name), f.type
        lo, hi = self._bounds(C.min_col(fid), C.max_col(fid), t)
        r = self._test(op, v, lo, hi, t)
        for pf in self.by_source.get(fid, ()):
            proj = project_inclusive(pf, op, v, t)
            if proj is None:
                continue
            pt = transform_result_type(pf.transform, t)
            plo, phi = self._bounds(C.pmin_col(pf.field_id), C.pmax_col(pf.field_id), pt)
            pr = self._test(proj[0], proj[1], plo, phi, pt)
            foreign = self._foreign(pf)
            if foreign is not None:
                pr = pc.or_(pr, foreign)
            r = pc.and_(r, pr)
        return r

    def visit_true(self):
        return self.true

    def visit_false(self):
        return self.false

    def visit_and(self, l, r):
        return pc.and_(l, r)

    def visit_or(self, l, r):
        return pc.or_(l, r)

    def visit_not(self, c):
        raise AssertionError("pruning works on negation normal form")

    def visit_compare(self, e: Compare):
        return self._leaf(e.name, e.op, e.value)

    def visit_in(self, e: In):
        return self._leaf(e.name, "in", e.values)

    def visit_not_in(self, e: NotIn):
        return self._leaf(e.name, "not_in", e.values)

    def visit_is_null(self, e: IsNull):
        nulls = self._col(C.nulls_col(self.schema.field_id(e.name)), pa.int64())
        return pc.fill_null(pc.greater(nulls, 0), True)

    def visit_predicate(self, e: Predicate):
        from lamina.expr.bounds import may_be_true

        return may_be_true(e.term, self)

    def visit_not_null(self, e: NotNull):
        nulls = self._col(C.nulls_col(self.schema.field_id(e.name)), pa.int64())
        rows = self._col("record_count", pa.int64())
        r = pc.fill_null(pc.less(nulls, rows), True)
        if "dv_cardinality" in self.m.column_names:
            # record_count excludes deleted rows but a null count may include them: no conclusion.
            deleted = pc.fill_null(pc.greater(self._col("dv_cardinality", pa.int64()), 0), False)
            r = pc.or_(r, deleted)
        return r


def may_match(
    expr: Expr | str | None,
    manifest: pa.Table,
    schema: Schema,
    spec: PartitionSpec | Sequence[PartitionSpec] | None = None,
) -> pa.BooleanArray:
    """For each manifest row, False only if the file/leaf it describes surely has no row matching ``expr``.

    Uses ``min_<fid>``/``max_<fid>``/``nulls_<fid>``/``record_count`` and, for the fields of
    ``spec`` (one spec, or every spec the table has had), ``pmin_<pid>``/``pmax_<pid>``;
    absent columns and null values mean unknown. With several specs and a ``spec_id``
    column, a data file is never pruned by a field its own spec lacks.
    Binds ``expr`` itself (InvalidPredicate on unknown columns or bad literals).
    """
    specs = (spec,) if isinstance(spec, PartitionSpec) else tuple(spec or ())
    out = visit(bind(expr, schema), _Pruner(manifest, schema, specs))
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    return out
