"""``df.write.format("lamina")`` / ``writeStream.format("lamina")`` as a Delta user writes them:
every save mode with Delta's meaning, Spark's own ``partitionBy``
(columns and transforms, batch and streaming), ``saveAsTable`` into a Lamina catalog, and a
streaming sink's configuration errors raised by ``start()``.

Expected tables are computed with Lamina's core API (``create_table(partition_by=...)``,
``to_arrow``), never with the code under test.
"""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest

import lamina
from lamina.errors import InvalidArgument, PartitionSpecMismatch, TableAlreadyExists, TableNotFound
from lamina.maintenance import fsck
from lamina.spec.layout import WRITES_DIR

from support.spark_results import bag

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", "UTC")), pa.field("cat", pa.string()),
                    pa.field("month", pa.int32())])
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
MODES = ["errorifexists", "ignore", "append", "overwrite"]


def rows(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": ids, "ts": [T0 + dt.timedelta(hours=7 * i) for i in ids], "cat": ["abc"[i % 3] for i in ids],
                     "month": [1 + i % 4 for i in ids]}, schema=SCHEMA)


def sdf(spark, t: pa.Table):
    from lamina.spark._types import spark_schema

    return spark.createDataFrame(t, schema=spark_schema(t.schema))


def data_files(root) -> list[str]:
    out = []
    for d, _, names in os.walk(os.path.join(str(root), "data")):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def markers(root) -> list[str]:
    p = os.path.join(str(root), WRITES_DIR)
    return os.listdir(p) if os.path.isdir(p) else []


def jobs_run(spark, group: str, fn) -> list[int]:
    """The Spark jobs ``fn`` ran (in job group ``group``)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return list(sc.statusTracker().getJobIdsForGroup(group))


# -- save modes ---------------------------------------------------------------------------------


def test_every_save_mode_creates_a_missing_table(spark, tmp_path):
    """Spark's default (ErrorIfExists: no mode said) and every other mode create the table where
    there is none, as Delta's do."""
    for mode in [None, *MODES]:
        uri = str(tmp_path / str(mode))
        w = sdf(spark, rows(0, 20)).write.format("lamina")
        (w if mode is None else w.mode(mode)).save(uri)
        t = lamina.open_table(uri)
        assert t.version == 1 and bag(t.to_arrow()) == bag(rows(0, 20)), mode


def test_every_save_mode_on_an_existing_table_does_what_deltas_does(spark, tmp_path):
    """ErrorIfExists: TableAlreadyExists, nothing written; Ignore: nothing written and no Spark
    job run; Append: the rows added; Overwrite: the rows replaced."""
    want = {"errorifexists": rows(0, 10), "ignore": rows(0, 10), "append": pa.concat_tables([rows(0, 10), rows(100, 105)]),
            "overwrite": rows(100, 105)}
    for mode in MODES:
        uri = str(tmp_path / mode)
        lamina.create_table(uri, SCHEMA).append(rows(0, 10))
        before = data_files(uri)
        w = sdf(spark, rows(100, 105)).write.format("lamina").mode(mode)
        if mode == "errorifexists":
            with pytest.raises(TableAlreadyExists, match="mode\\('append'\\)"):
                w.save(uri)
        elif mode == "ignore":
            assert jobs_run(spark, "lamina-ignore", lambda: w.save(uri)) == []
        else:
            w.save(uri)
        t = lamina.open_table(uri)
        assert bag(t.to_arrow()) == bag(want[mode]), mode
        assert t.version == (1 if mode in ("errorifexists", "ignore") else 2), mode
        if mode in ("errorifexists", "ignore"):
            assert data_files(uri) == before and markers(uri) == [], mode
        assert fsck(t).ok


