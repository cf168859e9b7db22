"""Column-statistics controls (``write.metadata.metrics.*``, docs/format.md "Column statistics").

The property test writes random tables of strings and binaries made to share long prefixes
(and code points at the edges: U+D7FF below the surrogates, U+E000 above, U+10FFFF that
cannot grow; bytes 0x00 and 0xFF) under random statistics modes, and checks every random
predicate's scan against DuckDB's WHERE over the same rows, that no file pruning skipped holds
a matching row, and that every kept bound really bounds its file's values. The other tests
pin the modes' effects: the 32-column default, validation, renames, add_files and pruning that
truncated bounds still allow.
"""

from __future__ import annotations

import tempfile

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import InvalidArgument
from lamina.expr import And, Compare, In, IsNull, NotIn, NotNull, Or
from lamina.spec import content as C
from lamina.spec.stats import truncate_bounds, StatsMode

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("b", pa.binary()), ("n", pa.int64())])
CHARS = "ab\u00e9\ud7ff\ue000\U0010fffe\U0010ffff"
BYTES = [0x00, 0x01, 0x61, 0xFE, 0xFF]
MODES = ["none", "counts", "full", "truncate(1)", "truncate(2)", "truncate(3)", "truncate(16)"]

# Text from few characters: random strings share long prefixes, and cuts land on the edges.
texts = st.text(alphabet=CHARS, max_size=24)
blobs = st.lists(st.sampled_from(BYTES), max_size=20).map(bytes)


@st.composite
def tables(draw):
    n = draw(st.integers(1, 40))
    s = draw(st.lists(st.one_of(st.none(), texts), min_size=n, max_size=n))
    b = draw(st.lists(st.one_of(st.none(), blobs), min_size=n, max_size=n))
    ints = draw(st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=n, max_size=n))
    rows = pa.table({"id": list(range(n)), "s": s, "b": b, "n": ints}, schema=SCHEMA)
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=5))) if n > 1 else []
    props = {f"write.metadata.metrics.column.{c}": draw(st.sampled_from(MODES)) for c in ("s", "b", "n")}
    if draw(st.booleans()):
        props["write.metadata.metrics.default"] = draw(st.sampled_from(MODES))
    return rows, cuts, props


def _near(draw, pool, gen, grow):
    """A literal at, just under, just over or far from the data's values."""
    kind = draw(st.integers(0, 3))
    if pool and kind < 3:
        v = draw(st.sampled_from(pool))
        if kind == 1:
            return v[: draw(st.integers(0, len(v)))]  # a prefix: below or equal
        if kind == 2:
            return v + grow(draw)  # above
        return v
    return draw(gen)


@st.composite
def predicates(draw, rows):
    """(Lamina expression, DuckDB WHERE with ? parameters, the parameters)."""
    col = draw(st.sampled_from(["s", "b", "n"]))
    values = [v for v in rows.column(col).to_pylist() if v is not None]
    if col == "s":
        lit = lambda: _near(draw, values, texts, lambda d: d(st.sampled_from(CHARS)))  # noqa: E731
    elif col == "b":
        lit = lambda: _near(draw, values, blobs, lambda d: bytes([d(st.sampled_from(BYTES))]))  # noqa: E731
    else:
        lit = lambda: draw(st.integers(-6, 6))  # noqa: E731
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in", "not_in", "is_null", "not_null"]))
    if op == "is_null":
        expr, sql, params = IsNull(col), f"{col} IS NULL", []
    elif op == "not_null":
        expr, sql, params = NotNull(col), f"{col} IS NOT NULL", []
    elif op in ("in", "not_in"):
        vs = [lit() for _ in range(draw(st.integers(1, 4)))]
        marks = ", ".join("?" * len(vs))
        expr = In(col, vs) if op == "in" else NotIn(col, vs)
        sql, params = f"{col} {'IN' if op == 'in' else 'NOT IN'} ({marks})", vs
    else:
        v = lit()
        expr, sql, params = Compare(op, col, v), f"{col} {'<>' if op == '!=' else op} ?", [v]
    if draw(st.integers(0, 3)) == 0:  # sometimes a conjunction or disjunction with another
        e2, sql2, p2 = draw(predicates(rows))
        word = draw(st.sampled_from(["AND", "OR"]))
        expr = And(expr, e2) if word == "AND" else Or(expr, e2)
        sql, params = f"({sql}) {word} ({sql2})", params + p2
    return expr, sql, params


def _ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


