"""The main job on the embedded default (a local directory, no server).

Until the Spark pipeline lands this is an end-to-end run of the core format:
create a partitioned table, load a few daily batches, overwrite one day,
query with pruning, time-travel by version and timestamp, and check the table.
Run with `make demo` (or `python -m lamina.demo [warehouse dir]`).
"""

from __future__ import annotations

import shutil
import sys
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
from rich.console import Console

import lamina
from lamina.maintenance import fsck

console = Console()


def daily_batch(day: int, rows: int, start_id: int) -> pa.Table:
    rng = np.random.default_rng(day)
    base = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=day)
    return pa.table(
        {
            "id": pa.array(np.arange(start_id, start_id + rows), pa.int64()),
            "category": pa.array([f"c{i}" for i in rng.integers(0, 8, rows)]),
            "amount": pa.array(rng.normal(100, 25, rows)),
            "ts": pa.array([base + timedelta(seconds=int(s)) for s in rng.integers(0, 86_400, rows)], pa.timestamp("us", "UTC")),
        }
    )


def main(warehouse: str = "demo-warehouse") -> None:
    shutil.rmtree(warehouse, ignore_errors=True)
    uri = f"{warehouse}/events"
    schema = daily_batch(0, 1, 0).schema
    t = lamina.create_table(uri, schema, partition_by=["day(ts)"], properties={"write.max-rows-per-file": "50000"})
    console.print(f"[bold]created[/bold] {t.uri} (uuid {t.uuid})")

    next_id, per_day = 0, 100_000
    for day in range(5):
        t0 = time.perf_counter()
        v = t.append(daily_batch(day, per_day, next_id))
        next_id += per_day
        console.print(f"day {day}: appended {per_day} rows as version {v} in {(time.perf_counter() - t0) * 1000:.0f} ms")
    after_loads = t.version
    t_loads = t.metadata.timestamp_ms

    # Re-deliver day 2 (a corrected batch): replace exactly that day, as one version.
    fixed = daily_batch(2, 80_000, 10_000_000)
    v = t.overwrite(fixed, where="ts >= TIMESTAMP '2026-01-03 00:00:00' AND ts < TIMESTAMP '2026-01-04 00:00:00'")
    console.print(f"overwrote day 2 with {fixed.num_rows} corrected rows as version {v}")

    t = lamina.open_table(uri)
    q = "category = 'c3' AND id >= 150000 AND id < 250000"
    scan = t.scan(where=q, columns=["id", "category", "amount"])
    plan = scan.plan()
    total = len(t.scan().plan())
    rows = scan.to_arrow()
    console.print(f"query [cyan]{q}[/cyan]: {len(plan)} of {total} files after pruning, {rows.num_rows} rows")

    now_rows = t.scan().count()
    old_rows = t.scan(version=after_loads).count()
    ts_rows = t.scan(timestamp=t_loads).count()
    console.print(f"rows now: {now_rows}; as of version {after_loads}: {old_rows}; as of its timestamp: {ts_rows}")
    assert old_rows == ts_rows == 5 * per_day and now_rows == 4 * per_day + fixed.num_rows

    for h in t.history(limit=3):
        console.print(f"  v{h['version']} {h['operation']:<9} {h['summary']}")
    rep = fsck(t)
    console.print(f"fsck: {rep.checked_files} referenced files checked, {len(rep.missing)} missing, "
                  f"{len(rep.unreferenced)} unreferenced -> {'[green]OK[/green]' if rep.ok else '[red]FAIL[/red]'}")
    if not rep.ok:
        sys.exit(1)


if __name__ == "__main__":
    main(*sys.argv[1:])
