"""The Spark stream source and change feed options, driven without a Spark session: the
methods Spark calls (initialOffset, latestOffset, partitions, read on a pickled copy, as a
task gets it), so offsets, rate limits and refusals are checked fast and exactly. (The
streaming queries themselves, restarted from checkpoints, are in test_spark_changes.py.)"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

import lamina
from lamina.errors import (
    ChangeCommitInStream, ChangesUnavailable, InvalidArgument, InvalidPredicate, RowLineageNotEnabled, SchemaMismatch, VersionNotFound,
)
from lamina.spark.datasource import LaminaDataSource

from support.spark_results import bag

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(ids, tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


def table(tmp_path, files: int = 0) -> lamina.Table:
    """A table of ``files`` one-file appends of 40 rows (ids 0..40*files-1)."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"write.max-rows-per-file": "40", "expire.reader-grace-ms": "0"})
    for i in range(files):
        t.append(rows(range(i * 40, i * 40 + 40), "s"))
    return t


def source(uri: str, **opts):
    """The data source as Spark builds it (options case-insensitive), and its stream reader."""
    ds = LaminaDataSource(CaseInsensitiveDict({"path": uri, **{k: str(v) for k, v in opts.items()}}))
    return ds.streamReader(ds.schema())


def offsets(reader, limit, start: dict | None = None) -> list[dict]:
    """Every offset a query reaches from ``start`` (default: where a new query starts now), as
    Spark asks them (until no progress)."""
    out = [start if start is not None else reader.initialOffset()]
    while (end := reader.latestOffset(out[-1], limit)) != out[-1]:
        out.append(end)
    return out


def batch(reader, start: dict, end: dict) -> pa.Table:
    """The rows of one micro-batch, each partition read by a pickled copy of the reader (a task's)."""
    task = pickle.loads(pickle.dumps(reader))
    parts = [pickle.loads(pickle.dumps(p)) for p in reader.partitions(start, end)]
    batches = [b for p in parts for b in task.read(p)]
    return pa.Table.from_batches(batches, schema=reader.out_schema)


def delivered(reader, limit=ReadAllAvailable(), start: dict | None = None, first: dict | None = None) -> tuple[list[dict], pa.Table]:
    """The offsets from ``start`` (through ``first``, the first batch's end if already asked) and
    every row the batches between them hold."""
    offs = [start, *offsets(reader, limit, first)] if first is not None else offsets(reader, limit, start)
    got = []
    for a, b in zip(offs, offs[1:]):
        got.append(batch(reader, a, b))
        reader.commit(b)  # as Spark does once the batch is done: the reader forgets what precedes it
    return offs, pa.concat_tables(got) if got else reader.out_schema.empty_table()


def test_snapshot_then_whole_versions_by_max_files_per_trigger(tmp_path):
    t = table(tmp_path, 3)                       # versions 1-3, the snapshot of version 3: 3 files
    reader = source(t.uri, maxFilesPerTrigger=2)
    assert reader.getDefaultReadLimit() == ReadMaxFiles(2)
    start = reader.initialOffset()
    assert start == {"version": -1}  # before the start: the first batch's end names the snapshot's version
    first = reader.latestOffset(start, ReadMaxFiles(2))
    assert first == {"version": 3, "snapshot_files": 2}
    t.append(rows(range(120, 200), "a"))         # 4: 2 files
    t.maintenance.compact()                                  # 5: moves rows, counts no file
    t.append(rows(range(200, 210), "b"))         # 6
    t.append(rows(range(210, 220), "c"))         # 7
    offs, got = delivered(reader, ReadMaxFiles(2), start, first)
    assert offs == [start, first, {"version": 3},
                    {"version": 5}, {"version": 7}]  # the compaction (5) rides along: it adds no rows
    assert bag(got) == bag(t.scan().to_arrow()) and got.num_rows == 220  # each row once
    assert batch(reader, offs[1], offs[2]).num_rows == 40  # the snapshot's last file (version 4's 2 would exceed 2)
    # Spark may ask with no limit (e.g. Trigger.Once); a version bigger than the limit still goes alone
    assert offsets(source(t.uri, maxFilesPerTrigger=2), ReadAllAvailable(), first)[1:] == [{"version": 7}]
    assert offsets(source(t.uri, startingVersion=4), ReadMaxFiles(1))[1:] == [{"version": 4}, {"version": 6}, {"version": 7}]
    # The first batch replayed after a restart (Spark asks initialOffset() again) is the same batch
    assert bag(batch(source(t.uri), source(t.uri).initialOffset(), first)) == bag(batch(reader, start, first))


