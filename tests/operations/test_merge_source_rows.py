"""A merge whose new rows are its source's rows (update every match with all of the source's
columns, insert every other source row, no conditions): they are taken from the source, not
made from the matches (``RowDelta.whole_source``), and on a table without row lineage written
while the target is read. What must still hold: each source row lands once per target row it
updates and once if it matches none; with lineage, the updated rows keep the ids of the rows
they replace; a merge that fails leaves no file behind; a retry onto a newer version reuses
the write; lineage turned on by a concurrent commit makes the rows again, with their ids.
Results against DuckDB for the same clauses: test_merge_keys.py."""

from __future__ import annotations

import os
from concurrent.futures import Future

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.operations import rowlevel
from support.rowlevel import concurrently_on_first_attempt

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string()), pa.field("n", pa.int64(), nullable=False)])
NO_LINEAGE = {"row-lineage.enabled": "false", "write.max-rows-per-file": "4"}


def make(tmp_path, ids: list[int], props: dict | None = None) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=props or NO_LINEAGE)
    t.append(pa.table({"id": ids, "v": [f"old{i}" for i in ids], "n": list(range(len(ids)))}, schema=SCHEMA))
    return t


def upsert(t: lamina.Table, src: pa.Table):
    return t.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()


def on_disk(t: lamina.Table) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), t.uri) for d, _, fs in os.walk(os.path.join(t.uri, "data")) for f in fs}


def left_behind(t: lamina.Table, before: set[str]) -> set[str]:
    """Files under data/ written since ``before`` (an ``on_disk``) that the latest version does not
    reference: what a merge left behind."""
    files = t.refresh().inspect.files()
    used = set(files.column("path").to_pylist()) | {p for p in files.column("dv_path").to_pylist() if p}
    return on_disk(t) - before - used


def rows_of(t: lamina.Table) -> list[tuple]:
    return sorted((r["id"], r["v"], r["n"]) for r in t.to_arrow().to_pylist())


def source(ids: list[int], tag: str = "new") -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids], "n": [100 + i for i in ids]}, schema=SCHEMA)


def test_the_source_rows_are_the_new_rows_written_once(tmp_path):
    t = make(tmp_path, list(range(10)))  # three files of up to 4 rows
    files = on_disk(t)
    before = {r[0]: r for r in rows_of(t)}
    res = upsert(t, source([1, 5, 9, 20, 21]))
    assert (res.rows_updated, res.rows_inserted, res.files_touched) == (3, 2, 3)
    want = {**before, **{i: (i, f"new{i}", 100 + i) for i in (1, 5, 9, 20, 21)}}
    assert rows_of(t) == sorted(want.values())
    added = t.inspect.files().filter(pa.compute.equal(t.inspect.files().column("added_version"), t.version))
    assert sorted(added.column("record_count").to_pylist()) == [1, 4]  # the source, in files of up to 4 rows
    assert left_behind(t, files) == set()


def test_a_source_row_matching_two_target_rows_replaces_both(tmp_path):
    """A key the table holds twice: its source row is written once for each target row it
    updates, as with any other clauses (the write of the source as it is is dropped)."""
    t = make(tmp_path, [1, 2, 2, 3, 7, 2])
    files = on_disk(t)
    res = upsert(t, source([2, 3, 40]))
    assert (res.rows_updated, res.rows_inserted) == (4, 1)
    got = rows_of(t)
    assert got.count((2, "new2", 102)) == 3 and (3, "new3", 103) in got and (40, "new40", 140) in got
    assert [r for r in got if r[0] in (1, 7)] == [(1, "old1", 0), (7, "old7", 4)] and len(got) == 7
    assert left_behind(t, files) == set()


def test_duplicate_source_keys_fail_and_leave_no_file(tmp_path):
    t = make(tmp_path, list(range(6)))
    v, files = t.version, on_disk(t)
    dup = pa.table({"id": [2, 2, 9], "v": ["a", "b", "c"], "n": [1, 2, 3]}, schema=SCHEMA)
    with pytest.raises(InvalidArgument, match="more than one source row"):
        upsert(t, dup)
    assert t.refresh().version == v and on_disk(t) == files


def test_a_source_row_that_does_not_fit_fails_and_commits_nothing(tmp_path):
    t = make(tmp_path, list(range(6)))
    files = on_disk(t)
    v, want = t.version, rows_of(t)
    bad = pa.table({"id": [1, 30], "v": ["a", "b"], "n": [5, None]})  # an insert without the required n
    with pytest.raises(SchemaMismatch, match="'n'"):
        upsert(t, bad)
    assert t.refresh().version == v and rows_of(t) == want and left_behind(t, files) == set()