@pytest.fixture(scope="module")
def duck():
    con = duckdb.connect()
    yield con
    con.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_pruning_by_truncated_and_partial_stats_equals_duckdb(duck, data):
    rows, cuts, props = data.draw(tables())
    duck.register("t", rows)
    with tempfile.TemporaryDirectory() as root:
        t = lamina.create_table(f"{root}/t", SCHEMA, properties=props)
        bounds = [0, *cuts, rows.num_rows]
        for a, b in zip(bounds, bounds[1:]):
            t.append(rows.slice(a, b - a))
        t = lamina.open_table(t.uri)
        entries = t.scan().plan(all_columns=True).entries
        _check_bounds_hold(t, entries)
        every_file = set(entries.column("path").to_pylist())
        for _ in range(6):
            expr, sql, params = data.draw(predicates(rows))
            want = sorted(r[0] for r in duck.execute(f"SELECT id FROM t WHERE {sql}", params).fetchall())
            scan = t.scan(where=expr)
            assert _ids(scan.to_arrow()) == want, (sql, params, props)
            for path in every_file - set(scan.plan().entries.column("path").to_pylist()):
                skipped = pq.read_table(t.io.local_path(path)).select(["id"])
                assert not set(skipped.column("id").to_pylist()) & set(want), (sql, params, props, path)
        flush_hints()


def _check_bounds_hold(t: lamina.Table, entries: pa.Table) -> None:
    """Every kept bound bounds its file's values; a column whose mode keeps none has none."""
    schema = t.metadata.schema
    props = t.properties
    for i, path in enumerate(entries.column("path").to_pylist()):
        rows = pq.read_table(t.io.local_path(path))
        for name in ("s", "b", "n"):
            fid = schema.field_id(name)
            mode = props.get(f"write.metadata.metrics.column.{name}")
            values = [v for v in rows.column(name).to_pylist() if v is not None]
            lo = entries.column(C.min_col(fid))[i].as_py() if C.min_col(fid) in entries.column_names else None
            hi = entries.column(C.max_col(fid))[i].as_py() if C.max_col(fid) in entries.column_names else None
            nulls = entries.column(C.nulls_col(fid))[i].as_py() if C.nulls_col(fid) in entries.column_names else None
            if mode == "none":
                assert lo is hi is nulls is None
            if mode == "counts":
                assert lo is hi is None and nulls == rows.num_rows - len(values)
            if mode in ("full", "truncate(16)") or (mode or "").startswith("truncate"):
                assert nulls == rows.num_rows - len(values)
                if values:
                    assert lo is not None and all(lo <= v for v in values), (name, mode, lo)
                    assert hi is None or all(v <= hi for v in values), (name, mode, hi)
            if mode == "full" and values:
                assert (lo, hi) == (min(values), max(values))
            if mode and mode.startswith("truncate(") and name != "n" and lo is not None:
                limit = int(mode[len("truncate("):-1])
                assert len(lo) <= limit and (hi is None or len(hi) <= limit)


@pytest.mark.parametrize(
    "values, n, lower, upper",
    [
        (["abcdef", "abzzzz"], 3, "abc", "ab{"),  # '{' follows 'z'
        (["a" * 20], 16, "a" * 16, "a" * 15 + "b"),
        (["ab\U0010ffff\U0010ffffx"], 3, "ab\U0010ffff", "ac"),  # U+10FFFF cannot grow: the one before does
        (["\U0010ffff" * 5], 2, "\U0010ffff" * 2, None),  # nothing can grow: no upper bound
        (["x\ud7ffyy"], 2, "x\ud7ff", "x\ue000"),  # above U+D7FF comes U+E000, not a surrogate
        (["short"], 16, "short", "short"),  # within the limit: exact
    ],
)
def test_truncated_string_bounds(values, n, lower, upper):
    arr = pa.array([min(values)], pa.string()), pa.array([max(values)], pa.string())
    lo, hi = truncate_bounds(*arr, StatsMode("truncate", n))
    assert lo.to_pylist() == [lower]
    assert hi.to_pylist() == [upper]


def test_truncated_binary_bounds():
    lo, hi = truncate_bounds(pa.array([b"\x01\x02\x03"], pa.binary()), pa.array([b"\x01\xff\xff\x07"], pa.binary()),
                             StatsMode("truncate", 3))
    assert lo.to_pylist() == [b"\x01\x02\x03"] and hi.to_pylist() == [b"\x02"]


def _wide(n: int) -> pa.Schema:
    return pa.schema([(f"c{i}", pa.string() if i % 3 == 1 else pa.int64()) for i in range(n)])


