"""Row-level changes from Spark: ``merge``, ``update`` and ``delete`` executed with Spark joins.

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

import datetime
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

import lamina
from lamina.commit import CommitResult
from lamina.data.deletes import file_key
from lamina.errors import InvalidArgument, StaleRowDelta
from lamina.expr import AlwaysTrue, Expr, and_, bind, to_expr
from lamina.expr.values import SqlValue
from lamina.operations import MergeResult, PositionDelta
from lamina.operations.rowlevel.delta import check_mode
from lamina.operations.rowlevel.keys import key_range
from lamina.operations.rowlevel.merge import MergeClauses
from lamina.operations.rowlevel.source import SourceRead
from lamina.spark._collect import collect_arrow
from lamina.spark._file_positions import FilePositions, collect_positions
from lamina.spark._filters import to_spark_column
from lamina.spark._target import TableRef
from lamina.spark._types import check_writable, spark_schema, spark_type
from lamina.spark._types import quoted as _q
from lamina.spark.read import FILE, ROW, file_uris, native_read, spark_file_path, with_row_lineage, without_deleted
from lamina.spark.s3a import native_root
from lamina.spark.write import spark_write_files, transaction_of
from lamina.spec.lineage import LINEAGE_COLUMNS, LINEAGE_FIELDS, ROW_ID, has_lineage
from lamina.table import WriteSession
from lamina.table.transaction import Transaction

ACTION = "__lamina_action"
# Which rows a merge clause takes: target rows matched by a source row, source rows matched by
# none, target rows matched by none.
MATCHED, NOT_MATCHED, BY_SOURCE = "matched", "not matched", "not matched by source"
DEFAULT_ATTEMPTS = 5
# Sources up to this many rows are broadcast: the target files are streamed through the join,
# never shuffled. Larger sources use Spark's own join choice (sort-merge: both sides shuffled).
DEFAULT_BROADCAST_ROWS = 2_000_000
# Sources up to this many rows, merged by clauses that take whole rows (update_all, insert_all,
# delete; no condition, no expression), are merged on the driver by the Arrow merge
# (``Table.merge``): it reads only the target's keys, where the Spark job scans every target
# row with its file path and position. Such a source is collected to the driver either way
# (a broadcast is), and both give the same rows (tests/spark/test_spark_merge.py runs both).
DEFAULT_DRIVER_ROWS = 2_000_000


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


# -- merge --------------------------------------------------------------------------------------


class SparkMergeBuilder(MergeClauses):
    """``lamina.spark.merge(uri, source_df, on="id").when_matched_update(...)...execute()``.

    The clause API of ``Table.merge`` (Delta semantics): matched clauses are tried in
    order, the first whose condition holds applies; a matched target row no clause
    takes stays; unmatched source rows go through the not-matched clauses, target rows no
    source row matches through the not-matched-by-source ones (over the target's columns
    only); NULL keys never match. Conditions and values are Spark SQL text (or Columns, or literals for
    values) over ``source.<col>`` and ``target.<col>``; a bare name means the target's
    column (the source's columns are reachable only as ``source.<col>``).
    """

    def __init__(
        self,
        target: Any,
        source: Any,
        on: str | Sequence[str] = "id",
        *,
        mode: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        max_attempts: int = DEFAULT_ATTEMPTS,
        broadcast_rows: int = DEFAULT_BROADCAST_ROWS,
        catalog: Any = None,
        branch: str | None = None,
        driver_rows: int = DEFAULT_DRIVER_ROWS,
    ) -> None:
        self.table, self.transaction = _native_table(source.sparkSession, target, storage_options, catalog, branch)
        self.driver_rows = driver_rows
        self.source = source
        self._start(self.table.metadata.schema, on, source.columns)
        self.mode = check_mode(mode) if mode is not None else None
        self.max_attempts = max_attempts
        self.timings: dict[str, float] = {}  # seconds per phase of the last execute(), summed over attempts
        self.broadcast_rows = broadcast_rows
        self._source_rows = 0

    # -- execution ---------------------------------------------------------------------------

    def _bounds(self) -> Expr:
        """The source keys' bounds as a predicate (one Spark aggregation): ``key_range`` of the
        non-NaN keys' min and max, and whether a key is NaN (Spark's max would be NaN then,
        which would keep every file with a key above the min)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import DoubleType, FloatType

        aggs = []
        for i, k in enumerate(self.on):
            c = F.col(_q(k))
            floating = isinstance(self.source.schema[k].dataType, (DoubleType, FloatType))
            number = F.when(~F.isnan(c), c) if floating else c
            aggs += [
                F.min(number).alias(f"lo{i}"),
                F.max(number).alias(f"hi{i}"),
                (F.bool_or(F.isnan(c)) if floating else F.lit(False)).alias(f"nan{i}"),
            ]
        row = self.source.agg(*aggs, F.count(F.lit(1)).alias("n")).collect()[0]
        self._source_rows = int(row["n"])
        terms = [key_range(k, row[f"lo{i}"], row[f"hi{i}"], bool(row[f"nan{i}"])) for i, k in enumerate(self.on)]
        return bind(and_(*terms), self.table.metadata.schema)

    def _run(self, session: WriteSession) -> MergeResult:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        table = self.table
        spark = self.source.sparkSession
        tschema = table.schema
        clock = _Clock(self.timings)
        prune = self._bounds()
        if self.not_matched_by_source:  # the rows the source does not match are anywhere
            prune = bind(AlwaysTrue(), table.metadata.schema)
        clock("bounds")
        entries = table.scan(where=prune).plan(all_columns=True).entries
        clock("plan")
        # Updated rows keep their row ids (their _last_updated_version is the new version's).
        lineage = has_lineage(session.metadata)
        # Row ids are resolved (stored, else first_row_id + position: a join by file) for the
        # matched rows only, after the join: not for every row the target files hold.
        target = read_with_positions(spark, table, entries, lineage, resolve_lineage=False).alias("target")
        # The source as one struct column "source": `source.x` resolves to its field, bare
        # names to the target's columns; the keys are copied out for the join.
        skeys = [f"__lamina_key{i}" for i in range(len(self.on))]
        src = self.source.select(
            F.struct(*[F.col(_q(c)) for c in self.source.columns]).alias("source"),
            *[F.col(_q(k)).alias(sk) for k, sk in zip(self.on, skeys)],
        )
        cond = None
        for k, sk in zip(self.on, skeys):
            c = src[sk] == F.col(f"target.{_q(k)}")
            cond = c if cond is None else cond & c
        small = self._source_rows <= self.broadcast_rows
        bsrc = F.broadcast(src) if small else src
        codes = [
            (n, side, cl)
            for n, (side, cl) in enumerate(
                [(MATCHED, cl) for cl in self.matched]
                + [(NOT_MATCHED, cl) for cl in self.not_matched]
                + [(BY_SOURCE, cl) for cl in self.not_matched_by_source]
            )
        ]

        def action(side: str) -> Any:
            a = None
            for n, is_m, cl in codes:
                if is_m == side:
                    c = _cond(cl.condition)
                    a = F.when(c, F.lit(n)) if a is None else a.when(c, F.lit(n))
            return a if a is not None else F.lit(None).cast("int")

        defaults = self.schema.write_defaults

        def out_cols(side: str) -> list:
            cols = []
            for f in tschema:
                want = spark_type(f.type, f.name)
                v = None
                for n, is_m, cl in codes:
                    if cl.kind == "delete" or is_m != side:
                        continue
                    if cl.values is None and (cl.kind == "update" or f.name in self.source.columns):
                        e = F.col(f"source.{_q(f.name)}")
                    elif cl.values is not None and f.name in cl.values:
                        e = _as_column(cl.values[f.name])
                    elif cl.kind == "update":
                        e = F.col(f"target.{_q(f.name)}")
                    else:  # an insert that does not set the column: its write default, else null
                        e = F.lit(defaults[f.name].as_py()) if f.name in defaults else F.lit(None)
                    e = e.cast(want)
                    v = F.when(F.col(ACTION) == n, e) if v is None else v.when(F.col(ACTION) == n, e)
                cols.append((v if v is not None else F.lit(None).cast(want)).alias(f.name))
            return cols

        # Matched rows: the target files joined with the (broadcast, when small) source, so the
        # target is streamed, never shuffled; clauses and new values in one projection, persisted.
        staged = (
            target.join(bsrc, on=cond, how="inner")
            .withColumn(ACTION, action(MATCHED))
            .select(
                F.col(f"target.{FILE}").alias(FILE),
                F.col(f"target.{ROW}").alias(ROW),
                F.col(ACTION),
                *[F.col(sk) for sk in skeys],
                *out_cols(MATCHED),
                *([F.col(f"target.{ROW_ID}").alias(ROW_ID)] if lineage else []),
            )
        )
        if self.not_matched_by_source:
            staged = staged.unionByName(
                self._not_matched_by_source(target, src, skeys, small, action(BY_SOURCE), out_cols(BY_SOURCE), lineage)
            )
        if lineage and entries.num_rows:
            staged = with_row_lineage(spark, staged, table.io, entries)
        staged = staged.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            found = _selected(staged, entries, ACTION, len(codes))
            clock("join+collect")
            if found.duplicates:
                raise InvalidArgument(
                    f"merge: a target row matched more than one source row (duplicate keys {self.on} in the source); "
                    "deduplicate the source. Nothing was committed."
                )
            kind = {n: cl.kind for n, _, cl in codes}
            upd = sum(int(found.counts[n + 1]) for n, k in kind.items() if k == "update")
            dele = sum(int(found.counts[n + 1]) for n, k in kind.items() if k == "delete")
            ins_codes = [n for n, side, cl in codes if side == NOT_MATCHED]
            upd_codes = [n for n, k in kind.items() if k == "update"]
            names = [_q(f.name) for f in tschema]
            no_id = [F.lit(None).cast("long").alias(c) for c in LINEAGE_COLUMNS]  # new rows: the committer's ids
            new_rows = staged.where(F.col(ACTION).isin(upd_codes)).select(
                *names, *([ROW_ID, no_id[1]] if lineage else [])
            )
            if ins_codes:  # source rows whose key matched nothing (NULL keys never match)
                mkeys = staged.select(*skeys)
                unmatched = src.join(F.broadcast(mkeys) if small else mkeys, on=skeys, how="left_anti")
                ins = unmatched.withColumn(ACTION, action(NOT_MATCHED)).where(F.col(ACTION).isNotNull())
                new_rows = new_rows.unionByName(ins.select(*out_cols(NOT_MATCHED), *(no_id if lineage else [])))
            if upd_codes or ins_codes:
                _write_rows(new_rows, session, lineage)
            clock("write")
            written = session.entries
            inserted = int(pc.sum(written.column("record_count")).as_py()) - upd if written.num_rows else 0
            commit, op = _commit(
                session, "merge", prune, entries, found, self.mode, {"rows_updated": upd, "rows_inserted": inserted}
            )
            clock("commit")
        finally:
            staged.unpersist()
        return MergeResult(
            version=None if commit is None else commit.version,
            operation=None if commit is None else commit.operation,
            metrics=CommitResult(None).metrics if commit is None else commit.metrics,
            rows_updated=upd,
            rows_deleted=dele,
            rows_inserted=inserted,
            files_scanned=entries.num_rows,
            files_touched=op.last_stats.get("files_touched", 0),
        )

    def _not_matched_by_source(
        self, target: Any, src: Any, skeys: list[str], small: bool, action: Any, out_cols: list, lineage: bool
    ) -> Any:
        """The target rows no source row matches (a left anti join on the keys: a NULL key matches
        nothing) that a not-matched-by-source clause takes (``action``), as the matched rows are
        staged: FILE, ROW, ACTION, the (null) source keys, the new values (``out_cols``, over the
        target's columns only), the stored ``_row_id``."""
        from pyspark.sql import functions as F

        keys = src.select(*skeys)
        cond = None
        for k, sk in zip(self.on, skeys):
            c = F.col(sk) == F.col(f"target.{_q(k)}")
            cond = c if cond is None else cond & c
        rows = target.join(F.broadcast(keys) if small else keys, on=cond, how="left_anti")
        no_keys = [F.lit(None).cast(self.source.schema[k].dataType).alias(sk) for k, sk in zip(self.on, skeys)]
        return (
            rows.withColumn(ACTION, action)
            .where(F.col(ACTION).isNotNull())
            .select(F.col(FILE), F.col(ROW), F.col(ACTION), *no_keys, *out_cols, *([F.col(ROW_ID)] if lineage else []))
        )

    def execute(self) -> MergeResult:
        self._check_clauses()
        if self.transaction is None:
            self.table.refresh()
        self.timings.clear()
        done = self._driver_merge()
        if done is not None:
            return done
        return _with_attempts(self.table, self.max_attempts, self._run, self.transaction)

    def _driver_merge(self) -> MergeResult | None:
        """The merge by the Arrow path on the driver (see DEFAULT_DRIVER_ROWS), or None where
        it would not give what the Spark job gives: a transaction's change, a clause with a
        condition or expressions (Spark SQL, which the Arrow path does not speak), a source
        above ``driver_rows``, or a source column whose type differs from the table's other
        than by the representation Spark's Arrow export picks."""
        if self.transaction is not None or self.driver_rows <= 0:
            return None
        clauses = [*self.matched, *self.not_matched, *self.not_matched_by_source]
        if any(cl.condition is not None or cl.values is not None for cl in clauses):
            return None
        clock = _Clock(self.timings)
        source, how = collect_arrow(self.source, self.driver_rows, keys=self.on)
        clock(f"collect ({how})")
        if source is None:
            return None
        source = _as_table_types(source, self.table.metadata.schema.arrow)
        if source is None:
            return None
        if isinstance(source, SourceRead) and (
            source.staged is None or not source.staged.copyable_to(self.table.metadata)
        ):
            source.start()  # its other columns will be read: from now on, while it matches
        arrow = self.table.merge(source, self.on, mode=self.mode)
        arrow.matched, arrow.not_matched = list(self.matched), list(self.not_matched)
        arrow.not_matched_by_source = list(self.not_matched_by_source)
        result = arrow.execute()
        clock("arrow merge")
        return result


