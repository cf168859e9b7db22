"""The engine write session (``lamina.table.engine.WriteSession``) without an engine: data
files are written by hand with pyarrow, where and as an engine's tasks would write them,
and the session commits or aborts them. Expected rows come from what the test wrote (a
model of the table as a dict id -> cat), never from Lamina's own reading of its changes."""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.data.deletes import file_key
from lamina.data.inflight import register_write
from lamina.errors import InvalidArgument, TransactionAlreadyCommitted, UnsupportedFeature
from lamina.expr import col
from lamina.errors import StaleRowDelta
from lamina.spec.layout import WRITES_DIR, version_path
from lamina.table import WriteSession

SCHEMA = pa.schema([("id", pa.int64()), ("cat", pa.string())])
OLD = time.time() - 10 * 86400  # older than any orphan age used here


def rows(ids, cat: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "cat": pa.array([cat] * len(ids), pa.string())})


def model(*tables: pa.Table) -> dict[int, str]:
    out: dict[int, str] = {}
    for t in tables:
        out.update(zip(t.column("id").to_pylist(), t.column("cat").to_pylist()))
    return out


def content(table) -> dict[int, str]:
    """The rows of the latest version, read through a fresh handle."""
    got = lamina.open_table(table.uri).to_arrow()
    assert len(set(got.column("id").to_pylist())) == got.num_rows
    return model(got)


def put_file(table, path: str, data: pa.Table) -> dict:
    """Write ``data`` as a Parquet file at ``path`` (table-relative), as an engine's task does;
    its description for ``add_files``."""
    local = table.io.local_path(path)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    pq.write_table(data, local)
    return {"path": path, "size": os.path.getsize(local), "record_count": data.num_rows}


def files(*descriptions: dict) -> pa.Table:
    return pa.Table.from_pylist(list(descriptions))


def exists(table, path: str) -> bool:
    return os.path.exists(table.io.local_path(path))


def data_tree(table) -> list[str]:
    """Every file and directory under data/."""
    root = table.io.local_path("data")
    out = []
    for d, dirs, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in dirs + names]
    return sorted(out)


def markers(table) -> list[str]:
    p = table.io.local_path(WRITES_DIR)
    return sorted(os.listdir(p)) if os.path.isdir(p) else []


def age_data_files(table) -> None:
    for d, _, names in os.walk(table.io.local_path("data")):
        for n in names:
            os.utime(os.path.join(d, n), (OLD, OLD))


@pytest.fixture
def table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(range(10)))  # version 1: one file, ids 0..9
    return t


def test_append_commits_the_added_files_as_one_version(table):
    with WriteSession(table) as s:
        assert markers(table) == [f"{s.write_id}.json"]  # registered before the engine writes
        a = put_file(table, f"{s.data_dir}/part-0.parquet", rows(range(10, 15), "b"))
        b = put_file(table, f"{s.data_dir}/cat=b/part-1.parquet", rows(range(15, 20), "b"))
        s.add_files(files(a, b))
        assert s.commit().version == 2
    assert table.version == 2  # the table object moved to what the session committed
    assert content(table) == model(rows(range(10)), rows(range(10, 20), "b"))
    h = table.history(1)[0]
    assert (h["operation"], h["summary"]["added-files"]) == ("append", 2)
    assert markers(table) == []


def test_overwrite_where_replaces_the_matching_rows(table):
    s = WriteSession(table)
    new = rows(range(5), "new")
    s.add_files(files(put_file(table, f"{s.data_dir}/part-0.parquet", new)))
    assert s.commit("overwrite", where="id < 5").version == 2
    assert content(table) == model(rows(range(10)), new)
    # the old file only partly matched: its remainder (ids 5..9) was rewritten under the write id
    live = lamina.open_table(table.uri).inspect.files().column("path").to_pylist()
    assert len(live) == 2 and all(s.write_id in p for p in live)
    assert markers(table) == []


def test_app_transaction_commits_once(table):
    first = WriteSession(table)
    first.add_files(files(put_file(table, f"{first.data_dir}/p.parquet", rows(range(10, 12)))))
    assert first.commit(app_transaction=("ingest", 7)).version == 2
    again = WriteSession(table)
    replay = put_file(table, f"{again.data_dir}/p.parquet", rows(range(10, 12)))
    again.add_files(files(replay))
    with pytest.raises(TransactionAlreadyCommitted):
        again.commit(app_transaction=("ingest", 7))
    assert lamina.open_table(table.uri).version == 2  # nothing committed
    assert not exists(table, replay["path"]) and not exists(table, again.data_dir)  # its files removed
    assert markers(table) == []
    later = WriteSession(table)
    later.add_files(files(put_file(table, f"{later.data_dir}/p.parquet", rows(range(12, 14)))))
    assert later.commit(app_transaction=("ingest", 8)).version == 3
    assert content(table) == model(rows(range(14)))


