"""Merges of random clause lists, every kind of clause (``when_matched_update`` /
``_update_all`` / ``_delete``, ``when_not_matched_insert`` / ``_insert_all``,
``when_not_matched_by_source_update`` / ``_delete``, each with or without a condition), against
DuckDB's own ``MERGE INTO ... WHEN NOT MATCHED BY SOURCE ... RETURNING merge_action``: the rows
after the merge, the counts of the result, and, on a table with row lineage, the change data
feed of the version (the rows DuckDB says it deleted, updated and inserted; updated rows keep
their ``_row_id``). Tables of several files, with deletion vectors already in place or not,
keys with NULLs (a NULL target key matches no source row: the by-source clauses take it),
target keys held twice, merge-on-read and copy-on-write.

CI runs a fixed number of examples (tests/conftest.py); a longer run:
``LAMINA_DIFF_EXAMPLES=500 .venv/bin/python -m pytest -q tests/operations/test_merge_clauses.py``.
"""

from __future__ import annotations

import collections
import os

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.errors import InvalidArgument
from lamina.maintenance import fsck
from support.rowlevel import concurrently_on_first_attempt

EXAMPLES = int(os.environ.get("LAMINA_DIFF_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
COLUMNS = ("id", "k", "g", "v")
KEY_TYPES = {"int64": pa.int64(), "string": pa.string()}
KEYS = list(range(0, 12))

# (Lamina builder call, DuckDB clause) per clause kind; conditions are the same SQL text in both
# (DuckDB's MERGE aliases the tables as target and source).
SOURCE_CONDITIONS = [None, "source.op = 'D'", "source.v > 0", "target.v > 25", "source.v <= 1 AND target.v < 60"]
TARGET_CONDITIONS = [None, "target.v > 25", "target.v < 40", "target.g = 1 AND target.v >= 10"]


def _when(cond: str | None) -> str:
    return "" if cond is None else f" AND {cond}"


CLAUSES = {
    "matched_update": (
        lambda b, c: b.when_matched_update({"v": "target.v + source.v"}, condition=c),
        lambda c: f"WHEN MATCHED{_when(c)} THEN UPDATE SET v = target.v + source.v", SOURCE_CONDITIONS),
    "matched_update_all": (
        lambda b, c: b.when_matched_update_all(condition=c),
        lambda c: f"WHEN MATCHED{_when(c)} THEN UPDATE SET id = source.id, k = source.k, g = source.g, v = source.v",
        SOURCE_CONDITIONS),
    "matched_delete": (
        lambda b, c: b.when_matched_delete(condition=c),
        lambda c: f"WHEN MATCHED{_when(c)} THEN DELETE", SOURCE_CONDITIONS),
    "insert": (
        lambda b, c: b.when_not_matched_insert({"id": "source.id", "k": "source.k", "g": "source.g", "v": "source.v * 10"},
                                               condition=c),
        lambda c: f"WHEN NOT MATCHED{_when(c)} THEN INSERT (id, k, g, v) VALUES (source.id, source.k, source.g, source.v * 10)",
        [None, "source.op = 'D'", "source.v > 0"]),
    "insert_all": (
        lambda b, c: b.when_not_matched_insert_all(condition=c),
        lambda c: f"WHEN NOT MATCHED{_when(c)} THEN INSERT (id, k, g, v) VALUES (source.id, source.k, source.g, source.v)",
        [None, "source.v > 0"]),
    "by_source_update": (
        lambda b, c: b.when_not_matched_by_source_update({"v": "target.v * 2 + 1"}, condition=c),
        lambda c: f"WHEN NOT MATCHED BY SOURCE{_when(c)} THEN UPDATE SET v = target.v * 2 + 1", TARGET_CONDITIONS),
    "by_source_update_bare": (  # bare names are the target's columns
        lambda b, c: b.when_not_matched_by_source_update({"v": "v - 1", "g": "g"}, condition=c),
        lambda c: f"WHEN NOT MATCHED BY SOURCE{_when(c)} THEN UPDATE SET v = target.v - 1", TARGET_CONDITIONS),
    "by_source_delete": (
        lambda b, c: b.when_not_matched_by_source_delete(condition=c),
        lambda c: f"WHEN NOT MATCHED BY SOURCE{_when(c)} THEN DELETE", TARGET_CONDITIONS),
}


def _group(kind: str) -> str:
    return "by_source" if kind.startswith("by_source") else "insert" if kind.startswith("insert") else "matched"


@st.composite
def clause_lists(draw):
    """Clauses in any order; in each group (matched, not matched, not matched by source) none
    after one without a condition (it would never apply: DuckDB refuses it, as Delta does)."""
    out, closed = [], set()
    for kind in draw(st.lists(st.sampled_from(sorted(CLAUSES)), min_size=1, max_size=5)):
        if _group(kind) in closed:
            continue
        cond = draw(st.sampled_from(CLAUSES[kind][2]))
        if cond is None:
            closed.add(_group(kind))
        out.append((kind, cond))
    return out


def _key(typ: pa.DataType, v):
    return None if v is None else (f"k{v:02d}" if pa.types.is_string(typ) else v)


def make_table(path, data, typ, lineage: bool, two_keys: bool) -> lamina.Table:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("k", typ), pa.field("g", pa.int8()), pa.field("v", pa.int64())])
    groups = [0, 1] if two_keys else [0]
    cells = data.draw(st.lists(st.tuples(st.sampled_from([*KEYS, None]), st.sampled_from(groups)), min_size=1, max_size=20,
                               unique_by=lambda c: c if c[0] is not None else object()))
    t = lamina.create_table(str(path), schema, properties={"row-lineage.enabled": str(lineage).lower()})
    n_files = data.draw(st.integers(1, 4))
    for part in np.array_split(np.arange(len(cells)), n_files):  # one append = one file each
        if len(part):
            t.append(pa.table({"id": part.tolist(), "k": pa.array([_key(typ, cells[i][0]) for i in part], typ),
                               "g": [cells[i][1] for i in part], "v": [10 * int(i) for i in part]}, schema=schema))
    if data.draw(st.booleans()):  # some keys held twice: a source row matching them matches both
        again = cells[: data.draw(st.integers(1, len(cells)))]
        t.append(pa.table({"id": [500 + i for i in range(len(again))], "k": pa.array([_key(typ, c[0]) for c in again], typ),
                           "g": [c[1] for c in again], "v": [7 + i for i in range(len(again))]}, schema=schema))
    if data.draw(st.booleans()):
        t.delete("id IN (0, 3, 6, 9, 12, 15, 18)")  # deletion vectors the merge reads through and merges into
    return t


