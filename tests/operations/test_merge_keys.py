"""Merges on integer and string keys against DuckDB: the paths that read only the keys of the
target (clauses that need no target value), prefilter target rows by key membership (a lookup
table over dense integer keys, a binary search over sparse ones, ``is_in`` for other types)
and write the rows of every touched file together.

Each merge runs over several files, with or without deletion vectors already in place, keys
with NULLs (which never match) and, for the sparse case, keys near both ends of int64 (where
an offset from the smallest source key wraps around). The result is compared with what
DuckDB's SQL computes over the same rows. CI runs a fixed number of examples
(tests/conftest.py); a longer run: ``LAMINA_DIFF_EXAMPLES=500 .venv/bin/python -m pytest -q
tests/operations/test_merge_keys.py``.
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.operations.rowlevel import delta as rowlevel_delta
from lamina.operations.rowlevel import keys as merge_keys
from lamina.operations.rowlevel.keys import key_membership, unique_key_index

EXAMPLES = int(os.environ.get("LAMINA_DIFF_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
I64 = (-(2**63), 2**63 - 1)
KEY_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "uint32": pa.uint32(), "int8": pa.int8(), "string": pa.string()}
# Key values per type: a small dense range (lookup table) and, for int64, the ends of the range too
# (binary search; offsets that wrap).
DENSE = list(range(-5, 20))
EXTREME = [I64[0], I64[0] + 1, -1, 0, 1, I64[1] - 1, I64[1]]


def key_values(name: str) -> list:
    if name == "string":
        return [f"k{i}" for i in DENSE]
    if name == "uint32":
        return [v for v in DENSE if v >= 0] + [2**32 - 1]
    return DENSE + (EXTREME if name == "int64" else [])


@pytest.fixture(scope="module")
def duck():
    con = duckdb.connect()
    yield con
    con.close()


# -- the membership test ----------------------------------------------------------------------


@SETTINGS
@given(data=st.data(), type_name=st.sampled_from(sorted(KEY_TYPES)), small_table=st.booleans())
def test_key_membership_holds_every_member_and_no_other_key_in_range(data, type_name, small_table):
    """Every key among the values is found; nulls never are; a key that is not a value is not
    found either, except that keys 2**63 or more away from the smallest value may be (the
    lookup table's wrap-around: a superset, which the join then sorts out)."""
    vals = key_values(type_name)
    typ = KEY_TYPES[type_name]
    values = data.draw(st.lists(st.sampled_from([*vals, None]), min_size=1, max_size=12))
    keys = data.draw(st.permutations(values + data.draw(st.lists(st.sampled_from([*vals, None]), max_size=30))))
    with pytest.MonkeyPatch.context() as mp:
        if small_table:  # the binary search even for dense keys
            mp.setattr(merge_keys, "LOOKUP_TABLE_BYTES", 0)
            mp.setattr(merge_keys, "LOOKUP_BYTES_PER_KEY", 0)
        got = key_membership(pa.array(values, typ))(pa.chunked_array([pa.array(keys, typ)], typ))
        at = key_membership(pa.array(values, typ), positions=True)(pa.chunked_array([pa.array(keys, typ)], typ))
    assert at.tolist() == np.flatnonzero(got).tolist()  # the same keys, as positions
    members = {v for v in values if v is not None}
    lo = min((v for v in members), default=None)
    for k, g in zip(keys, got.tolist()):
        if k in members:
            assert g, k
        elif k is None or lo is None or type_name == "string" or abs(k - lo) < 2**63:
            assert not g, k


# -- merges against DuckDB --------------------------------------------------------------------

CLAUSES = {
    # no clause reads a target value: only the keys are read
    "upsert": lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
    # a condition and an expression on the target: every column is read
    "conditional": lambda b: b.when_matched_delete(condition="source.op = 'D'")
    .when_matched_update({"v": "target.v + source.v"}, condition="source.v > 0")
    .when_not_matched_insert_all(condition="source.v > 1"),
}
ORACLES = {
    "upsert": """
        SELECT id, k, g, v FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = t.k AND s.g = t.g)
        UNION ALL SELECT s.id, s.k, s.g, s.v FROM t JOIN s ON s.k = t.k AND s.g = t.g
        UNION ALL SELECT id, k, g, v FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE s.k = t.k AND s.g = t.g)""",
    "conditional": """
        SELECT id, k, g, v FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = t.k AND s.g = t.g AND (s.op = 'D' OR s.v > 0))
        UNION ALL SELECT t.id, t.k, t.g, t.v + s.v FROM t JOIN s ON s.k = t.k AND s.g = t.g WHERE s.op != 'D' AND s.v > 0
        UNION ALL SELECT id, k, g, v FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE s.k = t.k AND s.g = t.g) AND s.v > 1""",
}


@SETTINGS
@given(
    data=st.data(), type_name=st.sampled_from(sorted(KEY_TYPES)), clauses=st.sampled_from(sorted(CLAUSES)),
    two_keys=st.booleans(), delete_first=st.booleans(), mode=st.sampled_from(["merge-on-read", "copy-on-write"]),
    lineage=st.booleans(), twice=st.booleans(),
)
def test_merge_matches_duckdb(tmp_path_factory, duck, data, type_name, clauses, two_keys, delete_first, mode, lineage, twice):
    """``lineage``: the table has row lineage (without it, an upsert writes its source as it is,
    while the target is read); ``twice``: some target keys are held twice (a source row that
    matches them updates both rows)."""
    typ = KEY_TYPES[type_name]
    vals = key_values(type_name)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("k", typ), pa.field("g", pa.int8()), pa.field("v", pa.int64())])
    groups = [0, 1] if two_keys else [0]
    # target: unique (k, g) over the files, and with ``twice`` some held again; some keys null
    cells = data.draw(st.lists(st.tuples(st.sampled_from([*vals, None]), st.sampled_from(groups)), min_size=2, max_size=24,
                               unique_by=lambda c: c if c[0] is not None else object()))
    n_files = data.draw(st.integers(1, 4))
    src_cells = data.draw(st.lists(st.tuples(st.sampled_from([*vals, None]), st.sampled_from(groups)), max_size=12,
                                   unique_by=lambda c: c if c[0] is not None else object()))
    src_v = data.draw(st.lists(st.integers(-2, 3), min_size=len(src_cells), max_size=len(src_cells)))
    src_op = data.draw(st.lists(st.sampled_from("DU"), min_size=len(src_cells), max_size=len(src_cells)))

    table = lamina.create_table(str(tmp_path_factory.mktemp("merge") / "t"), schema,
                                properties={"row-lineage.enabled": str(lineage).lower()})
    for part in np.array_split(np.arange(len(cells)), n_files):  # one append = one file each
        if len(part):
            table.append(pa.table({"id": part.tolist(), "k": [cells[i][0] for i in part], "g": [cells[i][1] for i in part],
                                   "v": [10 * int(i) for i in part]}, schema=schema))
    if twice:  # a file holding some of the keys again
        again = cells[: data.draw(st.integers(1, len(cells)))]
        table.append(pa.table({"id": [500 + i for i in range(len(again))], "k": [c[0] for c in again],
                               "g": [c[1] for c in again], "v": [7] * len(again)}, schema=schema))
    if delete_first:
        table.delete("id IN (0, 3, 6, 9, 12, 15, 18, 21)")  # deletion vectors the merge reads through and merges into
    src = pa.table({"id": [1000 + i for i in range(len(src_cells))], "k": pa.array([c[0] for c in src_cells], typ),
                    "g": pa.array([c[1] for c in src_cells], pa.int8()), "v": src_v, "op": src_op})
    duck.register("t", table.to_arrow())
    duck.register("s", src)
    want = sorted(duck.sql(ORACLES[clauses]).fetchall(), key=repr)

    on = ["k", "g"] if two_keys else "k"
    CLAUSES[clauses](table.merge(src if clauses == "conditional" else src.drop_columns(["op"]), on=on, mode=mode)).execute()
    got = sorted((tuple(r.values()) for r in table.to_arrow().to_pylist()), key=repr)
    assert got == want


