"""System tables ($snapshots, $tags, $branches, $files, $manifests) as Arrow tables."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from lamina.commit import flush_hints
from lamina.commit.branches import BranchStore
from lamina.errors import InvalidArgument
from lamina.table import system

from support.grouped import batch, new_table


@pytest.fixture
def table(tmp_path):
    yield new_table(tmp_path)
    flush_hints()


def test_system_tables(table):
    table.append(batch(range(4)))
    table.append(batch(range(4, 6), "b"))
    table.tags.create("t1", 1)
    snaps = table.inspect.snapshots()
    assert snaps.column("version").to_pylist() == [0, 1, 2]
    assert snaps.column("operation").to_pylist() == ["create", "append", "append"]
    assert snaps.column("parent_version").to_pylist() == [None, 0, 1]
    tags = table.inspect.tags().to_pylist()
    assert [(r["tag_name"], r["tagged_version"], r["record_count"]) for r in tags] == [("t1", 1, 4)]
    files = table.inspect.files()
    assert files.num_rows == 2 and sorted(files.column("record_count").to_pylist()) == [2, 4]
    assert files.column("lower.id").to_pylist() in ([0, 4], [4, 0])
    assert table.inspect.files(version="t1").num_rows == 1
    m = table.inspect.manifests()
    assert m.column("kind").to_pylist()[0] == "root" and m.column("file_count").to_pylist()[0] == 2
    with pytest.raises(InvalidArgument, match=r"\$snapshots"):
        table.inspect.table("$nope")


# -- $branches, and the branch of $snapshots ----------------------------------------------------


def test_branches_lists_main_and_every_branch(table):
    """main: v1, v2 appends, v3 enables branches. audit from v1 (retain 2, max age 7d): its
    base slot and two commits. nightly from audit's latest."""
    table.append(batch(range(4)))
    table.append(batch(range(4, 6), "b"))
    before = int(time.time() * 1000)  # floored to the millisecond, as created_at is
    audit = table.branches.create("audit", retain_last=2, max_age=timedelta(days=7), version=1)
    after = time.time() * 1000
    audit.append(batch([10]))
    audit.delete("id = 0")
    nightly = table.branches.create("nightly", version="audit")
    got = table.inspect.branches()
    assert got.schema == system.BRANCHES_SCHEMA
    rows = {r["name"]: r for r in got.to_pylist()}
    assert got.column("name").to_pylist() == ["main", "audit", "nightly"]  # main first, then by name
    heads = {"main": table.refresh(), "audit": audit, "nightly": nightly}
    want = {  # base branch, base version, head version, head records, versions, retain_last, max_age_ms
        "main": (None, None, 3, 6, 4, None, None),
        "audit": ("main", 1, 3, 4, 3, 2, 7 * 86_400_000),
        "nightly": ("audit", 3, 3, 4, 1, None, None),
    }
    for name, (base_branch, base_version, head, records, versions, retain_last, max_age) in want.items():
        r = rows[name]
        assert (r["base_branch"], r["base_version"], r["head_version"], r["head_records"], r["versions"],
                r["retain_last"], r["max_age_ms"]) == (base_branch, base_version, head, records, versions, retain_last, max_age), name
        assert int(r["head_timestamp"].timestamp() * 1000) == heads[name].metadata.timestamp_ms
    assert rows["main"]["branch_id"] is None and rows["main"]["created_at"] is None
    assert rows["audit"]["branch_id"] == audit.branch_record.branch_id != rows["nightly"]["branch_id"]
    assert before <= round(rows["audit"]["created_at"].timestamp() * 1000) <= after
    # the same from a branch's handle: the table's branches, not the handle's
    assert audit.inspect.branches().equals(table.inspect.branches())


def test_branches_follows_renames_expiry_and_deletes(table):
    table.append(batch(range(4)))
    b = table.branches.create("audit")
    bid = b.branch_record.branch_id
    for i in range(3):
        b.append(batch([10 + i]))
    assert table.inspect.branches().to_pylist()[1]["versions"] == 4
    b.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    table.branches.rename("audit", "checked")
    rows = table.inspect.branches().to_pylist()
    assert [(r["name"], r["branch_id"], r["head_version"], r["versions"]) for r in rows] == [
        ("main", None, 2, 3), ("checked", bid, 5, 1)]
    table.branches.delete("checked")
    assert table.inspect.branches().column("name").to_pylist() == ["main"]


def test_a_branch_deleted_while_branches_is_built_is_left_out(table, monkeypatch):
    table.branches.create("gone")
    table.branches.create("kept")
    listed = BranchStore(table.io).list()  # what a listing before the deletion returned
    table.branches.delete("gone")
    monkeypatch.setattr(BranchStore, "list", lambda self: listed)
    assert table.inspect.branches().column("name").to_pylist() == ["main", "kept"]


def test_snapshots_of_a_branch_are_its_versions(table):
    table.append(batch(range(4)))
    b = table.branches.create("audit", version=0)
    b.append(batch([7]))
    table.append(batch([8]))
    main = table.inspect.snapshots()
    assert main.column("version").to_pylist() == [0, 1, 2, 3] and set(main.column("branch").to_pylist()) == {"main"}
    mine = b.inspect.snapshots()
    assert mine.column("version").to_pylist() == [0, 1] and set(mine.column("branch").to_pylist()) == {"audit"}
    assert mine.column("operation").to_pylist() == ["create", "append"]
    # version 1 is a version of each: different commits
    assert mine.column("commit_id")[1] != main.column("commit_id")[1]
    assert table.branch("audit").inspect.snapshots().equals(mine)
    assert table.branch("audit").inspect.files(version=1).column("record_count").to_pylist() == [1]
    assert b.inspect.snapshots().equals(mine)
