"""Arrow rows and version-file fields as the JSON the explorer's API returns."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pyarrow as pa

__all__ = ["int_or_none", "jsonable", "rows_of"]


def int_or_none(s: dict, key: str) -> int | None:
    """``s[key]`` as an int; None when it is missing or not a number."""
    v = s.get(key)
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def jsonable(v: Any) -> Any:
    """A cell of an Arrow row as JSON: bytes as hex, times as ISO text, NaN as null."""
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)  # decimal, date, time, timedelta


def rows_of(t: pa.Table) -> list[dict[str, Any]]:
    """The rows of ``t``, each cell ``jsonable``."""
    return [{k: jsonable(v) for k, v in r.items()} for r in t.to_pylist()]
