"""The Lamina commit stays the commit point: the view is written after a version lands, a
failure to write it never fails or undoes the commit, a crash mid-way leaves the view at an
older metadata file, and the next commit or a sync catches up however far behind it is.
Also: concurrent syncs, the cost of an append, expiry and orphan cleanup of the view's files."""

from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta

import pyarrow as pa
import pytest

import lamina
from lamina.errors import IcebergUnsupported, StorageError
from lamina.iceberg import flush, read_head, snapshot_id_of, sync
from lamina.iceberg import gc
from lamina.iceberg.metadata_files import parse_metadata_name
from lamina.io import FileIO
from lamina.maintenance import fsck

pyiceberg_table = pytest.importorskip("pyiceberg.table", reason="pyiceberg is in the test extra")
StaticTable = pyiceberg_table.StaticTable

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(start, start + n)]})


def view_rows(location: str, snapshot_id: int | None = None) -> list[int]:
    flush()  # the view is written in the background: what this process committed lands first
    view = StaticTable.from_metadata(location)
    scan = view.scan() if snapshot_id is None else view.scan(snapshot_id=snapshot_id)
    return sorted(scan.to_arrow().column("id").to_pylist())


def lamina_rows(t, version=None) -> list[int]:
    return sorted(t.scan(version=version).to_arrow().column("id").to_pylist())


def new_table(tmp_path, **props):
    return lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"iceberg.enabled": "true", **props})


class FailViewWrites:
    """Makes every write under metadata/ fail (an unreachable store, a full disk), until stopped."""

    def __init__(self, monkeypatch, calls=("put_new", "put_if_absent", "put")):
        self.on = True
        for name in calls:
            original = getattr(FileIO, name)

            def failing(io, path, data, _original=original):
                if self.on and path.startswith("metadata/"):
                    raise StorageError(f"injected: cannot write {path}")
                return _original(io, path, data)

            monkeypatch.setattr(FileIO, name, failing)


def test_a_failed_view_write_never_fails_the_commit_and_the_next_commit_catches_up(tmp_path, monkeypatch, caplog):
    t = new_table(tmp_path)
    t.append(rows(3))
    before = read_head(t.io).number
    fail = FailViewWrites(monkeypatch)
    with caplog.at_level(logging.WARNING):
        v = t.append(rows(2, 3)).version
        t.delete("id = 0")
    assert v == 2 and lamina_rows(t) == [1, 2, 3, 4]  # committed, and readable
    assert "Iceberg view" in caplog.text and "injected" in caplog.text
    assert read_head(t.io).number == before  # the view stayed where it was
    report = fsck(t)
    assert report.ok and any("shows version 1" in p for p in report.iceberg)
    fail.on = False
    t.append(rows(1, 5))  # the next commit brings every version it missed
    head = read_head(t.io).metadata
    assert head["refs"]["main"]["snapshot-id"] == snapshot_id_of(t.metadata.commit_id)
    for h in t.history():
        vm = t.log.load(h["version"])
        assert view_rows(t.uri, snapshot_id_of(vm.commit_id)) == lamina_rows(t, h["version"])
    assert not fsck(t).iceberg


def test_a_crash_after_the_manifests_leaves_the_older_view_and_sync_catches_up(tmp_path, monkeypatch):
    t = new_table(tmp_path)
    t.append(rows(3))
    old = read_head(t.io)
    # the metadata file's put fails: manifests and manifest lists are written, no metadata file
    fail = FailViewWrites(monkeypatch, calls=("put_if_absent",))
    t.append(rows(3, 3))
    t.append(rows(3, 6))
    assert read_head(t.io).number == old.number
    assert view_rows(t.uri) == [0, 1, 2]  # readers see the older version, whole
    fail.on = False
    result = t.sync_iceberg()
    assert result.snapshots_added == 2
    assert view_rows(t.uri) == list(range(9))
    # what the failed attempts wrote is garbage, collected once old enough; the view stays whole
    garbage = gc.collect(t.io, older_than_ms=0)
    assert garbage.files and all(p.startswith("metadata/") for p in garbage.files)
    assert view_rows(t.uri) == list(range(9))
    assert not gc.referenced(t.io).missing


def test_a_view_many_versions_behind_is_caught_up_by_sync(tmp_path, monkeypatch):
    t = new_table(tmp_path)
    fail = FailViewWrites(monkeypatch)
    for i in range(8):
        t.append(rows(2, 2 * i))
    t.delete("id < 3")
    t.tags.create("before-update")
    t.update("id = 7", {"v": "'x'"})
    fail.on = False
    t.sync_iceberg()
    view = StaticTable.from_metadata(t.uri)
    assert len(view.metadata.snapshots) == t.version + 1
    for h in t.history():
        vm = t.log.load(h["version"])
        assert view_rows(t.uri, snapshot_id_of(vm.commit_id)) == lamina_rows(t, h["version"])
    assert view.metadata.refs["before-update"].snapshot_id == snapshot_id_of(t.tags.get("before-update").version.commit_id)


