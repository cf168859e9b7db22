"""Run by tests/spark/test_spark.py in its own process: Lamina with executors in separate JVMs
and Python workers (master local-cluster[2,1,1024]). Prints one JSON line of results.

With an S3 endpoint (argv[2], the tests' moto server) and Hadoop's S3A jars (s3a_jars), it also
writes an s3:// table through Spark's own writer while a task attempt dies with its executor
(``s3_exactly_once``)."""

from __future__ import annotations

import json
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support` (run as a script)
from support import BUCKET  # noqa: E402
from support.s3a_jars import MISSING, spark_conf as s3a_conf  # noqa: E402


def main(workdir: str, endpoint: str | None = None) -> None:
    import lamina
    from lamina.spark import compact, read, spark_session, write

    spark = spark_session(
        master="local-cluster[2,1,1024]", app_name="lamina-local-cluster", fast_start=True,
        conf={"spark.sql.shuffle.partitions": "2", "spark.executor.memory": "512m",
              **(s3a_conf() if endpoint else {})},
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        from pyspark.sql import functions as F

        uri = os.path.join(workdir, "orders")
        rows = 20_000
        df = spark.range(0, rows, numPartitions=4).select(
            "id",
            (F.col("id") % 5).cast("string").alias("category"),
            F.timestamp_micros(F.lit(1_767_225_600_000_000) + F.col("id") * 10_000_000).alias("ts"),
        )
        pids = spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getpid()).distinct().count()
        out = {"rows": rows, "executor_pids": pids}
        out["fast_write_version"] = write(df, uri, partition_by=["day(ts)", "bucket(4, id)"]).version
        out["fast_read_rows"] = read(spark, uri).count()
        out["filtered_rows"] = read(spark, uri, where="category = '3' AND id < 5000").count()
        out["expected_filtered_rows"] = sum(1 for i in range(5000) if i % 5 == 3)
        df.write.format("lamina").mode("append").save(uri)
        out["ds_write_version"] = lamina.open_table(uri).version
        out["ds_read_rows"] = spark.read.format("lamina").load(uri).count()
        out["core_rows"] = lamina.open_table(uri).scan().count()
        # compaction groups rewritten in the executors, committed once by the driver
        before = len(lamina.open_table(uri).scan().plan())
        r = compact(spark, uri, target_file_size=1 << 20)
        t = lamina.open_table(uri)
        out["compact"] = {"before": before, "files_before": r.files_before, "after": len(t.scan().plan()),
                          "groups": r.groups, "version": r.version, "rows": t.scan().count()}
        # the change feed and a streaming read (the stream source plans in the driver's Python
        # worker, tasks read in the executors): into a Lamina table, restarted once
        out["cdf_rows"] = spark.read.format("lamina").option("readChangeFeed", "true").option("startingVersion", 1).load(uri) \
            .groupBy("_change_type").count().collect()
        copy, checkpoint = os.path.join(workdir, "orders_copy"), os.path.join(workdir, "checkpoint")

        def stream() -> str | None:
            q = (spark.readStream.format("lamina").option("maxFilesPerTrigger", 2).load(uri).writeStream.format("lamina")
                 .option("path", copy).option("appId", "copy").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
            q.awaitTermination(300)
            return None if q.exception() is None else str(q.exception())

        out["stream_errors"] = [stream()]
        write(df.where("id < 1000"), uri)
        out["stream_errors"].append(stream())
        source, sink = lamina.open_table(uri), lamina.open_table(copy)
        out["stream"] = {"rows": sink.scan().count(), "source_rows": source.scan().count(), "batches": sink.version,
                         "distinct_ids_match": sorted(sink.scan(columns=["id"]).to_arrow().column("id").to_pylist())
                         == sorted(source.scan(columns=["id"]).to_arrow().column("id").to_pylist())}
        if endpoint is not None:
            out["s3"] = s3_exactly_once(spark, endpoint) if s3a_conf() else {"skipped": MISSING}
        print(json.dumps(out))
    finally:
        spark.stop()


def _executor_jvm() -> int:
    """The pid of the executor JVM this Python worker serves (its parent, or the parent of the
    worker daemon that forked it); never the driver's."""
    pid = os.getppid()
    for _ in range(2):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no executor JVM above this Python worker")


def s3_exactly_once(spark, endpoint: str) -> dict:
    """A new s3:// table written by Spark's own writer (S3A) while the first attempt of task 0
    leaves a complete Parquet file of its own in the write's directory and then dies with its
    executor (SIGKILL: no task abort runs, whatever files the attempt had closed stay too).
    Spark retries the task; the version must hold each row exactly once and reference no file
    of the dead attempt, and nothing but the committed files may be left under data/."""
    import signal

    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    import lamina
    from lamina.io import FileIO
    from lamina.spark import write
    from lamina.spec.layout import WRITES_DIR

    opts = {"endpoint": endpoint, "access_key_id": "test", "secret_access_key": "test", "region": "us-east-1",
            "allow_http": "true"}
    prefix = f"cluster-{uuid.uuid4().hex[:8]}/t"
    uri = f"s3://{BUCKET}/{prefix}"

    def flaky(batches):
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            io = FileIO(uri, opts)
            marker = io.list(WRITES_DIR)[0].path  # the write's in-flight marker names its id
            wid = marker.rsplit("/", 1)[1].removesuffix(".json")
            first = next(batches)
            buf = pa.BufferOutputStream()
            pq.write_table(pa.Table.from_batches([first]), buf)
            io.put_new(f"data/spark-{wid}/part-00000-{uuid.uuid4()}.c000.snappy.parquet", buf.getvalue())
            yield first
            os.kill(_executor_jvm(), signal.SIGKILL)
        yield from batches

    from pyspark.sql import functions as F

    n = 40_000
    df = spark.range(0, n, numPartitions=4).select("id", (F.col("id") % 7).alias("k"))
    df = df.mapInArrow(flaky, df.schema)
    version = write(df, uri, storage_options=opts, properties={"write.max-rows-per-file": "2000"}).version
    t = lamina.open_table(uri, storage_options=opts)
    ids = t.scan(columns=["id"]).to_arrow().column("id").to_pylist()
    paths = set(t.scan().plan().entries.column("path").to_pylist())
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    keys = [o["Key"][len(prefix) + 1:] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
            for o in page.get("Contents", [])]
    # every executor the application had, the dead included (besides the driver): 2 + the one that
    # replaced the killed executor, so the first attempt did die with its executor
    executors = spark.sparkContext._jsc.sc().statusStore().executorList(False)
    dead = sum(1 for i in range(executors.size()) if not executors.apply(i).isActive())
    return {"version": version, "rows": len(ids), "dead_executors": dead, "distinct": len(set(ids)), "expected": n,
            "exact": sorted(ids) == list(range(n)), "files": len(paths),
            "unreferenced": sorted(k for k in keys if k.startswith("data/") and k not in paths),
            "markers": sorted(k for k in keys if k.startswith(WRITES_DIR + "/"))}


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
