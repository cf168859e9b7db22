"""The change data feed: what each kind of version yields, pushdown, and bad ranges."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import ChangesUnavailable, InvalidArgument, SchemaMismatch, VersionNotFound

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def kinds(feed) -> list[tuple[int, str, str, int]]:
    t = feed.to_arrow()
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), t.column("_change_type").to_pylist(),
                      t.column("_commit_version").to_pylist()))


@pytest.fixture
def t(tmp_path):
    t = lamina.create_table(str(tmp_path), SCHEMA)
    t.append(pa.table({"id": [1, 2, 3], "v": list("abc")}))
    return t


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_update_and_merge_pair_images_by_row_id(t, mode):
    t.update(where="id = 2", set={"v": "'B'"}, mode=mode)
    t.merge(pa.table({"id": [3, 7], "v": ["C", "g"]}), on="id", mode=mode) \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    t.delete("id = 1", mode=mode)
    assert kinds(t.changes(1)) == [
        (1, "a", "delete", 4),
        (2, "B", "update_postimage", 2), (2, "b", "update_preimage", 2),
        (3, "C", "update_postimage", 3), (3, "c", "update_preimage", 3),
        (7, "g", "insert", 3),
    ]


def test_compaction_and_manifest_rewrites_yield_nothing(t):
    t.append(pa.table({"id": [4], "v": ["d"]}))
    t.delete("id = 2")
    v = t.metadata.version
    t.maintenance.compact()
    t.maintenance.rewrite_manifests()
    assert t.metadata.version == v + 2
    assert t.changes(v).count() == 0
    assert t.changes(v, columns=["id"]).to_arrow().column_names == ["id", "_change_type", "_commit_version", "_commit_timestamp"]


def test_rows_a_rewrite_moves_are_no_change(t):
    t.append(pa.table({"id": [4], "v": ["d"]}))
    v = t.metadata.version
    with t.transaction() as tx:  # the copy-on-write delete rewrites rows 2 and 3 elsewhere
        tx.update(where="id = 4", set={"v": "'D'"})
        tx.delete("id = 1", mode="copy-on-write")
    assert kinds(t.changes(v)) == [(1, "a", "delete", v + 1), (4, "D", "update_postimage", v + 1),
                                   (4, "d", "update_preimage", v + 1)]


def test_overwrite_yields_deletes_and_inserts(t):
    t.overwrite(pa.table({"id": [1, 9], "v": ["a", "z"]}))
    assert kinds(t.changes(1)) == [(1, "a", "delete", 2), (1, "a", "insert", 2), (2, "b", "delete", 2),
                                   (3, "c", "delete", 2), (9, "z", "insert", 2)]


def test_rollback_yields_what_it_removes_and_restores(t):
    t.update(where="id = 1", set={"v": "'A'"})
    t.append(pa.table({"id": [5], "v": ["e"]}))
    t.delete("id = 3")
    v = t.metadata.version
    t.rollback(1)
    assert kinds(t.changes(v)) == [
        (1, "A", "update_preimage", v + 1), (1, "a", "update_postimage", v + 1),
        (3, "c", "insert", v + 1), (5, "e", "delete", v + 1),
    ]


def test_changes_applied_to_the_start_give_the_end(t):
    t.append(pa.table({"id": [4, 5], "v": list("de")}))
    t.update(where="id >= 3", set={"v": "'x'"})
    t.delete("id = 5")
    t.maintenance.compact()
    start = {r["_row_id"]: (r["id"], r["v"]) for r in t.scan(version=1, columns=["id", "v", "_row_id"]).to_arrow().to_pylist()}
    for r in t.changes(1, columns=["id", "v", "_row_id"]).to_arrow().to_pylist():
        if r["_change_type"] in ("delete", "update_preimage"):
            assert start.pop(r["_row_id"]) == (r["id"], r["v"])
        else:
            assert r["_row_id"] not in start
            start[r["_row_id"]] = (r["id"], r["v"])
    end = {r["_row_id"]: (r["id"], r["v"]) for r in t.scan(columns=["id", "v", "_row_id"]).to_arrow().to_pylist()}
    assert start == end


def test_where_and_columns_push_down(t):
    t.update(where="id = 2", set={"v": "'B'"})
    t.append(pa.table({"id": [10], "v": ["j"]}))
    got = t.changes(1, where="v = 'B' or id = 10", columns=["id"]).to_arrow()
    assert got.column_names == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    # the update's pre-image does not match the filter: its post-image stays an update
    assert sorted(zip(got.column("id").to_pylist(), got.column("_change_type").to_pylist())) == [
        (2, "update_postimage"), (10, "insert")]
    with pytest.raises(SchemaMismatch):
        t.changes(1, columns=["nope"])


def test_end_version_tags_and_timestamps(t):
    t.append(pa.table({"id": [4], "v": ["d"]}))  # 2
    t.tags.create("two")
    t.append(pa.table({"id": [5], "v": ["e"]}))  # 3
    assert t.changes(1, 2).versions == [2]
    assert [r[0] for r in kinds(t.changes("two"))] == [5]
    assert [r[0] for r in kinds(t.changes(0, "two"))] == [1, 2, 3, 4]
    ts3 = datetime.fromtimestamp(t.metadata.timestamp_ms / 1000, timezone.utc)
    assert t.changes(start_timestamp=ts3).versions == [3]
    ts2 = datetime.fromtimestamp(t.log.load(2).timestamp_ms / 1000, timezone.utc)
    assert t.changes(start_timestamp=ts2, end_timestamp=ts2).versions == [2]
    assert t.changes(3).count() == 0 and t.changes(3).versions == []
    got = t.changes(2).to_arrow()
    assert pc.all(pc.equal(got.column("_commit_timestamp"), pa.scalar(t.metadata.timestamp_ms, pa.timestamp("ms", tz="UTC")))).as_py()


def test_bad_ranges_are_typed_errors(t):
    t.append(pa.table({"id": [4], "v": ["d"]}))
    with pytest.raises(InvalidArgument, match="before its start"):
        t.changes(2, 1)
    with pytest.raises(VersionNotFound, match="latest version is 2"):
        t.changes(0, 7)
    with pytest.raises(VersionNotFound):
        t.changes(9)
    with pytest.raises(InvalidArgument):
        t.changes()
    with pytest.raises(InvalidArgument):
        t.changes(-1)


def test_expired_and_pre_lineage_ranges_name_the_oldest_answerable(tmp_path):
    t = lamina.create_table(str(tmp_path), SCHEMA, properties={"row-lineage.enabled": "false", "expire.reader-grace-ms": "0"})
    t.append(pa.table({"id": [1], "v": ["a"]}))
    with pytest.raises(ChangesUnavailable) as e:
        t.changes(0)
    assert e.value.oldest is None and "enable_row_lineage" in str(e.value)
    on = t.enable_row_lineage().version
    t.append(pa.table({"id": [2], "v": ["b"]}))
    with pytest.raises(ChangesUnavailable) as e:
        t.changes(on - 1)
    assert e.value.oldest == on and f"is {on}" in str(e.value)
    assert kinds(t.changes(on)) == [(2, "b", "insert", on + 1)]
    for _ in range(3):
        t.append(pa.table({"id": [3], "v": ["c"]}))
    t.maintenance.expire_versions(retain_last=2)
    latest = t.metadata.version
    with pytest.raises(ChangesUnavailable) as e:
        t.changes(on)
    assert e.value.oldest == latest - 1
    assert t.changes(latest - 1).versions == [latest]


@pytest.mark.parametrize("where", [None, "id >= 3"])
def test_counts_are_the_change_rows_grouped_by_version_and_type(t, where):
    """``ChangeFeed.counts()`` (it reads no data column) against DuckDB grouping the feed's rows."""
    import duckdb

    t.merge(pa.table({"id": [2, 3, 7], "v": ["B", "x", "g"]}), on="id").when_matched_delete(condition="source.v = 'x'") \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    t.maintenance.compact()
    t.update(where="id = 7", set={"v": "'G'"}, mode="copy-on-write")
    t.delete("id = 1")
    t.rollback(2)
    feed = t.changes(0, where=where)
    counts = feed.counts()
    assert counts.column("version").to_pylist() == feed.versions == list(range(1, t.metadata.version + 1))
    assert counts.column("operation").to_pylist() == [t.scan(version=v).vm.operation for v in feed.versions]
    assert counts.column("timestamp").cast(pa.int64()).to_pylist() == [t.scan(version=v).vm.timestamp_ms for v in feed.versions]
    rows = feed.to_arrow()  # noqa: F841 (DuckDB reads it by name)
    grouped = duckdb.sql("SELECT _commit_version, _change_type, count(*) FROM rows GROUP BY ALL").fetchall()
    kinds = ["insert", "delete", "update_preimage", "update_postimage"]
    got = {(r["version"], k): r[k] for r in counts.to_pylist() for k in kinds if r[k]}
    assert got == {(v, k): n for v, k, n in grouped}
    assert sum(got.values()) == feed.count() > 0


def test_steps_compute_each_version_apart(t):
    """An engine computes a range's versions in separate tasks from ``steps()`` and ``reader``."""
    from lamina.data.changes import version_changes

    t.append(pa.table({"id": [4], "v": ["d"]}))
    t.update(where="id = 2", set={"v": "'B'"})
    t.maintenance.compact()
    t.delete("id = 1")
    feed = t.changes(1, where="id > 1", columns=["id", "v"])
    steps = feed.steps()
    assert [(a.version, b.version) for a, b in steps] == [(1, 2), (2, 3), (3, 4), (4, 5)]
    parts = [version_changes(feed.io, a, b, feed.reader) for a, b in reversed(steps)]  # any order
    got = pa.concat_tables(parts).sort_by([("_commit_version", "ascending"), ("_change_type", "ascending")])
    assert got.select(["id", "v", "_change_type", "_commit_version"]).to_pylist() == [
        {"id": 4, "v": "d", "_change_type": "insert", "_commit_version": 2},
        {"id": 2, "v": "B", "_change_type": "update_postimage", "_commit_version": 3},
        {"id": 2, "v": "b", "_change_type": "update_preimage", "_commit_version": 3},
    ]
