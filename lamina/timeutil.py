"""Points in time and durations as users give them -> milliseconds, with clear errors."""

from __future__ import annotations

import math
import numbers
import random
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

from lamina.errors import InvalidArgument

# The instants a datetime can hold (years 1 to 9999), in epoch milliseconds: every time
# Lamina stores or shows must convert back to one.
MIN_EPOCH_MS = -62_135_596_800_000
MAX_EPOCH_MS = 253_402_300_799_999

_EXAMPLES = "e.g. '2026-01-31T12:00:00+00:00', a datetime, or epoch milliseconds like 1769860800000"

# Epoch seconds of the years 2001 to 2286 (10**9 to 10**10), read as milliseconds, fall in
# the first four months of 1970, before any table. A number there is a time in seconds
# (``time.time()``) given where milliseconds go: read as 1970 it would make a tag that
# already expired (and expiry drops it with its versions), or a time travel to before the
# table. It is refused instead.
_SECONDS_LIKE = (10**9, 10**10)


def now_ms() -> int:
    return int(time.time() * 1000)


def iso_ms(ms: int, sep: str = "T") -> str:
    """Epoch milliseconds as people read them, in UTC to the millisecond: 2026-01-05T10:00:00.000Z
    (``sep`` between the date and the time)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime(f"%Y-%m-%d{sep}%H:%M:%S.%f")[:-3] + "Z"


def _in_range(ms: int, t: Any, what: str) -> int:
    if not MIN_EPOCH_MS <= ms <= MAX_EPOCH_MS:
        raise InvalidArgument(
            f"{what} {t!r} is out of range: times must fall in the years 1 to 9999 "
            f"(epoch milliseconds {MIN_EPOCH_MS} to {MAX_EPOCH_MS})"
        )
    return ms


def _finite_number(t: Any, what: str, unit: str) -> float | int:
    """``t`` as a finite int or float; InvalidArgument for NaN, infinities and bools."""
    if isinstance(t, bool):
        raise InvalidArgument(f"{what} {t!r} is a bool, not {unit}")
    if isinstance(t, numbers.Integral):
        return int(t)
    value = float(t)
    if not math.isfinite(value):
        raise InvalidArgument(f"{what} {t!r} is not a finite number; give {unit}")
    return value


def epoch_ms(t: Any, what: str = "timestamp", timedelta_sign: int = 0) -> int:
    """A datetime/date, ISO 8601 string or epoch milliseconds -> epoch ms.

    ``timedelta_sign``: -1 reads a timedelta as an age (now - td, e.g. ``older_than``),
    +1 as a time from now (now + td, e.g. ``expires_at``), 0 refuses it. NaN, infinities
    and times outside the years 1..9999 raise InvalidArgument.
    """
    if isinstance(t, timedelta) and timedelta_sign:
        if t < timedelta(0):  # an age or a time from now: negative would silently mean the opposite
            raise InvalidArgument(f"{what} {t!r} is a negative duration; give a duration >= 0 or a point in time")
        return _in_range(now_ms() + timedelta_sign * (t // timedelta(milliseconds=1)), t, what)
    if isinstance(t, numbers.Real):
        value = _finite_number(t, what, f"a time ({_EXAMPLES})")
        if _SECONDS_LIKE[0] <= value < _SECONDS_LIKE[1]:
            as_seconds = datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds")
            raise InvalidArgument(
                f"{what} {t!r} looks like epoch seconds ({as_seconds}): Lamina reads a number as epoch "
                f"milliseconds, where it would be a time in 1970; give int(seconds * 1000), a datetime "
                f"or an ISO 8601 string"
            )
        return _in_range(int(value), t, what)
    if isinstance(t, str):
        try:
            t = datetime.fromisoformat(t.strip())
        except ValueError:
            raise InvalidArgument(f"{what} {t!r} is not ISO 8601 ({_EXAMPLES})") from None
    if isinstance(t, date) and not isinstance(t, datetime):
        t = datetime(t.year, t.month, t.day)
    if isinstance(t, datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        try:
            ms = (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
        except (OverflowError, ValueError, TypeError):  # an offset past year 1 or 9999
            ms = None
        if not isinstance(ms, int):  # pandas NaT, a missing time, subtracts to NaT
            raise InvalidArgument(f"{what} {t!r} is not a time ({_EXAMPLES})")
        return _in_range(ms, t, what)
    kinds = "a datetime, ISO string or epoch milliseconds" + (", or a timedelta" if timedelta_sign else "")
    raise InvalidArgument(f"{what} must be {kinds}, not {type(t).__name__}")


def duration_ms(value: Any, what: str) -> int:
    """A duration -> milliseconds (>= 0): a timedelta, or a number of milliseconds (also as
    a string, as table properties hold it). NaN, infinities, negative durations and text
    that is not a number raise InvalidArgument."""
    unit = "a timedelta or milliseconds (a number >= 0), e.g. timedelta(hours=1) or 3600000"
    if isinstance(value, timedelta):
        ms = value // timedelta(milliseconds=1)
    elif isinstance(value, numbers.Real):
        ms = int(_finite_number(value, what, unit))
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise InvalidArgument(f"{what} {value!r} is not a duration; give {unit}") from None
        ms = int(_finite_number(number, what, unit))
    else:
        raise InvalidArgument(f"{what} must be {unit}, not {type(value).__name__}")
    if ms < 0:
        raise InvalidArgument(f"{what} {value!r} is negative; give {unit}")
    return ms


# Backoff jitter from the operating system's randomness, not Python's global ``random``: two
# processes that seeded that alike (a pipeline's ``random.seed(42)``, a test framework's
# seeding) would otherwise back off in lockstep and collide again on every retry, and each
# retry would shift the caller's own random sequence. (SystemRandom keeps no state, so a
# forked process does not repeat its parent's either.)
_jitter = random.SystemRandom()


def sleep_jitter(cap_s: float) -> None:
    """Sleep a uniformly random time in [0, ``cap_s``] seconds (full jitter)."""
    time.sleep(_jitter.uniform(0, cap_s))
