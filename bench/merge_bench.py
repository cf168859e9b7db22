"""Merge benchmark (issue 19): an upsert of 100,000 rows into a 10M-row, 80-file table (the case
`merge`; --only picks among lamina, deltalake, lance and spark; --profile adds a cProfile of
Lamina's merge -> bench/out/merge_lamina_profile.txt).

The table: ``rows`` orders (7 columns, ``orders`` of bench/spark_merge_bench.py), clustered
by ``id`` in ``files`` files of equal id ranges, one version; each system builds its own once
(untimed). The change (``change`` of bench/spark_merge_bench.py): 100,000 source rows, 90%
updates of existing ids, 10% new ids. **spread**: the updates hit random ids of the whole table
(every file holds some); **last-file**: they hit random ids of the newest file only.

1. **Arrow merge**, per system in a fresh interpreter per repetition, on a fresh copy of its
   table (data files hard-linked), after an untimed merge into a tiny table of the same system
   (imports, runtimes): open + merge of the spread change, timed; the child's peak RSS (VmHWM)
   and its RSS before opening recorded. Lamina ``Table.merge(...).when_matched_update_all()
   .when_not_matched_insert_all().execute()`` (merge-on-read), deltalake ``DeltaTable.merge(...)
   .when_matched_update_all().when_not_matched_insert_all().execute()``, Lance
   ``ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)``.
   Target: Lamina <= 0.5x the best peer's open+merge.
2. **Spark merge**: ``lamina.spark.merge`` (merge-on-read) of the spread change vs plain Spark
   rewriting the same Parquet files (read all, full outer join with the source, write all as new
   Parquet); and of the last-file change. Targets: spread merge <= 0.2x the full rewrite; the
   last-file change <= 0.4x the spread one. Between jobs (untimed) the machine is settled: the
   files a job wrote are synced to disk and both Python's and the JVM's garbage collected, so
   that no job pays for the one before it (a full rewrite leaves ~150 MB of dirty pages whose
   write-back, and a JVM heap whose collection, otherwise land in the next job's timing).

Every result is checked with DuckDB: rows after = rows + inserts, ids unique, and exactly the
100,000 source rows present with the source's values (plus the systems' own counts of rows
updated / inserted).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import (
    delta_table_of_files, err_text, even_slices, fmt_s, fmt_x, log_error, now, p50, profile_dump,
    profile_start, rotated, run_worker, say,
)
from registry import Run, case, module
from report import Report, Section, Target, verdict
from spark_merge_bench import change, copy_table, orders

SECTION_TITLE = "Merge (issue 19)"
SYSTEMS = ["lamina", "deltalake", "lance"]
TARGET_ARROW = 0.5  # Lamina open+merge <= 0.5x the best peer's
TARGET_SPARK_REWRITE = 0.2  # lamina.spark.merge <= 0.2x plain Spark's full rewrite
TARGET_SPARK_ONE_FILE = 0.4  # a change touching 1 of 80 files <= 0.4x the same change over all 80
WARM_ROWS, WARM_FILES, WARM_CHANGE = 20_000, 4, 1_000
CHECK_COLUMNS = ["id", "customer_id", "amount", "status"]


# --------------------------------------------------------------------------- systems
class Lamina:
    table_dir = "t"
    call = ("`lamina.open_table(uri).merge(src, on=\"id\").when_matched_update_all().when_not_matched_insert_all()"
            ".execute()` (merge-on-read)")

    def build(self, uri, parts):
        import lamina

        per = parts[0].num_rows
        t = lamina.create_table(uri, parts[0].schema, properties={"write.max-rows-per-file": str(per)})
        t.append(pa.concat_tables(parts))

    def open(self, uri):
        import lamina

        return lamina.open_table(uri)

    def merge(self, h, src):
        r = h.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
        return {"updated": r.rows_updated, "inserted": r.rows_inserted, "files_scanned": r.files_scanned,
                "files_touched": r.files_touched}

    def read(self, uri):
        return self.open(uri).scan(columns=CHECK_COLUMNS).to_arrow()

    def files(self, uri):
        return self.open(uri).inspect.files().num_rows


class DeltaLake:
    table_dir = "t"
    call = ("`DeltaTable(uri).merge(src, predicate=\"t.id = s.id\", source_alias=\"s\", target_alias=\"t\")"
            ".when_matched_update_all().when_not_matched_insert_all().execute()`")

    def build(self, uri, parts):
        delta_table_of_files(uri, parts, ["id"])

    def open(self, uri):
        from deltalake import DeltaTable

        return DeltaTable(uri)

    def merge(self, h, src):
        m = (h.merge(src, predicate="t.id = s.id", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        return {"updated": m.get("num_target_rows_updated"), "inserted": m.get("num_target_rows_inserted"),
                "files_scanned": m.get("num_target_files_scanned"), "files_added": m.get("num_target_files_added"),
                "files_removed": m.get("num_target_files_removed")}

    def read(self, uri):
        return self.open(uri).to_pyarrow_table(columns=CHECK_COLUMNS)

    def files(self, uri):
        return len(self.open(uri).file_uris())


class Lance:
    table_dir = "t.lance"
    call = "`lance.dataset(uri).merge_insert(\"id\").when_matched_update_all().when_not_matched_insert_all().execute(src)`"

    def build(self, uri, parts):
        import lance

        per = parts[0].num_rows
        lance.write_dataset(pa.concat_tables(parts), uri, max_rows_per_file=per)

    def open(self, uri):
        import lance

        return lance.dataset(uri)

    def merge(self, h, src):
        r = h.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        return {"updated": r.get("num_updated_rows"), "inserted": r.get("num_inserted_rows")}

    def read(self, uri):
        return self.open(uri).to_table(columns=CHECK_COLUMNS)

    def files(self, uri):
        return len(self.open(uri).get_fragments())


ADAPTERS = {"lamina": Lamina, "deltalake": DeltaLake, "lance": Lance}


def status_kb(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


# --------------------------------------------------------------------------- workers (fresh interpreter)
def worker_merge(argv) -> None:
    """Untimed merge into the tiny table, then open + merge the real one, timed. Peak RSS is VmHWM
    of this process (getrusage's ru_maxrss is carried over fork/exec on Linux)."""
    name, uri, src_path, warm_uri, warm_src_path, profile = argv[0], argv[1], argv[2], argv[3], argv[4], argv[5] == "1"
    a = ADAPTERS[name]()
    a.merge(a.open(warm_uri), pq.read_table(warm_src_path))
    src = pq.read_table(src_path)
    before_kb = status_kb("VmRSS")
    prof = profile_start(profile)
    t0 = now()
    h = a.open(uri)
    t1 = now()
    info = a.merge(h, src)
    t2 = now()
    profile_dump(prof, f"merge_{name}")
    print(json.dumps({"open_s": t1 - t0, "merge_s": t2 - t1, "peak_kb": status_kb("VmHWM"), "before_kb": before_kb,
                      "info": info}, default=str))


def worker_spark(argv) -> None:
    """The Spark part in one Spark session: per repetition, lamina.spark.merge of each change on a
    fresh copy of the Lamina table and plain Spark's full rewrite of its Parquet files."""
    spec = json.loads(argv[0])
    from lamina.spark import merge, spark_session

    spark = spark_session(master="local[2]", app_name="lamina-merge-bench", conf={
        "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "3g", "spark.sql.adaptive.enabled": "true",
    })
    spark.sparkContext.setLogLevel("ERROR")

    def lamina_merge(uri, src_path):
        df = spark.read.parquet("file://" + src_path)
        t0 = now()
        b = merge(uri, df, on="id", mode="merge-on-read").when_matched_update_all().when_not_matched_insert_all()
        r = b.execute()
        return now() - t0, {"updated": r.rows_updated, "inserted": r.rows_inserted, "files_scanned": r.files_scanned,
                            "files_touched": r.files_touched, "phases": {k: round(v, 3) for k, v in b.timings.items()}}

    def plain_rewrite(data_dir, src_path, out_dir):
        from pyspark.sql import functions as F

        t0 = now()
        tgt = spark.read.parquet("file://" + data_dir)
        src = spark.read.parquet("file://" + src_path)
        j = tgt.alias("t").join(src.alias("s"), F.col("t.id") == F.col("s.id"), "full_outer")
        j.select(*[F.coalesce(F.col(f"s.{c}"), F.col(f"t.{c}")).alias(c) for c in tgt.columns]) \
            .write.mode("overwrite").parquet("file://" + out_dir)
        return now() - t0, {"output_files": len([f for f in os.listdir(out_dir) if f.endswith(".parquet")])}

    def settle():
        """What a job left behind, done before the next is timed (see the module's docstring)."""
        gc.collect()
        spark.sparkContext._jvm.java.lang.System.gc()
        os.sync()

    warm = spec["warm"]
    copy_table(warm["table"], warm["copy"])
    lamina_merge(warm["copy"], warm["src"])
    plain_rewrite(warm["data"], warm["src"], warm["out"])
    out = []
    for job in spec["jobs"]:
        if job["kind"] == "lamina":
            copy_table(job["table"], job["copy"])
            settle()
            secs, info = lamina_merge(job["copy"], job["src"])
        else:
            settle()
            secs, info = plain_rewrite(job["data"], job["src"], job["out"])
        out.append({**job, "secs": secs, "info": info})
        print(f"  spark {job['kind']} {job['change']}: {fmt_s(secs)}", file=sys.stderr, flush=True)
    spark.stop()
    print(json.dumps(out))


def merge_worker(kind: str, args: list[str], timeout=1800) -> dict:
    return run_worker(f"merge_bench:worker_{kind}", args, timeout)


# --------------------------------------------------------------------------- checks (DuckDB)
def check_result(table: pa.Table, src: pa.Table, rows: int, n_ins: int) -> list[str]:
    """What is wrong with the merged table's rows (empty: right): row count, unique ids, and
    every source row present with the source's values."""
    import duckdb

    con = duckdb.connect()
    con.register("t", table)
    con.register("s", src.select(CHECK_COLUMNS))
    total, distinct = con.execute("SELECT count(*), count(DISTINCT id) FROM t").fetchone()
    same = con.execute("SELECT count(*) FROM t JOIN s USING (id) WHERE t.customer_id = s.customer_id "
                   "AND t.amount = s.amount AND t.status = s.status").fetchone()[0]
    con.close()
    errs = []
    if total != rows + n_ins:
        errs.append(f"{total:,} rows, expected {rows + n_ins:,}")
    if distinct != total:
        errs.append(f"{total - distinct:,} duplicate ids")
    if same != src.num_rows:
        errs.append(f"{same:,} rows carry the source's values, expected {src.num_rows:,}")
    return errs


def check_counts(info: dict, n_upd: int, n_ins: int) -> list[str]:
    got = (info.get("updated"), info.get("inserted"))
    return [] if got == (n_upd, n_ins) else [f"reported {got[0]} updated / {got[1]} inserted, expected {n_upd:,} / {n_ins:,}"]


# --------------------------------------------------------------------------- 1. Arrow merge
def bench_arrow(ws, cfg, built, srcs, warm_srcs, expect) -> dict:
    res = {n: {"open_s": [], "merge_s": [], "total_s": [], "peak_mb": [], "before_mb": [], "errors": []} for n in cfg.systems}
    src_table = pq.read_table(srcs["spread"])
    n_upd, n_ins = expect["spread"]
    for rep in range(cfg.reps):
        order = rotated(cfg.systems, rep)
        say(f"merge, repetition {rep + 1}/{cfg.reps}: {', '.join(order)}")
        for name in order:
            a, r, b = ADAPTERS[name](), res[name], built[name]
            if "error" in b:
                r["error"] = b["error"]
                continue
            root = ws.new(f"merge-{name}")
            uri, warm = os.path.join(root, a.table_dir), os.path.join(root, "warm-" + a.table_dir)
            try:
                copy_table(b["uri"], uri)
                copy_table(b["warm"], warm)
                w = merge_worker("merge", [name, uri, srcs["spread"], warm, warm_srcs[name],
                                "1" if cfg.profile and rep == 0 and name == "lamina" else "0"])
                r["open_s"].append(w["open_s"])
                r["merge_s"].append(w["merge_s"])
                r["total_s"].append(w["open_s"] + w["merge_s"])
                r["peak_mb"].append(w["peak_kb"] / 1024)
                r["before_mb"].append(w["before_kb"] / 1024)
                errs = check_counts(w["info"], n_upd, n_ins) + check_result(a.read(uri), src_table, cfg.rows, n_ins)
                r["errors"] += [f"rep {rep + 1}: {e}" for e in errs]
                if rep == 0:
                    r["info"], r["files_after"] = w["info"], a.files(uri)
                say(f"  {name}: open+merge {fmt_s(w['open_s'] + w['merge_s'])}, peak RSS {w['peak_kb'] / 1024:,.0f} MB"
                    + (f" — WRONG: {errs}" if errs else ""))
            except Exception as e:  # noqa: BLE001
                log_error(f"merge/{name}", e)
                r["error"] = err_text(e)
            finally:
                ws.drop(root)
    return res


# --------------------------------------------------------------------------- 2. Spark
def bench_spark(ws, cfg, built, srcs, warm_srcs, expect) -> dict:
    b = built["lamina"]
    root = ws.new("spark")
    jobs = []
    for rep in range(cfg.spark_reps):
        for kind, ch in rotated([("lamina", "spread"), ("lamina", "last-file"), ("rewrite", "spread")], rep):
            k = len(jobs)
            jobs.append({"kind": kind, "change": ch, "rep": rep, "table": b["uri"], "src": srcs[ch],
                         "copy": os.path.join(root, f"t{k}"), "data": os.path.join(b["uri"], "data"),
                         "out": os.path.join(root, f"out{k}")})
    warm = {"table": b["warm"], "copy": os.path.join(root, "warm"), "src": warm_srcs["lamina"],
            "data": os.path.join(b["warm"], "data"), "out": os.path.join(root, "warm-out")}
    say(f"spark: {len(jobs)} jobs in one session ({cfg.spark_reps} repetition(s))")
    out = merge_worker("spark", [json.dumps({"warm": warm, "jobs": jobs})], timeout=3600)
    src_tables = {ch: pq.read_table(p) for ch, p in srcs.items()}
    for r in out:
        n_upd, n_ins = expect[r["change"]]
        if r["kind"] == "lamina":
            errs = check_counts(r["info"], n_upd, n_ins) + check_result(
                Lamina().read(r["copy"]), src_tables[r["change"]], cfg.rows, n_ins)
        else:
            errs = check_result(pq.read_table(r["out"], columns=CHECK_COLUMNS), src_tables[r["change"]], cfg.rows, n_ins)
        r["errors"] = errs
        say(f"  spark {r['kind']} {r['change']} rep {r['rep'] + 1}: {fmt_s(r['secs'])}" + (f" — WRONG: {errs}" if errs else ""))
    ws.drop(root)
    return {"runs": out}


# --------------------------------------------------------------------------- report
def summarise_arrow(cfg, res, expect) -> tuple[Section, list[Target]]:
    tot = {n: p50(res[n]["total_s"]) for n in cfg.systems}
    peers = {n: t for n, t in tot.items() if n != "lamina" and t is not None}
    best = min(peers, key=peers.get) if peers else None
    ratio = tot["lamina"] / peers[best] if best and tot.get("lamina") else None
    ok = None if ratio is None else ratio <= TARGET_ARROW and not res["lamina"]["errors"]
    n_upd, n_ins = expect["spread"]
    sec = Section(
        key="arrow", title=f"Arrow merge: {n_upd + n_ins:,} rows into {cfg.rows:,} rows / {cfg.files} files",
        what=(f"The spread change ({n_upd:,} updates of random ids across the table, {n_ins:,} new ids) merged by each "
              f"system into a fresh copy of its table, in a fresh interpreter after an untimed merge into a tiny table; "
              f"**open+merge** is the p50 of {cfg.reps} repetition(s) (systems in rotating order), peak RSS the child's "
              "VmHWM (RSS before opening: the interpreter, the library and the 100k-row source). Calls: "
              + "; ".join(f"{n}: {ADAPTERS[n].call}" for n in cfg.systems) + "."),
        columns=["system", f"open+merge (p50 of {cfg.reps})", "of which merge", "Lamina / this", "peak RSS (before open)",
                 "reported", "files after", "check", "target"],
    )
    for name in cfg.systems:
        r = res[name]
        if not r["total_s"]:
            sec.error_row(name, r.get("error", "no result"))
            continue
        info = r.get("info", {})
        rep = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in info.items())
        tgt = "–"
        if name == "lamina":
            tgt = f"≤ {TARGET_ARROW}× best peer ({best}): **{verdict(ok)}** ({fmt_x(ratio)})"
        sec.rows.append([
            name, f"{fmt_s(tot[name])} ({', '.join(fmt_s(x) for x in r['total_s'])})", fmt_s(p50(r["merge_s"])),
            fmt_x(tot["lamina"] / tot[name]) if tot.get("lamina") else "–",
            f"{max(r['peak_mb']):,.0f} MB ({p50(r['before_mb']):,.0f} MB)", rep, str(r.get("files_after", "")),
            "OK" if not r["errors"] else "WRONG: " + "; ".join(r["errors"]), tgt,
        ])
    return sec, [Target(f"Arrow merge ≤ {TARGET_ARROW}× best peer", ok, f"{fmt_x(ratio)} of {best}")]


