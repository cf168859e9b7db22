"""Scans (lamina.table.scan): a pruned scan reads exactly the rows a filtered full scan
keeps; predicates as text or expression objects."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina

from support.sample import SCHEMA, batch, ids


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
