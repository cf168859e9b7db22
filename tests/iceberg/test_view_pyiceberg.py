"""The Iceberg view read by a real Iceberg reader (pyiceberg's StaticTable): for random
histories of appends, deletes (deletion vectors), updates, merges, compaction, schema and
partition evolution, tags, branches, rollbacks and expiry, every retained version, tag and
branch read through the view equals Lamina's own read of it, with and without filters, and
pyiceberg prunes files by the statistics the view carries."""

from __future__ import annotations

import math
from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import lamina
from lamina.iceberg import flush, snapshot_id_of

pyiceberg_table = pytest.importorskip("pyiceberg.table", reason="pyiceberg is in the test extra (pip install -e .[test])")
StaticTable = pyiceberg_table.StaticTable

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("day", pa.date32()),
                    ("small", pa.int32())])


def rows_of(table: pa.Table) -> list[tuple]:
    """A table's rows as a sorted list (a multiset), by column name, NaN and None comparable."""
    names = sorted(table.column_names)
    cols = [table.column(n).to_pylist() for n in names]

    def norm(v):
        if isinstance(v, float) and math.isnan(v):
            return ("nan",)
        return v

    out = [tuple(norm(c[i]) for c in cols) for i in range(table.num_rows)]
    return sorted(out, key=repr)


def read_view(location: str, snapshot_id: int, row_filter: str | None = None) -> pa.Table:
    flush()  # the view is written in the background: what this process committed lands first
    view = StaticTable.from_metadata(location)
    scan = view.scan(snapshot_id=snapshot_id) if row_filter is None else view.scan(snapshot_id=snapshot_id, row_filter=row_filter)
    return scan.to_arrow()


def batch(start: int, n: int, day0: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([None if i % 7 == 3 else f"n{i % 5}" for i in ids], pa.string()),
        "amount": pa.array([float("nan") if i % 11 == 5 else (None if i % 13 == 4 else i * 0.5 - 10) for i in ids],
                           pa.float64()),
        "day": pa.array([day0 + i % 3 for i in ids], pa.date32()),
        "small": pa.array([i % 100 - 50 for i in ids], pa.int32()),
    })


