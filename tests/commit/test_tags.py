"""Tags, rollback, system tables, expiry, orphan cleanup, automatic tags, CLI (issue 5)."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli.main import app
from lamina.commit import flush_hints
from lamina.errors import (
    CorruptMetadata,
    InvalidArgument,
    InvalidTagName,
    TagAlreadyExists,
    TagNotFound,
    VersionNotFound,
)
from lamina.maintenance import fsck
from lamina.spec.layout import TAGS_DIR
from lamina.table.inflight import inflight, new_write_id

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.string())])
NOW = timedelta(0)


def batch(ids, grp="a") -> pa.Table:
    return pa.table({"id": list(ids), "grp": [grp] * len(ids)}, schema=SCHEMA)


def ids(t) -> list[int]:
    return sorted(t.column("id").to_pylist())


def on_disk(root: str, sub: str = "") -> set[str]:
    out = set()
    for d, _, fs in os.walk(os.path.join(root, sub)):
        out.update(os.path.relpath(os.path.join(d, f), root) for f in fs)
    return out


@pytest.fixture
def table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    yield t
    flush_hints()


# -- tags ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "123", "-7", "a/b", "..", "x..y", ".hidden", "bad\x01name", "tab\tname", "a b", "x" * 201, "é"]
)
def test_bad_tag_names_are_refused_and_nothing_is_written(table, name):
    with pytest.raises(InvalidTagName):
        table.create_tag(name)
    assert not os.path.exists(os.path.join(table.uri, TAGS_DIR)) or not os.listdir(os.path.join(table.uri, TAGS_DIR))


def test_tag_create_is_put_if_absent_and_reads_everywhere(table):
    table.append(batch(range(3)))
    tag = table.create_tag("v1.0")
    assert tag.tagged_version == 1
    table.append(batch(range(3, 5)))
    with pytest.raises(TagAlreadyExists, match="replace_tag"):
        table.create_tag("v1.0")
    assert table.tag("v1.0").tagged_version == 1  # not overwritten
    assert ids(table.scan(tag="v1.0").to_arrow()) == [0, 1, 2]
    assert ids(table.scan(version="v1.0").to_arrow()) == [0, 1, 2]  # versionAsOf takes a tag name
    assert ids(lamina.open_table(table.uri, tag="v1.0").to_arrow()) == [0, 1, 2]
    assert [t.name for t in table.tags()] == ["v1.0"]
    with pytest.raises(TagNotFound):
        table.scan(tag="nope")
    with pytest.raises(InvalidArgument):
        table.scan(version=1, tag="v1.0")


def test_replace_and_rename_tag(table):
    table.append(batch([1]))
    table.create_tag("prod")
    table.append(batch([2]))
    table.replace_tag("prod")
    assert table.tag("prod").tagged_version == 2
    table.rename_tag("prod", "prod-old")
    assert [t.name for t in table.tags()] == ["prod-old"]
    with pytest.raises(TagNotFound):
        table.tag("prod")


def test_tag_outlives_its_expired_version_and_deleting_it_frees_only_its_files(table):
    table.append(batch(range(10)))
    table.create_tag("snap")  # version 1
    table.overwrite(batch(range(100, 102)))
    table.append(batch([200]))
    before = on_disk(table.uri, "data")
    rep = table.expire_versions(retain_last=1, reader_grace=NOW)
    assert rep.expired_versions == [0, 1, 2]
    assert rep.kept_for_tags == 1 and rep.deleted_files == []  # the tagged file stays
    assert ids(table.scan(tag="snap").to_arrow()) == list(range(10))
    with pytest.raises(VersionNotFound):
        table.scan(version=1)
    assert fsck(table).ok
    freed = table.delete_tag("snap")
    assert len(freed.deleted_files) == 1 and freed.deleted_bytes > 0
    assert on_disk(table.uri, "data") == before - set(freed.deleted_files)
    assert ids(table.refresh().to_arrow()) == [100, 101, 200]


def test_timestamp_before_every_retained_version_falls_back_to_the_newest_tag(table):
    table.append(batch([1]))
    table.create_tag("first")
    table.append(batch([2]))
    t1 = table.metadata.timestamp_ms
    table.append(batch([3]))
    table.append(batch([4]))
    table.expire_versions(retain_last=1, reader_grace=NOW)
    assert ids(table.scan(timestamp=t1).to_arrow()) == [1]  # versions <= t1 are gone: tag 'first'
    with pytest.raises(VersionNotFound):
        table.scan(timestamp=0)


def test_expired_tags_are_deleted_by_expiry(table):
    table.append(batch([1]))
    table.create_tag("short", expires_at=datetime.now(timezone.utc) - timedelta(seconds=1))
    table.create_tag("long", expires_at=timedelta(days=30))
    rep = table.expire_versions(retain_last=5, reader_grace=NOW)
    assert rep.expired_tags == ["short"]
    assert [t.name for t in table.tags()] == ["long"]


def test_corrupt_tag_file_is_a_clear_error(table):
    table.append(batch([1]))
    table.create_tag("ok")
    with open(os.path.join(table.uri, TAGS_DIR, "bad.json"), "wb") as f:
        f.write(b'{"name": "bad", "tagged_version": 3')
    with pytest.raises(CorruptMetadata, match="tag file"):
        table.scan(tag="bad")


# -- rollback -----------------------------------------------------------------------------


def test_rollback_is_a_new_version_and_can_be_rolled_back(table):
    table.append(batch([1]))
    table.append(batch([2]))
    table.overwrite(batch([9]))
    v = table.rollback(2)
    assert v == 4 and ids(table.to_arrow()) == [1, 2]
    assert table.metadata.operation == "rollback" and table.metadata.summary["rollback-to"] == 2
    assert ids(table.scan(version=3).to_arrow()) == [9]  # history kept
    table.rollback(3)  # undo the rollback
    assert ids(table.to_arrow()) == [9]
    table.create_tag("one")
    table.append(batch([5]))
    table.rollback(tag="one")
    assert ids(table.to_arrow()) == [9]
    with pytest.raises(InvalidArgument):
        table.rollback()


def test_destructive_rollback_drops_later_versions_but_keeps_their_tags(table):
    table.append(batch([1]))  # v1
    table.append(batch([2]))  # v2
    table.create_tag("two")
    table.append(batch([3]))  # v3
    ts3 = table.metadata.timestamp_ms
    table.append(batch([4]))  # v4
    v = table.rollback(1, destructive=True)
    assert v == 5
    assert table.log.list_versions() == [0, 1, 5]
    assert ids(table.to_arrow()) == [1]
    assert ids(table.scan(tag="two").to_arrow()) == [1, 2]  # the tag's files survive
    assert ids(table.scan(timestamp=ts3).to_arrow()) == [1]  # time travel across the gap
    assert fsck(table).ok
    # the files of versions 3 and 4 only are gone: data left = v1's file and the tag's
    assert len(on_disk(table.uri, "data")) == 2


# -- system tables ------------------------------------------------------------------------


def test_system_tables(table):
    table.append(batch(range(4)))
    table.append(batch(range(4, 6), "b"))
    table.create_tag("t1", 1)
    snaps = table.system_table("$snapshots")
    assert snaps.column("version").to_pylist() == [0, 1, 2]
    assert snaps.column("operation").to_pylist() == ["create", "append", "append"]
    assert snaps.column("parent_version").to_pylist() == [None, 0, 1]
    tags = table.system_table("$tags").to_pylist()
    assert [(r["tag_name"], r["tagged_version"], r["record_count"]) for r in tags] == [("t1", 1, 4)]
    files = table.system_table("$files")
    assert files.num_rows == 2 and sorted(files.column("record_count").to_pylist()) == [2, 4]
    assert files.column("lower.id").to_pylist() in ([0, 4], [4, 0])
    assert table.files(tag="t1").num_rows == 1
    m = table.system_table("$manifests")
    assert m.column("kind").to_pylist()[0] == "root" and m.column("file_count").to_pylist()[0] == 2
    with pytest.raises(InvalidArgument, match=r"\$snapshots"):
        table.system_table("$nope")


# -- expiry -------------------------------------------------------------------------------


def test_reader_grace_keeps_recent_versions_and_dry_run_changes_nothing(table):
    for i in range(5):
        table.append(batch([i]))
    table.overwrite(batch([99]))
    held = table.expire_versions(retain_last=1)  # default grace: 1 hour
    assert held.expired_versions == [] and held.held_by_reader_grace
    before = on_disk(table.uri)
    dry = table.expire_versions(retain_last=1, reader_grace=NOW, dry_run=True)
    assert on_disk(table.uri) == before
    assert dry.expired_versions == [0, 1, 2, 3, 4, 5]
    real = table.expire_versions(retain_last=1, reader_grace=NOW)
    assert (real.expired_versions, sorted(real.deleted_files), sorted(real.deleted_manifests)) == (
        dry.expired_versions, sorted(dry.deleted_files), sorted(dry.deleted_manifests))
    assert real.deleted_bytes == dry.deleted_bytes > 0
    # expired versions' files stay, as tombstones that keep their slots taken
    assert on_disk(table.uri) == before - set(real.deleted_files) - set(real.deleted_manifests)
    assert table.log.list_versions() == [6] and sorted(table.log.scan_slots().tombstones) == [0, 1, 2, 3, 4, 5]
    assert len(real.deleted_files) == 5 and ids(table.to_arrow()) == [99]


def test_older_than_keeps_what_time_travel_after_the_cutoff_needs(table):
    table.append(batch([1]))
    table.append(batch([2]))
    cutoff = table.metadata.timestamp_ms + 1  # version 2 is current at the cutoff
    table.append(batch([3]))
    rep = table.expire_versions(older_than=cutoff, reader_grace=NOW)
    assert rep.expired_versions == [0, 1]  # superseded before the cutoff
    assert ids(table.scan(timestamp=cutoff).to_arrow()) == [1, 2]
    with pytest.raises(InvalidArgument):
        table.expire_versions(retain_last=0)


def test_expiry_racing_writers_loses_no_commit_and_deletes_nothing_needed(tmp_path):
    uri = str(tmp_path / "race")
    # tiny slot chunks freed at once: racing writers' late puts land in freed slots too
    props = {"manifest.inline-max-files": 4, "manifest.leaf-target-files": 8,
             "version.slot-chunk-size": 2, "expire.slot-retention-ms": 0}
    lamina.create_table(uri, SCHEMA, properties=props)
    min_per_writer, max_per_writer, writers = 20, 400, 3
    committed: list[int] = []
    last_overwrite: dict[int, int] = {}
    done_ids: dict[int, int] = {}
    errors: list[BaseException] = []
    enough = threading.Event()  # set once expiry has run against live writers

    def write(w: int) -> None:
        try:
            t = lamina.open_table(uri)
            for i in range(max_per_writer):  # bounded: stops once the race has happened
                if i >= min_per_writer and enough.is_set():
                    break
                if i % 10 == 9:
                    t.overwrite(batch([w * 1000 + i], f"w{w}"), where=f"grp = 'w{w}'")
                    last_overwrite[w] = i
                else:
                    t.append(batch([w * 1000 + i], f"w{w}"))
                committed.append(t.version)
                done_ids[w] = i
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    exp = lamina.open_table(uri)
    rounds = expired = 0
    while any(th.is_alive() for th in threads) and rounds < 5000:
        expired += len(exp.expire_versions(retain_last=2, reader_grace=NOW).expired_versions)
        if expired >= 10:
            enough.set()
        rounds += 1
    enough.set()
    for th in threads:
        th.join()
    assert not errors, errors
    assert expired > 0, "the expiry never ran concurrently with the writers"
    assert len(set(committed)) == len(committed)  # every commit acknowledged once, no slot twice
    t = lamina.open_table(uri)
    assert t.version == len(committed)  # ... and none lost
    exp.expire_versions(retain_last=2, reader_grace=NOW)
    for v in t.log.list_versions():  # every surviving version reads completely
        assert t.scan(version=v).to_arrow().num_rows == t.log.load(v).summary["total-records"]
    final = ids(t.refresh().to_arrow())
    for w in range(writers):  # each writer's last overwrite kept its partition + later appends
        mine = [i for i in final if i // 1000 == w]
        assert mine == [w * 1000 + i for i in range(last_overwrite[w], done_ids[w] + 1)]
    assert fsck(t).ok


# -- orphans ------------------------------------------------------------------------------


def test_remove_orphans_spares_young_and_in_flight_files(table):
    table.append(batch([1]))
    data_dir = os.path.join(table.uri, "data")
    orphan = os.path.join(data_dir, "deadbeefdeadbeef-000000000000.parquet")
    with open(orphan, "wb") as f:
        f.write(b"x" * 10)
    wid = new_write_id()
    running = os.path.join(data_dir, f"spark-{wid}", "part-0.parquet")
    os.makedirs(os.path.dirname(running))
    with open(running, "wb") as f:
        f.write(b"y")
    with pytest.raises(InvalidArgument, match="shorter than"):
        table.remove_orphans(timedelta(hours=1))
    young = table.remove_orphans()  # default: older than 3 days
    assert young.orphans == [] and young.kept_young == 2
    with inflight(table.io, wid):
        rep = table.remove_orphans(NOW, allow_short_age=True)
        assert rep.orphans == ["data/deadbeefdeadbeef-000000000000.parquet"] and rep.kept_in_flight == 1
        assert not os.path.exists(orphan) and os.path.exists(running)
    rep = table.remove_orphans(NOW, allow_short_age=True)  # the write finished without committing
    assert rep.orphans == [f"data/spark-{wid}/part-0.parquet"]
    assert ids(table.to_arrow()) == [1] and fsck(table).ok


# -- automatic tags -----------------------------------------------------------------------


def test_automatic_daily_tags_with_retention(tmp_path, monkeypatch):
    day = datetime(2026, 11, 1, 12, tzinfo=timezone.utc).timestamp()
    clock = {"now": day - 3600}
    monkeypatch.setattr("lamina.commit.committer.time.time", lambda: clock["now"])  # the commit clock
    t = lamina.create_table(str(tmp_path / "auto"), SCHEMA, properties={"tag.auto-create": "daily", "tag.auto-retain-max": 2})
    for d in range(4):  # two commits a day for four days
        for k in range(2):
            clock["now"] = day + d * 86400 + k * 60
            t.append(batch([d * 10 + k]))
    names = [tg.name for tg in t.tags()]
    assert names == ["2026-11-02", "2026-11-03"]  # 11-01 expired by retain-max; 11-04 not over yet
    assert all(tg.automatic for tg in t.tags())
    assert ids(t.scan(tag="2026-11-03").to_arrow()) == [0, 1, 10, 11, 20, 21]


# -- CLI ----------------------------------------------------------------------------------


def test_cli_tag_rollback_expire_vacuum(table):
    runner = CliRunner()
    table.append(batch([1]))
    table.append(batch([2]))
    r = runner.invoke(app, ["tag", "create", table.uri, "gold", "--version", "1"])
    assert r.exit_code == 0, r.output
    assert "gold" in runner.invoke(app, ["tag", "list", table.uri]).output
    assert runner.invoke(app, ["tag", "create", table.uri, "gold"]).exit_code == 2  # exists
    assert runner.invoke(app, ["tag", "create", table.uri, "12"]).exit_code == 2  # numeric
    r = runner.invoke(app, ["rollback", table.uri, "gold"])
    assert r.exit_code == 0 and "version 3" in r.output
    assert "1 files" in runner.invoke(app, ["files", table.uri, "--version", "gold"]).output
    r = runner.invoke(app, ["expire", table.uri, "--retain-last", "1", "--reader-grace", "0s", "--dry-run"])
    assert r.exit_code == 0 and "would expire 3 versions" in r.output, r.output
    assert lamina.open_table(table.uri).log.list_versions() == [0, 1, 2, 3]
    r = runner.invoke(app, ["expire", table.uri, "--retain-last", "1", "--reader-grace", "0s"])
    assert r.exit_code == 0 and "expire 3 versions" in r.output
    assert runner.invoke(app, ["system", table.uri, "snapshots"]).exit_code == 0
    r = runner.invoke(app, ["vacuum", table.uri, "--dry-run"])
    assert r.exit_code == 0 and "0 orphans" in r.output
    assert runner.invoke(app, ["tag", "delete", table.uri, "gold"]).exit_code == 0
    assert ids(lamina.open_table(table.uri).to_arrow()) == [1]