def _write_some(table, s: WriteSession) -> None:
    """Files as an engine leaves them: some added to the session, some written by tasks that
    never reported them (under the session's directory, and named by the write id elsewhere)."""
    s.add_files(files(put_file(table, f"{s.data_dir}/part-0.parquet", rows(range(10, 12)))))
    put_file(table, f"{s.data_dir}/cat=x/part-1.parquet", rows(range(12, 14)))
    put_file(table, f"data/cat=x/{s.write_id}-0123456789ab.parquet", rows(range(14, 16)))


def test_abort_deletes_what_the_write_put_and_commits_nothing(table):
    before = data_tree(table)
    s = WriteSession(table)
    _write_some(table, s)
    s.abort()
    assert data_tree(table) == sorted(before + ["cat=x"])  # only the emptied partition directory stays
    assert lamina.open_table(table.uri).version == 1 and markers(table) == []
    with pytest.raises(InvalidArgument, match="aborted"):
        s.commit()
    # leaving the block by an exception aborts too
    with pytest.raises(RuntimeError):
        with WriteSession(table) as s2:
            _write_some(table, s2)
            raise RuntimeError("the engine's job failed")
    assert data_tree(table) == sorted(before + ["cat=x"])
    assert lamina.open_table(table.uri).version == 1 and markers(table) == []
    assert content(table) == model(rows(range(10)))


def test_in_flight_marker_protects_the_files_from_orphan_cleanup(table):
    s = WriteSession(table)
    mine = put_file(table, f"{s.data_dir}/part-0.parquet", rows(range(10, 12)))
    stray = put_file(table, f"{s.data_dir}/part-1.parquet", rows(range(12, 14)))  # never reported
    age_data_files(table)  # as old as the files of a job that has run for days
    report = table.maintenance.remove_orphans(timedelta(days=1))
    assert exists(table, mine["path"]) and exists(table, stray["path"])  # in flight: spared
    assert report.kept_in_flight == 2
    s.add_files(files(mine))
    s.commit()
    assert markers(table) == []  # the write is over: its marker is gone
    report = table.maintenance.remove_orphans(timedelta(days=1))
    assert exists(table, mine["path"])  # committed
    assert not exists(table, stray["path"]) and report.orphans == [stray["path"]]
    assert content(table) == model(rows(range(12)))


def test_a_write_started_elsewhere_is_taken_over(table):
    """The data source's shape: the driver plans, tasks register and write (here, two tasks with
    write ids of their own), another process commits."""
    planned = uuid.uuid4().hex[:16]
    tasks = [uuid.uuid4().hex[:16] for _ in range(2)]
    for w in tasks:
        register_write(table.io, w)
    written = [put_file(table, f"data/{w}-0123456789ab.parquet", rows(range(10 + 2 * i, 12 + 2 * i)))
               for i, w in enumerate(tasks)]
    with pytest.raises(InvalidArgument, match="write_id"):
        WriteSession(table, register=False)
    s = WriteSession(table, write_id=planned, register=False)
    s.adopt(tasks)
    assert s.write_ids == [planned, *tasks]
    s.add_files(files(*written))
    s.commit()
    assert markers(table) == []  # the adopted writes' markers went with the session's
    assert content(table) == model(rows(range(14)))
    # an aborted takeover deletes the adopted writes' files, reported or not
    w = uuid.uuid4().hex[:16]
    register_write(table.io, w)
    lost = put_file(table, f"data/{w}-0123456789ab.parquet", rows(range(20, 22)))
    s = WriteSession(table, write_id=uuid.uuid4().hex[:16], register=False)
    s.adopt([w])
    s.abort()
    assert not exists(table, lost["path"]) and markers(table) == []


