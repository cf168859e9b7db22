"""Fast read: plan on the driver with Lamina's planner, read with Spark's native Parquet reader.

The DataFrame is ``spark.read.schema(<table schema>).parquet(<planned files>)``
plus the predicate as a Spark filter, so column pruning, Parquet row-group
filtering and whole-stage codegen stay Spark's own; Lamina only decides which
files (manifest pruning on partition values and column statistics) and pins the
version. Local tables are read as ``file://`` paths, ``s3://`` tables as ``s3a://`` paths
where the session has Hadoop's S3A connector (``lamina.spark.s3a``); other tables go
through the Python data source (see docs/spark.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lamina
from lamina.data import deletes
from lamina.data.footer_stats import footers_of
from lamina.data.scan import Scan
from lamina.errors import InvalidArgument, LaminaError
from lamina.expr import AlwaysTrue, Expr, bind, to_sql
from lamina.io import FileIO
from lamina.spark._filters import spark_literal, to_spark_column
from lamina.spark._target import TableRef
from lamina.spark._types import quoted as _q
from lamina.spark._types import spark_schema
from lamina.spark.s3a import native_root, spark_uri
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID, LAST_UPDATED, LINEAGE_FIELDS, ROW_ID
from lamina.spec.schema import Schema
from lamina.spec.tag import split_version_or_tag

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-spark-dv")

# Above this many paths Spark lists files with a distributed job (a job's overhead); our
# paths come from a plan, so listing them on the driver is always the cheaper choice.
_LISTING_THRESHOLD_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"
# Columns a read with positions adds: each row's data file (as Spark reports it) and row index in it.
FILE, ROW = "__lamina_file", "__lamina_row"
# A file's row lineage, joined to its rows (with_row_lineage).
_FIRST, _DATA_VERSION = "__lamina_first_row_id", "__lamina_data_version"


def resolve_scan(
    table: lamina.Table,
    *,
    version: int | str | None = None,
    timestamp: Any = None,
    tag: str | None = None,
    where: str | Expr | None = None,
    columns: Sequence[str] | None = None,
) -> Scan:
    """A Scan of ``table`` at a version, a timestamp or a tag (a non-numeric ``version`` is a tag name).
    On a branch's handle, the version or timestamp is the branch's; a tag is refused."""
    if isinstance(version, str):
        number, name = split_version_or_tag(version)
        if name is not None and tag is not None:
            raise InvalidArgument(f"pass either a tag or a version, not both (got tag {tag!r} and version {version!r})")
        version, tag = number, name.strip() if name is not None else tag
    if tag is not None:
        if version is not None or timestamp is not None:
            raise InvalidArgument("pass only one of version, timestamp and tag")
        if table.branch_name != MAIN_BRANCH:
            raise InvalidArgument(
                f"tag {tag!r} names one version of the table, not of branch {table.branch_name!r}: "
                "pass a tag or a branch (with its version or timestamp), not both"
            )
        return table.scan(where=where, columns=columns, version=tag)  # checked above to be a tag
    return table.scan(where=where, columns=columns, version=version, timestamp=timestamp)


def file_uris(io: FileIO, paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The URIs Spark reads table-relative data file paths by (``file://`` for a local table,
    ``s3a://`` on S3: ``lamina.spark.s3a.spark_uri``), vectorized."""
    root = spark_uri(io).rstrip("/")
    return pc.binary_join_element_wise(pa.scalar(f"{root}/"), paths, pa.scalar(""))