def summarise_spark(cfg, res, expect) -> tuple[Section, list[Target]]:
    runs = res.get("runs", [])

    def times(kind, ch):
        return [r["secs"] for r in runs if (r["kind"], r["change"]) == (kind, ch)]

    def wrong(kind, ch):
        return [e for r in runs if (r["kind"], r["change"]) == (kind, ch) for e in r["errors"]]

    spread, last, rewrite = p50(times("lamina", "spread")), p50(times("lamina", "last-file")), p50(times("rewrite", "spread"))
    r1 = spread / rewrite if spread and rewrite else None
    r2 = last / spread if spread and last else None
    ok1 = None if r1 is None else r1 <= TARGET_SPARK_REWRITE and not wrong("lamina", "spread") and not wrong("rewrite", "spread")
    ok2 = None if r2 is None else r2 <= TARGET_SPARK_ONE_FILE and not wrong("lamina", "last-file")
    sec = Section(
        key="spark", title="Spark merge (local[2]) on the same data",
        what=("One Spark session (local[2], driver 3g, 4 shuffle partitions, AQE), source read from a Parquet file. "
              "**lamina.spark.merge**: `lamina.spark.merge(uri, src_df, on=\"id\", mode=\"merge-on-read\")"
              ".when_matched_update_all().when_not_matched_insert_all().execute()` on a fresh copy of the Lamina table, "
              "timed `execute()`. **plain Spark full rewrite**: `spark.read.parquet(<the table's 80 data files>)` full "
              "outer joined with the source on id, `coalesce(s.c, t.c)` per column, written as new Parquet "
              "(`.write.parquet`): what an upsert costs without a table format. **last-file**: the same 100k change with "
              f"its updates among the newest file's ids. p50 of {cfg.spark_reps} repetition(s), jobs in rotating order."),
        columns=["job", "change", f"time (p50 of {cfg.spark_reps})", "files scanned / touched", "phases (first run)",
                 "check", "target"],
    )
    for kind, ch in [("lamina", "spread"), ("lamina", "last-file"), ("rewrite", "spread")]:
        rs = [r for r in runs if (r["kind"], r["change"]) == (kind, ch)]
        if not rs:
            continue
        info = rs[0]["info"]
        tgt = "–"
        if (kind, ch) == ("lamina", "spread"):
            tgt = f"≤ {TARGET_SPARK_REWRITE}× full rewrite: **{verdict(ok1)}** ({fmt_x(r1)})"
        elif kind == "lamina":
            tgt = f"≤ {TARGET_SPARK_ONE_FILE}× spread: **{verdict(ok2)}** ({fmt_x(r2)})"
        sec.rows.append([
            "lamina.spark.merge" if kind == "lamina" else "plain Spark full rewrite", ch,
            f"{fmt_s(p50([r['secs'] for r in rs]))} ({', '.join(fmt_s(r['secs']) for r in rs)})",
            f"{info['files_scanned']} / {info['files_touched']}" if kind == "lamina" else f"all / {info['output_files']} written",
            ", ".join(f"{k} {fmt_s(v)}" for k, v in info.get("phases", {}).items()) or "–",
            "OK" if not wrong(kind, ch) else "WRONG: " + "; ".join(wrong(kind, ch)), tgt,
        ])
    return sec, [Target(f"Spark merge ≤ {TARGET_SPARK_REWRITE}× full rewrite", ok1, fmt_x(r1)),
                 Target(f"1 of {cfg.files} files ≤ {TARGET_SPARK_ONE_FILE}× all {cfg.files}", ok2, fmt_x(r2))]