def _as_table_types(source: pa.Table | SourceRead, schema: pa.Schema) -> pa.Table | SourceRead | None:
    """``source``'s columns the table has, as the table's types where only the representation
    differs (large or view strings and binaries; a timestamp's zone name, same instants); None
    if a column's type differs otherwise (the Spark job casts as Spark does: left to it).
    A source being read: its keys so now, its rows once read."""
    casts: dict[str, pa.DataType | None] = {}  # column -> the type to cast it to (None: as it is)
    for f in schema:
        if f.name not in source.schema.names:
            continue  # an insert_all the source lacks a defaulted column for: the Arrow merge fills it
        have = source.schema.field(f.name).type
        if not have.equals(f.type):
            same = (
                (pa.types.is_string(f.type) and (pa.types.is_large_string(have) or pa.types.is_string_view(have)))
                or (pa.types.is_binary(f.type) and (pa.types.is_large_binary(have) or pa.types.is_binary_view(have)))
                or (
                    pa.types.is_timestamp(f.type)
                    and pa.types.is_timestamp(have)
                    and have.unit == f.type.unit
                    and (have.tz is None) == (f.type.tz is None)
                )
            )
            if not same:
                return None
        casts[f.name] = None if have.equals(f.type) else f.type

    def conformed(t: pa.Table) -> pa.Table:
        return pa.table(
            {
                n: (t.column(n) if typ is None else t.column(n).cast(typ))
                for n, typ in casts.items()
                if n in t.column_names
            }
        )

    if not isinstance(source, SourceRead):
        return conformed(source)
    keys = conformed(source.keys)
    return replace(
        source.map(conformed),
        keys=keys,
        schema=pa.schema(
            [pa.field(n, source.schema.field(n).type if typ is None else typ) for n, typ in casts.items()]
        ),
    )


