"""The Lamina commit stays the commit point: the view is written after a version lands, a
failure to write it never fails or undoes the commit, a crash mid-way leaves the view at an
older metadata file, and the next commit or a sync catches up however far behind it is.
Also: concurrent syncs, the cost of an append, expiry and orphan cleanup of the view's files."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pyarrow as pa
import pytest

import lamina
from lamina.errors import IcebergUnsupported, StorageError
from lamina.iceberg import flush, read_head, snapshot_id_of, sync
from lamina.iceberg import gc
from lamina.iceberg.metadata_files import metadata_path, parse_metadata_name
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
        flush()  # (the background writer logs the failure)
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
    flush()
    before = set(t.io.list_names("metadata"))
    t.append(rows(5, 60))
    flush()
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


# -- the background writer (lamina.iceberg.writer) ----------------------------------------


class SlowViewSyncs:
    """Wraps the commit hook's sync: each waits for ``release`` (set at once unless
    ``blocked``) and sleeps ``delay``; records the version each sync was given."""

    def __init__(self, monkeypatch, delay: float = 0.0, blocked: bool = False):
        import lamina.table.iceberg_view as hook

        self.release = threading.Event()
        if not blocked:
            self.release.set()
        self.given: list[int] = []
        real = hook.sync

        def slow(*args, **kwargs):
            assert self.release.wait(30), "the test never released the background writer"
            time.sleep(delay)
            committed = kwargs.get("committed")
            if committed is not None:
                self.given.append(committed[1].version)
            return real(*args, **kwargs)

        monkeypatch.setattr(hook, "sync", slow)


def shown_versions(t) -> list[int]:
    """The version of main each of the view's metadata files shows, in the files' order."""
    out = []
    for n in sorted(k for k in map(parse_metadata_name, t.io.list_names("metadata")) if k is not None):
        meta = json.loads(t.io.get(metadata_path(n)))
        main = meta["refs"]["main"]["snapshot-id"]
        out.append(next(int(s["summary"]["lamina-version"]) for s in meta["snapshots"] if s["snapshot-id"] == main))
    return out


def test_a_commit_returns_before_the_view_is_written_and_flush_waits_for_it(tmp_path, monkeypatch):
    t = new_table(tmp_path)
    t.append(rows(3))
    flush()
    slow = SlowViewSyncs(monkeypatch, blocked=True)
    v = t.append(rows(3, 3)).version  # returns with the background writer held
    assert lamina_rows(t) == list(range(6))
    shown = StaticTable.from_metadata(t.uri)  # (a reader of the files: no flush)
    assert shown.metadata.current_snapshot_id != snapshot_id_of(t.metadata.commit_id)
    assert sorted(shown.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2]  # the older version, whole
    slow.release.set()
    flush()
    assert slow.given == [v]
    assert view_rows(t.uri) == list(range(6))
    assert not fsck(t).iceberg


def test_sync_mode_writes_the_view_before_the_commit_returns(tmp_path, monkeypatch):
    t = new_table(tmp_path, **{"iceberg.sync-mode": "sync"})
    slow = SlowViewSyncs(monkeypatch, delay=0.05)
    for i in range(3):
        t.append(rows(2, 2 * i))
        view = StaticTable.from_metadata(t.uri)  # no flush: the commit wrote it
        assert view.metadata.current_snapshot_id == snapshot_id_of(t.metadata.commit_id)
    assert slow.given == [1, 2, 3]


def test_many_quick_appends_coalesce_and_after_flush_every_version_reads_as_lamina(tmp_path, monkeypatch):
    t = new_table(tmp_path, **{"manifest.inline-max-files": "0"})
    slow = SlowViewSyncs(monkeypatch, delay=0.03)  # the writer lags: commits queue behind it
    for i in range(20):
        t.append(rows(3, 3 * i))
        if i % 7 == 6:
            t.delete(f"id = {3 * i}")
    flush()
    assert len(slow.given) < t.version  # commits that found an update waiting joined it
    assert slow.given == sorted(slow.given) and slow.given[-1] == t.version
    for h in t.history():
        vm = t.log.load(h["version"])
        assert view_rows(t.uri, snapshot_id_of(vm.commit_id)) == lamina_rows(t, h["version"]), h["version"]
    assert view_rows(t.uri) == lamina_rows(t)
    assert not fsck(t).iceberg and not gc.referenced(t.io).missing


def test_the_background_writer_never_goes_back_nor_loses_the_newest_version(tmp_path, monkeypatch):
    """Writers in several threads of one process: the metadata files show main's versions in
    increasing order, and the last one shows the newest version, whatever order the commits'
    hooks reached the writer in."""
    t = new_table(tmp_path)
    SlowViewSyncs(monkeypatch, delay=0.01)
    writers = [lamina.open_table(t.uri) for _ in range(3)]
    errors: list[Exception] = []

    def work(w, k):
        try:
            for j in range(5):
                w.append(rows(1, 100 + 10 * k + j))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w, k)) for k, w in enumerate(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    flush()
    t.refresh()
    shown = shown_versions(t)
    assert shown == sorted(shown) and len(set(shown)) == len(shown)
    assert shown[-1] == t.version
    assert view_rows(t.uri) == lamina_rows(t)


CHILD = """
import os, signal, sys, threading
import pyarrow as pa
import lamina
import lamina.table.iceberg_view as hook
t = lamina.open_table(sys.argv[1])
if sys.argv[2] == "kill":
    hook.sync = lambda *a, **k: threading.Event().wait()  # the background write never happens
