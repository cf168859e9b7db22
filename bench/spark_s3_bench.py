"""Spark on S3 (moto) through Hadoop's S3A: Lamina's native path against raw Parquet and the
Python data source (issue 46; the case `spark_s3`).

    .venv/bin/python bench/run.py spark_s3                  # 10M rows; merges of 1M into 20M rows -> BENCHMARKS.md
    .venv/bin/python bench/run.py spark_s3 --quick          # smoke run -> bench/out/BENCHMARKS.spark_s3.md
    .venv/bin/python bench/run.py spark_s3 --only rw --set rows=2000000

Needs the S3A jars (`make s3a-jars`, .cache/jars/hadoop-<version>: tests/support/s3a_jars.py);
without them the case is skipped, saying so. The S3 server is moto (tests/support/s3server.py)
in the runner's process, on 127.0.0.1; each part runs in a Spark driver of its own (a worker:
a driver's memory is fixed when its JVM starts), local[2]. The parts (``--only rw`` or ``merge``):

1. **Reads and writes** (spark.driver.memory=4g), each a full Spark action, medians over rounds in
   rotating order: raw ``df.write.parquet("s3a://...")`` (Spark's FileOutputCommitter, as a Spark
   user writes Parquet to S3) vs ``lamina.spark.write(df, "s3://...")`` (native writer, write then
   register, one commit) vs the Python data source (``format("lamina")`` with
   ``__lamina_python_source``); reads of all rows (``noop``) and of one column (``sum(amount)``):
   raw ``spark.read.parquet(<the Lamina table's data directory over s3a://>)`` vs
   ``lamina.spark.read`` vs the Python data source. Targets (issue 46): native >= 0.9x raw and >= 2x
   the Python data source, for the write, the full read and the one-column read.
2. **Merges** (spark.driver.memory=1g): ``lamina.spark.merge`` of changes (90% updates, 10% new
   ids, spread over the table) into a table of ``merge_rows`` rows, on S3 and on local disk,
   the Spark job (``driver_rows=0``: positions folded per file in the tasks), timed ``execute()``,
   with the driver JVM's peak heap (the heap pools' peak usage, reset before the merge) and the
   driver Python process's peak RSS over the merge (sampled); then a merge matching a quarter
   of the table's rows on local disk in the same 1 GB driver.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from common import run_worker, say
from registry import Absent, Need, Run, case, module, program
from report import Report, Section, Target
from spark_bench import build_df, full_gc, median, timed

SECTION_TITLE = "Spark on S3 through S3A (issue 46)"
BUCKET = "bench"
PARTS = ("rw", "merge")


def s3a_jars() -> Need:
    """Hadoop's S3A connector jars of PySpark's Hadoop, where `make s3a-jars` puts them."""

    def probe() -> bool:
        from support.s3a_jars import MISSING, s3a_jars

        if not s3a_jars():
            raise Absent(MISSING)
        return True

    return Need("Hadoop's S3A jars", probe)


@dataclass
class Sizes:
    rows: int = 10_000_000  # rows written and read (part rw)
    merge_rows: int = 20_000_000  # rows of the merge target (part merge)
    changes: int = 1_000_000  # rows merged into it
    repeat: int = 3  # timed write rounds (and Python data source read rounds)
    read_repeat: int = 5  # timed read rounds of raw and native


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


def reads_and_writes(args: Sizes, opts: dict[str, str]) -> dict:
    from pyspark.sql import functions as F

    import lamina
    from lamina.spark import read, write
    from lamina.spark.datasource_options import PYTHON_SOURCE_OPTION

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
        say(f"write round {i}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in wtimes.items() if v))
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
        say(f"read round {i}: " + ", ".join(f"{r}/{a} {v[-1]:.1f}s" for (r, a), v in rtimes.items() if v))
    sums = {r: tuple(make().select(F.sum("qty"), F.count("*"), F.round(F.sum("amount"), 0)).collect()[0])
            for r, make in readers.items()}
    assert len(set(sums.values())) == 1, sums
    assert table.scan().count() == args.rows
    java = spark._jvm.System.getProperty("java.version")
    spark.stop()
    return {"write": wtimes, "read": rtimes, "files": len(files), "java": java}


# -- 2. merges ------------------------------------------------------------------------------------


class PeakRss:
    """The peak resident set of this process while the block runs (sampled every 20 ms)."""

    def __enter__(self) -> PeakRss:
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


def merges(args: Sizes, opts: dict[str, str], work: Path) -> dict:
    from pyspark.sql import functions as F

    import lamina
    from lamina.spark import merge, write

    spark = session("lamina-s3-merge-bench", "1g")
    n, k = args.merge_rows, args.changes
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
        say(f"{name}: {out[name]}")

    src = changes(k, 0.1)
    one("s3", f"s3://{BUCKET}/{run}/merge", opts, src)
    one("local", str(work / "merge"), None, src)
    one("local_quarter", str(work / "quarter"), None, changes(n // 4, 0.0))
    out["max_heap"] = int(spark._jvm.java.lang.Runtime.getRuntime().maxMemory())
    out["java"] = spark._jvm.System.getProperty("java.version")
    spark.stop()
    return out


# -- the case ------------------------------------------------------------------------------------


def part(argv: list[str]) -> dict:
    """A worker: part (rw | merge) of the case in this interpreter's own Spark driver, against the
    S3 server at endpoint; argv = [part, endpoint, sizes as JSON, a work dir]."""
    name, endpoint, sizes, work = argv
    opts = {"endpoint": endpoint, "access_key_id": "test", "secret_access_key": "test", "region": "us-east-1",
            "allow_http": "true"}
    args = Sizes(**json.loads(sizes))
    if name == "merge":
        return merges(args, opts, Path(work))
    got = reads_and_writes(args, opts)
    return {**got, "read": [[list(k), v] for k, v in got["read"].items()]}


def jar_versions() -> str:
    """The S3A connector's jars on the drivers' class path, as name version."""
    from support.s3a_jars import hadoop_version, s3a_jars

    names = [os.path.basename(j)[:-len(".jar")] for j in s3a_jars()]
    jars = ", ".join(n.rpartition("-")[0] + " " + n.rpartition("-")[2] for n in names)
    return f"Hadoop {hadoop_version()} ({jars})"


@case("spark_s3", heavy=True, title=SECTION_TITLE, sizes=Sizes,
      quick=dict(rows=1_000_000, merge_rows=2_000_000, changes=100_000, repeat=1, read_repeat=2),
      tiny=dict(rows=20_000, merge_rows=40_000, changes=2_000, repeat=1, read_repeat=1),
      only={"parts": PARTS}, needs=(module("pyspark"), module("moto", "boto3"), program("java"), s3a_jars()),
      versions=("lamina", "pyspark", "pyarrow", "moto"), reps="repeat")
def spark_s3(run: Run) -> Report:
    """Spark on S3 (moto) through S3A: Lamina's native write, reads and merges vs raw Parquet, Python source."""
    from support.s3server import S3Server

    sizes = run.sizes
    server = S3Server()
    results: dict[str, dict | None] = {p: None for p in PARTS}
    try:
        server.create_bucket(BUCKET)
        for p in run.only("parts"):
            say(f"part {p}: a Spark driver of its own")
            results[p] = run_worker("spark_s3_bench:part", [p, server.endpoint, json.dumps(dataclasses.asdict(sizes)),
                                                           run.ws.new(f"spark-s3-{p}")], timeout=4 * 3600)
    finally:
        server.stop()
    rw = results["rw"]
    if rw is not None:
        rw["read"] = {tuple(k): v for k, v in rw["read"]}
    return report(sizes, rw, results["merge"])


