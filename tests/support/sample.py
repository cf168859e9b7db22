"""The sample table of the format tests (spec, version log, manifest tree, scans, operations):
id (required), category, value, ts; ``batch(start, n)`` makes rows id = start .. start + n - 1."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("category", pa.string()),
        pa.field("value", pa.float64()),
        pa.field("ts", pa.timestamp("us", "UTC")),
    ]
)
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def batch(start: int, n: int, cat_mod: int = 5) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "category": [f"c{i % cat_mod}" for i in range(start, start + n)],
            "value": [float(i) / 3 for i in range(start, start + n)],
            "ts": pa.array([T0 + timedelta(hours=i) for i in range(start, start + n)], pa.timestamp("us", "UTC")),
        },
        schema=SCHEMA,
    )


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())