t.append(pa.table({"id": pa.array([100, 101], pa.int64()), "v": ["a", "b"]}))
print(t.version, flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)  # killed after the commit returned
"""


def _child(t, how: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", CHILD, t.uri, how], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.slow  # starts a process
def test_a_process_killed_before_the_background_write_leaves_a_whole_view_caught_up_later(tmp_path):
    t = new_table(tmp_path)
    t.append(rows(3))
    flush()
    before = read_head(t.io).number
    done = _child(t, "kill")
    assert done.returncode == -signal.SIGKILL, done.stderr
    killed_version = int(done.stdout.split()[0])
    t.refresh()
    assert t.version == killed_version and lamina_rows(t) == [0, 1, 2, 100, 101]  # the commit landed
    assert read_head(t.io).number == before and view_rows(t.uri) == [0, 1, 2]  # the view: older, whole
    assert not gc.referenced(t.io).missing
    assert any(f"shows version {killed_version - 1}" in p for p in fsck(t).iceberg)
    t.append(rows(1, 3))  # the next commit catches up over the version the killed process left
    flush()
    for h in t.history():
        vm = t.log.load(h["version"])
        assert view_rows(t.uri, snapshot_id_of(vm.commit_id)) == lamina_rows(t, h["version"])
    assert not fsck(t).iceberg


@pytest.mark.slow  # starts a process
def test_a_process_killed_before_the_background_write_is_caught_up_by_sync(tmp_path):
    t = new_table(tmp_path)
    t.append(rows(3))
    done = _child(t, "kill")
    assert done.returncode == -signal.SIGKILL, done.stderr
    t.refresh()
    assert t.sync_iceberg().snapshots_added == 1
    assert view_rows(t.uri) == lamina_rows(t) == [0, 1, 2, 100, 101]


@pytest.mark.slow  # starts a process
def test_process_exit_waits_for_the_background_writer(tmp_path):
    t = new_table(tmp_path)
    done = _child(t, "exit")
    assert done.returncode == 0, done.stderr
    t.refresh()
    assert StaticTable.from_metadata(t.uri).metadata.current_snapshot_id == snapshot_id_of(t.metadata.commit_id)


def test_disabling_after_quick_appends_freezes_the_view_at_the_version_before(tmp_path, monkeypatch):
    t = new_table(tmp_path)
    SlowViewSyncs(monkeypatch, delay=0.03)
    for i in range(5):
        t.append(rows(1, i))
    last = t.version
    t.set_iceberg_enabled(False)  # waits for the queued updates first
    flush()
    assert shown_versions(t)[-1] == last
    assert view_rows(t.uri) == lamina_rows(t, last)


def test_closing_a_sql_catalog_waits_for_the_names_of_its_tables_views(tmp_path, monkeypatch):
    sql_catalog = pytest.importorskip("pyiceberg.catalog.sql")
    SlowViewSyncs(monkeypatch, delay=0.05)
    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/catalog.db")
    cat.create_namespace("shop")
    t = cat.create_table("shop.orders", SCHEMA, properties={"iceberg.enabled": "true"})
    for i in range(3):
        t.append(rows(1, i))
    cat.close()  # the queued updates name their metadata files before the database closes
    ice = sql_catalog.SqlCatalog("lamina", uri=f"sqlite:///{tmp_path}/catalog.db")
    assert sorted(ice.load_table("shop.orders").scan().to_arrow().column("id").to_pylist()) == [0, 1, 2]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_never_waits_for_its_parents_queued_updates(tmp_path, monkeypatch):
    t = new_table(tmp_path)
    flush()
    slow = SlowViewSyncs(monkeypatch, blocked=True)
    t.append(rows(2))  # queued, the writer held
    pid = os.fork()
    if pid == 0:  # the child: a flush and a read of the view return (the parent's update is the parent's)
        try:
            flush()
            os._exit(0 if read_head(t.io) is not None else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    deadline = time.time() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.time() > deadline:
            break
        time.sleep(0.05)
    if not done:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    slow.release.set()
    flush()
    assert done and os.waitstatus_to_exitcode(status) == 0
    assert view_rows(t.uri) == [0, 1]
