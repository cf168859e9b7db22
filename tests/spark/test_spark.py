"""Lamina from PySpark: fast read/write, the Python data source, streaming, failures.

All tests share one local[2] session (conftest ``spark``) on one xdist worker.
Expected results are computed with pyarrow/Lamina's core reader, never with the
code under test.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.errors import InvalidArgument, SchemaMismatch, TransactionAlreadyCommitted
from lamina.expr import bind, to_arrow_filter
from lamina.spec.layout import WRITES_DIR
from lamina.spec.transforms import apply_transform

from support.spark_results import bag, collect

pytestmark = pytest.mark.xdist_group("spark")

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
CATEGORIES = ["books", "games", "garden", "d e%f/é"]  # the last one needs escaping in directory names


def orders(n: int, seed: int = 0, start: int = 0) -> pa.Table:
    """Rows of many types, with nulls and NaN where they make pruning and filtering hard."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    amount = rng.normal(100, 30, n).round(2)
    amount[rng.random(n) < 0.03] = np.nan
    ts_us = (T0.timestamp() * 1e6 + rng.integers(0, 3 * 86_400_000_000, n)).astype(np.int64)
    cat = pa.array(np.array(CATEGORIES, dtype=object)[rng.integers(0, len(CATEGORIES), n)], pa.string())
    return pa.table(
        {
            "id": ids,
            "category": pc.if_else(pa.array(rng.random(n) < 0.05), pa.scalar(None, pa.string()), cat),
            "amount": pa.array(amount, mask=rng.random(n) < 0.03),
            "qty": pa.array(rng.integers(-5, 50, n).astype(np.int32)),
            "flag": pa.array(rng.random(n) < 0.5),
            "ts": pa.array(ts_us, pa.timestamp("us", "UTC"), mask=rng.random(n) < 0.02),
            "local_ts": pa.array(ts_us - 5 * 3_600_000_000, pa.timestamp("us")),
            "day": pa.array((ts_us // 86_400_000_000).astype(np.int32), pa.int32()).cast(pa.date32()),
            "price": pa.array([decimal.Decimal(int(x)).scaleb(-2) for x in rng.integers(0, 10**6, n)], pa.decimal128(10, 2)),
        }
    )


def sdf(spark, t: pa.Table):
    """A DataFrame of ``t`` with Spark types that round-trip (naive timestamps as TIMESTAMP_NTZ)."""
    from lamina.spark._types import spark_schema

    return spark.createDataFrame(t, schema=spark_schema(t.schema))


def all_entries(t: lamina.Table) -> pa.Table:
    """Every manifest column of the live data files (the planner reads only what a scan needs)."""
    from lamina.manifest.entries import manifest_schema_of
    from lamina.manifest.tree import live_data_entries

    return live_data_entries(t.io, t.metadata.root_manifest, manifest_schema_of(t.metadata), inline=t.metadata.root_inline)


def data_files(root) -> list[str]:
    out = []
    for d, _, names in os.walk(os.path.join(str(root), "data")):
        out += [os.path.join(d, n) for n in names]
    return sorted(out)


def markers(root) -> list[str]:
    p = os.path.join(str(root), WRITES_DIR)
    return os.listdir(p) if os.path.isdir(p) else []


@pytest.fixture(scope="module", autouse=True)
def local_cluster_run(request, tmp_path_factory):
    """Start the local-cluster run in the background if its test is selected (a new
    SparkContext needs a new process); the test waits for it."""
    import subprocess
    import sys

    names = {i.name for i in request.session.items}
    if not names & {"test_local_cluster_read_and_write", "test_local_cluster_s3_write_exactly_once"}:
        yield None
        return
    from support import spark_cluster

    script = spark_cluster.__file__
    work = tmp_path_factory.mktemp("local-cluster")
    endpoint = []
    if "test_local_cluster_s3_write_exactly_once" in names:  # the tests' S3 server, reached from its executors
        endpoint = [request.getfixturevalue("s3").endpoint]
    proc = subprocess.Popen([sys.executable, script, str(work), *endpoint], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    run = ClusterRun(proc)
    yield run
    if proc.poll() is None:
        proc.kill()
    proc.communicate()  # (also when it ended and no test read it: its pipes are closed here)


class ClusterRun:
    """The local-cluster process: its JSON result, read once, for every test that asks."""

    def __init__(self, proc) -> None:
        self.proc, self._result = proc, None

    def result(self) -> dict:
        import json

        if self._result is None:
            out, err = self.proc.communicate(timeout=600)
            assert self.proc.returncode == 0, err[-4000:]
            self._result = json.loads(out.strip().splitlines()[-1])
        return self._result


@pytest.fixture
def source(spark):
    data = orders(3000, seed=1)
    return data, sdf(spark, data)


# --- fast write + fast read --------------------------------------------------------------


def test_round_trip_unpartitioned(spark, source, tmp_path):
    from lamina.spark import read, write

    data, df = source
    uri = str(tmp_path / "t")
    assert write(df, uri).version == 1
    t = lamina.open_table(uri)
    assert t.version == 1 and t.metadata.summary["added-records"] == data.num_rows
    assert t.schema.names == data.column_names
    assert [f.type for f in t.schema] == [f.type for f in data.schema]
    # The core reader reads what Spark wrote, and Spark reads it back, both exactly.
    assert bag(t.scan().to_arrow()) == bag(data)
    assert bag(collect(read(spark, uri))) == bag(data)
    assert read(spark, uri).schema.simpleString() == (
        "struct<id:bigint,category:string,amount:double,qty:int,flag:boolean,ts:timestamp,"
        "local_ts:timestamp_ntz,day:date,price:decimal(10,2)>"
    )
    # Every file sits in this write's directory and nothing else is left behind (no .crc, _SUCCESS, marker).
    files = data_files(uri)
    assert files and all("/data/spark-" in f and f.endswith(".parquet") for f in files)
    assert markers(uri) == []
    # Statistics from the footers: bounds equal the data's, NaN leaves amount's bounds unknown.
    e = all_entries(t)
    assert pc.min(e.column(f"min_{t.metadata.schema.field_id('id')}")).as_py() == 0
    assert pc.max(e.column(f"max_{t.metadata.schema.field_id('id')}")).as_py() == data.num_rows - 1
    fid = t.metadata.schema.field_id("amount")
    for i, path in enumerate(e.column("path").to_pylist()):
        amount = pq.read_table(os.path.join(uri, path), columns=["amount"]).column(0)
        has_nan = pc.any(pc.is_nan(amount)).as_py()
        assert (e.column(f"min_{fid}")[i].as_py() is None) == bool(has_nan)
        assert e.column(f"nulls_{fid}")[i].as_py() == amount.null_count


def test_spark_reads_files_lamina_wrote_delta_encoded(spark, tmp_path):
    """A file Lamina's writer made of many rows stores its keys, timestamps and dates
    DELTA_BINARY_PACKED (write.parquet.integer-encoding): Spark's native reader (the fast
    read) and the data source give the same rows as the core reader."""
    from lamina.spark import read

    data = orders(20_000, seed=4)
    t = lamina.create_table(str(tmp_path / "t"), data.schema)
    t.append(data)
    (path,) = data_files(t.uri)
    meta = pq.read_metadata(path)
    delta = {meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns)
             if "DELTA_BINARY_PACKED" in meta.row_group(0).column(i).encodings}
    assert {"id", "ts", "local_ts"} <= delta
    assert bag(collect(read(spark, t.uri))) == bag(data)
    assert bag(collect(spark.read.format("lamina").load(t.uri))) == bag(data)


def test_every_spark_write_follows_the_write_properties(spark, tmp_path):
    """write(), the data source and merge write files with the table's codec and row limit
    (and, for the data source and merge's Lamina writer, the small-file rule: 0 turns it
    off); a new table's properties are checked before Spark writes anything."""
    from lamina.spark import merge, write

    uri = str(tmp_path / "t")
    props = {"write.parquet.compression": "GZIP", "write.max-rows-per-file": "7", "write.parquet.small-file-bytes": "0"}
    data = pa.table({"id": pa.array(range(40), pa.int64()), "v": pa.array([float(i) for i in range(40)])})

    def codecs_and_rows() -> tuple[set, int]:
        meta = [pq.read_metadata(f) for f in data_files(uri)]
        return {m.row_group(0).column(0).compression for m in meta}, max(m.num_rows for m in meta)

    write(sdf(spark, data.slice(0, 20)), uri, properties=props)
    assert codecs_and_rows() == ({"GZIP"}, 7)
    sdf(spark, data.slice(20, 10)).write.format("lamina").mode("append").save(uri)
    assert codecs_and_rows() == ({"GZIP"}, 7)
    merge(uri, sdf(spark, data.slice(30, 10))).when_not_matched_insert_all().execute()
    assert codecs_and_rows() == ({"GZIP"}, 7)
    assert sorted(lamina.open_table(uri).scan().to_arrow().column("id").to_pylist()) == list(range(40))

    other = str(tmp_path / "u")
    with pytest.raises(InvalidArgument, match=r"write.parquet.compression='lzo' \(give one of none, snappy"):
        write(sdf(spark, data), other, properties={"write.parquet.compression": "lzo"})
    assert not os.path.exists(other)


@pytest.mark.parametrize(
    "partition_by",
    [["category"], ["day(ts)", "bucket(8, id)"], ["month(local_ts)", "truncate(10, qty)", "bucket(3, category)"]],
)
def test_partitioned_write_matches_lamina_transforms(spark, tmp_path, partition_by):
    """Partition values computed by Spark equal Lamina's transforms row by row, in any session time zone."""
    from lamina.spark import read, write
    from lamina.spark.write import session_conf

    data = orders(800, seed=7)
    df = sdf(spark, data)
    uri = str(tmp_path / "t")
    with session_conf(spark, {"spark.sql.session.timeZone": "America/Los_Angeles"}):
        assert write(df, uri, partition_by=partition_by).version == 1
    t = lamina.open_table(uri)
    spec = t.partition_spec
    assert len(spec.fields) == len(partition_by)
    entries = all_entries(t)
    schema = t.metadata.schema
    for i, path in enumerate(entries.column("path").to_pylist()):
        rows = pq.read_table(os.path.join(uri, path))
        assert rows.column_names == data.column_names  # partition columns stay in the files
        for pf in spec.fields:
            src = schema.name_of(pf.source_id)
            want = apply_transform(pf.transform, rows.column(src), schema.field(src).type).unique()
            assert len(want) == 1, f"{path} spans partitions of {pf.name}"
            assert entries.column(f"pmin_{pf.field_id}")[i].as_py() == want[0].as_py()
    assert bag(t.scan().to_arrow()) == bag(data)
    assert bag(collect(read(spark, uri))) == bag(data)
    # Pruning by partition: an equality on the source column plans only that partition's files.
    if partition_by == ["category"]:
        plan = t.scan(where="category = 'd e%f/é'").plan()
        assert 0 < len(plan) < len(entries)
        got = collect(read(spark, uri, where="category = 'd e%f/é'"))
        assert bag(got) == bag(data.filter(pc.equal(data.column("category"), "d e%f/é")))


TRANSFORMS = [
    ("identity", "category"), ("identity", "ts"), ("identity", "price"), ("identity", "flag"),
    ("year", "ts"), ("month", "ts"), ("day", "ts"), ("hour", "ts"),
    ("year", "local_ts"), ("month", "local_ts"), ("day", "local_ts"), ("hour", "local_ts"),
    ("year", "day"), ("month", "day"), ("day", "day"),
    ("bucket[16]", "id"), ("bucket[7]", "category"), ("bucket[5]", "ts"), ("bucket[3]", "local_ts"),
    ("bucket[4]", "day"), ("bucket[6]", "price"), ("bucket[9]", "qty"),
    ("truncate[10]", "qty"), ("truncate[1000]", "id"), ("truncate[2]", "category"), ("truncate[50]", "price"),
]


def test_spark_partition_columns_equal_lamina_transforms(spark):
    """Every transform computed by Spark expressions (or the bucket UDF) equals Lamina's, value by
    value, including pre-1970 instants, nulls and a session time zone far from UTC."""
    from lamina.spark.write import partition_column, session_conf
    from lamina.spec.partition import PartitionField
    from lamina.spec.schema import Schema

    data = orders(400, seed=11)
    # Instants around the epoch and day boundaries, where floor vs truncation differ.
    edge = pa.array([-86_400_000_001, -1, 0, 86_399_999_999, -3_600_000_000, None] * 2, pa.timestamp("us", "UTC"))
    data = data.set_column(5, "ts", pa.concat_arrays([data.column("ts").combine_chunks()[: -len(edge)], edge]))
    # Integers whose truncation lies below their type's range (the lowest truncation instead).
    for name, low in (("id", -(2**63)), ("qty", -(2**31))):
        col = data.column(name).combine_chunks()
        low_end = pa.array([low, low + 7], col.type)
        data = data.set_column(data.column_names.index(name), name, pa.concat_arrays([low_end, col[2:]]))
    schema = Schema.from_arrow(data.schema)
    fields = [PartitionField(schema.field_id(c), 1000 + i, f"p{i}", tr) for i, (tr, c) in enumerate(TRANSFORMS)]
    with session_conf(spark, {"spark.sql.session.timeZone": "Pacific/Kiritimati"}):
        got = collect(sdf(spark, data).select(*[partition_column(pf, schema).alias(pf.name) for pf in fields]))
    for pf, (tr, c) in zip(fields, TRANSFORMS):
        want = apply_transform(tr, data.column(c), schema.field(c).type)
        have = got.column(pf.name).cast(want.type)
        assert have.to_pylist() == want.to_pylist(), f"{tr}({c})"


def test_append_versions_and_time_travel(spark, source, tmp_path):
    from lamina.spark import read, write

    data, df = source
    uri = str(tmp_path / "t")
    assert write(df, uri, partition_by=["day(ts)"]).version == 1
    stamp_v1 = lamina.open_table(uri).metadata.timestamp_ms
    more = orders(500, seed=2, start=10_000)
    assert write(sdf(spark, more), uri).version == 2
    everything = pa.concat_tables([data, more])
    assert bag(collect(read(spark, uri))) == bag(everything)
    assert bag(collect(read(spark, uri, version=1))) == bag(data)
    assert bag(collect(read(spark, uri, timestamp=stamp_v1))) == bag(data)
    assert collect(read(spark, uri, version=0)).num_rows == 0
    # The data source: versionAsOf, timestampAsOf (ISO and epoch ms), latest.
    load = lambda **o: spark.read.format("lamina").options(**o).load(uri)  # noqa: E731
    assert bag(collect(load(versionAsOf="1"))) == bag(data)
    iso = dt.datetime.fromtimestamp(stamp_v1 / 1000, dt.timezone.utc).isoformat()
    assert bag(collect(load(timestampAsOf=iso))) == bag(data)
    assert bag(collect(load(timestampAsOf=str(stamp_v1)))) == bag(data)
    assert bag(collect(load())) == bag(everything)
    with pytest.raises(Exception, match="version 7"):
        load(versionAsOf="7").count()


def test_tag_option_reads_the_tagged_version(spark, source, tmp_path):
    from lamina.spark import read, write

    data, df = source
    uri = str(tmp_path / "t")
    write(df, uri)
    lamina.open_table(uri).tags.create("release", 1)
    write(sdf(spark, orders(100, seed=3, start=10_000)), uri)
    assert bag(collect(read(spark, uri, tag="release"))) == bag(data)
    assert bag(collect(read(spark, uri, version="release"))) == bag(data)
    assert bag(collect(spark.read.format("lamina").option("tag", "release").load(uri))) == bag(data)
    assert bag(collect(spark.read.format("lamina").option("versionAsOf", "release").load(uri))) == bag(data)
    assert read(spark, uri).count() == data.num_rows + 100
    with pytest.raises(Exception, match="nope"):
        spark.read.format("lamina").option("tag", "nope").load(uri).count()


def test_overwrite_where_and_full_overwrite(spark, source, tmp_path):
    from lamina.spark import read, write

    data, df = source
    uri = str(tmp_path / "t")
    write(df, uri, partition_by=["day(ts)"])
    day2 = "ts >= TIMESTAMP '2026-01-02 00:00:00' AND ts < TIMESTAMP '2026-01-03 00:00:00'"
    pred = bind(day2, lamina.open_table(uri).metadata.schema)
    fresh = orders(200, seed=9, start=50_000)
    fresh = fresh.filter(to_arrow_filter(pred))
    assert write(sdf(spark, fresh), uri, "overwrite", where=day2).version == 2
    keep = data.filter(~to_arrow_filter(pred) | pc.field("ts").is_null())  # SQL: NULL ts is not in the range
    assert bag(collect(read(spark, uri))) == bag(pa.concat_tables([keep, fresh]))
    # A row outside the predicate rejects the whole write; the table does not move.
    before = data_files(uri)
    with pytest.raises(InvalidArgument, match="not matching"):
        write(sdf(spark, orders(50, seed=3)), uri, "overwrite", where=day2)
    assert lamina.open_table(uri).version == 2 and data_files(uri) == before and markers(uri) == []
    # Full overwrite.
    assert write(sdf(spark, fresh), uri, "overwrite").version == 3
    assert bag(collect(read(spark, uri))) == bag(fresh)


def test_empty_table_and_empty_dataframe(spark, tmp_path):
    from lamina.spark import read, write

    uri = str(tmp_path / "t")
    schema = orders(1).schema
    lamina.create_table(uri, schema, partition_by=["day(ts)"])
    df = read(spark, uri)
    assert df.count() == 0 and df.columns == schema.names
    assert spark.read.format("lamina").load(uri).count() == 0
    # An empty DataFrame still commits a version (it may carry a streaming batch id), with no files.
    empty = sdf(spark, orders(0))
    assert write(empty, uri).version == 1
    assert lamina.open_table(uri).metadata.summary["added-files"] == 0 and data_files(uri) == []


# --- filters: pruning and exact results --------------------------------------------------------

PREDICATES = [
    "id >= 100 AND id < 250",
    "category = 'games'",
    "category IN ('books', 'garden') AND qty > 10",
    "category IS NULL",
    "amount > 120",
    "amount <= 80 OR flag = true",
    "amount != 100",
    "ts >= TIMESTAMP '2026-01-02 06:00:00' AND ts < TIMESTAMP '2026-01-02 07:30:00'",
    "ts IS NULL",
    "local_ts < TIMESTAMP '2026-01-01 03:00:00'",
    "day = DATE '2026-01-03'",
    "price >= 5000.50",
    "qty NOT IN (1, 2, 3) AND NOT flag",
]


@pytest.fixture
def filter_table(spark, source, tmp_path_factory):
    from lamina.spark import write

    data, df = source
    uri = str(tmp_path_factory.mktemp("filters") / "t")
    # Small files so that pruning has something to prune.
    write(df.repartition(4), uri, partition_by=["day(ts)"], properties={"write.max-rows-per-file": "200"})
    return data, uri


@pytest.mark.parametrize("predicate", PREDICATES)
def test_fast_read_filters_are_exact(spark, filter_table, predicate):
    from lamina.spark import read

    data, uri = filter_table
    t = lamina.open_table(uri)
    want = data.filter(to_arrow_filter(bind(predicate, t.metadata.schema)))
    df = read(spark, uri, where=predicate)
    assert bag(collect(df)) == bag(want)
    assert collect(read(spark, uri, where=predicate, columns=["id"])).column_names == ["id"]


@pytest.mark.parametrize(
    "spark_filter",
    [
        "id >= 100 AND id < 250",
        "category = 'games' AND qty > 10",
        "category IN ('books', 'garden', NULL)",
        "NOT (category IN ('books', NULL))",
        "amount > 120",
        "amount >= 120 OR amount < 60",
        "NOT (amount < 100)",
        "amount = 'NaN'",
        "amount <=> NULL",
        "NOT (qty <=> 3)",
        "ts >= TIMESTAMP '2026-01-02 06:00:00+00:00' AND ts < TIMESTAMP '2026-01-02 07:30:00+00:00'",
        "local_ts < TIMESTAMP_NTZ '2026-01-01 03:00:00'",
        "day = DATE '2026-01-03' AND flag",
        "price >= 5000.50",
        "category LIKE 'ga%'",
    ],
)
def test_data_source_filters_match_spark(spark, filter_table, spark_filter):
    """Spark SQL over format("lamina") (filters evaluated by Spark: the source takes none, see
    test_spark_reuse) returns exactly what Spark returns over the same rows from a plain
    DataFrame, NaN and NULL included."""
    from lamina.spark.write import session_conf

    data, uri = filter_table
    with session_conf(spark, {"spark.sql.session.timeZone": "Asia/Kolkata"}):
        got = collect(spark.read.format("lamina").load(uri).where(spark_filter))
        want = collect(sdf(spark, data).where(spark_filter))
    assert bag(got) == bag(want)


NAN_PREDICATES = [  # (Lamina's where, the same in Spark SQL)
    ("x > 5", "x > 5"),
    ("x != 1", "x != 1"),
    ("x = 'NaN'", "x = CAST('NaN' AS DOUBLE)"),
    ("x NOT IN (1, 2)", "x NOT IN (1, 2)"),
    ("x IN (1, 'NaN') OR x < -1", "x IN (1, CAST('NaN' AS DOUBLE)) OR x < -1"),
]


@pytest.fixture(scope="module")
def nan_table(tmp_path_factory):
    """Written by Lamina's own (Arrow) writer, files mixing 1.0 and NaN: Parquet's min/max of such
    a row group say 1.0..1.0, since Parquet leaves NaN out of them."""
    nan = float("nan")
    data = pa.table({"id": pa.array(range(9), pa.int64()), "x": [1.0, nan, 1.0, 2.0, nan, 1e308, -0.0, None, -2.0]})
    uri = str(tmp_path_factory.mktemp("nan") / "t")
    t = lamina.create_table(uri, data.schema)
    t.append(data.slice(0, 3))
    t.append(data.slice(3))
    return data, uri


@pytest.mark.parametrize("where,spark_sql", NAN_PREDICATES)
def test_every_read_keeps_the_nan_rows_spark_selects(spark, nan_table, where, spark_sql):
    """Lamina orders NaN as Spark does, and no reader may skip a row group whose only matches
    are NaN: Lamina's where through Spark's Parquet reader, a Spark filter of the user's own over
    Lamina's files, filters pushed into format("lamina"), and Lamina's scan all return what Spark
    selects from the same rows in memory."""
    from lamina.spark import read

    data, uri = nan_table
    want = bag(collect(sdf(spark, data).where(spark_sql)))
    assert any(x == "NaN" for (_, x) in want)  # bag() spells NaN so; every predicate here selects NaN rows
    assert bag(collect(read(spark, uri, where=where))) == want
    assert bag(collect(read(spark, uri).where(spark_sql))) == want
    assert bag(collect(spark.read.format("lamina").load(uri).where(spark_sql))) == want
    assert bag(lamina.open_table(uri).scan(where=where).to_arrow()) == want


def test_data_source_partitions_are_balanced(spark, filter_table):
    from lamina.spark.datasource import LaminaDataSource

    _, uri = filter_table
    t = lamina.open_table(uri)
    entries = t.scan().plan().entries
    size = dict(zip(entries.column("path").to_pylist(), entries.column("size").to_pylist()))
    source = LaminaDataSource({"path": uri, "numPartitions": "3"})
    parts = source.reader(source.schema()).partitions()
    assert len(parts) == 3
    loads = [sum(size[p] for p, _ in part.files) for part in parts]
    assert sorted(p for part in parts for p, _ in part.files) == sorted(size)
    assert max(loads) - min(loads) <= max(size.values())


# --- the Python data source: writes, SQL, S3 --------------------------------------------------


def test_data_source_write_append_overwrite_and_sql_view(spark, source, tmp_path):
    data, df = source
    uri = str(tmp_path / "t")
    df.write.format("lamina").option("partitionBy", "bucket(4, id), category").mode("append").save(uri)
    t = lamina.open_table(uri)
    assert t.version == 1 and [f.name for f in t.partition_spec.fields] == ["id_bucket_4", "category"]
    assert bag(t.scan().to_arrow()) == bag(data)
    assert all(os.path.basename(f).startswith(tuple("0123456789abcdef")) for f in data_files(uri))
    assert markers(uri) == []

    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW orders_v USING lamina OPTIONS (path '{uri}')")
    assert spark.sql("SELECT count(*) AS n FROM orders_v WHERE category = 'games'").collect()[0].n == \
        pc.sum(pc.equal(data.column("category"), "games")).as_py()
    extra = orders(40, seed=5, start=90_000)
    sdf(spark, extra).createOrReplaceTempView("extra_rows")
    spark.sql("INSERT INTO orders_v SELECT * FROM extra_rows")
    t = lamina.open_table(uri)
    assert t.version == 2 and bag(t.scan().to_arrow()) == bag(pa.concat_tables([data, extra]))
    spark.sql("INSERT OVERWRITE orders_v SELECT * FROM extra_rows")
    assert bag(lamina.open_table(uri).scan().to_arrow()) == bag(extra)

    day1 = "ts >= '2026-01-01T00:00:00+00:00' AND ts < '2026-01-02T00:00:00+00:00'"
    only_day1 = extra.filter(to_arrow_filter(bind(day1, t.metadata.schema)))
    sdf(spark, only_day1).write.format("lamina").mode("overwrite").option("replaceWhere", day1).save(uri)
    rest = extra.filter(~to_arrow_filter(bind(day1, t.metadata.schema)) | pc.field("ts").is_null())
    assert bag(lamina.open_table(uri).scan().to_arrow()) == bag(pa.concat_tables([rest, only_day1]))


def test_data_source_idempotent_batch_write(spark, source, tmp_path):
    data, df = source
    uri = str(tmp_path / "t")
    w = lambda: df.write.format("lamina").mode("append").option("txnAppId", "etl").option("txnVersion", "4").save(uri)  # noqa: E731
    w()
    w()  # a retried job: skipped, files removed
    t = lamina.open_table(uri)
    assert t.version == 1 and t.metadata.app_transactions == {"etl": 4}
    assert bag(t.scan().to_arrow()) == bag(data)
    assert len(data_files(uri)) == len(t.scan().plan())


def test_s3_table_through_the_python_data_source(spark, source, monkeypatch):
    """Without Hadoop's S3A connector, ``write`` and ``read`` of an s3:// table go through the
    Python data source (Lamina's files, Lamina's FileIO in the Python workers). The suite's
    session has S3A when `make s3a-jars` fetched it, and a class path is fixed when the JVM
    starts: the session is made to look as one without it."""
    from support.s3server import S3Server

    import lamina.spark.s3a
    from lamina.spark import read, write

    monkeypatch.setattr(lamina.spark.s3a, "s3a_available", lambda spark: False)
    data, df = source
    server = S3Server()
    try:
        server.create_bucket("spark")
        uri, opts = "s3://spark/orders", server.storage_options
        assert write(df, uri, partition_by=["day(ts)"], storage_options=opts).version == 1
        t = lamina.open_table(uri, storage_options=opts)
        assert bag(t.scan().to_arrow()) == bag(data)
        assert all(p.startswith("data/ts_day=") for p in t.scan().plan().paths)
        got = read(spark, uri, where="category = 'games' AND qty >= 10", storage_options=opts)
        assert bag(collect(got)) == bag(t.scan(where="category = 'games' AND qty >= 10").to_arrow())
        assert read(spark, uri, version=0, storage_options=opts).count() == 0
        keys = server.client().list_objects_v2(Bucket="spark", Prefix="orders/_lamina/writes/").get("KeyCount")
        assert keys == 0
    finally:
        server.stop()


# --- failures, concurrency -------------------------------------------------------------------


def _failing(df, bad_id: int):
    from pyspark.sql import functions as F

    @F.udf("long")
    def check(x):
        if x == bad_id:
            raise ValueError(f"poisoned row {x}")
        return x

    return df.withColumn("id", check("id"))


def test_failed_job_leaves_table_unchanged(spark, source, tmp_path):
    from lamina.spark import write

    data, df = source
    uri = str(tmp_path / "t")
    write(df, uri, partition_by=["day(ts)"])
    before_files, before = data_files(uri), lamina.open_table(uri)
    poisoned = _failing(sdf(spark, orders(2000, seed=4, start=100_000)), 101_500)
    with pytest.raises(Exception, match="poisoned row"):
        write(poisoned, uri)
    with pytest.raises(Exception, match="poisoned row"):
        poisoned.write.format("lamina").mode("append").save(uri)
    after = lamina.open_table(uri)
    assert after.version == before.version == 1
    assert bag(after.scan().to_arrow()) == bag(data)
    assert data_files(uri) == before_files, "uncommitted files were left behind"
    assert markers(uri) == []


def test_schema_mismatch_fails_before_writing(spark, tmp_path):
    from pyspark.sql import functions as F

    from lamina.spark import write

    uri = str(tmp_path / "t")
    lamina.create_table(uri, pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string()), ("score", pa.float64())]))
    base = spark.range(5).select(F.col("id"), F.col("id").cast("string").alias("name"))
    for bad, msg in [
        (base.withColumn("extra", F.lit(1)), "extra column 'extra'"),
        (base.withColumn("score", F.lit("x")), "column 'score' is string"),
        (base.select(F.col("id").cast("string").alias("id"), "name"), "column 'id' is string"),
        (base.withColumnRenamed("name", "NAME"), "differs in case"),
    ]:
        with pytest.raises(SchemaMismatch, match=msg):
            write(bad, uri)
        with pytest.raises(Exception, match="SchemaMismatch|does not fit"):
            bad.write.format("lamina").mode("append").save(uri)
    # Nulls in a required column are caught while writing; nothing is committed.
    with pytest.raises(SchemaMismatch, match="required column 'id'"):
        write(base.withColumn("id", F.when(F.col("id") == 3, None).otherwise(F.col("id"))), uri)
    assert lamina.open_table(uri).version == 0 and data_files(uri) == [] and markers(uri) == []
    # Safe widening is fine: int -> bigint, float -> double, missing nullable column -> null.
    ok = spark.range(3).select(F.col("id").cast("int").alias("id"), F.lit(1.5).cast("float").alias("score"))
    assert write(ok, uri).version == 1
    got = lamina.open_table(uri).scan().to_arrow()
    assert got.column("name").null_count == 3 and got.column("score").to_pylist() == [1.5] * 3


