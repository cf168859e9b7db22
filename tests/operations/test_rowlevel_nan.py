"""Row-level changes and value expressions with NULL, NaN, -0.0 and +-inf, against DuckDB.

Lamina's semantics (docs/format.md, "Predicates: NULL, NaN and signed zero" and "Deletion
vectors and row-level changes") are Spark's: NaN equals NaN and is above every other value,
-0.0 equals 0.0, NULL never matches. DuckDB means the same by ``=`` and ``<``; its hash joins
on doubles (1.5.5) identify neither NaNs nor the two zeros, so the oracle joins on a
canonical key (``join_key``: one bit pattern per value SQL's ``=`` identifies) and
``test_duckdb_joins_and_orders_nan_as_lamina`` checks the oracle itself. Each result here is
compared with what DuckDB's SQL computes over the same rows:

- merges (matched delete / update with a CASE value, not matched insert with a condition)
  on float keys over several files, partitioned or not, with existing deletion vectors;
- value expressions (comparisons, IN, NOT, AND / OR, CASE) as update ``set=`` and merge
  conditions evaluate them;
- ``delete(where)`` and ``update(where, set)``.

NaN keys come with several bit patterns (NumPy's 0x7ff8..., Arrow's 0/0 0xfff8..., a payload
0x7ff8...01): all are one value. CI runs a fixed number of examples (tests/conftest.py); a
longer run: ``LAMINA_DIFF_EXAMPLES=2000 .venv/bin/python -m pytest -q tests/operations/test_rowlevel_nan.py``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.expr.values import evaluate

INF = float("inf")
NANS = [float(np.array([bits], np.uint64).view(np.float64)[0]) for bits in (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000001)]
KEYS = [*NANS, -0.0, 0.0, INF, -INF, 1.0, -1.0, 0.5, 0.1, None]
XS = [NANS[0], NANS[1], -0.0, 0.0, INF, -INF, 1.0, -2.0, None]
EXAMPLES = int(os.environ.get("LAMINA_DIFF_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def floats(values: list, typ: pa.DataType = pa.float64()) -> pa.Array:
    """A float column keeping each NaN's bit pattern and each zero's sign."""
    arr = np.array([0.0 if v is None else v for v in values], np.float64)
    return pa.array(arr, mask=np.array([v is None for v in values], bool)).cast(typ)


def same_key(v: float | None) -> object:
    """What SQL's = identifies: every NaN, and both zeros (each NULL is its own)."""
    return object() if v is None else "nan" if v != v else v + 0.0


