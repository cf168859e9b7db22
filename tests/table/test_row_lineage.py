"""Row lineage: ids assigned at commit, kept through update, merge, copy-on-write and
compaction; enabling it on an older table; typed errors where it is absent."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.errors import RowLineageNotEnabled

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
LINEAGE = ["id", "v", "_row_id", "_last_updated_version"]


def rows(t, version=None):
    return {r["id"]: r for r in t.scan(columns=LINEAGE, version=version).to_arrow().to_pylist()}


def test_appends_number_rows_without_storing_them(tmp_path):
    t = lamina.create_table(str(tmp_path), SCHEMA)
    t.append(pa.table({"id": [1, 2, 3], "v": list("abc")}))
    t.append(pa.table({"id": [4, 5], "v": list("de")}))
    got = rows(t)
    assert sorted(r["_row_id"] for r in got.values()) == [0, 1, 2, 3, 4]
    assert {i: got[i]["_last_updated_version"] for i in got} == {1: 1, 2: 1, 3: 1, 4: 2, 5: 2}
    assert t.metadata.next_row_id == 5
    for f in t.scan().plan():  # appended files store no lineage column
        assert pq.read_schema(tmp_path / f.path).names == ["id", "v"]


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_ids_survive_update_merge_delete_and_compaction(tmp_path, mode):
    t = lamina.create_table(str(tmp_path), SCHEMA)
    t.append(pa.table({"id": list(range(10)), "v": ["x"] * 10}))
    t.append(pa.table({"id": list(range(10, 20)), "v": ["y"] * 10}))
    before = rows(t)
    t.update(where="id = 3", set={"v": "'U'"}, mode=mode)
    v_update = t.metadata.version
    t.merge(pa.table({"id": [12, 99], "v": ["M", "N"]}), on="id", mode=mode) \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    v_merge = t.metadata.version
    t.delete("id = 15", mode=mode)
    t.maintenance.compact()
    after = rows(t)
    assert set(after) == set(before) - {15} | {99}
    for i in set(before) - {15}:
        assert after[i]["_row_id"] == before[i]["_row_id"]
    assert after[3]["_last_updated_version"] == v_update and after[3]["v"] == "U"
    assert after[12]["_last_updated_version"] == v_merge
    unchanged = set(before) - {3, 12, 15}
    assert all(after[i]["_last_updated_version"] == before[i]["_last_updated_version"] for i in unchanged)
    assert after[99]["_row_id"] >= 20 and after[99]["_last_updated_version"] == v_merge
    ids = [r["_row_id"] for r in after.values()]
    assert len(set(ids)) == len(ids)


def test_ids_stored_after_nested_columns_are_read_as_themselves(tmp_path):
    """A file that stores ``_row_id`` (an update's) after nested columns: a merge touching its
    rows reads the stored ids by the column's field index, not its Parquet leaf index, which
    the struct's and the list's leaves shift (to ``_last_updated_version``, or past the end)."""
    schema = pa.schema([("st", pa.struct([("a", pa.int64()), ("b", pa.string())])), ("l", pa.list_(pa.string())),
                        ("id", pa.int64()), ("v", pa.string())])

    def batch(ids, v):
        return pa.table({"st": [{"a": i, "b": str(i)} for i in ids], "l": [[str(i), "x"] for i in ids], "id": ids,
                         "v": [v] * len(ids)}, schema=schema)

    t = lamina.create_table(str(tmp_path), schema)
    t.append(batch(list(range(6)), "x"))
    t.append(batch(list(range(6, 9)), "y"))
    before = rows(t)
    t.update(where="id < 3", set={"v": "'U'"})  # rows 0..2 rewritten: their new file stores their ids
    t.merge(batch([1, 2, 7, 20], "M"), on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    after = rows(t)
    assert {i: after[i]["v"] for i in after} == {0: "U", 1: "M", 2: "M", 3: "x", 4: "x", 5: "x", 6: "y", 7: "M", 8: "y", 20: "M"}
    for i in before:
        assert after[i]["_row_id"] == before[i]["_row_id"], i
    assert after[20]["_row_id"] not in {r["_row_id"] for r in before.values()}


def test_overwrite_with_predicate_keeps_remainder_ids(tmp_path):
    t = lamina.create_table(str(tmp_path), SCHEMA)
    t.append(pa.table({"id": [1, 2, 3], "v": list("abc")}))
    before = rows(t)
    t.overwrite(pa.table({"id": [2], "v": ["B"]}), where="id = 2")
    after = rows(t)
    assert after[1]["_row_id"] == before[1]["_row_id"] and after[3]["_row_id"] == before[3]["_row_id"]
    assert after[2]["_row_id"] not in {r["_row_id"] for r in before.values()}


def test_table_without_lineage_refuses_row_ids_then_enables(tmp_path):
    t = lamina.create_table(str(tmp_path), SCHEMA, properties={"row-lineage.enabled": "false"})
    t.append(pa.table({"id": [1, 2, 3], "v": list("abc")}))
    t.delete("id = 2")
    assert "row-lineage" not in t.metadata.writer_features
    with pytest.raises(RowLineageNotEnabled, match="enable_row_lineage"):
        t.scan(columns=["id", "_row_id"])
    data_before = t.scan().to_arrow()
    v = t.enable_row_lineage().version
    assert v == t.metadata.version and "row-lineage" in t.metadata.writer_features
    assert t.enable_row_lineage().version is None  # already on: no version
    assert t.scan().to_arrow().equals(data_before)
    got = rows(t)
    assert sorted(got) == [1, 3] and got[3]["_row_id"] - got[1]["_row_id"] == 2  # positions, DV kept
    assert t.metadata.summary["added-files"] == 0 and t.metadata.summary["removed-files"] == 0
    with pytest.raises(RowLineageNotEnabled):
        t.scan(columns=["_row_id"], version=v - 1)


def test_rebased_commits_never_share_ids(tmp_path):
    a = lamina.create_table(str(tmp_path), SCHEMA)
    b = lamina.open_table(str(tmp_path))
    a.append(pa.table({"id": [1, 2], "v": list("ab")}))
    b.append(pa.table({"id": [3, 4], "v": list("cd")}))  # b's base is stale: it rebases
    ids = [r["_row_id"] for r in rows(lamina.open_table(str(tmp_path))).values()]
    assert sorted(ids) == [0, 1, 2, 3]


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_a_transaction_rewrites_rows_it_added_itself(tmp_path, mode):
    """The second operation of a transaction reads rows the first one added: they have their
    ids already (the committer numbers each change as it is staged), so an update keeps them
    and a copy-on-write remainder copies them."""
    t = lamina.create_table(str(tmp_path), SCHEMA)
    t.append(pa.table({"id": [1, 2], "v": list("ab")}))
    before = rows(t)
    with t.transaction() as tx:
        tx.append(pa.table({"id": [3, 4, 5], "v": list("cde")}))
        tx.update(where="id >= 2 AND id <= 3", set={"v": "'U'"}, mode=mode)
        tx.delete("id = 4", mode=mode)
    v = t.metadata.version
    after = rows(t)
    assert sorted(after) == [1, 2, 3, 5] and after[3]["v"] == "U" and after[2]["v"] == "U"
    ids = [r["_row_id"] for r in after.values()]
    assert len(set(ids)) == len(ids) and max(ids) < t.metadata.next_row_id
    assert after[1]["_row_id"] == before[1]["_row_id"] and after[1]["_last_updated_version"] == 1
    assert after[2]["_row_id"] == before[2]["_row_id"] and after[2]["_last_updated_version"] == v
    assert {after[i]["_row_id"] for i in (3, 5)}.isdisjoint(r["_row_id"] for r in before.values())
    feed = t.changes(1).to_arrow()
    got = sorted(zip(feed.column("id").to_pylist(), feed.column("v").to_pylist(), feed.column("_change_type").to_pylist()))
    assert got == [(2, "U", "update_postimage"), (2, "b", "update_preimage"), (3, "U", "insert"), (5, "e", "insert")]


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_upsert_keeps_ids_of_rows_in_appended_and_in_rewritten_files(tmp_path, mode):
    """An upsert reads only the keys of the target, and the ids of the rows it updates
    afterwards: numbered from the entry for an appended file, as stored for a file an
    update wrote (ids 3 and 4 live there, with the other rows of their file behind DVs)."""
    t = lamina.create_table(str(tmp_path), SCHEMA)
    t.append(pa.table({"id": list(range(10)), "v": ["x"] * 10}))
    t.append(pa.table({"id": list(range(10, 20)), "v": ["y"] * 10}))
    t.update(where="id IN (3, 4, 5)", set={"v": "'U'"}, mode=mode)
    before = rows(t)
    t.merge(pa.table({"id": [4, 12, 99], "v": ["M", "M", "N"]}), on="id", mode=mode) \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    after = rows(t)
    assert {i: r["v"] for i, r in after.items() if r["v"] in "MN"} == {4: "M", 12: "M", 99: "N"}
    assert all(after[i]["_row_id"] == before[i]["_row_id"] for i in before)
    assert after[99]["_row_id"] >= 20
    assert len({r["_row_id"] for r in after.values()}) == len(after) == 21


def _mixed_small_files(tmp_path):
    """A table of small files of every kind a run of compaction inputs can hold: files
    written from new rows (no lineage stored), a file rewritten by a copy-on-write update
    (lineage stored), a file with a deletion vector, and a file added by add_files
    without the column ``v``."""
    t = lamina.create_table(str(tmp_path), SCHEMA)
    for i in range(12):
        t.append(pa.table({"id": list(range(i * 10, i * 10 + 10)), "v": [f"r{i}"] * 10}))
    t.update(where="id = 33", set={"v": "'U'"}, mode="copy-on-write")
    t.delete("id in (51, 58)", mode="merge-on-read")
    pq.write_table(pa.table({"id": pa.array([500, 501, 502], pa.int64())}), tmp_path / "data" / "added.parquet")
    size = (tmp_path / "data" / "added.parquet").stat().st_size
    t.add_files(pa.table({"path": ["data/added.parquet"], "size": [size], "record_count": [3]}))
    for i in range(12, 15):
        t.append(pa.table({"id": list(range(i * 10, i * 10 + 10)), "v": [f"r{i}"] * 10}))
    return t


def test_run_reads_number_rows_as_file_reads_do(tmp_path):
    """read_files(per_run=True), which numbers the lineage of files that store none for a
    run at once, gives the rows the per-file reads give, in the same order."""
    t = _mixed_small_files(tmp_path)
    scan = t.scan()
    entries = scan.plan(all_columns=True).entries
    assert entries.num_rows == 17 and entries.column("dv_path").null_count == 16
    per_file = pa.concat_tables(list(scan.read_files(entries, LINEAGE)))
    for files_per_task in (64, 5, 1):
        runs = list(scan.read_files(entries, LINEAGE, files_per_task=files_per_task, per_run=True))
        assert len(runs) == -(-17 // files_per_task)
        got = pa.concat_tables(runs)
        assert got.schema.equals(per_file.schema) and got.equals(per_file)
    assert per_file.num_rows == 150 + 3 - 2
    ids = per_file.column("_row_id").to_pylist()
    assert len(set(ids)) == len(ids)
    # data columns only (no lineage asked for): per file
    plain = pa.concat_tables(list(scan.read_files(entries, ["id", "v"], per_run=True)))
    assert plain.equals(per_file.select(["id", "v"]))


def test_compaction_of_mixed_small_files_keeps_rows_ids_and_versions(tmp_path):
    t = _mixed_small_files(tmp_path)
    before = t.scan(columns=LINEAGE).to_arrow().sort_by("_row_id")
    r = t.maintenance.compact()
    assert (r.input_files, r.output_files) == (17, 1)
    after = t.scan(columns=LINEAGE).to_arrow().sort_by("_row_id")
    assert after.equals(before)
    assert after.num_rows == 151 and 51 not in after.column("id").to_pylist()
    assert dict(zip(after.column("id").to_pylist(), after.column("v").to_pylist()))[33] == "U"
    # the output stores every row's lineage, rows of each input file in their order
    (path,) = [f.path for f in t.scan().plan()]
    stored = pq.read_table(tmp_path / path)
    assert stored.column_names == LINEAGE
    ids = stored.column("_row_id").to_pylist()
    assert sorted(ids) == before.column("_row_id").to_pylist()
    tags = stored.column("v").to_pylist()  # r<i>: the rows appended by the i-th append
    for tag in {f"r{i}" for i in range(15)}:
        of_file = [i for i, v in zip(ids, tags) if v == tag]
        assert of_file and of_file == sorted(of_file)
