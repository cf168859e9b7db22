"""Schema changes racing data changes (the rules are in the docstring of
lamina.operations.schema): first each interleaving made exact with a table object opened
before a concurrent commit (a stale handle plans on the old schema and commits after the
change), then the same races between real processes, where either order may win and each
outcome must be one of the serial ones, or a clear CommitConflict that committed nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import CommitConflict
from lamina.spec.schema import field_id_of

from support import workers


def make(tmp_path) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("a", pa.int32()), ("c", pa.string())]))
    t.append(pa.table({"id": [1, 2], "a": pa.array([10, 20], pa.int32()), "c": ["x", "y"]}))
    return t


def rows(t: lamina.Table) -> list[dict]:
    return sorted(lamina.open_table(t.io.uri).to_arrow().to_pylist(), key=lambda r: r["id"])


# --- interleavings made exact with stale handles ------------------------------------------

# A schema change, and what the rows read after an append of {id: 3, a: 30} planned before it.
APPEND_AFTER = {
    "add with default": (lambda u: u.add_column("n", pa.int8(), default=5),
                         [{"id": 1, "a": 10, "c": "x", "n": 5}, {"id": 2, "a": 20, "c": "y", "n": 5}, {"id": 3, "a": 30, "c": None, "n": 5}]),
    "rename": (lambda u: u.rename_column("a", "b"),
               [{"id": 1, "b": 10, "c": "x"}, {"id": 2, "b": 20, "c": "y"}, {"id": 3, "b": 30, "c": None}]),
    "drop": (lambda u: u.drop_column("a"), [{"id": 1, "c": "x"}, {"id": 2, "c": "y"}, {"id": 3, "c": None}]),
    # the re-added column is a new one: no old value, the stale append's included, resurfaces
    "drop and re-add": (lambda u: u.drop_column("a").add_column("a", pa.int64()),
                        [{"id": 1, "c": "x", "a": None}, {"id": 2, "c": "y", "a": None}, {"id": 3, "c": None, "a": None}]),
    "widen": (lambda u: u.update_column("a", pa.int64()),
              [{"id": 1, "a": 10, "c": "x"}, {"id": 2, "a": 20, "c": "y"}, {"id": 3, "a": 30, "c": None}]),
}


@pytest.mark.parametrize("case", sorted(APPEND_AFTER))
def test_append_planned_on_the_old_schema_commits_after_a_schema_change(tmp_path, case):
    change, want = APPEND_AFTER[case]
    t = make(tmp_path)
    stale = lamina.open_table(t.io.uri)
    change(t.update_schema()).commit()
    stale.append(pa.table({"id": [3], "a": pa.array([30], pa.int32())}))
    assert rows(t) == want
    # statistics follow field ids: predicates on the evolved column are exact
    name = next((n for n in ("a", "b") if n in want[0]), None)
    if name is not None and want[2][name] is not None:
        assert lamina.open_table(t.io.uri).to_arrow(where=f"{name} >= 20").column("id").to_pylist() == [2, 3]


def test_two_adds_of_one_name_one_wins_the_other_conflicts(tmp_path):
    t = make(tmp_path)
    stale = lamina.open_table(t.io.uri)
    t.update_schema().add_column("n", pa.int8()).commit()
    version = t.version
    with pytest.raises(CommitConflict, match="'n' already exists"):
        stale.update_schema().add_column("n", pa.string()).commit()
    now = lamina.open_table(t.io.uri)
    assert now.version == version and now.metadata.schema.field("n").type == pa.int8()
    assert [r["id"] for r in rows(t)] == [1, 2]


def test_two_adds_of_different_names_both_land_with_distinct_ids(tmp_path):
    t = make(tmp_path)
    stale = lamina.open_table(t.io.uri)
    t.update_schema().add_column("n", pa.int8()).commit()
    stale.update_schema().add_column("m", pa.string()).commit()
    schema = lamina.open_table(t.io.uri).metadata.schema
    assert schema.names == ["id", "a", "c", "n", "m"]
    assert len({field_id_of(f) for f in schema.arrow}) == 5
    lamina.open_table(t.io.uri).append(pa.table({"id": [3], "n": pa.array([7], pa.int8()), "m": ["q"]}))
    assert [(r["n"], r["m"]) for r in rows(t)] == [(None, None), (None, None), (7, "q")]


# Row-level changes planned on the old schema, then a concurrent schema change of a column
# they use: CommitConflict, nothing committed (before: InvalidPredicate or SchemaMismatch
# after a rename or drop, a silent no-op after a drop and re-add, a lost value after an add).
def _delete(t):
    return t.delete("a = 10").version


def _update(t):
    return t.update("id = 1", set={"c": "'z'"}).version


def _merge(t):
    src = pa.table({"id": [1, 5], "a": pa.array([11, 50], pa.int32()), "c": ["m", "n"]})
    return t.merge(src, on="id").when_matched_update_all(condition="target.a = 10").when_not_matched_insert_all().execute()


def _overwrite_where(t):
    return t.overwrite(pa.table({"id": [9], "a": pa.array([10], pa.int32())}), where="a = 10").version


ROW_CHANGES = {"delete": _delete, "update": _update, "merge": _merge, "overwrite": _overwrite_where}
SCHEMA_CHANGES = {
    "drop": lambda u: u.drop_column("a"),
    "rename": lambda u: u.rename_column("a", "b"),
    "drop and re-add": lambda u: u.drop_column("a").add_column("a", pa.int32()),
}


@pytest.mark.parametrize("row_change", sorted(ROW_CHANGES))
@pytest.mark.parametrize("schema_change", sorted(SCHEMA_CHANGES))
def test_row_change_whose_columns_a_concurrent_schema_change_moved_conflicts(tmp_path, row_change, schema_change):
    t = make(tmp_path)
    stale = lamina.open_table(t.io.uri)
    SCHEMA_CHANGES[schema_change](t.update_schema()).commit()
    before, version = rows(t), t.version
    with pytest.raises(CommitConflict, match="concurrent schema change"):
        ROW_CHANGES[row_change](stale)
    assert lamina.open_table(t.io.uri).version == version and rows(t) == before
    # run again on the latest version, it is planned on the new schema
    fresh = lamina.open_table(t.io.uri)
    if schema_change == "rename":
        fresh.delete("b = 10")
        assert [r["id"] for r in rows(t)] == [2]


def test_update_planned_before_an_added_column_never_loses_its_values(tmp_path):
    """A concurrent add, then a concurrent update that sets the new column in row 1: an update
    of row 1 planned before both rewrites the row in the old schema. Applied as it was, it
    would null the new column's value (a lost update); it must conflict instead."""
    t = make(tmp_path)
    stale = lamina.open_table(t.io.uri)
    t.update_schema().add_column("n", pa.int8()).commit()
    t.update("id = 1", set={"n": 7})
    with pytest.raises(CommitConflict):
        stale.update("id = 1", set={"a": 99})
    assert rows(t)[0] == {"id": 1, "a": 10, "c": "x", "n": 7}


