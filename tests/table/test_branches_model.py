"""Model-based test of branches, mixed with tags, expiry and orphan cleanup.

A hypothesis state machine drives random sequences of: create a branch (from main's or a
branch's latest, one of its retained versions, or a tag), write on main or a branch
(append, delete, update, overwrite, compaction, rollback to a version or a tag), publish a branch into main or another branch (with
or without ``expected_version``), rename and delete branches, create and delete tags,
expire versions on any branch (``reader_grace`` 0) and remove orphans, against a real
table on local disk with a tiny manifest tree. The model is plain Python: per branch,
version -> rows, and which content each version has (the stand-in for a commit id, which
says whether a publish is a fast-forward). After every step every retained version of
every branch and every tag reads back exactly the model's rows, no data file is live twice
in any branch, and fsck finds nothing missing; at the end, after expiring every branch to
its latest and removing orphans, no data file or manifest is stored that no retained
version, tag or branch base references, and after deleting every branch and tag, only
what main's latest references is left (and of the branches only their deletion markers).
"""

from __future__ import annotations

import collections
import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import lamina

from lamina.commit import flush_hints
from lamina.errors import (
    BranchAlreadyExists, BranchNotFound, CommitConflict, PublishConflict, TagAlreadyExists, TagNotFound,
)
from lamina.maintenance import fsck
from lamina.maintenance.reachability import paths_of
from support.files import referenced_by, stored_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.int64(), False)])
PROPS = {
    "manifest.inline-max-files": 3, "manifest.leaf-target-files": 4, "manifest.merge-min-leaves": 2,
    "version.slot-chunk-size": 2, "expire.slot-retention-ms": 0,  # expired slots are freed at once
}
MAIN = "main"
BRANCH_NAMES = ["dev", "audit", "b-2"]
TAG_NAMES = ["t-a", "t-b"]
NOW = timedelta(0)

Rows = list[tuple[int, int]]


def _rows(t: pa.Table) -> Rows:
    return sorted(zip(t.column("id").to_pylist(), t.column("grp").to_pylist()))


@dataclass
class Log:
    """The model of one branch's version log: rows and content identity per retained version.

    ``content`` names where a version's content was committed (``(log id, version)``): a
    branch's base slot has its source's, which is what makes a publish a fast-forward."""

    versions: dict[int, Rows]
    content: dict[int, tuple[str, int]]
    uid: str
    base_version: int | None = None  # None: main
    base_rows: Rows = field(default_factory=list)
    base_content: tuple[str, int] | None = None
    base_apps: dict[str, int] = field(default_factory=dict)
    appends_only: bool = True  # every commit on the branch was an append (a rebase cannot clash)
    ever: set[int] = field(default_factory=set)  # every row id any version of the log has held
    # per version: branch uid -> the branch's version last published into this log (carried
    # forward by every commit, as the version manifest's app transactions are)
    apps: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def latest(self) -> int:
        return max(self.versions)

    @property
    def rows(self) -> Rows:
        return self.versions[self.latest]

    def commit(self, v: int, rows: Rows, apps: dict[str, int] | None = None) -> None:
        assert v == self.latest + 1, f"committed as version {v}, the model expected {self.latest + 1}"
        self.apps[v] = dict(self.apps.get(self.latest, {})) if apps is None else apps
        self.versions[v] = sorted(rows)
        self.content[v] = (self.uid, v)
        self.ever |= {i for i, _ in rows}


class BranchesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="lamina-branches-model-")
        self.uri = os.path.join(self.dir, "t")
        self.t = lamina.create_table(self.uri, SCHEMA, properties=PROPS)
        self.logs: dict[str, Log] = {MAIN: Log({0: []}, {0: ("main", 0)}, "main", apps={0: {}})}
        self.tags: dict[str, tuple[Rows, tuple[str, int], dict[str, int]]] = {}
        self.next_id = 0
        self.uids = itertools.count()
        self.enabled = False  # the first branch commits writer feature "branches" on main

    def teardown(self) -> None:
        try:
            if self.logs[MAIN].latest > 0 or len(self.logs) > 1:
                self._check_nothing_stranded()
        finally:
            flush_hints()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _check_nothing_stranded(self) -> None:
        # 1. every branch expired to its latest, orphans removed: every stored file is
        #    referenced by a retained version of some branch, a tag or a branch's base.
        for name in self.logs:
            self._handle(name).maintenance.expire_versions(retain_last=1, reader_grace=NOW)
            self._sync(name)
            assert len(self.logs[name].versions) == 1
        self.t.maintenance.remove_orphans(NOW, allow_short_age=True)
        self.every_version_and_tag_reads_the_model()
        want = self._referenced()
        bases = [r.base for r in self.t.branches.list()]
        want |= set(paths_of(self.t.io, bases).to_pylist())
        stored = stored_files(self.uri)
        assert not (want - stored), f"referenced but missing: {sorted(want - stored)}"
        assert not (stored - want), f"stranded: {sorted(stored - want)}"
        # 2. every branch and tag deleted, main expired, orphans removed: only main's latest
        #    is left, and of the branches nothing but their deletion markers.
        for name in [n for n in self.logs if n != MAIN]:
            self.t.branches.delete(name)
            del self.logs[name]
        for name in list(self.tags):
            self.t.tags.delete(name)
            del self.tags[name]
        self.t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
        self.t.maintenance.remove_orphans(NOW, allow_short_age=True)
        self._sync(MAIN)
        self.every_version_and_tag_reads_the_model()
        stored = stored_files(self.uri)
        want = referenced_by(self.t.refresh())
        assert stored == want, f"stranded: {sorted(stored - want)}, missing: {sorted(want - stored)}"
        flush_hints()
        left = sorted(
            os.path.relpath(os.path.join(d, f), self.uri)
            for sub in ("_lamina/branches", "_lamina/branch_logs")
            for d, _, fs in os.walk(os.path.join(self.uri, sub)) for f in fs
        )
        assert all(p.startswith("_lamina/branch_logs/") and p.endswith(".deleted.json") for p in left), left
        report = fsck(self.t)
        assert report.ok and not report.unreferenced, (report.missing, report.errors, report.unreferenced)

    # -- helpers ------------------------------------------------------------------------

    def _handle(self, name: str) -> lamina.Table:
        return self.t.refresh() if name == MAIN else self.t.branch(name)

    def _referenced(self) -> set[str]:
        out: set[str] = set()
        for name, log in self.logs.items():
            h = self._handle(name)
            for v in log.versions:
                out |= referenced_by(h, version=v)
        for name in self.tags:
            out |= referenced_by(self.t, version=name)
        return out

    def _new_rows(self, n: int, grps: list[int]) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return pa.table({"id": ids, "grp": [grps[i % len(grps)] for i in range(n)]}, schema=SCHEMA)

    def _sync(self, name: str) -> None:
        """Versions expiry removed leave the model (it never invents any)."""
        log = self.logs[name]
        existing = set(self._handle(name).log.list_versions())
        assert existing <= set(log.versions), f"{name}: versions from nowhere: {existing - set(log.versions)}"
        for v in set(log.versions) - existing:
            del log.versions[v]
            del log.content[v]
            log.apps.pop(v, None)

    def _pick(self, pick: int, among: list[str]) -> str:
        return among[pick % len(among)]

    def _write(self, name: str, v: int | None, rows: Rows, append: bool = False) -> None:
        log = self.logs[name]
        if v is None:
            assert sorted(rows) == log.rows  # nothing matched: nothing committed
            return
        log.commit(v, rows)
        log.appends_only &= append

    # -- rules: branches ---------------------------------------------------------------

    @rule(
        name=st.sampled_from(BRANCH_NAMES + TAG_NAMES[:1]), source=st.integers(0, 100),
        how=st.sampled_from(["latest", "version", "tag"]), pick=st.integers(0, 100),
    )
    def create_branch(self, name: str, source: int, how: str, pick: int) -> None:
        src = self._pick(source, sorted(self.logs))
        if how == "tag" and not self.tags:
            how = "latest"
        if name in self.logs or name in self.tags:
            with pytest.raises(BranchAlreadyExists):
                self.t.branches.create(name, version=src)
            return
        log = self.logs[src]
        v = sorted(log.versions)[pick % len(log.versions)]  # chosen among the versions there are now
        if not self.enabled:
            main = self.logs[MAIN]
            # "enable-branches": the same files, but a content of its own (the commit writes a
            # root manifest of its own, so a branch made from an older version rebases)
            main.commit(main.latest + 1, main.rows)
            self.enabled = True
        if how == "tag":
            tag = sorted(self.tags)[pick % len(self.tags)]
            h = self.t.branches.create(name, version=tag)
            rows, content, apps = self.tags[tag]
            v = self.t.tags.get(tag).tagged_version
        else:
            v = log.latest if how == "latest" else v  # the latest: after the feature's commit
            kw = {} if how == "latest" else {"version": v}
            if pick % 2:
                h = self._handle(src).branches.create(name, **kw)
            else:  # named from main: a branch's latest by its name, a number of it from its handle
                h = self.t.branch(src).branches.create(name, **kw) if kw else self.t.branches.create(name, version=src)
            rows, content, apps = log.versions[v], log.content[v], log.apps[v]
        assert h.branch_name == name and h.version == v
        self.logs[name] = Log(
            {v: rows}, {v: content}, f"b{next(self.uids)}", base_version=v, base_rows=rows,
            base_content=content, ever={i for i, _ in rows}, apps={v: dict(apps)}, base_apps=dict(apps),
        )

    @precondition(lambda self: len(self.logs) > 1)
    @rule(pick=st.integers(0, 100), to=st.sampled_from(BRANCH_NAMES + TAG_NAMES[1:]))
    def rename_branch(self, pick: int, to: str) -> None:
        name = self._pick(pick, sorted(n for n in self.logs if n != MAIN))
        if to in self.logs or to in self.tags:
            with pytest.raises(BranchAlreadyExists):
                self.t.branches.rename(name, to)
            return
        record = self.t.branches.rename(name, to)
        assert record.name == to
        self.logs[to] = self.logs.pop(name)
        with pytest.raises(BranchNotFound):
            self.t.branch(name)

    @precondition(lambda self: len(self.logs) > 1)
    @rule(pick=st.integers(0, 100))
    def delete_branch(self, pick: int) -> None:
        name = self._pick(pick, sorted(n for n in self.logs if n != MAIN))
        assert self.t.branches.delete(name).name == name
        del self.logs[name]
        with pytest.raises(BranchNotFound):
            self.t.branch(name)
        assert name not in {r.name for r in self.t.branches.list()}

    @precondition(lambda self: len(self.logs) > 1)
    @rule(pick=st.integers(0, 100), into=st.integers(0, 100), expect=st.sampled_from([None, "right", "wrong"]))
    def publish(self, pick: int, into: int, expect: str | None) -> None:
        name = self._pick(pick, sorted(n for n in self.logs if n != MAIN))
        target = self._pick(into, sorted(n for n in self.logs if n != name))
        src, dst = self.logs[name], self.logs[target]
        before = (dst.latest, dst.rows)
        expected_version = {None: None, "right": dst.latest, "wrong": dst.latest + 1}[expect]
        head = src.content[src.latest]
        # What the branch did since it was made, or since its version last published into the
        # target (which the target's latest version records).
        last = dst.apps[dst.latest].get(src.uid)
        if expect == "wrong":  # checked first: whatever the branch holds, main is not where the audit saw it
            with pytest.raises(CommitConflict) as e:
                self.t.branches.publish(name, into=target, expected_version=expected_version)
            assert not isinstance(e.value, PublishConflict)
            self._unchanged(target, before)
            return
        if head == src.base_content or (last is not None and last >= src.latest):
            assert self.t.branches.publish(name, into=target, expected_version=expected_version).version is None
            return
        if last is not None and last not in src.versions:  # expired: what changed since is unknown
            with pytest.raises(PublishConflict, match="was expired"):
                self.t.branches.publish(name, into=target, expected_version=expected_version)
            self._unchanged(target, before)
            return
        since = src.base_version if last is None else last
        since_rows = src.base_rows if last is None else src.versions.get(last, src.base_rows)
        since_content = src.base_content if last is None else src.content.get(last)
        # The branch's change re-applied: rows of the target, less what the branch removed
        # from its base, plus what it added (as multisets; a fast-forward is the same sum).
        added = collections.Counter(src.rows) - collections.Counter(since_rows)
        fast_forward = dst.content[dst.latest] == since_content
        # An append-only branch whose rows the target never held cannot clash.
        clean = src.appends_only and not ({i for i, _ in added} & dst.ever)
        try:
            v = self.t.branches.publish(name, into=target, expected_version=expected_version).version
        except PublishConflict as e:
            assert not fast_forward and not clean, f"unexpected conflict: {e}"
            assert e.files, "a publish conflict names the files that clash"
            self._unchanged(target, before)
            return
        if v is None:  # the branch's files are as they were since: nothing to publish
            assert collections.Counter(src.rows) == collections.Counter(since_rows)
            self._unchanged(target, before)
            return
        vm = self._handle(target).log.load(v)
        assert vm.operation == "publish"
        # The model's content identity is stricter than the files: a version whose commit kept
        # the root manifest (a rollback onto the same files) holds the same content, so a
        # fast-forward may happen where the model only knows a rebase is right.
        done_ff = vm.summary["publish"] == "fast-forward"
        assert done_ff or not fast_forward, "the target held the branch's content: a fast-forward"
        rows = collections.Counter(dst.rows) + collections.Counter(src.rows) - collections.Counter(since_rows)
        apps = {**dst.apps[dst.latest], **(src.apps[src.latest] if done_ff else {}), src.uid: src.latest}
        if not done_ff:  # publishes the branch received since, from where the target stood too, travel with it
            since_apps = src.base_apps if last is None else src.apps[last]
            apps |= {
                k: x for k, x in src.apps[src.latest].items()
                if k != src.uid and since_apps.get(k) != x and since_apps.get(k) == dst.apps[dst.latest].get(k)
            }
        dst.commit(v, list(rows.elements()), apps)
        if done_ff:  # the target's version holds the branch head's content as it is
            dst.content[v] = src.content[src.latest]
        dst.appends_only &= src.appends_only
        assert vm.summary["branch"] == name and vm.summary["branch-version"] == src.latest
        assert vm.summary["branch-base-version"] == since

    def _unchanged(self, name: str, before: tuple[int, Rows]) -> None:
        h = self._handle(name)
        assert h.version == before[0], "a refused publish committed a version"
        assert _rows(h.to_arrow()) == before[1]

    # -- rules: writes on any branch -----------------------------------------------------

    @rule(pick=st.integers(0, 100), n=st.integers(1, 3), grps=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def append(self, pick: int, n: int, grps: list[int]) -> None:
        name = self._pick(pick, sorted(self.logs))
        data = self._new_rows(n, grps)
        self._write(name, self._handle(name).append(data).version, self.logs[name].rows + _rows(data), append=True)

    @rule(pick=st.integers(0, 100), k=st.integers(0, 30), grp=st.one_of(st.none(), st.integers(0, 2)), cow=st.booleans())
    def delete(self, pick: int, k: int, grp: int | None, cow: bool) -> None:
        name = self._pick(pick, sorted(self.logs))
        where = f"id < {k}" + ("" if grp is None else f" AND grp = {grp}")
        hit = lambda r: r[0] < k and (grp is None or r[1] == grp)  # noqa: E731
        v = self._handle(name).delete(where, mode="copy-on-write" if cow else None).version
        self._write(name, v, [r for r in self.logs[name].rows if not hit(r)])

    @rule(pick=st.integers(0, 100), k=st.integers(0, 30), to=st.integers(0, 2))
    def update(self, pick: int, k: int, to: int) -> None:
        name = self._pick(pick, sorted(self.logs))
        v = self._handle(name).update(f"id >= {k}", set={"grp": str(to)}).version
        self._write(name, v, [(i, to) if i >= k else (i, g) for i, g in self.logs[name].rows])

    @rule(pick=st.integers(0, 100), n=st.integers(0, 2), grp=st.integers(0, 2))
    def overwrite_group(self, pick: int, n: int, grp: int) -> None:
        name = self._pick(pick, sorted(self.logs))
        data = self._new_rows(n, [grp])
        v = self._handle(name).overwrite(data, where=f"grp = {grp}").version
        self._write(name, v, [r for r in self.logs[name].rows if r[1] != grp] + _rows(data))

    @rule(pick=st.integers(0, 100))
    def compact(self, pick: int) -> None:
        name = self._pick(pick, sorted(self.logs))
        self._write(name, self._handle(name).maintenance.compact(min_file_size=1 << 30).version, self.logs[name].rows)

    @rule(pick=st.integers(0, 100), to=st.integers(0, 100), use_tag=st.booleans(), destructive=st.booleans())
    def rollback(self, pick: int, to: int, use_tag: bool, destructive: bool) -> None:
        """To a retained version of the branch (destructive or not), or to a tag (of any
        branch: its number may be another log's, so never destructive)."""
        name = self._pick(pick, sorted(self.logs))
        log = self.logs[name]
        before = log.latest
        h = self._handle(name)
        if use_tag and self.tags:
            tag = sorted(self.tags)[to % len(self.tags)]
            rows, destructive, target = self.tags[tag][0], False, None
            v = h.rollback(tag).version
        else:
            target = sorted(log.versions)[to % len(log.versions)]
            rows = log.versions[target]
            v = h.rollback(target, destructive=destructive).version
        self._write(name, v, rows)
        if destructive:  # the versions between the target and the rollback
            for gone in [x for x in log.versions if target < x <= before]:
                del log.versions[gone]
                del log.content[gone]
                log.apps.pop(gone, None)

    # -- rules: tags, expiry, orphans ------------------------------------------------------

    @rule(name=st.sampled_from(TAG_NAMES + BRANCH_NAMES[:1]), source=st.integers(0, 100), pick=st.integers(0, 100))
    def create_tag(self, name: str, source: int, pick: int) -> None:
        src = self._pick(source, sorted(self.logs))
        log = self.logs[src]
        v = sorted(log.versions)[pick % len(log.versions)]
        if name in self.tags or name in self.logs:
            with pytest.raises(TagAlreadyExists):
                self._handle(src).tags.create(name, v)
            return
        self._handle(src).tags.create(name, v)
        self.tags[name] = (log.versions[v], log.content[v], log.apps[v])

    @rule(name=st.sampled_from(TAG_NAMES), source=st.integers(0, 100))
    def delete_tag(self, name: str, source: int) -> None:
        h = self._handle(self._pick(source, sorted(self.logs)))  # tags are the table's: any handle
        if name not in self.tags:
            with pytest.raises(TagNotFound):
                h.tags.delete(name)
            return
        h.tags.delete(name)
        del self.tags[name]

    @rule(pick=st.integers(0, 100), k=st.integers(1, 3))
    def expire(self, pick: int, k: int) -> None:
        """Of one branch; main's expires every branch too (each by the call's retention here)."""
        name = self._pick(pick, sorted(self.logs))
        names = sorted(self.logs) if name == MAIN else [name]
        before = {n: sorted(self.logs[n].versions) for n in names}
        self._handle(name).maintenance.expire_versions(retain_last=k, reader_grace=NOW)
        for n in names:
            self._sync(n)
            after = sorted(self.logs[n].versions)
            assert after == before[n][len(before[n]) - len(after):], "expiry must remove the oldest versions only"
            assert len(after) >= min(k, len(before[n]))

    @rule(pick=st.integers(0, 100))
    def remove_orphans(self, pick: int) -> None:
        # Orphan cleanup is the table's, whichever branch's handle runs it.
        self._handle(self._pick(pick, sorted(self.logs))).maintenance.remove_orphans(NOW, allow_short_age=True)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def every_version_and_tag_reads_the_model(self) -> None:
        for name, log in self.logs.items():
            h = self._handle(name)
            assert h.version == log.latest, f"branch {name}: latest {h.version}, model {log.latest}"
            for v, rows in log.versions.items():
                assert _rows(h.scan(version=v).to_arrow()) == rows, f"branch {name} version {v}"
            oldest = min(log.versions)
            reopened = lamina.open_table(self.uri).branch(name).at(oldest)
            assert reopened.branch_name == name and _rows(reopened.to_arrow()) == log.versions[oldest]
            paths = h.inspect.files().column("path").to_pylist()
            assert len(paths) == len(set(paths)), f"branch {name}: a data file is live twice: {sorted(paths)}"
        for name, (rows, _, _) in self.tags.items():
            assert _rows(self.t.scan(version=name).to_arrow()) == rows, f"tag {name}"
        assert sorted(r.name for r in self.t.branches.list()) == sorted(n for n in self.logs if n != MAIN)

    @invariant()
    def nothing_missing(self) -> None:
        report = fsck(self.t)
        assert report.ok and not report.missing, (report.missing, report.errors)


TestBranchesModel = BranchesModel.TestCase
TestBranchesModel.settings = settings(
    max_examples=int(os.environ.get("LAMINA_MODEL_EXAMPLES", "20")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=tuple(Phase) if not os.environ.get("LAMINA_NO_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate),
)
