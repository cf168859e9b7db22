"""Row-level changes from Spark: what ``merge``, ``update`` and ``delete`` share.

``delete`` and ``update`` are in ``lamina.spark.delete_update``, ``merge`` in
``lamina.spark.merge_into``; this module holds the steps they share, executed with Spark joins.

The driver plans, Spark computes, the driver commits ONE version (local tables, and ``s3://``
tables where the session has S3A: ``lamina.spark.s3a``):

1. merge: one Spark aggregation gives the source keys' bounds; the core planner keeps
   only the target files whose statistics can hold them (every file with a
   not-matched-by-source clause; delete, update: the predicate prunes).
2. Those files are read with Spark's native Parquet reader with ``_metadata.file_path``
   and ``_metadata.row_index`` (rows of existing deletion vectors removed first).
3. merge: an inner join of the target rows (aliased ``target``) with the source
   (``source``; broadcast when small, so the target is never shuffled), matched
   clauses as Spark expressions (first matching clause wins), persisted once; the
   source rows whose key matched nothing (left-anti join on the matched keys) go
   through the not-matched clauses, the target rows whose key matched nothing (a left-anti
   join with the source keys) through the not-matched-by-source clauses, staged with the
   matched rows. The (file, row index) of every matched or changed row is folded, in the
   tasks, into one deletion bitmap per file (``lamina.spark._file_positions``), and only
   those reach the driver (a position matched twice: error, nothing committed); updated
   and inserted rows are written by Spark's native writer into ``data/spark-<write id>/``.
4. The positions become deletion vectors merged with existing ones (or, in
   copy-on-write mode, rewrites of the touched files), committed as one version by the
   attempt's engine write session (``WriteSession.commit_row_delta``). If a concurrent
   commit changed a file the change may affect, the whole computation is redone on the
   newest version in a new session (``max_attempts``), then ``CommitConflict``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

import lamina
from lamina.commit import CommitResult
from lamina.data.deletes import file_key
from lamina.errors import InvalidArgument, StaleRowDelta
from lamina.expr import Expr
from lamina.expr.values import SqlValue
from lamina.operations import PositionDelta
from lamina.spark._file_positions import FilePositions, collect_positions
from lamina.spark._target import TableRef
from lamina.spark._types import check_writable, spark_schema
from lamina.spark.read import FILE, ROW, file_uris, native_read, spark_file_path, with_row_lineage, without_deleted
from lamina.spark.s3a import native_root
from lamina.spark.write import spark_write_files, transaction_of
from lamina.spec.lineage import LINEAGE_COLUMNS, LINEAGE_FIELDS
from lamina.table import WriteSession
from lamina.table.transaction import Transaction

DEFAULT_ATTEMPTS = 5


def _as_column(v: Any) -> Any:
    """A clause value: a Spark Column, SQL expression text, or a Python literal."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if isinstance(v, Column):
        return v
    if isinstance(v, SqlValue):  # (the merge builder's clock rides along: Spark reads its own)
        v = v.text
    if isinstance(v, str):
        return F.expr(v)
    return F.lit(v)


def _cond(c: Any) -> Any:
    from pyspark.sql import functions as F

    return F.lit(True) if c is None else _as_column(c)


def read_with_positions(
    spark: Any, table: lamina.Table, entries: pa.Table, lineage: bool = False, resolve_lineage: bool = True
) -> Any:
    """Live rows of the planned files ``entries`` (all their columns) with ``__lamina_file`` /
    ``__lamina_row`` (``_metadata.file_path`` / ``row_index``); rows deleted by existing DVs
    are removed. ``lineage``: with their ``_row_id`` and ``_last_updated_version`` too; with
    ``resolve_lineage=False`` as the files store them (null where a file stores none: the
    caller resolves them with ``with_row_lineage`` on the rows it keeps, a join by file)."""
    from pyspark.sql import functions as F

    if not entries.num_rows:  # no file can match: an empty relation built in the JVM (no Python job)
        fields = [*table.schema, *(LINEAGE_FIELDS if lineage else ())]
        cols = [F.lit(None).cast(f.dataType).alias(f.name) for f in spark_schema(pa.schema(fields)).fields]
        return spark.range(0).select(*cols, F.lit(None).cast("string").alias(FILE), F.lit(None).cast("long").alias(ROW))
    df = native_read(spark, table.metadata.schema, table.io, entries, positions=True, lineage=lineage)
    with_dv = entries.filter(pc.is_valid(entries.column("dv_path")))
    df = without_deleted(spark, df, table.io, with_dv) if with_dv.num_rows else df
    return with_row_lineage(spark, df, table.io, entries) if lineage and resolve_lineage else df