def test_wide_table_keeps_statistics_for_the_first_32_columns(tmp_path):
    schema = _wide(500)
    t = lamina.create_table(str(tmp_path / "w"), schema)
    t.append(pa.table({f.name: pa.array(["x" * 40] * 3 if f.type == pa.string() else [1, 2, 3], f.type) for f in schema}))
    entries = lamina.open_table(t.uri).scan().plan(all_columns=True).entries
    with_counts = [f.name for f in schema if C.nulls_col(t.metadata.schema.field_id(f.name)) in entries.column_names]
    with_bounds = [f.name for f in schema if C.min_col(t.metadata.schema.field_id(f.name)) in entries.column_names]
    assert with_counts == with_bounds == [f"c{i}" for i in range(32)]
    fid = t.metadata.schema.field_id("c1")
    assert entries.column(C.min_col(fid)).to_pylist() == ["x" * 16]
    assert entries.column(C.max_col(fid)).to_pylist() == ["x" * 15 + "y"]
    # A column beyond the 32 never prunes (no stats), a column within does.
    assert len(t.scan(where="c39 = 7").plan().entries) == 1
    assert len(t.scan(where="c3 = 7").plan().entries) == 0
    # The limit and a default mode are properties; a column's own mode wins over both.
    props = {"write.metadata.metrics.max-inferred-column-defaults": "2", "write.metadata.metrics.column.c40": "counts"}
    t2 = lamina.create_table(str(tmp_path / "w2"), schema, properties=props)
    t2.append(pa.table({f.name: pa.array([None] * 2, f.type) for f in schema}))
    e2 = t2.scan().plan(all_columns=True).entries
    assert sorted(c for c in e2.column_names if c.startswith(("min_", "nulls_"))) == sorted(
        [C.min_col(t2.metadata.schema.field_id(c)) for c in ("c0", "c1")]
        + [C.nulls_col(t2.metadata.schema.field_id(c)) for c in ("c0", "c1", "c40")]
    )
    assert len(t2.scan(where="c40 IS NOT NULL").plan().entries) == 0  # counts prune IS [NOT] NULL
    t3 = lamina.create_table(str(tmp_path / "w3"), _wide(40), properties={"write.metadata.metrics.default": "full"})
    t3.append(pa.table({f"c{i}": pa.array(["y" * 30] if i % 3 == 1 else [i], pa.string() if i % 3 == 1 else pa.int64())
                        for i in range(40)}))
    e3 = t3.scan().plan(all_columns=True).entries
    assert e3.column(C.max_col(t3.metadata.schema.field_id("c37"))).to_pylist() == ["y" * 30]  # full, past 32


@pytest.mark.parametrize(
    "props, words",
    [
        ({"write.metadata.metrics.default": "truncate(0)"}, "write.metadata.metrics.default"),
        ({"write.metadata.metrics.default": "some"}, "truncate(N)"),
        ({"write.metadata.metrics.max-inferred-column-defaults": "-1"}, "max-inferred-column-defaults"),
        ({"write.metadata.metrics.column.s": "trunc(4)"}, "write.metadata.metrics.column.s"),
        ({"write.metadata.metrics.column.nope": "full"}, "names no top-level column"),
        ({"write.metadata.metrics.colum.s": "full"}, "no Lamina table property"),
    ],
)
def test_bad_statistics_properties_are_refused_and_nothing_is_created(tmp_path, props, words):
    with pytest.raises(InvalidArgument, match=words.replace("(", r"\(").replace(")", r"\)")):
        lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=props)
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.json"))


def test_modes_are_case_blind_and_follow_a_rename(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"write.metadata.metrics.column.s": "TRUNCATE(2)"})
    t.update_schema().rename_column("s", "text").commit()
    t = lamina.open_table(t.uri)
    assert t.properties == {"write.metadata.metrics.column.text": "TRUNCATE(2)"}
    t.append(pa.table({"id": [1], "text": ["hello"], "b": [None], "n": [None]},
                      schema=pa.schema([("id", pa.int64()), ("text", pa.string()), ("b", pa.binary()), ("n", pa.int64())])))
    fid = t.metadata.schema.field_id("text")
    e = t.scan().plan(all_columns=True).entries
    assert (e.column(C.min_col(fid))[0].as_py(), e.column(C.max_col(fid))[0].as_py()) == ("he", "hf")


