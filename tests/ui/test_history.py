"""The explorer on a long history: the plots' series sampled
from a long history (every tagged version and the newest ones kept, each point the
$snapshots row of its version), the one listing per latest version that every request
shares (a new commit, or an expiry elsewhere, is seen at once), a refresh reading only
new versions, and the expiry preview (its own request) against what expire then drops."""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.ui import api, history
from lamina.ui.api import Explorer, spread
from lamina.ui.server import route

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def add(t: lamina.Table, k: int) -> None:
    """One commit of one data file, registered and not written (no request may read it)."""
    t.add_files(pa.table({
        "path": [f"data/f{k:05d}.parquet"], "size": pa.array([1000 + k], pa.int64()),
        "record_count": pa.array([10 + k], pa.int64()), "partition.day": [f"2026-01-{k % 3 + 1:02d}"],
    }), check_files=False)


def long_table(root: str, commits: int) -> lamina.Table:
    t = lamina.create_table(root, SCHEMA, partition_by=["day"])
    for k in range(commits):
        add(t, k)
    return t


def ask(ex: Explorer, what: str) -> dict:
    return route(ex, ["tables", ex.single_key] + ([what] if what else []), {})


def snapshot_rows(t: lamina.Table) -> dict[int, dict]:
    return {r["version"]: r for r in t.inspect.snapshots().to_pylist()}


def test_a_long_history_is_sampled_keeping_every_tagged_and_the_newest_versions(tmp_path, monkeypatch):
    monkeypatch.setattr(api, "HISTORY_POINTS", 8)
    monkeypatch.setattr(api, "HISTORY_NEWEST", 4)
    t = long_table(str(tmp_path / "t"), 40)
    t.tags.create("odd", 13)
    t.tags.create("early", 3)
    snaps = snapshot_rows(t)
    doc = ask(Explorer(t.uri), "history")
    versions = doc["version"]
    assert (doc["total"], doc["sampled"]) == (len(snaps), True)
    assert versions == sorted(set(versions)) and len(versions) < len(snaps)
    assert {3, 13, 0, max(snaps)} <= set(versions)  # tagged ones, the oldest and the newest
    assert set(sorted(snaps)[-4:]) <= set(versions)  # the newest HISTORY_NEWEST
    assert max(np.diff(versions)) <= 2 * (max(snaps) - min(snaps)) / 8  # spread over the whole span
    for i, v in enumerate(versions):  # each point is its version's $snapshots row
        s = snaps[v]
        assert (doc["total_records"][i], doc["total_files"][i], doc["operation"][i], doc["commit_id"][i]) == (
            s["total_records"], s["total_files"], s["operation"], s["commit_id"])
        assert doc["timestamp_ms"][i] == s["timestamp"].timestamp() * 1000


def test_spread_points_stay_put_as_versions_are_added():
    before = spread(list(range(1000)), 50)
    after = spread(list(range(1001)), 50)
    assert set(before) - {999} <= set(after)  # only the newest end moves
    assert 25 <= len(before) <= 53 and before[0] == 0 and before[-1] == 999
    assert spread([5, 9], 50) == [5, 9]


@pytest.mark.slow  # a long history
def test_a_commit_is_seen_at_once_and_a_refresh_reads_only_the_new_versions(tmp_path, monkeypatch):
    t = long_table(str(tmp_path / "t"), 6)
    ex = Explorer(t.uri)
    first = ask(ex, "history")
    assert ask(ex, "")["branches"][0]["versions"] == first["total"] == 7
    read: list[int] = []
    real = history.read_version_file
    monkeypatch.setattr(history, "read_version_file", lambda t, v: read.append(v) or real(t, v))
    add(t, 100)
    second = ask(ex, "history")
    assert second["version"] == sorted(snapshot_rows(t)) and second["total"] == 8  # the new commit is there
    assert second["total_records"][-1] == t.inspect.snapshots()["total_records"].to_pylist()[-1]
    assert read == [t.version]  # and only it was read
    assert ask(ex, "")["branches"][0]["versions"] == 8
    assert ask(ex, "versions")["versions"][0]["version"] == t.version


def test_an_expiry_elsewhere_is_seen_without_a_commit(tmp_path):
    t = long_table(str(tmp_path / "t"), 6)
    ex = Explorer(t.uri)
    assert ask(ex, "history")["total"] == 7
    t.maintenance.expire_versions(retain_last=2, reader_grace=0)  # tombstones the oldest five; no new version
    kept = sorted(snapshot_rows(t))
    assert len(kept) == 2
    assert ask(ex, "history")["version"] == kept
    assert ask(ex, "versions")["total"] == 2 and ask(ex, "")["branches"][0]["versions"] == 2


def listing(root: str) -> dict[str, int]:
    return {os.path.join(d, f): os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.slow  # a long history
def test_expiry_preview_is_what_expire_then_drops(tmp_path, monkeypatch):
    root = str(tmp_path / "t")
    ten_days_ago = time.time() - 10 * 86400
    with monkeypatch.context() as m:  # five commits ten days ago, each replacing the table's rows
        clock = iter(range(100))
        m.setattr("lamina.commit.committer.time.time", lambda: ten_days_ago + next(clock))
        t = lamina.create_table(root, SCHEMA)
        for k in range(5):
            t.overwrite(pa.table({"id": [k], "day": ["d"]}, schema=SCHEMA))
    t.overwrite(pa.table({"id": [9], "day": ["d"]}, schema=SCHEMA))  # now: the versions before it are old
    t.tags.create("keep", 2)
    snaps = snapshot_rows(t)
    ex = Explorer(root)
    (advice,) = ask(ex, "expiry")["advice"]
    facts = advice["facts"]
    before = listing(root)
    lamina.open_table(root).maintenance.expire_versions()  # the default policy the preview runs dry
    after = snapshot_rows(t)
    gone = sorted(set(snaps) - set(after))
    assert facts["expired_versions"] == gone and gone  # exactly the versions expire then drops
    assert (facts["expired_from_ms"], facts["expired_to_ms"]) == (
        snaps[gone[0]]["timestamp"].timestamp() * 1000, snaps[gone[-1]]["timestamp"].timestamp() * 1000)
    freed = {p: n for p, n in before.items() if not os.path.exists(p)}
    assert facts["deleted_bytes"] == sum(freed.values()) > 0  # the bytes of the files it deleted
    assert facts["deleted_files"] + facts["deleted_manifests"] == len(freed)
    assert facts["retained_versions"] == len(snaps) and facts["tags"] == 1
    assert f"drop {len(gone)} of them" in advice["message"] and advice["command"].endswith(f"expire {root}")
