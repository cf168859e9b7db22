"""Scan planning through the public API, ``t.scan(where=..., columns=..., version=...).plan()``.

DuckDB is the oracle: it reads every data file on its own, so it tells which files hold
rows matching a predicate and what each file's bounds are, without Lamina's statistics.
Then:

- the plan holds every file with a matching live row (never prunes a match);
- pruning is as tight as the statistics allow: a file is planned iff its own bounds (read
  by DuckDB) and its partition (day(ts), bucket[4](id), computed here with mmh3 as in
  the Iceberg spec) admit the predicate, so it plans strictly fewer than all files;
- deletion vectors are reflected in each task's ``record_count`` and ``dv_cardinality``;
- a column projection plans the same files and reads only its columns;
- time travel (version, timestamp, tag) plans the files of that version, whose rows are
  the rows that version had.
"""

from __future__ import annotations

import struct
from collections import Counter
from datetime import datetime, timedelta

import duckdb
import mmh3
import pyarrow as pa
import pytest

import lamina
from lamina.errors import SchemaMismatch

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("ts", pa.timestamp("us")), pa.field("cat", pa.string())])
T0 = datetime(2026, 1, 1)
N = 240  # ids 0..239, one an hour: ten days
BUCKETS = 4
INT_MAX = 2**31 - 1


def rows(ids, hours=None) -> pa.Table:
    """Row ``i`` at hour ``i`` after T0 (or at ``hours``)."""
    ids = list(ids)
    hours = ids if hours is None else list(hours)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "ts": [T0 + timedelta(hours=h) for h in hours], "cat": [f"c{i % 3}" for i in ids]},
        schema=SCHEMA,
    )


def bucket(v: int) -> int:
    """Iceberg's bucket[N] of a long: murmur3_x86_32 of its 8 little-endian bytes."""
    return (mmh3.hash(struct.pack("<q", v)) & INT_MAX) % BUCKETS


def duck() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    return con


def file_facts(t: lamina.Table, paths: list[str], bucketed: bool = True) -> dict[str, dict]:
    """Per data file, read by DuckDB: rows, bounds of id and ts, the bucket of its ids."""
    if not paths:
        return {}
    local = {t.io.local_path(p): p for p in paths}
    got = duck().execute(
        "SELECT filename, count(*), min(id), max(id), min(ts), max(ts), min(cat), max(cat), list(id) "
        "FROM read_parquet(?, filename = true) GROUP BY filename",
        [list(local)],
    ).fetchall()
    out = {}
    for name, n, lo, hi, ts_lo, ts_hi, cat_lo, cat_hi, ids in got:
        buckets = {bucket(i) for i in ids}
        assert len(buckets) == 1 or not bucketed, "a file of a bucket-partitioned table holds one bucket"
        out[local[name]] = {"rows": n, "id": (lo, hi), "ts": (ts_lo, ts_hi), "cat": (cat_lo, cat_hi),
                            "bucket": min(buckets), "ids": set(ids)}
    return out


def matching_files(t: lamina.Table, paths: list[str], sql: str, deleted: set[int] = frozenset()) -> set[str]:
    """The files holding a live row that matches ``sql`` (DuckDB's SQL)."""
    if not paths:
        return set()
    local = {t.io.local_path(p): p for p in paths}
    where = f"({sql})" + (f" AND id NOT IN ({', '.join(map(str, sorted(deleted)))})" if deleted else "")
    got = duck().execute(
        f"SELECT DISTINCT filename FROM read_parquet(?, filename = true) WHERE {where}", [list(local)]
    ).fetchall()
    return {local[name] for (name,) in got}


def overlaps(bounds: tuple, lo, hi) -> bool:
    return bounds[0] <= hi and bounds[1] >= lo