def test_max_bytes_per_trigger_with_or_without_max_files(tmp_path):
    """Delta's maxBytesPerTrigger: whole versions adding about that many bytes of data files (the
    snapshot split by files), at least one; with maxFilesPerTrigger too, the first limit reached."""
    t = table(tmp_path, 3)                                # the snapshot of version 3: 3 files
    size = max(e.size for e in t.plan())
    budget = 2 * size + size // 2                         # two and a half files
    reader = source(t.uri, maxBytesPerTrigger=budget)
    assert reader.getDefaultReadLimit() == ReadMaxBytes(budget)
    start = reader.initialOffset()
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first == {"version": 3, "snapshot_files": 2}   # two files fit, three do not
    for i in range(3, 6):                                 # versions 4-6, one file each
        t.append(rows(range(i * 40, i * 40 + 40), "n"))
    offs, got = delivered(reader, ReadMaxBytes(budget), start, first)
    assert offs == [start, first, {"version": 4}, {"version": 6}]  # the snapshot's last file and 4; then 5 and 6
    assert bag(got) == bag(t.scan().to_arrow()) and got.num_rows == 240
    one_byte = source(t.uri, maxBytesPerTrigger="1", startingVersion=4)   # below any file: one version a batch
    assert offsets(one_byte, ReadMaxBytes(1))[1:] == [{"version": 4}, {"version": 5}, {"version": 6}]
    both = source(t.uri, maxBytesPerTrigger="1g", maxFilesPerTrigger=2, startingVersion=4)  # the files limit first
    assert offsets(both, both.getDefaultReadLimit())[1:] == [{"version": 5}, {"version": 6}]
    assert offsets(both, ReadAllAvailable())[1:] == [{"version": 6}]  # Trigger.Once: everything


def test_available_now_stops_at_the_version_latest_when_it_started(tmp_path):
    t = table(tmp_path, 1)
    reader = source(t.uri, startingVersion=1)
    reader.prepareForTriggerAvailableNow()
    t.append(rows(range(40, 50), "late"))
    offs, got = delivered(reader)
    assert offs == [{"version": 0}, {"version": 1}] and bag(got) == bag(rows(range(40), "s"))


def test_starting_version_timestamp_and_latest(tmp_path):
    t = table(tmp_path, 3)
    ts = {h["version"]: h["timestamp_ms"] for h in t.history()}
    assert source(t.uri, startingVersion=2).initialOffset() == {"version": 1}
    assert source(t.uri, startingVersion=0).initialOffset() == {"version": 0}
    assert source(t.uri, startingTimestamp=ts[2]).initialOffset() == {"version": 1}
    assert source(t.uri, startingTimestamp=ts[3] + 1).initialOffset() == {"version": 3}  # after every version
    reader = source(t.uri, startingVersion="latest")
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert (start, first) == ({"version": -1}, {"version": 3}) and reader.partitions(start, first) == []
    t.append(rows(range(120, 125), "n"))
    assert bag(delivered(reader, start=first)[1]) == bag(rows(range(120, 125), "n"))
    with pytest.raises(VersionNotFound):
        source(t.uri, startingVersion=9).initialOffset()
    t.maintenance.expire_versions(retain_last=2)
    with pytest.raises(VersionNotFound, match="expired"):
        source(t.uri, startingVersion=1).initialOffset()
    with pytest.raises(ChangesUnavailable) as e:
        source(t.uri, startingVersion=1, readChangeFeed="true")
    assert e.value.oldest == 3


def test_change_feed_stream_needs_row_lineage(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"row-lineage.enabled": "false"})
    t.append(rows(range(3), "a"))
    with pytest.raises(RowLineageNotEnabled, match="enable_row_lineage"):
        source(t.uri, readChangeFeed="true")
    assert bag(delivered(source(t.uri))[1]) == bag(rows(range(3), "a"))  # appends need none


@pytest.mark.parametrize("opts, message", [
    ({"endingVersion": 3}, "apply to batch reads"),
    ({"versionAsOf": 1}, "do not apply to streaming reads"),
    ({"maxFilesPerTrigger": 0}, "at least 1"),
    ({"maxFilesPerTrigger": "x"}, "must be an integer"),
    ({"maxBytesPerTrigger": "0"}, "at least 1"),
    ({"maxBytesPerTrigger": "5 parsecs"}, "size in bytes"),
    ({"startingVersion": -1}, "version number >= 0"),
    ({"startingVersion": 1, "startingTimestamp": 5}, "not both"),
])
def test_stream_options_refused(tmp_path, opts, message):
    t = table(tmp_path, 1)
    with pytest.raises(InvalidArgument, match=message):
        source(t.uri, **opts).initialOffset()


