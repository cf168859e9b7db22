"""Spark's own Parquet reader and writer on s3:// tables through Hadoop's S3A connector (moto).

Every change is made twice, on S3 and on local disk, and the two tables must hold the same
rows (as multisets, row lineage included), which Lamina's core reader, ``read`` and the Python
data source all read alike. The session has S3A when `make s3a-jars` fetched its jars
(tests/support/s3a_jars.py); otherwise these tests are skipped, saying so. Driver memory per
file, row groups and the S3A settings are tested here too; the exactly-once commit under a
failed task attempt runs on the multi-process cluster (tests/support/spark_cluster.py).
"""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.errors import TableAlreadyExists
from lamina.spark.datasource_options import PYTHON_SOURCE_OPTION

from support import BUCKET
from support.s3a_jars import MISSING
from support.spark_results import bag

pytestmark = pytest.mark.xdist_group("spark")

CATEGORIES = ["books", "games", "d e%f/é"]  # the last one is escaped in directory names (Hive, then URI)
LINEAGE = ["_row_id", "_last_updated_version"]


@pytest.fixture
def s3a(spark, s3):
    """A fresh s3:// table location and its storage options; skipped without S3A in the session."""
    from lamina.spark.s3a import s3a_available

    if not s3a_available(spark):
        pytest.skip(MISSING)
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/t", s3.storage_options