D3, D7 = T0 + timedelta(days=3), T0 + timedelta(days=7)
LOW, HIGH = -(2**62), 2**62
# (Lamina's predicate, DuckDB's, whether a file with these facts may hold a match: by its
# bounds and its partition, the most a planner that reads no data file can know)
PREDICATES = [
    ("id >= 200", "id >= 200", lambda f: f["id"][1] >= 200),
    ("id BETWEEN 30 AND 40", "id BETWEEN 30 AND 40", lambda f: overlaps(f["id"], 30, 40)),
    ("id = 17", "id = 17", lambda f: overlaps(f["id"], 17, 17) and f["bucket"] == bucket(17)),
    ("id < 0", "id < 0", lambda f: False),
    ("NOT (id < 230)", "NOT (id < 230)", lambda f: f["id"][1] >= 230),
    ("ts >= TIMESTAMP '2026-01-08 00:00:00'", "ts >= TIMESTAMP '2026-01-08 00:00:00'", lambda f: f["ts"][1] >= D7),
    ("ts < TIMESTAMP '2026-01-04 00:00:00' AND id > 60", "ts < TIMESTAMP '2026-01-04 00:00:00' AND id > 60",
     lambda f: f["ts"][0] < D3 and f["id"][1] > 60),
    ("cat = 'c1' AND id < 20", "cat = 'c1' AND id < 20", lambda f: overlaps(f["cat"], "c1", "c1") and f["id"][0] < 20),
    ("cat = 'c1'", "cat = 'c1'", lambda f: overlaps(f["cat"], "c1", "c1")),
]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """Partitioned by day(ts) and bucket[4](id), four appends, small manifests (leaves)."""
    t = lamina.create_table(
        str(tmp_path_factory.mktemp("plan") / "t"), SCHEMA, partition_by=["day(ts)", f"bucket({BUCKETS}, id)"],
        properties={"manifest.inline-max-files": "4", "manifest.leaf-target-files": "8", "write.max-rows-per-file": "5"},
    )
    for start in range(0, N, 60):
        t.append(rows(range(start, start + 60)))
    return t


@pytest.mark.parametrize("lamina_sql,duck_sql,admits", PREDICATES, ids=[p[0] for p in PREDICATES])
def test_the_plan_holds_every_matching_file_and_only_files_that_may_match(table, lamina_sql, duck_sql, admits):
    everything = table.scan().plan().paths
    facts = file_facts(table, everything)
    assert set(facts) == set(everything) and sum(f["rows"] for f in facts.values()) == N
    plan = table.scan(where=lamina_sql).plan()
    planned = set(plan.paths)
    assert len(planned) == len(plan)  # each file once
    assert matching_files(table, everything, duck_sql) <= planned, "a file holding a match was pruned"
    assert planned == {p for p, f in facts.items() if admits(f)}
    if lamina_sql != "cat = 'c1'":  # cat is neither a partition source nor well-clustered
        assert len(planned) < len(everything), "no file was pruned"
    # the rows read from the plan are DuckDB's answer
    got = table.scan(where=lamina_sql).to_arrow()
    want = duck().execute(
        f"SELECT id FROM read_parquet(?) WHERE {duck_sql}", [[table.io.local_path(p) for p in everything]]
    ).fetchall()
    assert sorted(got.column("id").to_pylist()) == sorted(i for (i,) in want)


def test_partition_pruning_alone_skips_other_days_and_buckets(table):
    """Partition values, not only bounds: a day's files are exactly that day's partition."""
    facts = file_facts(table, table.scan().plan().paths)
    day = table.scan(where="ts >= TIMESTAMP '2026-01-05 00:00:00' AND ts < TIMESTAMP '2026-01-06 00:00:00'").plan()
    want = {p for p, f in facts.items() if f["ts"][0] >= T0 + timedelta(days=4) and f["ts"][1] < T0 + timedelta(days=5)}
    assert set(day.paths) == want and 0 < len(want) < len(facts)
    for task in day:
        assert task.partition_path.startswith("ts_day=2026-01-05/")
    b = bucket(101)
    one = table.scan(where="id IN (101, 102, 103, 104, 105, 106, 107, 108)").plan()
    assert {facts[p]["bucket"] for p in one.paths} <= {bucket(i) for i in range(101, 109)}
    assert any(facts[p]["bucket"] == b and 101 in facts[p]["ids"] for p in one.paths)