def test_concurrent_spark_and_python_appends_both_land(spark, tmp_path):
    """Each Spark task commits a Python append mid-job; the Spark write then rebases onto them."""
    from lamina.spark import write

    uri = str(tmp_path / "t")
    lamina.create_table(uri, pa.schema([("id", pa.int64()), ("src", pa.string())]))

    def side_append(batches):
        import lamina as lm

        first = True
        for b in batches:
            if first:
                start = int(b.column(0)[0].as_py()) * 1000 + 10**6
                lm.open_table(uri).append(pa.table({"id": pa.array(range(start, start + 7), pa.int64()), "src": ["python"] * 7}))
                first = False
            yield pa.RecordBatch.from_arrays([b.column(0), pa.array(["spark"] * b.num_rows)], names=["id", "src"])

    df = spark.range(0, 1000, numPartitions=2).mapInArrow(side_append, "id long, src string")
    v = write(df, uri).version
    t = lamina.open_table(uri)
    assert v == t.version == 3  # two Python appends from inside the job, then the Spark commit
    counts = collections.Counter(t.scan().to_arrow().column("src").to_pylist())
    assert counts == {"spark": 1000, "python": 14}
    assert [h["operation"] for h in t.history()][:3] == ["append"] * 3


# --- streaming ------------------------------------------------------------------------------


