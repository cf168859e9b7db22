"""The Iceberg view (issue 51): its cost per commit, and Iceberg engines planning over it (the
case `iceberg`; the DuckDB rows need duckdb-extension-iceberg, in the test extra).

1. **Cost of the view per append**: tables of 1,000 and 100,000 data files (``view_files``;
   registered by one ``add_files`` of entries with id statistics, ``check_files=False``: the view
   reads manifests, never data files), view on. Then ``appends`` (30) appends of 100 rows each per table, the
   tables taking turns; for each, the time of the whole ``t.append`` and, inside it, of the
   view's sync (``lamina.iceberg.sync``, wrapped with a timer). Figure: p50 of sync / (append - sync), the view's cost against the
   commit's own; target <= 0.2x, and flat from 1,000 to 100,000 files. The one-time cost of
   enabling the view on the 100,000-file table is printed too.
2. **Planning a 1%-selective scan**: ``plan_files`` (20,000) Parquet files of 10 rows, file i
   holding ids [10 i, 10 i + 10), written once; a Lamina table registers them (``add_files``
   with statistics) and enables the view; a pyiceberg table (SqlCatalog on SQLite, format
   version 2: pyiceberg writes no v3) adds the same files (``add_files``, which reads their
   footers). Both planned with ``id >= <99th percentile>`` (200 files): pyiceberg
   ``scan(row_filter).plan_files()`` and DuckDB's ``EXPLAIN SELECT count(*) FROM
   iceberg_scan(...) WHERE ...`` (its iceberg extension plans at bind), alternating, ``rounds``
   (7) each. Figure: p50 over the view / p50 over pyiceberg's table; target <= 1.0x.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import SCHEMA, fmt_s, fmt_x, make_batch
from registry import Run, case, module
from report import Report, Section, Target

SECTION_TITLE = "The Iceberg view (issue 51)"
HAS_DUCKDB_ICEBERG = importlib.util.find_spec("duckdb_extension_iceberg") is not None
VIEW_TARGET, PLAN_TARGET = 0.2, 1.0


def entries(n: int, rows: int = 1024) -> pa.Table:
    i = np.arange(n, dtype=np.int64)
    return pa.table({
        "path": pa.array([f"data/f{k:07d}.parquet" for k in range(n)]),
        "size": pa.array(np.full(n, 4096, np.int64)),
        "record_count": pa.array(np.full(n, rows, np.int64)),
        "lower.id": pa.array(i * rows), "upper.id": pa.array(i * rows + rows - 1),
    })


def view_costs(root: str, sizes: tuple[int, ...], appends: int) -> list[dict]:
    """The view's cost per append on a table of each size, the tables taking turns (order
    flipped every round) so that the machine's load falls on all alike."""
    import lamina
    import lamina.table.iceberg_view as hook
    from lamina.iceberg import view as iceberg_view

    tables, enable_s = {}, {}
    for files in sizes:
        t = lamina.create_table(f"{root}/t{files}", SCHEMA)
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


def planning(d: str, nfiles: int, rounds: int) -> dict:
    from pyiceberg.catalog.sql import SqlCatalog

    import lamina

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


@dataclass
class Sizes:
    view_files: tuple[int, ...] = (1_000, 100_000)  # data files of the tables the view's cost is measured on
    appends: int = 30
    plan_files: int = 20_000
    rounds: int = 7


@case("iceberg", title=SECTION_TITLE, sizes=Sizes,
      quick=dict(view_files=(1_000, 10_000), appends=10, plan_files=2_000, rounds=3),
      tiny=dict(view_files=(100, 1_000), appends=3, plan_files=100, rounds=1), needs=(module("pyiceberg", "fastavro"),),
      versions=("lamina", "pyiceberg", "fastavro", "pyarrow", "duckdb", "duckdb-extension-iceberg"), reps="rounds")
def iceberg(run: Run) -> Report:
    """The Iceberg view's cost per append; pyiceberg and DuckDB planning over it vs over pyiceberg's own table."""
    cfg = run.sizes
    cost = view_costs(run.ws.new("view"), cfg.view_files, cfg.appends)
    plan = planning(run.ws.new("plan"), cfg.plan_files, cfg.rounds)
    costs = Section(
        key="cost", title=f"Cost of the view per append (100 rows, {cfg.appends} appends per table, the tables taking turns)",
        what="The view's sync is timed inside each `t.append` (the commit hook); the commit's own time is the rest of "
             "the append; the ratio is sync / commit, p50 over the appends.",
        columns=["data files", "append p50", "commit p50", "view sync p50", "view / commit p50 (p25–p75)",
                 "enabling the view (one time)"])
    for c in cost:
        costs.rows.append([f"{c['files']:,}", fmt_s(c["append_ms"] / 1e3), fmt_s(c["commit_ms"] / 1e3),
                           fmt_s(c["sync_ms"] / 1e3), f"{fmt_x(c['ratio'])} ({c['ratio_p25']:.2f}–{c['ratio_p75']:.2f})",
                           f"{c['enable_s']:.2f} s"])
    ratios = ", ".join(f"{fmt_x(c['ratio'])} at {c['files']:,} files" for c in cost)
    targets = [Target(f"cost of the view per append ≤ {VIEW_TARGET}× the commit's own time",
                      all(c["ratio"] <= VIEW_TARGET for c in cost),
                      f"{ratios}; the sync's p50 {' → '.join(fmt_s(c['sync_ms'] / 1e3) for c in cost)}")]
    cut = f"{plan['files']:,}"
    plans = Section(
        key="plan", title=f"Planning `id >= <99th percentile>` over {cut} files ({plan['files'] // 100:,} match), "
                          f"{cfg.rounds} rounds alternating",
        what=(f"Both tables list the same {cut} Parquet files (10 rows each, file i holding ids 10i..10i+9): the view "
              "of a Lamina table (`add_files` with statistics, then `set_iceberg_enabled`), and a pyiceberg table "
              "(SqlCatalog on SQLite, format version 2; pyiceberg writes no v3) that `add_files`-ed them. pyiceberg: "
              "`scan(row_filter).plan_files()`; DuckDB: `EXPLAIN SELECT count(*) FROM iceberg_scan(...) WHERE ...` "
              "(its iceberg extension plans at bind)."),
        columns=["engine", "over the view (p50)", "over pyiceberg's table (p50)", "view / pyiceberg's"],
        notes=[f"Files planned: {plan['planned']}."])
    for engine, label in (("pyiceberg", "pyiceberg"), ("duckdb", "DuckDB")):
        v, t = plan["p50_ms"].get(f"{engine} view"), plan["p50_ms"].get(f"{engine} table")
        if v is None:
            plans.error_row(label, "not run (no duckdb-extension-iceberg: `pip install -e '.[test]'`)")
            targets.append(Target(f"{label}, the same", None, "not run"))
            continue
        plans.rows.append([label, f"{v:,.0f} ms", f"{t:,.0f} ms", fmt_x(v / t)])
        what = (f"pyiceberg planning a 1%-selective scan over the view of a {cut}-file table ≤ {PLAN_TARGET}× over "
                "pyiceberg's own table" if engine == "pyiceberg" else f"{label}, the same")
        targets.append(Target(what, v / t <= PLAN_TARGET, fmt_x(v / t)))
    return Report(title=SECTION_TITLE, targets=targets, sections=[costs, plans],
                  raw={"cost": cost, "plan": plan})
