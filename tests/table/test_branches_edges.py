"""Branches: the cases the model test (test_branches_model.py) found, each as a short fixed
sequence, so a regression names itself.

- orphan cleanup must keep branch records and logs (fsck must not call them unreferenced);
- a tag made on a branch names a version of that branch's log: expiry of main and
  delete_tag must not decide about its files (or main's) by main's version numbers;
- publishing a branch a second time, or into a branch made from it, must not make a file
  live twice;
- rolling main back to a tag made on a branch re-adds rows whose ids came from the branch's
  counter: main's counter must move past them.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa
import pytest

import lamina
from lamina.errors import BranchAlreadyExists, BranchNotFound, PublishConflict
from lamina.maintenance import fsck
from lamina.spec.lineage import ROW_ID

from support.files import ids_of, referenced, table_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])
NOW = timedelta(0)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids)}, schema=SCHEMA)


@pytest.fixture
def t(tmp_path) -> lamina.Table:
    table = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    table.append(rows(1))  # main v1: file F
    return table


def _clean(t: lamina.Table) -> None:
    report = fsck(t)
    assert report.ok and not report.unreferenced, (report.missing, report.errors, report.unreferenced)


def test_orphan_cleanup_keeps_branches(t):
    dev = t.branches.create("dev")
    dev.append(rows(2))
    dev.tags.create("on-dev")
    _clean(t)
    _clean(dev)
    report = t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert report.orphans == []
    dev.maintenance.remove_orphans(NOW, allow_short_age=True)  # from a branch's handle: the same, table-wide
    assert ids_of(t.branch("dev").to_arrow()) == [1, 2]
    assert [r.name for r in t.branches.list()] == ["dev"]
    # A deleted branch's log is garbage but its marker; orphan cleanup takes what is left.
    t.branches.delete("dev")
    t.maintenance.remove_orphans(NOW, allow_short_age=True)
    left = [p for p in table_files(t.uri) if p.startswith("_lamina/branch")]
    assert len(left) == 1 and left[0].endswith(".deleted.json"), left
    _clean(t)


def test_a_handle_on_a_deleted_branch_says_the_branch_is_gone(t):
    dev = t.branches.create("dev")
    dev.append(rows(2))
    t.branches.delete("dev")
    with pytest.raises(BranchNotFound):
        dev.append(rows(3))
    with pytest.raises(BranchNotFound):
        dev.refresh()
    assert ids_of(t.refresh().to_arrow()) == [1]


def test_rename_to_its_own_name_is_refused_and_keeps_the_branch(t):
    t.branches.create("dev").append(rows(2))
    with pytest.raises(BranchAlreadyExists):
        t.branches.rename("dev", "dev")
    assert ids_of(t.branch("dev").to_arrow()) == [1, 2]


def test_expiry_of_main_keeps_what_a_tag_made_on_a_deleted_branch_needs(t):
    dev = t.branches.create("dev")  # main v2 (the feature), dev's base 2
    dev.append(rows(2))  # dev v3: F and G
    dev.tags.create("x", 3)
    t.refresh().delete("id = 1")  # main v3 removes F: main's interval [1, 3) does not hold 3
    t.append(rows(3))
    t.branches.delete("dev")
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert ids_of(t.scan(version="x").to_arrow()) == [1, 2]
    assert ids_of(t.refresh().to_arrow()) == [3]
    t.tags.delete("x")
    t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert {p for p in table_files(t.uri) if p.startswith(("data/", "_lamina/manifests/"))} == referenced(t)


def test_delete_tag_keeps_what_main_needs_when_its_neighbours_are_another_branch_s(t):
    dev = t.branches.create("dev")  # base 2
    dev.append(rows(2))
    dev.tags.create("x", 3)  # F, G
    dev.delete("id = 1")
    dev.tags.create("y", 4)  # G only: "x"'s next tag by number
    for i in (3, 4, 5):
        t.refresh().append(rows(i))  # main v3..v5 still hold F
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    t.branches.delete("dev")
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)  # frees what only the deleted branch held
    t.tags.delete("x")  # by main's numbers, "y" (4) is the next kept point after 3, not main's 5
    assert ids_of(t.refresh().to_arrow()) == [1, 3, 4, 5]
    assert ids_of(t.scan(version="y").to_arrow()) == [2]
    _clean(t)


def test_publishing_a_branch_again_applies_only_what_it_did_since(t):
    dev = t.branches.create("dev")
    dev.append(rows(2))
    v = t.branches.publish("dev").version
    assert t.log.load(v).summary["publish"] == "fast-forward"
    assert t.branches.publish("dev").version is None  # nothing new: a retry never applies it twice
    assert t.refresh().version == v and ids_of(t.to_arrow()) == [1, 2]
    dev.append(rows(3))
    dev.delete("id = 2")
    v2 = t.branches.publish("dev").version  # main still holds what was published last: a fast-forward again
    assert t.log.load(v2).summary["publish"] == "fast-forward" and ids_of(t.refresh().to_arrow()) == [1, 3]
    t.append(rows(9))
    dev.append(rows(4))
    v3 = t.branches.publish("dev").version  # main moved: only dev's append since v2 is re-applied
    assert t.log.load(v3).summary["publish"] == "rebase" and ids_of(t.refresh().to_arrow()) == [1, 3, 4, 9]
    assert t.branches.publish("dev").version is None
    paths = t.inspect.files().column("path").to_pylist()
    assert len(paths) == len(set(paths))
    _clean(t)


def test_a_branch_whose_changes_reached_the_target_another_way_is_not_copied_twice(t):
    dev = t.branches.create("dev")
    dev.append(rows(2))
    t.branches.create("stage")
    t.branches.publish("dev", into="stage")
    t.branches.publish("stage")  # dev's file reaches main through stage, and so does the record of it
    assert t.branches.publish("dev").version is None and ids_of(t.refresh().to_arrow()) == [1, 2]
    # The record travels with main's versions, through a rollback to a tag made on the branch
    # too: the next publish re-applies only what the branch did since.
    dev.tags.create("d")
    other = t.branches.create("other")
    other.append(rows(5))
    t.branches.publish("other")
    t.refresh().rollback("d")
    t.append(rows(7))
    dev.append(rows(3))
    t.branches.publish("dev")
    assert ids_of(t.refresh().to_arrow()) == [1, 2, 3, 7]
    paths = t.inspect.files().column("path").to_pylist()
    assert len(paths) == len(set(paths))


def test_publishing_a_branch_into_a_branch_made_from_it_is_refused_not_copied_twice(t):
    """A branch made from another after that one added a file holds the file already:
    publishing the other into it would make the file live twice (its rows twice). Refused,
    naming the file, and the target keeps its version and rows; a branch made from the
    other before it wrote takes its changes as usual."""
    feature = t.branches.create("feature")
    feature.append(rows(2))
    early = t.branch("feature").branches.create("early", version=feature.branch_record.base.version)
    dev = t.branches.create("dev", version="feature")  # dev holds feature's file
    feature.append(rows(3))  # and one more, which dev does not hold
    before = dev.version
    with pytest.raises(PublishConflict, match="already live there") as e:
        t.branches.publish("feature", into="dev")
    (added,) = [p for p in feature.refresh().inspect.files().column("path").to_pylist()
                if p in t.branch("dev").inspect.files().column("path").to_pylist() and p not in t.inspect.files().column("path").to_pylist()]
    assert e.value.files == [added]
    dev = t.branch("dev")
    assert dev.version == before and ids_of(dev.to_arrow()) == [1, 2]
    assert t.branches.publish("feature", into="early").version is not None
    early = t.branch("early")
    paths = early.inspect.files().column("path").to_pylist()
    assert ids_of(early.to_arrow()) == [1, 2, 3] and len(paths) == len(set(paths))
    _clean(t)


def test_publishing_a_branch_into_a_branch_made_from_it_that_rewrote_its_files_is_refused(t):
    """The target, made from the branch after it wrote, compacted the branch's file away (its
    rows now in another file): the file is no longer live there, but the target had its rows
    from the start, and adding it again would hold them twice. Refused, naming the file."""
    feature = t.branches.create("feature")
    feature.append(rows(2))
    (added,) = [p for p in feature.inspect.files().column("path").to_pylist() if p not in t.inspect.files().column("path").to_pylist()]
    dev = t.branches.create("dev", version="feature")
    dev.maintenance.compact(min_file_size=1 << 30)  # dev: the two files rewritten into one
    assert added not in t.branch("dev").inspect.files().column("path").to_pylist()
    feature.append(rows(3))
    before = t.branch("dev").version
    with pytest.raises(PublishConflict, match="were live in the version 'dev' was made from") as e:
        t.branches.publish("feature", into="dev")
    assert e.value.files == [added]
    dev = t.branch("dev")
    assert dev.version == before and ids_of(dev.to_arrow()) == [1, 2]
    _clean(t)


def test_rollback_to_a_tag_made_on_a_branch_moves_the_row_id_counter(t):
    dev = t.branches.create("dev")
    dev.append(rows(2, 3, 4))  # row ids from dev's counter: 1, 2, 3
    dev.tags.create("x")
    t.refresh().rollback("x")
    t.append(rows(5, 6))
    got = t.refresh().scan(columns=["id", ROW_ID]).to_arrow()
    assert ids_of(got) == [1, 2, 3, 4, 5, 6]
    ids = got.column(ROW_ID).to_pylist()
    assert len(set(ids)) == len(ids), f"row ids handed out twice: {sorted(ids)}"
    _clean(t)


def test_a_refused_publish_names_only_the_clashing_file(t):
    t.append(rows(10))  # main v2: file H
    dev = t.branches.create("dev")
    dev.delete("id = 1")  # dev rewrites F
    dev.append(rows(2))
    t.refresh().delete("id = 1")  # and so does main
    before = table_files(t.uri)
    with pytest.raises(PublishConflict) as e:
        t.branches.publish("dev")
    [f_path] = e.value.files
    assert f_path in t.scan(version=1).plan().entries.column("path").to_pylist()
    assert table_files(t.uri) == before, "a refused publish wrote something"
    assert os.path.basename(f_path) in str(e.value)


def test_orphan_cleanup_from_a_branch_s_handle_never_takes_main_s_versions(tmp_path):
    """Slot files left in a freed chunk of a branch's log ("strays") are the branch's: orphan
    cleanup run from the branch's handle must not read their numbers as main's slots."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"version.slot-chunk-size": "2", "expire.slot-retention-ms": "0"})
    for i in range(6):
        t.append(rows(i))  # main: versions 0..6, all kept
    dev = t.branches.create("dev", version=2)  # dev's log: 2 (its base), 3.., numbers main also has
    for i in range(4):
        dev.append(rows(10 + i))
    dev.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    layout = dev.branch_record.layout
    freed = dev.log.freed_ranges()
    assert freed, "the test needs a freed chunk in dev's log"
    stray = freed[0][0]
    with open(os.path.join(t.uri, layout.version_path(stray)), "wb") as f:
        f.write(b"{}")  # a slot file in a freed chunk: what an interrupted expiry leaves
    assert dev.log.scan_slots().strays == [stray]
    dev.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert t.log.list_versions() == list(range(t.refresh().version + 1)), "orphan cleanup took a version of main"
    assert ids_of(t.scan(version=stray).to_arrow()) == list(range(stray))