def make_source(data, typ, two_keys: bool) -> pa.Table:
    groups = [0, 1] if two_keys else [0]
    cells = data.draw(st.lists(st.tuples(st.sampled_from([*KEYS, None]), st.sampled_from(groups)), max_size=10,
                               unique_by=lambda c: c if c[0] is not None else object()))
    n = len(cells)
    return pa.table({
        "id": pa.array([1000 + i for i in range(n)], pa.int64()), "k": pa.array([_key(typ, c[0]) for c in cells], typ),
        "g": pa.array([c[1] for c in cells], pa.int8()),
        "v": pa.array(data.draw(st.lists(st.integers(-2, 3), min_size=n, max_size=n)), pa.int64()),
        "op": pa.array(data.draw(st.lists(st.sampled_from("DU"), min_size=n, max_size=n)), pa.string()),
    })


def _marked(clause_sql: str) -> str:
    """A DuckDB clause that also marks the rows it writes (``__act``): updates 'U', inserts 'I'."""
    if " THEN UPDATE SET " in clause_sql:
        return clause_sql + ", __act = 'U'"
    if " THEN INSERT (id, k, g, v) VALUES (" in clause_sql:
        assert clause_sql.endswith(")")
        return clause_sql.replace("INSERT (id, k, g, v)", "INSERT (id, k, g, v, __act)")[:-1] + ", 'I')"
    return clause_sql


def duckdb_merge(target: pa.Table, source: pa.Table, clauses, on: list[str]) -> tuple[list[tuple], list[tuple]]:
    """(the rows after DuckDB's MERGE of the same clauses, its (action, row) list). The actions
    come from marks the clauses set and from the target rows that are gone, not from RETURNING
    (DuckDB 1.5.5's RETURNING of a merge gives other values for columns no clause sets)."""
    con = duckdb.connect()
    try:
        con.register("t_in", target)
        con.register("s", source)
        con.sql("CREATE TABLE t AS SELECT *, row_number() OVER () AS __rid, CAST(NULL AS VARCHAR) AS __act FROM t_in")
        before = {r[0]: r[1:] for r in con.sql("SELECT __rid, id, k, g, v FROM t").fetchall()}
        cond = " AND ".join(f"target.{k} = source.{k}" for k in on)
        sql = f"MERGE INTO t AS target USING s AS source ON {cond} " + " ".join(_marked(CLAUSES[k][1](c)) for k, c in clauses)
        con.sql(sql)
        after = con.sql("SELECT __rid, __act, id, k, g, v FROM t").fetchall()
        kept = {rid for rid, *_ in after if rid is not None}
        actions = [("DELETE", *row) for rid, row in before.items() if rid not in kept]
        actions += [({"U": "UPDATE", "I": "INSERT"}[act], *row) for _, act, *row in after if act is not None]
        return [tuple(row) for _, _, *row in after], actions
    finally:
        con.close()


def _rows(t: pa.Table) -> collections.Counter:
    return collections.Counter(tuple(r[c] for c in COLUMNS) for r in t.select(list(COLUMNS)).to_pylist())


@SETTINGS
@given(data=st.data(), type_name=st.sampled_from(sorted(KEY_TYPES)), clauses=clause_lists(), two_keys=st.booleans(),
       mode=st.sampled_from(["merge-on-read", "copy-on-write"]), lineage=st.booleans())