def spark_file_path(uri: str) -> str:
    """The string Spark reports as ``_metadata.file_path`` for a URI we passed it
    (``file:///...``, ``s3a://bucket/...``).

    Hadoop's Path goes through java.net.URI's multi-argument constructor: ASCII
    characters outside its path set are percent-encoded (``%`` too), other
    printable characters are kept as they are; ``file://`` loses its empty authority.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        prefix, path = "", uri
    elif scheme == "file":
        prefix, path = "file:", rest
    else:
        authority, slash, path = rest.partition("/")
        prefix, path = f"{scheme}://{authority}", slash + path
    out = []
    for ch in path:
        if ch.isalnum() and ord(ch) < 128 or ch in "/_-!.~'()*,;:$&+=@":
            out.append(ch)
        elif ord(ch) > 127 and ch.isprintable() and not ch.isspace():
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
    return prefix + "".join(out)


def _positions() -> list[Any]:
    """``_metadata.file_path`` / ``row_index`` of the rows a native Parquet scan reads, as FILE, ROW."""
    from pyspark.sql import functions as F

    return [F.col("_metadata.file_path").alias(FILE), F.col("_metadata.row_index").alias(ROW)]


def _anti_join_deleted(df: Any, deletes: Any) -> Any:
    """``df`` (with FILE, ROW) without the rows in ``deletes`` (a DataFrame of file_path,
    row_index as Spark reports them); a broadcast anti-join keeps the scan itself untouched."""
    from pyspark.sql import functions as F

    d = F.broadcast(deletes.select(F.col("file_path").alias(FILE), F.col("row_index").alias(ROW)))
    return df.join(d, on=[FILE, ROW], how="left_anti")


def apply_deletes(df: Any, deletes: Any) -> Any:
    """Remove deleted rows from ``df``, a native Parquet scan: ``deletes`` is a DataFrame of
    (file_path, row_index) as Spark reports them in ``_metadata``."""
    return _anti_join_deleted(df.select("*", *_positions()), deletes).drop(FILE, ROW)


def without_deleted(spark: Any, df: Any, io: FileIO, dv_entries: pa.Table) -> Any:
    """``df`` (with FILE, ROW, over files among ``dv_entries``) without the rows their
    deletion vectors delete."""
    return _anti_join_deleted(df, spark.createDataFrame(_deleted_positions(io, dv_entries)))


def _deleted_positions(io: FileIO, entries: pa.Table) -> pa.Table:
    """(file_path as Spark reports it, row_index) of every deleted row of the files in ``entries``
    (all of which carry a deletion vector); vectors are read in parallel, positions stay numpy."""
    dvs = deletes.dvs_of_plan(entries)
    bitmaps = list(_pool.map(lambda dv: deletes.read_bitmap(io, dv), dvs))
    positions = [deletes.positions_array(bm).astype(np.int64) for bm in bitmaps]
    paths = [spark_file_path(u) for u in file_uris(io, entries.column("path")).to_pylist()]
    counts = np.array([len(p) for p in positions], dtype=np.int64)
    return pa.table(
        {
            "file_path": pa.array(paths, pa.string()).take(pa.array(np.repeat(np.arange(len(paths)), counts))),
            "row_index": pa.array(np.concatenate(positions) if positions else np.zeros(0, np.int64), pa.int64()),
        }
    )


def _native_parquet(spark: Any, schema: Any, uris: list[str]) -> Any:
    old = spark.conf.get(_LISTING_THRESHOLD_CONF, None)
    spark.conf.set(_LISTING_THRESHOLD_CONF, str(max(len(uris) + 1, 32)))
    try:
        return spark.read.schema(schema).parquet(*uris)
    finally:
        if old is None:
            spark.conf.unset(_LISTING_THRESHOLD_CONF)
        else:
            spark.conf.set(_LISTING_THRESHOLD_CONF, old)


def with_row_lineage(spark: Any, df: Any, io: FileIO, entries: pa.Table) -> Any:
    """``df`` (a native read of the files ``entries`` with FILE, ROW and the lineage columns the
    files store: ``native_read(..., positions=True, lineage=True)``) with each row's
    ``_row_id`` and ``_last_updated_version`` (lamina.spec.lineage): the stored value, else the
    file's ``first_row_id`` + its position, and its ``data_version``, joined by file (broadcast)."""
    from pyspark.sql import functions as F

    files = pa.table(
        {
            FILE: pa.array(
                [spark_file_path(u) for u in file_uris(io, entries.column("path")).to_pylist()], pa.string()
            ),
            _FIRST: entries.column(FIRST_ROW_ID),
            _DATA_VERSION: entries.column(DATA_VERSION),
        }
    )
    df = df.join(F.broadcast(spark.createDataFrame(files)), on=FILE)
    # Only the lineage columns ``df`` has (a merge keeps just the matched rows' ``_row_id``).
    if ROW_ID in df.columns:
        df = df.withColumn(ROW_ID, F.coalesce(F.col(ROW_ID), F.col(_FIRST) + F.col(ROW)))
    if LAST_UPDATED in df.columns:
        df = df.withColumn(LAST_UPDATED, F.coalesce(F.col(LAST_UPDATED), F.col(_DATA_VERSION)))
    return df.drop(_FIRST, _DATA_VERSION)