# --------------------------------------------------------------------------- the case
@dataclass
class Sizes:
    rows: int = 10_000_000
    files: int = 80
    change: int = 100_000  # source rows (90% updates)
    reps: int = 3  # Arrow merge repetitions per system
    spark_reps: int = 2
    profile: bool = False


@dataclass
class Config(Sizes):
    systems: list[str] = field(default_factory=list)  # of the Arrow merge
    spark: bool = True


def build_all(ws, cfg) -> tuple[dict, dict, dict, dict]:
    per = -(-cfg.rows // cfg.files)
    data = orders(np.arange(cfg.rows, dtype=np.int64), seed=1)
    parts = even_slices(data, cfg.files)
    warm_parts = even_slices(orders(np.arange(WARM_ROWS, dtype=np.int64), seed=2), WARM_FILES)
    srcs, expect = {}, {}
    for ch in ("spread", "last-file"):
        src, n_upd, n_ins = change(cfg.rows, cfg.change, ch, seed=31, files=cfg.files)
        srcs[ch] = os.path.join(ws.base, f"src-{ch}.parquet")
        pq.write_table(src, srcs[ch])
        expect[ch] = (n_upd, n_ins)
    warm_src = change(WARM_ROWS, WARM_CHANGE, "spread", seed=32)[0]
    built, warm_srcs = {}, {}
    for name in [*cfg.systems, *(["lamina"] if cfg.spark and "lamina" not in cfg.systems else [])]:
        a, b = ADAPTERS[name](), built.setdefault(name, {})
        try:
            root = ws.new(f"{name}-base")
            b["uri"], b["warm"] = os.path.join(root, a.table_dir), os.path.join(root, "warm-" + a.table_dir)
            t0 = now()
            a.build(b["uri"], parts)
            b["build_s"] = now() - t0
            a.build(b["warm"], warm_parts)
            warm_srcs[name] = os.path.join(root, "warm-src.parquet")
            pq.write_table(warm_src, warm_srcs[name])
            b["files"] = a.files(b["uri"])
            if b["files"] != cfg.files:
                raise RuntimeError(f"{name} built {b['files']} files, not {cfg.files}")
            say(f"  {name}: built {cfg.rows:,} rows in {b['files']} files ({per:,} rows each) in {fmt_s(b['build_s'])}")
        except Exception as e:  # noqa: BLE001
            log_error(f"merge/{name}/build", e)
            b["error"] = err_text(e)
    return built, srcs, warm_srcs, expect


@case("merge", heavy=True, title=SECTION_TITLE, sizes=Sizes, quick=dict(rows=1_000_000, reps=1, spark_reps=1),
      tiny=dict(rows=40_000, files=4, change=2_000, reps=1, spark_reps=1),
      only={"systems": (*SYSTEMS, "spark")}, needs=(module("deltalake", "lance", "duckdb", "pyspark"),), reps="reps")
def merge(run: Run) -> Report:
    """An upsert of 100,000 rows into 10M rows / 80 files: Arrow merge vs the peers; Spark merge vs a full rewrite."""
    chosen = run.only("systems")
    cfg = Config(**dataclasses.asdict(run.sizes), systems=[s for s in SYSTEMS if s in chosen], spark="spark" in chosen)
    raw: dict = {}
    secs, targets = [], []
    say(f"merge: {cfg.change:,} rows into {cfg.rows:,} rows / {cfg.files} files; building the tables")
    built, srcs, warm_srcs, expect = build_all(run.ws, cfg)
    raw["build"] = built
    if cfg.systems:
        raw["arrow"] = bench_arrow(run.ws, cfg, built, srcs, warm_srcs, expect)
        sec, v = summarise_arrow(cfg, raw["arrow"], expect)
        secs.append(sec)
        targets += v
    if cfg.spark and "error" not in built["lamina"]:
        raw["spark"] = bench_spark(run.ws, cfg, built, srcs, warm_srcs, expect)
        sec, v = summarise_spark(cfg, raw["spark"], expect)
        secs.append(sec)
        targets += v
    builds = "; ".join(f"{n} {fmt_s(b['build_s'])}" for n, b in built.items() if "build_s" in b)
    return Report(title=SECTION_TITLE, facts=[f"Building each table (untimed): {builds}."], targets=targets,
                  sections=secs, raw=raw)
