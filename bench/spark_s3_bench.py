"""Spark on S3 (moto) through Hadoop's S3A: Lamina's native path against raw Parquet and the Python data source.

    .venv/bin/python bench/spark_s3_bench.py                      # 10M rows; merges of 1M into 20M rows
    .venv/bin/python bench/spark_s3_bench.py --rows 2000000 --merge-rows 4000000 --out bench/out/s3.md

Needs the S3A jars (`make s3a-jars`, .cache/jars/hadoop-<version>). The S3 server is moto (tests/support/s3server.py)
in a process of its own, on 127.0.0.1. Two parts, each in its own Spark session (local[2]):

1. **Reads and writes** (spark.driver.memory=4g), each a full Spark action, medians over rounds in
   rotating order: raw ``df.write.parquet("s3a://...")`` (Spark's FileOutputCommitter, as a Spark
   user writes Parquet to S3) vs ``lamina.spark.write(df, "s3://...")`` (native writer, write then
   register, one commit) vs the Python data source (``format("lamina")`` with
   ``__lamina_python_source``); reads of all rows (``noop``) and of one column (``sum(amount)``):
   raw ``spark.read.parquet(<the Lamina table's data directory over s3a://>)`` vs
   ``lamina.spark.read`` vs the Python data source. Targets (issue 46): native >= 0.9x raw and >= 2x
   the Python data source, for the write, the full read and the one-column read.
2. **Merges** (spark.driver.memory=1g): ``lamina.spark.merge`` of changes (90% updates, 10% new
   ids, spread over the table) into a table of ``--merge-rows`` rows, on S3 and on local disk,
   the Spark job (``driver_rows=0``: positions folded per file in the tasks), timed ``execute()``,
   with the driver JVM's peak heap (the heap pools' peak usage, reset before the merge) and the
   driver Python process's peak RSS over the merge (sampled); then a merge matching a quarter
   of the table's rows on local disk in the same 1 GB driver.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from spark_bench import build_df, full_gc, median, timed  # noqa: E402

BEGIN, END = "<!-- spark-s3-bench:begin -->", "<!-- spark-s3-bench:end -->"
BUCKET = "bench"
_SERVER = """
import sys
sys.path.insert(0, {tests!r})
from support.s3server import S3Server
s = S3Server(); s.create_bucket({bucket!r})
print(s.endpoint, flush=True)
sys.stdin.read()
s.stop()
"""


def start_moto() -> tuple[subprocess.Popen, dict[str, str]]:
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    proc = subprocess.Popen([sys.executable, "-c", _SERVER.format(tests=str(REPO / "tests"), bucket=BUCKET)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    endpoint = proc.stdout.readline().strip()
    return proc, {"endpoint": endpoint, "access_key_id": "test", "secret_access_key": "test", "region": "us-east-1",
                  "allow_http": "true"}


def session(app: str, memory: str):
    from support.s3a_jars import MISSING, spark_conf

    from lamina.spark import spark_session

    conf = spark_conf()
    if not conf:
        raise SystemExit(MISSING)
    for k in ("NO_PROXY", "no_proxy"):
        os.environ[k] = "127.0.0.1,localhost"
    spark = spark_session(master="local[2]", app_name=app, conf={
        "spark.driver.memory": memory, "spark.sql.shuffle.partitions": "2", **conf})
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")  # Lamina's encoding, for raw too
    return spark


def s3a_settings(spark, opts: dict[str, str]) -> None:
    """The same S3A settings Lamina derives (fs.s3a.bucket.bench.*), for the raw Spark writes and reads."""
    from lamina.io import FileIO
    from lamina.spark.s3a import configure

    assert configure(spark, FileIO(f"s3://{BUCKET}/x", opts)) is None


def drop(opts: dict[str, str], prefix: str) -> None:
    """Delete every object under ``prefix`` of the bucket."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=opts["endpoint"], aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


# -- 1. reads and writes -------------------------------------------------------------------------


