#!/usr/bin/env python
"""The Iceberg view (issue 51): its cost per commit, and Iceberg engines planning over it.

    .venv/bin/python bench/iceberg_bench.py            # full run -> prints the section for BENCHMARKS.md
    .venv/bin/python bench/iceberg_bench.py --quick    # smaller tables, a smoke test

1. **Cost of the view per append**: tables of 1,000 and 100,000 data files (registered by one
   ``add_files`` of entries with id statistics, ``check_files=False``: the view reads manifests,
   never data files), view on. Then ``--appends`` (30) appends of 100 rows each per table, the
   tables taking turns; for each, the time of the whole ``t.append`` and, inside it, of the
   view's sync (``lamina.iceberg.sync``, wrapped with a timer). Figure: p50 of sync / (append - sync), the view's cost against the
   commit's own; target <= 0.2x, and flat from 1,000 to 100,000 files. The one-time cost of
   enabling the view on the 100,000-file table is printed too.
2. **Planning a 1%-selective scan**: ``--plan-files`` (20,000) Parquet files of 10 rows, file i
   holding ids [10 i, 10 i + 10), written once; a Lamina table registers them (``add_files``
   with statistics) and enables the view; a pyiceberg table (SqlCatalog on SQLite, format
   version 2: pyiceberg writes no v3) adds the same files (``add_files``, which reads their
   footers). Both planned with ``id >= <99th percentile>`` (200 files): pyiceberg
   ``scan(row_filter).plan_files()`` and DuckDB 1.5's ``EXPLAIN SELECT count(*) FROM
   iceberg_scan(...) WHERE ...`` (its iceberg extension plans at bind), alternating, ``--rounds``
   (7) each. Figure: p50 over the view / p50 over pyiceberg's table; target <= 1.0x.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lamina  # noqa: E402
from lamina.iceberg import view as iceberg_view  # noqa: E402

from common import make_batch, SCHEMA  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HAS_DUCKDB_ICEBERG = importlib.util.find_spec("duckdb_extension_iceberg") is not None


def entries(n: int, rows: int = 1024) -> pa.Table:
    i = np.arange(n, dtype=np.int64)
    return pa.table({
        "path": pa.array([f"data/f{k:07d}.parquet" for k in range(n)]),
        "size": pa.array(np.full(n, 4096, np.int64)),
        "record_count": pa.array(np.full(n, rows, np.int64)),
        "lower.id": pa.array(i * rows), "upper.id": pa.array(i * rows + rows - 1),
    })


def view_costs(sizes: tuple[int, ...], appends: int) -> list[dict]:
    """The view's cost per append on a table of each size, the tables taking turns (order
    flipped every round) so that the machine's load falls on all alike."""
    import lamina.table.iceberg_view as hook

    tables, enable_s = {}, {}
    for files in sizes:
        d = tempfile.mkdtemp(prefix="lamina-iceberg-bench-")
        t = lamina.create_table(f"{d}/t", SCHEMA)
        t.add_files(entries(files), check_files=False)
        s = time.perf_counter()
        t.set_iceberg_enabled()
        enable_s[files] = time.perf_counter() - s
        tables[files] = t
    spent: list[float] = []
    real = iceberg_view.sync

    def timed(*a, **k):
        s = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            spent.append(time.perf_counter() - s)

    got: dict[int, tuple[list[float], list[float]]] = {n: ([], []) for n in sizes}
    hook.sync = timed
    try:
        for k in range(appends + 2):  # the first two of each table untimed
            for files in (sizes if k % 2 == 0 else tuple(reversed(sizes))):
                spent.clear()
                s = time.perf_counter()
                tables[files].append(make_batch(10**9 + 100 * k, 100))
                total = time.perf_counter() - s
                if k >= 2:
                    got[files][0].append(sum(spent))
                    got[files][1].append(total - sum(spent))
    finally:
        hook.sync = real
    out = []
    for files in sizes:
        syncs, commits = got[files]
        ratios = [a / b for a, b in zip(syncs, commits)]
        out.append({"files": files, "enable_s": enable_s[files], "append_ms": statistics.median(
            [a + b for a, b in zip(syncs, commits)]) * 1e3, "sync_ms": statistics.median(syncs) * 1e3,
            "commit_ms": statistics.median(commits) * 1e3, "ratio": statistics.median(ratios),
            "ratio_p25": np.percentile(ratios, 25), "ratio_p75": np.percentile(ratios, 75)})
    return out


