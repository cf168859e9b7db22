"""Core format: versions, hint, features, bad input, manifest tree, time travel."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import (
    CorruptMetadata,
    InvalidArgument,
    SchemaMismatch,
    TableAlreadyExists,
    TableNotFound,
    UnsupportedFeature,
    VersionNotFound,
)
from lamina.io import FileIO
from lamina.maintenance import fsck
from lamina.spec import content as C
from lamina.spec.hint import VersionHint
from lamina.spec.layout import HINT_PATH, parse_version_file_name, version_file_name, version_path
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema
from lamina.spec.version import VersionManifest

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("category", pa.string()),
        pa.field("value", pa.float64()),
        pa.field("ts", pa.timestamp("us", "UTC")),
    ]
)
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def batch(start: int, n: int, cat_mod: int = 5) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "category": [f"c{i % cat_mod}" for i in range(start, start + n)],
            "value": [float(i) / 3 for i in range(start, start + n)],
            "ts": pa.array([T0 + timedelta(hours=i) for i in range(start, start + n)], pa.timestamp("us", "UTC")),
        },
        schema=SCHEMA,
    )


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


# -- naming and spec round-trip ------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_version_names_sort_newest_first_and_round_trip(v):
    name = version_file_name(v)
    assert len(name) == 25 and parse_version_file_name(name) == v
    if v > 0:
        assert version_file_name(v) < version_file_name(v - 1)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=6,
)


@given(
    version=st.integers(0, 2**40),
    ts=st.integers(0, 2**45),
    op=st.text(min_size=1, max_size=12),
    summary=st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    props=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4),
    root=st.none() | st.text(min_size=1, max_size=30),
    feats=st.lists(st.text(min_size=1, max_size=10), max_size=3),
)
def test_version_manifest_json_round_trip(version, ts, op, summary, props, root, feats):
    vm = VersionManifest(
        version=version,
        parent_version=version - 1 if version else None,
        table_uuid="u-1",
        timestamp_ms=ts,
        operation=op,
        summary=summary,
        schema=Schema.from_arrow(SCHEMA),
        partition_spec=PartitionSpec(),
        properties=props,
        root_manifest=root,
        reader_features=tuple(feats),
        writer_features=tuple(feats),
        commit_id="abc",
    )
    assert VersionManifest.from_json(vm.to_json(), "x") == vm


def test_schema_round_trip_keeps_field_ids():
    s = Schema.from_arrow(
        pa.schema([("a", pa.int32()), ("s", pa.struct([("x", pa.string()), ("y", pa.list_(pa.int64()))])), ("d", pa.decimal128(10, 2))])
    )
    back = Schema.from_json(json.loads(json.dumps(s.to_json())))
    assert back.arrow.equals(s.arrow, check_metadata=True)
    assert [back.field_id(n) for n in ("a", "s", "d")] == [1, 2, 6]
    assert back.highest_field_id == 6


# -- create / open / append / read ------------------------------------------------------


def test_create_append_read_and_versions(uri):
    t = lamina.create_table(uri, SCHEMA)
    assert t.version == 0 and t.scan().to_arrow().num_rows == 0
    assert t.append(batch(0, 10)) == 1
    assert t.append(batch(10, 10)) == 2
    t2 = lamina.open_table(uri)
    assert t2.version == 2 and t2.uuid == t.uuid
    assert ids(t2.scan().to_arrow()) == list(range(20))
    assert ids(t2.scan(version=1).to_arrow()) == list(range(10))
    assert t2.scan(version=0).to_arrow().num_rows == 0
    assert [h["version"] for h in t2.history()] == [2, 1, 0]
    assert t2.metadata.summary["total-records"] == 20
    assert t2.to_pandas(columns=["id"]).shape == (20, 1)
    assert sum(b.num_rows for b in t2.scan(where="id < 15").to_batches()) == 15


def test_pandas_and_reader_inputs(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3).to_pandas())
    t.append(pa.RecordBatchReader.from_batches(SCHEMA, batch(3, 3).to_batches()))
    assert ids(t.scan().to_arrow()) == list(range(6))


def test_overwrite_all_and_where(uri):
    t = lamina.create_table(uri, SCHEMA, properties={"write.max-rows-per-file": "10"})
    t.append(batch(0, 50))
    v = t.overwrite(batch(100, 5))
    assert ids(t.scan().to_arrow()) == list(range(100, 105))
    assert ids(t.scan(version=v - 1).to_arrow()) == list(range(50))
    t.append(batch(0, 50))
    # a predicate that cuts files in half: matching rows replaced, the rest kept
    t.overwrite(batch(20, 5), where="id >= 15 AND id < 35")
    got = ids(t.scan().to_arrow())
    assert got == sorted(list(range(100, 105)) + list(range(0, 15)) + list(range(20, 25)) + list(range(35, 50)))
    with pytest.raises(InvalidArgument, match="do not match"):
        t.overwrite(batch(0, 5), where="id >= 100")


def test_add_files_registers_existing_files(uri, tmp_path):
    t = lamina.create_table(uri, SCHEMA)
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(uri, "data"), exist_ok=True)
    pq.write_table(batch(0, 7), os.path.join(uri, "data", "ext.parquet"))
    files = pa.table({"path": ["data/ext.parquet"], "size": [os.path.getsize(os.path.join(uri, "data", "ext.parquet"))], "record_count": [7],
                      "lower.id": [0], "upper.id": [6], "null_count.id": [0]})
    t.add_files(files)
    assert ids(t.scan().to_arrow()) == list(range(7))
    assert len(t.scan(where="id > 100").plan()) == 0


# -- bad input ------------------------------------------------------------------------


def test_table_exists_and_not_a_table(uri, tmp_path):
    lamina.create_table(uri, SCHEMA)
    with pytest.raises(TableAlreadyExists, match="already exists"):
        lamina.create_table(uri, SCHEMA)
    with pytest.raises(TableNotFound, match="no Lamina table"):
        lamina.open_table(str(tmp_path / "nothing"))


def test_schema_mismatch_commits_nothing(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3))
    before = sorted(os.listdir(os.path.join(uri, "data")))
    with pytest.raises(SchemaMismatch, match="not in the table schema"):
        t.append(batch(0, 3).append_column("extra", pa.array([1, 2, 3])))
    with pytest.raises(SchemaMismatch, match="cannot be converted"):
        t.append(pa.table({"id": pa.array(["x"]), "category": ["a"], "value": [1.0], "ts": batch(0, 1).column("ts")}))
    with pytest.raises(SchemaMismatch, match="required"):
        t.append(pa.table({"id": pa.array([None], pa.int64()), "category": ["a"], "value": [1.0], "ts": batch(0, 1).column("ts")}))
    with pytest.raises(SchemaMismatch):
        t.append({"id": [1]})
    assert lamina.open_table(uri).version == 1
    assert sorted(os.listdir(os.path.join(uri, "data"))) == before


def test_unknown_reader_and_writer_features(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3))
    io = FileIO(uri)
    vm = VersionManifest.from_json(io.get(version_path(1)), "v1")
    io.put_if_absent(version_path(2), vm.next(version=2, parent_version=1, writer_features=vm.writer_features + ("time-machine",), commit_id="w").to_json())
    t2 = lamina.open_table(uri)  # readers are fine with an unknown writer feature
    assert t2.version == 2
    with pytest.raises(UnsupportedFeature, match="time-machine"):
        t2.append(batch(3, 1))
    io.put_if_absent(version_path(3), vm.next(version=3, parent_version=2, reader_features=("quantum-dv",), commit_id="r").to_json())
    with pytest.raises(UnsupportedFeature, match="quantum-dv"):
        lamina.open_table(uri)
    assert lamina.open_table(uri, version=1).scan().to_arrow().num_rows == 3


def test_corrupt_and_truncated_metadata_is_a_clear_error(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3))
    t.append(batch(3, 3))
    io = FileIO(uri)
    good = io.get(version_path(2))
    with open(io.local_path(version_path(2)), "wb") as f:
        f.write(good[: len(good) // 2])
    with pytest.raises(CorruptMetadata, match="corrupt or truncated"):
        lamina.open_table(uri)
    assert lamina.open_table(uri, version=1).scan().to_arrow().num_rows == 3
    with open(io.local_path(version_path(2)), "wb") as f:
        f.write(good)
    root = lamina.open_table(uri).metadata.root_manifest
    from lamina.manifest.files import clear_cache

    clear_cache()
    with open(io.local_path(root), "wb") as f:
        f.write(b"PAR1garbage")
    with pytest.raises(CorruptMetadata, match="manifest"):
        lamina.open_table(uri).scan().to_arrow()


def test_time_travel_errors(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 1))
    with pytest.raises(VersionNotFound, match="version 7"):
        t.scan(version=7)
    with pytest.raises(VersionNotFound):
        t.scan(timestamp=0)
    with pytest.raises(InvalidArgument):
        t.scan(version=1, timestamp=1)


# -- hint -----------------------------------------------------------------------------


def _hint(uri) -> VersionHint:
    flush_hints()
    return VersionHint.parse(FileIO(uri).get(HINT_PATH))


def test_hint_written_after_each_commit(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 1))
    h = _hint(uri)
    assert (h.version, h.table_uuid, h.manifest_path) == (1, t.uuid, version_path(1))
    assert "manifest-tree-v1" in h.reader_features and h.format_version == 1


@pytest.mark.parametrize("damage", ["missing", "stale", "corrupt", "other-table", "ahead"])
def test_open_latest_survives_a_bad_hint(uri, tmp_path, damage):
    t = lamina.create_table(uri, SCHEMA)
    for i in range(5):
        t.append(batch(i * 2, 2))
    flush_hints()  # hints are written in the background; plant the damage after them
    io = FileIO(uri)
    path = io.local_path(HINT_PATH)
    if damage == "missing":
        os.remove(path)
    elif damage == "stale":
        io.put(HINT_PATH, VersionHint(1, version_path(1), t.uuid, None, 0, (), (), 1).to_json())
    elif damage == "corrupt":
        io.put(HINT_PATH, b'{"version": 3, "manif')
    elif damage == "other-table":
        other = lamina.create_table(str(tmp_path / "other"), SCHEMA)
        io.put(HINT_PATH, VersionHint(0, version_path(0), other.uuid, None, 0, (), (), 1).to_json())
    elif damage == "ahead":
        io.put(HINT_PATH, VersionHint(99, version_path(99), t.uuid, None, 0, (), (), 1).to_json())
    t2 = lamina.open_table(uri)
    assert t2.version == 5 and ids(t2.scan().to_arrow()) == list(range(10))


def test_no_list_reader_uses_hint_and_probes(uri):
    t = lamina.create_table(uri, SCHEMA)
    for i in range(3):
        t.append(batch(i, 1))
    flush_hints()
    FileIO(uri).put(HINT_PATH, VersionHint(1, version_path(1), t.uuid, None, 0, (), (), 1).to_json())
    t2 = lamina.open_table(uri, allow_list=False)
    assert t2.version == 3


def test_uuid_check_refuses_another_table(uri, tmp_path):
    t = lamina.create_table(uri, SCHEMA)
    with pytest.raises((CorruptMetadata, TableNotFound)):
        lamina.open_table(uri, table_uuid="not-" + t.uuid)


# -- manifest tree ----------------------------------------------------------------------


def test_tree_inlines_small_writes_then_flushes_and_carries_leaves(uri):
    t = lamina.create_table(uri, SCHEMA, properties={"manifest.inline-max-files": "4", "manifest.leaf-target-files": "100", "manifest.merge-min-leaves": "3"})
    from lamina.manifest.files import read_manifest

    def root():
        return read_manifest(t.io, t.metadata.root_manifest)

    for i in range(4):
        t.append(batch(i, 1))
    r = root()
    assert pc.all(pc.equal(r.column("content"), C.DATA)).as_py() and r.num_rows == 4
    t.append(batch(4, 1))  # 5 > 4 inline: flushed to one leaf
    r = root()
    assert r.column("content").to_pylist() == [C.LEAF] and r.column("file_count").to_pylist() == [5]
    leaf = r.column("path")[0].as_py()
    t.append(batch(5, 1))
    r = root()
    assert sorted(r.column("content").to_pylist()) == [C.DATA, C.LEAF] and leaf in r.column("path").to_pylist()  # carried by reference
    assert t.metadata.summary["leaves-written"] == 0 and t.metadata.summary["leaves-carried"] == 1
    for i in range(6, 20):
        t.append(batch(i, 1))
    r = root()
    n_leaves = pc.sum(pc.equal(r.column("content"), C.LEAF)).as_py()
    assert n_leaves < 3  # small leaves were merged
    assert ids(t.scan().to_arrow()) == list(range(20))
    assert fsck(t).ok


def test_removal_rewrites_only_the_affected_leaf(uri):
    t = lamina.create_table(uri, SCHEMA, properties={"manifest.inline-max-files": "0", "manifest.leaf-target-files": "10", "write.max-rows-per-file": "1"})
    t.append(batch(0, 10))   # leaf A: ids 0..9
    t.append(batch(10, 10))  # leaf B: ids 10..19
    from lamina.manifest.files import read_manifest

    before = set(read_manifest(t.io, t.metadata.root_manifest).column("path").to_pylist())
    t.overwrite(batch(100, 1), where="id = 15 OR id = 100")
    after_root = read_manifest(t.io, t.metadata.root_manifest)
    after = set(after_root.column("path").to_pylist())
    assert len(before & after) == 1  # leaf A carried, leaf B rewritten (+ new leaf for the added file)
    assert t.metadata.summary["removed-files"] == 1
    assert ids(t.scan().to_arrow()) == [i for i in range(20) if i != 15] + [100]
    # the removal is recorded in the rewritten leaf with the version that removed it
    leaves = [read_manifest(t.io, p) for p in after - before if p]
    removed = [e for lf in leaves for e in lf.to_pylist() if e["status"] == C.REMOVED]
    assert len(removed) == 1 and removed[0]["removed_version"] == t.version


# -- time travel by timestamp ----------------------------------------------------------


def test_timestamps_monotonic_and_binary_search(uri, monkeypatch):
    import lamina.commit.committer as cm

    t = lamina.create_table(uri, SCHEMA)
    clock = [2_000_000_000.0]
    monkeypatch.setattr(cm.time, "time", lambda: clock[0])
    stamps = []
    for i in range(12):
        clock[0] += -5 if i == 6 else 1  # a clock that goes backwards once
        t.append(batch(i, 1))
        stamps.append(t.metadata.timestamp_ms)
    assert all(b > a for a, b in zip(stamps, stamps[1:]))
    loads = []
    real_load = t.log.load

    def counting(v, **kw):
        loads.append(v)
        return real_load(v, **kw)

    t2 = lamina.open_table(uri)
    t2.log.load = counting
    for i, ts in enumerate(stamps):
        loads.clear()
        assert t2.scan(timestamp=ts).version == i + 1
        assert len(loads) <= 6  # O(log n), no listing
    assert t2.scan(timestamp=stamps[3] + 0.5).version == 4


# -- pruning == full scan -----------------------------------------------------------------

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


# -- locations and inputs --------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_memory_and_file_uris(tmp_path, scheme):
    uri = f"memory://core-{os.getpid()}/{tmp_path.name}/t" if scheme == "memory" else f"file://{tmp_path}/t"
    t = lamina.create_table(uri, SCHEMA, partition_by=["category"])
    t.append(batch(0, 20))
    t.append(batch(20, 5))
    t2 = lamina.open_table(uri)
    assert t2.version == 2 and ids(t2.scan(where="category = 'c1'").to_arrow()) == [i for i in range(25) if i % 5 == 1]
    assert ids(t2.scan(version=1).to_arrow()) == list(range(20))
    assert fsck(t2).ok


@pytest.mark.parametrize("bad", ["../escape", "/etc/passwd", "a/../../b", "a\\b", "./x"])
def test_fileio_refuses_paths_outside_the_table(tmp_path, bad):
    from lamina.errors import InvalidUri

    io = FileIO(str(tmp_path / "t"))
    with pytest.raises(InvalidUri, match="relative"):
        io.put(bad, b"x")
    assert not (tmp_path / "escape").exists()


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
