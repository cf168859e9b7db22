"""``delete`` and ``update`` from Spark: the matching rows found by Spark's native reader,
deleted by deletion vectors (or rewritten files), updated rows written by Spark's native
writer; one version (the steps: ``lamina.spark.rowlevel``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from lamina.commit import CommitResult
from lamina.errors import InvalidArgument
from lamina.expr import AlwaysTrue, Expr, bind, to_expr
from lamina.spark._filters import to_spark_column
from lamina.spark._types import quoted as _q
from lamina.spark._types import spark_type
from lamina.spark.read import FILE, ROW, with_row_lineage
from lamina.spark.rowlevel import (
    DEFAULT_ATTEMPTS,
    _as_column,
    _commit,
    _native_table,
    _selected,
    _with_attempts,
    _write_rows,
    read_with_positions,
)
from lamina.spec.lineage import LINEAGE_COLUMNS, ROW_ID, has_lineage
from lamina.table import WriteSession

# -- delete -------------------------------------------------------------------------------------


def delete(
    spark: Any,
    target: Any,
    where: Any,
    *,
    mode: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    max_attempts: int = DEFAULT_ATTEMPTS,
    catalog: Any = None,
    branch: str | None = None,
) -> CommitResult | None:
    """Delete the rows matching ``where`` with Spark, in one version (its ``CommitResult``,
    whose ``version`` is None if no row matched: nothing committed).

    ``where``: a Lamina predicate (text or ``lamina.expr``): files whose statistics cannot match
    are not read, and the matching rows of the others are found by Spark's native reader with
    Lamina's semantics; or a Spark Column (Delta's ``delete(condition)``, evaluated by Spark;
    every file is read). They become deletion vectors (``mode``/``write.delete.mode``
    copy-on-write: rewritten files) as in ``Table.delete``. ``branch``: on that branch.
    ``target`` ``tx.table(ident)`` of a transaction: queued into it (returns None), as its
    first change to that table.
    """
    from pyspark.sql import Column

    if where is None:
        raise InvalidArgument("delete needs a predicate; to remove every row use overwrite with an empty table")
    table, tx = _native_table(spark, target, storage_options, catalog, branch)
    now = datetime.datetime.now(datetime.UTC)  # current_date / current_timestamp: once per statement
    spark_where = where if isinstance(where, Column) else None

    def run(session: WriteSession) -> CommitResult | None:
        pred = bind(AlwaysTrue() if spark_where is not None else to_expr(where), table.metadata.schema, now=now)
        entries = table.scan(where=pred).plan(all_columns=True).entries
        df = read_with_positions(spark, table, entries)
        cond = spark_where if spark_where is not None else to_spark_column(pred, table.metadata.schema)
        if cond is not None:
            df = df.where(cond)
        result, _ = _commit(session, "delete", pred, entries, _selected(df, entries), mode, {})
        return result

    return _with_attempts(table, max_attempts, run, tx)


# -- update -------------------------------------------------------------------------------------


def update(
    spark: Any,
    target: Any,
    where: Any = None,
    set: Mapping[str, Any] | None = None,
    *,
    mode: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    max_attempts: int = DEFAULT_ATTEMPTS,
    catalog: Any = None,
    branch: str | None = None,
) -> CommitResult | None:
    """Set columns of the rows matching ``where`` (every row if None) with Spark, in one version
    (its ``CommitResult``; ``version`` None if no row matched: nothing committed). Delta's ``DeltaTable.update(condition, set)``.

    ``set``: column -> Spark SQL expression text (``"amount * 1.1"``, over the table's columns),
    a Spark Column, or a Python literal; each value is cast to its column's type, as a merge's.
    ``where``: a Lamina predicate (text or ``lamina.expr``, as ``delete``'s: it prunes files and
    selects rows with Lamina's semantics), or a Spark Column (evaluated by Spark; every file is
    read). The matching rows are found by Spark's native reader, written anew by its native
    writer (they keep their ``_row_id``) and deleted by deletion vectors (``mode`` /
    ``write.delete.mode`` copy-on-write: rewritten files), as ``Table.update``; a concurrent
    change to those files recomputes it on the newest version (``max_attempts``).
    ``branch``: on that branch; ``target`` ``tx.table(ident)``: queued into that transaction
    (returns None), as its first change to that table.
    """
    from pyspark.sql import Column

    if not set:
        raise InvalidArgument("update needs set={column: Spark SQL expression, Column or literal}")
    table, tx = _native_table(spark, target, storage_options, catalog, branch)
    for c in set:
        table.metadata.schema.field(c)  # SchemaMismatch naming the columns, before Spark runs
    spark_where = where if isinstance(where, Column) else None

    def run(session: WriteSession) -> CommitResult | None:
        schema = table.metadata.schema
        pred = bind(AlwaysTrue() if where is None or spark_where is not None else to_expr(where), schema)
        entries = table.scan(where=pred).plan(all_columns=True).entries
        cond = spark_where if spark_where is not None else to_spark_column(pred, schema)
        return _update_rows(spark, session, pred, entries, cond, set, mode)

    return _with_attempts(table, max_attempts, run, tx)


def _update_rows(
    spark: Any,
    session: WriteSession,
    pred: Expr,
    entries: pa.Table,
    cond: Any,
    assignments: Mapping[str, Any],
    mode: str | None,
) -> CommitResult | None:
    """One attempt of ``update``: the rows of the planned files ``entries`` that ``cond`` (a
    Spark Column, None: every row) selects, rewritten with ``assignments`` into the session's
    files, their positions committed as the rows deleted."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    table = session.table
    lineage = has_lineage(session.metadata)
    rows = read_with_positions(spark, table, entries, lineage, resolve_lineage=False)
    if cond is not None:
        rows = rows.where(cond)
    values = [
        (
            _as_column(assignments[f.name]).cast(spark_type(f.type, f.name))
            if f.name in assignments
            else F.col(_q(f.name))
        ).alias(f.name)
        for f in table.schema
    ]
    changed = rows.select(F.col(FILE), F.col(ROW), *values, *([F.col(ROW_ID)] if lineage else []))
    if lineage and entries.num_rows:  # the ids of the selected rows only (a join by file)
        changed = with_row_lineage(spark, changed, table.io, entries)
    changed = changed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        found = _selected(changed, entries)
        if found.rows:  # their _last_updated_version is left null: the new version's
            _write_rows(
                changed.select(
                    *[_q(f.name) for f in table.schema],
                    *([ROW_ID, F.lit(None).cast("long").alias(LINEAGE_COLUMNS[1])] if lineage else []),
                ),
                session,
                lineage,
            )
        result, _ = _commit(session, "update", pred, entries, found, mode, {"rows_updated": found.rows})
    finally:
        changed.unpersist()
    return result
