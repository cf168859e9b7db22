"""Branches: a version log per branch, publish by fast-forward or rebase, and maintenance
that keeps what every branch needs. (The model and the races are in test_branches_model.py.)"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import duckdb
import pyarrow as pa
import pytest

import lamina
import lamina.duckdb as ldb
import lamina.polars as lpl
from lamina.errors import (
    BranchAlreadyExists, BranchNotFound, CommitConflict, InvalidArgument, InvalidBranchName, PublishConflict,
    TagAlreadyExists, TagNotFound,
)
from lamina.maintenance.fsck import fsck
from support.files import ids_of, table_files

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64())])


def rows(ids, amount=1.0):
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([amount] * len(ids))}, schema=SCHEMA)


@pytest.fixture
def table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(range(5)))
    return t


def now():
    return datetime.now(timezone.utc)


def test_a_branch_is_invisible_to_main_until_published_fast_forward(table):
    b = table.branches.create("etl")
    b.append(rows([10, 11], -1.0))
    assert ids_of(table.refresh().to_arrow()) == [0, 1, 2, 3, 4]
    assert ids_of(lamina.open_table(table.uri, version="etl").to_arrow()) == [0, 1, 2, 3, 4, 10, 11]
    assert ids_of(table.scan(version="etl").to_arrow()) == [0, 1, 2, 3, 4, 10, 11]
    before = table.version
    v = table.branches.publish("etl").version
    assert v == before + 1 and table.metadata.summary["publish"] == "fast-forward"
    assert ids_of(lamina.open_table(table.uri).to_arrow()) == [0, 1, 2, 3, 4, 10, 11]
    # main's older versions are unchanged
    assert ids_of(table.scan(version=before).to_arrow()) == [0, 1, 2, 3, 4]
    assert fsck(table).ok


def test_publish_rebases_over_main_commits_and_matches_duckdb(table):
    b = table.branches.create("etl")
    b.append(rows([20, 21]))
    b.update("id = 1", {"amount": "amount + 100"})
    for i in range(3):
        table.append(rows([30 + i]))
    table.delete("id = 30")  # another file than the branch's update touched
    table.branches.publish("etl")
    assert table.metadata.summary["publish"] == "rebase"
    got = table.to_arrow().sort_by("id")
    con = duckdb.connect()
    con.register("main_rows", table.scan(version=table.version - 1).to_arrow())
    con.register("branch_rows", b.to_arrow())
    # oracle: main before the publish, with the branch's new rows and its update
    want = con.sql(
        "select id, amount from main_rows where id <> 1 union all "
        "select id, amount from branch_rows where id in (1, 20, 21) order by id"
    ).arrow().read_all()
    assert got.column("id").to_pylist() == want.column("id").to_pylist()
    assert got.column("amount").to_pylist() == want.column("amount").to_pylist()
    assert fsck(table).ok


def test_publish_conflict_names_the_files_and_commits_nothing(table):
    b = table.branches.create("etl")
    b.delete("id = 2")
    table.delete("id = 3")  # the same file, another deletion vector
    files = table_files(table.uri)
    with pytest.raises(PublishConflict) as e:
        table.branches.publish("etl")
    assert e.value.files and all(f.startswith("data/") for f in e.value.files)
    assert e.value.files[0] in str(e.value)
    assert table_files(table.uri).keys() - files.keys() <= {
        k for k in table_files(table.uri) if k.startswith("_lamina/manifests/")  # written for the attempt, unreferenced
    }
    assert ids_of(table.refresh().to_arrow()) == [0, 1, 2, 4]


def test_expected_version_refuses_a_moved_main(table):
    b = table.branches.create("etl")
    b.append(rows([9]))
    audited = table.refresh().version
    table.append(rows([8]))
    with pytest.raises(CommitConflict):
        table.branches.publish("etl", expected_version=audited)
    assert 9 not in ids_of(table.refresh().to_arrow())
    at = table.refresh().version
    assert table.branches.publish("etl", expected_version=at).version == at + 1
    assert 9 in ids_of(table.to_arrow())


def test_branch_schema_change_is_published_when_main_kept_the_base_schema(table):
    b = table.branches.create("etl")
    with b.update_schema() as u:
        u.add_column("note", pa.string())
    b.append(pa.table({"id": [7], "amount": [1.0], "note": ["n"]}))
    table.append(rows([8]))  # main moves: a rebase
    table.branches.publish("etl")
    got = table.to_arrow().sort_by("id")
    assert got.schema.names == ["id", "amount", "note"]
    assert got.column("note").to_pylist()[-2:] == ["n", None]


def test_branches_of_branches_and_time_travel_within_a_branch(table):
    a = table.branches.create("a")
    va = a.append(rows([100])).version
    a.append(rows([101]))
    c = table.branch("a").branches.create("c", version=va)
    c.append(rows([200]))
    assert ids_of(c.to_arrow()) == [0, 1, 2, 3, 4, 100, 200]
    assert ids_of(a.scan(version=va).to_arrow()) == [0, 1, 2, 3, 4, 100]
    table.branches.publish("c", into="a")  # a moved since c was made: a rebase
    assert ids_of(table.branch("a").to_arrow()) == [0, 1, 2, 3, 4, 100, 101, 200]
    assert ids_of(table.to_arrow()) == [0, 1, 2, 3, 4]


def test_lineage_ids_stay_unique_after_a_rebase_publish(table):
    b = table.branches.create("etl")
    b.append(rows([50, 51]))
    table.append(rows([60, 61]))
    table.branches.publish("etl")
    ids = table.scan(columns=["id", "_row_id"]).to_arrow().column("_row_id").to_pylist()
    assert len(ids) == len(set(ids)) == 9


def test_rows_inserted_then_rewritten_on_a_branch_refuse_a_rebase(table):
    b = table.branches.create("etl")
    b.append(rows([50, 51]))
    b.update("id = 50", {"amount": 5.0}, mode="copy-on-write")
    table.append(rows([60]))
    with pytest.raises(PublishConflict, match="row ids"):
        table.branches.publish("etl")
    assert ids_of(table.refresh().to_arrow()) == [0, 1, 2, 3, 4, 60]


def test_writers_on_two_branches_do_not_conflict_and_main_keeps_its_hint(table):
    a, b = table.branches.create("a"), table.branches.create("b")
    base = a.version
    assert a.append(rows([1])).version == base + 1 and b.append(rows([2])).version == base + 1
    assert a.append(rows([3])).version == base + 2
    assert lamina.open_table(table.uri, version="a").version == base + 2
    assert lamina.open_table(table.uri).version == table.version


def test_bad_names_and_targets_change_nothing(table):
    table.tags.create("release")
    table.branches.create("etl")
    before = table_files(table.uri)
    for name, err in [("main", InvalidBranchName), ("12", InvalidBranchName), ("../x", InvalidBranchName),
                      ("a/b", InvalidBranchName), ("", InvalidBranchName), ("release", BranchAlreadyExists),
                      ("etl", BranchAlreadyExists)]:
        with pytest.raises(err):
            table.branches.create(name)
    with pytest.raises(TagAlreadyExists):
        table.tags.create("etl")
    with pytest.raises(BranchNotFound):
        table.branch("nope")
    with pytest.raises(BranchNotFound):
        table.branches.publish("nope")
    with pytest.raises(InvalidArgument):
        table.branches.publish("etl", into="etl")
    with pytest.raises(InvalidBranchName):
        table.branches.delete("main")
    with pytest.raises(TagNotFound):  # neither a branch nor a tag of the name
        table.branches.create("x", version="nope")
    assert table_files(table.uri) == before


def test_a_commit_landing_after_delete_branch_is_refused(table):
    b = table.branches.create("etl")
    stale = table.branch("etl")
    b.append(rows([9]))
    table.branches.delete("etl")
    with pytest.raises(BranchNotFound):
        stale.append(rows([10]))
    with pytest.raises(BranchNotFound):
        table.branch("etl")
    # made again under the name: a fresh log, nothing of the old one
    again = table.branches.create("etl")
    assert ids_of(again.to_arrow()) == [0, 1, 2, 3, 4]


def test_delete_branch_frees_only_what_it_alone_needed(table):
    table.delete("id = 0")  # main's files before this stay for the branch made from an older version
    b = table.branches.create("old", version=1)
    b.append(rows([70]))
    table.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    assert ids_of(b.refresh().to_arrow()) == [0, 1, 2, 3, 4, 70]  # its base outlived main's version
    only_branch = set(b.inspect.files().column("path").to_pylist()) - set(table.inspect.files().column("path").to_pylist())
    assert len(only_branch) == 1
    deleted = table.branches.delete("old")
    assert deleted.name == "old" and deleted.base_version == 1
    report = table.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    assert set(report.deleted_files) == only_branch
    assert ids_of(table.refresh().to_arrow()) == [1, 2, 3, 4]
    check = fsck(table)
    assert check.ok and not check.unreferenced
    table.maintenance.remove_orphans(older_than=now(), allow_short_age=True)
    assert ids_of(lamina.open_table(table.uri).to_arrow()) == [1, 2, 3, 4]


def test_files_main_and_a_deleted_branch_both_held_are_reported_once_dry_or_not(table, tmp_path):
    """A branch made from main's latest, then deleted, and a compaction of main: its inputs
    were held by main's old versions and by the branch. Expiry deletes each file once and
    says so once (as the files gone from disk), and its dry run says the same."""
    import shutil

    from support.files import stored_files

    for i in range(3):
        table.append(rows([10 + i]))
    table.branches.create("etl").append(rows([90]))
    table.branches.delete("etl")
    table.maintenance.compact()
    shutil.copytree(table.uri, tmp_path / "copy")
    dry = lamina.open_table(str(tmp_path / "copy")).maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0), dry_run=True)
    before = stored_files(table.uri)
    report = table.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    gone = before - stored_files(table.uri)
    assert sorted(report.deleted_files) == sorted(dry.deleted_files) == sorted(p for p in gone if p.startswith("data/"))
    assert report.deleted_bytes == dry.deleted_bytes
    assert len(gone) == 5 and fsck(table).ok  # the four appends' files and the branch's


def test_branch_retention_applies_when_main_expires(table):
    b = table.branches.create("etl", retain_last=2)
    for i in range(4):
        b.append(rows([100 + i]))
    report = table.maintenance.expire_versions(retain_last=10, reader_grace=timedelta(0))
    assert len(report.branches["etl"].expired_versions) == 3  # base + 4 appends, 2 kept
    assert ids_of(b.refresh().to_arrow()) == [0, 1, 2, 3, 4, 100, 101, 102, 103]
    assert fsck(table).ok


def test_rename_keeps_the_log_and_handles(table):
    b = table.branches.create("etl")
    b.append(rows([9]))
    table.branches.rename("etl", "etl2")
    b.append(rows([10]))  # the handle's log is the renamed branch's
    assert ids_of(table.branch("etl2").to_arrow()) == [0, 1, 2, 3, 4, 9, 10]
    assert [r.name for r in table.branches.list()] == ["etl2"]


def test_one_version_keyword_names_numbers_tags_and_branches_everywhere(table):
    """``version=`` takes a version number, a tag name or a branch name (its latest) in every
    call that picks a version, ``timestamp=`` a time; both at once is InvalidArgument."""
    table.tags.create("first")  # version 1: ids 0..4
    dev = table.branches.create("dev")
    dev_first = dev.append(rows([10])).version  # a version number of dev's own
    dev_latest = dev.append(rows([11])).version
    latest = table.append(rows([20])).version  # main's (enabling branches committed one before)
    main_rows, dev_rows = [0, 1, 2, 3, 4, 20], [0, 1, 2, 3, 4, 10, 11]
    readers = {
        "scan": lambda **k: table.scan(**k).to_arrow(),
        "to_arrow": lambda **k: table.to_arrow(**k),
        "open_table": lambda **k: lamina.open_table(table.uri, **k).to_arrow(),
        "at": lambda **k: table.at(**k).to_arrow(),
        "duckdb": lambda **k: ldb.register(duckdb.connect(), table, "v", **k).to_arrow_table(),
        "polars": lambda **k: lpl.scan(table, **k).collect().to_arrow(),
    }
    for name, read in readers.items():
        assert ids_of(read(version="first")) == [0, 1, 2, 3, 4], name
        assert ids_of(read(version="dev")) == dev_rows, name
        assert ids_of(read(version="main")) == main_rows, name
        assert ids_of(read(version=latest)) == main_rows, name  # a number is of this handle's branch
        with pytest.raises(InvalidArgument, match="not both"):
            read(version="first", timestamp=now())
        with pytest.raises(TagNotFound, match="nope"):
            read(version="nope")
    # a version number of a branch: its handle
    assert ids_of(table.branch("dev").scan(version=dev_first).to_arrow()) == [0, 1, 2, 3, 4, 10]
    assert ids_of(table.branch("dev").at(dev_first).to_arrow()) == [0, 1, 2, 3, 4, 10]
    assert table.branch("dev").at(dev_first).branch_name == "dev"
    at_dev = lamina.open_table(table.uri, version="dev")
    assert at_dev.branch_name == "dev" and at_dev.version == dev_latest
    # the system tables and the change range take the same names
    assert table.inspect.files(version="dev").num_rows == 3
    assert table.inspect.files(version="first").num_rows == 1
    # a rollback goes back to a version of its own branch or a tag, not to another branch
    with pytest.raises(InvalidArgument, match="'dev' is a branch"):
        table.rollback("dev")
    assert table.version == latest
    v = table.rollback("first").version
    assert ids_of(table.to_arrow()) == [0, 1, 2, 3, 4] and table.metadata.summary["rollback-tag"] == "first"
    assert v == latest + 1
