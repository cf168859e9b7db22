"""Values as Iceberg stores them: the single-value binary serialization of column bounds and
partition summaries, and partition values as Avro record fields.

Binary single values (Iceberg spec, appendix D): booleans one byte; int, date (days) four
bytes and long, time, timestamps (microseconds) eight bytes, little-endian; float and
double IEEE 754 little-endian; strings UTF-8; binary and fixed as they are; decimals their
unscaled value's minimal big-endian two's complement (Java's ``BigInteger.toByteArray``).

Bounds stay bounds under every reader's comparison: Lamina's float bounds never come from a
file holding NaN (``lamina.spec.content``: such files keep none), and a bound at zero is
widened over the other zero (a lower bound 0.0 is written -0.0, an upper bound -0.0 is
written 0.0), since Iceberg's Java readers order -0.0 below 0.0 where Lamina's min/max do
not tell them apart. String bounds Lamina cut (``truncate(N)``) are prefixes and
incremented prefixes, which are bounds in Iceberg's order too (UTF-8 bytes, i.e. code points).
"""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


def _ints(col: pa.Array, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False))
    values = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False))
    return values.astype(dtype), valid


def _split(values: np.ndarray, valid: np.ndarray, width: int) -> list[bytes | None]:
    raw = values.tobytes()
    return [raw[i * width : (i + 1) * width] if ok else None for i, ok in enumerate(valid.tolist())]


def micros(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A timestamp or time column as int64 microseconds (and its validity); ns floored."""
    unit = col.type.unit
    raw, valid = _ints(col.cast(pa.int64()), "<i8")
    per = _MICROS_PER[unit]
    return (raw // 1000 if per is None else raw * per), valid


def days(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    if col.type == pa.date64():
        ms, valid = _ints(col.cast(pa.int64()), "<i8")
        return (ms // 86_400_000).astype("<i4"), valid
    return _ints(col.cast(pa.int32()), "<i4")


def decimal_bytes(unscaled: int) -> bytes:
    """The minimal big-endian two's complement bytes of ``unscaled``."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


_EXACT = decimal.Context(prec=80)  # wider than any decimal128: scaling never rounds


def _unscaled(v: decimal.Decimal, scale: int) -> int:
    return int(v.scaleb(scale, context=_EXACT).to_integral_value(context=_EXACT))


def serialize_column(col: pa.Array, t: pa.DataType, upper: bool) -> list[bytes | None]:
    """Each value of ``col`` (bounds of a column of Arrow type ``t``) in Iceberg's binary
    single-value serialization; None for a null. ``upper``: these are upper bounds (which
    way a zero float bound is widened)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not col.type.equals(t):
        col = col.cast(t)
    if pa.types.is_boolean(t):
        return [None if v is None else (b"\x01" if v else b"\x00") for v in col.to_pylist()]
    if pa.types.is_integer(t):
        width = 8 if t == pa.int64() else 4
        values, valid = _ints(col.cast(pa.int64()), "<i8")
        return _split(values.astype("<i8" if width == 8 else "<i4"), valid, width)
    if pa.types.is_floating(t):
        width = 4 if t == pa.float32() else 8
        values, valid = _ints(col, "<f4" if width == 4 else "<f8")
        zero = values == 0
        values = np.where(zero, np.float32(0.0) if upper else np.float32(-0.0), values).astype(values.dtype)
        return _split(values, valid, width)
    if pa.types.is_date(t):
        values, valid = days(col)
        return _split(values, valid, 4)
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        values, valid = micros(col)
        return _split(values.astype("<i8"), valid, 8)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [None if v is None else v.encode() for v in col.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return col.to_pylist()
    if pa.types.is_decimal(t):
        return [None if v is None else decimal_bytes(_unscaled(v, t.scale)) for v in col.to_pylist()]
    raise TypeError(f"no Iceberg single-value serialization for {t}")


def serialize(value: Any, t: pa.DataType, upper: bool = False) -> bytes | None:
    """One value (a Python object of Arrow type ``t``), as ``serialize_column`` does it."""
    return serialize_column(pa.array([value], t), t, upper)[0]


def avro_column(col: pa.Array, t: pa.DataType) -> list[Any]:
    """Partition values of Arrow type ``t`` as Python values for Iceberg's Avro partition
    struct: days for dates, microseconds for timestamps, Decimals, the rest as they are."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not col.type.equals(t):
        col = col.cast(t)
    if pa.types.is_date(t):
        values, valid = days(col)
    elif pa.types.is_timestamp(t) or pa.types.is_time(t):
        values, valid = micros(col)
    else:
        return col.to_pylist()
    return [int(v) if ok else None for v, ok in zip(values.tolist(), valid.tolist())]
