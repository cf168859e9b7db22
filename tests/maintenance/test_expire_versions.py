"""Version expiry through Table.expire_versions: the reader grace period, dry runs, older_than,
and expiry racing writers."""

from __future__ import annotations

import threading

import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import InvalidArgument
from lamina.maintenance import fsck

from support.grouped import NOW, SCHEMA, batch, ids, new_table, on_disk


@pytest.fixture
def table(tmp_path):
    yield new_table(tmp_path)
    flush_hints()


def test_reader_grace_keeps_recent_versions_and_dry_run_changes_nothing(table):
    for i in range(5):
        table.append(batch([i]))
    table.overwrite(batch([99]))
    held = table.maintenance.expire_versions(retain_last=1)  # default grace: 1 hour
    assert held.expired_versions == [] and held.held_by_reader_grace
    before = on_disk(table.uri)
    dry = table.maintenance.expire_versions(retain_last=1, reader_grace=NOW, dry_run=True)
    assert on_disk(table.uri) == before
    assert dry.expired_versions == [0, 1, 2, 3, 4, 5]
    real = table.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert (real.expired_versions, sorted(real.deleted_files), sorted(real.deleted_manifests)) == (
        dry.expired_versions, sorted(dry.deleted_files), sorted(dry.deleted_manifests))
    assert real.deleted_bytes == dry.deleted_bytes > 0
    # expired versions' files stay (keeping their slots taken) under one range record
    records = {r.path for r in table.log.slot_records()}
    assert len(records) == 1
    assert on_disk(table.uri) == before - set(real.deleted_files) - set(real.deleted_manifests) | records
    slots = table.log.scan_slots()
    assert table.log.list_versions() == [6] and slots.strays == [0, 1, 2, 3, 4, 5] and slots.freed == [(0, 5)]
    assert len(real.deleted_files) == 5 and ids(table.to_arrow()) == [99]


def test_older_than_keeps_what_time_travel_after_the_cutoff_needs(table):
    table.append(batch([1]))
    table.append(batch([2]))
    table.append(batch([3]))
    # Version 2 is current at the cutoff: timestamps rise by at least 1 ms a version, and an
    # append can take less than one, so the cutoff is taken just before version 3's.
    cutoff = table.metadata.timestamp_ms - 1
    rep = table.maintenance.expire_versions(older_than=cutoff, reader_grace=NOW)
    assert rep.expired_versions == [0, 1]  # superseded before the cutoff
    assert ids(table.scan(timestamp=cutoff).to_arrow()) == [1, 2]
    with pytest.raises(InvalidArgument):
        table.maintenance.expire_versions(retain_last=0)


@pytest.mark.slow  # racing threads
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
        expired += len(exp.maintenance.expire_versions(retain_last=2, reader_grace=NOW).expired_versions)
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
    exp.maintenance.expire_versions(retain_last=2, reader_grace=NOW)
    for v in t.log.list_versions():  # every surviving version reads completely
        assert t.scan(version=v).to_arrow().num_rows == t.log.load(v).summary["total-records"]
    final = ids(t.refresh().to_arrow())
    for w in range(writers):  # each writer's last overwrite kept its partition + later appends
        mine = [i for i in final if i // 1000 == w]
        assert mine == [w * 1000 + i for i in range(last_overwrite[w], done_ids[w] + 1)]
    assert fsck(t).ok