def test_row_changes_on_unrelated_or_added_columns_go_through(tmp_path):
    """Deletes conflict only when a column of their condition changed."""
    t = make(tmp_path)
    stale = lamina.open_table(t.io.uri)
    t.update_schema().add_column("n", pa.int8()).rename_column("c", "cc").commit()
    assert stale.delete("a = 10").version is not None
    assert rows(t) == [{"id": 2, "a": 20, "cc": "y", "n": None}]


def test_transaction_with_merge_schema_after_a_concurrent_add_conflicts_and_commits_nothing(tmp_path):
    t = make(tmp_path)
    stale = lamina.open_table(t.io.uri)
    t.update_schema().add_column("n", pa.int8()).commit()
    version, files = t.version, len(t.inspect.files())
    with pytest.raises(CommitConflict, match="changed the table's schema"):
        stale.append(pa.table({"id": [3], "tag": ["new"]}), schema_mode="merge")
    now = lamina.open_table(t.io.uri)
    assert now.version == version and len(now.inspect.files()) == files and "tag" not in now.metadata.schema.names
    # the other order: the standalone add re-applies by path on the merged schema
    stale = lamina.open_table(t.io.uri)
    t.append(pa.table({"id": [3], "tag": ["new"]}), schema_mode="merge")
    stale.update_schema().add_column("m", pa.string()).commit()
    assert [(r["id"], r["tag"], r["m"]) for r in rows(t)] == [(1, None, None), (2, None, None), (3, "new", None)]


def test_merge_into_a_table_with_a_struct_column(tmp_path):
    """Arrow's hash join carries no struct column: merge joins keys only (failed before)."""
    t = make(tmp_path)
    t.update_schema().add_column("s", pa.struct([("x", pa.int32())])).commit()
    src = pa.table({"id": [2, 3], "a": pa.array([21, 30], pa.int32()), "c": ["yy", "z"], "s": pa.array([{"x": 1}, None], pa.struct([("x", pa.int32())]))})
    t.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(t) == [
        {"id": 1, "a": 10, "c": "x", "s": None}, {"id": 2, "a": 21, "c": "yy", "s": {"x": 1}},
        {"id": 3, "a": 30, "c": "z", "s": None},
    ]


# --- racing processes ------------------------------------------------------------------------

ROWS, WRITERS = 2, (1, 2)


def race_table(tmp_path) -> str:
    uri = str(tmp_path / "race")
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, ROWS))
    return uri


def race(tmp_path, *specs: dict) -> list[dict]:
    return workers.spawn_workers([dict(s, mode="schema_race") for s in specs], str(tmp_path))


def appended(t: pa.Table) -> list[tuple[int, int, int]]:
    return sorted(zip(t.column("writer").to_pylist(), t.column("seq").to_pylist(), t.column("i").to_pylist()))


