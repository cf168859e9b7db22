"""Branches under concurrency: racing processes on two branches, a publisher
racing main's writers, and the edges where a branch is deleted under a commit or a publish.

- Writers on two branches at once never see each other: each branch's versions are its own
  appends, numbered on from its base without a gap, and its latest holds every append it
  acknowledged, exactly once; main is untouched.
- Two publishers (write-audit-publish: branch, append, maybe delete, publish, delete branch)
  racing each other, an appender and a deleter on main: each publish lands exactly once (a
  fast-forward exactly when main did not move, else rebased) or is refused with a
  PublishConflict naming the file main changed, and then none of its rows is in main; main
  ends with every acknowledged append and delete, every landed publish's rows, nothing else.
- A commit whose put lands on a branch after ``delete_branch`` is refused (BranchNotFound)
  and leaves nothing referenced, nor does its hint stay; a publish whose put lands after
  ``delete_branch`` of its branch still has every file (its guard held them) and lands once;
  a deletion between a publish's read of the head and its guard refuses the publish.
"""

from __future__ import annotations

import collections
import threading
from datetime import timedelta

import pytest

import lamina
from lamina.commit import VersionLog, flush_hints
from lamina.commit.branches import BranchLog
from lamina.errors import BranchNotFound
from lamina.maintenance import fsck
from lamina.spec.layout import BRANCH_LOGS_DIR

from support import workers
from support.delayed_writer import DelayedWriter, rows_of, want
from support.files import referenced, table_files

procs = pytest.mark.xdist_group("procs")
NOW = timedelta(0)
ROWS = 3


def _appends(writer: int, acked: list) -> collections.Counter:
    return collections.Counter((writer, seq, i) for seq, _ in acked for i in range(ROWS))


def _check_clean(t: lamina.Table) -> None:
    report = fsck(t)
    assert report.ok and not report.missing, (report.missing, report.errors)