def _lineage_fields() -> list[Any]:
    """The row lineage columns files that rewrote rows store (absent: null), as Spark reads them."""
    return list(spark_schema(pa.schema(LINEAGE_FIELDS)).fields)


def native_read(
    spark: Any,
    schema: Schema,
    io: FileIO,
    entries: pa.Table,
    columns: Sequence[str] | None = None,
    *,
    positions: bool = False,
    lineage: bool = False,
) -> Any:
    """The rows of the data files ``entries`` (deletion vectors not applied) of a local table of
    ``schema``, read by Spark's Parquet reader, as the table's columns.

    An evolved schema (``Schema.is_evolved``) is read by physical names, with its current
    types (Spark's reader casts narrower file columns up: int to bigint, float to double,
    decimal precision, date to timestamp_ntz), and relabelled: a top-level rename is an
    alias, a rename inside a struct, list or map a cast to the logical type (struct casts
    are positional). Where a file lacks a column with an initial default, Spark would read
    null: the files are grouped by which of those columns they lack (their footers tell),
    each group read natively with the defaults as literals, and the groups unioned.
    ``columns``: the columns the caller reads (None: all), so footers are read only when
    one of them has a default. ``positions``: with FILE and ROW, each row's file (as
    ``_metadata.file_path``) and position in it. ``lineage``: with the row lineage columns
    the files store (null where they store none; see ``with_row_lineage``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    uris = file_uris(io, entries.column("path")).to_pylist()
    extra = _positions() if positions else []
    stored = _lineage_fields() if lineage else []
    if not schema.is_evolved:
        df = _native_parquet(spark, StructType([*spark_schema(schema.arrow).fields, *stored]), uris)
        return df.select("*", *extra) if extra else df
    extra = [*[F.col(f.name) for f in stored], *extra]
    physical = StructType([*spark_schema(schema.physical_arrow).fields, *stored])
    logical = spark_schema(schema.arrow)
    wanted = schema.names if columns is None else columns
    defaults = {c: v for c, v in schema.initial_defaults.items() if c in wanted}
    groups: dict[frozenset[str], list[str]] = {frozenset(): uris}
    if defaults:
        groups = {}
        for uri, md in zip(
            uris, footers_of(io, entries.column("path").to_pylist(), entries.column("size").to_pylist())
        ):
            in_file = set(md.schema.to_arrow_schema().names)
            lacking = frozenset(c for c in defaults if schema.physical_names[c] not in in_file)
            groups.setdefault(lacking, []).append(uri)
    out = None
    for lacking, group in groups.items():
        cols = []
        for p, f in zip(physical.fields, logical.fields):  # the lineage columns come after: in extra
            if f.name in lacking:
                c = spark_literal(defaults[f.name], f.name)
            else:
                c = F.col(_q(p.name)) if p.dataType == f.dataType else F.col(_q(p.name)).cast(f.dataType)
            cols.append(c.alias(f.name))
        df = _native_parquet(spark, physical, group).select(*cols, *extra)
        out = df if out is None else out.unionByName(df)
    return out


def _read_columns(scan: Scan) -> list[str] | None:
    """The columns a scan's DataFrame reads: its selection and its predicate's (None: all)."""
    return None if scan.columns is None else scan.with_predicate_columns(scan.columns)


def read_plan(spark: Any, scan: Scan) -> Any:
    """The rows of a local table's scan as a DataFrame over Spark's Parquet reader."""
    io = scan.io
    entries = scan.plan().entries
    has_dv = pc.is_valid(entries.column("dv_path"))
    dv_entries = entries.filter(has_dv)
    plain = entries.filter(pc.invert(has_dv))
    columns = _read_columns(scan)
    lineage = scan.lineage  # _row_id / _last_updated_version asked for: numbered by position
    parts = []
    if plain.num_rows:
        parts.append(native_read(spark, scan.schema, io, plain, columns, positions=lineage, lineage=lineage))
    if dv_entries.num_rows:
        with_positions = native_read(spark, scan.schema, io, dv_entries, columns, positions=True, lineage=lineage)
        live = without_deleted(spark, with_positions, io, dv_entries)
        parts.append(live if lineage else live.drop(FILE, ROW))  # the parts' columns match
    if not parts:
        fields = [*scan.schema.arrow, *(LINEAGE_FIELDS if lineage else ())]
        return _finish(spark.createDataFrame([], spark_schema(pa.schema(fields))), scan)
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    if lineage:
        df = with_row_lineage(spark, df, io, entries)
    return _finish(df.drop(FILE, ROW), scan)


def _finish(df: Any, scan: Scan) -> Any:
    """Apply the scan's predicate exactly (files were only pruned) and its column selection."""
    cond = to_spark_column(scan.predicate, scan.schema)
    if cond is not None:
        df = df.where(cond)
    if scan.columns is not None:
        df = df.select(*[_q(c) for c in scan.columns])
    return df


