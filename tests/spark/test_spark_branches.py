"""Branches from Spark: the ``branch`` option of every entry point.

Reads with ``branch`` must hold what ``lamina.open_table(uri, version=<branch>)`` holds (at the
branch's own version numbers, which overlap main's: every table here has a main version of
the same number with other rows); writes with ``branch`` must land in the branch's log and
leave main exactly as it was (same version, same rows). Expected rows are built with
pyarrow from the rows written, never by the code under test.
"""

from __future__ import annotations

import os
import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable

import lamina
from lamina.errors import BranchNotFound, InvalidArgument, InvalidBranchName, TableNotFound
from lamina.spark import compact as spark_compact
from lamina.spark import delete as spark_delete
from lamina.spark import foreach_batch_writer
from lamina.spark import merge as spark_merge
from lamina.spark import read as spark_read
from lamina.spark import read_changes as spark_read_changes
from lamina.spark import system_table as spark_system_table
from lamina.spark import write as spark_write
from lamina.spark.datasource import LaminaDataSource

from support.spark_results import bag, collect

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def rows(ids, tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def sdf(spark, t: pa.Table):
    return spark.createDataFrame(t.to_pandas(), schema="id bigint, v string")


def state(uri: str, branch: str | None = None) -> tuple[int, pa.Table]:
    t = lamina.open_table(uri, version=branch)
    return t.version, t.to_arrow()


def data_files(root: str) -> set[str]:
    out = set()
    for d, _, names in os.walk(os.path.join(root, "data")):
        out.update(os.path.relpath(os.path.join(d, n), root) for n in names)
    return out


def branched(tmp_path, name: str = "t") -> str:
    """A table whose main is at version 3 (ids 0-19, then 100-109 appended after the branch) and
    branch ``audit`` made from main's version 2 (ids 0-19): the branch's next version is 3, a
    number main already holds with other rows."""
    uri = str(tmp_path / name)
    t = lamina.create_table(uri, SCHEMA)
    t.append(rows(range(20), "m"))            # main v1
    t.branches.create("audit")                   # main v2 (enable-branches); the branch's base is v2
    t.append(rows(range(100, 110), "m"))       # main v3
    assert t.version == 3 and t.branch("audit").version == 2
    return uri


# --- reads and writes: lamina.spark.read / write (native Parquet) and format("lamina") ------------


def test_write_and_read_a_branch_leaves_main_untouched(spark, tmp_path):
    uri = branched(tmp_path)
    main_before = state(uri)
    # append to the branch (native writer): the branch's version 3, not main's
    assert spark_write(sdf(spark, rows(range(20, 30), "b")), uri, branch="audit").version == 3
    # overwrite rows of the branch by predicate
    assert spark_write(sdf(spark, rows(range(5), "o")), uri, mode="overwrite", where="id < 5", branch="audit").version == 4
    version, got = state(uri, "audit")
    assert version == 4
    want = pa.concat_tables([rows(range(5), "o"), rows(range(5, 20), "m"), rows(range(20, 30), "b")])
    assert bag(got) == bag(want)
    # main: same version, same rows
    assert state(uri)[0] == main_before[0] and bag(state(uri)[1]) == bag(main_before[1])
    # reads: the branch's latest and its version 3 (main's version 3 holds other rows)
    assert bag(collect(spark_read(spark, uri, branch="audit"))) == bag(got)
    at3 = lamina.open_table(uri).branch("audit").at(3).to_arrow()
    assert bag(at3) == bag(pa.concat_tables([rows(range(20), "m"), rows(range(20, 30), "b")]))
    assert bag(collect(spark_read(spark, uri, branch="audit", version=3, where="id >= 18"))) == \
        bag(at3.filter(pc.greater_equal(at3.column("id"), 18)))
    assert bag(collect(spark_read(spark, uri, version=3))) == bag(main_before[1])
    # an open table with branch=, and the branch's handle itself
    assert bag(collect(spark_read(spark, lamina.open_table(uri), branch="audit"))) == bag(got)
    assert bag(collect(spark_read(spark, lamina.open_table(uri).branch("audit")))) == bag(got)


def test_data_source_branch_option_reads_and_writes_the_branch(spark, tmp_path):
    uri = branched(tmp_path)
    main_before = state(uri)
    df = sdf(spark, rows(range(30, 40), "d"))
    df.write.format("lamina").option("branch", "audit").mode("append").save(uri)
    (sdf(spark, rows(range(10), "r")).write.format("lamina").option("branch", "audit")
     .option("replaceWhere", "id < 10").mode("overwrite").save(uri))
    version, got = state(uri, "audit")
    assert version == 4
    assert bag(got) == bag(pa.concat_tables([rows(range(10), "r"), rows(range(10, 20), "m"), rows(range(30, 40), "d")]))
    assert state(uri)[0] == main_before[0] and bag(state(uri)[1]) == bag(main_before[1])

    def load(**opts):
        r = spark.read.format("lamina")
        for k, v in opts.items():
            r = r.option(k, str(v))
        return collect(r.load(uri))

    assert bag(load(branch="audit")) == bag(got)
    assert bag(load(branch="audit", versionAsOf=3)) == bag(lamina.open_table(uri).branch("audit").at(3).to_arrow())
    ts = lamina.open_table(uri).branch("audit").at(3).metadata.timestamp_ms
    assert bag(load(branch="audit", timestampAsOf=ts)) == bag(lamina.open_table(uri).branch("audit").at(timestamp=ts).to_arrow())
    assert bag(load(versionAsOf=3)) == bag(main_before[1])  # without branch: main's version 3
    assert bag(load(branch="main")) == bag(main_before[1])


def test_rowlevel_and_compaction_on_a_branch(spark, tmp_path):
    uri = branched(tmp_path)
    b = lamina.open_table(uri).branch("audit")
    for lo in range(20, 50, 10):               # branch versions 3-5: more than main has
        b.append(rows(range(lo, lo + 10), "b"))
    main_before = state(uri)
    want = pa.concat_tables([rows(range(20), "m"), rows(range(20, 50), "b")])

    # rows of files the branch shares with main (ids < 20) and of its own
    assert spark_delete(spark, uri, "id < 3 OR id BETWEEN 30 AND 34", branch="audit").version == 6
    want = want.filter(pa.array([not (i < 3 or 30 <= i <= 34) for i in want.column("id").to_pylist()]))
    assert bag(state(uri, "audit")[1]) == bag(want)

    src = rows([4, 40, 60], "u")
    res = spark_merge(uri, sdf(spark, src), on="id", branch="audit").when_matched_update_all() \
        .when_not_matched_insert_all().execute()
    assert (res.version, res.rows_updated, res.rows_inserted) == (7, 2, 1)
    want = pa.concat_tables([want.filter(pc.invert(pc.is_in(want.column("id"), pa.array([4, 40], pa.int64())))), src])
    assert bag(state(uri, "audit")[1]) == bag(want)

    # compaction's tasks rewrite the branch's files of the branch's version 7 (main has no version 7)
    result = spark_compact(spark, uri, branch="audit", target_file_size=1 << 20)
    assert result.version == 8 and result.input_files > 1 and result.output_files == 1
    version, got = state(uri, "audit")
    assert version == 8 and bag(got) == bag(want)
    assert state(uri)[0] == main_before[0] and bag(state(uri)[1]) == bag(main_before[1])
    # the branch's history as a system table
    snaps = collect(spark_system_table(spark, uri, "$snapshots", branch="audit"))
    assert max(snaps.column("version").to_pylist()) == 8


def test_foreach_batch_writer_and_change_feed_on_a_branch(spark, tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)           # with row lineage (the default): a change feed
    t.append(rows(range(10), "m"))
    t.branches.create("audit")
    main_before = state(uri)
    write_batch = foreach_batch_writer(uri, "etl", branch="audit")
    first = write_batch(sdf(spark, rows(range(10, 15), "s")), 0).version
    assert write_batch(sdf(spark, rows(range(10, 15), "s")), 0).version is None  # the same batch again: skipped
    assert lamina.open_table(uri, version="audit").metadata.app_transactions == {"etl": 0}
    assert state(uri)[0] == main_before[0] and lamina.open_table(uri).metadata.app_transactions == {}
    changes = collect(spark_read_changes(spark, uri, first - 1, first, branch="audit"))
    assert bag(changes, ["id", "v", "_change_type"]) == bag(
        rows(range(10, 15), "s").append_column("_change_type", pa.array(["insert"] * 5)))


# --- catalog tables ----------------------------------------------------------------------------------


def test_catalog_table_branch_writes_leave_the_catalog_row_on_main(spark, tmp_path):
    db = f"sqlite:///{tmp_path}/wh/catalog.db"
    cat = lamina.load_catalog(db)
    cat.create_namespace("shop")
    t = cat.create_table("shop.orders", SCHEMA)
    t.append(rows(range(10), "m"))
    t.branches.create("audit")
    row = cat.table_info("shop.orders").version
    spark_write(sdf(spark, rows(range(10, 20), "b")), "shop.orders", catalog=cat, branch="audit")
    (sdf(spark, rows(range(20, 30), "d")).write.format("lamina").option("catalog", db).option("branch", "audit")
     .mode("append").save("shop.orders"))
    assert cat.table_info("shop.orders").version == row  # the catalog row tracks main only
    want = pa.concat_tables([rows(range(10), "m"), rows(range(10, 20), "b"), rows(range(20, 30), "d")])
    assert bag(state(t.uri, "audit")[1]) == bag(want)
    assert bag(collect(spark_read(spark, "shop.orders", catalog=cat, branch="audit"))) == bag(want)
    # publishing goes through the catalog: the row moves to the published version
    published = cat.load_table("shop.orders").branches.publish("audit").version
    assert cat.table_info("shop.orders").version == published == row + 1
    assert bag(cat.load_table("shop.orders").to_arrow()) == bag(want)


# --- refusals: nothing written ------------------------------------------------------------------------


def test_unknown_branch_and_bad_options_write_nothing(spark, tmp_path):
    uri = branched(tmp_path)
    before, files = state(uri), data_files(uri)
    df = sdf(spark, rows(range(50, 55), "x"))
    with pytest.raises(BranchNotFound, match="nope"):
        spark_write(df, uri, branch="nope")
    with pytest.raises(BranchNotFound, match="nope"):
        spark_delete(spark, uri, "id = 1", branch="nope")
    with pytest.raises(BranchNotFound, match="nope"):
        spark_merge(uri, df, on="id", branch="nope")
    with pytest.raises(BranchNotFound, match="nope"):
        spark_compact(spark, uri, branch="nope")
    with pytest.raises(BranchNotFound, match="nope"):
        spark_read(spark, uri, branch="nope")
    with pytest.raises(InvalidBranchName):
        spark_write(df, uri, branch="../x")
    with pytest.raises(BranchNotFound, match="nope"):  # planned on the driver: the typed error itself
        df.write.format("lamina").option("branch", "nope").mode("append").save(uri)
    with pytest.raises(Exception, match="BranchNotFound"):
        spark.read.format("lamina").option("branch", "nope").load(uri)
    # a tag names a version of the table, not of a branch
    lamina.open_table(uri).tags.create("t1")
    with pytest.raises(InvalidArgument, match="tag"):
        spark_read(spark, uri, branch="audit", tag="t1")
    with pytest.raises(InvalidArgument, match="tag"):
        spark_read(spark, uri, branch="audit", version="t1")
    with pytest.raises(InvalidArgument, match="branch"):
        spark_write(df, lamina.open_table(uri).branch("audit"), branch="other")
    assert state(uri)[0] == before[0] and state(uri, "audit")[0] == 2 and data_files(uri) == files
    # a branch write never creates the table
    missing = str(tmp_path / "missing")
    with pytest.raises(TableNotFound, match="no branch 'audit'"):
        spark_write(df, missing, branch="audit")
    assert not os.path.exists(missing) or not os.listdir(missing)


# --- the data source and stream source, driven without Spark jobs -------------------------------------


def _source(uri: str, **opts) -> LaminaDataSource:
    return LaminaDataSource(CaseInsensitiveDict({"path": uri, **{k: str(v) for k, v in opts.items()}}))


def test_stream_reader_follows_the_branch_also_when_unpickled(tmp_path):
    uri = branched(tmp_path)
    b = lamina.open_table(uri).branch("audit")
    ds = _source(uri, branch="audit", startingVersion=3)
    b.append(rows(range(20, 25), "b"))         # branch v3
    reader = ds.streamReader(ds.schema())
    # the copy Spark pickles plans the same batches (it reopens the table: the branch's log)
    planner = pickle.loads(pickle.dumps(reader))
    start = planner.initialOffset()
    end = planner.latestOffset(start, ReadAllAvailable())
    assert end == {"version": 3}
    task = pickle.loads(pickle.dumps(planner))
    got = pa.Table.from_batches([x for p in planner.partitions(start, end) for x in task.read(p)], schema=planner.out_schema)
    assert bag(got) == bag(rows(range(20, 25), "b"))


def test_data_source_stream_writer_commits_each_batch_once_to_the_branch(tmp_path):
    from lamina.spark._types import spark_schema

    uri = branched(tmp_path)
    main_before = state(uri)
    ds = _source(uri, branch="audit", appId="ingest")
    for batch_id, lo in ((0, 20), (0, 20), (1, 25)):  # batch 0 replayed (a restarted query): skipped
        writer = ds.streamWriter(spark_schema(SCHEMA), False)  # Spark makes a writer per micro-batch
        message = writer.write(iter(rows(range(lo, lo + 5), "s").to_batches()))
        writer.commit([message], batch_id)
    version, got = state(uri, "audit")
    assert version == 4 and bag(got) == bag(pa.concat_tables([rows(range(20), "m"), rows(range(20, 30), "s")]))
    assert lamina.open_table(uri, version="audit").metadata.app_transactions == {"ingest": 1}
    assert state(uri)[0] == main_before[0] and bag(state(uri)[1]) == bag(main_before[1])