def _s(x: float) -> str:
    return f"{x:.2f} s"


def _mb(x: int) -> str:
    return f"{x / 2**20:,.0f} MB"


def report(args: Sizes, rw: dict | None, mg: dict | None) -> Report:
    java = (rw or mg or {}).get("java", "?")
    facts = [f"Spark: {jar_versions()}, Java {java}, local[2]; moto in the runner's process on 127.0.0.1 (its writes "
             "serialized: tests/support/s3server.py), each part in a Spark driver of its own. "
             "**Ratio = other time / Lamina native time** (>1: Lamina's native path is faster)."]
    targets, sections = [], []
    if rw is not None:
        w, r = rw["write"], rw["read"]
        sec = Section("rw", "Reads and writes", (
            f"{args.rows:,} orders (bench/spark_bench.py's data, 8 columns), driver 4g; medians of {args.repeat} write "
            f"rounds (writers rotating) and {args.read_repeat} read rounds (Python data source: {args.repeat}), each "
            f"after a warm-up round and a full JVM GC. The raw reads read the Lamina table's own {rw['files']} files."),
            ["operation", "raw Parquet (s3a://)", "Lamina native", "vs raw", "Python data source", "vs Python"])
        rows = [("write `df` (new table)", "write", median(w["raw"]), median(w["native"]), median(w["python"]))]
        for a, label, short in (("full", "read all rows (`noop`)", "full read"),
                                ("one_column", "read one column (`sum(amount)`)", "one-column read")):
            rows.append((label, short, median(r[("raw", a)]), median(r[("native", a)]), median(r[("python", a)])))
        for label, short, raw, nat, py in rows:
            sec.rows.append([label, _s(raw), _s(nat), f"{raw / nat:.2f}x", _s(py), f"{py / nat:.2f}x"])
            targets.append(Target(f"native {short} >= 0.9x raw Parquet's speed", raw / nat >= 0.9, f"{raw / nat:.2f}x"))
            targets.append(Target(f"native {short} >= 2x the Python data source's", py / nat >= 2, f"{py / nat:.2f}x"))
        sec.notes = [
            "Runs: " + "; ".join(f"write {k} " + ", ".join(_s(x) for x in v) for k, v in w.items()) + "; "
            + "; ".join(f"{k[0]}/{k[1]} " + ", ".join(_s(x) for x in v) for k, v in r.items()) + ".",
            "The raw write commits through Hadoop's FileOutputCommitter (task attempt directories renamed, on S3 a "
            "copy of every object, twice); Lamina's native write has its tasks write uniquely named files in place "
            "and registers the committed tasks' files (docs/spark.md, \"Object stores\"). All three readers return the "
            "same count, sum(qty) and rounded sum(amount) (checked).",
        ]
        sections.append(sec)
    if mg is not None:
        sec = Section("merge", "Merges", (
            "`lamina.spark.merge(uri, changes, on=\"id\", driver_rows=0).when_matched_update_all()"
            ".when_not_matched_insert_all()` (the Spark job: positions folded into one bitmap per file in the tasks) "
            f"of {args.changes:,} changes (90% updates spread over the table, 10% new ids) into {args.merge_rows:,} rows "
            f"written by `lamina.spark.write`, driver `spark.driver.memory=1g` (max heap {_mb(mg['max_heap'])}; in "
            "local mode the executors' work runs in the driver's JVM too). Peak heap: the JVM heap pools' peak usage "
            "over the merge (reset after a full GC before it); peak RSS: the driver's Python process, sampled every 20 ms."),
            ["merge", "table", "time", "driver peak heap", "driver Python peak RSS", "rows updated", "inserted",
             "files touched / scanned"])
        for name, label in (("s3", f"{args.changes:,} changes, S3 (S3A)"), ("local", f"{args.changes:,} changes, local disk"),
                            ("local_quarter", f"{args.merge_rows // 4:,} matched rows, local disk")):
            m = mg[name]
            sec.rows.append([label, f"{m['rows']:,} rows after", _s(m["seconds"]), _mb(m["heap"]), _mb(m["rss"]),
                             f"{m['updated']:,}", f"{m['inserted']:,}", f"{m['files_touched']} / {m['files_scanned']}"])
        sec.notes = [f"S3 vs local disk, the same merge: {mg['s3']['seconds'] / mg['local']['seconds']:.2f}x the time."]
        sections.append(sec)
    return Report(title=SECTION_TITLE, intro=(
        "Lamina's native path on an s3:// table (moto, through Hadoop's S3A connector) against raw Spark Parquet over "
        "`s3a://` and Lamina's Python data source, one run (after `make s3a-jars`)."),
        facts=facts, targets=targets, sections=sections, raw={"rw": rw and {**rw, "read": {
            f"{k[0]}/{k[1]}": v for k, v in rw["read"].items()}}, "merge": mg})