@pytest.mark.parametrize("change", [
    {"action": "add_column", "column": "email", "type": "string"},
    {"action": "rename_column", "column": "k", "new_name": "key"},
    {"action": "drop_column", "column": "k"},
])
def test_appends_racing_a_schema_change_all_land_and_read_by_field_id(tmp_path, change):
    uri = race_table(tmp_path)
    # one append each: a handle moves to the version it committed, so a second append of the
    # old columns would (rightly) meet the new schema
    appenders = [{"uri": uri, "action": "append", "writer": w, "n": 1, "rows": ROWS} for w in WRITERS]
    *appends, ch = race(tmp_path, *appenders, dict(change, uri=uri))
    assert all("error" not in r for r in (*appends, ch)), (appends, ch)
    got = lamina.open_table(uri).to_arrow()
    want = [(w, 0, i) for w in (0, *WRITERS) for i in range(ROWS)]
    assert appended(got) == sorted(want)
    if change["action"] == "rename_column":  # k = i in every batch, read under its new name
        assert got.column("key").to_pylist() == got.column("i").cast(pa.int64()).to_pylist()
        assert lamina.open_table(uri).scan(where="key = 1").count() == len(want) // ROWS
    elif change["action"] == "drop_column":
        assert "k" not in got.column_names
    else:
        assert got.column("email").null_count == len(want)


def test_two_processes_adding_one_name_one_wins(tmp_path):
    uri = race_table(tmp_path)
    r1, r2 = race(tmp_path, {"uri": uri, "action": "add_column", "column": "email", "type": "int8"},
                  {"uri": uri, "action": "add_column", "column": "email", "type": "string"})
    winners = [r for r in (r1, r2) if "error" not in r]
    losers = [r for r in (r1, r2) if "error" in r]
    assert len(winners) == 1 and len(losers) == 1, (r1, r2)
    assert losers[0]["error"] in ("CommitConflict", "InvalidSchemaChange") and "email" in losers[0]["message"]
    t = lamina.open_table(uri)
    assert t.metadata.schema.names.count("email") == 1
    assert str(t.metadata.schema.field("email").type) == ("int8" if winners[0] is r1 else "string")
    assert appended(t.to_arrow()) == [(0, 0, i) for i in range(ROWS)]


def test_two_processes_adding_different_columns_both_land(tmp_path):
    uri = race_table(tmp_path)
    r1, r2 = race(tmp_path, {"uri": uri, "action": "add_column", "column": "email", "type": "string"},
                  {"uri": uri, "action": "add_column", "column": "score", "type": "int64"})
    assert "error" not in r1 and "error" not in r2, (r1, r2)
    t = lamina.open_table(uri)
    schema = t.metadata.schema
    assert {"email", "score"} <= set(schema.names) and len({field_id_of(f) for f in schema.arrow}) == len(schema.names)
    t.append(workers.batch(9, 0, 1).append_column("score", pa.array([5], pa.int64())))
    assert t.to_arrow(where="score = 5").column("writer").to_pylist() == [9]
    assert t.scan(where="email IS NULL").count() == ROWS + 1


def test_drop_racing_a_delete_that_uses_the_column(tmp_path):
    """Serializable: the delete commits first (its rows go, then the column), or it fails
    with CommitConflict and commits nothing; never a wrong row."""
    uri = race_table(tmp_path)
    t = lamina.open_table(uri)
    t.append(workers.batch(1, 0, ROWS))
    drop, delete = race(tmp_path, {"uri": uri, "action": "drop_column", "column": "k"},
                        {"uri": uri, "action": "delete", "where": "k = 1"})
    assert "error" not in drop, drop
    got = lamina.open_table(uri).to_arrow()
    assert "k" not in got.column_names
    everything = [(w, 0, i) for w in (0, 1) for i in range(ROWS)]
    if "error" in delete:
        assert delete["error"] == "CommitConflict", delete
        assert appended(got) == everything
    else:
        assert appended(got) == [r for r in everything if r[2] != 1]  # k = i


def test_merge_schema_transaction_racing_a_standalone_add(tmp_path):
    uri = race_table(tmp_path)
    merge, add = race(tmp_path, {"uri": uri, "action": "append_merge", "column": "tag", "writer": 1, "rows": ROWS},
                      {"uri": uri, "action": "add_column", "column": "email", "type": "string"})
    assert "error" not in add, add  # re-applied by path on whatever schema it meets
    t = lamina.open_table(uri)
    assert "email" in t.metadata.schema.names
    if "error" in merge:
        assert merge["error"] == "CommitConflict", merge
        assert "tag" not in t.metadata.schema.names and appended(t.to_arrow()) == [(0, 0, i) for i in range(ROWS)]
    else:
        got = t.to_arrow(where="writer = 1")
        assert got.column("tag").to_pylist() == [f"1-{i}" for i in range(ROWS)]
        assert t.scan(where="tag IS NULL").count() == ROWS
