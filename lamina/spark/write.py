"""Fast write: Spark's native Parquet writer into a write-id-scoped directory, one Lamina version.

1. Schema first: the DataFrame must fit the table (or becomes a new table's
   schema); a mismatch raises before any file is written.
2. Partition values are computed as *derived* columns (exact Iceberg transforms in
   Spark expressions; murmur3 ``bucket`` through an Arrow UDF running Lamina's own
   transform) and Spark partitions the output by them; the table's columns all stay
   in the data files.
3. Files go to ``data/spark-<write id>/`` (the ``data_dir`` of an engine write session,
   ``lamina.table.WriteSession``) under an in-flight marker, so cleanup knows them
   as this write's until it commits or gives up; each task attempt writes its own,
   uniquely named, and only the committed attempts' files are handed back
   (``lamina.spark._native_write``: write, then register; no renames, on any store).
4. The driver reads the new files' footers (size, rows, bounds, null counts) and the
   session commits them as ONE version. A failed job, a rejected row or a lost commit race
   that cannot be resolved leaves the table as it was and removes the files.

Local tables and ``s3://`` tables where the session has Hadoop's S3A connector
(``lamina.spark.s3a``) take this path; other stores go through the Python data source.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.commit import CommitResult
from lamina.commit.checks import require_app_transactions_new
from lamina.data.inflight import discard_writes, new_write_id, register_write
from lamina.errors import InvalidArgument, SchemaMismatch, TransactionAlreadyCommitted
from lamina.expr import Expr, bind, to_expr
from lamina.io import FileIO
from lamina.spark._filters import spark_literal, to_spark_column
from lamina.spark._native_write import write_committed
from lamina.spark._stats import file_entries
from lamina.spark._target import TableRef
from lamina.spark._types import arrow_schema, check_writable, spark_schema, spark_type
from lamina.spark._types import quoted as _q
from lamina.spark.s3a import native_root
from lamina.spec.layout import engine_data_dir
from lamina.spec.lineage import LINEAGE_COLUMNS
from lamina.spec.partition import PartitionField, PartitionSpec, check_partition_by, parse_partition_by
from lamina.spec.properties import WriterProperties, check_properties
from lamina.spec.schema import Schema
from lamina.spec.stats import stats_policy
from lamina.table import Table, WriteSession
from lamina.table.engine import merged_schema
from lamina.table.transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql import types as T
    from pyspark.sql._typing import UserDefinedFunctionLike

log = logging.getLogger(__name__)


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set session settings for the duration of the block, then restore them."""
    old = {k: spark.conf.get(k, None) for k in settings}
    for k, value in settings.items():
        spark.conf.set(k, value)
    try:
        yield
    finally:
        for k, was in old.items():
            if was is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, was)


# Parquet as Lamina reads it: INT64 microsecond timestamps (Spark's default is INT96).
_WRITE_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


# --- partition transforms in Spark ----------------------------------------------------------

_US_PER_DAY = 86_400_000_000
_US_PER_HOUR = 3_600_000_000


def _floor_div(x: str, d: int) -> str:
    """SQL for floor(x / d) in exact integer arithmetic (``div`` alone truncates toward zero)."""
    return f"(({x}) - pmod({x}, {d}L)) div {d}L"


def _transform_udf(transform: str, src_type: pa.DataType, result: T.DataType) -> UserDefinedFunctionLike:
    from pyspark.sql.functions import arrow_udf

    def fn(values: pa.Array) -> pa.Array:
        from lamina.spec.transforms import apply_transform

        return apply_transform(transform, values, src_type)

    # A scalar UDF, by fn's type hints: the stubs have no overload without functionType,
    # and passing it makes Spark warn that type hints are preferred.
    return arrow_udf(fn, result)  # type: ignore[call-overload]