def _stream_inputs(tmp_path, n_files: int, start: int = 0) -> pa.Table:
    inp = tmp_path / "in"
    inp.mkdir(exist_ok=True)
    parts = []
    for i in range(start, start + n_files):
        part = orders(100, seed=100 + i, start=i * 1000).select(["id", "category", "ts"])
        pq.write_table(part, inp / f"part-{i:03d}.parquet")
        parts.append(part)
    return pa.concat_tables(parts)


def _run_stream(spark, tmp_path, sink):
    schema = "id long, category string, ts timestamp"
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
    q = sink(stream.writeStream.option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)).start()
    assert q.awaitTermination(120)
    assert q.exception() is None


def _forget_last_commit(tmp_path) -> int:
    """Make the checkpoint look as if the query died after the table commit of its last batch
    but before Spark recorded that batch as done: a restart then replays it."""
    commits = tmp_path / "ck" / "commits"
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    os.remove(commits / str(last))
    if (commits / f".{last}.crc").exists():  # Hadoop's checksum side file would block rewriting it
        os.remove(commits / f".{last}.crc")
    return last


def _query_id(tmp_path) -> str:
    """The id Spark keeps in the checkpoint for the query (StreamingQuery.id, stable across restarts)."""
    import json

    return json.loads((tmp_path / "ck" / "metadata").read_text())["id"]


