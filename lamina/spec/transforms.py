"""Iceberg's partition transforms: identity, year/month/day/hour, bucket[N], truncate[W].

What a transform string means (``transform_result_type``, ``normalize_transform``), its
values for whole Arrow arrays at once (``apply_transform``), and ``project_inclusive``,
which turns a predicate on a source column into one on the partition value, for manifest
pruning. Pure functions of values and types, apart from the spec that names them
(``lamina.spec.partition``).

Values are Iceberg's, as its Java reference computes them, for every value: ``day``
yields a ``date32`` (Iceberg's ``date`` result: the same day count, readable paths such
as ``ts_day=2024-01-03``), and ``truncate[W]`` of an integer wraps around in the two's
complement arithmetic of Iceberg's ``int`` or ``long`` as Java's does. Where Iceberg's
value does not fit the source type (an int8 column, a decimal at the bottom of its
precision), the partition type is wider than the source (``truncate_result_type``),
never the value another.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidPartitionSpec

if TYPE_CHECKING:
    from lamina.spec.partition import PartitionField

_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour", "identity": "identity"}
_TRANSFORM_RE = re.compile(r"^(identity|year|month|day|hour)$|^(bucket|truncate)\[([0-9]+)\]$")
_UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
# Iceberg's bucket count and truncation width are Java ints: a larger one has no Iceberg meaning.
MAX_TRANSFORM_ARG = 2**31 - 1


# --- transform strings -----------------------------------------------------------


def _parse_transform(transform: str) -> tuple[str, int | None]:
    """Split "bucket[16]" into ("bucket", 16); reject anything else unknown."""
    m = _TRANSFORM_RE.match(transform) if isinstance(transform, str) else None
    if not m:
        raise InvalidPartitionSpec(
            f"unknown partition transform {transform!r}; expected identity, year, month, day, hour, "
            "bucket[N] or truncate[W]"
        )
    if m.group(1):
        return m.group(1), None
    arg = int(m.group(3))
    if arg <= 0:
        raise InvalidPartitionSpec(f"{m.group(2)} needs a positive integer argument, got {arg}")
    if arg > MAX_TRANSFORM_ARG:
        raise InvalidPartitionSpec(f"{m.group(2)}[{arg}]: the argument is at most {MAX_TRANSFORM_ARG} (an Iceberg int)")
    return m.group(2), arg


def transform_parts(transform: str) -> tuple[str, int | None]:
    """A transform's name and argument: ("bucket", 16) for "bucket[16]", ("day", None) for "day"."""
    return _parse_transform(transform)


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t)


def _bucketable(t: pa.DataType) -> bool:
    return (
        (pa.types.is_integer(t) and t != pa.uint64())
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_decimal(t)
    )


def _truncatable(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_decimal(t)
    )


def transform_result_type(transform: str, source_type: pa.DataType) -> pa.DataType:
    """Arrow type of ``transform`` applied to ``source_type``; InvalidPartitionSpec if not allowed."""
    name, width = _parse_transform(transform)
    t = source_type
    if name == "identity":
        if _is_nested(t):
            raise InvalidPartitionSpec(f"identity partitioning needs a primitive column, not {t}")
        return t
    if name in ("year", "month", "day"):
        if not (pa.types.is_date(t) or pa.types.is_timestamp(t)):
            raise InvalidPartitionSpec(f"{name} applies to date and timestamp columns, not {t}")
        return pa.date32() if name == "day" else pa.int32()
    if name == "hour":
        if not pa.types.is_timestamp(t):
            raise InvalidPartitionSpec(f"hour applies to timestamp columns, not {t}")
        return pa.int32()
    if name == "bucket":
        if not _bucketable(t):
            raise InvalidPartitionSpec(
                f"bucket applies to integer, date, time, timestamp, string, binary and decimal columns, not {t}"
            )
        return pa.int32()
    if not _truncatable(t):
        raise InvalidPartitionSpec(f"truncate applies to integer, string, binary and decimal columns, not {t}")
    assert width is not None  # truncate[W] always has its width
    return truncate_result_type(t, width)


def _java_integer(t: pa.DataType) -> pa.DataType | None:
    """The Iceberg integer an Arrow integer is (int for the ones int32 holds, long for int64
    and uint32), whose Java arithmetic truncate wraps in; None for uint64 (no Iceberg type)."""
    if t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()):
        return pa.int32()
    if t in (pa.int64(), pa.uint32()):
        return pa.int64()
    return None