def partition_column(pf: PartitionField, schema: Schema) -> Column:
    """A Spark Column equal to ``lamina.spec.transforms.apply_transform`` of partition field ``pf``.

    Temporal transforms work on UTC instants (zone-aware timestamps) or on wall-clock
    values (naive timestamps), never in the session time zone; bucket (Iceberg's
    murmur3) and decimal truncation run Lamina's own transform in an Arrow UDF.
    """
    from pyspark.sql import functions as F

    from lamina.spec.transforms import transform_result_type, truncate_wraps

    src = schema.name_of(pf.source_id)
    t = schema.field(src).type
    q = _q(src)
    name, _, rest = pf.transform.partition("[")
    arg = int(rest.rstrip("]")) if rest else None
    if name == "identity":
        return F.col(q)
    # truncate[W] always has its width (arg is not None)
    wraps = name == "truncate" and arg is not None and pa.types.is_integer(t) and truncate_wraps(t, arg)
    if name == "bucket" or (name == "truncate" and pa.types.is_decimal(t)) or wraps:
        result = spark_type(transform_result_type(pf.transform, t), pf.name)
        return _transform_udf(pf.transform, t, result)(F.col(q))
    if name == "truncate":
        if pa.types.is_integer(t):
            # Where Iceberg's truncation wraps no value around (above), it is the floor.
            v = f"CAST({q} AS BIGINT)"
            result_sql = spark_type(transform_result_type(pf.transform, t), pf.name).simpleString()
            return F.expr(f"CAST({v} - pmod({v}, {arg}L) AS {result_sql})")
        return F.expr(f"substring({q}, 1, {arg})")  # code points for strings, bytes for binary
    if pa.types.is_date(t):
        day = q
    elif t.tz is not None:
        day = f"date_from_unix_date(CAST({_floor_div(f'unix_micros({q})', _US_PER_DAY)} AS INT))"
    else:
        day = f"to_date({q})"  # TIMESTAMP_NTZ -> DATE involves no time zone
    if name == "day":
        return F.expr(day)
    if name == "year":
        return F.expr(f"CAST(year({day}) - 1970 AS INT)")
    if name == "month":
        return F.expr(f"CAST((year({day}) - 1970) * 12 + month({day}) - 1 AS INT)")
    if t.tz is not None:  # hour
        return F.expr(f"CAST({_floor_div(f'unix_micros({q})', _US_PER_HOUR)} AS INT)")
    return F.expr(f"CAST(CAST(unix_date({day}) AS BIGINT) * 24 + hour({q}) AS INT)")


def derived_names(spec: PartitionSpec, columns: Sequence[str]) -> list[str]:
    """Names of the derived partition columns Spark partitions by: the partition field's name,
    suffixed when it would collide (case-insensitively) with a data column (identity always does)."""
    taken = {c.lower() for c in columns}
    out = []
    for pf in spec.fields:
        name = pf.name if pf.transform != "identity" else f"{pf.name}_part"
        while name.lower() in taken:
            name += "_"
        taken.add(name.lower())
        out.append(name)
    return out


# --- the write -----------------------------------------------------------------------------


def _conformed(
    df: DataFrame, plan: list[tuple[str, T.DataType | None, T.DataType]], schema: Schema, keep: Sequence[str] = ()
) -> DataFrame:
    """``df`` as exactly the table's columns, in table order and types (missing ones their
    write default, or null), then its columns ``keep`` (as bigint: the row lineage columns)."""
    from pyspark.sql import functions as F

    cols = []
    for name, have, want in plan:
        if have is None:
            default = schema.write_defaults.get(name)
            cols.append((F.lit(None).cast(want) if default is None else spark_literal(default, name)).alias(name))
        elif have == want:
            cols.append(F.col(_q(name)))
        else:
            cols.append(F.col(_q(name)).cast(want).alias(name))
    return df.select(*cols, *[F.col(_q(c)).cast("long").alias(c) for c in keep])


def physical_columns(schema: Schema) -> list[Column]:
    """The table's columns of a DataFrame with ``schema``'s columns as data files store them:
    under their physical names at every depth (nested renames: a cast, struct casts are
    positional), with their Parquet field ids (Spark writes ``parquet.field.id``); the
    columns themselves when the schema has no column mapping."""
    from pyspark.sql import functions as F

    if not schema.has_column_mapping:
        return [F.col(_q(n)) for n in schema.names]
    logical = spark_schema(schema.arrow)
    physical = spark_schema(schema.physical_arrow, field_ids=True)
    return [
        (F.col(_q(f.name)) if f.dataType == p.dataType else F.col(_q(f.name)).cast(p.dataType)).alias(
            p.name, metadata=p.metadata
        )
        for f, p in zip(logical.fields, physical.fields)
    ]


def _checks(schema: Schema, predicate: Expr | None, df_schema: T.StructType) -> list[tuple[str, Column]]:
    """Row checks evaluated while the job writes (one pass): (name, Spark aggregate counting violations).

    A required table column needs a null check only where the DataFrame's column may hold nulls.
    """
    from pyspark.sql import functions as F

    nullable = {f.name: f.nullable for f in df_schema.fields}
    out = []
    for f in schema.arrow:
        if not f.nullable and nullable.get(f.name, True):
            out.append((f"nulls in required column {f.name!r}", F.count_if(F.col(_q(f.name)).isNull())))
    if predicate is not None:
        cond = to_spark_column(predicate, schema)
        if cond is not None:
            out.append(("rows not matching the overwrite predicate", F.count_if(F.coalesce(~cond, F.lit(True)))))
    return out