@pytest.mark.parametrize("sink_kind", ["foreach_batch", "foreach_batch_query_id", "data_source", "data_source_query_id"])
def test_streaming_restart_never_duplicates(spark, tmp_path, sink_kind):
    """A restart after a crash between a batch's table commit and the checkpoint's commit log
    replays that batch: it is skipped. The ``*_query_id`` sinks are given no id (Delta's way):
    the batches are recorded under the query's own id, from its checkpoint."""
    from lamina.spark import foreach_batch_writer

    uri = str(tmp_path / "t")
    if sink_kind.startswith("foreach_batch"):
        fn = foreach_batch_writer(uri, app_id="orders-stream") if sink_kind == "foreach_batch" else foreach_batch_writer(uri)
        sink = lambda w: w.foreachBatch(fn)  # noqa: E731
    else:
        sink = lambda w: w.format("lamina").option("path", uri)  # noqa: E731
        if sink_kind == "data_source":
            sink = lambda w: w.format("lamina").option("path", uri).option("appId", "orders-stream")  # noqa: E731
        lamina.create_table(uri, pa.schema([("id", pa.int64()), ("category", pa.string()), ("ts", pa.timestamp("us", "UTC"))]))
    first = _stream_inputs(tmp_path, 3)
    _run_stream(spark, tmp_path, sink)
    app = "orders-stream" if sink_kind in ("foreach_batch", "data_source") else _query_id(tmp_path)
    t = lamina.open_table(uri)
    assert t.metadata.app_transactions == {app: 2}
    assert bag(t.scan().to_arrow()) == bag(first)
    v_before = t.version

    replayed = _forget_last_commit(tmp_path)
    assert replayed == 2
    _run_stream(spark, tmp_path, sink)  # replays batch 2: skipped, no new version
    t = lamina.open_table(uri)
    assert t.version == v_before and bag(t.scan().to_arrow()) == bag(first)

    second = _stream_inputs(tmp_path, 2, start=3)
    _run_stream(spark, tmp_path, sink)
    t = lamina.open_table(uri)
    assert t.metadata.app_transactions == {app: 4} and t.version == v_before + 2
    assert bag(t.scan().to_arrow()) == bag(pa.concat_tables([first, second]))
    assert markers(uri) == [] and len(data_files(uri)) == len(t.scan().plan())


