"""The benchmarks of BENCHMARKS.md sections 1-5, Lamina vs deltalake vs lance vs pyiceberg on the
same data: append latency, open of a long history, planning over 20,000 and 1,000,000 data files,
concurrent writers (the cases append, open, plan, plan1m, concurrent; `make bench` runs them).

A peer that is missing or fails shows "error: ..." in its cells; tracebacks go to
bench/out/errors.log. --only picks the systems (lamina and any of the peers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import systems
from common import (
    APPEND_BLOCK, OPEN_BLOCK, OUT_DIR, WARM_APPENDS, Workspace, err_text, fmt_ratio, fmt_s, log_error, make_batch, now,
    one_percent_ids, p50, run_json, say, synthetic_data_files, timed_append, timed_opens, warm_up_appends, worker_cmd,
)
from registry import Run, case
from report import Report, Section, Target, report_of, verdict

SYSTEMS = {"systems": tuple(systems.ORDER)}
VERSIONS = ("lamina", "deltalake", "pylance", "pyiceberg", "pyarrow")


def lamina_and_peers(run: Run) -> list[str]:
    names = run.only("systems")
    if "lamina" not in names:
        raise ValueError("--only must include lamina (every ratio is against it)")
    return names


# --------------------------------------------------------------------------- sizes
@dataclass
class AppendSizes:
    append_rows: int = 100
    append_n_peer: int = 1000
    append_n_lamina: int = 10_000
    append_budget_s: float = 1200.0  # per system; a slower system is stopped and says so


APPEND_QUICK = dict(append_n_peer=50, append_n_lamina=100, append_budget_s=60)
APPEND_TINY = dict(append_n_peer=20, append_n_lamina=30, append_budget_s=30)


@dataclass
class OpenSizes(AppendSizes):
    open_reps: int = 50


@dataclass
class PlanSizes:
    plan_files: int = 20_000
    plan_rpf: int = 1024  # rows per data file (deltalake can only split every 1024 rows)
    plan_cold_reps: int = 5
    plan_warm_reps: int = 5


@dataclass
class Plan1mSizes:
    m_files: int = 1_000_000
    m_commits: int = 100
    m_cold_reps: int = 7
    m_warm_reps: int = 3


@dataclass
class ConcurrentSizes:
    conc_writers: int = 16
    conc_appends: int = 50
    conc_rows: int = 10
    conc_timeout_s: float = 900.0


# --------------------------------------------------------------------------- 1 append
def window(lat: list[float], first: int, last: int) -> float | None:
    """p50 over 1-based commits first..last (inclusive) if all were made."""
    if len(lat) < last:
        return None
    return p50(lat[first - 1 : last])


def append_runs(ws: Workspace, cfg: AppendSizes, names: list[str]) -> dict:
    """All systems append in lockstep (round-robin: commit i of every system, then
    commit i+1, ...), so background load on the shared machine hits every system's
    windows alike. Lamina then continues alone from N to its own N. Before that, each
    system makes a few untimed appends to a throwaway table (imports, runtimes, lazy
    initialisation), so "commits 1-10" measure a small history, not start-up."""
    runs = {}
    for name in names:
        n = cfg.append_n_lamina if name == "lamina" else cfg.append_n_peer
        r = runs[name] = {"root": None, "lat": [], "error": None, "stopped_at": None, "n": n, "spent": 0.0}
        s = r["s"] = systems.get(name)
        try:
            warm = ws.new(f"warm-append-{name}")
            warm_up_appends(s, warm, cfg.append_rows)
            ws.drop(warm)
            r["root"] = ws.new(f"append-{name}")
            r["h"] = s.create(r["root"])
        except Exception as e:  # noqa: BLE001
            r["error"] = err_text(e)
            log_error(f"append/{name}/create", e)
    n_max = max(r["n"] for r in runs.values())
    cache = [make_batch(i * cfg.append_rows, cfg.append_rows) for i in range(min(n_max, cfg.append_n_peer))]
    say(f"append: {', '.join(names)} in lockstep x{cfg.append_n_peer:,}, then lamina to {cfg.append_n_lamina:,}")
    B = APPEND_BLOCK
    for blk in range(0, n_max, B):
        for name in names:
            r = runs[name]
            for i in range(blk, blk + B):
                if r["error"] or r["stopped_at"] or i >= r["n"]:
                    break
                data = cache[i] if i < len(cache) else make_batch(i * cfg.append_rows, cfg.append_rows)
                try:
                    r["h"], dt = timed_append(r["s"], r["h"], data)
                except Exception as e:  # noqa: BLE001
                    r["error"] = f"{err_text(e)} (at commit {i + 1})"
                    log_error(f"append/{name}/commit {i + 1}", e)
                    break
                r["lat"].append(dt)
                r["spent"] += dt
                if r["spent"] > cfg.append_budget_s and i + 1 < r["n"]:
                    r["stopped_at"] = i + 1
                    say(f"  {name}: stopped after {i + 1:,} appends (budget {cfg.append_budget_s:.0f} s)")
        i = blk + B - 1
        if (i + 1) % 100 == 0 and (i + 1 <= cfg.append_n_peer or (i + 1) % 1000 == 0):
            say(
                f"  commit {i + 1:,}: "
                + ", ".join(
                    f"{k} {fmt_s(p50(v['lat'][-10:]))}"
                    for k, v in runs.items()
                    if not v["error"] and len(v["lat"]) == i + 1
                )
            )
    for name, r in runs.items():
        r["loop_s"] = r["spent"]
        r.pop("h", None)
        if not r["error"]:
            try:
                r["version"] = r["s"].version(r["s"].open(r["root"]))
            except Exception as e:  # noqa: BLE001
                r["version"] = err_text(e)
        r.pop("s", None)
    return runs


def bench_append(ws: Workspace, cfg: AppendSizes, names: list[str]) -> tuple[Section, dict, list[Target]]:
    N, NL = cfg.append_n_peer, cfg.append_n_lamina
    w_first = (1, 10)
    w_last = (N - 9, N)
    w_l = (NL - 9, NL)
    runs = append_runs(ws, cfg, names)

    def f(name, w):
        r = runs.get(name)  # (None: a system left out by --systems)
        return window(r["lat"], *w) if r is not None and not r["error"] else None

    lam1, lamN, lamL = f("lamina", w_first), f("lamina", w_last), f("lamina", w_l)
    lan1, lanN = f("lance", w_first), f("lance", w_last)
    flat_ok = None
    if lam1 and lamN and lamL:
        flat_ok = lamN <= 1.25 * lam1 and lamL <= 1.5 * lam1
    vs_lance_ok = None
    if lam1 and lamN and lan1 and lanN:
        vs_lance_ok = lam1 <= 0.8 * lan1 and lamN <= 0.8 * lanN

    sec = Section(
        key="append",
        title=f"1. Append latency ({cfg.append_rows}-row batches, one commit each)",
        what=(
            f"Each system creates an empty table (id int64, category string, value float64, "
            f"ts timestamp[us]) and then appends {N:,} batches of {cfg.append_rows} rows "
            f"(Lamina: {NL:,}) with increasing ids, through one long-lived handle. The systems "
            f"take turns in blocks of {APPEND_BLOCK} commits (commits 1–10 of each system, then 11–20, ...) "
            f"up to {N:,}, so background load on the shared machine falls on all of them alike; "
            "Lamina then continues alone. "
            f"Each system first makes {WARM_APPENDS} untimed appends to a throwaway table (imports, lazy "
            "initialisation). Each append "
            "call is timed end to end (write the Parquet/Lance data file + commit the new "
            "version). Figures are the p50 over the commits in the window. Calls: "
            "Lamina `t.append(tbl)`; deltalake `write_deltalake(dt, tbl, mode='append')`; "
            "lance `ds = lance.write_dataset(tbl, ds, mode='append')`; "
            "pyiceberg `table.append(tbl)` (SqlCatalog on SQLite). All default table settings."
        ),
        columns=[
            "system",
            f"p50 commits {w_first[0]}–{w_first[1]}",
            f"p50 commits {w_last[0]:,}–{w_last[1]:,}",
            f"p50 commits {w_l[0]:,}–{w_l[1]:,}",
            f"growth ({w_last[0]:,}–{w_last[1]:,} vs 1–10)",
            "ratio vs Lamina (1–10 / last window)",
            "target",
        ],
    )
    for name in names:
        r = runs[name]
        if r["error"]:
            sec.rows.append([name, r["error"], "", "", "", "", ""])
            continue
        a, b = f(name, w_first), f(name, w_last)
        c = f(name, w_l) if name == "lamina" else None
        growth = f"{b / a:.2f}×" if a and b else "–"
        ratio = "–" if name == "lamina" else f"{fmt_ratio(a, lam1)} / {fmt_ratio(b, lamN)}"
        stopped = f" (stopped at {r['stopped_at']:,}: budget)" if r["stopped_at"] else ""
        tgt = "–"
        if name == "lamina":
            tgt = (
                f"≤0.8× Lance: {verdict(vs_lance_ok)}"
                + (
                    f" ({fmt_ratio(lam1, lan1)} / {fmt_ratio(lamN, lanN)} of Lance)"
                    if lan1 and lanN and lam1 and lamN
                    else ""
                )
                + f"; flat: {verdict(flat_ok)}"
            )
        sec.rows.append(
            [name, fmt_s(a), fmt_s(b) + stopped, fmt_s(c) if name == "lamina" else "–", growth, ratio, tgt]
        )
        sec.raw[name] = {
            "n": r["n"],
            "made": len(r["lat"]),
            "version": r.get("version"),
            "loop_s": r.get("loop_s"),
            "p50_first": a,
            "p50_last": b,
            "p50_lamina_last": c,
            "lat_ms": [round(x * 1e3, 3) for x in r["lat"]],
        }
    sec.notes.append(
        "Targets: Lamina p50 ≤ 0.8× Lance's in both windows; \"flat\" = p50 at "
        f"{w_last[0]:,}–{w_last[1]:,} ≤ 1.25× and at {w_l[0]:,}–{w_l[1]:,} ≤ 1.5× the p50 at 1–10 "
        "(thresholds chosen by the harness)."
    )
    # 10-commit windows are what the issue asks for, but on a shared 2-core machine one
    # window can land on a busy moment; 100-commit windows show whether a verdict is robust.
    wide = max(10, N // 10)
    ww_first, ww_last, ww_l = (1, wide), (N - wide + 1, N), (NL - wide + 1, NL)
    wfig = {name: (f(name, ww_first), f(name, ww_last), f(name, ww_l)) for name in names}
    parts = []
    for name in names:
        a, b, c = wfig[name]
        if a is None:
            continue
        txt = f"{name} {fmt_s(a)} / {fmt_s(b)}"
        if name == "lamina" and c is not None:
            txt += f" (and {fmt_s(c)} at {ww_l[0]:,}–{ww_l[1]:,})"
        parts.append(txt)
    if parts and wide > 10:
        sec.notes.append(
            f"Less noisy wider windows, p50 over commits {ww_first[0]}–{ww_first[1]:,} / "
            f"{ww_last[0]:,}–{ww_last[1]:,}: " + "; ".join(parts) + "."
        )
        la, lb, _ = wfig.get("lamina", (None, None, None))
        na, nb, _ = wfig.get("lance", (None, None, None))
        if la and lb and na and nb:
            sec.notes.append(
                f"Lamina / Lance on those wider windows: {la / na:.2f}× / {lb / nb:.2f}× "
                "(the verdict above uses the issue's 10-commit windows)."
            )
    for name in names:
        r = runs[name]
        if not r["error"] and r["lat"]:
            sec.notes.append(
                f"{name}: {len(r['lat']):,} appends, {fmt_s(r.get('loop_s'))} in append calls, "
                f"final version reported: {r.get('version')}"
            )
    targets = [
        Target(f"Lamina p50 ≤ 0.8× Lance's at commits 1–10 and {w_last[0]:,}–{w_last[1]:,}", vs_lance_ok,
               f"{fmt_ratio(lam1, lan1)} / {fmt_ratio(lamN, lanN)} of Lance" if lan1 and lanN and lam1 and lamN else ""),
        Target(f"flat: Lamina p50 at {w_last[0]:,}–{w_last[1]:,} ≤ 1.25× and at {w_l[0]:,}–{w_l[1]:,} ≤ 1.5× the p50 "
               "at 1–10", flat_ok, f"{lamN / lam1:.2f}× / {lamL / lam1:.2f}×" if lam1 and lamN and lamL else ""),
    ]
    return sec, runs, targets


def append_report(ws: Workspace, cfg: AppendSizes, names: list[str]) -> Report:
    """Section 1: the append workload of the systems names (also run by the flights case)."""
    sec, runs, targets = bench_append(ws, cfg, names)
    for r in runs.values():
        ws.drop(r["root"])
    return report_of(sec, match="1. Append latency", targets=targets)


@case("append", title="1. Append latency (100-row batches, one commit each)", sizes=AppendSizes, quick=APPEND_QUICK,
      tiny=APPEND_TINY, only=SYSTEMS, versions=VERSIONS, default=True)
def append(run: Run) -> Report:
    """Append latency of 100-row batches, one commit each, up to 10,000 commits."""
    return append_report(run.ws, run.sizes, lamina_and_peers(run))


# --------------------------------------------------------------------------- 2 open
def bench_open(ws: Workspace, cfg: OpenSizes, names: list[str], runs: dict) -> tuple[Section, list[Target]]:
    sec = Section(
        key="open",
        title="2. Open the latest version of a table with a long history",
        what=(
            "Tables with the histories of benchmark 1, made by its append workload in this run (Lamina: "
            f"{cfg.append_n_lamina:,} commits; peers: {cfg.append_n_peer:,} commits) are opened "
            f"{cfg.open_reps} times in the benchmark process (the systems take turns: one untimed open, then "
            f"{OPEN_BLOCK} timed ones, per turn); each open is timed (open + read the "
            "version number) and the figure is the p50. Calls: `lamina.open_table(uri)`; "
            "`DeltaTable(path)` (loads the log from the last checkpoint); `lance.dataset(path)`; "
            "pyiceberg `catalog.load_table(ident)` with one long-lived SqlCatalog. How much an open "
            "loads differs by design: deltalake replays the log from its last checkpoint and holds "
            "every add action; lance reads the latest manifest (with its fragment list); pyiceberg "
            "reads the current metadata.json (with every snapshot); Lamina resolves the latest "
            "version's metadata and reads manifests only when a scan is planned."
        ),
        columns=["system", "versions", "p50 open", "min", "ratio vs Lamina", "target"],
    )
    figs = {}
    live = {}
    for name in names:
        r = runs.get(name)
        if r is None or r["error"]:
            sec.rows.append([name, (r or {}).get("error") or "error: no table (append failed)", "", "", "", ""])
            continue
        s = systems.get(name)
        try:
            h = s.open(r["root"])  # warm-up (imports, catalog engine)
            live[name] = {"s": s, "root": r["root"], "ver": s.version(h), "lat": []}
        except Exception as e:  # noqa: BLE001
            log_error(f"open/{name}", e)
            sec.rows.append([name, err_text(e), "", "", "", ""])
    for _ in range(-(-cfg.open_reps // OPEN_BLOCK)):  # systems take turns, in blocks
        for name, L in list(live.items()):
            try:
                L["lat"] += timed_opens(L["s"], L["root"], OPEN_BLOCK)
            except Exception as e:  # noqa: BLE001
                log_error(f"open/{name}", e)
                sec.rows.append([name, err_text(e), "", "", "", ""])
                del live[name]
    for name, L in live.items():
        figs[name] = (L["ver"], p50(L["lat"]), min(L["lat"]))
        sec.raw[name] = {"version": L["ver"], "lat_ms": [round(x * 1e3, 4) for x in L["lat"]]}
    lam = figs.get("lamina", (None, None, None))[1]
    for name in names:
        if name not in figs:
            continue
        ver, med, mn = figs[name]
        tgt = "–"
        if name == "lamina":
            tgt = f"≤ 1 ms at {ver:,} versions: {verdict(med <= 1e-3)}"
        sec.rows.append(
            [name, f"{ver:,}", fmt_s(med), fmt_s(mn), "–" if name == "lamina" else fmt_ratio(med, lam), tgt]
        )
    sec.notes.append(
        "pyiceberg has no integer table version; its column shows the snapshot count. "
        "Lance and Lamina versions count the empty create as a version if the system does."
    )
    lam_ver = figs.get("lamina", (None,))[0]
    return sec, [Target(f"Lamina's p50 open ≤ 1 ms at {lam_ver or cfg.append_n_lamina:,} versions",
                        None if lam is None else lam <= 1e-3, fmt_s(lam) if lam is not None else "")]


@case("open", title="2. Open the latest version of a table with a long history", sizes=OpenSizes,
      quick={**APPEND_QUICK, "open_reps": 20}, tiny={**APPEND_TINY, "open_reps": 10}, only=SYSTEMS,
      versions=VERSIONS, default=True, reps="open_reps")
def open_latest(run: Run) -> Report:
    """Open the latest version of a table with a long history (the append workload's tables)."""
    names = lamina_and_peers(run)
    _, runs, _ = bench_append(run.ws, run.sizes, names)  # the histories; its figures are section 1's
    sec, targets = bench_open(run.ws, run.sizes, names, runs)
    return report_of(sec, targets=targets)


# --------------------------------------------------------------------------- 3 plan
def probe_worker(argv: list[str]) -> dict:
    """Cold plan probe, in a fresh interpreter (no in-process cache of manifests or objects
    survives from the build or from earlier plans): argv is SYSTEM ROOT WARM_ROOT [LO HI].
    WARM_ROOT is a tiny table of the same system, opened and planned first, untimed, so one-time
    library costs (imports, async runtimes, query-engine initialisation, catalog engine) are not
    charged to the measured table. Then ROOT is opened and planned once, both timed (the OS page
    cache is warm: the tables were just written). {"open_s", "plan_s", "files"}."""
    name, root, warm_root = argv[0], argv[1], argv[2]
    lo = int(argv[3]) if len(argv) > 3 else None
    hi = int(argv[4]) if len(argv) > 4 else None
    s = systems.get(name)
    s.plan(s.open(warm_root), lo, hi)
    if name == "pyiceberg":
        s.catalog(root)  # constructing the catalog (SQLAlchemy engine) is not "open"
    t0 = time.perf_counter()
    h = s.open(root)
    t1 = time.perf_counter()
    n = s.plan(h, lo, hi)
    t2 = time.perf_counter()
    return {"open_s": t1 - t0, "plan_s": t2 - t1, "files": n}


def probe(name: str, root: str, warm_root: str, lo=None, hi=None, timeout=900) -> dict:
    args = [name, root, warm_root] + ([str(lo), str(hi)] if lo is not None else [])
    return run_json(worker_cmd("core_bench:probe_worker", *args), timeout, "probe")


def make_warm_table(ws: Workspace, name: str, rpf: int) -> str:
    """Tiny table the fresh-process probe plans first (pays library init costs)."""
    root = ws.new(f"warm-{name}")
    systems.get(name).build_files(root, make_batch(0, 4 * rpf), rpf)
    return root


def measure_plans(targets: list[tuple], cold_reps: int, warm_reps: int) -> dict:
    """targets: (key, system, root, warm_root, handle, lo, hi). Measurements are
    interleaved round-robin over the targets (fresh-process probes first, then the
    repeated plans on open handles), so background load falls on all alike.
    Returns key -> metrics, or key -> {"error": ...}."""
    out = {t[0]: {"cold": [], "warm": [], "files": None} for t in targets}
    for _ in range(cold_reps):
        for key, name, root, warm_root, _h, lo, hi in targets:
            if "error" in out[key]:
                continue
            try:
                out[key]["cold"].append(probe(name, root, warm_root, lo, hi))
            except Exception as e:  # noqa: BLE001
                log_error(f"plan probe/{key}", e)
                out[key] = {"error": err_text(e)}
    for _rep in range(warm_reps):  # each turn: one untimed plan (re-warm), one timed
        for key, name, _root, _w, h, lo, hi in targets:
            if "error" in out[key]:
                continue
            try:
                s = systems.get(name)
                s.plan(h, lo, hi)
                t0 = now()
                out[key]["files"] = s.plan(h, lo, hi)
                out[key]["warm"].append(now() - t0)
            except Exception as e:  # noqa: BLE001
                log_error(f"plan/{key}", e)
                out[key] = {"error": err_text(e)}
    res = {}
    for key, m in out.items():
        if "error" in m:
            res[key] = m
            continue
        cold = m["cold"]
        res[key] = {
            "open_cold": p50([c["open_s"] for c in cold]),
            "plan_cold": p50([c["plan_s"] for c in cold]),
            "open_plan_cold": p50([c["open_s"] + c["plan_s"] for c in cold]),
            "plan_warm": p50(m["warm"]),
            "files": m["files"],
            "files_cold": cold[0]["files"] if cold else None,
            "cold_runs": cold,
            "warm_runs": m["warm"],
        }
    return res


def bench_plan(ws: Workspace, cfg: PlanSizes, names: list[str]) -> tuple[Section, list[Target]]:
    NF, RPF = cfg.plan_files, cfg.plan_rpf
    nrows = NF * RPF
    lo, hi = one_percent_ids(NF, RPF)
    say(f"plan: generating {nrows:,} rows")
    data = make_batch(0, nrows)
    sec = Section(
        key="plan",
        title=f"3. Plan a scan over {NF:,} data files",
        what=(
            f"One table per system with {NF:,} data files of {RPF:,} rows each "
            f"({nrows:,} rows, ids sorted, so every file covers one contiguous id range), "
            "each made by one native write: Lamina property `write.max-rows-per-file=1024`; "
            "deltalake `write_deltalake(target_file_size=1)` (deltalake ≥1.0 has no "
            "max_rows_per_file; its writer checks size every 1,024 rows, so this yields 1,024-row "
            "files); lance `write_dataset(max_rows_per_file=1024, max_rows_per_group=1024)`; "
            "pyiceberg `table.append` with `write.target-file-size-bytes` = 1,024 × the average "
            "in-memory row size. Two queries: *all* (no filter) and *1%* "
            f"(`id >= {lo:,} AND id < {hi:,}`, exactly {max(1, NF // 100):,} files' ranges). "
            f"**open+plan (fresh process)**: p50 over {cfg.plan_cold_reps} new interpreters per system and query (run round-robin over the systems), each "
            "first opening and planning a tiny table of the same system (untimed: pays imports, "
            "async-runtime and query-engine start-up), then opening the big table and planning "
            f"once, timed (no cache of the big table survives; the OS page cache is warm). **plan (open handle)**: p50 of {cfg.plan_warm_reps} plans on one "
            "open handle, each right after an untimed plan of the same query (systems that cache manifests benefit). "
            "The target is judged on open+plan, because systems differ in how much work `open` "
            "does (deltalake loads every add action at open; a lazy open defers it to plan)."
        ),
        columns=[
            "system",
            "query",
            "files planned",
            "open+plan (fresh process)",
            "of which plan",
            "plan (open handle)",
            "ratio vs Lamina (fresh / handle)",
            "build (1 write)",
            "target",
        ],
    )
    res = {}
    built = {}
    try:
        for name in names:
            s = systems.get(name)
            try:
                root = ws.new(f"plan-{name}")
                built[name] = {"root": root}
                say(f"plan: {name} building {NF:,} files")
                t0 = now()
                built[name]["h"] = s.build_files(root, data, RPF)
                res[name] = {"build_s": now() - t0}
                built[name]["warm"] = make_warm_table(ws, name, RPF)
            except Exception as e:  # noqa: BLE001
                log_error(f"plan/{name}/build", e)
                res[name] = {"error": err_text(e)}
        del data
        targets = [
            ((name, q), name, b["root"], b["warm"], b["h"], a_, b_)
            for name, b in built.items()
            if "error" not in res[name]
            for q, (a_, b_) in [("all", (None, None)), ("1%", (lo, hi))]
        ]
        say(f"plan: measuring {len(targets)} (system, query) pairs, interleaved")
        for (name, q), m in measure_plans(targets, cfg.plan_cold_reps, cfg.plan_warm_reps).items():
            res[name][q] = m
    finally:
        for b in built.values():
            b.pop("h", None)
            ws.drop(b.get("root"))
            ws.drop(b.get("warm"))

    def g(name, q, k):
        return (res.get(name, {}).get(q) or {}).get(k)

    targets = []
    for name in names:
        r = res.get(name, {})
        if "error" in r:
            sec.rows.append([name, "", r["error"], "", "", "", "", "", ""])
            continue
        for q in ("all", "1%"):
            m = r.get(q, {})
            if "error" in m:
                sec.rows.append([name, q, m["error"], "", "", "", "", "", ""])
                continue
            tgt = "–"
            if name == "lamina":
                d = g("deltalake", q, "open_plan_cold")
                lv = m["open_plan_cold"]
                tgt = (
                    f"≤ deltalake: {verdict(lv <= d)} ({fmt_ratio(lv, d)} of deltalake)"
                    if d
                    else "≤ deltalake: n/a (deltalake failed)"
                )
                targets.append(Target(f"Lamina's open+plan in a fresh process ≤ deltalake's, query {q}",
                                      lv <= d if d else None, f"{fmt_ratio(lv, d)} of deltalake" if d else ""))
            ratio = (
                "–"
                if name == "lamina"
                else f"{fmt_ratio(m['open_plan_cold'], g('lamina', q, 'open_plan_cold'))} / "
                f"{fmt_ratio(m['plan_warm'], g('lamina', q, 'plan_warm'))}"
            )
            files = f"{m['files']:,}" if m.get("files") is not None else "?"
            if m.get("files_cold") not in (None, m.get("files")):
                files += f" (fresh: {m['files_cold']:,})"
            sec.rows.append(
                [
                    name,
                    q,
                    files,
                    fmt_s(m["open_plan_cold"]),
                    fmt_s(m["plan_cold"]),
                    fmt_s(m["plan_warm"]),
                    ratio,
                    fmt_s(r["build_s"]) if q == "all" else "",
                    tgt,
                ]
            )
    sec.raw = res
    sec.notes.append("What \"plan\" is per system:")
    for name in names:
        sec.notes.append(f"- {name}: {systems.PLAN_WHAT[name]}")
    sec.notes.append(
        "Lance prunes nothing at plan time (its 1% plan still lists every fragment; filtering "
        "happens while reading, or through a scalar index, which this benchmark does not build), "
        "so its 1% figure is not a like-for-like pruning comparison."
    )
    return sec, targets


@case("plan", heavy=True, title="3. Plan a scan over 20,000 data files", sizes=PlanSizes,
      quick=dict(plan_files=2_000, plan_cold_reps=1, plan_warm_reps=3),
      tiny=dict(plan_files=200, plan_cold_reps=1, plan_warm_reps=2), only=SYSTEMS, versions=VERSIONS, default=True,
      reps="plan_cold_reps")
def plan(run: Run) -> Report:
    """Plan a scan (all files, and 1% of them) over 20,000 data files, fresh process and open handle."""
    sec, targets = bench_plan(run.ws, run.sizes, lamina_and_peers(run))
    return report_of(sec, match="3. Plan a scan over", targets=targets)


# --------------------------------------------------------------------------- 4 plan 1M
def bench_plan1m(ws: Workspace, cfg: Plan1mSizes) -> tuple[Section, list[Target]]:
    NF, NC, RPF = cfg.m_files, cfg.m_commits, 1024
    per = NF // NC
    lo, hi = one_percent_ids(NF, RPF)
    sec = Section(
        key="plan1m",
        title=f"4. Plan over {NF:,} data files (Lamina only)",
        what=(
            f"{NF:,} synthetic data-file entries (no real files: path, size, record_count={RPF}, "
            "`lower.id`/`upper.id`/`null_count.id` stats, file i covering ids "
            f"[i·{RPF}, (i+1)·{RPF})) are registered with `t.add_files(...)` in {NC} commits of "
            f"{per:,}. Then `t.scan().plan()` (all) and `t.scan(where='id >= {lo:,} AND id < "
            f"{hi:,}').plan()` (1% = {max(1, NF // 100):,} files). **plan (fresh process)**: p50 "
            f"over {cfg.m_cold_reps} new interpreters, each warming up on a tiny table, then "
            "`open_table` and one plan, both timed. "
            f"**plan (open handle)**: p50 of {cfg.m_warm_reps} repeats after a warm-up."
        ),
        columns=[
            "query",
            "files planned",
            "open (fresh process)",
            "plan (fresh process)",
            "min plan (fresh process)",
            "plan (open handle)",
            "target",
        ],
    )
    s = systems.get("lamina")
    root = ws.new("plan1m-lamina")
    warm_root = None
    targets = []
    try:
        warm_root = make_warm_table(ws, "lamina", RPF)
        h = s.create(root)
        reg = []
        say(f"plan1m: registering {NF:,} files in {NC} commits")
        for c in range(NC):
            files = synthetic_data_files(c * per, per, RPF)
            t0 = now()
            h = s.add_files(h, files)
            reg.append(now() - t0)
        sec.raw["register_s"] = reg
        sec.notes.append(
            f"Registering: {NC} add_files commits of {per:,} entries, p50 {fmt_s(p50(reg))} per commit, "
            f"first {fmt_s(reg[0])}, last {fmt_s(reg[-1])}, total {fmt_s(sum(reg))}."
        )
        for q, (a, b) in [("all", (None, None)), ("1%", (lo, hi))]:
            say(f"plan1m: {q}")
            try:
                m = measure_plans([(q, "lamina", root, warm_root, s.open(root), a, b)], cfg.m_cold_reps, cfg.m_warm_reps)[q]
                if "error" in m:
                    raise RuntimeError(m["error"])
                sec.raw[q] = m
                ok = m["plan_cold"] <= 0.3
                targets.append(Target(f"plan of {q} in a fresh process ≤ 300 ms", ok, fmt_s(m["plan_cold"])))
                sec.rows.append(
                    [
                        q,
                        f"{m['files']:,}",
                        fmt_s(m["open_cold"]),
                        fmt_s(m["plan_cold"]),
                        fmt_s(min(c["plan_s"] for c in m["cold_runs"])),
                        fmt_s(m["plan_warm"]),
                        f"≤ 300 ms: {verdict(ok)}"
                        + ("" if m["plan_warm"] <= 0.3 else " (open handle: MISS)"),
                    ]
                )
            except Exception as e:  # noqa: BLE001
                log_error(f"plan1m/{q}", e)
                sec.rows.append([q, err_text(e), "", "", "", "", ""])
                targets.append(Target(f"plan of {q} in a fresh process ≤ 300 ms", None, "error"))
    except Exception as e:  # noqa: BLE001
        log_error("plan1m", e)
        sec.rows.append(["(setup)", err_text(e), "", "", "", "", ""])
    finally:
        ws.drop(root)
        ws.drop(warm_root)
    sec.notes.append(
        "The target (≤ 300 ms) is judged on the p50 plan in a fresh process (no warm cache); "
        "that figure swings with load on the shared machine (reading 100 manifests cold), hence the min."
    )
    return sec, targets


@case("plan1m", title="4. Plan over 1,000,000 data files (Lamina only)", sizes=Plan1mSizes,
      quick=dict(m_files=20_000, m_commits=10, m_cold_reps=1, m_warm_reps=2),
      tiny=dict(m_files=2_000, m_commits=2, m_cold_reps=1, m_warm_reps=1), versions=("lamina", "pyarrow"),
      default=True, reps="m_cold_reps")
def plan1m(run: Run) -> Report:
    """Plan over 1,000,000 synthetic data-file entries (Lamina only)."""
    sec, targets = bench_plan1m(run.ws, run.sizes)
    return report_of(sec, match="4. Plan over", targets=targets)


# --------------------------------------------------------------------------- 5 concurrent
def concurrent_one(ws: Workspace, cfg: ConcurrentSizes, name: str) -> dict:
    import multiprocessing as mp

    import writers

    W, A, R = cfg.conc_writers, cfg.conc_appends, cfg.conc_rows
    s = systems.get(name)
    root = ws.new(f"conc-{name}")
    procs = []
    try:
        s.create(root)
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(W + 1)
        queue = ctx.Queue()
        procs = [
            ctx.Process(target=writers.worker, args=(name, root, w, A, R, barrier, queue), daemon=True)
            for w in range(W)
        ]
        for p in procs:
            p.start()
        barrier.wait(timeout=600)  # every writer has imported its library and opened the table
        t_go = time.monotonic()
        results = []
        deadline = time.monotonic() + cfg.conc_timeout_s
        while len(results) < W:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                results.append(queue.get(timeout=min(left, 5)))
            except Exception:  # queue.Empty
                if not any(p.is_alive() for p in procs) and queue.empty():
                    break
        timed_out = len(results) < W
        for p in procs:
            p.join(timeout=10)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        errors = [r["error"] for r in results if r.get("error")]
        ends = [r["t_end"] for r in results if "t_end" in r]
        wall = (max(ends) - t_go) if ends else None
        acked = {(r["writer"], seq) for r in results for seq in r["acked"]}
        failed = {(r["writer"], seq) for r in results for seq, _ in r["failed"]}
        fail_msgs = [m for r in results for _, m in r["failed"]]
        lat = [x for r in results for x in r["lat"]]
        logged_retries = sum(r.get("logged_retries", 0) for r in results)
        first_tb = next((r["first_traceback"] for r in results if "first_traceback" in r), None)

        ids = systems.get(name).read_ids(root)
        uniq, counts = np.unique(ids, return_counts=True)
        dup_rows = int((counts - 1).sum())
        keys = (uniq // writers.ID_STRIDE) * 100_000 + (uniq % writers.ID_STRIDE) // R
        kk, kc = np.unique(keys, return_counts=True)
        present = dict(zip(kk.tolist(), kc.tolist()))

        def k(w, seq):
            return w * 100_000 + seq

        lost = sorted(x for x in acked if present.get(k(*x), 0) < R)
        landed_failed = sorted(x for x in failed if present.get(k(*x), 0) > 0)
        torn = sum(1 for v in present.values() if v != R)
        return {
            "acked": len(acked),
            "failed": len(failed),
            "lost": len(lost),
            "dup_rows": dup_rows,
            "failed_landed": len(landed_failed),
            "torn": torn,
            "rows": int(len(ids)),
            "wall": wall,
            "commits_s": (len(acked) / wall) if wall else None,
            "lat_p50": p50(lat),
            "worker_errors": errors,
            "timed_out": timed_out,
            "logged_retries": logged_retries,
            "fail_sample": fail_msgs[:3],
            "fail_kinds": sorted({m.split(":")[0] for m in fail_msgs}),
            "first_traceback": first_tb,
        }
    except Exception as e:  # noqa: BLE001
        log_error(f"concurrent/{name}", e)
        for p in procs:
            if p.is_alive():
                p.terminate()
        return {"error": err_text(e)}
    finally:
        ws.drop(root)


def bench_concurrent(ws: Workspace, cfg: ConcurrentSizes, names: list[str]) -> tuple[Section, list[Target]]:
    W, A, R = cfg.conc_writers, cfg.conc_appends, cfg.conc_rows
    sec = Section(
        key="concurrent",
        title=f"5. Concurrent writers ({W} processes × {A} appends of {R} rows)",
        what=(
            f"{W} processes (multiprocessing, spawn) each open the same table once, wait on a "
            f"barrier, then make {A} appends of {R} rows with ids unique to (writer, seq), "
            "through their long-lived handle, relying on each system's own conflict "
            "handling/retries (defaults). *failed*: the append raised (after the system's own "
            "retries). *lost*: the append returned but its rows are missing from the final "
            "table. *dup rows*: ids present more than once. *failed-but-landed*: raised, yet "
            "its rows are in the table. commits/s = acknowledged appends / wall time from the "
            "barrier to the last writer's finish."
        ),
        columns=[
            "system",
            "acked",
            "failed",
            "lost",
            "dup rows",
            "failed-but-landed",
            "commits/s",
            "p50 append",
            "ratio vs Lamina (commits/s)",
            "target",
        ],
    )
    res = {}
    for name in names:
        say(f"concurrent: {name} {W}x{A}")
        res[name] = concurrent_one(ws, cfg, name)
    lam_cps = res.get("lamina", {}).get("commits_s")
    targets = [Target("Lamina: 0 failed, 0 lost", None, "error")] if "error" in res.get("lamina", {}) else []
    for name in names:
        r = res[name]
        if "error" in r:
            sec.error_row(name, r["error"])
            continue
        tgt = "–"
        if name == "lamina":
            ok = r['failed'] == 0 and r['lost'] == 0 and not r['worker_errors']
            tgt = f"0 failed, 0 lost: {verdict(ok)}"
            targets.append(Target("Lamina: 0 failed, 0 lost", ok, f"{r['acked']}/{W * A} acknowledged, {r['failed']} "
                                  f"failed, {r['lost']} lost"))
        ratio = "–"
        if name != "lamina" and lam_cps and r["commits_s"]:
            ratio = f"{r['commits_s'] / lam_cps:.2f}×"
        sec.rows.append(
            [
                name,
                f"{r['acked']}/{W * A}",
                str(r["failed"]),
                str(r["lost"]),
                str(r["dup_rows"]),
                str(r["failed_landed"]),
                f"{r['commits_s']:.1f}" if r["commits_s"] else "n/a",
                fmt_s(r["lat_p50"]),
                ratio,
                tgt,
            ]
        )
        if r["worker_errors"]:
            sec.notes.append(f"{name}: writer errors: {r['worker_errors'][:3]}")
        if r["timed_out"]:
            sec.notes.append(f"{name}: timed out after {cfg.conc_timeout_s:.0f} s; missing writers counted as not acked")
        if r["failed"]:
            sec.notes.append(f"{name}: failures were {', '.join(r['fail_kinds'])}; e.g. `{r['fail_sample'][0][:150]}`")
        if r.get("logged_retries"):
            sec.notes.append(f"{name}: {r['logged_retries']} commit retries logged by the library")
        if r["torn"]:
            sec.notes.append(f"{name}: {r['torn']} appends are only partly present (torn)")
    sec.notes.append(
        "commits/s ratio is peer / Lamina (higher = peer commits faster). 2 cores are shared by "
        f"{W} writers, so this measures contention handling, not parallel speed-up."
    )
    sec.raw = {k: {kk: vv for kk, vv in v.items() if kk != "first_traceback"} for k, v in res.items()}
    for name, r in res.items():
        if r.get("first_traceback"):
            OUT_DIR.mkdir(parents=True, exist_ok=True)
            with open(OUT_DIR / "concurrent_failures.log", "a") as f:
                f.write(f"=== concurrent/{name} first append failure\n{r['first_traceback']}\n")
    return sec, targets


@case("concurrent", heavy=True, title="5. Concurrent writers (16 processes × 50 appends of 10 rows)", sizes=ConcurrentSizes,
      quick=dict(conc_writers=4, conc_appends=10, conc_timeout_s=300),
      tiny=dict(conc_writers=2, conc_appends=3, conc_timeout_s=300), only=SYSTEMS, versions=VERSIONS, default=True)
def concurrent(run: Run) -> Report:
    """Concurrent writers: processes appending to one table through each system's conflict handling."""
    (OUT_DIR / "concurrent_failures.log").unlink(missing_ok=True)
    sec, targets = bench_concurrent(run.ws, run.sizes, lamina_and_peers(run))
    return report_of(sec, match="5. Concurrent writers", targets=targets)
