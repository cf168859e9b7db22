"""``merge`` from Spark: a source DataFrame merged into a table by Spark joins, one version
(the steps: ``lamina.spark.rowlevel``); small sources of whole-row clauses by the Arrow
merge on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import CommitResult
from lamina.errors import InvalidArgument
from lamina.expr import AlwaysTrue, Expr, and_, bind
from lamina.operations import MergeResult
from lamina.operations.rowlevel.delta import check_mode
from lamina.operations.rowlevel.keys import key_range
from lamina.operations.rowlevel.merge import MergeClauses
from lamina.operations.rowlevel.source import SourceRead
from lamina.spark._collect import collect_arrow
from lamina.spark._types import quoted as _q
from lamina.spark._types import spark_type
from lamina.spark.read import FILE, ROW, with_row_lineage
from lamina.spark.rowlevel import (
    DEFAULT_ATTEMPTS,
    _as_column,
    _Clock,
    _commit,
    _cond,
    _native_table,
    _selected,
    _with_attempts,
    _write_rows,
    read_with_positions,
)
from lamina.spec.lineage import LINEAGE_COLUMNS, ROW_ID, has_lineage
from lamina.table import WriteSession

ACTION = "__lamina_action"
# Which rows a merge clause takes: target rows matched by a source row, source rows matched by
# none, target rows matched by none.
MATCHED, NOT_MATCHED, BY_SOURCE = "matched", "not matched", "not matched by source"
# Sources up to this many rows are broadcast: the target files are streamed through the join,
# never shuffled. Larger sources use Spark's own join choice (sort-merge: both sides shuffled).
DEFAULT_BROADCAST_ROWS = 2_000_000
# Sources up to this many rows, merged by clauses that take whole rows (update_all, insert_all,
# delete; no condition, no expression), are merged on the driver by the Arrow merge
# (``Table.merge``): it reads only the target's keys, where the Spark job scans every target
# row with its file path and position. Such a source is collected to the driver either way
# (a broadcast is), and both give the same rows (tests/spark/test_spark_merge.py runs both).
DEFAULT_DRIVER_ROWS = 2_000_000


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
        commit = commit or CommitResult(None)  # (None: queued into a transaction, which commits it)
        return MergeResult(
            version=commit.version,
            operation=commit.operation,
            metrics=commit.metrics,
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