def test_a_retry_onto_a_newer_version_reuses_the_written_rows(tmp_path, monkeypatch):
    t = make(tmp_path, list(range(8)))
    files = on_disk(t)
    other = lamina.open_table(t.uri)
    written = []
    orig_write = rowlevel.RowDelta._write_new_rows
    monkeypatch.setattr(rowlevel.RowDelta, "_write_new_rows", lambda self, base, rows: written.append(rows.num_rows) or orig_write(self, base, rows))
    calls = concurrently_on_first_attempt(monkeypatch, lambda: other.append(source([50], "app")))
    res = upsert(t, source([3, 60]))
    assert len(calls) == 2 and written == [2]  # applied twice, written once
    assert (res.rows_updated, res.rows_inserted) == (1, 1)
    assert [r for r in rows_of(t) if r[0] in (3, 50, 60)] == [(3, "new3", 103), (50, "app50", 150), (60, "new60", 160)]
    assert len(rows_of(t)) == 10 and left_behind(t, files) == set()


def test_lineage_turned_on_concurrently_makes_rows_that_keep_their_ids(tmp_path, monkeypatch):
    t = make(tmp_path, list(range(8)))
    files = on_disk(t)
    other = lamina.open_table(t.uri)
    calls = concurrently_on_first_attempt(monkeypatch, other.enable_row_lineage)
    upsert(t, source([3, 60]))
    assert len(calls) == 2
    lineage = ["id", "v", "_row_id"]
    before = {r["id"]: r["_row_id"] for r in t.scan(columns=lineage, version=t.version - 1).to_arrow().to_pylist()}
    got = t.scan(columns=lineage).to_arrow().to_pylist()
    ids = {r["id"]: r["_row_id"] for r in got}
    assert sorted(ids) == [*range(8), 60] and {r["id"]: r["v"] for r in got}[3] == "new3"
    assert ids[3] == before[3]  # the updated row kept the id lineage gave it
    assert len(set(ids.values())) == 9  # every row its own id
    # (the first attempt's DV is left for orphan cleanup, as any attempt's that lost its base)
    assert {p for p in left_behind(t, files) if p.endswith(".parquet")} == set()


@pytest.mark.parametrize("twice", [False, True], ids=["each-key-once", "a-key-twice"])
def test_with_lineage_the_source_rows_keep_the_ids_of_the_rows_they_replace(tmp_path, twice):
    """Row lineage: the rows are the source's, written once matched, each updated one with the
    id of the target row it replaces (both of them, for a key the table holds twice) and
    the version that wrote it; each inserted one with an id of its own."""
    t = make(tmp_path, [1, 2, 3, 7, *([2] if twice else [])], {"write.max-rows-per-file": "2"})
    files = on_disk(t)
    lineage = ["id", "v", "_row_id", "_last_updated_version"]
    before = t.scan(columns=lineage).to_arrow().to_pylist()
    res = upsert(t, source([2, 7, 40]))
    after = t.scan(columns=lineage).to_arrow().to_pylist()
    assert (res.rows_updated, res.rows_inserted) == (3 if twice else 2, 1)
    replaced = sorted(r["_row_id"] for r in before if r["id"] in (2, 7))
    assert sorted(r["_row_id"] for r in after if r["id"] in (2, 7)) == replaced
    assert all(r["v"] == f"new{r['id']}" and r["_last_updated_version"] == t.version for r in after if r["id"] in (2, 7, 40))
    assert [r for r in after if r["id"] in (1, 3)] == [r for r in before if r["id"] in (1, 3)]
    new_id = [r["_row_id"] for r in after if r["id"] == 40]
    assert len(new_id) == 1 and new_id[0] not in {r["_row_id"] for r in before}
    assert len({r["_row_id"] for r in after}) == len(after) and left_behind(t, files) == set()