def test_streaming_sink_needs_a_checkpoint_or_an_app_id(spark, tmp_path):
    stream = spark.readStream.format("rate").load()
    with pytest.raises(InvalidArgument, match="checkpointLocation"):  # Spark's memory of the query is its checkpoint
        stream.writeStream.format("lamina").start(str(tmp_path / "t"))
    with pytest.raises(InvalidArgument, match="appId"):  # a checkpoint Lamina cannot read the query's id from
        stream.writeStream.format("lamina").option("checkpointLocation", "hdfs://nn/ck").start(str(tmp_path / "t"))


def test_foreach_batch_merge_is_exactly_once_across_restarts(spark, tmp_path):
    """The upsert pattern: each micro-batch merged by lamina.spark.merge. The clause adds the
    batch's quantities to the table's, so a batch applied twice would show; a restart after a
    crash between the merge's commit and the checkpoint's replays the batch, which is skipped."""
    from lamina.spark import foreach_batch_merge

    uri = str(tmp_path / "t")
    lamina.create_table(uri, pa.schema([("id", pa.int64()), ("qty", pa.int64())]))
    inp = tmp_path / "in"
    inp.mkdir()

    def add_batch(i: int) -> None:  # ten ids, one of each per file
        pq.write_table(pa.table({"id": pa.array(range(10), pa.int64()), "qty": pa.array([1] * 10, pa.int64())}),
                       inp / f"part-{i:03d}.parquet")

    merge_batch = foreach_batch_merge(uri, on="id", clauses=lambda m: m.when_matched_update(
        {"qty": "target.qty + source.qty"}).when_not_matched_insert_all())

    def run() -> None:
        stream = spark.readStream.schema("id long, qty long").option("maxFilesPerTrigger", 1).parquet(str(inp))
        q = stream.writeStream.foreachBatch(merge_batch).option("checkpointLocation", str(tmp_path / "ck")) \
            .trigger(availableNow=True).start()
        assert q.awaitTermination(120) and q.exception() is None

    def quantities() -> set[int]:
        return set(lamina.open_table(uri).to_arrow().column("qty").to_pylist())

    for i in range(3):
        add_batch(i)
    run()
    t = lamina.open_table(uri)
    assert quantities() == {3} and t.metadata.app_transactions == {_query_id(tmp_path): 2}
    version = t.version
    assert _forget_last_commit(tmp_path) == 2
    run()  # batch 2 again: already in the table, skipped
    assert quantities() == {3} and lamina.open_table(uri).version == version
    add_batch(3)
    run()
    t = lamina.open_table(uri)
    assert quantities() == {4} and t.version == version + 1 and t.metadata.app_transactions == {_query_id(tmp_path): 3}
    assert t.scan().count() == 10
    # Outside a streaming query there is no query id: the app id must be given.
    with pytest.raises(InvalidArgument, match="app_id"):
        merge_batch(spark.range(1).selectExpr("id", "id AS qty"), 9)


