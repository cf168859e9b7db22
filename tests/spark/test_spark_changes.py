"""Row lineage, the change data feed and streaming reads from Spark.

Expected results come from Lamina's core (``Table.changes``, ``Table.scan``: Arrow code
paths the Spark ones do not share) and from a model: a range's change rows applied to the
rows of its start version give the rows of its end version.
"""

from __future__ import annotations

import collections
import datetime as dt
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import ChangesUnavailable, InvalidArgument, RowLineageNotEnabled, VersionNotFound

from support.spark_results import bag, collect

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
CHANGE = ["_change_type", "_commit_version", "_commit_timestamp"]


def rows(ids, tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


def new_table(path, **props) -> lamina.Table:
    return lamina.create_table(str(path), SCHEMA, properties={"write.max-rows-per-file": "40", **props})


def apply_changes(start: collections.Counter, changes: pa.Table) -> collections.Counter:
    """The model: rows (id, v) of a version with ``changes`` applied (deletes and pre-images
    leave, inserts and post-images arrive)."""
    out = collections.Counter(start)
    gone = pc.is_in(changes.column("_change_type"), pa.array(["delete", "update_preimage"]))
    ordered = changes.append_column("gone", gone).sort_by([("_commit_version", "ascending"), ("gone", "descending")])
    for i, v, kind in zip(*(ordered.column(c).to_pylist() for c in ("id", "v", "_change_type"))):
        if kind in ("delete", "update_preimage"):
            out[(i, v)] -= 1
            assert out[(i, v)] >= 0, f"{kind} of a row that is not there: {(i, v)}"
        else:
            out[(i, v)] += 1
    return +out


def state(t: lamina.Table, version: int) -> collections.Counter:
    return bag(t.scan(version=version).to_arrow(), ["id", "v"])


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A table whose versions do every kind of change: appends, merge, copy-on-write delete,
    compaction, update, partial overwrite."""
    t = new_table(tmp_path_factory.mktemp("history") / "t")
    t.append(rows(range(100), "a"))                                            # 1
    t.append(rows(range(100, 150), "b"))                                       # 2
    t.merge(pa.concat_tables([rows(range(90, 110), "m"), rows(range(200, 205), "n")]), on="id") \
        .when_matched_delete("source.id < 95").when_matched_update_all().when_not_matched_insert_all().execute()  # 3
    t.delete("id IN (7, 14, 21, 28, 35, 63, 77, 126)", mode="copy-on-write")    # 4
    t.maintenance.compact()                                                                # 5
    t.update(where="id BETWEEN 40 AND 49", set={"v": "'u'"})                   # 6
    t.overwrite(rows(range(140, 146), "o"), where="id >= 140 AND id < 150")    # 7
    t.append(rows(range(300, 310), "c"))                                       # 8
    assert t.metadata.version == 8 and t.history()[3]["operation"] == "compact"
    return t


def feed_df(spark, uri, **opts):
    r = spark.read.format("lamina").option("readChangeFeed", "true")
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load(uri)


@pytest.mark.parametrize("a, b", [(1, 8), (3, 3), (2, 6), (5, 5), (6, 8)])
def test_batch_change_feed_is_the_changes_of_versions_a_to_b(spark, history, a, b):
    """startingVersion and endingVersion are inclusive (Delta): the rows of Table.changes(a - 1, b);
    applied to version a - 1 they give version b."""
    got = collect(feed_df(spark, history.uri, startingVersion=a, endingVersion=b))
    assert got.column_names == ["id", "v", *CHANGE]
    want = history.changes(a - 1, b).to_arrow()
    assert bag(got) == bag(want) and got.num_rows == want.num_rows
    assert set(got.column("_commit_version").to_pylist()) <= set(range(a, b + 1))
    assert apply_changes(state(history, a - 1), got) == state(history, b)
    if a == b == 5:  # compaction: no change rows
        assert got.num_rows == 0


def test_batch_change_feed_by_timestamp_where_columns_and_read_changes(spark, history):
    from pyspark.sql.types import LongType, StringType, TimestampType

    from lamina.spark import read_changes

    ts = {h["version"]: h["timestamp_ms"] for h in history.history()}
    iso = dt.datetime.fromtimestamp(ts[3] / 1000, dt.timezone.utc).isoformat()
    df = feed_df(spark, history.uri, startingTimestamp=iso, endingTimestamp=ts[6])
    assert [(f.name, type(f.dataType)) for f in df.schema.fields[2:]] == [
        ("_change_type", StringType), ("_commit_version", LongType), ("_commit_timestamp", TimestampType)]
    assert bag(collect(df)) == bag(history.changes(2, 6).to_arrow())
    stamps = {r._commit_version: r._commit_timestamp for r in df.select("_commit_version", "_commit_timestamp").distinct().collect()}
    assert {v: int(s.timestamp() * 1000) for v, s in stamps.items()} == {v: ts[v] for v in stamps}
    # where and columns push down as in Table.changes (row lineage columns too); Delta's option names
    opts = {"startingVersion": 1, "where": "id BETWEEN 90 AND 120", "columns": "id, _row_id, _last_updated_version"}
    got = collect(feed_df(spark, history.uri, **opts))
    want = history.changes(0, where="id BETWEEN 90 AND 120", columns=["id", "_row_id", "_last_updated_version"]).to_arrow()
    assert got.column_names == ["id", "_row_id", "_last_updated_version", *CHANGE] and bag(got) == bag(want)
    # read_changes: Table.changes' own (start, end] range, tags included
    history.tags.create("before-update", 5)
    df = read_changes(spark, history.uri, start_tag="before-update", end_version=7, where="id >= 40", columns=["id", "v"])
    assert bag(collect(df)) == bag(history.changes(5, 7, where="id >= 40").to_arrow())
    assert read_changes(spark, history.uri, 8).count() == 0


def test_change_feed_range_errors_reach_the_caller_typed(spark, history, tmp_path):
    """Bad ranges fail at load(), before a task (each option's refusal: test_spark_stream_units.py);
    read_changes raises Lamina's own errors on the driver."""
    from pyspark.errors import AnalysisException

    from lamina.spark import read_changes

    with pytest.raises(AnalysisException, match="InvalidArgument: endingVersion 3 is before startingVersion 5"):
        feed_df(spark, history.uri, startingVersion=5, endingVersion=3).collect()
    with pytest.raises(VersionNotFound, match="latest version is 8"):
        read_changes(spark, history.uri, 20)
    with pytest.raises(InvalidArgument, match="before its start"):
        read_changes(spark, history.uri, 5, 3)
    t = new_table(tmp_path / "old", **{"expire.reader-grace-ms": "0"})
    for i in range(4):
        t.append(rows([i], "x"))
    t.maintenance.expire_versions(retain_last=2)
    with pytest.raises(ChangesUnavailable) as e:
        read_changes(spark, t.uri, 1)
    assert e.value.oldest == 3


# --- row lineage -----------------------------------------------------------------------------

LINEAGE = ["id", "_row_id", "_last_updated_version"]


def lineage_of(t: lamina.Table, version: int | None = None) -> dict[int, tuple[int, int]]:
    """id -> (_row_id, _last_updated_version), by the core reader."""
    got = t.scan(columns=LINEAGE, version=version).to_arrow()
    return {i: (r, u) for i, r, u in zip(*(got.column(c).to_pylist() for c in LINEAGE))}


def test_row_lineage_columns_in_every_spark_read(spark, history, tmp_path):
    """Native reads number rows by first_row_id + _metadata.row_index unless the file stores the
    id (rewritten rows); the data source reads them with Lamina's reader. Both equal the core's."""
    from lamina.spark import read

    t = history
    want = t.scan(columns=LINEAGE).to_arrow()
    assert len(set(want.column("_row_id").to_pylist())) == want.num_rows
    assert bag(collect(read(spark, t.uri, columns=LINEAGE))) == bag(want)
    ds = spark.read.format("lamina").option("columns", '["id", "_row_id", "_last_updated_version"]').load(t.uri)
    assert bag(collect(ds)) == bag(want)
    some = t.scan(columns=["_row_id", "v"], where="id < 60").to_arrow()
    assert bag(collect(read(spark, t.uri, columns=["_row_id", "v"], where="id < 60"))) == bag(some)
    assert bag(collect(read(spark, t.uri, columns=LINEAGE, version=4))) == bag(t.scan(columns=LINEAGE, version=4).to_arrow())
    # an evolved schema (a renamed column is read by physical name), files with deletion vectors
    e = new_table(tmp_path / "evolved")
    e.append(rows(range(50), "a"))
    e.update(where="id < 5", set={"v": "'u'"})
    e.delete("id >= 45")
    with e.update_schema() as u:
        u.rename_column("v", "w")
    cols = ["id", "w", "_row_id", "_last_updated_version"]
    assert bag(collect(read(spark, e.uri, columns=cols))) == bag(e.scan(columns=cols).to_arrow())
    off = lamina.create_table(str(tmp_path / "off"), SCHEMA, properties={"row-lineage.enabled": "false"})
    off.append(rows(range(3), "a"))
    with pytest.raises(RowLineageNotEnabled, match="enable_row_lineage"):
        read(spark, off.uri, columns=LINEAGE)


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_spark_merge_delete_and_compact_carry_row_lineage(spark, tmp_path, mode):
    """A Spark merge that updates rows yields update pre/post images in the change feed (not a
    delete and an insert): the updated rows keep their _row_id; no row id of another row moves."""
    from lamina.spark import compact, delete, merge
    from lamina.spark._types import spark_schema

    t = new_table(tmp_path / "t")
    t.append(rows(range(200), "a"))
    t.update(where="id < 10", set={"v": "'u'"})  # files that store row ids, as Spark's merge will read
    before = lineage_of(t)
    source = spark.createDataFrame(pa.concat_tables([rows(range(10, 30), "m"), rows(range(1000, 1005), "n")]),
                                   schema=spark_schema(SCHEMA))
    res = (merge(t.uri, source, on="id", mode=mode).when_matched_delete("source.id >= 25")
           .when_matched_update_all().when_not_matched_insert_all().execute())
    v = res.version
    assert (res.rows_updated, res.rows_deleted, res.rows_inserted) == (15, 5, 5)
    t = lamina.open_table(t.uri)
    got = t.changes(v - 1, v).to_arrow()
    kinds = collections.Counter(zip(got.column("id").to_pylist(), got.column("_change_type").to_pylist()))
    assert kinds == collections.Counter(
        [(i, "update_preimage") for i in range(10, 25)] + [(i, "update_postimage") for i in range(10, 25)]
        + [(i, "delete") for i in range(25, 30)] + [(i, "insert") for i in range(1000, 1005)])
    after = lineage_of(t)
    assert {i: after[i] for i in before if i not in range(10, 30)} == {i: before[i] for i in before if i not in range(10, 30)}
    assert {i: after[i] for i in range(10, 25)} == {i: (before[i][0], v) for i in range(10, 25)}
    fresh = [after[i][0] for i in range(1000, 1005)]
    assert min(fresh) > max(r for r, _ in before.values()) and len(set(fresh)) == 5

    assert delete(spark, t.uri, "id BETWEEN 100 AND 109", mode="copy-on-write").version == v + 1
    t = lamina.open_table(t.uri)
    gone = t.changes(v, v + 1).to_arrow()
    assert sorted(zip(gone.column("id").to_pylist(), gone.column("_change_type").to_pylist())) == [(i, "delete") for i in range(100, 110)]
    assert lineage_of(t) == {i: after[i] for i in after if not 100 <= i <= 109}
    kept = lineage_of(t)
    assert compact(spark, t.uri, target_file_size=1 << 30).version == v + 2
    t = lamina.open_table(t.uri)
    assert t.changes(v + 1, v + 2).count() == 0 and lineage_of(t) == kept


# --- streaming reads ---------------------------------------------------------------------------


def crashing_sink(uri: str, app_id: str, crash: dict):
    """foreach_batch_writer, failing on batch ``crash["before"]`` before it writes and on batch
    ``crash["after"]`` after it wrote (a query dying around the sink's commit)."""
    from lamina.spark import foreach_batch_writer

    write = foreach_batch_writer(uri, app_id=app_id)

    def sink(df, batch_id):
        if crash.get("before") == batch_id:
            del crash["before"]
            raise RuntimeError(f"crash before batch {batch_id}")
        write(df, batch_id)
        if crash.get("after") == batch_id:
            del crash["after"]
            raise RuntimeError(f"crash after batch {batch_id}")

    return sink


def run_stream(spark, source, ck, sink, transform=lambda df: df, **opts) -> Exception | None:
    """One availableNow run of a stream of ``source`` (``transform``ed) into ``sink``; its exception, if any."""
    r = spark.readStream.format("lamina")
    for k, v in opts.items():
        r = r.option(k, str(v))
    q = sink(transform(r.load(source)).writeStream.option("checkpointLocation", str(ck)).trigger(availableNow=True)).start()
    try:
        q.awaitTermination(180)
    except Exception as e:  # noqa: BLE001 - the query's failure, as Spark reports it
        return e
    return q.exception()


def test_stream_of_appends_restarts_from_its_checkpoint_exactly_once(spark, tmp_path):
    """A's rows arrive in B once each: the snapshot A had when the stream started, then every
    append, across a query failing before and after its sink committed, restarted each time."""
    a = new_table(tmp_path / "a")
    for i in range(3):
        a.append(rows(range(i * 40, i * 40 + 40), "s"))  # the snapshot: 3 files
    b_uri = str(tmp_path / "b")
    crash = {"before": 1}
    sink = lambda w: w.foreachBatch(crashing_sink(b_uri, "copy", crash))  # noqa: E731
    err = run_stream(spark, a.uri, tmp_path / "ck", sink, maxFilesPerTrigger=2)
    assert err is not None and "crash before batch 1" in str(err)
    b = lamina.open_table(b_uri)
    assert b.metadata.app_transactions == {"copy": 0} and b.scan().count() == 80  # snapshot files 0-1

    a.append(rows(range(120, 130), "p"))
    a.maintenance.compact()  # moves rows: nothing to deliver
    a.append(rows(range(130, 135), "q"))
    crash["after"] = 2
    err = run_stream(spark, a.uri, tmp_path / "ck", sink, maxFilesPerTrigger=2)
    assert err is not None and "crash after batch 2" in str(err)
    assert lamina.open_table(b_uri).metadata.app_transactions == {"copy": 2}

    a.append(rows(range(135, 140), "r"))
    assert run_stream(spark, a.uri, tmp_path / "ck", sink, maxFilesPerTrigger=2) is None  # replays batch 2: skipped
    b = lamina.open_table(b_uri)
    assert bag(b.scan().to_arrow()) == bag(a.scan().to_arrow())
    assert b.scan().count() == 140
    # Batches: snapshot files 0-1 | its file 2, version 4 (one file) and 5 (compaction: no file) | 6 | 7
    assert b.metadata.app_transactions == {"copy": 3}


def test_stream_of_change_feed_into_a_lamina_table(spark, tmp_path):
    """readChangeFeed: the snapshot as inserts, then every change; B replayed gives A's rows,
    across a restart that replays a batch the sink had committed."""
    a = new_table(tmp_path / "a")
    a.append(rows(range(60), "s"))
    start = a.metadata.version
    b_uri = str(tmp_path / "b")
    sink = lambda w: w.format("lamina").option("path", b_uri).option("appId", "cdc")  # noqa: E731
    # The feed's column names are reserved in a Lamina table (its own feed would repeat them): a
    # table that lands the feed names them otherwise.
    landed = {"_change_type": "change_type", "_commit_version": "commit_version", "_commit_timestamp": "commit_timestamp"}
    lamina.create_table(b_uri, pa.schema([*SCHEMA, ("change_type", pa.string()), ("commit_version", pa.int64()),
                                          ("commit_timestamp", pa.timestamp("us", "UTC"))]))
    renamed = lambda df: df.withColumnsRenamed(landed)  # noqa: E731
    assert run_stream(spark, a.uri, tmp_path / "ck", sink, renamed, readChangeFeed="true") is None
    assert lamina.open_table(b_uri).scan().count() == 60
    _forget_last_commit(tmp_path / "ck")  # the restart replays the snapshot's batch: the sink skips it
    a.merge(pa.concat_tables([rows(range(50, 70), "m")]), on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    a.delete("id < 5")
    a.maintenance.compact()
    a.update(where="id = 30", set={"v": "'u'"}, mode="copy-on-write")
    assert run_stream(spark, a.uri, tmp_path / "ck", sink, renamed, readChangeFeed="true") is None
    got = lamina.open_table(b_uri).scan().to_arrow()
    got = got.rename_columns([{v: k for k, v in landed.items()}.get(c, c) for c in got.column_names])
    snapshot = got.filter(pc.equal(got.column("_commit_version"), start))
    assert set(snapshot.column("_change_type").to_pylist()) == {"insert"} and snapshot.num_rows == 60
    later = got.filter(pc.greater(got.column("_commit_version"), start))
    assert bag(later, ["id", "v", "_change_type", "_commit_version"]) == bag(a.changes(start).to_arrow(), ["id", "v", "_change_type", "_commit_version"])
    assert apply_changes(collections.Counter(), got) == state(a, a.metadata.version)


def _forget_last_commit(ck) -> None:
    """The checkpoint as if the query died after its sink committed the last batch but before
    Spark recorded it: a restart replays that batch."""
    commits = ck / "commits"
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):
        if (commits / name).exists():
            os.remove(commits / name)