class ViewMachine(RuleBasedStateMachine):
    """A table with the view on; each rule is one Lamina change, each check reads the view."""

    def __init__(self) -> None:
        super().__init__()
        self.next_id = 0
        self.tags: list[str] = []
        self.branches: list[str] = []

    @initialize(partition=st.sampled_from([None, "day", "bucket(4, id)", "truncate(2, name)"]),
                inline=st.sampled_from(["64", "0"]))
    def create(self, partition, inline):
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="lamina-iceberg-")
        self.location = f"{self.dir}/t"
        props = {"iceberg.enabled": "true", "manifest.inline-max-files": inline, "manifest.merge-min-leaves": "2"}
        self.t = lamina.create_table(self.location, SCHEMA, partition_by=partition, properties=props)

    def _data(self, n: int) -> pa.Table:
        rows = batch(self.next_id, n, 19_000 + self.next_id % 5)
        self.next_id += n
        names = self.t.schema.names
        return rows.select([c for c in rows.column_names if c in names]) if set(names) <= set(rows.column_names) else rows

    def _columns(self) -> list[str]:
        return self.t.schema.names

    def _conform(self, rows: pa.Table) -> pa.Table:
        """Rows for the table's current columns (renamed, dropped or added since SCHEMA)."""
        out = {}
        for f in self.t.schema:
            src = {"label": "name", "total": "amount"}.get(f.name, f.name)
            out[f.name] = rows.column(src).cast(f.type) if src in rows.column_names else pa.nulls(rows.num_rows, f.type)
        return pa.table(out)

    @rule(n=st.integers(1, 30))
    def append(self, n):
        self.t.append(self._conform(self._data(n)))

    def _every(self, step: int, k: int) -> str:
        """``id IN (...)`` of every ``step``-th id from ``k`` (predicates take no arithmetic)."""
        return f"id IN ({', '.join(str(i) for i in range(k, max(self.next_id, k + 1), step))})"

    @rule(k=st.integers(0, 10))
    def delete(self, k):
        self.t.delete(self._every(10, k))

    @rule(k=st.integers(0, 4), mode=st.sampled_from(["merge-on-read", "copy-on-write"]))
    def update(self, k, mode):
        col = "small" if "small" in self._columns() else None
        assume(col is not None)
        self.t.update(self._every(5, k), {col: "small + 1"}, mode=mode)

    @rule(n=st.integers(1, 10))
    def merge(self, n):
        assume(self.next_id > 0)
        rows = self._conform(batch(max(0, self.next_id - n), n + 3, 19_001))
        self.next_id = max(self.next_id, self.next_id + 3)
        self.t.merge(rows, on="id").when_matched_update_all().when_not_matched_insert_all().execute()

    @rule()
    def compact(self):
        self.t.maintenance.compact()

    @rule(what=st.sampled_from(["add", "rename", "widen", "drop"]))
    def evolve(self, what):
        names = self._columns()
        with self.t.update_schema() as u:
            if what == "add" and "extra" not in names:
                u.add_column("extra", pa.string())
            elif what == "rename" and "name" in names:
                u.rename_column("name", "label")
            elif what == "widen" and self.t.schema.field("small").type == pa.int32():
                u.update_column("small", pa.int64())
            elif what == "drop" and "extra" in names:
                u.drop_column("extra")
            else:
                self.added = getattr(self, "added", 0) + 1
                u.add_column(f"c{self.added}", pa.int64())

    @rule(transform=st.sampled_from(["identity", "bucket[2]", "month"]))
    def evolve_spec(self, transform):
        source = {"identity": "small", "bucket[2]": "id", "month": "day"}[transform]
        names = [f.name for f in self.t.partition_spec.fields]
        name = f"{source}_{transform.replace('[', '').replace(']', '')}"
        assume(name not in names and source in self._columns())
        with self.t.update_spec() as u:
            u.add_field(source, transform, name)

    @rule()
    def tag(self):
        name = f"tag{len(self.tags)}"
        self.t.tags.create(name)
        self.tags.append(name)

    @precondition(lambda self: len(self.branches) < 2)
    @rule(n=st.integers(1, 5))
    def branch(self, n):
        name = f"b{len(self.branches)}"
        b = self.t.branches.create(name)
        b.append(self._conform(self._data(n)))
        b.delete(self._every(3, 0))
        self.branches.append(name)

    @precondition(lambda self: self.t.version > 3)
    @rule(back=st.integers(1, 3))
    def rollback(self, back):
        versions = [h["version"] for h in self.t.history()]
        target = versions[min(back, len(versions) - 1)]
        self.t.rollback(target)

    @rule(keep=st.integers(1, 4))
    def expire(self, keep):
        self.t.maintenance.expire_versions(retain_last=keep, reader_grace=timedelta(0), older_than=timedelta(0))

    # -- what the view must show ---------------------------------------------------------

    @invariant()
    def view_equals_lamina(self):
        if not hasattr(self, "t"):
            return
        flush()
        view = StaticTable.from_metadata(self.location)
        meta = view.metadata
        assert meta.current_snapshot_id == snapshot_id_of(self.t.metadata.commit_id)
        snapshot_ids = {s.snapshot_id for s in meta.snapshots}
        checks = [(h["version"], None) for h in self.t.history()]
        checks += [(None, name) for name in self.tags]
        for version, tag in checks:
            vm = self.t.tags.get(tag).version if tag else self.t.log.load(version)
            sid = snapshot_id_of(vm.commit_id)
            assert sid in snapshot_ids, f"version {vm.version} has no snapshot"
            if tag:
                assert meta.refs[tag].snapshot_id == sid
            got = view.scan(snapshot_id=sid).to_arrow()
            want = self.t.scan(version=tag or vm.version).to_arrow()
            assert rows_of(got) == rows_of(want), f"version {vm.version} (tag {tag})"
        for name in self.branches:
            head = self.t.branch(name)
            assert meta.refs[name].snapshot_id == snapshot_id_of(head.metadata.commit_id)
            got = view.scan(snapshot_id=meta.refs[name].snapshot_id).to_arrow()
            assert rows_of(got) == rows_of(head.to_arrow()), f"branch {name}"
        # a filter: the same rows, from fewer files where the statistics rule files out
        if self.next_id > 20:
            cut = self.next_id - 5
            got = view.scan(row_filter=f"id >= {cut}").to_arrow()
            want = self.t.scan(where=f"id >= {cut}").to_arrow()
            assert rows_of(got) == rows_of(want)


ViewMachine.TestCase.settings = settings(
    max_examples=12, stateful_step_count=15, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestView = ViewMachine.TestCase


def test_planning_prunes_by_the_views_statistics(tmp_path):
    """A selective filter plans fewer files through the view than a full scan: the bounds,
    null counts and partition summaries are there and readable."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by="day", properties={"iceberg.enabled": "true"})
    for i in range(10):
        t.append(batch(i * 100, 100, 19_000 + i))
    flush()
    view = StaticTable.from_metadata(str(tmp_path / "t"))
    every = list(view.scan().plan_files())
    by_id = list(view.scan(row_filter="id >= 950").plan_files())
    by_day = list(view.scan(row_filter="day = '2022-01-08'").plan_files())  # 19000 = 2022-01-08
    by_null = list(view.scan(row_filter="name is null and id < 100").plan_files())
    assert len(every) == 30  # three days in each append
    assert len(by_id) == 3  # the last append's files
    assert len(by_day) == 1  # the partition of one day
    assert 1 <= len(by_null) <= 3  # the first append's files that hold a null name
    assert rows_of(view.scan(row_filter="id >= 950").to_arrow()) == rows_of(t.scan(where="id >= 950").to_arrow())