def test_foreach_batch_writer_skips_committed_batch_directly(spark, tmp_path):
    from lamina.spark import foreach_batch_writer

    uri = str(tmp_path / "t")
    fn = foreach_batch_writer(uri, app_id="q1")
    df = sdf(spark, orders(20).select(["id", "ts"]))
    assert fn(df, 0).version == 1
    assert fn(df, 0).version is None and fn(df, 0).version is None
    assert fn(df, 1).version == 2
    t = lamina.open_table(uri)
    assert t.scan().count() == 40 and t.metadata.app_transactions == {"q1": 1}
    with pytest.raises(TransactionAlreadyCommitted):
        t.append(orders(1).select(["id", "ts"]), app_transaction=("q1", 1))


# --- deletion-vector hook -------------------------------------------------------------------


def test_deleted_rows_are_removed_by_file_path_and_row_index(spark, tmp_path):
    """The anti-join the reader applies to files with deletion vectors removes exactly the
    listed positions, keyed by the path Spark reports, also for directories needing escapes."""
    from lamina.spark.read import _native_parquet, apply_deletes, spark_file_path
    from lamina.spark._types import spark_schema

    root = tmp_path / "odd dir %25 é"
    files = []
    for i, sub in enumerate(["a=x y", "a=50%", "a=é/b=(1)"]):
        d = root / sub
        d.mkdir(parents=True)
        part = orders(100, seed=i, start=i * 100).select(["id", "qty"])
        pq.write_table(part, d / f"f{i}.parquet", row_group_size=30)
        files.append((f"file://{d / f'f{i}.parquet'}", part))
    schema = spark_schema(files[0][1].schema)
    df = _native_parquet(spark, schema, [u for u, _ in files])
    reported = {r.p for r in df.select(df["_metadata.file_path"].alias("p")).distinct().collect()}
    assert reported == {spark_file_path(u) for u, _ in files}
    deletes = pa.table({
        "file_path": [spark_file_path(files[0][0])] * 3 + [spark_file_path(files[2][0])] * 2,
        "row_index": pa.array([0, 31, 99, 5, 64], pa.int64()),
    })
    got = collect(apply_deletes(df, spark.createDataFrame(deletes)))
    gone = {0, 31, 99, 205, 264}
    want = pa.concat_tables([p for _, p in files])
    assert bag(got) == bag(want.filter(pc.invert(pc.is_in(want.column("id"), pa.array(sorted(gone), pa.int64())))))


