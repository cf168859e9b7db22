"""Deletes whose predicate reads one string or binary column are evaluated on the column's
Parquet dictionaries (``Scan.matching_positions``): once per distinct value, rows
picked by code. Each result is checked against DuckDB over the same live rows: the rows
left, and the count of rows the version says it deleted.

Covered: NULLs (a null's code is the slot past the dictionary: ``IS NULL`` and ``NOT IN``
must treat it as SQL does), existing deletion vectors (their rows are not deleted twice),
files with several row groups and different dictionaries, a column stored without a
dictionary (many distinct values), a file added without the column, binary columns, and
that predicates on other columns keep the row-by-row path.
"""

from __future__ import annotations

import json
import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.data.scan import Scan
from lamina.data.scan.positions import DictionaryPositions
from lamina.expr import bind, to_expr

EXAMPLES = int(os.environ.get("LAMINA_DIFF_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

WORDS = ["", "a", "b", "ab", "B", "é", "zz", "a b"]
SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


@pytest.fixture(scope="module")
def duck():
    con = duckdb.connect()
    yield con
    con.close()


def sql_str(w: str) -> str:
    return "'" + w.replace("'", "''") + "'"


word = st.sampled_from(WORDS)
leaf = st.one_of(
    st.tuples(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), word).map(lambda t: f"s {t[0]} {sql_str(t[1])}"),
    st.lists(word, min_size=1, max_size=3).map(lambda ws: "s IN (" + ", ".join(map(sql_str, ws)) + ")"),
    st.lists(word, min_size=1, max_size=3).map(lambda ws: "s NOT IN (" + ", ".join(map(sql_str, ws)) + ")"),
    st.sampled_from(["s IS NULL", "s IS NOT NULL"]),
    st.tuples(word, word).map(lambda t: f"s BETWEEN {sql_str(min(t))} AND {sql_str(max(t))}"),
)
predicate = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        inner.map(lambda p: f"NOT ({p})"),
    ),
    max_leaves=4,
)
files = st.lists(st.lists(st.one_of(st.none(), word), min_size=1, max_size=12), min_size=1, max_size=4)


def deleted_rows(t: lamina.Table) -> int:
    return json.loads(t.inspect.snapshots().column("summary")[-1].as_py())["deleted-rows"]


MOVED = 1_000_000  # an update adds this to the ids of the rows it selects


def check_against_duckdb(duck, t: lamina.Table, where: str, op: str = "delete") -> None:
    """Delete ``where`` from ``t`` (or update the rows it selects: ``id = id + MOVED``) and
    compare with DuckDB over the rows live before (ids are unique: they name the rows); an
    updated row keeps its row id."""
    before = t.scan(columns=[*t.schema.names, "_row_id"]).to_arrow()
    duck.register("before", before)
    if op == "delete":
        want = dict(duck.sql(f"SELECT _row_id, id FROM before WHERE ({where}) IS NOT TRUE").fetchall())
        version = t.delete(where).version
        changed = len(before) - len(want)
    else:
        want = dict(duck.sql(f"SELECT _row_id, CASE WHEN ({where}) IS TRUE THEN id + {MOVED} ELSE id END FROM before").fetchall())
        version = t.update(where, {"id": f"id + {MOVED}"}).version
        changed = sum(1 for i, j in zip(before.column("id").to_pylist(), (want[r] for r in before.column("_row_id").to_pylist())) if i != j)
    assert (version is None) == (changed == 0)
    after = t.scan(columns=["_row_id", "id"]).to_arrow()
    assert after.num_rows == len(want)
    assert dict(zip(after.column("_row_id").to_pylist(), after.column("id").to_pylist())) == want
    if version is not None:
        assert deleted_rows(t) == changed


