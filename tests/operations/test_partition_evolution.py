"""Partition evolution: ``update_spec``, files keeping their spec,
pruning by each file's own spec, compaction into the current spec, time travel, bad input,
and a spec change racing with appends and with another spec change.

Plans are checked against a full scan filtered by DuckDB (the oracle), not against
Lamina's own idea of which files match.
"""

from __future__ import annotations

import datetime as dt
import json

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import CommitConflict, CorruptMetadata, InvalidArgument, InvalidPartitionSpec
from lamina.expr import may_match
from lamina.maintenance import fsck
from lamina.spec import content as C
from lamina.spec.partition import PartitionField, PartitionSpec
from lamina.spec.schema import Schema
from lamina.spec.version import VersionManifest

SCHEMA = pa.schema([("id", pa.int64()), ("cat", pa.string()), ("ts", pa.timestamp("us")), ("amount", pa.int32())])
T0 = dt.datetime(2024, 1, 1)


def rows(lo: int, hi: int, null_cat: bool = False) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table(
        {
            "id": ids,
            "cat": [None if null_cat else f"c{i % 3}" for i in ids],
            "ts": [T0 + dt.timedelta(hours=5 * i) for i in ids],
            "amount": [(i * 37) % 101 for i in ids],
        },
        schema=SCHEMA,
    )


@pytest.fixture(autouse=True)
def _hints():
    yield
    flush_hints()


def oracle(t: lamina.Table, where: str, version: int | None = None) -> list[int]:
    """The ids of the rows matching ``where``: DuckDB over a full scan (no pruning)."""
    everything = t.scan(version=version).to_arrow()  # noqa: F841 (read by DuckDB)
    return sorted(r[0] for r in duckdb.sql(f"SELECT id FROM everything WHERE {where}").fetchall())


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def check(t: lamina.Table, where: str, version: int | None = None) -> int:
    """Lamina's pruned read of ``where`` equals the oracle's; the number of files planned."""
    got = ids(t.scan(where=where, version=version).to_arrow())
    assert got == oracle(t, where, version), where
    return len(t.plan(where=where, version=version))


