"""Row-level changes: delete (deletion vectors or copy-on-write), update, merge, bad
input, rollback of a delete, races. How scans apply deletion vectors: data/test_deletes.py."""

from __future__ import annotations

import collections
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.maintenance import fsck

from support import workers
from support.rowlevel import SCHEMA, as_dict, rows, three_files


@pytest.fixture
def table(tmp_path):
    yield three_files(tmp_path)
    flush_hints()


def test_delete_writes_dvs_and_reads_skip_deleted_rows_everywhere(table):
    v = table.delete("id >= 40 AND id < 60").version
    files = table.inspect.files().to_pylist()
    assert sorted((f["record_count"], f["dv_cardinality"]) for f in files) == [(40, 10), (40, 10), (50, None)]
    got = table.to_arrow()
    assert sorted(got.column("id").to_pylist()) == [i for i in range(150) if not 40 <= i < 60]
    assert table.scan(where="cat = 'a'").count() == len([i for i in range(150) if i % 2 and not 40 <= i < 60])
    batches = list(table.scan(columns=["id"]).to_batches())
    assert sum(b.num_rows for b in batches) == 130
    assert table.scan().count() == 130  # from record counts: live rows
    assert table.scan(version=v - 1).count() == 150  # time travel sees the rows again
    assert table.metadata.summary["deleted-rows"] == 20
    # IS NOT NULL pruning must not trust null counts over deleted rows
    assert table.scan(where="cat IS NOT NULL").count() == 130


def test_delete_matching_nothing_commits_nothing_and_untouched_files_are_not_read(table):
    before = table.version
    assert table.delete("id > 1000").version is None
    assert table.refresh().version == before
    table.delete("id >= 120")  # only the third file can match: the others are pruned by stats
    assert table.metadata.summary["files-scanned"] == 1


def test_deleting_every_row_of_a_file_drops_it(table):
    table.delete("id >= 100")
    assert len(table.inspect.files()) == 2 and table.scan().count() == 100


def test_second_delete_merges_into_one_dv_per_file(table):
    table.delete("id < 5")
    table.delete("id >= 5 AND id < 8")
    f = [x for x in table.inspect.files().to_pylist() if x["dv_cardinality"]]
    assert len(f) == 1 and f[0]["dv_cardinality"] == 8 and f[0]["record_count"] == 42
    assert sorted(table.to_arrow().column("id").to_pylist())[:3] == [8, 9, 10]


def test_copy_on_write_mode_rewrites_instead(tmp_path):
    t = lamina.create_table(str(tmp_path / "c"), SCHEMA, properties={"write.delete.mode": "copy-on-write"})
    t.append(rows(0, 10))
    t.delete("id < 3")
    assert t.inspect.files().column("dv_path").null_count == 1 and t.scan().count() == 7
    t.delete("id = 5", mode="merge-on-read")
    assert t.inspect.files().column("dv_cardinality").to_pylist() == [1]
    with pytest.raises(InvalidArgument):
        t.delete("id = 1", mode="sometimes")


def test_update_sets_values_in_one_version(table):
    v0 = table.version
    v = table.update("id < 3", set={"amt": "amt * 10 + 1", "cat": "'z'"}).version
    assert v == v0 + 1
    d = as_dict(table.to_arrow())
    assert [d[i] for i in range(4)] == [("z", 1.0), ("z", 11.0), ("z", 21.0), ("a", 3.0)]
    assert len(d) == 150
    assert table.update("id = 1000", set={"amt": 1.0}).version is None


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"set": {"nope": 1}}, SchemaMismatch),
        ({"set": {"amt": "'text'"}}, SchemaMismatch),  # a string into a double column (Types on write)
        ({"set": {"id": None}}, SchemaMismatch),  # a required column cannot become null
        ({"set": {"amt": "nope + 1"}}, InvalidArgument),
        ({"set": {}}, InvalidArgument),
    ],
)
def test_bad_update_changes_nothing(table, kwargs, error):
    before = (table.version, set(os.listdir(os.path.join(table.uri, "data"))))
    with pytest.raises(error):
        table.update("id < 3", **kwargs)
    assert (table.refresh().version, set(os.listdir(os.path.join(table.uri, "data")))) == before


def test_merge_upserts_deletes_and_inserts_in_one_version(table):
    src = pa.table({"id": [1, 2, 200, 201], "cat": ["u", "D", "n", "n"], "amt": [-1.0, 0.0, 2.0, 3.0]}, schema=SCHEMA)
    res = (
        table.merge(src, on="id")
        .when_matched_delete(condition="source.cat = 'D'")
        .when_matched_update({"amt": "target.amt + source.amt", "cat": "source.cat"})
        .when_not_matched_insert_all(condition="source.amt > 2")
        .execute()
    )
    assert (res.rows_updated, res.rows_deleted, res.rows_inserted) == (1, 1, 1)
    assert res.files_scanned == 3  # key bounds [1, 201] overlap every file
    d = as_dict(table.to_arrow())
    assert d[1] == ("u", 0.0) and 2 not in d and d[201] == ("n", 3.0) and 200 not in d
    assert len(d) == 150 - 1 + 1