def rows(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    cat = np.array(CATEGORIES, dtype=object)[rng.integers(0, len(CATEGORIES), n)]
    return pa.table({
        "id": np.arange(start, start + n, dtype=np.int64),
        "category": pa.array(cat, pa.string()),
        "qty": pa.array(rng.integers(-5, 50, n).astype(np.int32)),
        "amount": pa.array(rng.normal(100, 30, n).round(2), mask=rng.random(n) < 0.05),
    })


def sdf(spark, t: pa.Table):
    from lamina.spark._types import spark_schema

    return spark.createDataFrame(t, schema=spark_schema(t.schema))


def native_scan(df) -> bool:
    """Whether ``df`` reads Parquet files with Spark's own reader (not a Python data source)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return "FileScan parquet" in plan and "BatchEvalPython" not in plan and "PythonDataSource" not in plan


def s3_keys(s3, uri: str) -> list[str]:
    prefix = uri.split(f"s3://{BUCKET}/", 1)[1]
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return sorted(o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", []))


def test_native_path_on_s3_equals_local_disk(spark, s3, s3a, tmp_path):
    """write, append, delete (DVs), update, merge and compact on s3:// through S3A, the same on local
    disk: the same rows and row ids after each, read by Spark natively (S3A), by the core reader
    and by the Python data source; Spark's tasks wrote the S3 files (data/spark-<write id>/)."""
    from lamina.spark import compact, delete, merge, read, update, write

    s3_uri, opts = s3a
    local = str(tmp_path / "t")
    base, more = rows(3000), rows(1000, start=3000, seed=1)
    changes = pa.concat_tables([rows(400, start=2800, seed=2), rows(100, start=5000, seed=3)])  # 400 ids held, 100 new

    def both(step):
        return [step(local, None), step(s3_uri, opts)]

    def check(what: str) -> None:
        t_local = lamina.open_table(local)
        t_s3 = lamina.open_table(s3_uri, storage_options=opts)
        want = t_local.scan(columns=[*t_local.schema.names, *LINEAGE]).to_arrow()
        assert bag(t_s3.scan(columns=[*t_s3.schema.names, *LINEAGE]).to_arrow()) == bag(want), what
        df = read(spark, s3_uri, storage_options=opts, columns=[*t_s3.schema.names, *LINEAGE])
        assert native_scan(df), what
        assert bag(df.toArrow()) == bag(want), what
        python = (spark.read.format("lamina").options(**opts).option(PYTHON_SOURCE_OPTION, "true")
                  .option("columns", ",".join([*t_s3.schema.names, *LINEAGE])).load(s3_uri))
        assert not native_scan(python)
        assert bag(python.toArrow()) == bag(want), what

    assert both(lambda u, o: write(sdf(spark, base), u, partition_by=["category", "bucket(2, id)"],
                                   storage_options=o).version) == [1, 1]
    keys = s3_keys(s3, s3_uri)
    data = [k for k in keys if k.endswith(".parquet")]
    assert data and all(k.startswith("data/spark-") for k in data), keys  # Spark's writer, under its write's directory
    assert [k for k in keys if "_spark_metadata" in k or k.endswith(".crc") or "_temporary" in k] == []
    check("write")
    assert both(lambda u, o: write(sdf(spark, more), u, storage_options=o).version) == [2, 2]
    check("append")
    assert both(lambda u, o: delete(spark, u, "qty < 0", storage_options=o).version) == [3, 3]
    s3_table = lamina.open_table(s3_uri, storage_options=opts)
    assert s3_table.metadata.summary["dv-updated-files"] > 0  # deletion vectors, read back natively below
    check("delete")
    assert both(lambda u, o: update(spark, u, "category = 'd e%f/é' AND qty > 40", set={"amount": "amount * 2"},
                                    storage_options=o).version) == [4, 4]
    check("update")

    def upsert(u, o):
        res = (merge(u, sdf(spark, changes), on="id", storage_options=o, driver_rows=0)
               .when_matched_delete(condition="source.qty > 45")
               .when_matched_update_all()
               .when_not_matched_insert_all().execute())
        return res.version, res.rows_updated, res.rows_deleted, res.rows_inserted

    got = both(upsert)
    assert got[0] == got[1] and got[0][0] == 5 and got[0][3] >= 100, got  # (rows deleted before: inserted)
    check("merge")
    compacted = both(lambda u, o: compact(spark, u, target_file_size=1 << 20, storage_options=o).version)
    assert compacted == [6, 6]
    check("compact")
    # the one-column and filtered reads prune as on local disk
    one = read(spark, s3_uri, storage_options=opts, columns=["qty"], where="category = 'books'")
    assert native_scan(one)
    assert bag(one.toArrow()) == bag(read(spark, local, columns=["qty"], where="category = 'books'").toArrow())


def test_format_lamina_on_s3_takes_the_native_path(spark, s3a):
    """df.write / spark.read.format("lamina") of an s3:// table go through Spark's own writer and
    reader (S3A), with Spark's save modes, partitionBy, replaceWhere and time travel; the Python
    data source reads the same rows."""
    s3_uri, opts = s3a
    first, second = rows(2000), rows(500, start=2000, seed=4)
    w = lambda t: sdf(spark, t).write.format("lamina").options(**opts)  # noqa: E731
    w(first).partitionBy("category").save(s3_uri)  # ErrorIfExists: a new table
    with pytest.raises(TableAlreadyExists):
        w(first).save(s3_uri)
    w(first).mode("ignore").save(s3_uri)  # exists: nothing written
    w(second).mode("append").save(s3_uri)
    books = second.filter(pc.equal(second.column("category"), "books"))
    w(books).mode("overwrite").option("replaceWhere", "category = 'books'").save(s3_uri)
    t = lamina.open_table(s3_uri, storage_options=opts)
    assert t.version == 3 and t.partition_spec.fields[0].name == "category"
    assert all(p.startswith("data/spark-") for p in t.scan().plan().entries.column("path").to_pylist())
    keep = pa.concat_tables([first, second]).filter(pc.not_equal(pc.field("category"), "books"))
    want = pa.concat_tables([keep, books])
    df = spark.read.format("lamina").options(**opts).load(s3_uri)
    assert native_scan(df)
    assert bag(df.toArrow()) == bag(want)
    v1 = spark.read.format("lamina").options(**opts).option("versionAsOf", 1).load(s3_uri).where("qty > 10")
    assert native_scan(v1)
    assert bag(v1.toArrow()) == bag(first.filter(pc.greater(first.column("qty"), 10)))
    python = spark.read.format("lamina").options(**opts).option(PYTHON_SOURCE_OPTION, "true").load(s3_uri)
    assert not native_scan(python)
    assert bag(python.toArrow()) == bag(want)


def test_s3a_settings_come_from_storage_options_and_keep_the_clusters(spark):
    """A bucket's fs.s3a.bucket.<b>.* keys are set from the table's storage options once; a key
    the user set (for the bucket or for every bucket) is not overwritten; a second table of the
    bucket with other options gets the Python data source."""
    from lamina.io import FileIO
    from lamina.spark.s3a import DEFAULT_CREDENTIALS, configure

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    bucket = f"cfg-{uuid.uuid4().hex[:8]}"
    conf.set(f"fs.s3a.bucket.{bucket}.endpoint.region", "eu-north-1")  # the cluster's own setting
    opts = {"endpoint": "http://127.0.0.1:9", "region": "us-east-1", "access_key_id": "AK", "secret_access_key": "SK"}
    assert configure(spark, FileIO(f"s3://{bucket}/a", opts)) is None
    got = {k: conf.get(f"fs.s3a.bucket.{bucket}.{k}") for k in
           ("endpoint", "endpoint.region", "path.style.access", "connection.ssl.enabled", "access.key", "secret.key",
            "aws.credentials.provider")}
    assert got == {"endpoint": "http://127.0.0.1:9", "endpoint.region": "eu-north-1", "path.style.access": "true",
                   "connection.ssl.enabled": "false", "access.key": "AK", "secret.key": "SK",
                   "aws.credentials.provider": None}
    assert configure(spark, FileIO(f"s3://{bucket}/b", opts)) is None  # the same options: nothing to do
    reason = configure(spark, FileIO(f"s3://{bucket}/c", {**opts, "access_key_id": "OTHER"}))
    assert reason is not None and "already configured" in reason
    assert conf.get(f"fs.s3a.bucket.{bucket}.access.key") == "AK"
    # No credentials: the AWS SDK's standard chain, unless the cluster names its providers.
    chain = f"chain-{uuid.uuid4().hex[:8]}"
    assert configure(spark, FileIO(f"s3://{chain}/t", {"region": "us-east-1"})) is None
    assert conf.get(f"fs.s3a.bucket.{chain}.aws.credentials.provider") == DEFAULT_CREDENTIALS
    assert conf.get(f"fs.s3a.bucket.{chain}.access.key") is None and conf.get(f"fs.s3a.bucket.{chain}.endpoint") is None


def test_row_level_changes_bring_one_row_per_file_to_the_driver(spark, tmp_path, monkeypatch):
    """A delete, update and merge matching thousands of rows collect one row per (task, file) to
    the driver (each file's positions as one bitmap built in the tasks), not a row per match."""
    from pyspark.sql import DataFrame

    from lamina.spark import delete, merge, update, write

    collected: list[int] = []
    to_arrow = DataFrame.toArrow

    def counting(self):
        out = to_arrow(self)
        collected.append(out.num_rows)
        return out

    monkeypatch.setattr(DataFrame, "toArrow", counting)
    uri = str(tmp_path / "t")
    base = rows(20_000)
    write(sdf(spark, base).repartition(2), uri, properties={"write.max-rows-per-file": "5000"})
    files = len(lamina.open_table(uri).scan().plan())
    assert files >= 4
    tasks = spark.sparkContext.defaultParallelism * files  # at most a row per file per task (2 cores: a few tasks)

    def rows_to_driver(run) -> int:
        collected.clear()
        run()
        return sum(collected)

    deleted = int(pc.sum(pc.less(base.column("qty"), 10)).as_py())
    assert rows_to_driver(lambda: delete(spark, uri, "qty < 10")) <= tasks < deleted
    live = base.filter(pc.greater_equal(base.column("qty"), 10))
    updated = int(pc.sum(pc.greater(live.column("qty"), 30)).as_py())
    assert rows_to_driver(lambda: update(spark, uri, "qty > 30", set={"qty": "qty + 100"})) <= tasks < updated
    changes = rows(8000, start=10_000, seed=5)
    res = []
    n = rows_to_driver(lambda: res.append(merge(uri, sdf(spark, changes), on="id", driver_rows=0)
                                          .when_matched_update_all().execute()))
    matched = int(pc.sum(pc.is_in(changes.column("id"), lamina.open_table(uri).scan(version=3, columns=["id"])
                                  .to_arrow().column("id"))).as_py())
    assert n <= tasks + 1 < matched == res[0].rows_updated  # (+1: the source's key bounds, one row)
    got = lamina.open_table(uri).scan().to_arrow()
    qty = live.column("qty")
    live = live.set_column(2, "qty", pc.if_else(pc.greater(qty, 30), pc.add(qty, pa.scalar(100, pa.int32())), qty))
    ids = set(changes.column("id").to_pylist())
    kept = live.filter(pc.invert(pc.is_in(live.column("id"), pa.array(sorted(ids)))))
    upd = changes.filter(pc.is_in(changes.column("id"), live.column("id")))
    assert bag(got) == bag(pa.concat_tables([kept, upd]))


def test_row_groups_sized_by_the_table_properties(spark, tmp_path):
    """write.parquet.row-group-size-bytes and write.parquet.row-group-limit cut the row groups of
    Lamina's Arrow writer and of Spark's native writer (read back from the footers), and Spark then
    reads one large file in parallel tasks."""
    from lamina.spark import read, write

    data = rows(60_000)
    props = {"write.parquet.row-group-limit": "7000"}
    arrow_t = lamina.create_table(str(tmp_path / "arrow"), data.schema, properties=props)
    arrow_t.append(data)
    write(sdf(spark, data).coalesce(1), str(tmp_path / "spark"), properties=props)
    by_bytes = lamina.create_table(str(tmp_path / "bytes"), data.schema,
                                   properties={"write.parquet.row-group-size-bytes": str(64 * 1024)})
    by_bytes.append(data)
    write(sdf(spark, data).coalesce(1), str(tmp_path / "spark_bytes"),
          properties={"write.parquet.row-group-size-bytes": str(64 * 1024)})

    def groups(name: str) -> list[pq.RowGroupMetaData]:
        t = lamina.open_table(str(tmp_path / name))
        out = []
        for p in t.scan().plan().entries.column("path").to_pylist():
            md = pq.read_metadata(t.io.local_path(p))
            out += [md.row_group(i) for i in range(md.num_row_groups)]
        return out

    for name in ("arrow", "spark"):
        g = groups(name)
        assert sum(r.num_rows for r in g) == data.num_rows
        assert len(g) >= 60_000 // 7000 and max(r.num_rows for r in g) <= 7000, name
    arrow_bytes = groups("bytes")
    assert len(arrow_bytes) > 1 and max(r.total_byte_size for r in arrow_bytes) <= 64 * 1024
    spark_bytes = groups("spark_bytes")
    # parquet-java checks the size every so many rows: a row group ends about at the limit
    assert len(spark_bytes) > 1 and max(r.total_byte_size for r in spark_bytes) <= 2 * 64 * 1024
    # one file of many row groups: Spark reads it in several tasks, each its own row groups
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(64 * 1024))
    try:
        per_task = read(spark, str(tmp_path / "spark")).rdd.mapPartitions(lambda it: [sum(1 for _ in it)]).collect()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)
    assert sum(per_task) == data.num_rows and sum(1 for n in per_task if n) > 1