def _physical_ids(table, entry: dict) -> list[int]:
    return pq.read_table(table.io.local_path(entry["path"])).column("id").to_pylist()


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_row_delta_deletes_the_positions_asked(tmp_path, mode):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(range(10)))
    t.append(rows(range(10, 20)))
    s = WriteSession(t)
    entries = t.scan().plan(all_columns=True).entries.to_pylist()
    assert len(entries) == 2
    # delete the rows at physical positions 0 and 3 of one file and 9 of the other; the row at
    # position 3 is updated (its new row written by the engine), the others deleted
    asked = {0: [0, 3], 1: [9]}
    positions = {file_key(e): asked[k] for k, e in enumerate(entries)}
    gone = [_physical_ids(t, e)[p] for k, e in enumerate(entries) for p in asked[k]]
    updated = rows([_physical_ids(t, entries[0])[3]], "u")
    s.add_files(files(put_file(t, f"{s.data_dir}/part-0.parquet", updated)))
    result, op = s.commit_row_delta("update", col("id") >= 0, positions, mode=mode, counts={"rows_updated": 1})
    assert result.version == 3 and op.last_stats["files_touched"] == 2
    want = {i: c for i, c in model(rows(range(20))).items() if i not in gone}
    want.update(model(updated))
    assert content(t) == want
    h = t.history(1)[0]["summary"]
    assert (h["deleted-rows"], h["mode"], h["added-records"]) == (3, mode, 1)
    dvs = lamina.open_table(t.uri).inspect.files().column("dv_path").drop_null()
    assert len(dvs) == (2 if mode == "merge-on-read" else 0)
    assert markers(t) == []


def test_row_delta_on_files_changed_since_the_base_is_stale(table):
    table.append(rows(range(10, 20)))
    s = WriteSession(table)
    entries = table.scan().plan(all_columns=True).entries.to_pylist()
    positions = {file_key(e): [0] for e in entries}
    mine = put_file(table, f"{s.data_dir}/part-0.parquet", rows([100]))
    s.add_files(files(mine))
    other = lamina.open_table(table.uri)
    other.delete("id = 5")  # a concurrent writer gives one of the files a deletion vector
    with pytest.raises(StaleRowDelta):
        s.commit_row_delta("delete", col("id") >= 0, positions)
    assert lamina.open_table(table.uri).version == other.version  # nothing more was committed
    assert content(table) == {i: "a" for i in range(20) if i != 5}
    assert not exists(table, mine["path"]) and markers(table) == []


def test_compaction_in_a_session_names_its_outputs_and_cleans_up_a_failure(table):
    for k in range(1, 4):
        table.append(rows(range(10 * k, 10 * k + 10)))
    before = data_tree(table)

    def failing(op, base, groups):
        [op.rewrite(base, g) for g in groups]  # the engine writes the outputs...
        raise RuntimeError("...and its job fails before the commit")

    with WriteSession(table) as s:
        with pytest.raises(RuntimeError):
            table.maintenance.compact(target_file_size=1 << 20, rewrite_groups=failing, session=s)
    assert data_tree(table) == before and markers(table) == []
    assert lamina.open_table(table.uri).version == 4
    s = WriteSession(table)
    with pytest.raises(InvalidArgument, match="session"):
        table.maintenance.compact(session=s, commit_options=lamina.CommitOptions())
    r = table.maintenance.compact(target_file_size=1 << 20, rewrite_groups=lambda op, base, gs: [op.rewrite(base, g) for g in gs],
                      session=s)
    assert (r.version, r.input_files, r.output_files) == (5, 4, 1)
    assert [s.write_id in p for p in lamina.open_table(table.uri).inspect.files().column("path").to_pylist()] == [True]
    assert markers(table) == [] and content(table) == model(rows(range(40)))


def test_a_table_that_may_not_be_written_is_refused_before_anything_is_written(table):
    # A newer Lamina commits version 2 with a writer feature this one does not know.
    vm = table.log.latest()
    future = vm.next(version=2, parent_version=1, timestamp_ms=vm.timestamp_ms + 1, commit_id=uuid.uuid4().hex,
                     writer_features=vm.writer_features + ("future-feature",))
    table.io.put_if_absent(version_path(2), future.to_json())
    flush_hints()
    t = lamina.open_table(table.uri)
    before = data_tree(t)
    with pytest.raises(UnsupportedFeature, match="future-feature"):
        WriteSession(t)
    assert markers(t) == [] and data_tree(t) == before


def test_an_error_after_the_version_landed_keeps_its_files(table, monkeypatch):
    """A commit hook (automatic tags) runs once the version has landed; if it is interrupted,
    the error surfaces, but the files are the committed version's: nothing is deleted."""
    landed = type(table)._committed

    def interrupted(self, vm, new):
        landed(self, vm, new)
        raise KeyboardInterrupt

    monkeypatch.setattr(type(table), "_committed", interrupted)
    s = WriteSession(table)
    mine = put_file(table, f"{s.data_dir}/part-0.parquet", rows(range(10, 12)))
    s.add_files(files(mine))
    with pytest.raises(KeyboardInterrupt):
        s.commit()
    monkeypatch.undo()
    assert exists(table, mine["path"]) and markers(table) == []
    assert content(table) == model(rows(range(12)))
    s.abort()  # the session ended with its commit: nothing to abort
    assert exists(table, mine["path"])
