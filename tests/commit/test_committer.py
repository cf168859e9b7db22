"""Commit protocol: unknown outcomes resolved by commit id, conflicts, bounded retries."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import Change, CommitOptions, ObjectStoreCoordinator
from lamina.errors import CommitConflict, CommitRetriesExhausted, CommitStateUnknown, StorageError
from lamina.commit import Operation, removed_of

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())])


def rows(start: int, n: int = 3) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "s": [str(i) for i in range(start, start + n)]}, schema=SCHEMA)


def ids(t) -> list[int]:
    return sorted(t.scan().to_arrow().column("id").to_pylist())


class FlakyCoordinator(ObjectStoreCoordinator):
    """Real put-if-absent, with scripted failures: 'lost' = landed but the caller sees an error,
    'fail' = did not land and the caller sees an error, 'ok' = normal."""

    def __init__(self, io, script):
        super().__init__(io)
        self.script = list(script)
        self.calls = 0

    def publish(self, vm):
        self.calls += 1
        mode = self.script.pop(0) if self.script else "ok"
        if mode == "fail":
            raise StorageError("connection reset before the request was sent")
        super().publish(vm)
        if mode == "lost":
            raise StorageError("timeout waiting for the response")


def _table_with(tmp_path, script):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0))
    coord = FlakyCoordinator(t.io, script)
    return lamina.table.Table(t.io, t.log, t.metadata, coord), coord


def test_lost_response_is_resolved_as_success_without_duplicate(tmp_path):
    t, coord = _table_with(tmp_path, ["lost"])
    v = t.append(rows(100)).version
    assert v == 2 and coord.calls == 1
    fresh = lamina.open_table(t.uri)
    assert fresh.version == 2 and ids(fresh) == [0, 1, 2, 100, 101, 102]


def test_failed_put_is_retried_on_the_same_version(tmp_path):
    t, coord = _table_with(tmp_path, ["fail", "fail", "ok"])
    assert t.append(rows(100)).version == 2 and coord.calls == 3
    assert ids(lamina.open_table(t.uri)) == [0, 1, 2, 100, 101, 102]


def test_store_that_never_answers_raises_state_unknown_with_commit_id(tmp_path):
    t, coord = _table_with(tmp_path, ["fail"] * 50)
    with pytest.raises(CommitStateUnknown, match="commit"):
        t.append(rows(100))
    assert lamina.open_table(t.uri).version == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(st.sampled_from(["ok", "lost", "fail"]), max_size=12), n=st.integers(1, 5))
def test_any_fault_sequence_acknowledges_each_append_exactly_once(tmp_path_factory, script, n):
    t, _ = _table_with(tmp_path_factory.mktemp("f"), script)
    acked = []
    for i in range(n):
        try:
            acked.append((t.append(rows(1000 * (i + 1), 2)).version, 1000 * (i + 1)))
        except CommitStateUnknown:
            pass
    fresh = lamina.open_table(t.uri)
    got = ids(fresh)
    assert len(got) == len(set(got))  # no duplicates, ever
    for version, start in acked:  # every acknowledged append is there, at the version it was acked as
        assert {start, start + 1} <= set(got)
        assert {start, start + 1} <= set(fresh.scan(version=version).to_arrow().column("id").to_pylist())
    versions = [v for v, _ in acked]
    assert len(versions) == len(set(versions))


def test_stale_writer_rebases_and_appends_never_conflict(tmp_path):
    a = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    b = lamina.open_table(a.uri)
    a.append(rows(0))
    assert b.version == 0
    assert b.append(rows(10)).version == 2  # lost version 1 to a, rebased onto it
    assert ids(lamina.open_table(a.uri)) == [0, 1, 2, 10, 11, 12]


def test_a_rebased_append_records_the_version_it_landed_as(tmp_path):
    """An append's entries are built for the version after its table object's; one that lands
    later (a rebase) records the version it landed as, with row ids after the winner's."""
    a = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    b = lamina.open_table(a.uri)
    a.append(rows(0))
    b.append(rows(10))  # built for version 1, landed as 2
    files = lamina.open_table(a.uri).inspect.files().to_pylist()
    assert sorted((f["added_version"], f["record_count"]) for f in files) == [(1, 3), (2, 3)]
    t = lamina.open_table(a.uri)
    got = t.scan(columns=["id", "_row_id", "_last_updated_version"]).to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["_row_id"], r["_last_updated_version"]) for r in got] == [
        (0, 0, 1), (1, 1, 1), (2, 2, 1), (10, 3, 2), (11, 4, 2), (12, 5, 2)]
    assert t.changes(1, 2).to_arrow().column("id").to_pylist() == [10, 11, 12]