def reads_and_writes(args, opts) -> dict:
    from pyspark.sql import functions as F

    import lamina
    from lamina.spark import read, write
    from lamina.spark.datasource import PYTHON_SOURCE_OPTION

    spark = session("lamina-s3-bench", "4g")
    s3a_settings(spark, opts)
    df = build_df(spark, args.rows)
    run = uuid.uuid4().hex[:6]
    writers = {
        "raw": lambda i: df.write.parquet(f"s3a://{BUCKET}/{run}/raw{i}"),
        "native": lambda i: write(df, f"s3://{BUCKET}/{run}/native{i}", storage_options=opts),
        "python": lambda i: (df.write.format("lamina").options(**opts).option(PYTHON_SOURCE_OPTION, "true")
                             .mode("append").save(f"s3://{BUCKET}/{run}/python{i}")),
    }
    wtimes: dict[str, list[float]] = {k: [] for k in writers}
    for i in range(args.repeat + 1):  # round 0: warm-up
        names = list(writers)
        for name in names[i % 3:] + names[:i % 3]:
            full_gc(spark)
            took = timed(lambda: writers[name](i))
            if i:
                wtimes[name].append(took)
        print(f"write round {i}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in wtimes.items() if v), flush=True)
        for name in names:  # the server keeps every object in memory: only round 1's table is read later
            if not (i == 1 and name == "native"):
                drop(opts, f"{run}/{name}{i}/")
    uri = f"s3://{BUCKET}/{run}/native1"
    table = lamina.open_table(uri, storage_options=opts)
    files = table.scan().plan().entries.column("path").to_pylist()
    (wdir,) = {p.split("/")[1] for p in files}
    readers = {
        "raw": lambda: spark.read.parquet(f"s3a://{BUCKET}/{run}/native1/data/{wdir}"),
        "native": lambda: read(spark, uri, storage_options=opts),
        "python": lambda: spark.read.format("lamina").options(**opts).option(PYTHON_SOURCE_OPTION, "true").load(uri),
    }
    actions = {
        "full": lambda d: d.write.format("noop").mode("overwrite").save(),
        "one_column": lambda d: d.select(F.sum("amount")).collect(),
    }
    rtimes = {(r, a): [] for r in readers for a in actions}
    for i in range(args.read_repeat + 1):
        for a, act in actions.items():
            names = list(readers)
            for r in names[i % 3:] + names[:i % 3]:
                if r == "python" and i > args.repeat:
                    continue
                full_gc(spark)
                took = timed(lambda: act(readers[r]()))
                if i:
                    rtimes[(r, a)].append(took)
        print(f"read round {i}: " + ", ".join(f"{r}/{a} {v[-1]:.1f}s" for (r, a), v in rtimes.items() if v), flush=True)
    sums = {r: tuple(make().select(F.sum("qty"), F.count("*"), F.round(F.sum("amount"), 0)).collect()[0])
            for r, make in readers.items()}
    assert len(set(sums.values())) == 1, sums
    assert table.scan().count() == args.rows
    spark.stop()
    return {"write": wtimes, "read": rtimes, "files": len(files)}


# -- 2. merges ------------------------------------------------------------------------------------


class PeakRss:
    """The peak resident set of this process while the block runs (sampled every 20 ms)."""

    def __enter__(self) -> "PeakRss":
        self.peak, self._stop = self._rss(), threading.Event()
        self._t = threading.Thread(target=self._watch, daemon=True)
        self._t.start()
        return self

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._rss())


def heap_pools(spark):
    mf = spark._jvm.java.lang.management.ManagementFactory
    pools = mf.getMemoryPoolMXBeans()
    return [pools.get(i) for i in range(pools.size()) if str(pools.get(i).getType().toString()) == "Heap memory"]


