"""Spark on catalog tables: writes, reads and row-level changes through the catalog's
coordinator, and Spark-distributed compaction (``lamina.spark.compact``)."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import CatalogManaged, PartitionSpecMismatch, TableAlreadyExists, TableOffline
from lamina.maintenance import fsck
from lamina.spark import compact as spark_compact
from lamina.spark import delete as spark_delete
from lamina.spark import merge as spark_merge
from lamina.spark import read as spark_read
from lamina.spark import write as spark_write
from lamina.spark.compact import spark_rewriter

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("cat", pa.string()), pa.field("amt", pa.float64())])


def rows(lo: int, hi: int, cat: str = "c") -> pa.Table:
    ids = pa.array(range(lo, hi), pa.int64())
    return pa.table({"id": ids, "cat": [cat] * (hi - lo), "amt": pc.multiply(ids.cast(pa.float64()), 0.5)}, schema=SCHEMA)


def sdf(spark, t: pa.Table):
    return spark.createDataFrame(t.to_pandas(), schema="id bigint, cat string, amt double")


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def data_files(root: str) -> set[str]:
    out = set()
    for d, _, names in os.walk(os.path.join(root, "data")):
        out.update(os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".parquet"))
    return out


@pytest.fixture
def cat(tmp_path):
    c = lamina.load_catalog(f"sqlite:///{tmp_path}/wh/catalog.db")
    c.create_namespace("shop")
    yield c
    c.close()


def test_write_creates_and_commits_through_the_catalog(spark, cat):
    v = spark_write(sdf(spark, rows(0, 100)), "shop.orders", catalog=cat, partition_by=["bucket(4, id)"]).version
    assert v == 1
    info = cat.table_info("shop.orders")
    assert info.version == 1  # the catalog row moved: the swap was the commit point
    assert info.location == cat.default_location("shop.orders")
    t = cat.load_table("shop.orders")
    assert spark_write(sdf(spark, rows(100, 150)), t).version == 2  # an open CatalogTable
    assert cat.table_info("shop.orders").version == 2
    assert ids(t.refresh().to_arrow()) == list(range(150))
    # reads: through the catalog, and by path alone, at any version
    assert spark_read(spark, "shop.orders", catalog=cat).count() == 150
    assert spark_read(spark, info.location, version=1).count() == 100
    # overwrite(where) through the catalog
    spark_write(sdf(spark, rows(0, 10, "x")), t, mode="overwrite", where="id < 10")
    got = t.refresh().to_arrow()
    assert ids(got) == list(range(150)) and pc.sum(pc.equal(got.column("cat"), "x")).as_py() == 10
    assert cat.table_info("shop.orders").version == t.version == 3


def test_save_as_table_into_the_catalog_with_every_save_mode(spark, cat):
    """``saveAsTable(ident)`` with option catalog: ErrorIfExists (the default) creates the
    catalog's table (partitioned by Spark's partitionBy), then refuses it; Ignore leaves it;
    Append adds; Overwrite replaces; another partitioning is refused. Each is one catalog
    version, or none."""
    uri, _ = cat.reopen_uri()

    def w(t: pa.Table, mode: str | None = None):
        writer = sdf(spark, t).write.format("lamina").option("catalog", uri)
        return writer if mode is None else writer.mode(mode)

    w(rows(0, 10)).partitionBy("cat").saveAsTable("shop.orders")
    info = cat.table_info("shop.orders")
    assert info.version == 1 and info.location == cat.default_location("shop.orders")
    t = cat.load_table("shop.orders")
    assert [f.name for f in t.partition_spec.fields] == ["cat"] and ids(t.to_arrow()) == list(range(10))
    with pytest.raises(TableAlreadyExists, match="shop.orders"):
        w(rows(10, 20)).saveAsTable("shop.orders")
    w(rows(10, 20), "ignore").saveAsTable("shop.orders")
    assert cat.table_info("shop.orders").version == 1
    w(rows(10, 20), "append").saveAsTable("shop.orders")
    assert ids(t.refresh().to_arrow()) == list(range(20)) and cat.table_info("shop.orders").version == 2
    w(rows(30, 35), "overwrite").saveAsTable("shop.orders")
    assert ids(t.refresh().to_arrow()) == list(range(30, 35)) and cat.table_info("shop.orders").version == 3
    with pytest.raises(PartitionSpecMismatch):
        w(rows(0, 1), "append").partitionBy("bucket(2, id)").saveAsTable("shop.orders")
    assert cat.table_info("shop.orders").version == 3


def test_path_writer_is_refused_and_writes_nothing(spark, cat):
    t = cat.create_table("shop.orders", SCHEMA)
    t.append(rows(0, 10))
    before = data_files(t.uri)
    with pytest.raises(CatalogManaged):
        spark_write(sdf(spark, rows(10, 20)), t.uri)  # by path: not through the catalog
    assert data_files(t.uri) == before
    assert cat.load_table("shop.orders").version == 1


def test_offline_table_refuses_spark_writes_before_writing(spark, cat):
    t = cat.create_table("shop.orders", SCHEMA)
    t.append(rows(0, 50))
    cat.set_online("shop.orders", False)
    before = data_files(t.uri)
    with pytest.raises(TableOffline):
        spark_write(sdf(spark, rows(50, 60)), "shop.orders", catalog=cat)
    with pytest.raises(TableOffline):
        spark_delete(spark, "shop.orders", "id < 5", catalog=cat)
    with pytest.raises(TableOffline):
        spark_compact(spark, "shop.orders", catalog=cat)
    assert data_files(t.uri) == before
    assert spark_read(spark, "shop.orders", catalog=cat).count() == 50  # still readable
    cat.set_online("shop.orders", True)
    assert spark_write(sdf(spark, rows(50, 60)), "shop.orders", catalog=cat).version == 2


def test_data_source_with_catalog_option(spark, cat, tmp_path):
    from lamina.spark import register

    register(spark)
    uri, _ = cat.reopen_uri()
    w = sdf(spark, rows(0, 40)).write.format("lamina").option("catalog", uri).option("partitionBy", "bucket(2, id)")
    w.mode("append").save("shop.events")  # created in the catalog by the data source's commit
    sdf(spark, rows(40, 60)).write.format("lamina").option("catalog", uri).mode("append").save("shop.events")
    assert cat.table_info("shop.events").version == 2
    df = spark.read.format("lamina").option("catalog", uri).option("versionAsOf", 1).load("shop.events")
    assert df.count() == 40
    assert spark.read.format("lamina").option("catalog", uri).load("shop.events").where("id >= 50").count() == 10
    # the S3-free non-native path: a catalog table read back by path sees the same rows
    assert ids(lamina.open_table(cat.table_info("shop.events").location).to_arrow()) == list(range(60))


def test_merge_and_delete_through_the_catalog(spark, cat):
    t = cat.create_table("shop.orders", SCHEMA)
    for k in range(3):
        t.append(rows(100 * k, 100 * k + 100))
    src = sdf(spark, pa.concat_tables([rows(5, 10, "u"), rows(300, 305, "n")]))
    res = spark_merge(t, src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert (res.rows_updated, res.rows_inserted) == (5, 5)
    assert spark_delete(spark, "shop.orders", "id >= 200 AND id < 250", catalog=cat).version == res.version + 1
    got = cat.load_table("shop.orders").to_arrow()
    assert ids(got) == [i for i in range(305) if not 200 <= i < 250]
    assert cat.table_info("shop.orders").version == res.version + 1


def small_files_table(cat, n_files: int = 12):
    t = cat.create_table("shop.orders", SCHEMA, properties={"write.sort-order": "id"})
    for k in reversed(range(n_files)):  # appended out of id order: the sort order is visible after
        t.append(rows(50 * k, 50 * k + 50, cat=f"c{k % 3}"))
    t.delete(f"id IN ({', '.join(str(i) for i in range(3, 50 * n_files, 10))})")  # DVs the compaction must apply
    return t


def test_spark_compact_matches_the_arrow_compaction(spark, cat, tmp_path):
    t = small_files_table(cat)
    want = t.to_arrow()
    before = len(t.scan().plan())
    r = spark_compact(spark, t, target_file_size=1 << 20)
    assert (r.files_before, r.input_files, r.files_after, r.groups) == (before, before, 1, 1)
    assert r.rows_written == want.num_rows == 600 - 60
    t.refresh()
    got = t.to_arrow()
    assert got.column("id").to_pylist() == sorted(want.column("id").to_pylist())  # one file, sorted by id
    assert got.sort_by("id").equals(want.sort_by("id"))
    assert not [i for i in got.column("id").to_pylist() if i % 10 == 3]  # deleted rows stay deleted
    assert cat.table_info("shop.orders").version == t.version == r.version
    assert t.history()[0]["operation"] == "compact"
    # outputs carry no deletion vector; the inputs are gone from the live set; fsck is clean
    assert t.scan().plan().entries.column("dv_path").null_count == 1
    assert fsck(t).ok


def test_spark_compact_rewrites_groups_in_parallel_tasks(spark, tmp_path):
    t = lamina.create_table(str(tmp_path / "p"), SCHEMA, partition_by=["bucket(3, id)"])
    for k in range(5):
        t.append(rows(40 * k, 40 * k + 40))
    assert spark_write(sdf(spark, rows(200, 240)), t).version == 6  # an open path Table is a target too
    r = spark_compact(spark, t.uri, target_file_size=1 << 20)
    assert r.groups == 3 and r.files_after == 3  # one group, one task, one file per partition
    assert ids(lamina.open_table(t.uri).to_arrow()) == list(range(240))
    assert spark_compact(spark, t.uri).version is None  # nothing left to compact: no version


def test_spark_compact_recomputes_a_group_a_concurrent_delete_changed(spark, cat):
    t = small_files_table(cat, n_files=6)
    other = cat.load_table("shop.orders")
    run = spark_rewriter(spark)
    calls = []

    def racing(op, base, groups):
        out = run(op, base, groups)
        if not calls:  # after the first rewrite, before the commit: a delete on an input file lands
            other.delete("id = 0 OR id = 1")
        calls.append(len(groups))
        return out

    r = t.maintenance.compact(target_file_size=1 << 20, rewrite_groups=racing)
    assert len(calls) == 2  # the group was recomputed on the new base
    got = cat.load_table("shop.orders").to_arrow()
    assert ids(got) == [i for i in range(300) if i % 10 != 3 and i not in (0, 1)]  # no resurrected row
    assert r.files_after == 1


def test_failed_spark_compact_commits_nothing_and_removes_outputs(spark, cat, monkeypatch):
    t = small_files_table(cat, n_files=4)
    before_files, v = data_files(t.uri), t.version

    def failing(op, base, groups):
        list(spark_rewriter(spark)(op, base, groups))  # outputs written...
        raise RuntimeError("driver lost")  # ...then the job fails before the commit

    module = sys.modules["lamina.spark.compact"]  # the package exports a function of the same name
    monkeypatch.setattr(module, "spark_rewriter", lambda spark: failing)
    with pytest.raises(RuntimeError):
        spark_compact(spark, t)
    assert t.refresh().version == v
    assert data_files(t.uri) == before_files  # the outputs were removed
    assert not os.listdir(os.path.join(t.uri, "_lamina", "writes"))  # in-flight marker finished


def test_catalog_table_on_s3_through_the_data_source_and_spark_compaction(spark, tmp_path):
    """A SQLite catalog with an s3:// warehouse (moto): Spark writes go through Spark's own writer
    over S3A where the session has it (the catalog's storage options reach the driver's commit),
    else the Python data source, whose commit (in a Python worker) reopens the catalog;
    compaction tasks reach S3."""
    from support.s3server import start_s3

    server = start_s3()  # moto; a real radosgw with LAMINA_S3_BACKEND=radosgw (make test-radosgw)
    try:
        server.create_bucket("lakehouse")
        opts = server.storage_options
        cat = lamina.load_catalog(f"sqlite:///{tmp_path}/catalog.db", warehouse="s3://lakehouse/lake", storage_options=opts)
        cat.create_namespace("shop")
        assert spark_write(sdf(spark, rows(0, 30)), "shop.orders", catalog=cat).version == 1
        for k in range(1, 4):
            assert spark_write(sdf(spark, rows(30 * k, 30 * k + 30)), "shop.orders", catalog=cat).version == k + 1
        info = cat.table_info("shop.orders")
        assert info.version == 4 and info.location == "s3://lakehouse/lake/shop/orders"
        t = cat.load_table("shop.orders")
        before = len(t.scan().plan())
        assert before >= 4
        assert spark_read(spark, t, where="id >= 100").count() == 20
        r = spark_compact(spark, "shop.orders", catalog=cat, target_file_size=1 << 20)
        assert (r.files_before, r.files_after) == (before, 1)
        assert cat.table_info("shop.orders").version == 5
        assert ids(cat.load_table("shop.orders").to_arrow()) == list(range(120))
        keys = server.client().list_objects_v2(Bucket="lakehouse", Prefix="lake/shop/orders/_lamina/writes/").get("KeyCount")
        assert keys == 0  # no in-flight marker left behind
        cat.close()
    finally:
        server.stop()