def test_a_branch_that_took_the_targets_own_files_does_not_give_them_back_twice(t):
    """Found by the model: b's file reached dev by a publish; publishing dev into b counted
    that file among dev's additions since its base, which b holds already."""
    b, dev = t.branches.create("b"), t.branches.create("dev")
    b.append(rows(2))
    t.branches.publish("b", into="dev")
    with pytest.raises(PublishConflict) as e:
        t.branches.publish("dev", into="b")
    assert "already live" in str(e.value) and len(e.value.files) == 1
    paths = t.branch("b").inspect.files().column("path").to_pylist()
    assert len(paths) == len(set(paths)) == 2 and ids_of(dev.refresh().to_arrow()) == [1, 2]


def test_a_publish_adding_a_file_the_target_removed_before_keeps_it_through_expiry(t):
    """A branch rolled back to a tag made on main takes back files main has since compacted
    away; publishing the branch adds those paths to main a second time. Main's expiry must
    not free them by the interval main's older versions recorded for them."""
    t.append(rows(2))  # main v2: files F and G
    t.tags.create("old")
    t.refresh().maintenance.compact(min_file_size=1 << 30)  # main: F and G rewritten into H
    dev = t.branches.create("dev")
    dev.rollback("old")  # dev: H replaced by F and G again
    t.append(rows(3))  # main moves: the publish is a rebase
    v = t.branches.publish("dev").version
    assert t.log.load(v).summary["publish"] == "rebase"
    assert ids_of(t.refresh().to_arrow()) == [1, 2, 3]
    t.tags.delete("old")
    t.branches.delete("dev")
    t.refresh().maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert ids_of(t.refresh().to_arrow()) == [1, 2, 3]
    _clean(t)


def test_a_rebase_publish_carries_the_publishes_its_branch_received(t):
    """dev's change reaches main through stage by a rebase (main moved): main records it, so
    publishing dev later applies nothing again, even after main compacted dev's file away
    (the "already live" check cannot see it then). Found by the model test."""
    dev = t.branches.create("dev")
    dev.append(rows(2))
    t.branches.create("stage")
    t.branches.publish("dev", into="stage")
    t.branch("stage").append(rows(3))
    t.append(rows(4))
    v = t.branches.publish("stage").version
    assert t.log.load(v).summary["publish"] == "rebase"
    t.refresh().maintenance.compact(min_file_size=1 << 30)
    assert t.branches.publish("dev").version is None
    assert ids_of(t.refresh().to_arrow()) == [1, 2, 3, 4]
    dev.append(rows(5))  # what dev does afterwards is still published
    t.branches.publish("dev")
    assert ids_of(t.refresh().to_arrow()) == [1, 2, 3, 4, 5]
    _clean(t)