@pytest.mark.parametrize("lineage", ["false", "true"])
def test_source_rows_are_partitioned_and_sorted_as_any_write(tmp_path, lineage):
    """The source's rows go through the table's write: split by its partitions, sorted by its
    sort order, as an append of the same rows would be."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string()), pa.field("n", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema, partition_by="part", properties={"row-lineage.enabled": lineage})
    t.update_sort_order().desc("n").commit()
    t.append(pa.table({"id": [1, 2, 3, 4], "part": ["a", "b", "a", "b"], "n": [10, 20, 30, 40]}, schema=schema))
    files = on_disk(t)
    src = pa.table({"id": [2, 3, 5, 6, 7], "part": ["b", "a", "a", "b", "a"], "n": [1, 2, 3, 4, 5]}, schema=schema)
    res = upsert(t, src)
    assert (res.rows_updated, res.rows_inserted) == (2, 3)
    got = t.to_arrow().sort_by("id").to_pylist()
    assert got == [{"id": 1, "part": "a", "n": 10}, {"id": 2, "part": "b", "n": 1}, {"id": 3, "part": "a", "n": 2},
                   {"id": 4, "part": "b", "n": 40}, {"id": 5, "part": "a", "n": 3}, {"id": 6, "part": "b", "n": 4},
                   {"id": 7, "part": "a", "n": 5}]
    added = t.inspect.files().filter(pa.compute.equal(t.inspect.files().column("added_version"), t.version))
    assert sorted(added.column("partition").to_pylist()) == ["part=a", "part=b"]
    for path in added.column("path").to_pylist():  # each file's rows in the sort order
        n = pq.read_table(os.path.join(t.uri, path), columns=["n"]).column("n").to_pylist()
        assert n == sorted(n, reverse=True) and len(n) in (2, 3)
    assert left_behind(t, files) == set()


# -- a source still being read (SourceRead: what lamina.spark.merge passes for a staged Parquet source)


def being_read(src: pa.Table, rest: Future | None = None) -> rowlevel.SourceRead:
    """``src`` as a SourceRead: its key column at hand, every column from a future (``rest``, or
    one that is done)."""
    if rest is None:
        rest = Future()
        rest.set_result(src)
    return rowlevel.SourceRead(src.schema, src.select(["id"]), rest)


@pytest.mark.parametrize("props", [NO_LINEAGE, {"write.max-rows-per-file": "4"}], ids=["no-lineage", "lineage"])
@pytest.mark.parametrize("clauses", ["upsert", "update_all", "insert_all", "delete"])
def test_a_source_being_read_merges_as_the_table_itself(tmp_path, props, clauses):
    """An upsert matches on the keys and takes the rows once read; any other clauses wait for
    every column before matching. Either way the result is the merge of the table itself."""
    how = {
        "upsert": lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
        "update_all": lambda b: b.when_matched_update_all(),
        "insert_all": lambda b: b.when_not_matched_insert_all(),
        "delete": lambda b: b.when_matched_delete(),
    }[clauses]
    src = source([1, 5, 9, 20, 21])
    a, b = make(tmp_path / "a", list(range(10)), props), make(tmp_path / "b", list(range(10)), props)
    got, want = how(a.merge(being_read(src), on="id")).execute(), how(b.merge(src, on="id")).execute()
    assert (got.rows_updated, got.rows_deleted, got.rows_inserted) == (want.rows_updated, want.rows_deleted, want.rows_inserted)
    assert rows_of(a) == rows_of(b)
    if "row-lineage.enabled" not in props:
        ids = lambda t: sorted((r["id"], r["_row_id"]) for r in t.scan(columns=["id", "_row_id"]).to_arrow().to_pylist())  # noqa: E731
        assert ids(a) == ids(b)


@pytest.mark.parametrize("props", [NO_LINEAGE, {"write.max-rows-per-file": "4"}], ids=["no-lineage", "lineage"])
def test_a_source_whose_read_fails_commits_nothing_and_leaves_nothing(tmp_path, props):
    """The keys matched, the rest of the source failed to read: the merge raises that error,
    the table keeps its version and rows, and no file is left behind."""
    t = make(tmp_path, list(range(10)), props)
    files, version, before = on_disk(t), t.version, rows_of(t)
    broken: Future = Future()
    broken.set_exception(InvalidArgument("the source's Parquet files could not be read"))
    with pytest.raises(InvalidArgument, match="could not be read"):
        t.merge(being_read(source([1, 5, 20]), broken), on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert t.refresh().version == version and rows_of(t) == before
    assert left_behind(t, files) == set()


@pytest.mark.parametrize("props", [NO_LINEAGE, {"write.max-rows-per-file": "4"}], ids=["no-lineage", "lineage"])
def test_an_upsert_matches_before_the_rest_of_its_source_is_read(tmp_path, props, monkeypatch):
    """The rows of a source being read arrive only once the target's files are matched: an
    upsert gets there on the keys alone. (Were it to wait for the rows first, the watchdog
    fails the read after 30 s and the merge raises.)"""
    import threading

    t = make(tmp_path, list(range(10)), props)
    src = source([1, 5, 20])
    rest: Future = Future()
    watchdog = threading.Timer(30, lambda: rest.done() or rest.set_exception(TimeoutError("the merge waited for the rows")))
    watchdog.start()
    seen = []
    match = rowlevel.RowDelta._outcomes_for

    def outcomes(self, *a, **k):
        seen.append(rest.done())
        out = match(self, *a, **k)
        if not rest.done():
            rest.set_result(src)
        return out

    monkeypatch.setattr(rowlevel.RowDelta, "_outcomes_for", outcomes)
    try:
        res = t.merge(being_read(src, rest), on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    finally:
        watchdog.cancel()
    assert seen == [False]
    assert (res.rows_updated, res.rows_inserted) == (2, 1)
    assert [r for r in rows_of(t) if r[0] in (1, 5, 20)] == [(1, "new1", 101), (5, "new5", 105), (20, "new20", 120)]