def test_errorifexists_and_ignore_lose_to_a_table_created_meanwhile(spark, tmp_path):
    """The check before the job and the commit are apart: a table another writer creates in
    between fails an ErrorIfExists write at its commit and makes an Ignore write a no-op; in
    both cases nothing is committed and the written files are removed."""
    from lamina.spark.datasource_options import SAVE_MODE_OPTION
    from lamina.spark.datasource_writer import WriteTarget

    df = sdf(spark, rows(0, 5))
    batches = rows(0, 5).to_batches()
    for mode in ("errorifexists", "ignore"):
        uri = str(tmp_path / mode)
        target = WriteTarget.prepare({"path": uri, SAVE_MODE_OPTION: mode}, df.schema, False)
        msg = target.write_task(iter(batches))
        assert msg.entries.num_rows and data_files(uri)
        lamina.create_table(uri, SCHEMA).append(rows(50, 52))  # the other writer
        if mode == "errorifexists":
            with pytest.raises(TableAlreadyExists):
                target.commit([msg])
        else:
            assert target.commit([msg]) is None
        t = lamina.open_table(uri)
        assert t.version == 1 and bag(t.to_arrow()) == bag(rows(50, 52))
        assert data_files(uri) == sorted(os.path.relpath(os.path.join(uri, p), uri) for p in t.scan().plan().paths)
        assert markers(uri) == []


def test_bucket_by_is_refused_with_the_way_to_bucket(spark, tmp_path):
    with pytest.raises(InvalidArgument, match="bucket\\(N, column\\)"):
        sdf(spark, rows(0, 5)).write.format("lamina").bucketBy(4, "id").save(str(tmp_path / "t"))
    assert not os.path.exists(tmp_path / "t")


# -- partitionBy --------------------------------------------------------------------------------

PARTITIONINGS = [["month"], ["day(ts)", "bucket(4, id)"], ["cat", "truncate(2, id)"]]


@pytest.mark.parametrize("mode", ["append", "errorifexists", "overwrite"])
@pytest.mark.parametrize("partition_by", PARTITIONINGS, ids=lambda p: "+".join(p))
def test_spark_partition_by_creates_the_table_partitioned(spark, tmp_path, partition_by, mode):
    """Spark's own partitionBy, columns or Lamina transforms, makes the table's partition spec:
    the spec ``create_table(partition_by=...)`` makes, files in its partitions."""
    uri = str(tmp_path / "t")
    sdf(spark, rows(0, 40)).write.format("lamina").mode(mode).partitionBy(*partition_by).save(uri)
    t = lamina.open_table(uri)
    want = lamina.create_table(str(tmp_path / "want"), SCHEMA, partition_by=partition_by).partition_spec
    assert t.partition_spec == want
    assert bag(t.to_arrow()) == bag(rows(0, 40))
    first = want.fields[0].name
    assert all(p.startswith(f"data/{first}=") for p in t.scan().plan().paths)


def test_spark_partition_by_matching_the_table_is_accepted_and_another_refused(spark, tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA, partition_by=["day(ts)", "bucket(4, id)"])
    df = sdf(spark, rows(0, 10))
    df.write.format("lamina").mode("append").partitionBy("day(ts)", "bucket(4, id)").save(uri)
    df.write.format("lamina").mode("append").save(uri)  # none given: the table's
    assert lamina.open_table(uri).version == 2
    before = data_files(uri)
    for other in (["day(ts)"], ["bucket(4, id)", "day(ts)"], ["month"], []):
        with pytest.raises(PartitionSpecMismatch, match="partitioned by \\['day\\(ts\\)', 'bucket\\(4, id\\)'\\]"):
            df.write.format("lamina").mode("append").partitionBy(*other).save(uri)
    with pytest.raises(PartitionSpecMismatch):
        df.write.format("lamina").mode("overwrite").partitionBy("month").save(uri)
    assert lamina.open_table(uri).version == 2 and data_files(uri) == before and markers(uri) == []
    assert t.refresh().to_arrow().num_rows == 20


def test_partition_by_given_twice_must_agree(spark, tmp_path):
    uri = str(tmp_path / "t")
    w = sdf(spark, rows(0, 5)).write.format("lamina").option("partitionBy", "month")
    with pytest.raises(InvalidArgument, match="give the partitioning once"):
        w.partitionBy("cat").save(uri)
    sdf(spark, rows(0, 5)).write.format("lamina").option("partitionBy", "month").partitionBy("month").save(uri)
    assert [f.name for f in lamina.open_table(uri).partition_spec.fields] == ["month"]


