"""The commit guarantee: an acknowledged commit is in the history of every later latest
version, however late its conditional put lands and whatever maintenance runs meanwhile.

A writer's version put is held (support.faults.DelayedPutsIO: the put lands only when
the test releases it) while other writers commit and expiry records the slot it targets
as expired (its file stays until the record is older than the slot retention), or frees
it. The late put must then either fail against the slot's file, or land in the freed
slot and be withdrawn by its own writer;
either way the writer rebases and the commit it acknowledges reads back from the latest
version, exactly once. The same with a real process paused by SIGSTOP across an expiry.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
from datetime import timedelta

import pytest

import lamina
from lamina.commit import flush_hints
from lamina.maintenance import fsck
from lamina.spec.layout import version_path
from lamina.spec.slot import FREED_DIR
from lamina.timeutil import now_ms

from support import workers
from support.delayed_writer import FREEING, DelayedWriter, rows_of, want

NOW = timedelta(0)


def _table(tmp_path, props: dict | None = None):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema(), properties=props)
    t.append(workers.batch(0, 0, 2))
    return uri, t


def _check_history(uri: str, expected: collections.Counter) -> None:
    """The latest version holds exactly ``expected``; every retained version reads; fsck is clean
    and no file is left in a freed slot."""
    flush_hints()
    t = lamina.open_table(uri)
    assert rows_of(t.to_arrow()) == expected
    for v in t.log.list_versions():
        assert t.scan(version=v).to_arrow().num_rows == t.log.load(v).summary["total-records"]
    report = fsck(t)
    assert report.ok, (report.missing, report.errors)
    assert t.log.scan_slots().freeable_strays(now_ms(), t.metadata.properties) == []


def test_late_put_into_an_expired_slot_finds_it_taken_and_rebases(tmp_path):
    uri, t = _table(tmp_path)
    w = DelayedWriter(uri, 1, 0)  # decided to commit version 2 on base 1; its put stalls
    assert w.base == 1
    t.append(workers.batch(0, 1, 2))  # version 2: the slot w aims at
    t.append(workers.batch(0, 2, 2))
    t.append(workers.batch(0, 3, 2))
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert 2 in rep.expired_versions and rep.freed_slots == 0  # the records are too young to free
    assert t.log.slot_record(2, 1000) is not None  # expired: recorded ...
    assert os.path.exists(os.path.join(uri, version_path(2)))  # ... and its file keeps the slot taken
    with pytest.raises(lamina.errors.VersionNotFound):
        lamina.open_table(uri).scan(version=2)
    v = w.land()
    assert v == 5  # lost slot 2 to the expired version's file, rebased onto 4
    _check_history(uri, want((0, 0), (0, 1), (0, 2), (0, 3), (1, 0)))


def test_late_put_into_a_freed_slot_is_withdrawn_and_rebased(tmp_path):
    uri, t = _table(tmp_path, FREEING)
    w = DelayedWriter(uri, 1, 0)  # aims at slot 2
    for s in range(1, 6):
        t.append(workers.batch(0, s, 2))  # versions 2..6
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert rep.expired_versions == [0, 1, 2, 3, 4, 5]
    assert rep.freed_slots == 6  # a record per chunk (0-1, 2-3, 4-5), then the slot files deleted
    assert not os.path.exists(os.path.join(uri, version_path(2)))
    assert [(r.first, r.last) for r in t.log.slot_records()] == [(0, 1), (2, 3), (4, 5)]
    assert sorted(os.listdir(os.path.join(uri, FREED_DIR))) == [f"{a:020d}-{a + 1:020d}" for a in (0, 2, 4)]
    v = w.land()  # lands in the freed slot 2, sees the record, withdraws, rebases
    assert v == 7
    assert not os.path.exists(os.path.join(uri, version_path(2)))
    _check_history(uri, want((0, 0), *((0, s) for s in range(1, 6)), (1, 0)))
    with pytest.raises(lamina.errors.VersionNotFound):
        lamina.open_table(uri).scan(version=2)


def test_a_put_that_landed_then_stalled_past_its_expiry_and_freeing_is_acknowledged_once(tmp_path):
    """The writer's put lands in an empty slot (its first occupant); before the writer looks up
    the slot's records, others commit past it and expiry records the slot and frees it. The
    record names the writer's commit, so the commit is acknowledged as it is -- not withdrawn
    and committed a second time (its rows are in the history already)."""
    uri, t = _table(tmp_path, FREEING)
    w = lamina.open_table(uri)  # base 1: its put aims at slot 2
    real = w.log.slot_record
    stalled_at: list[int] = []

    def stall_then_look(version: int, chunk_size: int):
        if not stalled_at:
            stalled_at.append(version)
            for s in range(1, 4):
                t.append(workers.batch(0, s, 2))  # rebases onto the writer's version 2
            rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
            assert version in rep.expired_versions and rep.freed_slots > 0
            assert not os.path.exists(os.path.join(uri, version_path(version)))  # freed
        return real(version, chunk_size)

    w.log.slot_record = stall_then_look
    assert w.append(workers.batch(1, 0, 2)).version == 2 and stalled_at == [2]
    record = lamina.open_table(uri).log.slot_record(2, 2)
    assert w.version == 2 and record is not None and record.names(2, w.metadata.commit_id)
    _check_history(uri, want((0, 0), (1, 0), (0, 1), (0, 2), (0, 3)))


def test_several_late_writers_and_repeated_expiry(tmp_path):
    """Late writers aimed at slots that are, by the time they land: taken, expired, freed,
    and freed after later writers already landed in freed slots next to them."""
    uri, t = _table(tmp_path, FREEING)
    late = [DelayedWriter(uri, 1, 0)]
    t.append(workers.batch(0, 1, 2))
    late.append(DelayedWriter(uri, 2, 0))  # same base as t now: aims at slot 3
    late.append(DelayedWriter(uri, 3, 0))  # aims at slot 3 too
    for s in range(2, 7):
        t.append(workers.batch(0, s, 2))
        t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    acked = [w.land() for w in late]
    assert len(set(acked)) == 3 and min(acked) > 7
    t.append(workers.batch(0, 7, 2))
    t.maintenance.expire_versions(retain_last=2, reader_grace=NOW)
    _check_history(uri, want(*((0, s) for s in range(8)), (1, 0), (2, 0), (3, 0)))


def test_rollback_landing_after_expiry_still_has_the_files_it_readds(tmp_path):
    """A rollback re-adds the target's files; expiry running while its put is held must not
    free them (a guard tag holds them until the rollback has landed)."""
    uri, t = _table(tmp_path, FREEING)
    t.overwrite(workers.batch(0, 1, 2))  # version 2 removes version 1's file
    w = DelayedWriter(uri, action=lambda table: table.rollback(1))
    for s in range(2, 5):
        t.append(workers.batch(0, s, 2))
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert 1 in rep.expired_versions and rep.kept_for_tags >= 1  # held by the rollback's guard
    assert w.land() == 6
    assert [g.name for g in lamina.open_table(uri).tags.list()] == []  # the guard is gone
    _check_history(uri, want((0, 0)))
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    lamina.open_table(uri).maintenance.remove_orphans(NOW, allow_short_age=True)
    _check_history(uri, want((0, 0)))


def test_rollback_to_a_version_expired_before_it_was_guarded_commits_nothing(tmp_path):
    uri, t = _table(tmp_path)
    t.append(workers.batch(0, 1, 2))
    target = t.log.load(1)
    t.append(workers.batch(0, 2, 2))
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    with pytest.raises(lamina.errors.VersionNotFound):
        t.tag_store.guard(target, "rollback")
    assert t.tags.list() == [] and t.refresh().version == 3


# -- a real process, paused with SIGSTOP between deciding to commit and its put --------------


def _stopped_writer(spec: dict) -> subprocess.Popen:
    proc = subprocess.Popen(
        workers._cmd(dict(spec, mode="stop_before_publish")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=workers._env(),
    )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)  # returns once the worker has stopped itself
    assert os.WIFSTOPPED(status), f"worker did not stop: {proc.communicate(timeout=30)}"
    return proc


@pytest.mark.xdist_group("procs")
@pytest.mark.parametrize("props", [None, FREEING], ids=["expired", "freed"])
def test_writer_paused_across_expiry_commits_once_when_resumed(tmp_path, props):
    uri, t = _table(tmp_path, props)
    proc = _stopped_writer({"uri": uri, "writer": 1, "seq": 0, "rows": 2})  # base 1, aims at slot 2
    try:
        for s in range(1, 6):
            t.append(workers.batch(0, s, 2))
        rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
        assert rep.expired_versions == [0, 1, 2, 3, 4, 5]
        assert (rep.freed_slots > 0) == (props is not None)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["version"] == 7 and result["base"] == 1
    _check_history(uri, want(*((0, s) for s in range(6)), (1, 0)))