def read(
    spark: Any,
    target: Any,
    *,
    version: int | str | None = None,
    timestamp: Any = None,
    tag: str | None = None,
    where: str | Expr | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    catalog: Any = None,
    branch: str | None = None,
    snapshot: Any = None,
) -> Any:
    """A DataFrame of a table (latest version, or ``version``/``timestamp``/``tag``).

    ``target``: a location, an open Table, or an identifier with ``catalog=`` (see
    ``lamina.spark._target``). ``branch``: read that branch (``version``/``timestamp`` are
    then the branch's).
    ``snapshot``: a catalog snapshot (``catalog.snapshot()``), ``target`` an identifier in it:
    the table at the version the snapshot pins, so DataFrames of several tables read with one
    snapshot see every catalog transaction wholly or not at all.
    ``where`` (Lamina SQL or an Expr) prunes files and filters rows exactly; ``columns``
    selects columns. Local tables, and ``s3://`` tables where Spark has S3A, use Spark's
    native Parquet reader over the planned files; other stores use the Python data source
    (``format("lamina")``).
    """
    if snapshot is not None:
        if any(x is not None for x in (version, timestamp, tag, catalog, branch, storage_options)):
            raise InvalidArgument(
                "a snapshot pins the table's version and names its catalog: drop version=, "
                "timestamp=, tag=, catalog=, branch= and storage_options="
            )
        table = snapshot.load_table(target)
        version = table.version
    else:
        table = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch).open()
    scan = resolve_scan(table, version=version, timestamp=timestamp, tag=tag, where=where, columns=columns)
    if native_root(spark, table.io, "read") is not None:
        return read_plan(spark, scan)
    return _read_via_datasource(spark, table, scan)


def where_option(scan: Scan) -> str | None:
    """The scan's predicate as the data source's ``where`` option: Lamina SQL that binds back to
    exactly this predicate; None without a predicate or when the text would not read back
    (literals such as inf or bytes): the rows are then filtered by Spark alone, without pruning."""
    if isinstance(scan.predicate, AlwaysTrue):
        return None
    text = to_sql(scan.predicate)
    try:
        return text if bind(text, scan.schema) == scan.predicate else None
    except LaminaError:
        return None


def _read_via_datasource(spark: Any, table: lamina.Table, scan: Scan) -> Any:
    from lamina.spark.datasource import register

    register(spark)
    reader = spark.read.format("lamina").option("path", table.uri).option("versionAsOf", str(scan.version))
    if table.branch_name != MAIN_BRANCH:  # the version is the branch's
        reader = reader.option("branch", table.branch_name)
    where = where_option(scan)  # the DataFrame's own restriction: it prunes files (Spark pushes no filters to it)
    if where is not None:
        reader = reader.option("where", where)
    columns = _read_columns(scan)
    if columns is not None:  # only these cross into Spark (row lineage columns too)
        reader = reader.option("columns", json.dumps(columns))
    for k, v in (table.io.options or {}).items():
        reader = reader.option(k, str(v))
    return _finish(reader.load(), scan)
