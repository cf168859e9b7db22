"""Arrow <-> Spark schemas, exactly as Spark's Parquet reader and Arrow bridge see them.

Lamina tables are typed by Arrow schemas; Spark by StructTypes. Reads need the
Spark schema of a table (native Parquet reader and Python data source alike),
writes need the Arrow schema of a DataFrame, and the Python data source must
yield batches whose Arrow schema equals what Spark expects for its StructType.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from lamina.errors import SchemaMismatch
from lamina.spec.schema import PARQUET_FIELD_ID_KEY, Schema
from lamina.spec.write_types import WIDEN, fit, widens


def quoted(name: str) -> str:
    """A column name as Spark SQL and ``F.col`` take it literally (dots, spaces, backquotes)."""
    return f"`{name.replace('`', '``')}`"


def spark_type(t: pa.DataType, column: str, field_ids: bool = False) -> T.DataType:
    """The Spark type a Parquet column of Arrow type ``t`` is read as. ``field_ids``: struct
    fields carry their Parquet field id (``PARQUET:field_id``) as Spark's writer takes it."""
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_integer(t):
        # Spark reads Parquet unsigned ints into the next wider signed type (uint64 into decimal(20,0)).
        return {
            "int8": T.ByteType(),
            "int16": T.ShortType(),
            "int32": T.IntegerType(),
            "int64": T.LongType(),
            "uint8": T.ShortType(),
            "uint16": T.IntegerType(),
            "uint32": T.LongType(),
            "uint64": T.DecimalType(20, 0),
        }[str(t)]
    if pa.types.is_float32(t):
        return T.FloatType()
    if pa.types.is_float64(t):
        return T.DoubleType()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return T.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return T.BinaryType()
    if pa.types.is_date(t):
        return T.DateType()
    if pa.types.is_timestamp(t):
        # An instant (zone-aware) is Spark's TIMESTAMP; a wall-clock time is TIMESTAMP_NTZ.
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaMismatch(f"column {column!r}: Spark decimals hold at most 38 digits, the table has {t}")
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return T.ArrayType(spark_type(t.value_type, column, field_ids), t.value_field.nullable)
    if pa.types.is_map(t):
        return T.MapType(
            spark_type(t.key_type, column, field_ids), spark_type(t.item_type, column, field_ids), t.item_field.nullable
        )
    if pa.types.is_struct(t):
        return T.StructType(
            [
                T.StructField(f.name, spark_type(f.type, column, field_ids), f.nullable, _field_id(f, field_ids))
                for f in t
            ]
        )
    raise SchemaMismatch(f"column {column!r} has type {t}, which Spark cannot read from Parquet")


def _field_id(f: pa.Field, wanted: bool) -> dict[str, int] | None:
    md = f.metadata or {}
    return {"parquet.field.id": int(md[PARQUET_FIELD_ID_KEY])} if wanted and PARQUET_FIELD_ID_KEY in md else None


def spark_schema(schema: pa.Schema, field_ids: bool = False) -> T.StructType:
    """The StructType of a Lamina table (all fields nullable in Spark's view of Parquet).
    ``field_ids``: with the Parquet field ids of ``schema`` (``Schema.physical_arrow``)."""
    return T.StructType(
        [T.StructField(f.name, spark_type(f.type, f.name, field_ids), True, _field_id(f, field_ids)) for f in schema]
    )


