"""Delete and update by a predicate: the operations ``Table.delete``/``Table.update`` and a
transaction's commit, and the per-file functions (``FileFn``) that find and rewrite the rows.

A ``RowDelta`` (``rowlevel.delta``) runs them on each base; a merge makes its own (``rowlevel.merge``)
and shares ``check_assignments`` with the update.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.data.inflight import new_write_id
from lamina.expr import AlwaysTrue, Expr, filter_rows, referenced_columns, to_arrow_filter
from lamina.expr.values import as_column
from lamina.operations.rowlevel.delta import RowDelta
from lamina.operations.rowlevel.outcome import FILE, POS, FileFn, FileOutcome, _keep_row_ids
from lamina.operations.schema import PlannedColumns
from lamina.spec.schema import Schema


def file_fn_delete(filt: Any) -> FileFn:
    def fn(rows: pa.Table) -> FileOutcome:
        hit = filter_rows(rows, filt, "the delete's predicate").select([POS, FILE])
        return FileOutcome(hit.column(POS).to_numpy(), delete_file=hit.column(FILE).to_numpy())

    return fn


def delete_rows(schema: Schema, pred: Expr, mode: str) -> RowDelta:
    """The delete of the rows ``pred`` (bound to ``schema``) selects: ``Transaction.delete``'s
    operation, and what a read through a catalog transaction could see (lamina.catalog.transaction:
    its rows, never deleted, checked with ``rows_changed_since``)."""
    names = referenced_columns(pred)
    filt = to_arrow_filter(pred) if not isinstance(pred, AlwaysTrue) else pc.scalar(True)
    return RowDelta(
        "delete",
        pred,
        sorted(names) or [schema.names[0]],
        file_fn_delete(filt),
        mode,
        new_write_id(),
        planned=PlannedColumns.of(schema, names),
        where=pred,
    )


def file_fn_update(filt: Any, assignments: dict[str, Any], schema: pa.Schema, cast: str | None = None) -> FileFn:
    """An update's file_fn: the rows ``filt`` selects, rewritten by ``updated_rows_fn``."""
    rewrite = updated_rows_fn(assignments, schema, cast)
    return lambda rows: rewrite(filter_rows(rows, filt, "the update's predicate"))


def check_assignments(
    assignments: dict[str, Any], schema: pa.Schema, what: str, cast: str | None = None, rows: pa.Table | None = None
) -> None:
    """Refuse now (SchemaMismatch) the ``assignments`` (column -> SQL text or literal) whose
    values' type a column cannot store (``lamina.spec.write_types``), evaluated on no rows of
    ``rows`` (default: the table's columns); callables are checked when they run."""
    empty = (rows if rows is not None else schema.empty_table()).slice(0, 0)
    for name, value in assignments.items():
        if not callable(value):
            as_column(value, empty, schema.field(name).type, f"{what} of {name!r}", name, cast)


def updated_rows_fn(assignments: dict[str, Any], schema: pa.Schema, cast: str | None = None) -> FileFn:
    """For rows an update selects: each deleted, and written anew with ``assignments`` applied
    (SQL assignments: ``lamina.spec.write_types``)."""

    def fn(hit: pa.Table) -> FileOutcome:
        cols = []
        for f in schema:
            if f.name in assignments:
                cols.append(as_column(assignments[f.name], hit, f.type, f"update of column {f.name!r}", f.name, cast))
            else:
                cols.append(hit.column(f.name))
        new = _keep_row_ids(pa.table(cols, schema=schema), hit).append_column(FILE, hit.column(FILE))
        return FileOutcome(hit.column(POS).to_numpy(), new, delete_file=hit.column(FILE).to_numpy())

    return fn