def _lineage(uri: str) -> list[tuple[int, int, int]]:
    t = lamina.open_table(uri)
    got = t.scan(columns=["id", "_row_id", "_last_updated_version"]).to_arrow().sort_by("id").to_pylist()
    return [(r["id"], r["_row_id"], r["_last_updated_version"]) for r in got]


def test_an_append_rebased_past_a_version_adding_no_rows_records_that_version(tmp_path):
    """The row id counter is where the append's ids started, but the version is not the one
    they were given for: the rows record the version they landed in."""
    a = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    b = lamina.open_table(a.uri)
    with a.update_schema() as u:  # version 1: no rows, the counter stays at 0
        u.add_column("note", pa.string())
    b.append(rows(10))  # built for version 1, landed as 2
    assert _lineage(a.uri) == [(10, 0, 2), (11, 1, 2), (12, 2, 2)]


def test_appends_in_one_transaction_get_consecutive_row_ids(tmp_path):
    """Each append of a transaction is built from the same counter; the second's ids are given
    afresh after the first's."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 2))
    with t.transaction() as tx:
        tx.append(rows(10))
        tx.append(rows(20, 2))
    assert _lineage(t.uri) == [(0, 0, 1), (1, 1, 1), (10, 2, 2), (11, 3, 2), (12, 4, 2), (20, 5, 2), (21, 6, 2)]
    assert lamina.open_table(t.uri).metadata.next_row_id == 7


def test_retry_budget_exhausted_commits_nothing(tmp_path):
    a = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    b = lamina.open_table(a.uri)
    a.append(rows(0))
    with pytest.raises(CommitRetriesExhausted, match="Nothing was committed"):
        b.append(rows(10), commit_options=CommitOptions(max_attempts=1))
    assert lamina.open_table(a.uri).version == 1
    assert ids(lamina.open_table(a.uri)) == [0, 1, 2]


class RemoveFiles(Operation):
    """Remove specific files: conflicts if a concurrent commit removed one of them."""

    def __init__(self, entries):
        self.entries = entries

    def apply(self, base):
        return Change("delete-files", base.empty(), removed_of(self.entries))


def test_removing_a_file_removed_concurrently_conflicts(tmp_path):
    a = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    a.append(rows(0))
    b = lamina.open_table(a.uri)
    files = b.scan().plan().entries
    a.overwrite(rows(50))  # removes the file b is about to remove
    with pytest.raises(CommitConflict, match="no longer live"):
        b.transaction().add_operation(RemoveFiles(files)).commit()
    assert ids(lamina.open_table(a.uri)) == [50, 51, 52]


def test_overwrite_racing_an_append_is_serializable(tmp_path):
    a = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    a.append(rows(0))
    b = lamina.open_table(a.uri)
    a.append(rows(10))  # concurrent append outside the overwrite range
    a.append(rows(20))  # ... and one inside it
    b.overwrite(rows(21, 1), where="id >= 20")  # b's base is stale: re-evaluated on the latest
    assert ids(lamina.open_table(a.uri)) == [0, 1, 2, 10, 11, 12, 21]


def test_failed_data_file_write_commits_nothing(tmp_path, monkeypatch):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0))
    from lamina.io import FileIO

    def broken(self, path, data):
        raise StorageError("disk full")

    monkeypatch.setattr(FileIO, "put_new", broken)
    with pytest.raises(StorageError, match="disk full"):
        t.append(rows(100))
    monkeypatch.undo()
    fresh = lamina.open_table(t.uri)
    assert fresh.version == 1 and ids(fresh) == [0, 1, 2]
    assert t.log.list_versions() == [0, 1]
