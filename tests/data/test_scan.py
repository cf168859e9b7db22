"""Scans (Scan, ScanPlan): a pruned scan reads exactly the rows a filtered full scan keeps;
predicates as text or expression objects; NaN rows Parquet statistics leave out are still read;
predicates of thousands of terms scan without crashing; a read of no column keeps its rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina

from support.sample import SCHEMA, batch, ids

NAN, INF = float("nan"), float("inf")


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


preds = st.sampled_from(
    [
        "id >= {a}",
        "id < {a}",
        "id = {a}",
        "id != {a}",
        "id BETWEEN {a} AND {b}",
        "id IN ({a}, {b})",
        "category = 'c{k}'",
        "category IN ('c{k}', 'c1')",
        "value > {a}",
        "value IS NULL",
        "category IS NOT NULL AND id < {b}",
        "NOT (id < {a}) OR category = 'c{k}'",
        "ts >= TIMESTAMP '2026-01-02 00:00:00'",
        "ts < TIMESTAMP '2026-01-01 05:00:00' OR id > {b}",
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 20), min_size=1, max_size=6),
    tmpl=preds,
    a=st.integers(-5, 80),
    b=st.integers(-5, 80),
    k=st.integers(0, 5),
    part=st.sampled_from([None, ["category"], ["day(ts)"], ["bucket(4, id)"], ["truncate(10, id)"]]),
    nulls=st.booleans(),
)
def test_pruned_scan_equals_filtered_full_scan(tmp_path_factory, sizes, tmpl, a, b, k, part, nulls):
    uri = str(tmp_path_factory.mktemp("prune") / "t")
    t = lamina.create_table(uri, SCHEMA, partition_by=part, properties={"manifest.inline-max-files": "2", "manifest.leaf-target-files": "3"})
    start = 0
    for n in sizes:
        data = batch(start, n)
        if nulls:
            data = data.set_column(2, "value", pa.array([None if i % 3 == 0 else float(i) for i in range(start, start + n)], pa.float64()))
        t.append(data)
        start += n
    where = tmpl.format(a=min(a, b), b=max(a, b), k=k)
    full = t.scan().to_arrow()
    from lamina.expr import bind, parse_predicate, to_arrow_filter

    expected = ids(full.filter(to_arrow_filter(bind(parse_predicate(where), t.metadata.schema))))
    scan = t.scan(where=where)
    assert ids(scan.to_arrow()) == expected
    # every file holding a matching row survived planning
    import pyarrow.parquet as pq

    planned = set(scan.plan().paths)
    for path in t.scan().plan().paths:
        if path not in planned:
            rows = pq.read_table(t.io.local_path(path))
            assert rows.filter(to_arrow_filter(bind(parse_predicate(where), t.metadata.schema))).num_rows == 0


def test_where_accepts_expression_objects(uri):
    from lamina.expr import col

    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 30))
    got = t.scan(where=(col("id") >= 10) & (col("category").isin(["c1", "c2"]))).to_arrow()
    assert ids(got) == [i for i in range(10, 30) if i % 5 in (1, 2)]
    from lamina.errors import InvalidPredicate

    with pytest.raises(InvalidPredicate):
        t.scan(where="nope > 1")
    with pytest.raises(InvalidPredicate):
        t.scan(where="id > 1; DROP TABLE x")


def test_scan_keeps_nan_rows_that_parquet_statistics_leave_out(tmp_path):
    """The issue's predicates on bucket/truncate-partitioned tables: Parquet's row-group
    min/max leave NaN out, and Arrow's scanner used to trust them and skip NaN rows."""
    import lamina

    f32 = np.float32
    data = pa.table({
        "id": pa.array(range(8), pa.int64()),
        "f": pa.array([1e308, NAN, 1e308, 0.0, NAN, 3.0, -0.0, 1e308]),
        "g": pa.array([f32(0), f32(NAN), f32(16777216), f32(1.5), f32(NAN), f32(0), f32(INF), f32(2)], pa.float32()),
    })
    for spec in (["bucket(2, id)"], ["truncate(4, id)"]):
        t = lamina.create_table(str(tmp_path / spec[0][:3]), data.schema, partition_by=spec)
        t.append(data.slice(0, 3))
        t.append(data.slice(3))
        rows = data.to_pylist()
        want = {
            "f != 1e308": [r["id"] for r in rows if not r["f"] == 1e308],
            "g NOT IN (0, 16777216, 1e39, 1.5)": [1, 4, 6, 7],
            "NOT (f IN (-0.0, 3, 1e308)) OR id IN (0)": [0, 1, 4],
            "f > 1e300": [0, 1, 2, 4, 7],
            "f = 'NaN'": [1, 4],
        }
        for sql, want_ids in want.items():  # (not `ids`: the helper of this file)
            scan = t.scan(where=sql)
            assert sorted(scan.to_arrow()["id"].to_pylist()) == want_ids, (spec, sql)
            assert sorted(pa.Table.from_batches(list(scan.to_batches()))["id"].to_pylist()) == want_ids, (spec, sql)
            assert sorted(t.scan(where=sql, columns=["id"]).to_arrow()["id"].to_pylist()) == want_ids, (spec, sql)


@pytest.mark.slow  # predicates at the size limit
def test_wide_predicates_scan_without_crashing(tmp_path):
    """10,000 OR'ed equalities used to crash the process (SIGSEGV in Arrow's filter): run in a
    child process so a crash is a failure here, not the end of the test run."""
    import os
    import subprocess
    import sys

    code = f"""
import pyarrow as pa, lamina, time
t = lamina.create_table({str(tmp_path / "t")!r}, pa.schema([("id", pa.int64())]))
for k in range(4):
    t.append(pa.table({{"id": pa.array(range(k * 25_000, (k + 1) * 25_000), pa.int64())}}))
values = range(0, 100_000, 10)
wide = " OR ".join(f"id = {{v}}" for v in values)
listed = "id IN (" + ", ".join(map(str, values)) + ")"
got = t.scan(where=wide).to_arrow()["id"].to_pylist()
assert sorted(got) == list(values), len(got)
assert t.scan(where=listed).count() == len(values)
print("ok")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(lamina_file())))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def lamina_file() -> str:
    import lamina

    return lamina.__file__


@pytest.mark.parametrize("where", [None, "category = 'c1'", "value > 10"])
@pytest.mark.parametrize("deletes", [False, True], ids=["no-dv", "dv"])
def test_a_read_of_no_column_keeps_its_rows(uri, where, deletes):
    """``scan(columns=[])`` is how a count reads (``len(df)`` after ``to_pandas``): its rows are
    the rows the scan selects, whatever path reads them (with and without deletion vectors,
    with and without a filter); a streamed read and ``count`` agree with it."""
    t = lamina.create_table(uri, SCHEMA)
    for k in range(3):
        t.append(batch(k * 40, 40))
    if deletes:
        t.delete("id IN (1, 2, 45, 46, 47, 119)")
    everything = t.scan(where=where).to_arrow()
    got = t.scan(columns=[], where=where).to_arrow()
    assert got.num_columns == 0
    assert got.num_rows == everything.num_rows == t.scan(where=where).count() > 0
    assert sum(b.num_rows for b in t.scan(columns=[], where=where).to_reader()) == everything.num_rows
    assert len(t.scan(columns=[], where=where).to_pandas()) == everything.num_rows