@SETTINGS
@given(files=files, where=predicate, first=st.one_of(st.none(), predicate), op=st.sampled_from(["delete", "update"]))
def test_string_delete_matches_duckdb(tmp_path_factory, duck, files, where, first, op):
    """Any predicate on the string column, over files with nulls, after (optionally) an
    earlier delete that left deletion vectors on some files: a delete, or an update (which
    reads only the files, and of those only the rows, the dictionaries select)."""
    t = lamina.create_table(str(tmp_path_factory.mktemp("t")), SCHEMA)
    start = 0
    for values in files:
        t.append(pa.table({"id": np.arange(start, start + len(values)), "s": pa.array(values, pa.string())}, schema=SCHEMA))
        start += len(values)
    if first is not None:
        check_against_duckdb(duck, t, first)
    check_against_duckdb(duck, t, where, op)


def add_parquet(t: lamina.Table, table: pa.Table, name: str, **write_options) -> None:
    """Register a Parquet file written here (row groups, encodings chosen by the test)."""
    root = t.uri.removeprefix("file://")
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    pq.write_table(table, os.path.join(root, "data", name), **write_options)
    size = os.path.getsize(os.path.join(root, "data", name))
    t.add_files(pa.table({"path": [f"data/{name}"], "size": [size], "record_count": [table.num_rows]}))


@pytest.mark.parametrize("op", ["delete", "update"])
@pytest.mark.parametrize("where", ["s = 'v7'", "s IN ('v1', 'x')", "s IS NULL", "s NOT IN ('v2')", "NOT (s >= 'v5')"])
def test_row_groups_with_their_own_dictionaries_and_a_plain_column(tmp_path, duck, where, op):
    """Row groups of one file with different dictionaries (one predicate evaluation each),
    and a file whose column has no dictionary at all (unique values)."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    n = 3000
    ids = np.arange(n)
    values = [None if i % 11 == 0 else f"v{(i // 1000) * 3 + i % 3}" for i in ids]  # each 1000 rows other values
    add_parquet(t, pa.table({"id": ids, "s": pa.array(values, pa.string())}, schema=SCHEMA), "groups.parquet", row_group_size=1000)
    plain = pa.table({"id": ids + n, "s": pa.array([f"v{i}" if i % 7 else None for i in ids], pa.string())}, schema=SCHEMA)
    add_parquet(t, plain, "plain.parquet", use_dictionary=False)
    assert pq.ParquetFile(os.path.join(t.uri.removeprefix("file://"), "data", "groups.parquet")).num_row_groups == 3
    check_against_duckdb(duck, t, where, op)


def test_file_without_the_column_reads_nulls(tmp_path, duck):
    """A file added without the column (its rows read NULL there): ``IS NULL`` deletes all of
    them, ``=`` none."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.table({"id": [0, 1, 2], "s": ["a", None, "b"]}, schema=SCHEMA))
    add_parquet(t, pa.table({"id": pa.array([10, 11], pa.int64())}), "no_s.parquet")
    check_against_duckdb(duck, t, "s = 'a'")
    check_against_duckdb(duck, t, "s IS NULL")
    assert sorted(t.scan(columns=["id"]).to_arrow().column("id").to_pylist()) == [2]


@pytest.mark.parametrize("where", ["s = 'a'", "s IN ('b', 'zz')", "s IS NULL", "other = 'a'"])
def test_nested_columns_before_the_column(tmp_path, duck, where):
    """Nested columns (a struct's two leaves, a list's, a map's two) before the predicate's
    column shift its Parquet leaf index past its field index: the column is read by its field
    index, else the predicate would read another column (here ``other``, whose values are
    chosen to differ from ``s``'s row by row) or past the last one (a crash)."""
    schema = pa.schema([
        ("id", pa.int64()), ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])), ("l", pa.list_(pa.string())),
        ("m", pa.map_(pa.string(), pa.int64())), ("s", pa.string()), ("other", pa.string()), ("last", pa.string()),
    ])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    n = 12
    s = [None if i % 5 == 0 else WORDS[i % 4 + 1] for i in range(n)]
    t.append(pa.table({
        "id": np.arange(n), "st": [{"x": i, "y": "a"} for i in range(n)], "l": [["a", "b"]] * n, "m": [[("a", 1)]] * n,
        "s": s, "other": [WORDS[(i + 1) % 4 + 1] for i in range(n)], "last": ["a"] * n,
    }, schema=schema))
    check_against_duckdb(duck, t, where)