def test_merge_reads_only_files_whose_key_bounds_can_match(table):
    src = pa.table({"id": [120, 121], "cat": ["x", "x"], "amt": [0.0, 0.0]}, schema=SCHEMA)
    res = table.merge(src, on="id").when_matched_update_all().execute()
    assert res.files_scanned == 1 and res.rows_updated == 2


def test_merge_bad_input(table):
    with pytest.raises(SchemaMismatch):
        table.merge(pa.table({"x": [1]}), on="id")
    with pytest.raises(SchemaMismatch):
        table.merge(pa.table({"nope": [1]}), on="nope")
    dup = pa.table({"id": [5, 5], "cat": ["a", "b"], "amt": [1.0, 2.0]}, schema=SCHEMA)
    v = table.version
    with pytest.raises(InvalidArgument, match="more than one source row"):
        table.merge(dup, on="id").when_matched_update_all().execute()
    with pytest.raises(InvalidArgument, match="clause"):
        table.merge(dup, on="id").execute()
    with pytest.raises(SchemaMismatch):
        table.merge(pa.table({"id": [1]}), on="id").when_not_matched_insert_all()
    assert table.refresh().version == v


def test_rollback_restores_deleted_rows(table):
    v = table.version
    table.delete("id < 10")
    table.rollback(v)
    assert table.scan().count() == 150
    table.rollback(v + 1)
    assert table.scan().count() == 140


procs = pytest.mark.xdist_group("procs")


@procs
@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_racing_deletes_on_the_same_files_and_appends_lose_nothing(tmp_path, mode):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema(), properties={"write.max-rows-per-file": 60})
    t.append(workers.batch(0, 0, 120, k_base=10_000))  # two files every deleter touches
    steps = 12
    a_steps = [[10_000 + 4 * s, 10_000 + 4 * s + 4 * steps] for s in range(steps)]
    b_steps = [[10_000 + 4 * s + 1, 10_000 + 4 * s + 1 + 4 * steps] for s in range(steps)]
    specs = [
        {"mode": "race_delete", "uri": uri, "steps": a_steps, "delete_mode": mode},
        {"mode": "race_delete", "uri": uri, "steps": b_steps, "delete_mode": mode},
        {"mode": "race_append", "uri": uri, "writer": 7, "n": 10, "rows": 3},
    ]
    a, b, app_ = workers.spawn_workers(specs, str(tmp_path))
    versions = [v for _, v in a["acked"]] + [v for _, v in b["acked"]] + [v for _, v in app_["acked"]]
    assert None not in versions and len(set(versions)) == len(versions) == 2 * steps + 10
    deleted = {k for s in a_steps + b_steps for k in s}
    final = lamina.open_table(uri).to_arrow()
    base = sorted(k for w, k in zip(final.column("writer").to_pylist(), final.column("k").to_pylist()) if w == 0)
    assert base == [k for k in range(10_000, 10_120) if k not in deleted]  # no delete lost, no row lost
    appended = final.filter(pc.equal(final.column("writer"), 7))
    assert collections.Counter(appended.column("seq").to_pylist()) == {s: 3 for s in range(10)}
    assert fsck(lamina.open_table(uri)).ok


def test_merge_inserts_store_write_defaults_as_appends_do(tmp_path):
    """A column with a write default that an insert does not set (named values without it, or
    insert_all from a source without it) stores the default, exactly as an append of the same
    rows does; a column without one stays null."""
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    tables = []
    for name in ("merged", "appended"):
        t = lamina.create_table(str(tmp_path / name), schema)
        t.append(pa.table({"id": [1, 2], "s": ["a", "b"]}))
        t.update_schema().add_column("n", pa.int64(), default=7).add_column("note", pa.string()).commit()
        tables.append(t)
    merged, appended = tables
    merged.merge(pa.table({"id": [2, 4], "s": ["B", "d"]}), on="id").when_matched_update({"s": "source.s"}) \
        .when_not_matched_insert({"id": "source.id", "s": "source.s"}).execute()
    merged.merge(pa.table({"id": [5], "s": ["e"], "note": ["x"]}), on="id").when_not_matched_insert_all().execute()
    appended.update(set={"s": "'B'"}, where="id = 2")
    appended.append(pa.table({"id": [4], "s": ["d"]}))
    appended.append(pa.table({"id": [5], "s": ["e"], "note": ["x"]}))
    assert merged.to_arrow().sort_by("id").to_pylist() == appended.to_arrow().sort_by("id").to_pylist()
    assert merged.to_arrow().sort_by("id").column("n").to_pylist() == [7, 7, 7, 7]
    with pytest.raises(SchemaMismatch, match="missing"):  # a column without a default is still needed
        merged.merge(pa.table({"id": [6], "n": [1]}), on="id").when_not_matched_insert_all()