def write(
    df: DataFrame,
    target: str | Table | Transaction,
    mode: str = "append",
    *,
    partition_by: str | Sequence[str] | None = None,
    where: str | Expr | None = None,
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    app_transaction: tuple[str, int] | None = None,
    catalog: Any = None,
    schema_mode: str | None = None,
    branch: str | None = None,
) -> CommitResult | None:
    """Write ``df`` to a Lamina table as one new version; returns its ``CommitResult`` (None:
    queued into the transaction ``target`` belongs to, which commits it).

    - ``target``: a location, an open ``lamina.Table`` (e.g. ``catalog.load_table("shop.orders")``),
      or an identifier with ``catalog=`` (a Catalog or a catalog URI): see ``lamina.spark._target``.
    - ``mode``: ``"append"`` or ``"overwrite"`` (all rows, or those matching ``where``; every
      written row must match ``where``, checked while writing).
    - ``partition_by``: for a new table (e.g. ``["day(ts)", "bucket(16, id)"]``); for an existing
      table it may be left out (the table's is used), or must be the table's
      (PartitionSpecMismatch, before anything is written).
    - ``properties``: table properties of a new table.
    - ``app_transaction=(app_id, n)``: idempotent append (streaming); writes and commits
      nothing (the result's ``version`` is None) when ``n`` is not above the sequence already
      committed for ``app_id``.
    - ``schema_mode="merge"``: columns of ``df`` the table lacks are added (at any depth) and,
      where the table property ``schema.type-widening.enabled`` is true, columns ``df`` has
      wider are widened, in the same version as the rows (as ``Table.append(...,
      schema_mode="merge")``). Without it such a DataFrame is refused (SchemaMismatch) before
      anything is written. Column types follow the rule of every write (docs/format.md, Types
      on write: lossless widening only).
    - ``branch``: commit to that branch's log (``Table.branch``), never to main; the version
      returned is the branch's. An unknown branch is BranchNotFound, a missing table
      TableNotFound (a branch write creates neither), before anything is written.

    Local tables, and ``s3://`` tables where Spark has S3A (``lamina.spark.s3a``), use Spark's
    native Parquet writer; other stores go through the Python data source
    (``df.write.format("lamina")``).

    ``target`` may also be a transaction's changes to one table: ``tx.table("shop.orders")``
    of a catalog transaction (``with catalog.transaction() as tx:``), or a
    ``table.transaction()``. Spark's tasks write the files now; the write is queued into
    that transaction (returns None), its files become visible when the transaction
    commits, with its other tables' changes, and are deleted if it aborts (local tables).
    """
    if mode not in ("append", "overwrite"):
        raise InvalidArgument(f"mode must be 'append' or 'overwrite', not {mode!r}")
    if where is not None and mode != "overwrite":
        raise InvalidArgument("where applies to mode='overwrite' only")
    if app_transaction is not None and mode != "append":
        raise InvalidArgument("app_transaction applies to mode='append' only")
    if schema_mode not in (None, "merge"):
        raise InvalidArgument(f"schema_mode must be None or 'merge', not {schema_mode!r}")
    tx = transaction_of(df.sparkSession, target, catalog=catalog, storage_options=storage_options, branch=branch)
    if tx is not None:
        if app_transaction is not None:
            raise InvalidArgument("app_transaction is not supported in a transaction: the transaction commits once")
        if partition_by is not None or properties is not None:
            raise InvalidArgument(
                "partition_by and properties set up a new table: in a catalog transaction pass "
                "them to tx.create_table, then write to the table it returns"
            )
        _write_into(df, tx, mode, where, schema_mode)
        return None
    ref = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch)
    return write_ref(
        df,
        ref,
        mode,
        partition_by=partition_by,
        where=where,
        properties=properties,
        app_transaction=app_transaction,
        schema_mode=schema_mode,
    )