def join_key(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The oracle's join key of a float column: its float64 bits, one pattern for every NaN and
    for both zeros, null for null (float32 values widened exactly, so float32 0.1 is not
    float64 0.1, as in Lamina)."""
    arr = values.to_numpy(zero_copy_only=False).astype(np.float64)
    canonical = np.where(np.isnan(arr), np.nan, arr + 0.0)  # -0.0 + 0.0 is +0.0
    bits = canonical.view(np.int64)
    return pa.array(bits, pa.int64(), mask=np.asarray(pc.is_null(values)))


def load(duck, name: str, t: pa.Table, join_keyed: bool = True) -> None:
    """``t`` with its join key as DuckDB table ``name``, copied into DuckDB's own storage: over
    a registered Arrow table DuckDB 1.5.5 pushes comparisons into Arrow's scan, where NaN is
    above nothing (``NaN > -1`` false), and its joins of such doubles identify no NaN."""
    arrow = t.append_column("kn", join_key(t.column("k"))) if join_keyed else t
    duck.register(f"{name}_arrow", arrow)
    duck.sql(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")
    duck.unregister(f"{name}_arrow")


def canon(v: object) -> object:
    """A value as compared with the oracle's: NaN as one marker, zeros keeping their sign."""
    return "nan" if isinstance(v, float) and v != v else repr(v) if isinstance(v, float) else v


def canon_rows(rows: list[tuple]) -> list[tuple]:
    return sorted((tuple(canon(v) for v in r) for r in rows), key=repr)


@contextlib.contextmanager
def scratch_dir():
    with tempfile.TemporaryDirectory() as d:
        try:
            yield d
        finally:
            flush_hints()  # the background hint writer is done with the directory before it goes


@pytest.fixture(scope="module")
def duck():
    con = duckdb.connect()
    yield con
    con.close()


def test_duckdb_joins_and_orders_nan_as_lamina(duck):
    load(duck, "t", pa.table({"k": floats([NANS[0], -0.0, None, 1.0, 0.5])}))
    load(duck, "s", pa.table({"k": floats([NANS[1], 0.0, None, INF, NANS[2]], pa.float32())}))
    joined = duck.sql("SELECT t.k, s.k FROM t JOIN s ON t.kn = s.kn").fetchall()
    assert canon_rows(joined) == canon_rows([(NANS[0], NANS[1]), (NANS[0], NANS[2]), (-0.0, 0.0)])
    assert duck.sql("SELECT 'NaN'::DOUBLE > 'Infinity'::DOUBLE, 'NaN'::DOUBLE = 'NaN'::DOUBLE, "
                      "-0.0::DOUBLE = 0.0::DOUBLE, 'NaN'::DOUBLE IN (1.0, 'NaN'::DOUBLE)").fetchall() == [(True,) * 4]


# -- merge ------------------------------------------------------------------------------------

MERGE_ORACLE = """
WITH m AS (
    SELECT t.id AS tid, s.x AS sx, s.v AS sv,
           CASE WHEN s.op = 'D' THEN 'delete' WHEN s.x != t.x THEN 'update' ELSE 'keep' END AS act
    FROM t JOIN s ON t.kn = s.kn
)
SELECT id, k, x, v FROM t WHERE id NOT IN (SELECT tid FROM m WHERE act != 'keep')
UNION ALL
SELECT t.id, t.k, CASE WHEN m.sx > t.x THEN m.sx ELSE t.x END, m.sv FROM t JOIN m ON t.id = m.tid WHERE m.act = 'update'
UNION ALL
SELECT s.id, CAST(s.k AS {key_sql}), s.x, s.v FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.kn = s.kn) AND s.x > -1
"""


def merge_clauses(builder):
    """First matched clause that holds wins: a delete, else an update of the rows whose x
    differs (NaN != NaN is false), keeping the larger x (NaN above +inf); unmatched source
    rows are inserted when x > -1 (NaN and +inf are)."""
    return (
        builder.when_matched_delete(condition="source.op = 'D'")
        .when_matched_update({"v": "source.v", "x": "CASE WHEN source.x > target.x THEN source.x ELSE target.x END"},
                             condition="source.x != target.x")
        .when_not_matched_insert_all(condition="source.x > -1")
    )


index = st.integers(0, len(KEYS) - 1)
target_files = st.lists(st.lists(st.tuples(index, st.integers(0, len(XS) - 1)), min_size=1, max_size=6), min_size=2, max_size=4)
source_rows = st.lists(st.tuples(index, st.integers(0, len(XS) - 1), st.sampled_from("DU")), max_size=8,
                       unique_by=lambda r: same_key(KEYS[r[0]]) if KEYS[r[0]] is not None else "null")


@SETTINGS
@given(
    files=target_files, source=source_rows,
    key_type=st.sampled_from([pa.float64(), pa.float32()]),
    partitioned=st.booleans(), mode=st.sampled_from(["merge-on-read", "copy-on-write"]), delete_first=st.booleans(),
)
def test_merge_on_float_keys_matches_duckdb(duck, files, source, key_type, partitioned, mode, delete_first):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("k", key_type), pa.field("x", pa.float64()), pa.field("v", pa.int64())])
    with scratch_dir() as d:
        table = lamina.create_table(d + "/t", schema, partition_by=["k"] if partitioned else None)
        ids = iter(range(1000))
        for rows in files:  # one append (a file per partition) each: pruning by bounds matters
            n = [next(ids) for _ in rows]
            table.append(pa.table({"id": n, "k": floats([KEYS[i] for i, _ in rows], key_type),
                                   "x": floats([XS[j] for _, j in rows]), "v": n}, schema=schema))
        if delete_first:
            table.delete("v < 2")  # deletion vectors the merge reads through and merges into
        load(duck, "t", table.to_arrow())
        # The source as pandas gives it: float64 keys whatever the table's key type.
        s = pa.table({"id": [2000 + n for n in range(len(source))], "k": floats([KEYS[i] for i, _, _ in source]),
                      "x": floats([XS[j] for _, j, _ in source]), "v": [-n for n in range(len(source))],
                      "op": [op for _, _, op in source]})
        load(duck, "s", s)
        want = duck.sql(MERGE_ORACLE.format(key_sql="FLOAT" if key_type == pa.float32() else "DOUBLE")).fetchall()
        counts = duck.sql(
            "SELECT count(*) FILTER (WHERE s.op = 'D'), count(*) FILTER (WHERE s.op != 'D' AND s.x != t.x) "
            "FROM t JOIN s ON t.kn = s.kn").fetchall()[0]
        inserted = duck.sql("SELECT count(*) FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.kn = s.kn) AND s.x > -1").fetchall()[0][0]

        # float64 keys into a float32 table: stored by pyarrow's safe cast (cast="safe"), as
        # DuckDB's INSERT casts them (without it the merge is refused: docs/format.md, Types on write).
        res = merge_clauses(table.merge(s, on="k", mode=mode, cast="safe")).execute()
        got = table.to_arrow().select(["id", "k", "x", "v"])
        assert canon_rows([tuple(r.values()) for r in got.to_pylist()]) == canon_rows(want)
        assert (res.rows_deleted, res.rows_updated, res.rows_inserted) == (*counts, inserted)


