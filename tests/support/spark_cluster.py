"""Run by tests/spark/test_spark.py in its own process: Lamina with executors in separate JVMs
and Python workers (master local-cluster[2,1,1024]). Prints one JSON line of results."""

from __future__ import annotations

import json
import os
import sys


def main(workdir: str) -> None:
    import lamina
    from lamina.spark import compact, read, spark_session, write

    spark = spark_session(
        master="local-cluster[2,1,1024]", app_name="lamina-local-cluster", fast_start=True,
        conf={"spark.sql.shuffle.partitions": "2", "spark.executor.memory": "512m"},
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
        out["fast_write_version"] = write(df, uri, partition_by=["day(ts)", "bucket(4, id)"])
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
        print(json.dumps(out))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