def _positions(table: lamina.Table, entries: pa.Table, found: FilePositions) -> dict[tuple, BitMap]:
    """Per candidate file (``file_key``), the positions ``found`` selected in it (empty: none)."""
    names = [spark_file_path(u) for u in file_uris(table.io, entries.column("path")).to_pylist()]
    unknown = set(found.taken) - set(names)
    if unknown:
        raise RuntimeError(f"Spark reported a file path that was not planned: {sorted(unknown)[0]}")
    rows = entries.select(["path", "dv_path", "dv_offset"]).to_pylist()
    return {file_key(e): found.taken.get(n, BitMap()) for e, n in zip(rows, names)}


def _commit(
    session: WriteSession,
    operation: str,
    prune: Expr,
    entries: pa.Table,
    found: FilePositions,
    mode: str | None,
    counts: dict[str, int],
) -> tuple[CommitResult | None, PositionDelta]:
    """Commit the positions ``found`` selected in the planned files ``entries``, and the files
    added to ``session``, as one version (StaleRowDelta if the files changed since the session's base)."""
    return session.commit_row_delta(
        operation, prune, _positions(session.table, entries, found), mode=mode, counts=counts
    )


def _selected(df: Any, entries: pa.Table, code_col: str | None = None, n_codes: int = 0) -> FilePositions:
    """The positions of ``df``'s rows (FILE, ROW), one bitmap per file built on the executors
    (lamina.spark._file_positions); nothing to run when no file was planned."""
    if not entries.num_rows:
        return FilePositions(counts=np.zeros(n_codes + 1, np.int64))
    return collect_positions(df, FILE, ROW, code_col, n_codes)


def _write_rows(df: Any, session: WriteSession, lineage: bool = False) -> None:
    """Write ``df`` (the table's columns; with ``lineage``, then the row lineage columns) with
    Spark's native writer into the session's directory and add its (non-empty) files to the session."""
    from pyspark.sql.types import StructType

    table, vm = session.table, session.metadata
    schema, spec = vm.schema, vm.partition_spec
    lineage_cols = set(LINEAGE_COLUMNS) if lineage else set()
    data = StructType([f for f in df.schema.fields if f.name not in lineage_cols])
    plan = check_writable(data, schema, table.uri)
    root = native_root(df.sparkSession, table.io, "written")
    assert root is not None  # (checked when the change started: _native_table)
    # a union may leave empty part files: dropped
    session.add_files(
        spark_write_files(df, table.io, root, session.data_dir, plan, schema, spec, None, table.properties, lineage)
    )


def _with_attempts(table: lamina.Table, attempts: int, run: Any, tx: Transaction | None = None) -> Any:
    """Run ``run(session)`` in a write session on the table's version; on a stale base, again
    in a new session on the newest version. A failed attempt's session deletes its files.
    With ``tx`` (a transaction's changes to ``table``) once, queued into it: the transaction
    re-applies the change if the table moves before it commits, or raises (StaleRowDelta, or
    for a catalog transaction CatalogTransactionConflict) if files it affects changed."""
    if tx is not None:
        with WriteSession(table, transaction=tx) as session:
            return run(session)
    for attempt in range(attempts):
        with WriteSession(table) as session:
            try:
                return run(session)
            except StaleRowDelta:
                if attempt == attempts - 1:
                    raise
        table.refresh()
    raise AssertionError("unreachable")


def _native_table(
    spark: Any, target: Any, storage_options: Mapping[str, Any] | None, catalog: Any = None, branch: str | None = None
) -> tuple[lamina.Table, Transaction | None]:
    """The target table (a location, an open Table, or an identifier with ``catalog``; the
    handle on ``branch`` of it, if given), one Spark's native reader and writer reach (local,
    or S3 with S3A: ``lamina.spark.s3a``); and the transaction when the target is a
    transaction's changes to a table (``tx.table(ident)``)."""
    tx = transaction_of(spark, target, catalog=catalog, storage_options=storage_options, branch=branch)
    if tx is not None:
        if tx.operations:  # the positions are computed on the table's version, without them
            raise InvalidArgument(
                f"a Spark merge or delete in a transaction must be the first change to {tx.table.uri} in it: "
                "it finds its rows in the table's committed version, which holds none of the changes queued before it"
            )
        return tx.table, tx
    table = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch).open()
    if native_root(spark, table.io, "changed") is None:
        raise InvalidArgument(
            f"lamina.spark merge/update/delete use Spark's native Parquet reader and writer, which do not reach "
            f"{table.uri} here (the log says why); use the Arrow path (Table.merge / Table.update / Table.delete)"
        )
    table.check_writable()  # before any file is written
    return table, None


class _Clock:
    """Adds each phase's seconds to ``out`` (a recomputed attempt adds to its phases)."""

    def __init__(self, out: dict[str, float]) -> None:
        self.out, self.t = out, time.perf_counter()

    def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        self.out[phase] = self.out.get(phase, 0.0) + now - self.t
        self.t = now
