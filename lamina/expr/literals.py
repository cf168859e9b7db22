"""A literal mapped onto a column's type: exactly where the type holds it, else the nearest
representable values below and above it (``bind`` rewrites a comparison onto those), or
InvalidPredicate where the literal makes no sense for the type."""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from lamina.errors import InvalidPredicate

__all__ = ["Coerced", "coerce_literal", "coercer", "is_nan"]

_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=_dt.UTC)
_US_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}
_MIN_DAY = (_dt.date.min - _EPOCH.date()).days
_MAX_DAY = (_dt.date.max - _EPOCH.date()).days
_WIDE = decimal.Context(prec=400, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)  # exact scaling
# +-inf as integers beyond every type's range; NaN above even that (never equal to a value).
_INF_INT = 1 << 200
_NAN_FLOOR = (_INF_INT + 1, False)


class _Mismatch(Exception):
    pass


@dataclass(frozen=True)
class Coerced:
    """A literal mapped onto a column type.

    ``exact`` is set when the type holds the value. Otherwise ``lo``/``hi`` are the
    nearest representable values strictly below/above it (None if there is none).
    """

    exact: pa.Scalar | None
    lo: pa.Scalar | None = None
    hi: pa.Scalar | None = None


def _between(n: int, exact: bool, lo_lim: int, hi_lim: int, make) -> Coerced:
    """``n`` exact, or ``v`` in (n, n+1) when not exact; on an integer domain [lo_lim, hi_lim]."""
    if exact and lo_lim <= n <= hi_lim:
        return Coerced(make(n))
    below, above = (n - 1, n + 1) if exact else (n, n + 1)
    lo = None if below < lo_lim else make(min(below, hi_lim))
    hi = None if above > hi_lim else make(max(above, lo_lim))
    return Coerced(None, lo, hi)


def _rational_floor(v: Any) -> tuple[int, bool]:
    """(floor(v), v is integral) for a number; +-inf as huge ints, NaN (which sorts above
    every number, equal to none) just above +inf and not integral."""
    if isinstance(v, bool):
        raise _Mismatch
    if isinstance(v, int):
        return v, True
    if isinstance(v, float):
        if math.isnan(v):
            return _NAN_FLOOR
        if math.isinf(v):
            return _INF_INT * (1 if v > 0 else -1), True
        f = math.floor(v)
        return f, f == v
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return _NAN_FLOOR
        if v.is_infinite():
            return _INF_INT * (1 if v > 0 else -1), True
        f = int(v.to_integral_value(rounding=decimal.ROUND_FLOOR))
        return f, f == v
    raise _Mismatch


def _number(v: Any) -> Any:
    """Numbers pass; numeric strings ('42', '1.5') are read; anything else mismatches."""
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s)
        except ValueError:
            try:
                return decimal.Decimal(s) if s.lower() not in ("nan", "inf", "-inf", "infinity") else float(s)
            except decimal.InvalidOperation:
                raise _Mismatch from None
    if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
        return v
    raise _Mismatch


