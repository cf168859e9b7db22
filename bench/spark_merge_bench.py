"""Spark merge benchmark (issue 4): merge-on-read vs copy-on-write, and scaling with touched files.

    .venv/bin/python bench/spark_merge_bench.py                  # 10M rows / 80 files; appends to BENCHMARKS.md
    .venv/bin/python bench/spark_merge_bench.py --rows 1000000 --out /tmp/m.md   # smaller, elsewhere

The target table: ``--rows`` orders (7 columns), clustered by ``id`` (ids in write order, like
orders arriving over time) in ``--files`` files of equal size, one version. Each change is an
upsert batch read by Spark from a Parquet file: 90% updates of existing ids, 10% new ids,
merged with ``lamina.spark.merge(uri, src, on="id").when_matched_update_all()
.when_not_matched_insert_all().execute()``:

- **recent** changes of n rows: updates hit random ids among the newest 10·n ids (a daily
  batch touching recent history), so the files touched grow with n (n = 10k, 100k, 1M);
- **spread** 100k: updates hit random ids across the whole table (every file touched);
- **no-match**: n new ids only (no file can hold them: 0 files scanned) — the fixed cost.

Each change runs on a fresh copy of the table (data files hard-linked) as merge-on-read
(deletion vectors) and as copy-on-write (same Spark job; the touched files are rewritten
without the old rows). Timed: ``execute()`` only (bounds aggregation, planning, Spark
join, collect, native write, DVs/rewrites, commit). Targets: cost proportional to touched
files; merge-on-read >= 5x faster than copy-on-write (judged on the 100k recent change).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import lamina  # noqa: E402

STATUSES = np.array(["new", "paid", "shipped", "delivered", "cancelled"], dtype=object)


def orders(ids: np.ndarray, seed: int, day0: int = 20_454) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "day": pa.array((day0 + ids // 125_000).astype(np.int32), pa.int32()).cast(pa.date32()),
        "customer_id": pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
        "amount": pa.array(rng.integers(0, 10_000_000, n) / 100.0, pa.float64()),
        "qty": pa.array(rng.integers(1, 20, n).astype(np.int32), pa.int32()),
        "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), n)], pa.string()),
        "note": pa.array(np.char.add("note-", (ids % 9973).astype(str)).astype(object), pa.string()),
    })


def build_table(uri: str, rows: int, files: int) -> float:
    t0 = time.perf_counter()
    per = -(-rows // files)
    schema = orders(np.arange(1), 0).schema
    t = lamina.create_table(uri, schema, properties={"write.max-rows-per-file": str(per)})
    t.append(orders(np.arange(rows, dtype=np.int64), seed=1))
    return time.perf_counter() - t0


DATA_SUFFIXES = (".parquet", ".lance")  # Lamina's, deltalake's and Lance's data files


def copy_table(src: str, dst: str) -> None:
    """A copy of the table directory at src: data files hard-linked (no system rewrites one in
    place), everything else (logs, manifests, pointers a commit may overwrite) copied."""
    def cp(s: str, d: str) -> None:
        if s.endswith(DATA_SUFFIXES):
            os.link(s, d)  # data files are immutable
        else:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=cp, ignore=shutil.ignore_patterns("*#*"))


def change(rows: int, n: int, kind: str, seed: int, files: int = 80) -> tuple[pa.Table, int, int]:
    """(source rows, updates, inserts). Updates hit random existing ids: among the newest 10·n
    (recent), the newest file's (last-file: the table's ``files`` files hold equal id ranges),
    or all (spread); inserts are new ids above the table's."""
    rng = np.random.default_rng(seed)
    if kind == "no-match":
        ids = np.arange(rows + 10_000_000, rows + 10_000_000 + n, dtype=np.int64)
        return orders(ids, seed), 0, n
    n_ins = n // 10
    n_upd = n - n_ins
    lo = {"recent": max(0, rows - 10 * n), "last-file": rows - -(-rows // files)}.get(kind, 0)
    upd = np.sort(rng.choice(np.arange(lo, rows, dtype=np.int64), n_upd, replace=False))
    ins = np.arange(rows, rows + n_ins, dtype=np.int64)
    return orders(np.concatenate([upd, ins]), seed), n_upd, n_ins


def fmt_s(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=80)
    ap.add_argument("--changes", default="10000,100000,1000000")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of the 100k recent change (medians)")
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()

    from lamina.spark import merge, spark_session

    work = Path(args.workdir or tempfile.mkdtemp(prefix="lamina-spark-merge-"))
    work.mkdir(parents=True, exist_ok=True)
    base = str(work / "base")
    shutil.rmtree(base, ignore_errors=True)
    build_s = build_table(base, args.rows, args.files)
    nfiles = lamina.open_table(base).files().num_rows
    print(f"built {args.rows:,} rows in {nfiles} files in {build_s:.1f}s", flush=True)

    spark = spark_session(master="local[2]", app_name="lamina-merge-bench", conf={
        "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "3g", "spark.sql.adaptive.enabled": "true",
    })
    spark.sparkContext.setLogLevel("ERROR")

    def run(kind: str, n: int, mode: str, seed: int) -> dict:
        uri = str(work / f"t-{kind}-{n}-{mode}-{seed}")
        shutil.rmtree(uri, ignore_errors=True)
        copy_table(base, uri)
        src_path = str(work / f"src-{kind}-{n}-{seed}.parquet")
        if not os.path.exists(src_path):
            src, _, _ = change(args.rows, n, kind, seed)
            pq.write_table(src, src_path)
        _, n_upd, n_ins = change(args.rows, n, kind, seed) if kind != "no-match" else (None, 0, n)
        src_df = spark.read.parquet("file://" + src_path)
        t0 = time.perf_counter()
        b = merge(uri, src_df, on="id", mode=mode).when_matched_update_all().when_not_matched_insert_all()
        res = b.execute()
        secs = time.perf_counter() - t0
        phases = ", ".join(f"{k} {fmt_s(v)}" for k, v in b.timings.items())
        t = lamina.open_table(uri)
        live = int(pa.compute.sum(t.files().column("record_count")).as_py())
        ok = (res.rows_updated, res.rows_inserted) == (n_upd, n_ins) and live == args.rows + n_ins
        summary = t.history(1)[0]["summary"]
        out = dict(kind=kind, n=n, mode=mode, secs=secs, scanned=res.files_scanned, touched=res.files_touched,
                   updated=res.rows_updated, inserted=res.rows_inserted, ok=ok, summary=summary, files_after=t.files().num_rows,
                   phases=phases)
        print(f"{kind:8s} {n:>9,} {mode:14s} {fmt_s(secs):>9s} scanned {res.files_scanned:3d} touched {res.files_touched:3d} "
              f"upd {res.rows_updated:,} ins {res.rows_inserted:,} ok={ok} [{phases}]", flush=True)
        shutil.rmtree(uri, ignore_errors=True)
        return out

    # warm-up (JIT, Python workers): a small merge, untimed
    run("recent", 1000, "merge-on-read", 99)

    sizes = [int(x) for x in args.changes.split(",")]
    results: list[dict] = []
    results.append(run("no-match", 1000, "merge-on-read", 7))
    for n in sizes:
        reps = args.reps if n == 100_000 else 1
        for r in range(reps):
            for mode in (("merge-on-read", "copy-on-write") if r % 2 == 0 else ("copy-on-write", "merge-on-read")):
                results.append(run("recent", n, mode, 11 + r))
    for mode in ("merge-on-read", "copy-on-write"):
        results.append(run("spread", 100_000, mode, 21))
    spark.stop()
    write_report(args, results, build_s, nfiles)
    shutil.rmtree(work, ignore_errors=True)


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def write_report(args, results: list[dict], build_s: float, nfiles: int) -> None:
    def pick(kind, n, mode):
        return [r for r in results if (r["kind"], r["n"], r["mode"]) == (kind, n, mode)]

    fixed = pick("no-match", 1000, "merge-on-read")[0]
    lines = [
        "",
        "## Spark merge (issue 4)",
        "",
        f"`lamina.spark.merge` of an upsert batch (90% updates, 10% new ids) into a {args.rows:,}-row, {nfiles}-file "
        "table (7 columns, clustered by `id`, one version), local[2] Spark "
        f"({platform.machine()}, {os.cpu_count()} cores), source read by Spark from a Parquet file; each merge on a "
        "fresh copy of the table; timed `execute()` (bounds aggregation, planning, Spark join, collect of positions, "
        "native write, DVs or rewrites, one commit). **recent**: updates among the newest 10·n ids (a daily batch "
        "touching recent history); **spread**: updates across the whole table; **no-match**: only new ids "
        "(0 files can match: the fixed cost). Copy-on-write is the same Spark job with the touched files rewritten "
        "without their old rows (Arrow on the driver, 4 threads) instead of deletion vectors.",
        "",
        "| change | rows changed | mode | time | files scanned | files touched | files after | rows updated / inserted | check |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows_order = [("no-match", 1000)] + [("recent", n) for n in sorted({r["n"] for r in results if r["kind"] == "recent"})] + [("spread", 100_000)]
    med: dict[tuple, float] = {}
    for kind, n in rows_order:
        for mode in ("merge-on-read", "copy-on-write"):
            rs = pick(kind, n, mode)
            if not rs:
                continue
            m = median([r["secs"] for r in rs])
            med[(kind, n, mode)] = m
            r = rs[0]
            times = f"{fmt_s(m)}" + (f" (median of {len(rs)}: {', '.join(fmt_s(x['secs']) for x in rs)})" if len(rs) > 1 else "")
            lines.append(f"| {kind} | {n:,} | {mode} | {times} | {r['scanned']} | {r['touched']} | {r['files_after']} | "
                         f"{r['updated']:,} / {r['inserted']:,} | {'OK' if all(x['ok'] for x in rs) else 'WRONG'} |")
    lines.append("")
    # target 1: merge-on-read >= 5x faster than copy-on-write (100k recent)
    mor, cow = med.get(("recent", 100_000, "merge-on-read")), med.get(("recent", 100_000, "copy-on-write"))
    if mor and cow:
        ratio = cow / mor
        lines.append(f"- Target (issue 4): merge-on-read ≥ 5× faster than copy-on-write on the 100k change — "
                     f"{'PASS' if ratio >= 5 else 'MISS'}: copy-on-write {fmt_s(cow)} / merge-on-read {fmt_s(mor)} = {ratio:.2f}×.")
    smor, scow = med.get(("spread", 100_000, "merge-on-read")), med.get(("spread", 100_000, "copy-on-write"))
    if smor and scow:
        lines.append(f"- Same ratio when the 100k updates spread over every file (context, not the judged case): "
                     f"{fmt_s(scow)} / {fmt_s(smor)} = {scow / smor:.2f}×.")
    # target 2: cost proportional to touched files (merge-on-read, fixed cost removed)
    per_file = []
    for kind, n in rows_order:
        r = pick(kind, n, "merge-on-read")
        if kind == "no-match" or not r or not r[0]["scanned"]:
            continue
        var = med[(kind, n, "merge-on-read")] - fixed["secs"]
        per_file.append((kind, n, r[0]["scanned"], r[0]["touched"], var, var / r[0]["scanned"]))
    if per_file:
        desc = "; ".join(f"{k} {n:,}: {sc} files scanned ({tc} touched), {fmt_s(max(v, 0))} above the fixed cost = "
                         f"{fmt_s(max(pf, 0))} per file" for k, n, sc, tc, v, pf in per_file)
        recent = [p for p in per_file if p[0] == "recent"]
        pfs = [p[5] for p in recent]
        spread_ok = len(pfs) >= 2 and min(pfs) > 0 and max(pfs) / min(pfs) <= 2.0
        small = recent[0] if recent else None
        full_time = med.get(("spread", 100_000, "merge-on-read"))
        lines.append(
            f"- Target (issue 4): cost proportional to touched files — {'PASS' if spread_ok else 'MISS'}: fixed cost "
            f"(no file can match, 0 scanned) {fmt_s(fixed['secs'])}; above it, merge-on-read costs {desc}. "
            f"Judged: the per-file cost of the recent changes stays within 2× across sizes "
            f"({', '.join(fmt_s(max(p, 0)) for p in pfs)})."
            + (f" The 10k change ({small[2]} file(s) scanned) takes {fmt_s(med[('recent', small[1], 'merge-on-read')])} against "
               f"{fmt_s(full_time)} for a change touching all {nfiles} files." if small and full_time else "")
        )
    lines.append("- Phases (seconds of `execute()`): " + "; ".join(
        f"{r['kind']} {r['n']:,} {r['mode']}: {r['phases']}" for r in results))
    lines.append(f"- Building the table (untimed): {build_s:.1f} s. Every merge's result checked: rows updated / inserted as "
                 "generated and live rows = table + inserted.")
    s = pick("recent", 100_000, "merge-on-read")
    if s:
        lines.append(f"- Version summary of a 100k merge-on-read merge: `{s[0]['summary']}`.")
    lines.append(f"- Command: `.venv/bin/python bench/spark_merge_bench.py --rows {args.rows} --files {args.files} "
                 f"--changes {args.changes} --reps {args.reps}`")
    lines.append("")
    text = "\n".join(lines)
    print(text)
    with open(args.out, "a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