def test_concurrent_syncs_each_land_a_metadata_file_and_none_is_lost(tmp_path):
    t = new_table(tmp_path)
    for i in range(4):
        t.append(rows(1, i))
    writers = [lamina.open_table(t.uri) for _ in range(4)]
    errors = []

    def work(w, k):
        try:
            for j in range(3):
                w.append(rows(1, 100 + 10 * k + j))
                sync(w.io, w.log, retained=True)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w, k)) for k, w in enumerate(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    t.refresh()
    sync(t.io, t.log)
    head = read_head(t.io)
    numbers = sorted(parse_metadata_name(n) for n in t.io.list_names("metadata") if parse_metadata_name(n) is not None)
    assert numbers == list(range(1, head.number + 1))  # put-if-absent: consecutive, none overwritten
    assert head.metadata["refs"]["main"]["snapshot-id"] == snapshot_id_of(t.metadata.commit_id)
    assert view_rows(t.uri) == lamina_rows(t)


def test_an_append_writes_one_manifest_and_one_manifest_list(tmp_path):
    """Cost follows the change: every unchanged manifest is carried by reference."""
    t = new_table(tmp_path, **{"manifest.inline-max-files": "0"})
    for i in range(12):
        t.append(rows(5, 5 * i))
    before = set(t.io.list_names("metadata"))
    t.append(rows(5, 60))
    new = set(t.io.list_names("metadata")) - before
    kinds = sorted(n.split("-")[0] for n in new if not n.startswith("v") and n != "version-hint.text")
    assert kinds == ["m", "snap"]
    rows_ = StaticTable.from_metadata(t.uri).current_snapshot().manifests(StaticTable.from_metadata(t.uri).io)
    assert len(rows_) >= 2  # the leaves before are still listed, carried


def test_expiry_drops_expired_snapshots_and_frees_only_their_files(tmp_path):
    t = new_table(tmp_path)
    for i in range(6):
        t.append(rows(2, 2 * i))
    t.delete("id < 4")
    t.tags.create("keep", version=2)
    lists_before = {s["manifest-list"] for s in read_head(t.io).metadata["snapshots"]}
    t.maintenance.expire_versions(retain_last=2, older_than=timedelta(0), reader_grace=timedelta(0))
    meta = read_head(t.io).metadata
    kept = {int(s["summary"]["lamina-version"]) for s in meta["snapshots"]}
    assert kept == {2, t.version - 1, t.version}
    lists_after = {s["manifest-list"] for s in meta["snapshots"]}
    for gone in lists_before - lists_after:
        assert not t.io.exists(gone[len(t.uri) + 1:])
    assert not gc.referenced(t.io).missing
    assert view_rows(t.uri) == lamina_rows(t)
    assert view_rows(t.uri, meta["refs"]["keep"]["snapshot-id"]) == sorted(t.scan(version="keep").to_arrow().column("id").to_pylist())


def test_orphan_cleanup_never_deletes_what_the_view_needs(tmp_path):
    t = new_table(tmp_path)
    for i in range(4):
        t.append(rows(2, 2 * i))
    t.delete("id = 1")
    t.maintenance.remove_orphans(older_than=timedelta(0), allow_short_age=True)
    assert not gc.referenced(t.io).missing
    assert view_rows(t.uri) == lamina_rows(t)
    assert not fsck(t).unreferenced


def test_enabling_a_table_with_a_type_iceberg_lacks_commits_nothing(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("u", pa.uint64())]))
    with pytest.raises(IcebergUnsupported, match="'u'"):
        t.set_iceberg_enabled()
    assert t.refresh().version == 0 and read_head(t.io) is None


def test_enable_later_writes_every_retained_version_and_disable_stops_the_view(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(3))
    t.append(rows(3, 3))
    v = t.set_iceberg_enabled().version
    meta = read_head(t.io).metadata
    assert len(meta["snapshots"]) == v + 1
    assert json.loads(meta["properties"]["schema.name-mapping.default"])[0]["names"] == ["id"]
    t.set_iceberg_enabled(False)
    shown = read_head(t.io).number
    t.append(rows(1, 6))
    assert read_head(t.io).number == shown
    assert any("no longer enables" in p for p in fsck(t).iceberg)
