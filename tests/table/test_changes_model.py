"""Row lineage and the change data feed against a model, checked after every step
of random histories.

Steps: appends, overwrites (whole table and by predicate), deletes, updates, merges (a
delete, an update and an insert clause), each in either delete mode (merge-on-read or
copy-on-write), compaction, manifest rewrites, rollback to a random earlier version,
transactions of two of those operations, and adding a column. The table is on local disk,
partitioned or not, with a tiny manifest tree (so leaves are written, shared between
versions and merged) and small data files; some tables start without row lineage and get it
from ``enable_row_lineage``.

The model keeps the live rows by key, each with its row id (None until the table assigns
one) and the version that last wrote it. After each commit the latest version must read back
exactly the model's rows, and:

- a row no operation touched keeps its ``_row_id`` and ``_last_updated_version``; an updated
  row keeps its ``_row_id`` and gets the new version; a new row (append, insert, overwrite)
  gets an id no version ever had; a rollback restores the target's ids and versions;
  ``_row_id``s are unique within the version;
- ``changes(v - 1, v)`` is exactly the difference of the two versions' rows by row id (same id,
  different version: an update's pre- and post-image; only before: a delete; only after: an
  insert); compaction and manifest rewrites yield nothing;
- for sampled pairs of versions a < b, ``changes(a, b)`` applied in commit order to version a's
  rows (keyed by ``_row_id``: a delete or pre-image removes a row and must match it, an insert
  or post-image adds one) gives exactly version b's rows;
- every earlier version still reads, by ``scan(version=v)``, the rows and ids recorded for it.

CI runs a bounded search; for a longer one:
``LAMINA_CDF_EXAMPLES=200 LAMINA_CDF_STEPS=40 pytest tests/table/test_changes_model.py``.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections import Counter
from typing import Any, Callable

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import lamina
from lamina.commit import flush_hints

RID, LU = "_row_id", "_last_updated_version"
SCHEMA = pa.schema([pa.field("k", pa.int64(), False), pa.field("g", pa.int64()), pa.field("v", pa.string())])
GROUPS = [0, 1, 2, 3]
WORDS = ["a", "b", "c", "d"]
EXTRA_COLUMNS = ["x1", "x2"]  # added by add_column, int64
MODES = ["merge-on-read", "copy-on-write"]
PROPS = {
    # a tiny manifest tree: leaves are written, carried over unchanged and merged
    "manifest.inline-max-files": 2, "manifest.leaf-target-files": 3, "manifest.merge-min-leaves": 2,
    # several files per write, so row-level changes touch some files of a version and not others
    "write.max-rows-per-file": 3,
}
# Data operations (the ``op_`` methods), alone or two in a transaction.
KINDS = ["append", "delete", "update", "merge", "overwrite", "overwrite_where"]
Row = dict[str, Any]  # the columns, RID (None until assigned) and LU


class ChangeFeedModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="lamina-cdf-")
        self.cols = [f.name for f in SCHEMA]
        self.rows: dict[int, Row] = {}  # by key k
        self.next_k = 0
        # version -> (its columns, its rows by row id); every version from the first with lineage
        self.snaps: dict[int, tuple[list[str], dict[int, Row]]] = {}
        self.kinds: dict[int, str] = {}
        self.seen_ids: set[int] = set()  # every row id any version had

    # -- data ------------------------------------------------------------------------------

    def new_rows(self, rnd: random.Random, n: int, g: int | None = None) -> list[Row]:
        out = []
        for _ in range(n):
            self.next_k += 1
            r = {c: None for c in self.cols}
            r.update(k=self.next_k, g=rnd.choice(GROUPS) if g is None else g, v=rnd.choice(WORDS))
            for c in self.cols[3:]:
                r[c] = rnd.choice([None, rnd.randint(-5, 5)])
            out.append(r)
        return out

    def arrow(self, rows: list[Row], extra: dict[str, list[Any]] | None = None) -> pa.Table:
        types = {"k": pa.int64(), "g": pa.int64(), "v": pa.string()}
        data = {c: pa.array([r[c] for r in rows], types.get(c, pa.int64())) for c in self.cols}
        data.update({c: pa.array(vals) for c, vals in (extra or {}).items()})
        return pa.table(data)

    def predicate(self, rnd: random.Random) -> tuple[str, Callable[[Row], bool]]:
        """A random SQL predicate, and the model's test of a row for it."""
        kind = rnd.choice(["g=", "g!=", "k<", "k>=", "v=", "g in"])
        g, w, k = rnd.choice(GROUPS), rnd.choice(WORDS), rnd.randint(0, self.next_k + 1)
        return {
            "g=": (f"g = {g}", lambda r: r["g"] == g),
            "g!=": (f"g != {g}", lambda r: r["g"] != g),
            "k<": (f"k < {k}", lambda r: r["k"] < k),
            "k>=": (f"k >= {k}", lambda r: r["k"] >= k),
            "v=": (f"v = '{w}'", lambda r: r["v"] == w),
            "g in": (f"g IN ({g}, {(g + 1) % 4})", lambda r: r["g"] in (g, (g + 1) % 4)),
        }[kind]

    # -- operations: each returns what to do to the table (or transaction) and to the model ---

    def op_append(self, rnd: random.Random) -> tuple[Callable, Callable]:
        rows = self.new_rows(rnd, rnd.randint(1, 7))

        def model(v: int) -> None:
            for r in rows:
                self.rows[r["k"]] = {**r, RID: None, LU: v}

        return (lambda t: t.append(self.arrow(rows))), model

    def op_delete(self, rnd: random.Random) -> tuple[Callable, Callable]:
        where, test = self.predicate(rnd)
        mode = rnd.choice(MODES)

        def model(v: int) -> None:
            self.rows = {k: r for k, r in self.rows.items() if not test(r)}

        return (lambda t: t.delete(where, mode=mode)), model

    def op_update(self, rnd: random.Random) -> tuple[Callable, Callable]:
        where, test = self.predicate(rnd)
        mode = rnd.choice(MODES)
        column = rnd.choice(["g", "v", *self.cols[3:]])
        value = rnd.choice(WORDS) if column == "v" else rnd.choice(GROUPS)
        sql = f"'{value}'" if column == "v" else str(value)

        def model(v: int) -> None:
            for r in self.rows.values():
                if test(r):
                    r[column], r[LU] = value, v

        return (lambda t: t.update(where, set={column: sql}, mode=mode)), model

    def op_merge(self, rnd: random.Random) -> tuple[Callable, Callable]:
        """Source rows matching live keys are deleted (op 'D') or update every column; the rest
        are inserted."""
        mode = rnd.choice(MODES)
        matched = rnd.sample(sorted(self.rows), min(len(self.rows), rnd.randint(0, 4)))
        source = []
        for k in matched:
            r = self.new_rows(rnd, 1)[0]
            r["k"] = k
            source.append(r)
        source += self.new_rows(rnd, rnd.randint(0, 3))
        ops = [rnd.choice("DU") for _ in source]

        def table(t: Any) -> Any:
            b = t.merge(self.arrow(source, {"op": ops}), on="k", mode=mode)
            b = b.when_matched_delete(condition="source.op = 'D'").when_matched_update_all().when_not_matched_insert_all()
            return b.execute()

        def model(v: int) -> None:
            for r, op in zip(source, ops):
                if r["k"] not in self.rows:
                    self.rows[r["k"]] = {**r, RID: None, LU: v}
                elif op == "D":
                    del self.rows[r["k"]]
                else:
                    self.rows[r["k"]].update({**r, LU: v})

        return table, model

    def op_overwrite(self, rnd: random.Random) -> tuple[Callable, Callable]:
        rows = self.new_rows(rnd, rnd.randint(0, 5))

        def model(v: int) -> None:
            self.rows = {r["k"]: {**r, RID: None, LU: v} for r in rows}

        return (lambda t: t.overwrite(self.arrow(rows))), model

    def op_overwrite_where(self, rnd: random.Random) -> tuple[Callable, Callable]:
        """Replace one group's rows (every new row is in the group, as overwrite requires)."""
        g = rnd.choice(GROUPS)
        rows = self.new_rows(rnd, rnd.randint(0, 4), g=g)

        def model(v: int) -> None:
            self.rows = {k: r for k, r in self.rows.items() if r["g"] != g}
            self.rows.update({r["k"]: {**r, RID: None, LU: v} for r in rows})

        return (lambda t: t.overwrite(self.arrow(rows), where=f"g = {g}")), model

    def op_compact(self, rnd: random.Random) -> tuple[Callable, Callable]:
        return (lambda t: t.maintenance.compact()), (lambda v: None)  # rows move to other files, none changes

    def op_rewrite_manifests(self, rnd: random.Random) -> tuple[Callable, Callable]:
        return (lambda t: t.maintenance.rewrite_manifests()), (lambda v: None)

    def op_rollback(self, rnd: random.Random) -> tuple[Callable, Callable]:
        target = rnd.choice(sorted(self.snaps)[:-1] or sorted(self.snaps))
        _, rows = self.snaps[target]

        def model(v: int) -> None:
            # the target's rows, ids and versions (columns added since read null)
            self.rows = {r["k"]: {**{c: r.get(c) for c in self.cols}, RID: r[RID], LU: r[LU]} for r in rows.values()}

        return (lambda t: t.rollback(target)), model

    # -- committing and checking -----------------------------------------------------------

    def run(self, kind: str, table: Callable[[Any], Any], model: Callable[[int], None]) -> None:
        before = self.t.version
        rows_before = {k: dict(r) for k, r in self.rows.items()}
        table(self.t)
        self.t.refresh()
        model(before + 1)
        if self.t.version == before:  # nothing matched: nothing committed, nothing changed
            assert self.rows == rows_before, f"{kind} committed nothing but the model changed"
            return
        assert self.t.version == before + 1
        self.commit_checked(kind)

    def commit_checked(self, kind: str) -> None:
        """The latest version against the model: rows, ids and versions; then recorded."""
        v = self.t.version
        got = self.t.scan(columns=[*self.cols, RID, LU]).to_arrow().to_pylist()
        ids = [r[RID] for r in got]
        assert len(set(ids)) == len(ids), f"version {v} ({kind}): duplicate row ids"
        by_k = {r["k"]: r for r in got}
        assert sorted(by_k) == sorted(self.rows), f"version {v} ({kind}): keys differ from the model"
        for k, want in self.rows.items():
            have = by_k[k]
            assert {c: have[c] for c in self.cols} == {c: want.get(c) for c in self.cols}, f"version {v} ({kind}) row {k}"
            assert have[LU] == want[LU], f"version {v} ({kind}) row {k}: last updated {have[LU]}, model {want[LU]}"
            if want[RID] is None:
                assert have[RID] not in self.seen_ids, f"version {v} ({kind}) row {k}: a new row got an old id {have[RID]}"
                want[RID] = have[RID]
            else:
                assert have[RID] == want[RID], f"version {v} ({kind}) row {k}: row id {have[RID]}, was {want[RID]}"
        self.seen_ids.update(ids)
        self.kinds[v] = kind
        self.snaps[v] = (list(self.cols), {r[RID]: dict(r) for r in self.rows.values()})
        self.check_version_changes(v)

    def feed(self, a: int, b: int) -> list[Row]:
        """changes(a, b) with every column of version b and the lineage columns."""
        return self.t.changes(a, b, columns=[*self.snaps[b][0], RID, LU]).to_arrow().to_pylist()

    def check_version_changes(self, v: int) -> None:
        """changes(v - 1, v) is the two versions' difference by row id, exactly."""
        if v - 1 not in self.snaps:
            return
        _, before = self.snaps[v - 1]
        _, after = self.snaps[v]
        want: Counter = Counter()
        for rid in before.keys() | after.keys():
            old, new = before.get(rid), after.get(rid)
            if old is not None and new is not None:
                if old[LU] == new[LU]:
                    assert self.values(old) == self.values(new), f"version {v}: row {rid} changed, its version did not"
                    continue
                want[("update_preimage", self.image(old))] += 1
                want[("update_postimage", self.image(new))] += 1
            elif old is not None:
                want[("delete", self.image(old))] += 1
            else:
                want[("insert", self.image(new))] += 1
        feed = self.feed(v - 1, v)
        assert all(r["_commit_version"] == v for r in feed)
        got = Counter((r["_change_type"], self.image(r)) for r in feed)
        assert got == want, f"changes of version {v} ({self.kinds[v]})"
        if self.kinds[v] in ("compact", "rewrite_manifests", "add_column"):
            assert not feed, f"{self.kinds[v]} yielded change rows"

    def values(self, r: Row, cols: list[str] | None = None) -> tuple:
        return tuple(r.get(c) for c in (cols or self.cols))

    def image(self, r: Row) -> tuple:
        return (r[RID], r[LU], *self.values(r))

    # -- set-up ----------------------------------------------------------------------------

    @initialize(mode=st.sampled_from(MODES), partitioned=st.booleans(), late_lineage=st.booleans(), seed=st.integers(0, 2**16))
    def create(self, mode: str, partitioned: bool, late_lineage: bool, seed: int) -> None:
        props = {**PROPS, "write.delete.mode": mode}
        if late_lineage:
            props["row-lineage.enabled"] = "false"
        self.t = lamina.create_table(f"{self.root}/t", SCHEMA, partition_by="g" if partitioned else None, properties=props)
        if not late_lineage:
            self.commit_checked("create")
            return
        # Rows written before lineage get ids in the version that enables it; their version
        # is the one that added their file. The range starts there: nothing before it.
        rnd = random.Random(seed)
        rows = self.new_rows(rnd, 6)
        added = self.t.append(self.arrow(rows)).version
        self.t.delete(f"k = {rows[1]['k']}", mode="merge-on-read")  # the file stays, with a DV
        self.rows = {r["k"]: {**r, RID: None, LU: added} for r in rows if r is not rows[1]}
        self.t.enable_row_lineage()
        self.commit_checked("enable_row_lineage")

    # -- rules -----------------------------------------------------------------------------

    @rule(kind=st.sampled_from([*KINDS, "compact", "rewrite_manifests", "rollback"]),
          then=st.one_of(st.none(), st.sampled_from(KINDS)), seed=st.integers(0, 2**16))
    def operation(self, kind: str, then: str | None, seed: int) -> None:
        """One operation, or (``then``, after a data operation) two data operations as one
        transaction, the second seeing the first (its rows, its ids)."""
        rnd = random.Random(seed)
        first_table, first_model = getattr(self, f"op_{kind}")(rnd)
        if then is None or kind not in KINDS:
            self.run(kind, first_table, first_model)
            return
        # The second operation is planned on the model as it is after the first.
        saved = {k: dict(r) for k, r in self.rows.items()}
        first_model(self.t.version + 1)
        second_table, second_model = getattr(self, f"op_{then}")(rnd)
        after_first, self.rows = self.rows, saved

        def table(t: Any) -> None:
            with t.transaction() as tx:
                first_table(tx)
                second_table(tx)

        def model(v: int) -> None:
            self.rows = after_first
            second_model(v)

        self.run(f"{kind}+{then}", table, model)

    @precondition(lambda self: len(self.cols) < len(SCHEMA) + len(EXTRA_COLUMNS))
    @rule()
    def add_column(self) -> None:
        name = EXTRA_COLUMNS[len(self.cols) - len(SCHEMA)]

        def model(v: int) -> None:
            self.cols.append(name)
            for r in self.rows.values():
                r[name] = None

        self.run("add_column", lambda t: t.update_schema().add_column(name, pa.int64()).commit(), model)

    # -- reads -----------------------------------------------------------------------------

    @precondition(lambda self: len(self.snaps) > 1)
    @rule(data=st.data(), check=st.sampled_from(["replay", "whole_history", "filtered", "time_travel"]),
          seed=st.integers(0, 2**16))
    def read(self, data: st.DataObject, check: str, seed: int) -> None:
        versions = sorted(self.snaps)
        if check == "whole_history":
            self.check_pair(versions[0], versions[-1])
        elif check == "time_travel":
            self.check_time_travel(data.draw(st.sampled_from(versions)))
        else:
            a = data.draw(st.sampled_from(versions[:-1]))
            b = data.draw(st.sampled_from([v for v in versions if v > a]))
            self.check_pair(a, b) if check == "replay" else self.check_filtered(a, b, random.Random(seed))

    def check_pair(self, a: int, b: int) -> None:
        """changes(a, b) applied in commit order to version a's rows gives version b's."""
        cols, end = self.snaps[b]
        state = {rid: self.values(r, cols) for rid, r in self.snaps[a][1].items()}
        feed = sorted(self.feed(a, b), key=lambda r: (r["_commit_version"], r["_change_type"] in ("insert", "update_postimage")))
        for r in feed:
            assert a < r["_commit_version"] <= b
            if r["_change_type"] in ("delete", "update_preimage"):
                assert state.pop(r[RID], None) == self.values(r, cols), f"changes({a}, {b}): {r} removes a row version {a} did not have so"
            else:
                assert r[RID] not in state, f"changes({a}, {b}): {r} adds a row id already live"
                state[r[RID]] = self.values(r, cols)
        assert state == {rid: self.values(r, cols) for rid, r in end.items()}, f"changes({a}, {b}) applied to {a}"

    def check_filtered(self, a: int, b: int, rnd: random.Random) -> None:
        """``where`` keeps the change rows it selects (after pairing: an update whose other
        image it drops stays an update), ``columns`` projects them: the full feed, filtered."""
        where, test = self.predicate(rnd)
        cols = rnd.sample(self.snaps[b][0], rnd.randint(1, len(self.snaps[b][0])))
        meta = ["_change_type", "_commit_version"]
        got = self.t.changes(a, b, where=where, columns=cols).to_arrow()
        assert got.column_names == [*cols, *meta, "_commit_timestamp"]
        want = [tuple(r[c] for c in [*cols, *meta]) for r in self.feed(a, b) if test(r)]
        have = [tuple(r.values()) for r in got.select([*cols, *meta]).to_pylist()]
        assert sorted(have, key=repr) == sorted(want, key=repr), where

    def check_time_travel(self, v: int) -> None:
        """An earlier version still reads the rows, ids and versions recorded for it."""
        cols, rows = self.snaps[v]
        got = self.t.scan(version=v, columns=[*cols, RID, LU]).to_arrow().to_pylist()
        assert {r[RID]: (r[LU], self.values(r, cols)) for r in got} == {
            rid: (r[LU], self.values(r, cols)) for rid, r in rows.items()}, f"version {v} reads otherwise now"

    @invariant()
    def counter_is_above_every_id(self) -> None:
        if hasattr(self, "t") and self.seen_ids:
            assert self.t.metadata.next_row_id > max(self.seen_ids)

    def teardown(self) -> None:
        flush_hints()
        shutil.rmtree(self.root, ignore_errors=True)


ChangeFeedModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("LAMINA_CDF_EXAMPLES", "10")),
    stateful_step_count=int(os.environ.get("LAMINA_CDF_STEPS", "25")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=tuple(Phase) if not os.environ.get("LAMINA_NO_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate),
)
test_change_feed_matches_the_model = pytest.mark.xdist_group("cdf-model")(ChangeFeedModel.TestCase)