def merges(args, opts) -> dict:
    from pyspark.sql import functions as F

    import lamina
    from lamina.spark import merge, write

    spark = session("lamina-s3-merge-bench", "1g")
    n, k = args.merge_rows, args.changes
    work = Path(tempfile.mkdtemp(prefix="lamina-s3-merge-"))
    run = uuid.uuid4().hex[:6]
    target = build_df(spark, n).withColumnRenamed("order_id", "id")
    out = {}

    def changes(count: int, new_share: float):
        """``count`` rows of the table's columns with new values: ids spread over the table
        (every ``n // updates``-th), the last ``new_share`` of them new ids."""
        upd = int(count * (1 - new_share))
        step = max(1, n // max(upd, 1))
        rows = build_df(spark, count)
        ids = F.when(F.col("order_id") < upd, F.col("order_id") * step).otherwise(F.col("order_id") - upd + n)
        return rows.withColumn("order_id", ids).withColumnRenamed("order_id", "id")

    def one(name: str, uri: str, storage, src) -> None:
        t0 = timed(lambda: write(target, uri, storage_options=storage))
        src = src.cache()
        src.count()
        pools = heap_pools(spark)
        full_gc(spark)
        for p in pools:
            p.resetPeakUsage()
        res = []
        with PeakRss() as rss:
            took = timed(lambda: res.append(merge(uri, src, on="id", storage_options=storage, driver_rows=0)
                                            .when_matched_update_all().when_not_matched_insert_all().execute()))
        heap = sum(int(p.getPeakUsage().getUsed()) for p in pools)
        r = res[0]
        t = lamina.open_table(uri, storage_options=storage)
        out[name] = {"seconds": took, "heap": heap, "rss": rss.peak, "updated": r.rows_updated, "inserted": r.rows_inserted,
                     "files_touched": r.files_touched, "files_scanned": r.files_scanned, "rows": t.scan().count(),
                     "write_seconds": t0}
        src.unpersist()
        print(name, out[name], flush=True)

    src = changes(k, 0.1)
    one("s3", f"s3://{BUCKET}/{run}/merge", opts, src)
    one("local", str(work / "merge"), None, src)
    one("local_quarter", str(work / "quarter"), None, changes(n // 4, 0.0))
    out["max_heap"] = int(spark._jvm.java.lang.Runtime.getRuntime().maxMemory())
    spark.stop()
    return out


# -- report ---------------------------------------------------------------------------------------


def _s(x: float) -> str:
    return f"{x:.2f} s"


def _mb(x: int) -> str:
    return f"{x / 2**20:,.0f} MB"


def report(args, rw: dict | None, mg: dict | None, elapsed: float, load: tuple[float, float]) -> str:
    import pyspark

    import lamina

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    lines = [BEGIN, "## Spark on S3 through S3A (issue 46)", "",
             "Lamina's native path on an s3:// table (moto, through Hadoop's S3A connector) against raw Spark Parquet over "
             "`s3a://` and Lamina's Python data source, in one session, one run (written by `bench/spark_s3_bench.py`; "
             "re-run it, do not edit by hand).", "",
             f"- Command: `.venv/bin/python bench/spark_s3_bench.py --rows {args.rows} --merge-rows {args.merge_rows} "
             f"--changes {args.changes} --repeat {args.repeat} --read-repeat {args.read_repeat}` (after `make s3a-jars`)",
             f"- Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, took {elapsed / 60:.1f} min; lamina {lamina.__version__} "
             f"at git {rev}, pyspark {pyspark.__version__} (Hadoop 3.5.0, hadoop-aws 3.5.0, AWS SDK bundle 2.35.4), Java 17, "
             f"local[2]; moto 5.2.5 in its own process on 127.0.0.1 (its writes serialized: tests/support/s3server.py).",
             f"- Machine: {os.cpu_count()} vCPU, {platform.machine()}, Python {platform.python_version()}, shared with other "
             f"engineers' work (1-min load average {load[0]:.1f} before, {load[1]:.1f} after): quote ratios, not times. "
             "**Ratio = other time / Lamina native time** (>1: Lamina's native path is faster).", ""]
    if rw is not None:
        w, r = rw["write"], rw["read"]
        lines += [f"Reads and writes: {args.rows:,} orders (bench/spark_bench.py's data, 8 columns), driver 4g; medians of "
                  f"{args.repeat} write rounds (writers rotating) and {args.read_repeat} read rounds (Python data source: "
                  f"{args.repeat}), each after a warm-up round and a full JVM GC. The raw reads read the Lamina table's own "
                  f"{rw['files']} files.", "",
                  "| operation | raw Parquet (s3a://) | Lamina native | vs raw | target >= 0.9x | Python data source | vs Python | target >= 2x |",
                  "|---|---|---|---|---|---|---|---|"]
        rows = [("write `df` (new table)", median(w["raw"]), median(w["native"]), median(w["python"]))]
        for a, label in (("full", "read all rows (`noop`)"), ("one_column", "read one column (`sum(amount)`)")):
            rows.append((label, median(r[("raw", a)]), median(r[("native", a)]), median(r[("python", a)])))
        for label, raw, nat, py in rows:
            lines.append(f"| {label} | {_s(raw)} | {_s(nat)} | {raw / nat:.2f}x | {'PASS' if raw / nat >= 0.9 else 'MISS'} "
                         f"| {_s(py)} | {py / nat:.2f}x | {'PASS' if py / nat >= 2 else 'MISS'} |")
        lines += ["", "- Runs: " + "; ".join(f"write {k} " + ", ".join(_s(x) for x in v) for k, v in w.items()) + "; "
                  + "; ".join(f"{k[0]}/{k[1]} " + ", ".join(_s(x) for x in v) for k, v in r.items()) + ".",
                  "- The raw write commits through Hadoop's FileOutputCommitter (task attempt directories renamed, on S3 a "
                  "copy of every object, twice); Lamina's native write has its tasks write uniquely named files in place "
                  "and registers the committed tasks' files (docs/spark.md, \"Object stores\"). All three readers return the "
                  "same count, sum(qty) and rounded sum(amount) (checked).", ""]
    if mg is not None:
        lines += [f"Merges: `lamina.spark.merge(uri, changes, on=\"id\", driver_rows=0).when_matched_update_all()"
                  f".when_not_matched_insert_all()` (the Spark job: positions folded into one bitmap per file in the tasks) "
                  f"of {args.changes:,} changes (90% updates spread over the table, 10% new ids) into {args.merge_rows:,} rows "
                  f"written by `lamina.spark.write`, driver `spark.driver.memory=1g` (max heap {_mb(mg['max_heap'])}; in "
                  "local mode the executors' work runs in the driver's JVM too). Peak heap: the JVM heap pools' peak usage "
                  "over the merge (reset after a full GC before it); peak RSS: the driver's Python process, sampled every 20 ms.", "",
                  "| merge | table | time | driver peak heap | driver Python peak RSS | rows updated | inserted | files touched / scanned |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, label in (("s3", f"{args.changes:,} changes, S3 (S3A)"), ("local", f"{args.changes:,} changes, local disk"),
                            ("local_quarter", f"{args.merge_rows // 4:,} matched rows, local disk")):
            m = mg[name]
            lines.append(f"| {label} | {m['rows']:,} rows after | {_s(m['seconds'])} | {_mb(m['heap'])} | {_mb(m['rss'])} | "
                         f"{m['updated']:,} | {m['inserted']:,} | {m['files_touched']} / {m['files_scanned']} |")
        lines += ["", f"- S3 vs local disk, the same merge: {mg['s3']['seconds'] / mg['local']['seconds']:.2f}x the time.", ""]
    lines.append(END)
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else "# Lamina benchmarks\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--merge-rows", type=int, default=20_000_000)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--read-repeat", type=int, default=5)
    ap.add_argument("--only", choices=["rw", "merge"], default=None)
    ap.add_argument("--part", choices=["rw", "merge"], default=None, help=argparse.SUPPRESS)  # (a child process)
    ap.add_argument("--endpoint", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    args = ap.parse_args(argv)
    if args.part is not None:  # one part in this process: its own JVM (a driver's memory is fixed at its start)
        opts = {"endpoint": args.endpoint, "access_key_id": "test", "secret_access_key": "test", "region": "us-east-1",
                "allow_http": "true"}
        got = reads_and_writes(args, opts) if args.part == "rw" else merges(args, opts)
        if args.part == "rw":
            got = {"write": got["write"], "read": [[list(k), v] for k, v in got["read"].items()], "files": got["files"]}
        Path(args.result).write_text(json.dumps(got))
        return 0
    started, load0 = time.time(), os.getloadavg()[0]
    proc, opts = start_moto()
    results: dict[str, dict | None] = {"rw": None, "merge": None}
    try:
        for part in ("rw", "merge"):
            if args.only not in (None, part):
                continue
            out = Path(tempfile.mkstemp(suffix=".json")[1])
            cmd = [sys.executable, __file__, "--part", part, "--endpoint", opts["endpoint"], "--result", str(out),
                   "--rows", str(args.rows), "--merge-rows", str(args.merge_rows), "--changes", str(args.changes),
                   "--repeat", str(args.repeat), "--read-repeat", str(args.read_repeat)]
            subprocess.run(cmd, check=True)
            results[part] = json.loads(out.read_text())
            out.unlink()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    rw = results["rw"]
    if rw is not None:
        rw["read"] = {tuple(k): v for k, v in rw["read"]}
    section = report(args, rw, results["merge"], time.time() - started, (load0, os.getloadavg()[0]))
    print(section)
    write_section(Path(args.out), section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