def merge(
    target: Any,
    source_df: Any,
    on: str | Sequence[str] = "id",
    *,
    mode: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    max_attempts: int = DEFAULT_ATTEMPTS,
    broadcast_rows: int = DEFAULT_BROADCAST_ROWS,
    catalog: Any = None,
    branch: str | None = None,
    driver_rows: int = DEFAULT_DRIVER_ROWS,
) -> SparkMergeBuilder:
    """Start a Spark merge of ``source_df`` into a local table on key column(s) ``on``.

    ``target``: a location, an open Table, or an identifier with ``catalog=`` (see ``lamina.spark._target``),
    or ``tx.table(ident)`` of a transaction (queued into it as its first change to that table:
    the result's version is None; the transaction's commit gives it);
    ``branch``: merge into that branch.
    ``mode``: merge-on-read (default; property ``write.delete.mode``) or copy-on-write.
    ``broadcast_rows``: sources up to this many rows are broadcast to the target scan.
    ``driver_rows``: sources up to this many rows merged by whole-row clauses (update_all,
    insert_all, delete, without conditions) are merged on the driver by ``Table.merge``,
    which reads only the target's keys (0: always the Spark job).
    """
    return SparkMergeBuilder(
        target,
        source_df,
        on,
        mode=mode,
        storage_options=storage_options,
        max_attempts=max_attempts,
        broadcast_rows=broadcast_rows,
        catalog=catalog,
        branch=branch,
        driver_rows=driver_rows,
    )
