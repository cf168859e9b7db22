"""SQL types of terms: Spark's implicit coercions and DECIMAL result types, on Arrow types.

Terms are typed as Spark types them (docs/expressions.md): integers widen to the wider
integer, an integer meeting a DECIMAL becomes the DECIMAL that holds it, anything meeting a
DOUBLE becomes DOUBLE (a FLOAT meeting an integer stays FLOAT), a DATE meeting a TIMESTAMP
becomes a TIMESTAMP; a string meeting another type is cast to it. DECIMAL arithmetic follows
Spark's result precision and scale, capped at 38 digits by giving up scale (never below 6).
"""

from __future__ import annotations

import decimal
from typing import Any

import pyarrow as pa
from sqlglot import exp

from lamina.errors import InvalidPredicate

MAX_PRECISION = 38
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
_SIGNED = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(), pa.uint64(): pa.decimal128(20, 0)}


def is_integer(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def is_float(t: pa.DataType) -> bool:
    return pa.types.is_float32(t) or pa.types.is_float64(t)


def is_decimal(t: pa.DataType) -> bool:
    return pa.types.is_decimal(t)


def is_numeric(t: pa.DataType) -> bool:
    return is_integer(t) or is_float(t) or is_decimal(t)


def is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def is_temporal(t: pa.DataType) -> bool:
    """A date or a timestamp (the types date and time functions take)."""
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def is_null(t: pa.DataType) -> bool:
    return pa.types.is_null(t)


def is_ordered(t: pa.DataType) -> bool:
    """Types with an order (comparable with < and =): not nested types, not half floats."""
    return (
        pa.types.is_boolean(t)
        or is_numeric(t)
        or is_string(t)
        or is_binary(t)
        or is_temporal(t)
        or pa.types.is_time(t)
        or is_null(t)
    )


def describe(t: pa.DataType) -> str:
    """A type as SQL users name it."""
    from lamina.expr.terms import sql_type

    return sql_type(t)


def signed(t: pa.DataType) -> pa.DataType:
    """Unsigned integers as the signed type (or DECIMAL) that holds every value."""
    return _SIGNED.get(t, t)


def as_decimal(t: pa.DataType) -> pa.DataType:
    """An integer type as the DECIMAL holding all its values; a DECIMAL as itself."""
    if is_decimal(t):
        return t
    t = signed(t)
    if is_decimal(t):
        return t
    return pa.decimal128(_INT_DIGITS[t.bit_width], 0)


def decimal_type(precision: int, scale: int) -> pa.DataType:
    """DECIMAL(p, s) capped at 38 digits as Spark caps results: integral digits are kept and
    the scale gives way, but not below 6 (or the scale itself if smaller)."""
    if precision <= MAX_PRECISION:
        return pa.decimal128(max(precision, 1), scale)
    integral = precision - scale
    min_scale = min(scale, 6)
    return pa.decimal128(MAX_PRECISION, max(MAX_PRECISION - integral, min_scale))


def _wider_decimal(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    scale = max(a.scale, b.scale)
    integral = max(a.precision - a.scale, b.precision - b.scale)
    return pa.decimal128(min(integral + scale, MAX_PRECISION), min(scale, MAX_PRECISION))


def numeric_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    a, b = signed(a), signed(b)
    if a == b:
        return a
    if pa.types.is_float64(a) or pa.types.is_float64(b):
        return pa.float64()
    if pa.types.is_float32(a) or pa.types.is_float32(b):
        other = b if pa.types.is_float32(a) else a
        return pa.float64() if is_decimal(other) else pa.float32()
    if is_integer(a) and is_integer(b):
        return a if a.bit_width >= b.bit_width else b
    return _wider_decimal(as_decimal(a), as_decimal(b))


def _timestamp_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    units = ["s", "ms", "us", "ns"]
    unit = max(
        a.unit if pa.types.is_timestamp(a) else "s", b.unit if pa.types.is_timestamp(b) else "s", key=units.index
    )
    zoned = any(pa.types.is_timestamp(t) and t.tz is not None for t in (a, b))
    return pa.timestamp(unit, "UTC" if zoned else None)


def common_type(a: pa.DataType, b: pa.DataType, what: str) -> pa.DataType:
    """The type two values are compared (or combined) as; InvalidPredicate if they do not go
    together. ``what`` names the expression for the message."""
    if a.equals(b):
        return a
    if is_null(a):
        return b
    if is_null(b):
        return a
    if is_numeric(a) and is_numeric(b):
        return numeric_common(a, b)
    if is_string(a) and is_string(b):
        return pa.large_string() if pa.types.is_large_string(a) or pa.types.is_large_string(b) else pa.string()
    if is_binary(a) and is_binary(b):
        return pa.binary()
    if is_temporal(a) and is_temporal(b):
        if pa.types.is_date(a) and pa.types.is_date(b):
            return pa.date32()
        return _timestamp_common(a, b)
    if pa.types.is_time(a) and pa.types.is_time(b):
        return a if ["s", "ms", "us", "ns"].index(a.unit) >= ["s", "ms", "us", "ns"].index(b.unit) else b
    for s, o in ((a, b), (b, a)):
        if is_string(s) and (is_numeric(o) or is_temporal(o) or pa.types.is_boolean(o)):
            return o  # a string is cast to the other side's type (Spark's ANSI coercion)
    raise InvalidPredicate(f"{what}: {describe(a)} and {describe(b)} cannot be compared or combined")


# --- DECIMAL arithmetic (Spark's DecimalPrecision) -------------------------------------------------


def decimal_result(op: str, a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The DECIMAL type of ``a op b`` for op in + - * / % (either side may be an integer)."""
    a, b = as_decimal(a), as_decimal(b)
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        return decimal_type(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return decimal_type(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(6, s1 + p2 + 1)
        return decimal_type(p1 - s1 + s2 + scale, scale)
    if op == "%":
        scale = max(s1, s2)
        return decimal_type(min(p1 - s1, p2 - s2) + scale, scale)
    raise AssertionError(op)


# --- literals and type names --------------------------------------------------------------------


def literal_type(v: Any) -> pa.DataType:
    """The type of a literal as Spark types it: an integer is INT if it fits, else BIGINT,
    else DECIMAL(38, 0); ``1.5`` is DECIMAL(2, 1); ``1.5E0`` is DOUBLE."""
    import datetime as _dt

    from lamina.expr.terms import INTERVAL_TYPE, Interval

    if v is None:
        return pa.null()
    if isinstance(v, bool):
        return pa.bool_()
    if isinstance(v, int):
        if -(2**31) <= v < 2**31:
            return pa.int32()
        if -(2**63) <= v < 2**63:
            return pa.int64()
        if abs(v) < 10**MAX_PRECISION:
            return pa.decimal128(MAX_PRECISION, 0)
        raise InvalidPredicate(f"integer literal {v} has more than {MAX_PRECISION} digits")
    if isinstance(v, decimal.Decimal):
        if not v.is_finite():
            return pa.float64()
        sign, digits, exponent = v.as_tuple()
        assert isinstance(exponent, int)  # a finite Decimal's exponent ('n', 'N', 'F' are NaN/inf)
        scale = max(-exponent, 0)
        precision = max(len(digits) + max(exponent, 0), scale, 1)
        if precision > MAX_PRECISION:
            raise InvalidPredicate(f"decimal literal {v} has more than {MAX_PRECISION} digits")
        return pa.decimal128(precision, scale)
    if isinstance(v, float):
        return pa.float64()
    if isinstance(v, str):
        return pa.string()
    if isinstance(v, (bytes, bytearray)):
        return pa.binary()
    if isinstance(v, _dt.datetime):
        return pa.timestamp("us", "UTC" if v.tzinfo is not None else None)
    if isinstance(v, _dt.date):
        return pa.date32()
    if isinstance(v, _dt.time):
        return pa.time64("us")
    if isinstance(v, Interval):
        return INTERVAL_TYPE
    raise InvalidPredicate(f"unsupported literal {v!r}")


def literal_scalar(v: Any, t: pa.DataType) -> pa.Scalar:
    """``v`` as an Arrow scalar of ``t`` (the type ``literal_type`` gave it)."""
    import datetime as _dt

    if isinstance(v, _dt.datetime) and v.tzinfo is not None:
        v = v.astimezone(_dt.UTC)
    return pa.scalar(v, type=t)


_TYPE_NAMES = {
    exp.DataType.Type.BOOLEAN: pa.bool_(),
    exp.DataType.Type.TINYINT: pa.int8(),
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.FLOAT: pa.float32(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.VARCHAR: pa.string(),
    exp.DataType.Type.CHAR: pa.string(),
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.BINARY: pa.binary(),
    exp.DataType.Type.VARBINARY: pa.binary(),
    exp.DataType.Type.DATE: pa.date32(),
    exp.DataType.Type.TIMESTAMP: pa.timestamp("us", "UTC"),  # Spark's TIMESTAMP has a (session) zone
    exp.DataType.Type.TIMESTAMPTZ: pa.timestamp("us", "UTC"),
    exp.DataType.Type.TIMESTAMPLTZ: pa.timestamp("us", "UTC"),
    exp.DataType.Type.TIMESTAMPNTZ: pa.timestamp("us"),
    exp.DataType.Type.DATETIME: pa.timestamp("us"),
}
SUPPORTED_CASTS = "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p, s), STRING, BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ"


def type_of_name(dt: exp.DataType) -> pa.DataType:
    """The Arrow type a SQL type name (as sqlglot parsed it) means; InvalidPredicate if none."""
    kind = dt.this
    if kind == exp.DataType.Type.DECIMAL:
        params = [p.this for p in dt.expressions]
        try:
            values = [int(p.this if isinstance(p, exp.Literal) else p.name) for p in params]
        except (TypeError, ValueError):
            values = []
        precision, scale = (values + [10, 0][len(values) :])[:2] if values else (10, 0)
        if not 1 <= precision <= MAX_PRECISION or not 0 <= scale <= precision:
            raise InvalidPredicate(
                f"DECIMAL({precision}, {scale}) is not a valid type (precision 1 to 38, scale 0 to precision)"
            )
        return pa.decimal128(precision, scale)
    if kind in _TYPE_NAMES:
        return _TYPE_NAMES[kind]
    raise InvalidPredicate(f"CAST to {dt.sql()} is not supported; supported types: {SUPPORTED_CASTS}")
