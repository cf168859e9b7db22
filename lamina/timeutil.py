"""Points in time as users give them -> epoch milliseconds (UTC), with clear errors."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone
from typing import Any

from lamina.errors import InvalidArgument


def now_ms() -> int:
    return int(time.time() * 1000)


def epoch_ms(t: Any, what: str = "timestamp", timedelta_sign: int = 0) -> int:
    """A datetime/date, ISO 8601 string or epoch milliseconds -> epoch ms.

    ``timedelta_sign``: -1 reads a timedelta as an age (now - td, e.g. ``older_than``),
    +1 as a time from now (now + td, e.g. ``expires_at``), 0 refuses it.
    """
    if isinstance(t, timedelta) and timedelta_sign:
        return now_ms() + timedelta_sign * int(t.total_seconds() * 1000)
    if isinstance(t, bool):
        raise InvalidArgument(f"{what} {t!r} is not a time")
    if isinstance(t, (int, float)):
        return int(t)
    if isinstance(t, str):
        try:
            t = datetime.fromisoformat(t)
        except ValueError:
            raise InvalidArgument(f"{what} {t!r} is not ISO 8601 (e.g. '2026-01-31T12:00:00+00:00')") from None
    if isinstance(t, date) and not isinstance(t, datetime):
        t = datetime(t.year, t.month, t.day)
    if isinstance(t, datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return int(t.timestamp() * 1000)
    kinds = "a datetime, ISO string or epoch milliseconds" + (", or a timedelta" if timedelta_sign else "")
    raise InvalidArgument(f"{what} must be {kinds}, not {type(t).__name__}")