def test_binary_column(tmp_path, duck):
    schema = pa.schema([("id", pa.int64()), ("b", pa.binary())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": [0, 1, 2, 3], "b": [b"\x00", b"\xff", None, b"\x00"]}, schema=schema))
    assert scan_of(t, "b IS NULL").dictionary_column == "b"
    check_against_duckdb(duck, t, "b IS NULL")
    assert t.scan(columns=["id"]).to_arrow().column("id").to_pylist() == [0, 1, 3]


def scan_of(t: lamina.Table, where: str) -> Scan:
    vm = t.metadata
    return Scan(t.io, vm, bind(to_expr(where), vm.schema))


def test_only_one_string_column_predicates_go_by_dictionary(tmp_path, monkeypatch):
    """The dictionary path is taken for a predicate on one string column, and only then:
    predicates on other types or on two columns go row by row (same results, see above)."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.table({"id": [0, 1, 2, 3], "s": ["a", "b", "a", None]}, schema=SCHEMA))
    calls = []
    real = Scan.matching_positions
    monkeypatch.setattr(Scan, "matching_positions", lambda self, e: calls.append(self.dictionary_column) or real(self, e))
    assert t.delete("s = 'a'").version is not None
    assert calls == ["s"]
    assert t.update("s = 'b'", {"id": "id + 10"}).version is not None  # an update too
    assert calls == ["s", "s"]
    assert t.delete("id = 11").version is not None
    assert t.update("id = 3 AND s IS NULL", {"s": "'c'"}).version is not None
    assert t.delete("id = 3 AND s = 'c'").version is not None
    assert calls == ["s", "s"]
    assert t.scan().to_arrow().num_rows == 0
    assert scan_of(t, "s = 'a' OR s IS NULL").dictionary_column == "s"
    assert scan_of(t, "id > 0").dictionary_column is None


def test_each_distinct_value_is_evaluated_once_across_files(tmp_path, duck, monkeypatch):
    """Files written apart hold the same values in different orders, so their dictionaries
    differ: the predicate still runs on each distinct value once (then a null), not once per
    file (it cost a row-filter call per file). A value first seen in a later file is
    evaluated then, and only it. Results checked against DuckDB."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    rng = np.random.default_rng(7)
    for i in range(30):
        words = list(rng.permutation(WORDS[:5])) + (["zz", None] if i == 20 else [])
        t.append(pa.table({"id": range(i * 10, i * 10 + len(words)), "s": words}, schema=SCHEMA))
    evaluated = []
    real = DictionaryPositions._matches
    monkeypatch.setattr(DictionaryPositions, "_matches", lambda self, v: evaluated.append(len(v)) or real(self, v))
    check_against_duckdb(duck, t, "s IN ('a', 'zz') OR s IS NULL")
    assert sorted(evaluated) == [1, 1, 5]  # the null, the five first words, then 'zz'


@pytest.mark.parametrize("where", ["s = 'w0007'", "s IN ('w0001', 'w0299', 'zz')", "s IS NULL", "s > 'w0150'", "s != 'w0003'"])
def test_dictionaries_small_and_large(tmp_path, duck, where):
    """A file whose dictionary holds a few values is looked up value by value, one with
    hundreds of values through Arrow kernels (``_MatchingCodes``): both agree with DuckDB,
    in one delete over both kinds of file."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    many = [f"w{i:04d}" for i in range(300)] + [None]
    rng = np.random.default_rng(3)
    t.append(pa.table({"id": range(0, 301), "s": list(rng.permutation(np.array(many, dtype=object)))}, schema=SCHEMA))
    t.append(pa.table({"id": range(1000, 1006), "s": ["w0007", "w0001", None, "w0299", "w0200", "w0007"]}, schema=SCHEMA))
    path = t.scan().plan().entries.column("path")[0].as_py()
    assert len(pq.read_table(os.path.join(str(tmp_path / "t"), path), read_dictionary=["s"]).column("s").chunk(0).dictionary) == 300
    check_against_duckdb(duck, t, where)


@pytest.mark.parametrize("where", ["s = 'a'", "s IN ('b', 'zz')", "s IS NULL"])
def test_file_with_its_columns_in_another_order(tmp_path, duck, where):
    """The column is asked for as a dictionary by its leaf index in the table's schema: in a
    file whose columns come in another order that leaf is another column (here ``id``, an
    integer), and ``s`` is read by name, as plain values. (A file with fewer leaves: see
    ``test_file_without_the_column_reads_nulls``.)"""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.table({"id": [0, 1, 2, 3], "s": ["a", "b", None, "a"]}, schema=SCHEMA))
    add_parquet(t, pa.table({"s": pa.array(["a", None, "zz", "b"]), "id": pa.array([10, 11, 12, 13], pa.int64())}), "swapped.parquet")
    check_against_duckdb(duck, t, where)


@pytest.mark.parametrize("op", ["delete", "update"])
@pytest.mark.parametrize("where", ["s = 'a'", "s IN ('b', 'é')", "s IS NULL", "s > 'a'"])
@pytest.mark.parametrize("uri", ["local", "memory"])
def test_many_files_in_batches_and_on_an_object_store(tmp_path, duck, monkeypatch, where, uri, op):
    """Local files are read a batch at a time, then their positions picked (here batches of
    2 files, so batches end between files and the last one is short); an object store's
    files go through the read threads. Both against DuckDB, with DVs from an earlier delete."""
    import lamina.data.scan.positions as scan_mod

    monkeypatch.setattr(scan_mod, "_POSITIONS_BATCH_FILES", 2)
    location = str(tmp_path / "t") if uri == "local" else f"memory:///dict-{tmp_path.name}"
    t = lamina.create_table(location, SCHEMA)
    rng = np.random.default_rng(11)
    for i in range(7):
        values = list(rng.choice(np.array(WORDS[:5] + [None], dtype=object), 9))
        t.append(pa.table({"id": range(i * 10, i * 10 + 9), "s": pa.array(values, pa.string())}, schema=SCHEMA))
    check_against_duckdb(duck, t, "s = 'ab'")  # DVs on some files
    check_against_duckdb(duck, t, where, op)


@pytest.mark.parametrize("where", ["id >= 3 AND id < 12", "id IN (1, 25, 26)", "id > 20 OR s = 'a'", "id < 0", "s IS NULL AND id > 5"])
def test_update_by_other_predicates_reads_the_selected_rows_first(tmp_path, duck, monkeypatch, where):
    """An update whose predicate is not on one string column finds its rows from the
    predicate's columns alone (after an earlier delete left DVs), then reads whole only the
    files holding a selected row, and of those only those rows: against DuckDB, row ids kept."""
    from lamina.operations.rowlevel import RowDelta

    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(4):
        t.append(pa.table({"id": range(i * 10, i * 10 + 8), "s": ["a", "b", None, "ab", "a", "b", "zz", None]}, schema=SCHEMA))
    check_against_duckdb(duck, t, "id IN (4, 14)")  # DVs on two files
    reads = []
    real = RowDelta._live_rows
    monkeypatch.setattr(RowDelta, "_live_rows", lambda self, base, entries, selected=None, columns=None: reads.append(
        (entries.num_rows, columns, None if selected is None else sum(len(p) for p in selected)))
        or real(self, base, entries, selected, columns))
    before = t.scan().to_arrow()
    duck.register("before", before)
    n = duck.sql(f"SELECT count(*) FROM before WHERE ({where}) IS TRUE").fetchall()[0][0]
    files = duck.sql(f"SELECT count(DISTINCT id // 10) FROM before WHERE ({where}) IS TRUE").fetchall()[0][0]
    check_against_duckdb(duck, t, where, "update")
    if not reads:  # every file pruned by its statistics
        assert n == 0
        return
    assert reads[0][1:] == (sorted({"id", "s"} & set(where.replace("(", " ").split())), None)  # the predicate's columns
    assert reads[1:] == ([(files, None, n)] if n else [])  # then the selected rows of the files holding some