def test_versions_that_delete_or_update_rows_stop_the_stream_unless_skipped(tmp_path):
    t = table(tmp_path, 2)
    t.delete("id < 5")                           # 3
    t.append(rows(range(80, 90), "a"))           # 4
    t.update(where="id = 50", set={"v": "'u'"})  # 5
    t.append(rows(range(90, 95), "b"))           # 6
    reader = source(t.uri, startingVersion=2)
    with pytest.raises(ChangeCommitInStream, match=r"version 3 .*\(delete\).*skipChangeCommits"):
        reader.partitions({"version": 1}, {"version": 4})
    assert bag(batch(reader, {"version": 1}, {"version": 2})) == bag(rows(range(40, 80), "s"))
    skipping = source(t.uri, startingVersion=2, skipChangeCommits="true")
    want = pa.concat_tables([rows(range(40, 80), "s"), rows(range(80, 90), "a"), rows(range(90, 95), "b")])
    assert bag(delivered(skipping)[1]) == bag(want)


def test_change_feed_stream_is_the_snapshot_as_inserts_then_the_changes(tmp_path):
    t = table(tmp_path, 2)
    reader = source(t.uri, readChangeFeed="true", where="id >= 30", columns="id, v, _row_id")
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadMaxFiles(1))  # the query's first batch: the snapshot of version 2
    t.merge(rows(range(70, 85), "m"), on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    t.delete("id < 45")
    t.maintenance.compact()
    offs, got = delivered(reader, ReadMaxFiles(1), start, first)
    # snapshot files 0 | 1 | merge (one file added: its updated and inserted rows), delete (DVs only)
    # and compaction (no data change), which add no file to count
    assert offs == [start, first, {"version": 2}, {"version": 5}]
    assert got.column_names == ["id", "v", "_row_id", "_change_type", "_commit_version", "_commit_timestamp"]
    snap = got.filter(pc.equal(got.column("_commit_version"), 2))
    assert bag(snap, ["id", "v", "_row_id", "_change_type"]) == bag(
        t.scan(version=2, where="id >= 30", columns=["id", "v", "_row_id"]).to_arrow().append_column(
            "_change_type", pa.array(["insert"] * 50)))
    stamp = snap.column("_commit_timestamp")[0].as_py()
    assert int(stamp.timestamp() * 1000) == t.history()[-3]["timestamp_ms"]
    later = got.filter(pc.greater(got.column("_commit_version"), 2))
    want = t.changes(2, where="id >= 30", columns=["id", "v", "_row_id"]).to_arrow()
    assert bag(later) == bag(want) and later.num_rows == want.num_rows


def test_a_schema_change_after_the_start_asks_for_a_restart(tmp_path):
    t = table(tmp_path, 1)
    reader = source(t.uri, startingVersion=1)
    with t.update_schema() as u:
        u.rename_column("v", "w")                # 2
    t.append(pa.table({"id": pa.array([40], pa.int64()), "w": ["new"]}))  # 3
    with pytest.raises(SchemaMismatch, match="changed in version 2.*restart the query"):
        reader.partitions({"version": 0}, {"version": 3})
    restarted = source(t.uri, startingVersion=1)  # the table's current schema, files mapped by physical name
    got = batch(restarted, {"version": 0}, {"version": 3})
    assert got.column_names == ["id", "w"] and bag(got) == bag(t.scan().to_arrow())


def test_batch_change_feed_options_fail_at_load(tmp_path):
    """Bad ranges fail when the DataFrame is loaded (schema()), before any task; the range read
    is pinned then (later commits are not in it)."""
    t = table(tmp_path, 3)

    def load(**opts):
        ds = LaminaDataSource(CaseInsensitiveDict({"path": t.uri, "readChangeFeed": "true", **{k: str(v) for k, v in opts.items()}}))
        return ds.reader(ds.schema())

    for opts, error, message in [
        ({}, InvalidArgument, "needs option startingVersion or startingTimestamp"),
        ({"startingVersion": 2, "startingTimestamp": "2026-01-01"}, InvalidArgument, "not both"),
        ({"endingVersion": 1, "endingTimestamp": 5}, InvalidArgument, "not both"),
        ({"startingVersion": 3, "endingVersion": 2}, InvalidArgument, "endingVersion 2 is before startingVersion 3"),
        ({"startingVersion": 9}, VersionNotFound, "latest version is 3"),
        ({"startingVersion": 1, "endingVersion": 9}, VersionNotFound, "latest version is 3"),
        ({"startingVersion": "latest"}, InvalidArgument, "needs option startingVersion"),
        ({"startingVersion": 1, "tag": "x"}, InvalidArgument, "do not apply to readChangeFeed"),
        ({"startingVersion": 1, "columns": "id,,v"}, InvalidArgument, "empty column"),
        ({"startingVersion": 1, "where": "nope = 1"}, InvalidPredicate, "nope"),
    ]:
        with pytest.raises(error, match=message):
            load(**opts)
    reader = load(startingVersion=2)
    t.append(rows(range(500, 510), "late"))
    parts = reader.partitions()
    assert sorted(v for p in parts for v in p.value) == [2, 3]
    t.maintenance.expire_versions(retain_last=2)
    with pytest.raises(ChangesUnavailable, match="oldest start version still answerable is 3"):
        load(startingVersion=2)