def test_deletion_vectors_are_applied_by_both_readers(spark, tmp_path):
    from lamina.spark import read, write

    uri = str(tmp_path / "t")
    data = orders(2000, seed=12)
    write(sdf(spark, data), uri, partition_by=["day(ts)"])
    t = lamina.open_table(uri)
    assert t.delete("qty < 10", mode="merge-on-read").version is not None
    t = lamina.open_table(uri)
    entries = t.scan().plan().entries
    assert 0 < entries.num_rows - entries.column("dv_path").null_count, "the delete wrote no deletion vector"
    want = data.filter(pc.field("qty") >= 10)
    assert bag(collect(read(spark, uri))) == bag(want) == bag(t.scan().to_arrow())
    games = want.filter(pc.field("category") == "games")
    assert bag(collect(read(spark, uri, where="category = 'games'"))) == bag(games)
    assert bag(collect(spark.read.format("lamina").load(uri))) == bag(want)
    assert bag(collect(spark.read.format("lamina").load(uri).where("category = 'games'"))) == bag(games)
    assert bag(collect(read(spark, uri, version=1))) == bag(data)


# --- distributed: executors in separate processes ------------------------------------------------


def test_local_cluster_read_and_write(local_cluster_run):
    """tests/support/spark_cluster.py with master local-cluster[2,1,1024] (its own SparkContext, so its own
    process; started when this module starts so it overlaps with the tests above)."""
    result = local_cluster_run.result()
    assert result["executor_pids"] == 2, result
    assert result["fast_write_version"] == 1 and result["fast_read_rows"] == result["rows"]
    assert result["filtered_rows"] == result["expected_filtered_rows"]
    assert result["ds_write_version"] == 2 and result["ds_read_rows"] == 2 * result["rows"]
    assert result["core_rows"] == 2 * result["rows"]
    c = result["compact"]  # lamina.spark.compact with tasks in the executors
    assert c["version"] == 3 and c["rows"] == 2 * result["rows"]
    assert c["files_before"] == c["before"] and c["after"] < c["before"] and c["groups"] >= 1
    assert result["cdf_rows"] == [["insert", 2 * result["rows"]]]  # versions 1-3: two appends, a compaction
    s = result["stream"]  # the table's snapshot (maxFilesPerTrigger 2), then an append, each row once
    assert result["stream_errors"] == [None, None]
    assert s["rows"] == s["source_rows"] == 2 * result["rows"] + 1000 and s["distinct_ids_match"]
    assert s["batches"] == -(-c["after"] // 2) + 1


def test_local_cluster_s3_write_exactly_once(local_cluster_run, s3):
    """On the same cluster, an s3:// table written by Spark's own writer (S3A) while the first
    attempt of a task leaves a file and dies with its executor: the retried task's files are
    committed once, in one version, each row exactly once, and nothing the dead attempt wrote
    is referenced or left (tests/support/spark_cluster.py, ``s3_exactly_once``)."""
    r = local_cluster_run.result()["s3"]
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert r["dead_executors"] >= 1, r  # the attempt did die with its executor
    assert r["version"] == 1 and r["exact"] and r["rows"] == r["distinct"] == r["expected"], r
    assert r["files"] >= 20 and r["unreferenced"] == [] and r["markers"] == [], r


def test_system_tables_as_dataframes(spark, source, tmp_path):
    from lamina.spark import system_table, write

    data, df = source
    uri = str(tmp_path / "t")
    write(df, uri)
    write(df.limit(5), uri)
    lamina.open_table(uri).tags.create("first", 1)
    snaps = system_table(spark, uri, "$snapshots").orderBy("version").collect()
    assert [r.version for r in snaps] == [0, 1, 2] and snaps[2].operation in ("append", "add-files")
    tags = system_table(spark, uri, "$tags").collect()
    assert [(r.tag_name, r.tagged_version, r.record_count) for r in tags] == [("first", 1, data.num_rows)]
    files = system_table(spark, uri, "$files", tag="first")
    assert files.agg({"record_count": "sum"}).collect()[0][0] == data.num_rows
    assert system_table(spark, uri, "$manifests").count() >= 1
