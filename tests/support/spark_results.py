"""Spark's results against Arrow tables: a DataFrame collected to Arrow, and rows as a
multiset that compares NaN and instants the way the tests mean them."""

from __future__ import annotations

import collections
import datetime as dt
import math

import pyarrow as pa


def _norm(v):
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc)
    return v


def bag(t: pa.Table, columns=None) -> collections.Counter:
    """Rows as a multiset of tuples (NaN made comparable, instants in UTC)."""
    cols = columns or t.column_names
    d = t.select(cols).to_pydict()
    return collections.Counter(tuple(_norm(d[c][i]) for c in cols) for i in range(t.num_rows))


def collect(df) -> pa.Table:
    return df.toArrow()