def merge_table(tmp_path, key_type=pa.float64()):
    schema = pa.schema([pa.field("k", key_type), pa.field("v", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"k": floats([0.0, 0.1, 1.0], key_type), "v": [0, 1, 2]}, schema=schema))
    t.append(pa.table({"k": floats([NANS[1], 5.0], key_type), "v": [3, 4]}, schema=schema))
    return t


def test_merge_keys_zero_and_minus_zero_are_one_key(tmp_path):
    t = merge_table(tmp_path)
    v = t.version
    with pytest.raises(InvalidArgument, match="more than one source row"):
        t.merge(pa.table({"k": [-0.0, 0.0], "v": [7, 8]}), on="k").when_matched_update_all().execute()
    with pytest.raises(InvalidArgument, match="more than one source row"):
        t.merge(pa.table({"k": NANS[:2], "v": [7, 8]}), on="k").when_matched_delete().execute()
    assert t.refresh().version == v


def test_merge_widens_float32_keys_exactly_and_refuses_keys_that_do_not_compare(tmp_path):
    t = merge_table(tmp_path, pa.float32())
    # float64 0.1 is not float32 0.1 (0.100000001490116...), as in a predicate; 1.0 and NaN are.
    res = t.merge(pa.table({"k": [0.1, 1.0, NANS[0]], "v": [10, 20, 30]}), on="k", cast="safe").when_matched_update_all().execute()
    assert (res.rows_updated, res.files_scanned) == (2, 2)
    assert sorted(t.to_arrow().column("v").to_pylist()) == [0, 1, 4, 20, 30]
    v = t.version
    with pytest.raises(SchemaMismatch, match="'k' is float in the table but string in the source"):
        t.merge(pa.table({"k": ["1.0"], "v": [1]}), on="k").when_matched_delete().execute()
    assert t.refresh().version == v


def test_merge_prunes_by_the_non_nan_keys_and_reads_nan_candidates(tmp_path):
    t = merge_table(tmp_path)
    t.append(pa.table({"k": [100.0, 200.0], "v": [5, 6]}, schema=t.schema))  # known bounds, no NaN: never a candidate
    res = t.merge(pa.table({"k": [NANS[2], 1.0], "v": [30, 20]}), on="k").when_matched_update_all().execute()
    assert (res.files_scanned, res.rows_updated) == (2, 2)
    assert sorted(t.to_arrow().column("v").to_pylist()) == [0, 1, 4, 5, 6, 20, 30]


# -- value expressions ------------------------------------------------------------------------

VALUES = pa.table({
    "a": floats([NANS[0], NANS[1], -0.0, 0.0, INF, -INF, 1.0, None, 2.5, NANS[2]]),
    "b": floats([NANS[1], 1.0, 0.0, -0.0, NANS[0], -INF, None, 2.5, INF, 0.0]),
    "i": pa.array([1, None, 0, 3, -1, 2, 1, 0, None, 5], pa.int64()),
})

numbers = st.sampled_from(["a", "b", "i", "1", "-1", "0.0", "-0.0", "2.5", "1e308", "-1e308", "NULL"])