def _decimal_type(precision: int, scale: int) -> pa.DataType:
    return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)


def truncate_result_type(t: pa.DataType, w: int) -> pa.DataType:
    """The type of ``truncate[w]`` of ``t``: the source type, except where Iceberg's values do
    not fit it. Integers are Iceberg's int or long (an int8 of -5 truncated by 1000 is -1000);
    a decimal(P, S) takes the digits of its lowest truncation (-9999999.99 of decimal(9, 2)
    by 50 is -10000000.00: decimal(10, 2)), strings and binaries stay as they are."""
    if pa.types.is_integer(t):
        return _java_integer(t) or t
    if pa.types.is_decimal(t):
        lowest = -(-(10**t.precision - 1) // w) * w  # the floor of the least value, negated
        precision = max(t.precision, len(str(lowest)))
        if precision > 76:
            raise InvalidPartitionSpec(f"truncate[{w}] of {t} needs {precision} digits; Arrow's decimals hold 76")
        return _decimal_type(precision, t.scale)
    return t


# --- vectorized transforms --------------------------------------------------------


def _as_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values


def _ints(a: pa.Array, storage: pa.DataType = pa.int64()) -> tuple[np.ndarray, np.ndarray | None]:
    """Integer storage of ``a`` as numpy (nulls filled with 0) plus the null mask (None if no nulls)."""
    if pa.types.is_temporal(a.type):
        a = a.view(pa.int32() if a.type.bit_width == 32 else pa.int64())
    mask = a.is_null().to_numpy(zero_copy_only=False) if a.null_count else None
    arr = a.fill_null(0).to_numpy(zero_copy_only=False) if a.null_count else a.to_numpy(zero_copy_only=False)
    return arr.astype(storage.to_pandas_dtype(), copy=False), mask


def _from_np(arr: np.ndarray, mask: np.ndarray | None, t: pa.DataType) -> pa.Array:
    if pa.types.is_temporal(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        return pa.array(arr.astype(storage.to_pandas_dtype()), type=storage, mask=mask).view(t)
    return pa.array(arr, type=t, mask=mask)


def _unit_per_day(t: pa.DataType) -> int:
    if pa.types.is_date64(t):
        return 86_400_000
    return 86_400 * _UNITS_PER_SECOND[t.unit]


def _days(a: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Days since epoch (floor, so pre-1970 instants land on the right day); UTC for tz-aware."""
    v, mask = _ints(a)
    if pa.types.is_date32(a.type):
        return v, mask
    return np.floor_divide(v, _unit_per_day(a.type)), mask


def _micros(a: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """The 8-byte long Iceberg hashes for dates (days), times and timestamps (microseconds)."""
    t = a.type
    if pa.types.is_date(t):
        return _days(a)
    v, mask = _ints(a)
    unit = t.unit
    if unit == "ns":
        return np.floor_divide(v, 1000), mask
    return v * (1_000_000 // _UNITS_PER_SECOND[unit]), mask


_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmur3_long(v: np.ndarray) -> np.ndarray:
    """Vectorized murmur3_x86_32 (seed 0) of each int64 as 8 little-endian bytes, as int32.

    Equals ``mmh3.hash(struct.pack('<q', v))``; numpy uint32 arithmetic wraps mod 2**32
    exactly like the C implementation.
    """
    blocks = np.ascontiguousarray(v, dtype="<i8").view("<u4").reshape(-1, 2)
    h = np.zeros(len(blocks), dtype=np.uint32)
    for k in (blocks[:, 0].copy(), blocks[:, 1].copy()):
        k *= _C1
        k = _rotl(k, 15)
        k *= _C2
        h ^= k
        h = _rotl(h, 13)
        h = h * np.uint32(5) + np.uint32(0xE6546B64)
    h ^= np.uint32(8)  # total length in bytes
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h.view(np.int32)


_EXACT = decimal.Context(prec=100)  # above any decimal's 76 digits: scaling by it is exact


def _unscaled(a: pa.Array) -> tuple[np.ndarray | list[int], np.ndarray | None]:
    """The unscaled integers of decimal array ``a``, read from its storage (Python's Decimal
    rounds past 28 digits), and its null mask: int64s (vectorized) up to precision 18, where
    the low word is the value, Python ints beyond."""
    width = a.type.byte_width
    raw = np.frombuffer(a.buffers()[1], dtype=np.uint8)[a.offset * width : (a.offset + len(a)) * width]
    mask = a.is_null().to_numpy(zero_copy_only=False) if a.null_count else None
    if a.type.precision <= 18:
        return raw.view("<i8")[:: width // 8].copy(), mask
    data = raw.tobytes()
    return [int.from_bytes(data[i : i + width], "little", signed=True) for i in range(0, len(data), width)], mask


def _from_unscaled(values: np.ndarray | list[int], mask: np.ndarray | None, t: pa.DataType) -> pa.Array:
    """A decimal array of type ``t`` from unscaled integers (as ``_unscaled`` gives them)."""
    if isinstance(values, np.ndarray):  # two's complement words: the value, then its sign
        words = np.empty((len(values), t.byte_width // 8), dtype="<i8")
        words[:, 0] = values
        words[:, 1:] = (values >> 63)[:, None]
        validity = None if mask is None else pa.array(~mask).buffers()[1]
        return pa.Array.from_buffers(t, len(values), [validity, pa.py_buffer(words.tobytes())])
    out = [
        None if mask is not None and mask[i] else decimal.Decimal(u).scaleb(-t.scale, _EXACT)
        for i, u in enumerate(values)
    ]
    return pa.array(out, type=t)


def _min_be_bytes(n: int) -> bytes:
    """Minimal big-endian two's-complement bytes, as Java's BigInteger.toByteArray.

    Java sizes the array by ``bitLength() / 8 + 1``, where bitLength excludes the sign
    bit: for a negative n that is the bit length of ``~n`` (-128 is the one byte 0x80),
    not of ``abs(n)`` as Python's ``int.bit_length`` counts.
    """
    return n.to_bytes((n if n >= 0 else ~n).bit_length() // 8 + 1, "big", signed=True)


def _bucket(a: pa.Array, n: int) -> pa.Array:
    t = a.type
    if pa.types.is_integer(t) or pa.types.is_temporal(t):
        v, mask = _ints(a) if pa.types.is_integer(t) else _micros(a)
        h = murmur3_long(v)
    else:
        # Variable-length keys: hash per value with mmh3 (no vectorized murmur over ragged bytes).
        if pa.types.is_decimal(t):
            unscaled, nulls = _unscaled(a)
            keys = [None if nulls is not None and nulls[i] else _min_be_bytes(int(u)) for i, u in enumerate(unscaled)]
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            keys = [None if s is None else s.encode("utf-8") for s in a.to_pylist()]
        else:
            keys = a.to_pylist()
        mask = a.is_null().to_numpy(zero_copy_only=False) if a.null_count else None
        h = np.fromiter((0 if k is None else mmh3.hash(k) for k in keys), dtype=np.int32, count=len(keys))
    out = (h.astype(np.int64) & 0x7FFFFFFF) % n
    return pa.array(out.astype(np.int32), type=pa.int32(), mask=mask)


def lowest_truncation(t: pa.DataType, w: int) -> int:
    """The least multiple of ``w`` an integer or decimal type ``t`` holds (decimals: unscaled).

    Source values below it are those whose Iceberg truncation is not a multiple of ``w``
    within ``t``'s range: a wrapped integer, a decimal of more digits (or, in tables written
    before Lamina matched Iceberg there, this value): predicate projection leaves them alone.
    """
    return -((-_type_min(t)) // w * w)


def truncate_wraps(t: pa.DataType, w: int) -> bool:
    """Whether Iceberg's ``truncate[w]`` of some value of integer type ``t`` wraps around
    (Java's ``v - (((v % w) + w) % w)`` in int or long arithmetic): at the bottom of int32 and
    int64 unless ``w`` divides their minimum, and anywhere in an int's range once ``w + w``
    overflows it. Such a value is a large positive below a small one, so ``<`` cannot be
    projected onto it."""
    java = _java_integer(t)
    if java is None:
        return False
    if java == pa.int32() and 2 * w - 1 > 2**31 - 1:
        return True
    return t in (pa.int32(), pa.int64()) and (1 << (t.bit_width - 1)) % w != 0


def _java_truncate(v: np.ndarray, w: int) -> np.ndarray:
    """Iceberg's Java ``v - (((v % w) + w) % w)`` in ``v``'s integer type: numpy's integer
    arrays wrap in two's complement as Java's ints and longs do, and ``np.fmod`` is Java's
    ``%`` (the remainder takes the dividend's sign)."""
    width = v.dtype.type(w)
    with np.errstate(over="ignore"):
        return v - np.fmod(np.fmod(v, width) + width, width)


def _truncate(a: pa.Array, w: int) -> pa.Array:
    t = a.type
    if pa.types.is_integer(t):
        v = a.fill_null(0).to_numpy(zero_copy_only=False) if a.null_count else a.to_numpy(zero_copy_only=False)
        mask = a.is_null().to_numpy(zero_copy_only=False) if a.null_count else None
        java = _java_integer(t)
        if java is None:  # uint64: no Iceberg type; the floor, which it always holds
            return pa.array(v - np.mod(v, np.uint64(w)), type=t, mask=mask)
        v = v.astype(java.to_pandas_dtype())
        return pa.array(_java_truncate(v, w), type=java, mask=mask)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        # Arrow slices utf8 by code points here despite the kernel's name.
        return pc.utf8_slice_codeunits(a, 0, w)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.binary_slice(a, 0, w)
    # decimal: floor the unscaled value to a multiple of w (Java's BigInteger arithmetic,
    # exact), in the wider type truncate_result_type gives where the floor needs more digits.
    u, mask = _unscaled(a)
    out = truncate_result_type(t, w)
    if isinstance(u, np.ndarray) and out.precision <= 18:
        return _from_unscaled(u - np.mod(u, w), mask, out)
    return _from_unscaled([int(x) - int(x) % w for x in u], mask, out)


def apply_transform(
    transform: str, values: pa.Array | pa.ChunkedArray, source_type: pa.DataType | None = None
) -> pa.Array:
    """Apply ``transform`` to every value (vectorized); nulls stay null."""
    a = _as_array(values)
    t = source_type if source_type is not None else a.type
    if not a.type.equals(t):
        a = a.cast(t)
    result_type = transform_result_type(transform, t)
    name, arg = _parse_transform(transform)
    if name == "identity":
        return a
    if name == "bucket":
        assert arg is not None  # bucket[N] always has its count
        return _bucket(a, arg)
    if name == "truncate":
        assert arg is not None
        return _truncate(a, arg)
    if name == "hour":
        v, mask = _ints(a)
        return _from_np(np.floor_divide(v, 3600 * _UNITS_PER_SECOND[t.unit]), mask, result_type)
    days, mask = _days(a)
    if name == "day":
        return _from_np(days, mask, pa.date32())
    # numpy's datetime64 unit conversions floor, giving months/years since 1970 for any date.
    d64 = days.astype("datetime64[D]")
    out = d64.astype("datetime64[M]" if name == "month" else "datetime64[Y]").astype(np.int64)
    return _from_np(out, mask, pa.int32())


# --- predicate projection ------------------------------------------------------------

_MONOTONIC = {"year", "month", "day", "hour", "truncate"}


def _transform_values(field: PartitionField, values: Sequence[Any], source_type: pa.DataType) -> list[pa.Scalar]:
    if all(isinstance(v, pa.Scalar) and v.type.equals(source_type) for v in values):
        src = pa.array(values, type=source_type)  # keeps e.g. nanoseconds that as_py would drop
    else:
        src = pa.array([v.as_py() if isinstance(v, pa.Scalar) else v for v in values], type=source_type)
    arr = apply_transform(field.transform, src, source_type)
    return [arr[i] for i in range(len(arr))]


def _narrower_types(t: pa.DataType) -> list[pa.DataType]:
    """``t`` and the types of its family a column of ``t`` may have been widened from: the
    partition values of files written then were computed in those."""
    if pa.types.is_decimal(t):
        return [_decimal_type(p, t.scale) for p in range(max(t.scale, 1), t.precision + 1)]
    if pa.types.is_signed_integer(t):
        return [x for x in (pa.int8(), pa.int16(), pa.int32(), pa.int64()) if x.bit_width <= t.bit_width]
    return [t]


def _truncation_projects(transform: str, op: str, values: Sequence[Any], source_type: pa.DataType) -> bool:
    """Whether ``source <op> values`` may be projected onto ``truncate[w]`` of ``source_type``
    as onto a monotonic transform. Not for a value below the lowest truncation of its type or
    of a narrower one it may have been widened from (there Iceberg's value wraps or takes more
    digits, and tables Lamina wrote before it matched Iceberg store that lowest truncation), nor ``<`` / ``<=``
    where the truncation wraps some value around to a large positive."""
    if not (pa.types.is_integer(source_type) or pa.types.is_decimal(source_type)):
        return True
    _, w = _parse_transform(transform)
    assert w is not None  # a truncate transform (the only one with an exactness question)
    if pa.types.is_integer(source_type) and 2 * w - 1 > 2**31 - 1:
        return False  # Java's int arithmetic overflows (w + w) for values anywhere in the range
    if op in ("<", "<=") and any(truncate_wraps(t, w) for t in _narrower_types(source_type)):
        return False
    scalars = pa.array([v.as_py() if isinstance(v, pa.Scalar) else v for v in values], source_type)
    units = _unscaled(scalars)[0] if pa.types.is_decimal(source_type) else scalars.to_pylist()
    regions = [(_type_min(t), lowest_truncation(t, w)) for t in _narrower_types(source_type)]
    return not any(u is not None and lo <= int(u) < hi for u in units for lo, hi in regions)


def _type_min(t: pa.DataType) -> int:
    """The least value of an integer type, or the least unscaled value of a decimal type."""
    if pa.types.is_decimal(t):
        return -(10**t.precision - 1)
    return -(1 << (t.bit_width - 1)) if pa.types.is_signed_integer(t) else 0


def project_inclusive(field: PartitionField, op: str, value: Any, source_type: pa.DataType) -> tuple[str, Any] | None:
    """Project ``source <op> value`` onto ``field``'s partition value.

    Returns ``(op', value')`` such that ``partition <op'> value'`` holds for every row
    where the source predicate holds (so a file failing it can be skipped), or None
    when nothing can be concluded. ``op`` is one of = != < <= > >= in not_in; for
    in/not_in ``value`` is a sequence and the returned value a tuple. Values may be
    Python values or pa.Scalars of ``source_type``; returned values are pa.Scalars
    of the partition type.
    """
    name, _ = _parse_transform(field.transform)
    if op in ("in", "not_in"):
        values = list(value)
        if not values:
            return None
    else:
        values = [value]
    if name == "identity":
        out = _transform_values(field, values, source_type)
        return (op, tuple(out)) if op in ("in", "not_in") else (op, out[0])
    if op in ("!=", "not_in"):
        return None  # many source values share a partition value: can't exclude any
    if name == "bucket" and op not in ("=", "in"):
        return None  # buckets are unordered
    if name != "bucket" and name not in _MONOTONIC:
        return None
    if name == "truncate" and not _truncation_projects(field.transform, op, values, source_type):
        return None
    out = _transform_values(field, values, source_type)
    if op == "in":
        seen: dict[Any, pa.Scalar] = {}
        for s in out:
            seen.setdefault(s.as_py(), s)
        return "in", tuple(seen.values())
    # A monotonic non-decreasing t keeps order non-strictly: v < x implies t(v) <= t(x).
    projected_op = {"=": "=", "<": "<=", "<=": "<=", ">": ">=", ">=": ">="}[op]
    return projected_op, out[0]


_TRANSFORM_ARG_RE = re.compile(r"^\s*([A-Za-z_]+)\s*(?:\[\s*([0-9]+)\s*\]|\(\s*([0-9]+)\s*\))?\s*$")


def normalize_transform(transform: str) -> str:
    """A transform as given by a user (``day``, ``days``, ``bucket[16]``, ``bucket(16)``,
    ``Truncate[4]``) in its stored form (``day``, ``bucket[16]``); InvalidPartitionSpec if unknown."""
    m = _TRANSFORM_ARG_RE.match(transform) if isinstance(transform, str) else None
    if m is None:
        _parse_transform(transform)  # raises, naming the transforms
    fn = _ALIASES.get(m.group(1).lower(), m.group(1).lower())  # type: ignore[union-attr]
    arg = m.group(2) or m.group(3)  # type: ignore[union-attr]
    out = f"{fn}[{int(arg)}]" if arg is not None else fn
    _parse_transform(out)
    return out
