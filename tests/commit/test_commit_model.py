"""A model of a table's history, checked after every step of random histories (hypothesis).

Steps: appends; appends whose version put is held and lands later, after any number of
other steps (a stalled network, a paused process); version expiry (with slots freed as
early as possible, or never); orphan cleanup (only while no write is in flight: its
minimum age is what protects those); tags; rollbacks, destructive or not.

The model is what each acknowledged commit made of its parent: version -> rows. After
every step: the latest version is the newest acknowledged commit and holds exactly its
rows; every retained version and every tag reads back exactly the rows the model has for
it; fsck finds nothing missing or damaged and no file is left in a freed slot (nor in a
slot expired longer ago than the slot retention).

CI runs a fixed number of derandomized examples; for a longer search:
``LAMINA_MODEL_EXAMPLES=500 LAMINA_MODEL_STEPS=40 pytest tests/commit/test_commit_model.py``.
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import lamina
from lamina.commit import flush_hints
from lamina.maintenance import fsck
from lamina.timeutil import now_ms

from support import workers
from support.delayed_writer import DelayedWriter, rows_of

NOW = timedelta(0)
ROWS = 2
TAG_NAMES = ["t1", "t2", "t3"]


class TableHistory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="lamina-model-")
        self.uri = f"{self.root}/t"
        self.model: dict[int, collections.Counter] = {}
        self.tags: dict[str, int] = {}
        self.in_flight: list[DelayedWriter] = []
        self.seq = 0

    @initialize(freeing=st.booleans(), inline=st.sampled_from([1, 64]))
    def create(self, freeing: bool, inline: int) -> None:
        props = {"manifest.inline-max-files": str(inline)}
        if freeing:  # tiny chunks, freed as soon as their versions expire
            props.update({"version.slot-chunk-size": "2", "expire.slot-retention-ms": "0"})
        self.t = lamina.create_table(self.uri, workers.schema(), properties=props)
        self.model[0] = collections.Counter()

    def _acked(self, version: int, base_rows: collections.Counter) -> None:
        assert version not in self.model, f"version {version} acknowledged twice"
        assert version == max(self.model) + 1, f"acknowledged {version} after {max(self.model)}"
        self.model[version] = base_rows

    def _next_rows(self, writer: int) -> tuple[int, collections.Counter]:
        self.seq += 1
        return self.seq, collections.Counter((writer, self.seq, i) for i in range(ROWS))

    # -- writes ------------------------------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def append(self, n: int) -> None:
        for _ in range(n):  # several at once: slots a delayed put aims at fall behind faster
            seq, new = self._next_rows(0)
            v = self.t.append(workers.batch(0, seq, ROWS)).version
            self._acked(v, self.model[v - 1] + new)

    @precondition(lambda self: len(self.in_flight) < 3)
    @rule()
    def start_delayed_append(self) -> None:
        seq, _ = self._next_rows(1)
        self.in_flight.append(DelayedWriter(self.uri, 1, seq))

    @precondition(lambda self: self.in_flight)
    @rule(pick=st.integers(0, 2))
    def land_delayed_append(self, pick: int) -> None:
        w = self.in_flight.pop(pick % len(self.in_flight))
        freed = self.t.log.freed_ranges()
        event(f"late put aims at a {'freed' if any(a <= w.base + 1 <= b for a, b in freed) else 'taken' if w.base + 1 <= max(self.model) else 'free'} slot")
        v = w.land()
        self._acked(v, self.model[v - 1] + collections.Counter((1, w.data.column("seq")[0].as_py(), i) for i in range(ROWS)))

    @precondition(lambda self: self.in_flight)
    @rule(n=st.integers(2, 4))
    def overtake_delayed_appends(self, n: int) -> None:
        """Commits overtake the writes in flight and expiry retires the slots they aim at."""
        self.append(n)
        self.expire(1)

    @precondition(lambda self: len(self.in_flight) < 3)
    @rule(n=st.integers(2, 4))
    def delayed_append_overtaken(self, n: int) -> None:
        """The whole story in one step: a put stalls, commits overtake it, expiry retires
        (and, on a freeing table, frees) its slot, then it lands."""
        self.start_delayed_append()
        self.overtake_delayed_appends(n)
        self.land_delayed_append(len(self.in_flight) - 1)

    @precondition(lambda self: len(self.model) > 1)
    @rule(pick=st.integers(0, 50), by_tag=st.booleans(), destructive=st.booleans())
    def rollback(self, pick: int, by_tag: bool, destructive: bool) -> None:
        if by_tag and self.tags:
            name = sorted(self.tags)[pick % len(self.tags)]
            target = self.tags[name]
            v = self.t.rollback(name, destructive=destructive).version
        else:
            retained = self.t.log.list_versions()
            target = retained[pick % len(retained)]
            v = self.t.rollback(target, destructive=destructive).version
        self._acked(v, self.model[target])

    # -- maintenance --------------------------------------------------------------------------

    @rule(retain=st.integers(1, 3))
    def expire(self, retain: int) -> None:
        self.t.maintenance.expire_versions(retain_last=retain, reader_grace=NOW)

    @precondition(lambda self: not self.in_flight)
    @rule()
    def remove_orphans(self) -> None:
        self.t.maintenance.remove_orphans(NOW, allow_short_age=True)

    @rule(name=st.sampled_from(TAG_NAMES))
    def create_tag(self, name: str) -> None:
        if name in self.tags:
            return
        tag = self.t.tags.create(name)
        assert tag.tagged_version == max(self.model)
        self.tags[name] = tag.tagged_version

    @precondition(lambda self: self.tags)
    @rule(pick=st.integers(0, 2))
    def delete_tag(self, pick: int) -> None:
        name = sorted(self.tags)[pick % len(self.tags)]
        self.t.tags.delete(name)
        del self.tags[name]

    # -- what must hold after every step ---------------------------------------------------------

    @invariant()
    def history_matches_the_model(self) -> None:
        if not self.model:
            return
        flush_hints()
        t = lamina.open_table(self.uri)
        assert t.version == max(self.model), "the latest version is not the newest acknowledged commit"
        assert rows_of(t.to_arrow()) == self.model[t.version]
        for v in t.log.list_versions():
            assert rows_of(t.scan(version=v).to_arrow()) == self.model[v], f"version {v} reads wrong"
        for name, v in self.tags.items():
            assert rows_of(t.scan(version=name).to_arrow()) == self.model[v], f"tag {name} reads wrong"
        report = fsck(t)
        assert not report.missing and not report.errors, (report.missing, report.errors)
        # Slot files in recorded ranges (expired versions' files) stay until their record is
        # older than the slot retention; none older is left (expiry and orphan cleanup free
        # them, a writer withdraws its put from a freed slot).
        assert t.log.scan_slots().freeable_strays(now_ms(), t.metadata.properties) == []

    def teardown(self) -> None:
        for w in self.in_flight:
            try:
                w.land()
            except Exception:  # noqa: BLE001 - cleaning up after a failed example
                pass
        flush_hints()
        shutil.rmtree(self.root, ignore_errors=True)


TableHistory.TestCase.settings = settings(
    max_examples=int(os.environ.get("LAMINA_MODEL_EXAMPLES", "25")),
    stateful_step_count=int(os.environ.get("LAMINA_MODEL_STEPS", "18")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
test_table_history_matches_the_model = pytest.mark.xdist_group("model")(TableHistory.TestCase)
