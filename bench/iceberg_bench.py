"""The Iceberg view (issue 51): its cost per commit, and Iceberg engines planning over it (the
case `iceberg`; the DuckDB rows need duckdb-extension-iceberg, in the test extra).

1. **Cost of the view per append**: per size, three tables of 1,000 and 100,000 data files
   (``view_files``; registered by one ``add_files`` of entries with id statistics,
   ``check_files=False``: the view reads manifests, never data files): without the view, with
   it in the background (``iceberg.sync-mode=async``, the default) and with it before the
   commit returns (``sync``). Latency: ``appends`` (30) rounds of one 100-row append per
   table, the tables taking turns, the background writer idle before each: the time of the
   whole ``t.append``, of the view's commit hook inside it (``on_commit``) and of the view's
   sync wherever it ran. Figure: p50 of hook / (append - hook), the view's cost to the
   commit's caller against the commit's own; target <= 0.2x, and flat from 1,000 to 100,000
   files. Throughput: ``appends`` appends back to back per table, then a flush: what the
   background write costs in total. The one-time cost of enabling the view is printed too.
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


MODES = ("none", "async", "sync")  # no view; the view in the background (the default); before the commit returns


def view_costs(root: str, sizes: tuple[int, ...], appends: int) -> list[dict]:
    """Per size, three tables of the same files: without the view, with it in the background
    (``iceberg.sync-mode=async``, the default) and with it before the commit returns (``sync``).
    1. Latency: ``appends`` rounds, each appending once to every table (order flipped every
       round, so that the machine's load falls on all alike), the background writer idle
       before each (``lamina.iceberg.flush``, untimed): the time of ``t.append``, of the commit
       hook inside it (``on_commit``: what the view costs the commit's caller) and of the
       view's sync wherever it ran (``lamina.iceberg.sync``, wrapped with a timer).
    2. Throughput: ``appends`` appends back to back to each table, then a flush: the total."""
    import lamina
    import lamina.table.iceberg_view as hook
    from lamina.iceberg import flush

    tables, enable_s = {}, {}
    for files in sizes:
        for mode in MODES:
            t = lamina.create_table(f"{root}/t{files}-{mode}", SCHEMA)
            t.add_files(entries(files), check_files=False)
            if mode != "none":
                s = time.perf_counter()
                t.set_iceberg_enabled()
                enable_s[files] = time.perf_counter() - s
                if mode == "sync":
                    t.update_properties({"iceberg.sync-mode": "sync"})
            tables[files, mode] = t
    flush()
    syncs: list[float] = []
    hooks: list[float] = []
    real_sync, real_hook = hook.sync, hook.on_commit

    def timed_sync(*a, **k):
        s = time.perf_counter()
        try:
            return real_sync(*a, **k)
        finally:
            syncs.append(time.perf_counter() - s)

    def timed_hook(*a, **k):
        s = time.perf_counter()
        try:
            return real_hook(*a, **k)
        finally:
            hooks.append(time.perf_counter() - s)

    keys = [(files, mode) for files in sizes for mode in MODES]
    got: dict[tuple[int, str], dict[str, list[float]]] = {k: {"append": [], "hook": [], "sync": []} for k in keys}
    stream: dict[tuple[int, str], dict[str, float]] = {}
    hook.sync, hook.on_commit = timed_sync, timed_hook
    try:
        for k in range(appends + 2):  # the first two rounds untimed
            for key in keys if k % 2 == 0 else reversed(keys):
                flush()
                syncs.clear(), hooks.clear()
                s = time.perf_counter()
                tables[key].append(make_batch(10**9 + 100 * k, 100))
                total = time.perf_counter() - s
                flush()
                if k >= 2:
                    got[key]["append"].append(total)
                    got[key]["hook"].append(sum(hooks))
                    got[key]["sync"].append(sum(syncs))
        for key in keys:
            flush()
            syncs.clear()
            s = time.perf_counter()
            for j in range(appends):
                tables[key].append(make_batch(2 * 10**9 + 100 * j, 100))
            returned = time.perf_counter() - s
            flush()
            stream[key] = {"returned_s": returned, "total_s": time.perf_counter() - s, "syncs": len(syncs),
                           "sync_s": sum(syncs)}
    finally:
        hook.sync, hook.on_commit = real_sync, real_hook
    out = []
    p50 = statistics.median
    for files in sizes:
        none = p50(got[files, "none"]["append"])
        row: dict = {"files": files, "enable_s": enable_s[files], "none_ms": none * 1e3}
        for mode in ("async", "sync"):
            g = got[files, mode]
            commits = [a - h for a, h in zip(g["append"], g["hook"])]  # the append without its view hook
            ratios = [h / c for h, c in zip(g["hook"], commits)]
            row[mode] = {"append_ms": p50(g["append"]) * 1e3, "hook_ms": p50(g["hook"]) * 1e3,
                         "sync_ms": p50(g["sync"]) * 1e3, "ratio": p50(ratios),
                         "ratio_p25": float(np.percentile(ratios, 25)), "ratio_p75": float(np.percentile(ratios, 75)),
                         "vs_none": p50(g["append"]) / none}
        row["stream"] = {mode: stream[files, mode] for mode in MODES}
        out.append(row)
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
        what="Per size, three tables of the same files: no view, the view in the background (`iceberg.sync-mode=async`, "
             "the default) and before the commit returns (`sync`). Latency: each append with the background writer "
             "idle before it; the view hook is what `t.append` spends in the view's commit hook (queueing the "
             "update, or the whole sync); its ratio is hook / (append − hook), p50 over the appends, the target's "
             "figure. The sync is the view's write wherever it ran (in the background for async).",
        columns=["data files", "mode", "append p50", "vs no view", "view hook p50", "view / commit p50 (p25–p75)",
                 "view sync p50 (where it ran)"])
    for c in cost:
        costs.rows.append([f"{c['files']:,}", "no view", fmt_s(c["none_ms"] / 1e3), "1.00×", "–", "–", "–"])
        for mode in ("async", "sync"):
            m = c[mode]
            costs.rows.append([f"{c['files']:,}", mode, fmt_s(m["append_ms"] / 1e3), fmt_x(m["vs_none"]),
                               fmt_s(m["hook_ms"] / 1e3),
                               f"{fmt_x(m['ratio'])} ({m['ratio_p25']:.2f}–{m['ratio_p75']:.2f})",
                               fmt_s(m["sync_ms"] / 1e3) + (" (background)" if mode == "async" else "")])
    streams = Section(
        key="stream", title=f"A stream of appends: {cfg.appends} back to back per table, then a flush",
        what="What the background write costs in total: the appends' time until the last returned, and until the "
             "view caught up (`lamina.iceberg.flush()`), with the number of syncs the view needed (commits that "
             "found an update waiting join it).",
        columns=["data files", "mode", "appends returned", "view caught up", "vs no view (caught up)",
                 "syncs", "sync time (sum)"],
        notes=[f"Enabling the view (one time): " + ", ".join(f"{c['enable_s']:.2f} s at {c['files']:,} files"
                                                              for c in cost) + "."])
    for c in cost:
        base = c["stream"]["none"]["total_s"]
        for mode in MODES:
            st = c["stream"][mode]
            streams.rows.append([f"{c['files']:,}", "no view" if mode == "none" else mode, fmt_s(st["returned_s"]),
                                 fmt_s(st["total_s"]), fmt_x(st["total_s"] / base),
                                 "–" if mode == "none" else str(st["syncs"]),
                                 "–" if mode == "none" else fmt_s(st["sync_s"])])
    ratios = ", ".join(f"{fmt_x(c['async']['ratio'])} at {c['files']:,} files" for c in cost)
    targets = [Target(f"cost of the view per append ≤ {VIEW_TARGET}× the commit's own time",
                      all(c["async"]["ratio"] <= VIEW_TARGET for c in cost),
                      f"{ratios} (the view in the background; before the commit returns: "
                      f"{', '.join(fmt_x(c['sync']['ratio']) for c in cost)}); the sync's p50 "
                      f"{' → '.join(fmt_s(c['async']['sync_ms'] / 1e3) for c in cost)}")]
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
    return Report(title=SECTION_TITLE, targets=targets, sections=[costs, streams, plans],
                  raw={"cost": cost, "plan": plan})