def evolved(tmp_path) -> lamina.Table:
    """Spec 0: identity(cat); spec 1: day(ts) instead; spec 2: plus bucket(4, id)."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    t.append(rows(0, 60))
    with t.update_spec() as u:
        u.remove_field("cat")
        u.add_field("ts", "day")
    t.append(rows(60, 120))
    t.update_spec().add_field("bucket(4, id)").commit()
    t.append(rows(120, 180))
    return t


def test_update_spec_keeps_every_spec_and_files_keep_theirs(tmp_path):
    t = evolved(tmp_path)
    vm = t.metadata
    assert [s.spec_id for s in vm.all_partition_specs] == [0, 1, 2]
    assert [(f.name, f.field_id, f.transform) for f in vm.partition_spec.fields] == [
        ("ts_day", 1001, "day"), ("id_bucket_4", 1002, "bucket[4]"),
    ]
    files = t.inspect.files()
    by_spec = {s: files.filter(pc.equal(files.column("spec_id"), s)) for s in (0, 1, 2)}
    assert all(p.startswith("cat=") for p in by_spec[0].column("partition").to_pylist())
    assert all(p.startswith("ts_day=") and "/" not in p for p in by_spec[1].column("partition").to_pylist())
    assert all(p.startswith("ts_day=") and "/id_bucket_4=" in p for p in by_spec[2].column("partition").to_pylist())
    assert by_spec[0].num_rows == 3 and sum(by_spec[s].num_rows for s in (0, 1, 2)) == files.num_rows
    # one version per change, metadata only, named in the history
    hist = {h["version"]: h for h in t.history()}
    assert hist[2]["operation"] == "update-spec" and hist[2]["summary"]["spec-id"] == 1
    assert hist[2]["summary"]["added-files"] == hist[2]["summary"]["removed-files"] == 0
    assert "add ts_day=day(ts)" in hist[2]["summary"]["spec-changes"]
    assert "partition-evolution" in vm.writer_features
    assert t.scan().count() == 180
    assert fsck(t).ok


def test_each_file_is_pruned_by_its_own_spec(tmp_path):
    t = evolved(tmp_path)
    total = len(t.plan())
    # cat: only spec-0 files have it: two of them go; later files are pruned by their stats only
    check(t, "cat = 'c1'")
    planned = t.plan(where="cat = 'c1'").entries.column("partition_path").to_pylist()
    assert [p for p in planned if p.startswith("cat=")] == ["cat=c1"]
    # day(ts): spec-0 files lack it (kept), later ones are pruned
    n = check(t, "ts >= '2024-02-01 00:00:00'")
    assert 3 <= n < total
    assert check(t, "ts < '2024-01-02 00:00:00'") < total
    assert check(t, "id = 130") == 1  # bucket and stats prune the spec-2 files, stats the rest
    for where in ["cat IS NULL", "cat != 'c0'", "ts >= '2024-01-10' AND cat = 'c2'", "id IN (3, 70, 150)",
                  "amount > 50 OR ts < '2024-01-05'", "NOT (cat = 'c0')", "ts IS NOT NULL"]:
        check(t, where)


def test_a_null_partition_value_keeps_its_meaning(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 10))  # spec 0: unpartitioned, cat set
    t.update_spec().add_field("cat").commit()
    t.append(rows(10, 20, null_cat=True))  # spec 1: its cat value is null
    t.append(rows(20, 30))
    assert check(t, "cat IS NULL") >= 1
    assert ids(t.scan(where="cat IS NULL").to_arrow()) == list(range(10, 20))
    # the spec-0 file (no cat field), the spec-1 file of cat=c1, and the null one (a null
    # partition value, like unknown bounds, is never pruned), not those of c0 and c2
    assert check(t, "cat = 'c1'") == 3
    assert check(t, "cat IN ('c0', 'c2')") == 4


def test_foreign_bounds_never_prune_a_file_of_a_spec_without_the_field():
    """Defence in depth: whatever bounds a writer left for a field in a file whose own spec
    lacks it, the file is not pruned by it."""
    schema = Schema.from_arrow(pa.schema([("x", pa.int64())]))
    spec0 = PartitionSpec(0, ())
    spec1 = PartitionSpec(1, (PartitionField(1, 1000, "x", "identity"),))
    manifest = pa.table({
        "content": pa.array([C.DATA, C.DATA, C.LEAF], pa.int8()),
        "spec_id": pa.array([0, 1, 0], pa.int32()),
        C.pmin_col(1000): pa.array([5, 5, 5], pa.int64()),
        C.pmax_col(1000): pa.array([5, 5, 5], pa.int64()),
        "record_count": pa.array([1, 1, 1], pa.int64()),
    })
    assert may_match("x = 7", manifest, schema, (spec0, spec1)).to_pylist() == [True, False, False]
    assert may_match("x = 7", manifest.drop(["spec_id"]), schema, (spec0, spec1)).to_pylist() == [False] * 3


def test_compaction_rewrites_old_spec_files_into_the_current_spec(tmp_path):
    t = evolved(tmp_path)
    before = ids(t.to_arrow())
    r = t.maintenance.compact(target_file_size=1 << 20)
    files = t.inspect.files()
    assert set(files.column("spec_id").to_pylist()) == {2}
    assert r.input_files > 0 and ids(t.to_arrow()) == before
    # every output lies in one partition of the current spec, as its path says
    for path, part in zip(files.column("path").to_pylist(), files.column("partition").to_pylist()):
        data = t.scan(where=None).read_file(path, ["id", "ts"], None)
        day = pc.unique(pc.cast(data.column("ts"), pa.date32())).to_pylist()
        assert len(day) == 1 and part.startswith(f"ts_day={day[0].isoformat()}/")
    # Old files are grouped by what their manifest entries tell of the current partition:
    # spec-0 files (no day, no bucket) together, spec-1 files per day. Outputs of two groups
    # may share a partition; the next compaction merges them (all now in the current spec).
    assert len(set(files.column("partition").to_pylist())) < files.num_rows
    t.maintenance.compact(target_file_size=1 << 20)
    parts = t.inspect.files().column("partition").to_pylist()
    assert len(parts) == len(set(parts)) and ids(t.to_arrow()) == before
    assert check(t, "ts < '2024-01-03 00:00:00'") < len(t.plan())
    assert t.maintenance.compact(target_file_size=1 << 20).version is None
    assert fsck(t).ok


def test_compaction_into_an_unpartitioned_spec_merges_old_partitions(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat", "day(ts)"])
    t.append(rows(0, 40))
    n_before = len(t.plan())
    with t.update_spec() as u:
        u.remove_field("cat").remove_field("ts_day")
    t.maintenance.compact(target_file_size=1 << 20)
    files = t.inspect.files()
    assert n_before > 10 and files.num_rows == 1 and files.column("partition").to_pylist() == [None]
    assert ids(t.to_arrow()) == list(range(40))


def test_a_rename_only_spec_does_not_make_compaction_rewrite(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    t.append(rows(0, 200), commit_options=None)
    t.update_spec().rename_field("ts_day", "d").commit()
    assert t.partition_spec.fields[0].field_id == 1000 and t.partition_spec.spec_id == 1
    assert t.maintenance.compact(target_file_size=1 << 20).version is None  # one big-enough file per day, same layout
    t.append(rows(200, 210))
    assert t.inspect.files().column("partition").to_pylist()[-1].startswith("d=")


def test_time_travel_reads_a_version_under_an_old_spec(tmp_path):
    t = evolved(tmp_path)
    old = lamina.open_table(t.uri, version=1)
    assert old.partition_spec.spec_id == 0 and old.metadata.partition_specs == ()
    assert check(t, "cat = 'c2'", version=1) == 1
    assert check(t, "ts < '2024-01-03'", version=3) < len(t.plan(version=3))
    assert t.scan(version=1).count() == 60 and t.scan(version=3).count() == 120


def test_field_ids_are_never_reused_for_another_field_and_come_back_for_the_same(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    t.append(rows(0, 30))
    t.update_spec().remove_field("cat").add_field("amount", "truncate[10]").commit()
    assert [(f.field_id, f.name) for f in t.partition_spec.fields] == [(1001, "amount_trunc_10")]
    t.update_spec().remove_field("amount_trunc_10").commit()
    t.update_spec().add_field("id", "bucket[8]").commit()
    assert t.partition_spec.fields[0].field_id == 1002 and t.partition_spec.spec_id == 3
    # cat again: field id 1000 back, so the spec-0 files' cat bounds prune again
    with t.update_spec() as u:
        u.remove_field("id_bucket_8").add_field("cat")
    assert t.partition_spec == PartitionSpec(0, (PartitionField(2, 1000, "cat", "identity"),))
    assert [s.spec_id for s in t.metadata.all_partition_specs] == [0, 1, 2, 3]
    t.append(rows(30, 60))
    assert check(t, "cat = 'c0'") == 2  # one spec-0 file and one new one, both cat=c0


def test_version_manifest_lists_specs_only_when_there_are_several(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    t.append(rows(0, 3))
    raw = json.loads(t.metadata.to_json())
    assert "partition_specs" not in raw and "sort_order" not in raw
    t.update_spec().add_field("ts", "month").commit()
    raw = json.loads(t.metadata.to_json())
    assert [s["spec_id"] for s in raw["partition_specs"]] == [0, 1]
    assert VersionManifest.from_json(t.metadata.to_json(), "v") == t.metadata


@pytest.mark.parametrize("corrupt", [
    lambda j: j["partition_specs"].pop(),  # the current spec is not listed
    lambda j: j["partition_specs"].__setitem__(0, dict(j["partition_specs"][1])),  # spec id twice
    lambda j: j["partition_specs"][0]["fields"][0].__setitem__("transform", "bucket[3]"),  # field id 1000 means two things
    lambda j: j.__setitem__("partition_specs", [j["partition_spec"]]),  # a list of one
    lambda j: j.__setitem__("sort_order", {"order_id": 1, "fields": [{"source_id": 1, "direction": "up", "null_order": "nulls-first"}]}),
])
def test_corrupt_spec_list_is_corrupt_metadata(tmp_path, corrupt):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    t.update_spec().add_field("ts", "month").commit()
    j = json.loads(t.metadata.to_json())
    corrupt(j)
    with pytest.raises(CorruptMetadata):
        VersionManifest.from_json(json.dumps(j).encode(), "v")


def test_compaction_refuses_files_of_an_unknown_spec(tmp_path):
    from lamina.operations.compaction import plan_groups

    spec0, spec1 = PartitionSpec(0, ()), PartitionSpec(1, (PartitionField(2, 1000, "cat", "identity"),))
    entries = pa.table({
        "size": pa.array([10, 10], pa.int64()), "dv_path": pa.array([None, None], pa.string()),
        "spec_id": pa.array([0, 7], pa.int32()), "partition_path": pa.array([None, None], pa.string()),
    })
    with pytest.raises(CorruptMetadata, match=r"\[7\]"):
        plan_groups(entries, 100, 50, spec1, (spec0, spec1))


@pytest.mark.parametrize("change, error", [
    (lambda u: u.add_field("nope", "day"), InvalidPartitionSpec),  # unknown column
    (lambda u: u.add_field("day(nope)"), InvalidPartitionSpec),
    (lambda u: u.add_field("cat", "day"), InvalidPartitionSpec),  # transform does not fit the type
    (lambda u: u.add_field("ts", "bucket[0]"), InvalidPartitionSpec),
    (lambda u: u.add_field("ts", "weekly"), InvalidPartitionSpec),
    (lambda u: u.add_field("cat"), InvalidPartitionSpec),  # identical to an existing field
    (lambda u: u.add_field("ts", "day", name="cat"), InvalidPartitionSpec),  # name taken by a field
    (lambda u: u.add_field("ts", "day", name="amount"), InvalidPartitionSpec),  # name of a column
    (lambda u: u.add_field("ts", "day").add_field("ts", "hour", name="ts_day"), InvalidPartitionSpec),
    (lambda u: u.remove_field("ts_day"), InvalidPartitionSpec),  # no such field
    (lambda u: u.rename_field("nope", "x"), InvalidPartitionSpec),
    (lambda u: u.rename_field("cat", "id"), InvalidPartitionSpec),  # clashes with a column
    (lambda u: u.rename_field("cat", ""), InvalidPartitionSpec),
    (lambda u: u, InvalidArgument),  # changes nothing
    (lambda u: u.rename_field("cat", "x").rename_field("x", "cat"), InvalidArgument),
])
def test_bad_spec_changes_are_refused_and_commit_nothing(tmp_path, change, error):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    t.append(rows(0, 5))
    with pytest.raises(error):
        with t.update_spec() as u:
            change(u)
    assert t.refresh().version == 1 and t.partition_spec.spec_id == 0


def test_a_spent_builder_is_refused(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    u = t.update_spec().add_field("cat")
    u.commit()
    with pytest.raises(InvalidArgument):
        u.add_field("ts", "day")


def test_remove_field_by_term_and_partitioning_an_unpartitioned_table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 20))
    t.update_spec().add_field("truncate(10, amount)").commit()
    assert "hidden-partitioning" in t.metadata.reader_features
    t.append(rows(20, 40))
    assert check(t, "amount < 10") == 2  # the unpartitioned file (kept) and amount_trunc_10=0
    t.update_spec().remove_field("truncate(10, amount)").commit()
    assert t.partition_spec.is_unpartitioned and t.partition_spec.spec_id == 0  # spec 0's fields: its id again


def test_spec_change_in_a_transaction_applies_to_the_writes_after_it(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    t.append(rows(0, 10))
    with t.transaction() as tx:
        tx.append(rows(10, 20))  # before the change: spec 0
        tx.update_spec().remove_field("cat").add_field("ts", "day").commit()
        tx.append(rows(20, 30))  # after: spec 1
    assert t.version == 2 and t.partition_spec.spec_id == 1
    files = t.inspect.files()
    spec_of = dict(zip(files.column("partition").to_pylist(), files.column("spec_id").to_pylist()))
    assert {s for p, s in spec_of.items() if p.startswith("cat=")} == {0}
    assert {s for p, s in spec_of.items() if p.startswith("ts_day=")} == {1}
    assert t.scan().count() == 30 and check(t, "ts < '2024-01-03'") < len(t.plan())
    # an aborted transaction changes nothing
    with pytest.raises(RuntimeError):
        with t.transaction() as tx:
            tx.update_spec().add_field("bucket(2, id)").commit()
            raise RuntimeError("abort")
    assert t.refresh().version == 2 and t.partition_spec.spec_id == 1


def test_append_written_under_the_old_spec_commits_after_the_spec_change(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    t.append(rows(0, 30))
    writer = lamina.open_table(t.uri)
    tx = writer.transaction()
    tx.append(rows(30, 60))  # files written now, under spec 0
    t.update_spec().remove_field("cat").add_field("ts", "day").commit()  # lands first
    v = tx.commit().version  # its base is stale: rebased onto the spec change
    assert v == 3 and writer.partition_spec.spec_id == 1
    files = writer.inspect.files()
    assert files.filter(pc.greater(files.column("added_version"), 2)).column("spec_id").to_pylist() == [0, 0, 0]
    for where in ["cat = 'c1'", "ts < '2024-01-04'", "id >= 45"]:
        check(writer, where)
    assert check(writer, "cat = 'c1'") == 2  # one of spec 0's three files per append


def test_two_spec_changes_planned_on_one_version_conflict(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    other = lamina.open_table(t.uri)
    first = t.update_spec().add_field("ts", "day")
    second = other.update_spec().add_field("id", "bucket[4]")
    first.commit()
    with pytest.raises(CommitConflict, match="concurrent spec change"):
        second.commit()
    assert t.refresh().version == 1 and [f.name for f in t.partition_spec.fields] == ["cat", "ts_day"]
    other.refresh().update_spec().add_field("id", "bucket[4]").commit()  # made again on the new spec: fine
    assert [f.name for f in other.partition_spec.fields] == ["cat", "ts_day", "id_bucket_4"]


# --- random specs over time --------------------------------------------------------------

_TERMS = ["cat", "day(ts)", "month(ts)", "hour(ts)", "bucket(3, id)", "truncate(20, amount)", "amount", "year(ts)"]
_PREDICATES = st.one_of(
    st.builds(lambda v: f"cat = 'c{v}'", st.integers(0, 3)),
    st.builds(lambda op, d: f"ts {op} '{(T0 + dt.timedelta(hours=d)).isoformat(sep=' ')}'",
              st.sampled_from(["<", "<=", ">", ">=", "="]), st.integers(-10, 900)),
    st.builds(lambda op, v: f"id {op} {v}", st.sampled_from(["<", ">=", "=", "!="]), st.integers(-5, 185)),
    st.builds(lambda a, b: f"id IN ({a}, {b})", st.integers(0, 180), st.integers(0, 180)),
    st.builds(lambda op, v: f"amount {op} {v}", st.sampled_from(["<", ">", "="]), st.integers(0, 100)),
    st.just("cat IS NULL"),
)


@st.composite
def _histories(draw):
    """Steps: ("append", lo, hi, null_cat) or ("spec", [terms to add], [positions of fields to remove])."""
    steps, lo = [], 0
    for _ in range(draw(st.integers(2, 6))):
        if draw(st.booleans()):
            hi = lo + draw(st.integers(1, 30))
            steps.append(("append", lo, hi, draw(st.booleans())))
            lo = hi
        else:
            steps.append(("spec", draw(st.lists(st.sampled_from(_TERMS), max_size=2, unique=True)),
                          draw(st.lists(st.integers(0, 3), max_size=2, unique=True))))
    return steps


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(initial=st.lists(st.sampled_from(_TERMS), max_size=2, unique=True), history=_histories(),
       predicates=st.lists(st.tuples(_PREDICATES, st.sampled_from(["AND", "OR"]), _PREDICATES), min_size=3, max_size=6))
def test_random_spec_evolution_plans_equal_full_scans(tmp_path_factory, initial, history, predicates):
    try:
        t = lamina.create_table(str(tmp_path_factory.mktemp("evo") / "t"), SCHEMA, partition_by=initial)
    except InvalidPartitionSpec:
        return  # e.g. two time transforms of ts whose names clash: refused up front
    versions = [0]
    for step in history:
        if step[0] == "append":
            t.append(rows(step[1], step[2], null_cat=step[3]))
        else:
            u = t.update_spec()
            fields = [f.name for f in t.partition_spec.fields]
            try:
                for i in step[2]:
                    if i < len(fields):
                        u.remove_field(fields[i])
                for term in step[1]:
                    u.add_field(term)
                u.commit()
            except (InvalidPartitionSpec, InvalidArgument):
                assert t.refresh().version == versions[-1]  # refused: nothing committed
                continue
        versions.append(t.version)
    for v in versions[-2:]:
        for a, op, b in predicates:
            for where in (a, f"{a} {op} {b}"):
                check(t, where, version=v)
    # compaction into the current spec keeps every row and the plans exact
    before = ids(t.to_arrow())
    t.maintenance.compact(target_file_size=1 << 20)
    assert ids(t.to_arrow()) == before
    assert set(t.inspect.files().column("spec_id").to_pylist()) <= {t.partition_spec.spec_id}
    for a, op, b in predicates:
        check(t, f"{a} {op} {b}")


# --- racing processes ----------------------------------------------------------------------


@pytest.mark.slow  # starts processes
def test_spec_changes_race_with_appending_processes(tmp_path):
    """Two processes append while a third changes the spec three times: every append
    commits (files written under a spec that changed meanwhile keep it), no row is lost
    or doubled, and every plan of every version equals a full scan filtered by DuckDB."""
    from support import workers

    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema(), partition_by=["bucket(4, k)"])
    steps = [[["add_field", "writer"]], [["remove_field", "k_bucket_4"]], [["add_field", "truncate(5, k)"]]]
    specs = [dict(mode="race_append", uri=uri, writer=w, rows=12, n=8) for w in (1, 2)]
    specs.append(dict(mode="race_spec", uri=uri, steps=steps))
    *appenders, changer = workers.spawn_workers(specs, str(tmp_path))
    assert all(isinstance(v, int) for v in changer["versions"])
    t.refresh()
    assert t.version == 16 + 3 and [s.spec_id for s in t.metadata.all_partition_specs] == [0, 1, 2, 3]
    data = t.to_arrow()
    got = sorted(zip(data.column("writer").to_pylist(), data.column("seq").to_pylist(), data.column("i").to_pylist()))
    assert got == sorted((w, s, i) for w in (1, 2) for s in range(8) for i in range(12))
    files = t.inspect.files()
    assert set(files.column("spec_id").to_pylist()) <= {0, 1, 2, 3}
    spec_at = {v: t.log.load(v).partition_spec.spec_id for v in range(t.version + 1)}
    for v, s in zip(files.column("added_version").to_pylist(), files.column("spec_id").to_pylist()):
        assert s <= spec_at[v]  # written under the spec of its base: that one or an earlier one
    for where in ["k = 3", "k < 4", "writer = 2", "writer = 1 AND k >= 10", "k IN (0, 11) OR seq = 7"]:
        for v in (t.version, changer["versions"][1], changer["versions"][2] - 1):
            check_workers(t, where, v)
    t.maintenance.compact(target_file_size=1 << 20)
    assert set(t.inspect.files().column("spec_id").to_pylist()) == {3} and t.scan().count() == 192
    check_workers(t, "k < 4 AND writer = 1", t.version)


def check_workers(t: lamina.Table, where: str, version: int) -> None:
    everything = t.scan(version=version).to_arrow()  # noqa: F841 (read by DuckDB)
    want = sorted(duckdb.sql(f"SELECT writer, seq, i FROM everything WHERE {where}").fetchall())
    got = t.scan(where=where, version=version).to_arrow()
    assert sorted(zip(*(got.column(c).to_pylist() for c in ("writer", "seq", "i")))) == want, (where, version)


@pytest.mark.slow  # starts processes
def test_two_spec_changing_processes_one_wins_one_conflicts(tmp_path):
    from support import workers

    uri = str(tmp_path / "t")
    lamina.create_table(uri, workers.schema(), partition_by=["writer"])
    specs = [dict(mode="race_spec", uri=uri, plan_first=True, steps=[[["add_field", f"bucket({n}, k)"]]]) for n in (2, 3)]
    results = [r["versions"][0] for r in workers.spawn_workers(specs, str(tmp_path))]
    won = [r for r in results if isinstance(r, int)]
    lost = [r for r in results if isinstance(r, str)]
    assert won == [1] and len(lost) == 1 and "concurrent spec change" in lost[0]
    t = lamina.open_table(uri)
    assert t.version == 1 and len(t.partition_spec.fields) == 2


def test_cli_info_shows_the_spec_id_and_sort_order(tmp_path):
    from typer.testing import CliRunner

    from lamina.cli.main import app

    t = evolved(tmp_path)
    t.update_sort_order().desc("ts").commit()
    r = CliRunner().invoke(app, ["info", t.uri, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert (doc["partition_spec_id"], doc["partition_specs"]) == (2, 3)
    assert doc["sort_order"] == "ts DESC NULLS LAST"
    assert doc["partition_by"] == ["day(ts) as ts_day", "bucket[4](id) as id_bucket_4"]


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_row_level_changes_of_old_spec_files(tmp_path, mode):
    """A deletion vector keeps the file (and its spec); a copy-on-write rewrite is a new
    file, laid out by the current spec. Plans stay exact either way."""
    t = evolved(tmp_path)
    t.delete("id IN (5, 65, 125)", mode=mode)
    t.update(where="id = 7", set={"amount": 1000}, mode=mode)
    files = t.inspect.files()
    old = files.filter(pc.is_valid(files.column("dv_path"))) if mode == "merge-on-read" else None
    if old is not None:
        assert 0 in old.column("spec_id").to_pylist()
    else:
        newest = files.filter(pc.equal(files.column("added_version"), t.version))
        assert set(newest.column("spec_id").to_pylist()) == {2}
    assert t.scan().count() == 177
    for where in ["cat = 'c2'", "id < 10", "amount = 1000", "ts < '2024-01-02'", "id IN (5, 6, 65)"]:
        check(t, where)