def test_lamina_write_partition_by_is_checked_as_the_table_spec_not_its_ids(spark, tmp_path):
    """``lamina.spark.write(partition_by=...)`` of a table whose spec evolved (spec id 1, not 0)
    is accepted when it names the same partitioning, refused (PartitionSpecMismatch) otherwise."""
    from lamina.spark import write

    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    t.update_spec().add_field("month").commit()
    assert t.partition_spec.spec_id == 1
    assert write(sdf(spark, rows(0, 10)), uri, partition_by=["month"]).version == 2
    with pytest.raises(PartitionSpecMismatch):
        write(sdf(spark, rows(0, 10)), uri, partition_by=["cat"])
    assert lamina.open_table(uri).version == 2


# -- saveAsTable ------------------------------------------------------------------------------------


def test_save_as_table_without_a_lamina_catalog_says_what_it_needs(spark, tmp_path):
    with pytest.raises(InvalidArgument, match="option\\('catalog'"):
        sdf(spark, rows(0, 5)).write.format("lamina").saveAsTable("orders")


# -- streaming -----------------------------------------------------------------------------------


def _stream(spark, tmp_path, n_files: int = 2):
    import pyarrow.parquet as pq

    inp = tmp_path / "in"
    inp.mkdir(exist_ok=True)
    for i in range(n_files):
        pq.write_table(rows(10 * i, 10 * i + 10), inp / f"part-{i}.parquet")
    schema = "id long, ts timestamp, cat string, month int"
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(inp))


def _run(q) -> None:
    assert q.awaitTermination(120)
    assert q.exception() is None


@pytest.mark.parametrize("partition_by", [["month"], ["day(ts)", "bucket(4, id)"]], ids=lambda p: "+".join(p))
def test_streaming_partition_by_creates_the_table_partitioned(spark, tmp_path, partition_by):
    uri = str(tmp_path / "t")
    w = (_stream(spark, tmp_path).writeStream.format("lamina").partitionBy(*partition_by).option("appId", "ingest")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True))
    _run(w.start(uri))
    t = lamina.open_table(uri)
    assert t.partition_spec == lamina.create_table(str(tmp_path / "want"), SCHEMA, partition_by=partition_by).partition_spec
    assert t.version == 2 and bag(t.to_arrow()) == bag(rows(0, 20))  # two batches, the second into the partitioned table


def _no_query_started(spark, fn, error, match):
    before = {q.id for q in spark.streams.active}
    try:
        with pytest.raises(error, match=match):
            fn()
    finally:
        started = [q for q in spark.streams.active if q.id not in before]
        for q in started:
            q.stop()
    assert not started


def test_streaming_configuration_errors_are_raised_by_start(spark, tmp_path):
    """Where the first micro-batch would fail the query, ``start()`` raises the typed error and
    starts nothing: no checkpoint (nor appId), a bad option value, a table that must exist (a branch's), a
    partitioning or schema other than the table's, complete output mode."""
    uri = str(tmp_path / "t")
    ck = str(tmp_path / "ck")

    def start(**opts):
        def go():
            w = _stream(spark, tmp_path).writeStream.format("lamina").option("checkpointLocation", ck)
            for k, v in opts.items():
                w = w.partitionBy(*v) if k == "partitionBy" else w.outputMode(v) if k == "outputMode" else w.option(k, v)
            w.start(uri)
        return go

    def no_checkpoint():  # the sink records batches under the query's id, kept in its checkpoint
        _stream(spark, tmp_path).writeStream.format("lamina").start(uri)

    _no_query_started(spark, no_checkpoint, InvalidArgument, "checkpointLocation")
    _no_query_started(spark, start(appId="a", mergeSchema="maybe"), InvalidArgument, "mergeSchema must be true or false")
    _no_query_started(spark, start(appId="a", branch="audit"), TableNotFound, "no branch 'audit' to write to")
    _no_query_started(spark, start(appId="a", outputMode="complete"), Exception, "append")
    lamina.create_table(uri, SCHEMA, partition_by=["cat"])
    _no_query_started(spark, start(appId="a", partitionBy=["month"]), PartitionSpecMismatch, "partitioned by \\['cat'\\]")
    lamina.create_table(str(tmp_path / "narrow"), pa.schema([("id", pa.int64())]))
    uri = str(tmp_path / "narrow")
    _no_query_started(spark, start(appId="a"), lamina.errors.SchemaMismatch, "cat")
    assert lamina.open_table(str(tmp_path / "t")).version == 0 and not os.path.exists(ck + "/commits/0")