def conditions(nums):
    comparison = st.builds("({} {} {})".format, nums, st.sampled_from(["=", "!=", "<>", "<", "<=", ">", ">="]), nums)
    membership = st.builds(lambda x, neg, items: f"({x} {neg}IN ({', '.join(items)}))", nums, st.sampled_from(["", "NOT "]),
                           st.lists(nums, min_size=1, max_size=3))
    null_test = st.builds("({} IS {}NULL)".format, nums, st.sampled_from(["", "NOT "]))
    leaf = st.one_of(comparison, membership, null_test)
    return st.one_of(leaf, st.builds("(NOT {})".format, leaf), st.builds("({} {} {})".format, leaf, st.sampled_from(["AND", "OR"]), leaf))


def case_of(subject, branches, default):
    whens = " ".join(f"WHEN {c} THEN {v}" for c, v in branches)
    return f"(CASE {subject + ' ' if subject else ''}{whens}{' ELSE ' + default if default else ''} END)"


def with_cases(nums):
    return st.one_of(
        st.builds(case_of, st.none(), st.lists(st.tuples(conditions(nums), nums), min_size=1, max_size=2), st.none() | nums),
        st.builds(case_of, nums, st.lists(st.tuples(nums, nums), min_size=1, max_size=2), st.none() | nums),
    )


value_exprs = st.recursive(numbers, with_cases, max_leaves=6)


def as_values(vals: list) -> list:
    """Results as values: numbers as floats (DuckDB types a literal 2.5 DECIMAL, Lamina DOUBLE;
    a CASE of integers is an integer in both), -0.0 as 0.0 (a literal -0.0 is DECIMAL 0.0 in
    DuckDB), every NaN as one marker."""
    def value(v):
        if v is None or isinstance(v, bool):
            return v
        return "nan" if v != v else float(v) + 0.0
    return [value(v) for v in vals]


@SETTINGS
@given(expr=st.one_of(conditions(value_exprs), value_exprs))
def test_value_expressions_match_duckdb(duck, expr):
    load(duck, "v", VALUES, join_keyed=False)
    want = [r[0] for r in duck.sql(f"SELECT {expr} FROM v").fetchall()]
    got = evaluate(expr, VALUES)
    got = got.to_pylist() if hasattr(got, "to_pylist") else [got.as_py()] * VALUES.num_rows  # a constant
    assert as_values(got) == as_values(want), expr


# -- delete / update (where) -------------------------------------------------------------------

WHERES = ["k > 1e308", "k != 1", "k = 0.0", "k = -0.0", "k IN ('NaN', 0)", "k NOT IN (1, 'Infinity')",
          "k < 'NaN'", "k >= 'Infinity'", "NOT (k <= 1)", "k BETWEEN -1 AND 'NaN'"]


def where_table(tmp_path) -> lamina.Table:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("k", pa.float64()), pa.field("big", pa.bool_())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    for n, part in enumerate([[1.0, 2.0], [NANS[1], 0.5], [-0.0, None, INF], [NANS[2], -INF, 0.0]]):
        ids = list(range(10 * n, 10 * n + len(part)))
        t.append(pa.table({"id": ids, "k": floats(part), "big": [None] * len(part)}, schema=schema))
    return t


@pytest.mark.parametrize("where", WHERES)
def test_delete_where_with_nan_matches_duckdb(duck, tmp_path, where):
    table = where_table(tmp_path)
    load(duck, "t", table.to_arrow(), join_keyed=False)
    want = duck.sql(f"SELECT id FROM t WHERE NOT coalesce({where}, false)").fetchall()
    table.delete(where)
    assert sorted(table.to_arrow().column("id").to_pylist()) == sorted(r[0] for r in want)


@pytest.mark.parametrize("where", WHERES)
def test_update_where_and_set_with_nan_match_duckdb(duck, tmp_path, where):
    table = where_table(tmp_path)
    load(duck, "t", table.to_arrow(), join_keyed=False)
    want = duck.sql(f"SELECT id, CASE WHEN coalesce({where}, false) THEN k >= 1 ELSE big END FROM t").fetchall()
    table.update(where, set={"big": "k >= 1"})
    assert sorted(table.to_arrow().select(["id", "big"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "big": b} for i, b in sorted(want)]