def _int_limits(t: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(t.to_pandas_dtype())
    return int(info.min), int(info.max)


def _coerce_int(v: Any, t: pa.DataType) -> Coerced:
    fl = _rational_floor(_number(v))
    lo, hi = _int_limits(t)
    return _between(fl[0], fl[1], lo, hi, lambda n: pa.scalar(n, type=t))


def _coerce_decimal(v: Any, t: pa.DataType) -> Coerced:
    v = _number(v)
    d = decimal.Decimal(repr(v)) if isinstance(v, float) and math.isfinite(v) else decimal.Decimal(v)
    # Work on the unscaled integer: decimal(p, s) holds integers in (-10**p, 10**p) / 10**s.
    fl = _rational_floor(d.scaleb(t.scale, _WIDE) if d.is_finite() else d)
    lim = 10**t.precision - 1
    return _between(fl[0], fl[1], -lim, lim, lambda n: pa.scalar(decimal.Decimal(n).scaleb(-t.scale, _WIDE), type=t))


def _as_utc_naive(d: _dt.datetime) -> _dt.datetime:
    return d.astimezone(_dt.UTC).replace(tzinfo=None) if d.tzinfo else d


def _datetime(v: Any) -> _dt.datetime | _dt.date:
    if isinstance(v, str):
        s = v.strip()
        try:
            return _dt.date.fromisoformat(s)
        except ValueError:
            try:
                return _dt.datetime.fromisoformat(s)
            except ValueError:
                raise _Mismatch from None
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v
    raise _Mismatch


def _micros(d: _dt.datetime) -> int:
    """Exact microseconds since the epoch (naive = UTC)."""
    delta = _as_utc_naive(d) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _coerce_date(v: Any, t: pa.DataType) -> Coerced:
    d = _datetime(v)
    if isinstance(d, _dt.datetime):
        days, rem = divmod(_micros(d), 86_400_000_000)
        exact = rem == 0
    else:
        days, exact = (d - _EPOCH.date()).days, True
    return _between(days, exact, _MIN_DAY, _MAX_DAY, lambda n: pa.scalar(_EPOCH.date() + _dt.timedelta(days=n), type=t))


def _coerce_timestamp(v: Any, t: pa.DataType) -> Coerced:
    d = _datetime(v)
    if not isinstance(d, _dt.datetime):
        d = _dt.datetime(d.year, d.month, d.day)
    # A naive literal against a tz-aware column is read as UTC (the stored instant's zone).
    us = _micros(d)
    per = _US_PER_UNIT[t.unit]
    n, exact = (us * 1000, True) if per is None else (us // per, us % per == 0)
    lo, hi = _int_limits(pa.int64())
    return _between(n, exact, lo, hi, lambda k: pa.scalar(k, type=t))


def _coerce_time(v: Any, t: pa.DataType) -> Coerced:
    if isinstance(v, str):
        try:
            v = _dt.time.fromisoformat(v.strip())
        except ValueError:
            raise _Mismatch from None
    if not isinstance(v, _dt.time):
        raise _Mismatch
    us = ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    per = _US_PER_UNIT[t.unit]
    n, exact = (us * 1000, True) if per is None else (us // per, us % per == 0)
    units_per_day = 86_400_000_000 * 1000 if per is None else 86_400_000_000 // per
    return _between(n, exact, 0, units_per_day - 1, lambda k: pa.scalar(k, type=t))


def _coerce_bool(v: Any, t: pa.DataType) -> Coerced:
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        v = v.strip().lower() == "true"
    if not isinstance(v, (bool, np.bool_)):
        raise _Mismatch
    return Coerced(pa.scalar(bool(v), type=t))


def _coerce_float(v: Any, t: pa.DataType) -> Coerced:
    v = _number(v)
    if isinstance(v, decimal.Decimal):
        v = float(v)  # a DECIMAL literal meets a float column as a DOUBLE (Spark), its nearest
    if isinstance(v, float) and not math.isfinite(v) or isinstance(v, decimal.Decimal) and not v.is_finite():
        return Coerced(pa.scalar(float(v), type=t))  # NaN and +-inf are values of every float type
    kind = np.dtype(t.to_pandas_dtype()).type
    exact = Fraction(v)
    with np.errstate(over="ignore"):
        # The nearest value of the column's type (within one step of it, so a neighbour of v).
        try:
            near = kind(float(v))
        except OverflowError:  # an integer beyond every double
            near = kind(math.copysign(math.inf, v))
        if math.isinf(near):  # beyond the type's finite range: between its largest value and inf
            top = np.finfo(kind).max
            lo, hi = (kind(top), near) if near > 0 else (near, kind(-top))
        elif Fraction(float(near)) == exact:
            return Coerced(pa.scalar(near, type=t))
        elif Fraction(float(near)) > exact:
            lo, hi = np.nextafter(near, kind(-math.inf)), near
        else:
            lo, hi = near, np.nextafter(near, kind(math.inf))
    return Coerced(None, pa.scalar(lo, type=t), pa.scalar(hi, type=t))


def _coerce_string(v: Any, t: pa.DataType) -> Coerced:
    if not isinstance(v, str):
        raise _Mismatch
    return Coerced(pa.scalar(v, type=t))


def _coerce_binary(v: Any, t: pa.DataType) -> Coerced:
    if isinstance(v, str):
        v = v.encode("utf-8")
    if not isinstance(v, (bytes, bytearray, memoryview)):
        raise _Mismatch
    v = bytes(v)
    if pa.types.is_fixed_size_binary(t) and len(v) != t.byte_width:
        raise _Mismatch
    return Coerced(pa.scalar(v, type=t))


def coercer(t: pa.DataType) -> Callable[[Any, pa.DataType], Coerced] | None:
    """The function mapping literals onto type ``t``; None for a type no literal is compared with."""
    checks = [
        (pa.types.is_boolean, _coerce_bool),
        (pa.types.is_integer, _coerce_int),
        # (not half floats: Arrow has no comparison kernel for them, nor casts them implicitly to a type that has)
        (lambda x: pa.types.is_floating(x) and not pa.types.is_float16(x), _coerce_float),
        (pa.types.is_decimal, _coerce_decimal),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x), _coerce_string),
        (
            lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x) or pa.types.is_fixed_size_binary(x),
            _coerce_binary,
        ),
        (pa.types.is_date, _coerce_date),
        (pa.types.is_timestamp, _coerce_timestamp),
        (pa.types.is_time, _coerce_time),
    ]
    for pred, fn in checks:
        if pred(t):
            return fn
    return None


def coerce_literal(value: Any, t: pa.DataType, column: str) -> Coerced:
    """Map ``value`` onto column type ``t`` (InvalidPredicate if it makes no sense for it)."""
    fn = coercer(t)
    if fn is None:  # (whatever the literal: an Arrow scalar of the column's own type too)
        raise InvalidPredicate(
            f"column {column!r} has type {t}, which cannot be compared with a literal; "
            "only IS NULL / IS NOT NULL apply to it"
        )
    v = value
    if isinstance(v, pa.Scalar):
        if v.type.equals(t) and v.is_valid:
            return Coerced(v)
        v = v.as_py()
    elif isinstance(v, np.generic):
        v = v.item()
    if v is None:
        raise InvalidPredicate(f"column {column!r}: NULL cannot be compared; use IS NULL / IS NOT NULL")
    try:
        return fn(v, t)
    except (_Mismatch, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        raise InvalidPredicate(
            f"cannot compare column {column!r} of type {t} with literal {v!r} ({type(v).__name__})"
        ) from None


def is_nan(v: Any) -> bool:
    """Whether a (bound) literal is a float NaN."""
    if isinstance(v, pa.Scalar):
        return pa.types.is_floating(v.type) and v.is_valid and math.isnan(v.as_py())
    return isinstance(v, float) and math.isnan(v)