def test_add_files_statistics_follow_the_tables_modes(tmp_path):
    props = {"write.metadata.metrics.column.s": "truncate(3)", "write.metadata.metrics.column.n": "none",
             "write.metadata.metrics.column.b": "counts"}
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=props)
    path = tmp_path / "t" / "data" / "ext.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = pa.table({"id": [1, 2], "s": ["abcdef", "abzzzz"], "b": [b"x", None], "n": [4, 5]}, schema=SCHEMA)
    pq.write_table(rows, path)
    t.add_files(pa.table({
        "path": ["data/ext.parquet"], "size": [path.stat().st_size], "record_count": [2],
        "lower.s": ["abcdef"], "upper.s": ["abzzzz"], "null_count.s": [0],
        "lower.n": [4], "upper.n": [5], "null_count.n": [0], "null_count.b": [1],
    }))
    e = lamina.open_table(t.uri).scan().plan(all_columns=True).entries
    sch = t.metadata.schema
    assert e.column(C.min_col(sch.field_id("s"))).to_pylist() == ["abc"]
    assert e.column(C.max_col(sch.field_id("s"))).to_pylist() == ["ab{"]
    assert not {C.min_col(sch.field_id("n")), C.nulls_col(sch.field_id("n")), C.min_col(sch.field_id("b"))} & set(e.column_names)
    assert e.column(C.nulls_col(sch.field_id("b"))).to_pylist() == [1]
    assert _ids(t.scan(where="s = 'abzzzz'").to_arrow()) == [2]
    assert len(t.scan(where="s = 'ac'").plan().entries) == 0  # above the cut upper bound: pruned


def test_compaction_and_row_level_rewrites_keep_the_modes(tmp_path):
    props = {"write.metadata.metrics.column.s": "truncate(2)", "write.metadata.metrics.column.n": "none"}
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=props)
    for i in range(3):
        t.append(pa.table({"id": [i], "s": [f"long value {i}"], "b": [None], "n": [i]}, schema=SCHEMA))
    t.delete("id = 1", mode="copy-on-write")
    t.update("id = 2", {"n": "n + 1"}, mode="copy-on-write")
    t.merge(pa.table({"id": [0], "s": ["long value 0"], "b": [None], "n": [9]}, schema=SCHEMA), "id").when_matched_update_all().execute()
    t.maintenance.compact(target_file_size=1 << 30, min_file_size=1 << 30)
    t = lamina.open_table(t.uri)
    e = t.scan().plan(all_columns=True).entries
    sch = t.metadata.schema
    assert C.min_col(sch.field_id("n")) not in e.column_names and C.nulls_col(sch.field_id("n")) not in e.column_names
    assert set(e.column(C.min_col(sch.field_id("s"))).to_pylist()) == {"lo"}
    assert set(e.column(C.max_col(sch.field_id("s"))).to_pylist()) == {"lp"}
    assert _ids(t.scan().to_arrow()) == [0, 2]
    assert len(e) == 1  # compacted into one file


@pytest.mark.parametrize("chunks", [1, 3])
@pytest.mark.parametrize("nulls", [False, True])
def test_float_bounds_are_unknown_exactly_when_a_file_holds_nan(tmp_path, chunks, nulls):
    """A float column's bounds are its min/max unless the file holds a NaN (then unknown), the
    same whether the column arrives in one chunk (checked on its values) or several, with or
    without nulls; the oracle is numpy over the same values."""
    import numpy as np

    from lamina.spec.schema import field_id_of

    schema = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("y", pa.float32())])
    t = lamina.create_table(str(tmp_path / "t"), schema, properties={"write.metadata.metrics.default": "full"})
    rng = np.random.default_rng(7)
    expected = []
    for i in range(6):
        x = rng.normal(size=12)
        if i % 2:
            x[rng.integers(0, 12)] = np.nan
        mask = (np.arange(12) % 5 == 0) if nulls else None
        xs = pa.array(x, pa.float64(), mask=mask)
        ys = pa.array(x.astype(np.float32), pa.float32(), mask=mask)
        tbl = pa.table({"id": np.arange(12) + 12 * i, "x": xs, "y": ys})
        if chunks > 1:
            tbl = pa.concat_tables([tbl.slice(0, 4), tbl.slice(4, 4), tbl.slice(8)])
        t.append(tbl)
        live = x[~mask] if nulls else x
        expected.append(None if np.isnan(live).any() else (live.min(), live.max()))
    got = t.scan().plan(all_columns=True).entries.sort_by([("first_row_id", "ascending")])
    fx, fy = (t.schema.field("x"), t.schema.field("y"))
    for row, want in zip(got.to_pylist(), expected):
        for f, cast in ((fx, float), (fy, lambda v: float(np.float32(v)))):
            lo, hi = row.get(C.min_col(field_id_of(f))), row.get(C.max_col(field_id_of(f)))
            if want is None:
                assert lo is None and hi is None
            else:
                assert (lo, hi) == (cast(want[0]), cast(want[1]))
        assert row[C.nulls_col(field_id_of(fx))] == (3 if nulls else 0)