def write_ref(
    df: DataFrame,
    ref: TableRef,
    mode: str,
    *,
    partition_by: str | Sequence[str] | None = None,
    where: str | Expr | None = None,
    properties: Mapping[str, Any] | None = None,
    app_transaction: tuple[str, int] | None = None,
    schema_mode: str | None = None,
    exclusive: bool = False,
) -> CommitResult:
    """``write`` into the table ``ref`` names (arguments checked); ``exclusive``: a new table
    must be this write's own (TableAlreadyExists if another writer created it meanwhile)."""
    table = ref.open_or_none()
    if table is not None:
        table.check_writable()  # before a file is written
        if app_transaction is not None:
            try:
                require_app_transactions_new(table.log.latest(), {app_transaction[0]: app_transaction[1]})
            except TransactionAlreadyCommitted as e:
                log.info("skipping write: %s", e)
                return CommitResult(None)
    io = ref.io
    root = native_root(df.sparkSession, io, "written")
    if root is None:
        return _write_via_datasource(df, ref, mode, partition_by, where, app_transaction, schema_mode)

    evolution = None
    if table is not None:
        evolution = merged_schema(table.metadata, arrow_schema(df.schema)) if schema_mode == "merge" else None
        schema = table.metadata.schema if evolution is None else evolution.planned_schema
        plan = check_writable(df.schema, schema, ref.name)
        spec, props = table.partition_spec, table.properties
        check_partition_by(partition_by, spec, schema, ref.name)
    else:
        schema = Schema.from_arrow(arrow_schema(df.schema))
        spec = parse_partition_by(partition_by, schema)
        props = {str(k): str(v) for k, v in (properties or {}).items()}
        check_properties(props)  # before Spark writes anything
        plan = [(f.name, f.dataType, f.dataType) for f in df.schema.fields]
    predicate = bind(to_expr(where), schema) if where is not None else None

    # A new table is created once its first files are written: until then the write id is
    # registered here, and the session opened on the new table takes the write over.
    session = WriteSession(table) if table is not None else None
    write_id = session.write_id if session is not None else new_write_id()
    if session is None:
        register_write(io, write_id)
    elif evolution is not None:
        session.stage_schema_update(evolution)  # committed with the files, which follow it
    try:
        files = spark_write_files(df, io, root, engine_data_dir(write_id), plan, schema, spec, predicate, props)
        if session is None:
            session = WriteSession(
                ref.create(schema, spec, partition_by, properties, exclusive=exclusive),
                write_id=write_id,
                register=False,
            )
        session.add_files(files)
        committed = session.commit(mode, where=where, app_transaction=app_transaction)
        assert committed is not None  # (a session outside a transaction commits)
        return committed
    except TransactionAlreadyCommitted as e:  # the session deleted the files
        log.info("skipping write: %s", e)
        return CommitResult(None)
    except BaseException:
        if session is None:  # no table yet: nothing was committed
            discard_writes(io, [write_id], search=False)
        else:
            session.abort()  # nothing was committed (a commit of unknown outcome keeps the files)
        raise


def spark_write_files(
    df: DataFrame,
    io: FileIO,
    root: str,
    out_dir: str,
    plan: list[tuple[str, T.DataType | None, T.DataType]],
    schema: Schema,
    spec: PartitionSpec,
    predicate: Expr | None,
    props: Mapping[str, str],
    lineage: bool = False,
) -> pa.Table:
    """Write ``df`` with Spark's native writer under ``out_dir`` (a write's directory,
    ``engine_data_dir``) of the table at ``io`` (``root``: its root as Spark reaches it,
    ``native_root``), as the table's properties ``props`` say; the files as
    ``WriteSession.add_files`` takes them (files without rows dropped)."""
    paths, sizes = _run_spark_write(
        df, plan, schema, spec, predicate, io, root, out_dir, WriterProperties.from_properties(props), lineage
    )
    return file_entries(io, paths, sizes, schema, spec, stats_policy(schema, props))


def transaction_of(
    spark: SparkSession,
    target: str | Table | Transaction,
    *,
    catalog: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    branch: str | None = None,
) -> Transaction | None:
    """``target`` if it is a transaction's changes to a table (``tx.table(ident)`` of a catalog
    transaction, or ``table.transaction()``), checked open; else None."""
    if not isinstance(target, Transaction):
        return None
    if catalog is not None or storage_options is not None or branch is not None:
        raise InvalidArgument("a transaction's table is already open: drop catalog=, storage_options= and branch=")
    target.check_open()
    if native_root(spark, target.table.io, "written") is None:
        raise InvalidArgument(
            f"a Spark write into a transaction uses Spark's native Parquet writer, which does not reach "
            f"{target.table.uri} here (see the log); write the rows through the transaction instead "
            "(tx.table(...).append(df.toArrow()))"
        )
    return target