def test_merge_writes_the_updated_rows_of_every_touched_file_together(tmp_path):
    """An upsert touching three files adds one data file for the updated rows of all three and
    the inserts (not one per touched file, nor one per kind), and gives each touched file a DV."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema, properties={"write.max-rows-per-file": 10})
    t.append(pa.table({"id": list(range(30)), "v": [0] * 30}, schema=schema))
    src = pa.table({"id": [1, 15, 25, 40], "v": [1, 1, 1, 1]}, schema=schema)
    res = t.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert (res.rows_updated, res.rows_inserted, res.files_touched) == (3, 1, 3)
    files = t.inspect.files()
    assert files.num_rows == 3 + 1
    assert sorted(c for c in files.column("dv_cardinality").to_pylist() if c) == [1, 1, 1]
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "v": 1 if i in (1, 15, 25, 40) else 0} for i in [*range(30), 40]
    ]


@SETTINGS
@given(data=st.data(), type_name=st.sampled_from(sorted(KEY_TYPES)))
def test_unique_key_index_finds_each_keys_source_row(data, type_name):
    """The lookup a merge uses when the source's integer keys are unique: each key's source row,
    -1 for a key no source row holds and for null; None (a join instead) when keys repeat or
    are not integers."""
    vals = key_values(type_name)
    typ = KEY_TYPES[type_name]
    values = data.draw(st.lists(st.sampled_from([*vals, None]), max_size=12))
    if data.draw(st.booleans(), label="source sorted by key"):  # (the lookup's sort-free path)
        values = [*sorted({v for v in values if v is not None}), *[None] * values.count(None)]
    keys = data.draw(st.lists(st.sampled_from([*vals, None]), max_size=30))
    index = unique_key_index(pa.chunked_array([pa.array(values, typ)], typ))
    present = [v for v in values if v is not None]
    if type_name == "string" or len(set(present)) < len(present):
        assert index is None
        return
    where = {v: i for i, v in enumerate(values) if v is not None}
    got = index(pa.chunked_array([pa.array(keys, typ)], typ))
    assert got.tolist() == [where.get(k, -1) if k is not None else -1 for k in keys]


@SETTINGS
@given(data=st.data())
def test_unique_key_index_of_a_run_of_the_sorted_source(data):
    """Keys that are one run of a sorted source's keys (a file's rows matched by a source sorted
    by key), or nearly (one key off, one missing, one repeated, out of order): each key's source
    row, exactly, as for any other keys."""
    values = sorted(data.draw(st.sets(st.integers(-50, 50), min_size=2, max_size=40)))
    a = data.draw(st.integers(0, len(values) - 2))
    keys = values[a : data.draw(st.integers(a + 2, len(values)))]
    damage = data.draw(st.sampled_from(["none", "off", "missing", "repeated", "swapped"]))
    i = data.draw(st.integers(0, len(keys) - 1))
    if damage == "off":
        keys[i] += data.draw(st.sampled_from([-1, 1]))
    elif damage == "missing" and len(keys) > 2:
        del keys[i]
    elif damage == "repeated":
        keys.insert(i, keys[i])
    elif damage == "swapped":
        keys[0], keys[-1] = keys[-1], keys[0]
    index = unique_key_index(pa.array(values, pa.int64()))
    where = {v: i for i, v in enumerate(values)}
    assert index(pa.array(keys, pa.int64())).tolist() == [where.get(k, -1) for k in keys]


@SETTINGS
@given(data=st.data(), type_name=st.sampled_from(["int64", "int32", "uint32"]))
def test_key_membership_of_increasing_keys_is_exact(data, type_name):
    """A file's keys in strictly increasing order (an id-sorted file), consecutive (step 1:
    positions by offset, however many values fall among them) or not (a binary search where the
    keys outnumber the values, else the lookup): the result is exactly membership, nulls never
    members."""
    typ = KEY_TYPES[type_name]
    lo, hi = (0, 2**32 - 1) if type_name == "uint32" else ((-(2**31), 2**31 - 1) if type_name == "int32" else I64)
    start = data.draw(st.integers(lo, hi - 2000))
    step = data.draw(st.integers(1, 3))
    keys = list(range(start, min(hi, start + step * data.draw(st.integers(64, 600))), step))
    inside = data.draw(st.lists(st.sampled_from(keys), max_size=len(keys) // data.draw(st.sampled_from([1, 10]))))
    outside = data.draw(st.lists(st.integers(lo, hi), max_size=5))
    values = [*inside, *outside, *data.draw(st.lists(st.none(), max_size=1))]
    null_at = data.draw(st.sets(st.integers(0, len(keys) - 1), max_size=3))
    with_nulls = [None if i in null_at else k for i, k in enumerate(keys)]
    got = key_membership(pa.array(values, typ))(pa.array(with_nulls if null_at else keys, typ))
    members = {v for v in values if v is not None}
    assert got.tolist() == [k is not None and k in members for k in (with_nulls if null_at else keys)]
    at = key_membership(pa.array(values, typ), positions=True)(pa.array(with_nulls if null_at else keys, typ))
    assert at.tolist() == [i for i, k in enumerate(with_nulls if null_at else keys) if k is not None and k in members]


@SETTINGS
@given(data=st.data())
def test_one_membership_test_serves_files_of_increasing_and_shuffled_keys_alike(data):
    """One test, used file after file as a merge does: files whose keys increase (looked up by
    binary search) and shuffled ones (the lookup table, made on the first such file and
    reused) in any order; each result is exactly membership."""
    values = data.draw(st.lists(st.integers(0, 5000), min_size=1, max_size=200))
    member = key_membership(pa.array(values, pa.int64()))
    positions = key_membership(pa.array(values, pa.int64()), positions=True)
    for _ in range(data.draw(st.integers(1, 4))):
        start = data.draw(st.integers(0, 4000))
        keys = list(range(start, start + data.draw(st.integers(64, 1000))))
        if data.draw(st.booleans()):
            keys = data.draw(st.permutations(keys))
        got = member(pa.array(keys, pa.int64()))
        assert got.tolist() == [k in set(values) for k in keys]
        assert positions(pa.array(keys, pa.int64())).tolist() == [i for i, k in enumerate(keys) if k in set(values)]


@SETTINGS
@given(rows=st.lists(st.integers(0, 12), max_size=8))
def test_consecutive_source_rows_are_recognised_exactly(rows):
    """The matched source rows are taken as a slice only when they are exactly first, first + 1,
    ...: any gap, repeat or step back means a take."""
    arr = np.array(rows, dtype=np.int64)
    run = merge_keys._consecutive(arr)
    consecutive = len(rows) >= 2 and rows == list(range(rows[0], rows[0] + len(rows)))
    assert run == (rows[0] if consecutive else None)


@pytest.mark.parametrize("gap", [False, True])
@pytest.mark.parametrize("insert", [True, False])
def test_merge_of_a_sorted_source_matching_in_order(tmp_path, gap, insert):
    """A source sorted by key whose matched rows are one run of its rows (taken as a slice of
    the source), or a run broken by a source row that matches nothing: every matched row gets
    its own source row's values and keeps its row id; the unmatched ones are inserted (with new
    ids), or left out by a merge without an insert clause."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string()), pa.field("w", pa.float64())])
    t = lamina.create_table(str(tmp_path / "t"), schema, properties={"write.max-rows-per-file": 50})
    t.append(pa.table({"id": list(range(100)), "v": ["old"] * 100, "w": [0.0] * 100}, schema=schema))
    ids_before = dict(zip(*t.scan(columns=["id", "_row_id"]).to_arrow().to_pydict().values()))
    # (the gap: source row 15, id 155, matches nothing)
    ids = [*range(60, 90), 500, 501] if not gap else [*range(60, 75), 155, *range(80, 95), 600]
    src = pa.table({"id": ids, "v": [f"s{i}" for i in ids], "w": [float(i) for i in ids]}, schema=schema)
    m = t.merge(src, on="id").when_matched_update_all()
    res = (m.when_not_matched_insert_all() if insert else m).execute()
    matched = [i for i in ids if i < 100]
    assert (res.rows_updated, res.rows_inserted) == (len(matched), len(ids) - len(matched) if insert else 0)
    got = t.scan(columns=["id", "v", "w", "_row_id"]).to_arrow().to_pylist()
    want = [{"id": i, "v": "old", "w": 0.0} for i in range(100) if i not in set(ids)]
    want += [{"id": i, "v": f"s{i}", "w": float(i)} for i in (ids if insert else matched)]
    assert sorted(({k: r[k] for k in ("id", "v", "w")} for r in got), key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"])
    kept = {r["id"]: r["_row_id"] for r in got if r["id"] < 100}
    assert kept == {i: ids_before[i] for i in kept}  # updated rows keep their ids
    assert len({r["_row_id"] for r in got}) == len(got)


@pytest.mark.parametrize("inserts", [0, 7])
def test_a_large_merge_writes_its_rows_as_two_files_at_once(tmp_path, monkeypatch, inserts):
    """From twice PARALLEL_WRITE_MIN_ROWS rows written (updated and inserted together), a change
    writes two files of half the rows each, encoded at once; below that, one. Updated rows keep
    their ids, inserted ones get new ids no other row has, and every value is the source's."""
    monkeypatch.setattr(rowlevel_delta, "PARALLEL_WRITE_MIN_ROWS", 10)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
    t = lamina.create_table(str(tmp_path / "t"), schema, properties={"write.max-rows-per-file": 40})
    t.append(pa.table({"id": list(range(100)), "v": ["old"] * 100}, schema=schema))
    ids_before = dict(zip(*t.scan(columns=["id", "_row_id"]).to_arrow().to_pydict().values()))
    before = set(t.inspect.files().column("path").to_pylist())
    for n_upd in (5, 13):  # 5 + inserts: under 20 rows for the first, one file; then two
        ids = [*range(30 + 20 * (n_upd > 5), 30 + 20 * (n_upd > 5) + n_upd), *range(1000 * n_upd, 1000 * n_upd + inserts)]
        src = pa.table({"id": ids, "v": [f"s{i}" for i in ids]}, schema=schema)
        t.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
        files = t.inspect.files()
        new = files.filter(pc.invert(pc.is_in(files.column("path"), value_set=pa.array(sorted(before))))).column("record_count").to_pylist()
        before |= set(files.column("path").to_pylist())
        written = n_upd + inserts
        assert sorted(new) == ([written // 2, written - written // 2] if written >= 20 else [written])
    got = t.scan(columns=["id", "v", "_row_id"]).to_arrow().to_pylist()
    changed = {*range(30, 35), *range(50, 63), *range(5000, 5000 + inserts), *range(13000, 13000 + inserts)}
    want = {i: (f"s{i}" if i in changed else "old") for i in [*range(100), *(i for i in changed if i >= 100)]}
    assert {r["id"]: r["v"] for r in got} == want and len(got) == len(want)
    assert all(r["_row_id"] == ids_before[r["id"]] for r in got if r["id"] < 100)
    assert len({r["_row_id"] for r in got}) == len(got)