def test_merge_of_any_clauses_matches_duckdb(tmp_path_factory, data, type_name, clauses, two_keys, mode, lineage):
    typ = KEY_TYPES[type_name]
    t = make_table(tmp_path_factory.mktemp("merge") / "t", data, typ, lineage, two_keys)
    src = make_source(data, typ, two_keys)
    on = ["k", "g"] if two_keys else ["k"]
    before = t.version
    want_rows, actions = duckdb_merge(t.to_arrow(), src, clauses, on)

    builder = t.merge(src, on=on, mode=mode)
    for kind, cond in clauses:
        builder = CLAUSES[kind][0](builder, cond)
    res = builder.execute()

    assert _rows(t.to_arrow()) == collections.Counter(want_rows)
    did = collections.Counter(a for a, *_ in actions)
    assert (res.rows_updated, res.rows_deleted, res.rows_inserted) == (did["UPDATE"], did["DELETE"], did["INSERT"])
    assert (res.version is None) == (not actions)
    if lineage and res.version is not None:
        feed = t.changes(before, res.version, columns=[*COLUMNS, "_row_id"]).to_arrow()
        by_type = {kind: feed.filter(pa.compute.equal(feed.column("_change_type"), kind)) for kind in
                   ("insert", "delete", "update_preimage", "update_postimage")}
        for kind, action in (("delete", "DELETE"), ("update_postimage", "UPDATE"), ("insert", "INSERT")):
            assert _rows(by_type[kind]) == collections.Counter(tuple(r) for a, *r in actions if a == action), kind
        # an updated row keeps its id: every postimage pairs with the preimage of the same _row_id
        assert sorted(by_type["update_preimage"].column("_row_id").to_pylist()) == \
            sorted(by_type["update_postimage"].column("_row_id").to_pylist())
    assert fsck(lamina.open_table(t.uri)).ok


def _three_files(tmp_path, lineage=False) -> lamina.Table:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema, properties={"row-lineage.enabled": str(lineage).lower()})
    for k in range(3):
        t.append(pa.table({"id": list(range(10 * k, 10 * k + 10)), "v": [0] * 10}, schema=schema))
    return t


def test_by_source_clauses_reach_every_file_not_only_those_in_the_source_keys_range(tmp_path):
    """Pruning by the source keys' bounds would skip the files the by-source clauses change."""
    t = _three_files(tmp_path)
    src = pa.table({"id": [3, 4], "v": [1, 1]})
    res = t.merge(src, on="id").when_matched_update_all().when_not_matched_by_source_delete(condition="target.id >= 25").execute()
    assert (res.rows_updated, res.rows_deleted, res.files_scanned) == (2, 5, 3)
    got = {r["id"]: r["v"] for r in t.to_arrow().to_pylist()}
    assert got == {i: (1 if i in (3, 4) else 0) for i in range(25)}


def test_an_empty_source_sends_every_target_row_to_the_by_source_clauses(tmp_path):
    t = _three_files(tmp_path)
    src = pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.int64())})
    res = t.merge(src, on="id").when_not_matched_by_source_update({"v": "id * 2"}).execute()
    assert res.rows_updated == 30
    assert sorted(r["v"] for r in t.to_arrow().to_pylist()) == [2 * i for i in range(30)]


def test_a_row_appended_while_the_merge_runs_meets_the_by_source_clauses(tmp_path, monkeypatch):
    """A retry re-plans on the newer base: the merge takes effect after the concurrent append,
    so the appended row (not in the source) is deleted as every other unmatched row is."""
    t = _three_files(tmp_path, lineage=True)
    other = lamina.open_table(t.uri)
    calls = concurrently_on_first_attempt(monkeypatch, lambda: other.append(pa.table({"id": [99], "v": [5]})))
    src = pa.table({"id": [1, 2], "v": [7, 7]})
    res = t.merge(src, on="id").when_matched_update_all().when_not_matched_by_source_delete().execute()
    assert len(calls) == 2 and calls[1] == calls[0] + 1  # rebased once, onto the append
    assert sorted((r["id"], r["v"]) for r in t.to_arrow().to_pylist()) == [(1, 7), (2, 7)]
    assert (res.rows_updated, res.rows_deleted) == (2, 29)


def test_by_source_clauses_refuse_source_columns_and_need_a_set(tmp_path):
    t = _three_files(tmp_path)
    b = t.merge(pa.table({"id": [1], "v": [1]}), on="id")
    with pytest.raises(InvalidArgument, match="source.v"):
        b.when_not_matched_by_source_delete(condition="source.v > 0")
    with pytest.raises(InvalidArgument, match="source.v"):
        b.when_not_matched_by_source_update({"v": "source.v + target.v"})
    with pytest.raises(InvalidArgument, match="needs set"):
        b.when_not_matched_by_source_update({})
    assert t.version == 3  # nothing was committed