def _write_into(df: DataFrame, tx: Transaction, mode: str, where: str | Expr | None, schema_mode: str | None) -> None:
    """Write ``df``'s files with Spark and queue them into ``tx`` (see ``write``)."""
    table = tx.table
    session = WriteSession(table, transaction=tx)
    with session:  # an exception before the hand-over deletes the files
        evolution = merged_schema(session.base, arrow_schema(df.schema)) if schema_mode == "merge" else None
        if evolution is not None:
            session.stage_schema_update(evolution)
        vm = session.metadata
        plan = check_writable(df.schema, vm.schema, getattr(table, "identifier", None) or table.uri)
        predicate = bind(to_expr(where), vm.schema) if where is not None else None
        root = native_root(df.sparkSession, table.io, "written")
        assert root is not None  # transaction_of checked that Spark's writer reaches the table
        session.add_files(
            spark_write_files(
                df, table.io, root, session.data_dir, plan, vm.schema, vm.partition_spec, predicate, vm.properties
            )
        )
        session.commit(mode, where=where)


def _run_spark_write(
    df: DataFrame,
    plan: list[tuple[str, T.DataType | None, T.DataType]],
    schema: Schema,
    spec: PartitionSpec,
    predicate: Expr | None,
    io: FileIO,
    root: str,
    out_dir: str,
    settings: WriterProperties,
    lineage: bool = False,
) -> tuple[list[str], list[int]]:
    """Write ``df`` (checked against ``plan``: see ``check_writable``) with Spark's native Parquet
    writer under ``out_dir`` of the table at ``io`` (``root``: as Spark reaches it), partitioned
    by ``spec``; ``settings``: the table's writer properties. ``lineage``: ``df`` also has the
    row lineage columns (rows rewritten: lamina.spec.lineage), stored after the table's columns.
    The committed files' table-relative paths and sizes (``lamina.spark._native_write``)."""
    from pyspark.sql import functions as F

    conformed = _conformed(df, plan, schema, LINEAGE_COLUMNS if lineage else ())
    checks = _checks(schema, predicate, df.schema)
    metrics = None
    if checks:  # counted while the job writes (one pass), read once it has
        metrics = "lamina_checks_" + os.path.basename(out_dir).replace("-", "_")
        conformed = conformed.observe(metrics, *[agg.alias(f"c{i}") for i, (_, agg) in enumerate(checks)])
    names = derived_names(spec, [*schema.names, *schema.physical_names.values()])
    # Partition values from the table's columns; the files hold them under physical names.
    out = conformed.select(
        *physical_columns(schema),
        *[F.col(c) for c in LINEAGE_COLUMNS if lineage],
        *[partition_column(pf, schema).alias(n) for pf, n in zip(spec.fields, names)],
    )
    options = {
        "compression": settings.parquet_compression,
        "maxRecordsPerFile": str(settings.max_rows_per_file),
        "parquet.block.size": str(settings.row_group_bytes),  # write.parquet.row-group-size-bytes
        "parquet.block.row.count.limit": str(settings.row_group_rows),  # write.parquet.row-group-limit
    }
    with session_conf(df.sparkSession, _WRITE_CONF):
        paths, sizes, got = write_committed(out, io, root, out_dir, names, options, metrics)
    if checks:
        bad = [f"{got[f'c{i}']} {what}" for i, (what, _) in enumerate(checks) if got.get(f"c{i}")]
        if bad:
            err = SchemaMismatch if any("required" in b for b in bad) else InvalidArgument
            raise err("rejected the write, nothing was committed: " + "; ".join(bad))
    return paths, sizes


def _write_via_datasource(
    df: DataFrame,
    ref: TableRef,
    mode: str,
    partition_by: str | Sequence[str] | None,
    where: str | Expr | None,
    app_transaction: tuple[str, int] | None,
    schema_mode: str | None,
) -> CommitResult:
    from lamina.spark.datasource import register

    register(df.sparkSession)
    w = df.write.format("lamina").mode(mode).options(**ref.data_source_options())
    if partition_by is not None:
        w = w.option("partitionBy", partition_by if isinstance(partition_by, str) else ", ".join(partition_by))
    if where is not None:
        if not isinstance(where, str):
            from lamina.expr import to_sql

            where = to_sql(where)
        w = w.option("replaceWhere", where)
    if app_transaction is not None:
        w = w.option("txnAppId", app_transaction[0]).option("txnVersion", str(app_transaction[1]))
    if schema_mode == "merge":
        w = w.option("mergeSchema", "true")
    w.save()
    ref.table = None  # the data source committed through its own handle
    return CommitResult.of(ref.open().metadata)