def test_deletion_vectors_are_in_each_tasks_record_count(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    t.append(rows(range(0, 72)))  # three days: three files
    deleted = {1, 2, 30, 31, 32} | set(range(48, 72))  # a few rows of two files, all of the third
    t.delete(f"id IN ({', '.join(map(str, sorted(deleted)))})")
    plan = t.scan().plan()
    facts = file_facts(t, plan.paths, bucketed=False)
    assert len(plan) == 2  # the file whose every row is deleted left the live set
    for task in plan:
        f = facts[task.path]
        gone = len(f["ids"] & deleted)
        assert task.record_count == f["rows"] - gone
        assert task.dv_cardinality == gone and task.dv_path is not None
    assert plan.record_count == 72 - len(deleted) == t.scan().count()
    assert sorted(t.to_arrow().column("id").to_pylist()) == sorted(set(range(72)) - deleted)
    # a predicate plans by bounds (a DV does not narrow them) and reads only live rows
    sub = t.scan(where="id < 10")
    assert matching_files(t, plan.paths, "id < 10", deleted) <= set(sub.plan().paths)
    assert sorted(sub.to_arrow().column("id").to_pylist()) == [0] + list(range(3, 10))


def test_a_column_projection_plans_the_same_files_and_reads_only_its_columns(table):
    everything = table.scan().plan().paths
    where = "id BETWEEN 100 AND 130"
    assert table.scan(where=where, columns=["cat"]).plan().paths == table.scan(where=where).plan().paths
    got = table.scan(where=where, columns=["cat"]).to_arrow()
    assert got.column_names == ["cat"]
    want = duck().execute(
        f"SELECT cat FROM read_parquet(?) WHERE {where}", [[table.io.local_path(p) for p in everything]]
    ).fetchall()
    assert Counter(got.column("cat").to_pylist()) == Counter(c for (c,) in want)
    with pytest.raises(SchemaMismatch, match="nope"):
        table.scan(columns=["id", "nope"])


def test_time_travel_plans_the_files_of_that_version(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"],
                            properties={"manifest.inline-max-files": "2"})
    model: dict[int, list[int]] = {0: []}
    for start in range(0, 96, 24):  # one day per append
        t.append(rows(range(start, start + 24)))
        model[t.version] = list(range(start + 24))
    t.tags.create("four-days")
    t.overwrite(rows(range(1000, 1003), hours=[1, 2, 30]), where="ts < TIMESTAMP '2026-01-03 00:00:00'")
    model[t.version] = list(range(48, 96)) + [1000, 1001, 1002]
    stamps = {h["version"]: h["timestamp_ms"] for h in t.history()}
    for v, ids in model.items():
        plan = t.scan(version=v).plan()
        got = duck().execute("SELECT id FROM read_parquet(?)", [[t.io.local_path(p) for p in plan.paths]]).fetchall() if len(plan) else []
        assert sorted(i for (i,) in got) == sorted(ids), f"version {v}"
        assert plan.record_count == len(ids)
        assert sorted(t.scan(timestamp=stamps[v]).plan().paths) == sorted(plan.paths)
        assert sorted(t.plan(version=v).paths) == sorted(plan.paths)
    assert sorted(t.scan(version="four-days").plan().paths) == sorted(t.scan(version=4).plan().paths)
    # a predicate at an old version prunes that version's files
    old = t.scan(where="ts >= TIMESTAMP '2026-01-02 00:00:00' AND ts < TIMESTAMP '2026-01-03 00:00:00'", version=2).plan()
    assert len(old) >= 1 and set(old.paths) <= set(t.scan(version=2).plan().paths)
    assert set(old.paths).isdisjoint(t.scan().plan().paths)  # the overwrite removed that day's files
    assert sorted(t.scan(where="id >= 24", version=2).to_arrow().column("id").to_pylist()) == list(range(24, 48))


def test_bounds_alone_prune_an_unpartitioned_table_exactly(tmp_path):
    """Appends of disjoint id ranges: an id range plans exactly the files it overlaps, which
    (ids being dense) are exactly the files DuckDB finds a match in."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"manifest.inline-max-files": "3", "manifest.leaf-target-files": "4"})
    for start in range(0, 200, 10):
        t.append(rows(range(start, start + 10)))
    everything = t.scan().plan().paths
    assert len(everything) == 20
    for lo, hi in ((0, 0), (5, 25), (95, 104), (199, 500), (-10, -1)):
        sql = f"id BETWEEN {lo} AND {hi}"
        planned = set(t.scan(where=sql).plan().paths)
        assert planned == matching_files(t, everything, sql), sql
        assert len(planned) == len({i // 10 for i in range(max(lo, 0), min(hi, 199) + 1)})
