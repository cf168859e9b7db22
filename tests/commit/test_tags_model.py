"""Model-based test of tags, rollback, expiry and orphan cleanup.

A hypothesis state machine drives random sequences of append, overwrite,
create/delete/replace tag, rollback (plain and destructive), expire and
remove-orphans against a real table on local disk, with a tiny manifest tree
so leaves are written, merged and copied on write. The model is a plain dict
of version -> rows and tag -> rows. After every step every surviving version
and every tag must read exactly the model's rows; at the end, after expiring
everything but the latest version and removing orphans, no data file or
manifest may remain that the latest version or a tag does not reference.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import lamina

from lamina.commit import flush_hints
from lamina.errors import TagAlreadyExists, TagNotFound
from support.files import referenced_by, stored_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.int64(), False)])
PROPS = {
    "manifest.inline-max-files": 3, "manifest.leaf-target-files": 4, "manifest.merge-min-leaves": 2,
    "version.slot-chunk-size": 2, "expire.slot-retention-ms": 0,  # expired slots are freed at once
}
TAG_NAMES = ["t-a", "t-b", "t-c", "daily-1"]
NOW = timedelta(0)


def _rows(t: pa.Table) -> list[tuple[int, int]]:
    return sorted(zip(t.column("id").to_pylist(), t.column("grp").to_pylist()))


class TagsModel(RuleBasedStateMachine):
    allow_rollback = True

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="lamina-model-")
        self.uri = os.path.join(self.dir, "t")
        self.t = lamina.create_table(self.uri, SCHEMA, properties=PROPS)
        self.versions: dict[int, list[tuple[int, int]]] = {0: []}
        self.tags: dict[str, tuple[int, list[tuple[int, int]]]] = {}
        self.next_id = 0

    def teardown(self) -> None:
        try:
            # Expire everything but the latest, remove orphans: 0 stranded files.
            self.t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
            self.t.maintenance.remove_orphans(NOW, allow_short_age=True)
            self._sync_versions()
            latest = max(self.versions)
            assert set(self.versions) == {latest}
            want = referenced_by(self.t, version=latest)
            for name in self.tags:
                want |= referenced_by(self.t, version=name)
            stored = stored_files(self.uri)
            assert not (want - stored), f"referenced but missing: {sorted(want - stored)}"
            assert not (stored - want), f"stranded: {sorted(stored - want)}"
        finally:
            flush_hints()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------

    def _latest_rows(self) -> list[tuple[int, int]]:
        return self.versions[max(self.versions)]

    def _new_rows(self, n: int, grp: int | None, draw_grps: list[int]) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        grps = [grp if grp is not None else draw_grps[i % len(draw_grps)] for i in range(n)]
        return pa.table({"id": ids, "grp": grps}, schema=SCHEMA)

    def _committed(self, v: int, rows: list[tuple[int, int]]) -> None:
        assert v == max(self.versions) + 1 or v > max(self.versions)
        self.versions[v] = sorted(rows)

    def _sync_versions(self) -> None:
        existing = set(self.t.log.list_versions())
        assert existing <= set(self.versions), f"versions appeared from nowhere: {existing - set(self.versions)}"
        for v in set(self.versions) - existing:
            del self.versions[v]

    # -- rules --------------------------------------------------------------------------

    @rule(n=st.integers(1, 4), grps=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def append(self, n: int, grps: list[int]) -> None:
        data = self._new_rows(n, None, grps)
        v = self.t.append(data).version
        self._committed(v, self._latest_rows() + _rows(data))

    @rule(n=st.integers(0, 3), grp=st.integers(0, 2))
    def overwrite_group(self, n: int, grp: int) -> None:
        data = self._new_rows(n, grp, [grp])
        v = self.t.overwrite(data, where=f"grp = {grp}").version
        self._committed(v, [r for r in self._latest_rows() if r[1] != grp] + _rows(data))

    @rule(n=st.integers(0, 3))
    def overwrite_all(self, n: int) -> None:
        data = self._new_rows(n, None, [0, 1])
        v = self.t.overwrite(data).version
        self._committed(v, _rows(data))

    @rule(name=st.sampled_from(TAG_NAMES), pick=st.integers(0, 1000))
    def create_tag(self, name: str, pick: int) -> None:
        vs = sorted(self.versions)
        v = vs[pick % len(vs)]
        if name in self.tags:
            with pytest.raises(TagAlreadyExists):
                self.t.tags.create(name, v)
            return
        self.t.tags.create(name, v)
        self.tags[name] = (v, self.versions[v])

    @rule(name=st.sampled_from(TAG_NAMES))
    def delete_tag(self, name: str) -> None:
        if name not in self.tags:
            with pytest.raises(TagNotFound):
                self.t.tags.delete(name)
            return
        self.t.tags.delete(name)
        del self.tags[name]

    @precondition(lambda self: bool(self.tags))
    @rule(pick=st.integers(0, 1000))
    def replace_tag_with_latest(self, pick: int) -> None:
        name = sorted(self.tags)[pick % len(self.tags)]
        self.t.tags.replace(name)
        latest = max(self.versions)
        self.tags[name] = (latest, self.versions[latest])

    @precondition(lambda self: self.allow_rollback)
    @rule(pick=st.integers(0, 1000), use_tag=st.booleans(), destructive=st.booleans())
    def rollback(self, pick: int, use_tag: bool, destructive: bool) -> None:
        before = max(self.versions)
        if use_tag and self.tags:
            name = sorted(self.tags)[pick % len(self.tags)]
            target_v, rows = self.tags[name]
            v = self.t.rollback(name, destructive=destructive).version
        else:
            vs = sorted(self.versions)
            target_v = vs[pick % len(vs)]
            rows = self.versions[target_v]
            v = self.t.rollback(target_v, destructive=destructive).version
        self._committed(v, rows)
        if destructive:
            for gone in [x for x in self.versions if target_v < x <= before]:
                del self.versions[gone]

    @rule(k=st.integers(1, 4), dry=st.booleans())
    def expire(self, k: int, dry: bool) -> None:
        before = sorted(self.versions)
        started_ms = int(time.time() * 1000)
        stamps = {v: self.t.log.load(v).timestamp_ms for v in before}
        r = self.t.maintenance.expire_versions(retain_last=k, reader_grace=NOW, dry_run=dry)
        if dry:
            assert sorted(self.t.log.list_versions()) == before
            return
        self._sync_versions()
        after = sorted(self.versions)
        assert after == before[len(before) - len(after):], "expiry must remove the oldest versions only"
        assert len(after) >= min(k, len(before)), "the newest retain_last versions must stay"
        assert r.expired_versions == before[: len(before) - len(after)]
        # every version superseded before the call (and not among the last k) must be gone
        for v, nxt in zip(before[:-k], before[1:]):
            if stamps[nxt] < started_ms:
                assert v not in self.versions

    @rule()
    def remove_orphans(self) -> None:
        self.t.maintenance.remove_orphans(NOW, allow_short_age=True)
        # nothing referenced is ever an orphan: the invariant below reads every version and tag

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def every_version_and_tag_reads_the_model(self) -> None:
        for v, rows in self.versions.items():
            assert _rows(self.t.scan(version=v).to_arrow()) == rows, f"version {v}"
        for name, (v, rows) in self.tags.items():
            got = self.t.scan(version=name)
            assert got.version == v
            assert _rows(got.to_arrow()) == rows, f"tag {name}"


class TagsModelWithoutRollback(TagsModel):
    """Without re-adds, expiry decides from file lifetimes alone (the fast path)."""

    allow_rollback = False

    @invariant()
    def decided_by_lifetimes(self) -> None:
        assert self.t.log.latest().last_readd_version is None


_settings = settings(
    max_examples=int(os.environ.get("LAMINA_MODEL_EXAMPLES", "25")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=tuple(Phase) if not os.environ.get("LAMINA_NO_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate),
)
TestTagsModel = TagsModel.TestCase
TestTagsModel.settings = _settings
TestTagsModelWithoutRollback = TagsModelWithoutRollback.TestCase
TestTagsModelWithoutRollback.settings = _settings


class RowLevelModel(TagsModel):
    """The same model plus delete / update / merge (deletion vectors and copy-on-write):
    every version, every tag, and the final 0-stranded check must still hold."""

    @rule(k=st.integers(0, 40), grp=st.one_of(st.none(), st.integers(0, 2)), cow=st.booleans())
    def delete_rows(self, k: int, grp: int | None, cow: bool) -> None:
        where = f"id < {k}" + ("" if grp is None else f" AND grp = {grp}")
        hit = lambda r: r[0] < k and (grp is None or r[1] == grp)  # noqa: E731
        rows = self._latest_rows()
        v = self.t.delete(where, mode="copy-on-write" if cow else None).version
        if not any(hit(r) for r in rows):
            assert v is None  # nothing matched: nothing committed
            return
        self._committed(v, [r for r in rows if not hit(r)])

    @rule(k=st.integers(0, 40), to=st.integers(0, 2))
    def update_rows(self, k: int, to: int) -> None:
        rows = self._latest_rows()
        v = self.t.update(f"id >= {k}", set={"grp": str(to)}).version
        if not any(r[0] >= k for r in rows):
            assert v is None
            return
        self._committed(v, [(i, to) if i >= k else (i, g) for i, g in rows])

    @rule(pick=st.lists(st.integers(0, 60), min_size=1, max_size=6, unique=True), to=st.integers(0, 2), drop=st.booleans())
    def merge_rows(self, pick: list[int], to: int, drop: bool) -> None:
        rows = self._latest_rows()
        src = pa.table({"id": pick, "grp": [to] * len(pick)}, schema=SCHEMA)
        m = self.t.merge(src, on="id")
        m = m.when_matched_delete() if drop else m.when_matched_update({"grp": "source.grp"})
        res = m.when_not_matched_insert_all().execute()
        have = {i for i, _ in rows}
        keys = set(pick)
        out = [] if drop else [(i, to) for i, _ in rows if i in keys]
        out += [r for r in rows if r[0] not in keys] + [(i, to) for i in pick if i not in have]
        self.next_id = max(self.next_id, max(pick) + 1)
        self._committed(res.version, out)


TestRowLevelModel = RowLevelModel.TestCase
TestRowLevelModel.settings = _settings


class RowLevelModelWithoutRollback(RowLevelModel):
    allow_rollback = False

    @invariant()
    def decided_by_lifetimes(self) -> None:
        assert self.t.log.latest().last_readd_version is None


TestRowLevelModelWithoutRollback = RowLevelModelWithoutRollback.TestCase
TestRowLevelModelWithoutRollback.settings = _settings