def planning(nfiles: int, rounds: int) -> dict:
    from pyiceberg.catalog.sql import SqlCatalog

    d = tempfile.mkdtemp(prefix="lamina-iceberg-plan-")
    t = lamina.create_table(f"{d}/lamina", SCHEMA)
    os.makedirs(f"{d}/lamina/data")
    for i in range(nfiles):
        pq.write_table(make_batch(10 * i, 10), f"{d}/lamina/data/f{i:06d}.parquet")
    listing = [f"data/f{i:06d}.parquet" for i in range(nfiles)]
    files = pa.table({
        "path": listing, "size": [os.path.getsize(f"{d}/lamina/{p}") for p in listing],
        "record_count": [10] * nfiles,
        "lower.id": [10 * i for i in range(nfiles)], "upper.id": [10 * i + 9 for i in range(nfiles)],
    })
    t.add_files(files)
    t.set_iceberg_enabled()
    cat = SqlCatalog("bench", uri=f"sqlite:///{d}/ice.db", warehouse=f"file://{d}/ice")
    cat.create_namespace("b")
    ice = cat.create_table("b.t", schema=t.schema, properties={"format-version": "2"})
    ice.add_files([f"{d}/lamina/{p}" for p in listing])
    ice = cat.load_table("b.t")
    cut = 10 * nfiles * 99 // 100
    from pyiceberg.table import StaticTable

    view = StaticTable.from_metadata(f"{d}/lamina")
    res: dict[str, list[float]] = {"pyiceberg view": [], "pyiceberg table": [], "duckdb view": [], "duckdb table": []}
    planned = {}
    for r in range(rounds):
        for name, table in (("view", view), ("table", ice))[:: 1 if r % 2 == 0 else -1]:
            s = time.perf_counter()
            tasks = list(table.scan(row_filter=f"id >= {cut}").plan_files())
            res[f"pyiceberg {name}"].append(time.perf_counter() - s)
            planned[f"pyiceberg {name}"] = len(tasks)
    if HAS_DUCKDB_ICEBERG:
        script = f"""
import duckdb, glob, os, time, json
site = os.path.dirname(os.path.dirname(duckdb.__file__))
con = duckdb.connect(config={{"allow_unsigned_extensions": "true"}})
for e in ("avro", "iceberg"):
    con.execute("LOAD '" + glob.glob(site + "/duckdb_extension_" + e + "/extensions/*/" + e + ".duckdb_extension")[0] + "'")
out = {{"view": [], "table": []}}
paths = {{"view": {json.dumps(f"{d}/lamina")!s}, "table": {json.dumps(ice.metadata_location)!s}}}
for r in range({rounds}):
    for name in (["view", "table"] if r % 2 == 0 else ["table", "view"]):
        s = time.perf_counter()
        con.execute(f"EXPLAIN SELECT count(*) FROM iceberg_scan('{{paths[name]}}') WHERE id >= {cut}").fetchall()
        out[name].append(time.perf_counter() - s)
print(json.dumps(out))
"""
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        duck = json.loads(done.stdout)
        res["duckdb view"], res["duckdb table"] = duck["view"], duck["table"]
    p50 = {k: statistics.median(v) * 1e3 for k, v in res.items() if v}
    return {"files": nfiles, "p50_ms": p50, "planned": planned}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--appends", type=int, default=30)
    ap.add_argument("--plan-files", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    sizes = (1_000, 10_000) if a.quick else (1_000, 100_000)
    nplan = 2_000 if a.quick else a.plan_files
    cost = view_costs(sizes, 10 if a.quick else a.appends)
    plan = planning(nplan, 3 if a.quick else a.rounds)
    print("| data files | append p50 (ms) | commit p50 (ms) | view sync p50 (ms) | view / commit p50 (p25-p75) | target | enabling the view (s) |")
    print("|---|---|---|---|---|---|---|")
    for c in cost:
        verdict = "PASS" if c["ratio"] <= 0.2 else "MISS"
        print(f"| {c['files']:,} | {c['append_ms']:.2f} | {c['commit_ms']:.2f} | {c['sync_ms']:.2f} | {c['ratio']:.2f}x "
              f"({c['ratio_p25']:.2f}-{c['ratio_p75']:.2f}) | <= 0.2x: {verdict} | {c['enable_s']:.2f} |")
    print()
    print(f"planning `id >= 99th percentile` over {plan['files']:,} files: {plan['planned']}")
    print("| engine | over the view (ms, p50) | over pyiceberg's table (ms, p50) | ratio | target |")
    print("|---|---|---|---|---|")
    for engine in ("pyiceberg", "duckdb"):
        v, t = plan["p50_ms"].get(f"{engine} view"), plan["p50_ms"].get(f"{engine} table")
        if v is None:
            print(f"| {engine} | - | - | - | not run (no duckdb-extension-iceberg) |")
            continue
        print(f"| {engine} | {v:.1f} | {t:.1f} | {v / t:.2f}x | <= 1.0x: {'PASS' if v / t <= 1.0 else 'MISS'} |")


if __name__ == "__main__":
    main()