def arrow_type(t: T.DataType, column: str) -> pa.DataType:
    """The Arrow type Lamina stores a Spark column as (the inverse of ``spark_type``)."""
    simple = {
        T.BooleanType: pa.bool_(),
        T.ByteType: pa.int8(),
        T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(),
        T.StringType: pa.string(),
        T.BinaryType: pa.binary(),
        T.DateType: pa.date32(),
        T.TimestampType: pa.timestamp("us", "UTC"),
        T.TimestampNTZType: pa.timestamp("us"),
    }
    for cls, at in simple.items():
        if type(t) is cls:
            return at
    if isinstance(t, T.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, T.ArrayType):
        return pa.list_(pa.field("element", arrow_type(t.elementType, column), t.containsNull))
    if isinstance(t, T.MapType):
        return pa.map_(
            arrow_type(t.keyType, column), pa.field("value", arrow_type(t.valueType, column), t.valueContainsNull)
        )
    if isinstance(t, T.StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType, column), f.nullable) for f in t.fields])
    raise SchemaMismatch(f"column {column!r} has Spark type {t.simpleString()}, which Lamina tables cannot store")


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema of a DataFrame, as a new Lamina table would get it."""
    return pa.schema([pa.field(f.name, arrow_type(f.dataType, f.name), f.nullable) for f in schema.fields])


def batch_schema(schema: T.StructType) -> pa.Schema:
    """The exact Arrow schema Spark accepts from a Python data source for ``schema``.

    Spark compares types (not nullability, not field metadata): int64 not int32,
    string not large_string, timestamps in microseconds.
    """
    return pa.schema([pa.field(f.name, _batch_type(f.dataType, f.name), True) for f in schema.fields])


def _batch_type(t: T.DataType, column: str) -> pa.DataType:
    if isinstance(t, T.ArrayType):
        return pa.list_(pa.field("element", _batch_type(t.elementType, column), True))
    if isinstance(t, T.StructType):
        return pa.struct([pa.field(f.name, _batch_type(f.dataType, column), True) for f in t.fields])
    if isinstance(t, T.MapType):
        return pa.map_(_batch_type(t.keyType, column), _batch_type(t.valueType, column))
    return arrow_type(t, column)


# --- writing into an existing table ------------------------------------------------------


def _arrow_view(t: T.DataType) -> pa.DataType:
    """The Arrow type of a DataFrame column of Spark type ``t`` for the write rule (a column of
    Spark's NullType, ``lit(None)``, is Arrow's null type)."""
    return pa.null() if isinstance(t, T.NullType) else arrow_type(t, "")


def safe_cast(source: T.DataType, target: T.DataType) -> bool:
    """Whether every value of ``source`` converts to ``target`` without loss: the write rule of
    every path (``lamina.spec.write_types.fit``), on the Arrow types Lamina stores these Spark
    types as. Spark casts structs by position, so their fields must come in the target's order;
    and Spark converts without a check of each value, so only what converts exactly by type."""
    try:
        return fit(_arrow_view(source), _arrow_view(target), structs_by_name=False) == WIDEN
    except SchemaMismatch:  # a Spark type Lamina does not store
        return False


def _widens_to(t: pa.DataType, source: T.DataType) -> bool:
    """Whether a table column of type ``t`` may be widened to hold a DataFrame column of ``source``."""
    try:
        return widens(t, arrow_type(source, ""))
    except SchemaMismatch:
        return False


def check_writable(
    df_schema: T.StructType, schema: Schema, uri: str
) -> list[tuple[str, T.DataType | None, T.DataType]]:
    """Plan how a DataFrame's columns become the columns of a table of ``schema``: (table
    column, DataFrame type or None if missing, table type), in table order. A missing column
    with a write default is written as it; SchemaMismatch names every problem at once."""
    table = schema.arrow
    by_name = {f.name: f for f in df_schema.fields}
    lower = {f.name.lower(): f.name for f in df_schema.fields}
    table_names = set(table.names)
    problems = [f"extra column {n!r} (not in the table)" for n in by_name if n not in table_names]
    evolvable = bool(problems)
    plan: list[tuple[str, T.DataType | None, T.DataType]] = []
    for f in table:
        target = spark_type(f.type, f.name)
        src = by_name.get(f.name)
        if src is None:
            if f.name.lower() in lower:
                problems.append(f"column {lower[f.name.lower()]!r} differs in case from table column {f.name!r}")
            elif not f.nullable and f.name not in schema.write_defaults:
                problems.append(f"required column {f.name!r} is missing")
            plan.append((f.name, None, target))
            continue
        if not safe_cast(src.dataType, target):
            problems.append(
                f"column {f.name!r} is {src.dataType.simpleString()}, the table has {target.simpleString()} "
                f"(only a lossless widening is stored as it is: cast it first, "
                f"F.col({quoted(f.name)!r}).cast({target.simpleString()!r}))"
            )
            evolvable = evolvable or _widens_to(f.type, src.dataType)
        plan.append((f.name, src.dataType, target))
    if problems:
        hint = (
            " To add the new columns in the same version, write with option('mergeSchema', 'true') "
            "(lamina.spark.write(..., schema_mode='merge')); it also widens the columns the DataFrame has wider "
            "where the table property schema.type-widening.enabled is true. Or change the table's schema first "
            "with table.update_schema()."
            if evolvable
            else ""
        )
        raise SchemaMismatch(
            f"the DataFrame does not fit table {uri}: "
            + "; ".join(problems)
            + f". Table schema: {spark_schema(table).simpleString()}; nothing was written."
            + hint
        )
    return plan
