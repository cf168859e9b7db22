"""Row-level changes from Spark: lamina.spark.merge / lamina.spark.delete; a small
source merged by whole-row clauses is merged on the driver by the Arrow merge, the rest by
the Spark job (both are run: ``driver_rows``).

Every Spark result is compared row for row with the Arrow path (``Table.merge`` /
``Table.delete``) run on a copy of the same table.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
import shutil

import pyarrow as pa
import pytest

import lamina
import lamina.spark.delete_update as spark_delete_update
import lamina.spark.merge_into as smerge
import lamina.spark.rowlevel as spark_rowlevel
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.spark import delete as spark_delete
from lamina.spark import merge as spark_merge
from lamina.spark import read as spark_read
from lamina.spark import update as spark_update

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([
    pa.field("id", pa.int64()), pa.field("cat", pa.string()), pa.field("amt", pa.float64()), pa.field("day", pa.date32()),
])
D0 = dt.date(2026, 1, 1)


def rows(ids, cat="c", amt=None, day=None) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "cat": [cat] * len(ids) if isinstance(cat, str) else cat,
        "amt": [float(i) for i in ids] if amt is None else amt,
        "day": [D0 + dt.timedelta(days=(i or 0) % 3) for i in ids] if day is None else day,
    }, schema=SCHEMA)


def make_pair(tmp_path, partition_by=None, properties=None):
    """Two identical tables (4 files of 50 rows, ids 0..199); the second is for the Arrow merge."""
    t = lamina.create_table(str(tmp_path / "spark"), SCHEMA, partition_by=partition_by, properties=properties)
    for k in range(4):
        t.append(rows(range(50 * k, 50 * k + 50)))
    t.delete("id = 7")  # an existing deletion vector the merge must respect and merge into
    shutil.copytree(t.uri, str(tmp_path / "arrow"), ignore=shutil.ignore_patterns("*#*"))  # hint temp files
    return t.uri, str(tmp_path / "arrow")


def sorted_rows(uri: str) -> list[dict]:
    t = lamina.open_table(uri).to_arrow()
    return sorted(t.to_pylist(), key=lambda r: (r["id"] is None, r["id"] or 0, r["cat"] or "", r["amt"]))


def sdf(spark, table: pa.Table):
    return spark.createDataFrame(table.to_pandas(), schema="id bigint, cat string, amt double, day date")


SOURCE = rows([1, 2, 7, 120, 121, 200, 201, None], cat=["u", "D", "u", "D", "u", "n", "n", "n"],
              amt=[-1.0, 0.0, 5.0, 3.0, 4.0, 2.0, 3.0, 9.0])

CASES = {
    "update_set": lambda b: b.when_matched_update({"amt": "target.amt + source.amt", "cat": "source.cat"}),
    "delete_with_condition": lambda b: b.when_matched_delete(condition="source.cat = 'D'"),
    "insert": lambda b: b.when_not_matched_insert({"id": "source.id", "cat": "'ins'", "amt": "source.amt * 2"}),
    "insert_all_with_condition": lambda b: b.when_not_matched_insert_all(condition="source.amt > 2"),
    "update_all": lambda b: b.when_matched_update_all(),
    "upsert_all": lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
    "upsert_first_clause_wins": lambda b: b.when_matched_delete(condition="source.cat = 'D'")
    .when_matched_update({"amt": "target.amt + source.amt"}, condition="source.amt < 0")
    .when_matched_update_all()
    .when_not_matched_insert_all(condition="source.amt > 2"),
    # Delta's whenNotMatchedBySource: target rows no source row matches (every file is read)
    "upsert_deleting_the_rest": lambda b: b.when_matched_update_all().when_not_matched_insert_all()
    .when_not_matched_by_source_delete(),
    "by_source_first_clause_wins": lambda b: b.when_matched_update({"amt": "target.amt + source.amt"})
    .when_not_matched_by_source_delete(condition="target.amt < 20")
    .when_not_matched_by_source_update({"cat": "'stale'", "amt": "amt * 2"}, condition="target.id > 150")
    .when_not_matched_by_source_update({"cat": "upper(cat)"}, condition="target.id < 100"),
}


# no condition, no expression: the driver may merge them
WHOLE_ROWS = {"update_all", "upsert_all", "upsert_deleting_the_rest"}


def commit_racing(monkeypatch, concurrent) -> list:
    """Make ``concurrent(table)`` (another writer's commit, through a handle of its own) land
    between the Spark job and the commit of a row-level change's first attempt; the list
    returned holds one item per commit attempt."""
    real = spark_rowlevel._commit
    calls = []

    def racing(session, *args, **kwargs):
        if not calls:
            concurrent(lamina.open_table(session.table.uri))
        calls.append(1)
        return real(session, *args, **kwargs)

    for module in (spark_delete_update, smerge):  # where update, delete and merge take it from
        monkeypatch.setattr(module, "_commit", racing)
    return calls


@pytest.mark.parametrize("driver_rows", [0, smerge.DEFAULT_DRIVER_ROWS], ids=["spark-join", "driver"])
@pytest.mark.parametrize("case", list(CASES))
def test_spark_merge_matches_arrow_merge(spark, tmp_path, case, driver_rows):
    """Each case by the Spark job, and by the driver's Arrow merge where its clauses take whole
    rows (``driver_rows``: the job is forced with 0; the phases say which one ran)."""
    s_uri, a_uri = make_pair(tmp_path)
    builder = CASES[case](spark_merge(s_uri, sdf(spark, SOURCE), on="id", driver_rows=driver_rows))
    got = builder.execute()
    on_driver = driver_rows > 0 and case in WHOLE_ROWS
    assert ("arrow merge" in builder.timings, "join+collect" in builder.timings) == (on_driver, not on_driver)
    want = CASES[case](lamina.open_table(a_uri).merge(SOURCE, on="id")).execute()
    assert (got.rows_updated, got.rows_deleted, got.rows_inserted, got.files_scanned, got.files_touched) == (
        want.rows_updated, want.rows_deleted, want.rows_inserted, want.files_scanned, want.files_touched)
    assert got.version == want.version == 6
    assert sorted_rows(s_uri) == sorted_rows(a_uri)
    assert lamina.open_table(s_uri).history(1)[0]["operation"] == "merge"


def test_reads_after_merge_agree(spark, tmp_path):
    s_uri, _ = make_pair(tmp_path)
    CASES["upsert_first_clause_wins"](spark_merge(s_uri, sdf(spark, SOURCE), on="id")).execute()
    want = sorted_rows(s_uri)
    key = lambda r: (r["id"] is None, r["id"] or 0, r["cat"] or "", r["amt"])  # noqa: E731
    fast = sorted((r.asDict() for r in spark_read(spark, s_uri).collect()), key=key)
    ds = sorted((r.asDict() for r in spark.read.format("lamina").load(s_uri).collect()), key=key)
    assert fast == ds == want
    assert 2 not in {r["id"] for r in want}  # merge delete applied
    assert [(r["cat"], r["amt"]) for r in want if r["id"] == 7] == [("u", 5.0)]  # deleted by the old DV: inserted anew
    # time travel: the version before the merge is intact
    assert lamina.open_table(s_uri).to_arrow(version=5).num_rows == 199


BOTH_PATHS = pytest.mark.parametrize("driver_rows", [0, smerge.DEFAULT_DRIVER_ROWS], ids=["spark-join", "driver"])


@BOTH_PATHS
def test_narrow_keys_prune_files(spark, tmp_path, driver_rows):
    s_uri, a_uri = make_pair(tmp_path)
    src = rows([120, 121], cat="x")
    got = spark_merge(s_uri, sdf(spark, src), on="id", driver_rows=driver_rows).when_matched_update_all().execute()
    want = lamina.open_table(a_uri).merge(src, on="id").when_matched_update_all().execute()
    assert got.files_scanned == want.files_scanned == 1 < 4
    assert (got.rows_updated, got.files_touched) == (2, 1)
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


@BOTH_PATHS
def test_duplicate_source_keys_fail_and_change_nothing(spark, tmp_path, driver_rows):
    s_uri, _ = make_pair(tmp_path)
    before = (lamina.open_table(s_uri).version, sorted(os.listdir(os.path.join(s_uri, "data"))))
    dup = rows([5, 5, 300], cat=["a", "b", "c"])
    with pytest.raises(InvalidArgument, match="more than one source row"):
        spark_merge(s_uri, sdf(spark, dup), on="id", driver_rows=driver_rows).when_matched_update_all().when_not_matched_insert_all().execute()
    assert (lamina.open_table(s_uri).version, sorted(os.listdir(os.path.join(s_uri, "data")))) == before
    with pytest.raises(SchemaMismatch):
        spark_merge(s_uri, sdf(spark, dup).select("id"), on="id").when_not_matched_insert_all()
    with pytest.raises(SchemaMismatch):
        spark_merge(s_uri, sdf(spark, dup).select("cat"), on="id")
    with pytest.raises(InvalidArgument, match="clause"):
        spark_merge(s_uri, sdf(spark, dup), on="id").execute()


def test_merge_into_partitioned_table_copy_on_write_too(spark, tmp_path):
    s_uri, a_uri = make_pair(tmp_path, partition_by=["day", "cat"])
    clauses = CASES["upsert_first_clause_wins"]
    got = clauses(spark_merge(s_uri, sdf(spark, SOURCE), on="id")).execute()
    want = clauses(lamina.open_table(a_uri).merge(SOURCE, on="id")).execute()
    assert (got.rows_updated, got.rows_deleted, got.rows_inserted) == (want.rows_updated, want.rows_deleted, want.rows_inserted)
    assert sorted_rows(s_uri) == sorted_rows(a_uri)
    t = lamina.open_table(s_uri)
    for e in t.inspect.files().to_pylist():  # every new file sits in its partition
        if "spark-" in e["path"]:
            part = dict(kv.split("=") for kv in e["partition"].split("/"))
            assert f"day_part={part['day']}/cat_part={part['cat']}/" in e["path"]
    # copy-on-write per call: no new deletion vectors, same rows
    src2 = rows([10, 60], cat="w")
    got = spark_merge(s_uri, sdf(spark, src2), on="id", mode="copy-on-write").when_matched_update_all().execute()
    lamina.open_table(a_uri).merge(src2, on="id", mode="copy-on-write").when_matched_update_all().execute()
    assert got.rows_updated == 2
    assert lamina.open_table(s_uri).history(1)[0]["summary"]["mode"] == "copy-on-write"
    assert lamina.open_table(s_uri).history(1)[0]["summary"]["dv-updated-files"] == 0
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


def test_spark_delete_matches_table_delete(spark, tmp_path):
    s_uri, a_uri = make_pair(tmp_path)
    v = spark_delete(spark, s_uri, "amt >= 40 AND amt < 60 OR cat = 'zzz'").version
    assert v == lamina.open_table(a_uri).delete("amt >= 40 AND amt < 60 OR cat = 'zzz'").version == 6
    assert sorted_rows(s_uri) == sorted_rows(a_uri)
    h = lamina.open_table(s_uri).history(1)[0]["summary"]
    assert h["files-scanned"] == 2 and h["deleted-rows"] == 20
    assert spark_delete(spark, s_uri, "id > 1000").version is None  # nothing matched: nothing committed
    assert lamina.open_table(s_uri).version == 6


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_spark_update_matches_table_update(spark, tmp_path, mode):
    """Delta's update(condition, set): the same rows, version, operation and pruning as
    ``Table.update`` with the same predicate and expressions."""
    s_uri, a_uri = make_pair(tmp_path)
    where, values = "id >= 40 AND id < 60", {"amt": "amt * 2 + 1", "cat": "'u'"}
    v = spark_update(spark, s_uri, where, set=values, mode=mode).version
    assert v == lamina.open_table(a_uri).update(where, values, mode=mode).version == 6
    assert sorted_rows(s_uri) == sorted_rows(a_uri)
    h = lamina.open_table(s_uri).history(1)[0]
    assert h["operation"] == "update" and h["summary"]["mode"] == mode
    assert h["summary"]["files-scanned"] == 2 and h["summary"]["deleted-rows"] == 20  # pruned by the predicate
    assert spark_update(spark, s_uri, "id > 1000", set={"amt": "0"}).version is None  # nothing matched: nothing committed
    assert lamina.open_table(s_uri).version == 6


def test_spark_update_takes_spark_columns_and_literals(spark, tmp_path):
    from pyspark.sql import functions as F

    s_uri, a_uri = make_pair(tmp_path)
    a = lamina.open_table(a_uri)
    v = spark_update(spark, s_uri, F.col("id") % 3 == 0, set={"amt": F.col("amt") + 0.5, "cat": F.lit("x")}).version
    want = a.update(set={"amt": lambda t: pa.compute.add(t.column("amt"), 0.5), "cat": "'x'"},
                    where="id IN (" + ", ".join(str(i) for i in range(0, 200, 3)) + ")").version
    assert v == want == 6
    assert lamina.open_table(s_uri).history(1)[0]["summary"]["files-scanned"] == 4  # a Spark condition: every file
    assert spark_update(spark, s_uri, "id = 4", set={"amt": 7, "day": D0}).version == a.update("id = 4", {"amt": 7.0, "day": D0}).version == 7
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


def test_spark_update_keeps_row_ids_and_feeds_update_pairs(spark, tmp_path):
    s_uri, a_uri = make_pair(tmp_path, properties={"row-lineage.enabled": "true"})
    v = spark_update(spark, s_uri, "id < 10 OR id > 195", set={"cat": "upper(cat)"}).version
    assert v == lamina.open_table(a_uri).update("id < 10 OR id > 195", {"cat": "upper(cat)"}).version
    feeds = []
    for uri in (s_uri, a_uri):
        feed = lamina.open_table(uri).changes(v - 1, v, columns=["id", "cat", "_row_id"]).to_arrow()
        feeds.append(sorted((r["_change_type"], r["_row_id"], r["id"], r["cat"]) for r in feed.to_pylist()))
    assert feeds[0] == feeds[1] and len(feeds[0]) == 2 * 13
    ids = lamina.open_table(s_uri).to_arrow(columns=["id", "_row_id", "_last_updated_version"])
    assert {r["id"]: r["_row_id"] for r in ids.to_pylist()} == {
        r["id"]: r["_row_id"] for r in lamina.open_table(s_uri).to_arrow(columns=["id", "_row_id"], version=5).to_pylist()}
    assert {r["_last_updated_version"] for r in ids.to_pylist() if r["id"] < 10 or r["id"] > 195} == {v}


def test_spark_update_bad_input_changes_nothing(spark, tmp_path):
    s_uri, _ = make_pair(tmp_path)
    with pytest.raises(SchemaMismatch, match="nope"):
        spark_update(spark, s_uri, "id = 1", set={"nope": "1"})
    with pytest.raises(InvalidArgument, match="needs set"):
        spark_update(spark, s_uri, "id = 1", set={})
    with pytest.raises(lamina.errors.InvalidPredicate):
        spark_update(spark, s_uri, "nope = 1", set={"amt": "1"})
    assert lamina.open_table(s_uri).version == 5


def test_a_concurrent_delete_of_updated_rows_recomputes_the_spark_update(spark, tmp_path, monkeypatch):
    s_uri, a_uri = make_pair(tmp_path)
    calls = commit_racing(monkeypatch, lambda t: t.delete("id IN (41, 42, 150)"))  # the concurrent writer
    assert spark_update(spark, s_uri, "id >= 40 AND id < 60", set={"amt": "-amt"}).version == 7
    assert len(calls) == 2
    a = lamina.open_table(a_uri)
    a.delete("id IN (41, 42, 150)")
    a.update("id >= 40 AND id < 60", {"amt": "-amt"})
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


def test_concurrent_change_to_a_touched_file_is_recomputed(spark, tmp_path, monkeypatch):
    """Another writer deletes rows of a file the merge touches between the Spark job and the
    commit: the merge recomputes on the new version, both changes survive."""
    s_uri, a_uri = make_pair(tmp_path)
    calls = commit_racing(monkeypatch, lambda t: t.delete("id IN (3, 4, 121)"))  # the concurrent writer
    clauses = CASES["upsert_first_clause_wins"]
    got = clauses(spark_merge(s_uri, sdf(spark, SOURCE), on="id", driver_rows=0)).execute()
    assert len(calls) == 2 and got.version == 7
    a = lamina.open_table(a_uri)
    a.delete("id IN (3, 4, 121)")
    want = clauses(a.merge(SOURCE, on="id")).execute()
    assert (got.rows_updated, got.rows_deleted, got.rows_inserted) == (want.rows_updated, want.rows_deleted, want.rows_inserted)
    assert sorted_rows(s_uri) == sorted_rows(a_uri)
    assert not [d for d in os.listdir(os.path.join(s_uri, "data")) if d.startswith("spark-")
                and not any(e.startswith(f"data/{d}/") for e in lamina.open_table(s_uri).inspect.files().column("path").to_pylist())]


def test_concurrent_append_outside_the_keys_does_not_recompute(spark, tmp_path, monkeypatch):
    s_uri, _ = make_pair(tmp_path)
    calls = commit_racing(monkeypatch, lambda t: t.append(rows(range(1000, 1010))))
    got = spark_merge(s_uri, sdf(spark, rows([120, 121], cat="x")), on="id", driver_rows=0).when_matched_update_all().execute()
    assert len(calls) == 1 and got.version == 7 and got.rows_updated == 2
    assert lamina.open_table(s_uri).to_arrow().num_rows == 199 + 10


def test_by_source_clauses_keep_row_ids_and_feed_changes_as_the_arrow_merge(spark, tmp_path):
    """On a table with row lineage, the Spark job's not-matched-by-source updates keep their rows'
    ids and show in the change feed as update pairs, its deletes as deletes: the same feed as
    the Arrow merge's, row for row."""
    s_uri, a_uri = make_pair(tmp_path, properties={"row-lineage.enabled": "true"})
    clauses = CASES["by_source_first_clause_wins"]
    got = clauses(spark_merge(s_uri, sdf(spark, SOURCE), on="id", driver_rows=0)).execute()
    want = clauses(lamina.open_table(a_uri).merge(SOURCE, on="id")).execute()
    assert (got.rows_updated, got.rows_deleted, got.version) == (want.rows_updated, want.rows_deleted, want.version)
    feeds = []
    for uri in (s_uri, a_uri):
        feed = lamina.open_table(uri).changes(got.version - 1, got.version, columns=["id", "cat", "amt", "_row_id"]).to_arrow()
        feeds.append(sorted((r["_change_type"], r["_row_id"], r["id"], r["cat"], r["amt"]) for r in feed.to_pylist()))
    assert feeds[0] == feeds[1]
    kinds = [k for k, *_ in feeds[0]]
    assert kinds.count("update_preimage") == kinds.count("update_postimage") == got.rows_updated > 100
    assert kinds.count("delete") == got.rows_deleted > 0


def test_a_row_appended_before_the_commit_meets_the_by_source_clauses(spark, tmp_path, monkeypatch):
    """Every file may hold rows the source does not match: a file appended between the Spark job
    and its commit makes the change stale, and the recomputed merge deletes its rows too."""
    s_uri, _ = make_pair(tmp_path)
    calls = commit_racing(monkeypatch, lambda t: t.append(rows(range(1000, 1010))))
    got = (spark_merge(s_uri, sdf(spark, rows([120, 121], cat="x")), on="id", driver_rows=0)
           .when_matched_update_all().when_not_matched_by_source_delete(condition="target.id >= 100").execute())
    assert len(calls) == 2 and got.version == 7
    assert sorted(r["id"] for r in lamina.open_table(s_uri).to_arrow().to_pylist()) == [i for i in range(100) if i != 7] + [120, 121]
    assert (got.rows_updated, got.rows_deleted) == (2, 98 + 10)


def test_by_source_clauses_refuse_source_columns(spark, tmp_path):
    s_uri, _ = make_pair(tmp_path)
    b = spark_merge(s_uri, sdf(spark, SOURCE), on="id")
    with pytest.raises(InvalidArgument, match="target's columns only"):
        b.when_not_matched_by_source_update({"amt": "source.amt"})
    assert lamina.open_table(s_uri).version == 5


def test_unbroadcast_source_gives_the_same_result(spark, tmp_path):
    """Sources above ``broadcast_rows`` use Spark's own join (shuffled): same rows."""
    s_uri, a_uri = make_pair(tmp_path)
    clauses = CASES["upsert_first_clause_wins"]
    got = clauses(spark_merge(s_uri, sdf(spark, SOURCE), on="id", broadcast_rows=0)).execute()
    want = clauses(lamina.open_table(a_uri).merge(SOURCE, on="id")).execute()
    assert (got.rows_updated, got.rows_deleted, got.rows_inserted) == (want.rows_updated, want.rows_deleted, want.rows_inserted)
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


# A NaN of Arrow's 0/0 bit pattern (0xfff8...), not NumPy's: every NaN is one key.
NAN = pa.compute.divide(pa.array([0.0]), pa.array([0.0]))[0].as_py()
FLOAT_KEY_FILES = [([0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 5.0]), ([10, 11, 12], [NAN, 6.0, None]),
                   ([20, 21, 22], [-0.0, float("inf"), -1.0]), ([30, 31], [100.0, 200.0])]


def float_key_pair(tmp_path) -> tuple[str, str]:
    t = lamina.create_table(str(tmp_path / "spark"), SCHEMA)
    for ids, amts in FLOAT_KEY_FILES:
        t.append(rows(ids, cat="t", amt=amts))
    shutil.copytree(t.uri, str(tmp_path / "arrow"), ignore=shutil.ignore_patterns("*#*"))
    return t.uri, str(tmp_path / "arrow")


def canonical_rows(uri: str) -> list[tuple]:
    """Rows comparable with NaN in them (NaN != NaN would fail any list comparison)."""
    return sorted((r["id"], r["cat"], "nan" if r["amt"] != r["amt"] else r["amt"], r["day"])
                  for r in lamina.open_table(uri).to_arrow().to_pylist())


def test_merge_on_float_keys_matches_nan_and_signed_zero_and_prunes_as_the_arrow_merge(spark, tmp_path):
    """Spark's join matches NaN with NaN and -0.0 with 0.0, NULL with nothing; the Arrow merge
    must do the same, and both must prune by the non-NaN keys' bounds plus NaN: the file of
    keys 100 and 200 is not read, the file holding NaN is."""
    s_uri, a_uri = float_key_pair(tmp_path)
    src = rows([50, 51, 52, 53, 54], cat=["u", "u", "n", "D", "n"], amt=[NAN, 0.0, None, 2.0, 7.5])

    def clauses(b):
        return (b.when_matched_delete(condition="source.cat = 'D'")
                .when_matched_update({"cat": "CASE WHEN target.amt > 1e308 THEN 'big' ELSE source.cat END"})
                .when_not_matched_insert_all(condition="source.amt > 0 OR source.amt IS NULL"))

    got = clauses(spark_merge(s_uri, spark.createDataFrame(src), on="amt")).execute()
    assert (got.rows_updated, got.rows_deleted, got.rows_inserted, got.files_scanned) == (2, 1, 2, 3)
    want = clauses(lamina.open_table(a_uri).merge(src, on="amt")).execute()
    assert (want.rows_updated, want.rows_deleted, want.rows_inserted, want.files_scanned) == (2, 1, 2, 3)
    assert canonical_rows(s_uri) == canonical_rows(a_uri)
    updated = {r[0]: r[1] for r in canonical_rows(a_uri) if r[1] != "t"}
    assert updated == {10: "big", 20: "u", 52: "n", 54: "n"}  # NaN and -0.0 matched; the NULL key inserted


def test_spark_delete_keeps_nan_candidates(spark, tmp_path):
    s_uri, a_uri = float_key_pair(tmp_path)
    for where in ("amt > 1e308", "amt != 1 AND amt < 100", "amt = 0.0"):
        assert spark_delete(spark, s_uri, where).version == lamina.open_table(a_uri).delete(where).version
        assert canonical_rows(s_uri) == canonical_rows(a_uri)
    assert [r[0] for r in canonical_rows(s_uri)] == [0, 12, 30, 31]


def test_the_driver_leaves_to_the_spark_job_what_it_would_not_merge_alike(spark, tmp_path):
    """A source above ``driver_rows``, or with a column of another type than the table's (Spark
    casts it as Spark does), goes to the Spark job. The results equal the Arrow merge of the
    same rows, cast to the table's types."""
    s_uri, a_uri = make_pair(tmp_path)
    upsert = CASES["upsert_all"]
    b = upsert(spark_merge(s_uri, sdf(spark, SOURCE), on="id", driver_rows=SOURCE.num_rows - 1))
    b.execute()
    assert "join+collect" in b.timings and "arrow merge" not in b.timings
    upsert(lamina.open_table(a_uri).merge(SOURCE, on="id")).execute()
    assert sorted_rows(s_uri) == sorted_rows(a_uri)
    narrow = sdf(spark, rows([1, 300], cat="w")).selectExpr("id", "cat", "CAST(amt AS FLOAT) AS amt", "day")
    b = upsert(spark_merge(s_uri, narrow, on="id"))
    b.execute()
    assert "join+collect" in b.timings and "arrow merge" not in b.timings
    upsert(lamina.open_table(a_uri).merge(rows([1, 300], cat="w"), on="id")).execute()
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


def _parquet_dir(path, *tables, **kw) -> str:
    import pyarrow.parquet as pq

    os.makedirs(path)
    for i, t in enumerate(tables):
        pq.write_table(t, os.path.join(path, f"part-{i}.parquet"), **kw)
    return "file://" + str(path)


def _halves(t: pa.Table) -> tuple[pa.Table, pa.Table]:
    return t.slice(0, 4), t.slice(4)


# A source DataFrame -> (its rows as the Arrow merge takes them, how the driver should collect it).
# A bare Parquet scan is read from its files by pyarrow; anything whose rows or types could
# differ from what Spark reads is collected through Spark.
SOURCES = {
    "pyarrow-files": lambda spark, d: (spark.read.parquet(_parquet_dir(d, *_halves(SOURCE))), SOURCE, "parquet files"),
    "spark-written": lambda spark, d: (
        sdf(spark, SOURCE).write.parquet("file://" + str(d)) or spark.read.parquet("file://" + str(d)), SOURCE, "parquet files"),
    "select-star": lambda spark, d: (spark.read.parquet(_parquet_dir(d, SOURCE)).select("*"), SOURCE, "parquet files"),
    "filtered": lambda spark, d: (
        spark.read.parquet(_parquet_dir(d, *_halves(SOURCE))).where("amt > 0"), SOURCE.filter(pa.compute.greater(SOURCE["amt"], 0)), "spark"),
    "projected": lambda spark, d: (
        spark.read.parquet(_parquet_dir(d, SOURCE)).selectExpr("id", "upper(cat) AS cat", "amt", "day"),
        SOURCE.set_column(1, "cat", pa.compute.utf8_upper(SOURCE["cat"])), "spark"),
    "cached": lambda spark, d: (spark.read.parquet(_parquet_dir(d, SOURCE)).cache(), SOURCE, "spark"),
    # every column, another order: a projection that is not the relation itself
    "reordered": lambda spark, d: (
        spark.read.parquet(_parquet_dir(d, SOURCE)).select(*reversed(SOURCE.column_names)),
        SOURCE.select(list(reversed(SOURCE.column_names))), "spark"),
    "limited": lambda spark, d: (spark.read.parquet(_parquet_dir(d, SOURCE)).limit(5), SOURCE.slice(0, 5), "spark"),
    "hive-partitioned": lambda spark, d: _partitioned(spark, d),
    "files-of-two-schemas": lambda spark, d: (
        spark.read.option("mergeSchema", "true").parquet(_parquet_dir(d, SOURCE.slice(0, 4), SOURCE.slice(4).drop_columns(["day"]))),
        SOURCE.set_column(3, "day", pa.array([*SOURCE["day"].to_pylist()[:4], None, None, None, None], pa.date32())), "spark"),
    "spark-2-calendar": lambda spark, d: (
        spark.read.parquet(_parquet_dir(d, SOURCE.replace_schema_metadata({"org.apache.spark.version": "2.4.8"}))), SOURCE, "spark"),
}


def _partitioned(spark, d):
    import pyarrow.parquet as pq

    pq.write_to_dataset(SOURCE.filter(pa.compute.is_valid(SOURCE["cat"])), str(d), partition_cols=["cat"])
    df = spark.read.parquet("file://" + str(d)).select("id", "cat", "amt", "day")
    return df, SOURCE, "spark"


@pytest.mark.parametrize("kind", list(SOURCES))
def test_the_driver_reads_a_bare_parquet_source_from_its_files(spark, tmp_path, kind):
    """``spark.read.parquet(dir)`` as it is is read by pyarrow from its files (no Spark job);
    a filtered, projected, cached, partitioned or mixed-schema source, or a file Spark 2
    wrote, is collected by Spark. Either way the merge equals the Arrow merge of the rows
    Spark reads."""
    s_uri, a_uri = make_pair(tmp_path)
    df, arrow, how = SOURCES[kind](spark, tmp_path / "src")
    assert sorted(map(str, df.collect())) == sorted(map(str, spark.createDataFrame(arrow.to_pandas(), schema=df.schema).collect()))
    b = CASES["upsert_all"](spark_merge(s_uri, df, on="id"))
    got = b.execute()
    assert f"collect ({how})" in b.timings and "arrow merge" in b.timings
    want = CASES["upsert_all"](lamina.open_table(a_uri).merge(arrow, on="id")).execute()
    assert (got.rows_updated, got.rows_inserted) == (want.rows_updated, want.rows_inserted)
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


def test_a_bare_parquet_source_above_driver_rows_goes_to_the_spark_job(spark, tmp_path):
    s_uri, a_uri = make_pair(tmp_path)
    df = spark.read.parquet(_parquet_dir(tmp_path / "src", *_halves(SOURCE)))
    b = CASES["upsert_all"](spark_merge(s_uri, df, on="id", driver_rows=SOURCE.num_rows - 1))
    b.execute()
    assert "collect (parquet files)" in b.timings and "join+collect" in b.timings and "arrow merge" not in b.timings
    CASES["upsert_all"](lamina.open_table(a_uri).merge(SOURCE, on="id")).execute()
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


@pytest.mark.parametrize("case", sorted(WHOLE_ROWS))
def test_a_parquet_source_is_matched_on_its_keys_while_the_rest_is_read(spark, tmp_path, case):
    """The driver reads a bare Parquet source's key column first and its other columns behind
    it (``SourceRead``); an upsert matches meanwhile, other clauses wait for every column.
    Strings pyarrow reads as large strings become the table's strings once read."""
    s_uri, a_uri = make_pair(tmp_path)
    wide = SOURCE.cast(pa.schema([f.with_type(pa.large_string()) if f.name == "cat" else f for f in SOURCE.schema]))
    df = spark.read.parquet(_parquet_dir(tmp_path / "src", *_halves(wide)))
    b = CASES[case](spark_merge(s_uri, df, on="id"))
    got = b.execute()
    assert "collect (parquet files)" in b.timings and "arrow merge" in b.timings
    want = CASES[case](lamina.open_table(a_uri).merge(SOURCE, on="id")).execute()
    assert (got.rows_updated, got.rows_inserted) == (want.rows_updated, want.rows_inserted)
    assert sorted_rows(s_uri) == sorted_rows(a_uri)


def test_a_parquet_source_damaged_past_its_keys_fails_and_commits_nothing(spark, tmp_path):
    """Footers and key column readable, another column's page not: the merge fails with a
    typed error naming the source, the table keeps its version and rows."""
    import pyarrow.parquet as pq

    s_uri, _ = make_pair(tmp_path)
    src = _parquet_dir(tmp_path / "src", SOURCE, compression="none")
    path = os.path.join(str(tmp_path / "src"), "part-0.parquet")
    at = pq.read_metadata(path).row_group(0).column(SOURCE.schema.get_field_index("cat")).data_page_offset
    with open(path, "r+b") as f:  # the page header of the 'cat' column
        f.seek(at)
        f.write(b"\xff" * 8)
    df = spark.read.parquet(src)
    t = lamina.open_table(s_uri)
    version, before = t.version, sorted_rows(s_uri)
    b = CASES["upsert_all"](spark_merge(s_uri, df, on="id"))
    with pytest.raises(InvalidArgument, match="could not be read"):
        b.execute()
    assert "collect (parquet files)" in b.timings
    assert t.refresh().version == version and sorted_rows(s_uri) == before


@pytest.mark.parametrize("writer", ["pyarrow", "spark"])
def test_a_staged_source_in_the_tables_format_becomes_its_data_files(spark, tmp_path, monkeypatch, writer):
    """A bare Parquet source whose files are what the table stores (pyarrow's or Spark's own
    writer) is merged by copying its files: one data file each, its rows never read into Arrow;
    the table then reads (pyarrow, Spark's native reader) as after the Arrow merge of the rows,
    row ids included, and a Spark-written file's footer round-trips through the codec."""
    import pyarrow.parquet as pq

    from lamina.data import copy as copy_mod
    from lamina.data import parquet_footer
    from lamina.data.copy import StagedFiles

    monkeypatch.setattr(copy_mod, "COPY_MIN_ROWS", 1)  # (the test's files are small)
    copied, read = [], []
    real_copy = StagedFiles.copy
    monkeypatch.setattr(StagedFiles, "copy", lambda self, *a, **k: copied.append(len(self.files)) or real_copy(self, *a, **k))
    real_read = StagedFiles.read
    monkeypatch.setattr(StagedFiles, "read", lambda self, cols: read.append(list(cols)) or real_read(self, cols))
    s_uri, a_uri = make_pair(tmp_path)
    src = SOURCE.filter(pa.compute.is_valid(SOURCE["id"]))
    d = tmp_path / "src"
    if writer == "spark":
        sdf(spark, src).coalesce(2).write.parquet("file://" + str(d))
        for f in sorted(os.listdir(d)):
            if f.endswith(".parquet"):
                raw = Path(d, f).read_bytes()
                fields, start = parquet_footer.footer_of(raw)
                assert parquet_footer.encode(fields) == raw[start:-8]
                assert pq.read_metadata(os.path.join(d, f)).created_by.startswith("parquet-mr")
        df = spark.read.parquet("file://" + str(d))
    else:
        df = spark.read.parquet(_parquet_dir(d, *_halves(src)))
    b = CASES["upsert_all"](spark_merge(s_uri, df, on="id"))
    got = b.execute()
    want = CASES["upsert_all"](lamina.open_table(a_uri).merge(src, on="id")).execute()
    assert copied == [2] and read == [["id"]]  # two files copied; only the keys read
    assert (got.rows_updated, got.rows_inserted, got.files_touched) == (want.rows_updated, want.rows_inserted, want.files_touched)
    assert sorted_rows(s_uri) == sorted_rows(a_uri)
    # Updated rows keep the ids of the rows they replace; inserted rows get new ones, in the
    # order of the files Spark lists (not the order ``src`` has here): compared as "new".
    before = {r["_row_id"] for r in lamina.open_table(a_uri).scan(columns=["_row_id"], version=got.version - 1).to_arrow().to_pylist()}

    def ids(uri):
        rows = lamina.open_table(uri).scan(columns=["id", "cat", "_row_id", "_last_updated_version"]).to_arrow().to_pylist()
        assert len({r["_row_id"] for r in rows}) == len(rows)
        return sorted((r["id"], r["cat"], r["_row_id"] if r["_row_id"] in before else "new", r["_last_updated_version"]) for r in rows)

    assert ids(s_uri) == ids(a_uri)
    native = sorted(map(str, spark_read(spark, s_uri).select("id", "cat", "amt", "day").collect()))
    assert native == sorted(map(str, spark_read(spark, a_uri).select("id", "cat", "amt", "day").collect()))


def test_a_damaged_source_that_would_be_copied_fails_and_commits_nothing(spark, tmp_path, monkeypatch):
    """The same damage as above in a file the merge would copy (the table's codec): its pages
    are decoded before anything is stored, so the merge fails naming it and commits nothing."""
    import pyarrow.parquet as pq

    from lamina.data import copy as copy_mod

    monkeypatch.setattr(copy_mod, "COPY_MIN_ROWS", 1)
    s_uri, _ = make_pair(tmp_path)
    src = _parquet_dir(tmp_path / "src", SOURCE, use_dictionary=False)
    path = os.path.join(str(tmp_path / "src"), "part-0.parquet")
    at = pq.read_metadata(path).row_group(0).column(SOURCE.schema.get_field_index("cat")).data_page_offset
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\xff" * 8)
    t = lamina.open_table(s_uri)
    version, before = t.version, sorted_rows(s_uri)
    files = set(os.listdir(os.path.join(s_uri, "data")))
    with pytest.raises(InvalidArgument, match="part-0.parquet could not be read"):
        CASES["upsert_all"](spark_merge(s_uri, spark.read.parquet(src), on="id")).execute()
    assert t.refresh().version == version and sorted_rows(s_uri) == before
    assert set(os.listdir(os.path.join(s_uri, "data"))) == files