@procs
def test_writers_on_two_branches_never_meet(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, ROWS))
    bases = {name: t.branches.create(name).version for name in ("left", "right")}
    main_before = (t.refresh().version, rows_of(t.to_arrow()))
    n = 15
    writers = {1: "left", 2: "left", 3: "right", 4: "right"}
    specs = [{"mode": "race_append", "uri": uri, "branch": b, "writer": w, "n": n, "rows": ROWS} for w, b in writers.items()]
    results = dict(zip(writers, workers.spawn_workers(specs, str(tmp_path))))

    for name in ("left", "right"):
        mine = [w for w, b in writers.items() if b == name]
        h = t.branch(name)
        versions = sorted(v for w in mine for _, v in results[w]["acked"])
        # Every acknowledged append has a version of its own, on from the base, no gaps.
        assert versions == list(range(bases[name] + 1, bases[name] + 1 + n * len(mine))), name
        assert h.version == versions[-1]
        expected = collections.Counter({(0, 0, i): 1 for i in range(ROWS)})
        for w in mine:
            expected += _appends(w, results[w]["acked"])
        assert rows_of(h.to_arrow()) == expected, f"{name}: lost or foreign rows"
        # Each version reads the appends acknowledged at or below it (a sample).
        at = {v: (w, seq) for w in mine for seq, v in results[w]["acked"]}
        for v in versions[:: max(1, len(versions) // 6)]:
            got = rows_of(h.scan(version=v).to_arrow())
            want_v = collections.Counter({(0, 0, i): 1 for i in range(ROWS)})
            want_v.update((*at[u], i) for u in at if u <= v for i in range(ROWS))
            assert got == want_v, f"{name} version {v}"
        assert all(r["branch"] == name for r in h.history())
        _check_clean(h)
    assert (t.refresh().version, rows_of(t.to_arrow())) == main_before, "main changed"
    _check_clean(t)


@procs
def test_publishers_racing_main_writers_land_each_publish_once(tmp_path):
    """Two publishers (write-audit-publish, each step on a branch of its own) race an appender
    and a deleter on main, and each other."""
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    publishers, steps = (8, 9), 4
    # One seed file per publish step (4 rows, k = key(s) + 0..3): an odd step's branch deletes
    # row 0 of its seed, while main's deleter takes rows 1..3 of those seeds in turns, so the
    # publish clashes with main or not, by timing.
    key = lambda s: 1000 * (s + 1)  # noqa: E731
    seed_of = {(p, j): i * steps + j for i, p in enumerate(publishers) for j in range(steps)}
    seed_paths = []
    for s in range(len(seed_of)):
        before = set(t.inspect.files().column("path").to_pylist())
        t.append(workers.batch(50, s, 4, k_base=key(s)))
        [path] = set(t.inspect.files().column("path").to_pylist()) - before
        seed_paths.append(path)
    t.branches.create("warm-up")  # the feature's commit on main happens before the race
    t.branches.delete("warm-up")
    seeded = rows_of(t.refresh().to_arrow())
    clashing = [s for (p, j), s in seed_of.items() if j % 2]
    deleter_steps = [[key(s) + r] for r in (1, 2, 3) for s in clashing]
    done = [str(tmp_path / f"publisher-{p}-done") for p in publishers]
    specs = [
        {"mode": "race_append", "uri": uri, "writer": 1, "n": 60, "rows": ROWS, "until": done},
        {"mode": "race_delete", "uri": uri, "steps": deleter_steps, "until": done},
    ] + [
        {"mode": "race_publish", "uri": uri, "writer": p, "rows": ROWS, "prefix": f"wap{p}", "done": d,
         "steps": [[f"k = {key(seed_of[p, j])}"] if j % 2 else [] for j in range(steps)]}
        for p, d in zip(publishers, done)
    ]
    appender, deleter, *published = workers.spawn_workers(specs, str(tmp_path))

    t = lamina.open_table(uri)
    expected = seeded + _appends(1, appender["acked"])
    versions = [v for _, v in appender["acked"] + deleter["acked"]]
    for k in (deleter_steps[seq][0] for seq, _ in deleter["acked"]):
        expected[(50, k // 1000 - 1, k % 1000)] -= 1
    landed = collections.Counter()
    for p, result in zip(publishers, published):
        for seq, v, how in result["acked"]:
            s = seed_of[p, seq]
            if v is None:  # refused: a clash with main's deleter, on the seed it shares
                kind, files = how
                assert kind == "conflict" and seq % 2, f"publisher {p} step {seq}: an append-only publish was refused"
                assert files == [seed_paths[s]], f"publisher {p} step {seq}: the conflict names {files}"
                continue
            versions.append(v)
            landed[f"wap{p}-{seq}"] += 1
            expected.update((p, seq, i) for i in range(ROWS))
            if seq % 2:
                expected[(50, s, 0)] -= 1
            vm = t.log.load(v)
            assert vm.operation == "publish" and vm.summary["branch"] == f"wap{p}-{seq}"
            # A fast-forward exactly when nothing landed on main since the branch was made.
            assert how == ("fast-forward" if vm.summary["branch-base-version"] == v - 1 else "rebase"), (p, seq, how)
    assert len(versions) == len(set(versions)), "a version was claimed twice"
    # Exactly once: each landed publish is one version of main, each refused one none.
    assert collections.Counter(h["summary"]["branch"] for h in t.history() if h["operation"] == "publish") == landed
    got, expected = rows_of(t.to_arrow()), +expected
    assert got == expected, f"lost: {list((expected - got).items())[:5]}, extra: {list((got - expected).items())[:5]}"
    assert t.branches.list() == []
    _check_clean(t)
    # The branches are gone; after expiry and orphan cleanup so is every file only they held.
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert rows_of(t.refresh().to_arrow()) == expected
    stored = {p for p in table_files(uri) if p.startswith(("data/", "_lamina/manifests/"))}
    assert stored == referenced(t)


# -- a branch deleted while a commit or a publish lands ------------------------------------


def _branch_puts(path: str) -> bool:
    return path.startswith(BRANCH_LOGS_DIR + "/")


def test_commit_landing_after_delete_branch_is_refused_and_leaves_nothing(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, 2))
    t.branches.create("dev").append(workers.batch(1, 0, 2))
    t.tags.create("keep")
    late = DelayedWriter(uri, action=lambda table: table.branch("dev").append(workers.batch(2, 0, 2)), match=_branch_puts)
    t.branches.delete("dev")
    with pytest.raises(BranchNotFound):
        late.land()
    flush_hints()
    t = lamina.open_table(uri)
    assert rows_of(t.to_arrow()) == want((0, 0))
    # The deleted branch's log is freed by the next expiry past the reader grace; the late put
    # was withdrawn, so only the marker stays.
    t.maintenance.expire_versions(retain_last=100, reader_grace=NOW)
    logs = [p for p in table_files(uri) if p.startswith(BRANCH_LOGS_DIR + "/")]
    assert len(logs) == 1 and logs[0].endswith(".deleted.json"), f"the late put was not withdrawn: {logs}"
    # What the late writer wrote is referenced by nothing: orphan cleanup takes all of it.
    t.maintenance.remove_orphans(NOW, allow_short_age=True)
    stored = {p for p in table_files(uri) if p.startswith(("data/", "_lamina/manifests/"))}
    assert stored == referenced(t)
    report = fsck(t)
    assert report.ok and not report.unreferenced, (report.missing, report.errors, report.unreferenced)


def test_a_hint_landing_after_delete_branch_is_taken_back(tmp_path, monkeypatch):
    """A commit's hint is written after its commit point (in the background on object stores,
    by the committing thread on local disk): one that lands after delete_branch cleared the
    branch's log must not stay there (the log keeps its marker only)."""
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    dev = t.branches.create("dev")
    flush_hints()
    arrived, release = threading.Event(), threading.Event()
    write_hint = VersionLog._write_hint_now

    def held(self, vm):  # noqa: ANN001
        if isinstance(self, BranchLog):
            arrived.set()
            assert release.wait(60)
        write_hint(self, vm)

    monkeypatch.setattr(VersionLog, "_write_hint_now", held)
    committer = threading.Thread(target=lambda: dev.append(workers.batch(1, 0, 2)))
    committer.start()  # committed; its hint write is held
    assert arrived.wait(60)
    t.branches.delete("dev")
    t.maintenance.expire_versions(retain_last=100, reader_grace=NOW)  # frees the deleted branch's log
    release.set()
    committer.join(60)
    flush_hints()
    logs = [p for p in table_files(uri) if p.startswith(BRANCH_LOGS_DIR + "/")]
    assert len(logs) == 1 and logs[0].endswith(".deleted.json"), logs


@pytest.mark.parametrize("main_moved", [False, True], ids=["fast-forward", "rebase"])
def test_publish_landing_after_delete_branch_keeps_its_files(tmp_path, main_moved):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, 2))
    dev = t.branches.create("dev")
    dev.append(workers.batch(1, 0, 2))
    dev.delete("writer = 0 AND i = 0")  # a new DV on main's file too
    if main_moved:
        t.refresh().append(workers.batch(0, 1, 2))
    publisher = DelayedWriter(uri, action=lambda table: table.branches.publish("dev"))  # holds main's version put
    t.branches.delete("dev")
    v = publisher.land()
    t = lamina.open_table(uri)
    assert t.version == v and t.log.load(v).summary["publish"] == ("rebase" if main_moved else "fast-forward")
    expected = want((0, 0), (1, 0)) - collections.Counter({(0, 0, 0): 1})
    if main_moved:
        expected += want((0, 1))
    assert rows_of(t.to_arrow()) == expected
    assert t.tags.list() == [] and t.branches.list() == []
    _check_clean(t)
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert rows_of(t.refresh().to_arrow()) == expected
    stored = {p for p in table_files(uri) if p.startswith(("data/", "_lamina/manifests/"))}
    assert stored == referenced(t)


def test_commits_on_a_branch_write_nothing_of_main_log(tmp_path):
    """Writers on two branches never touch the same file: a branch's commits write under its
    own log only (with data files and manifests of their own)."""
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, 2))
    dev = t.branches.create("dev")

    def logs() -> dict[str, bytes]:
        return {p: b for p, b in table_files(uri).items() if p.startswith("_lamina/") and not p.startswith("_lamina/manifests/")}

    before = logs()
    for s in range(3):
        dev.append(workers.batch(1, s, 2))
    dev.delete("seq = 0")
    changed = {p for p in set(logs()) | set(before) if logs().get(p) != before.get(p)}
    own = f"{BRANCH_LOGS_DIR}/{dev.branch_record.branch_id}/"
    assert changed and all(p.startswith(own) for p in changed), sorted(changed)
