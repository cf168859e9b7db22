"""Tags (the tag store, TagStore): names, create/replace/rename/delete, a tag keeping its
version's files past expiry, time travel falling back to a tag, tag expiry, damaged tag files,
and a create whose answer was lost."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import (
    CorruptMetadata,
    InvalidArgument,
    InvalidTagName,
    TagAlreadyExists,
    TagNotFound,
    VersionNotFound,
)
from lamina.maintenance import fsck
from lamina.spec.layout import TAGS_DIR

from support import workers
from support.grouped import NOW, batch, ids, new_table, on_disk


@pytest.fixture
def table(tmp_path):
    yield new_table(tmp_path)
    flush_hints()


@pytest.mark.parametrize(
    "name", ["", "123", "-7", "a/b", "..", "x..y", ".hidden", "bad\x01name", "tab\tname", "a b", "x" * 201, "é"]
)
def test_bad_tag_names_are_refused_and_nothing_is_written(table, name):
    with pytest.raises(InvalidTagName):
        table.tags.create(name)
    assert not os.path.exists(os.path.join(table.uri, TAGS_DIR)) or not os.listdir(os.path.join(table.uri, TAGS_DIR))


def test_tag_create_is_put_if_absent_and_reads_everywhere(table):
    table.append(batch(range(3)))
    tag = table.tags.create("v1.0")
    assert tag.tagged_version == 1
    table.append(batch(range(3, 5)))
    with pytest.raises(TagAlreadyExists, match="tags.replace"):
        table.tags.create("v1.0")
    assert table.tags.get("v1.0").tagged_version == 1  # not overwritten
    assert ids(table.scan(version="v1.0").to_arrow()) == [0, 1, 2]  # versionAsOf takes a tag name
    assert ids(lamina.open_table(table.uri, version="v1.0").to_arrow()) == [0, 1, 2]
    assert [t.name for t in table.tags.list()] == ["v1.0"]
    with pytest.raises(TagNotFound):
        table.scan(version="nope")
    with pytest.raises(InvalidArgument):
        table.scan(version="v1.0", timestamp=0)


def test_replace_and_rename_tag(table):
    table.append(batch([1]))
    table.tags.create("prod")
    table.append(batch([2]))
    table.tags.replace("prod")
    assert table.tags.get("prod").tagged_version == 2
    table.tags.rename("prod", "prod-old")
    assert [t.name for t in table.tags.list()] == ["prod-old"]
    with pytest.raises(TagNotFound):
        table.tags.get("prod")


def test_tag_outlives_its_expired_version_and_deleting_it_frees_only_its_files(table):
    table.append(batch(range(10)))
    table.tags.create("snap")  # version 1
    table.overwrite(batch(range(100, 102)))
    table.append(batch([200]))
    before = on_disk(table.uri, "data")
    rep = table.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert rep.expired_versions == [0, 1, 2]
    assert rep.kept_for_tags == 1 and rep.deleted_files == []  # the tagged file stays
    assert ids(table.scan(version="snap").to_arrow()) == list(range(10))
    with pytest.raises(VersionNotFound):
        table.scan(version=1)
    assert fsck(table).ok
    freed = table.tags.delete("snap")
    assert len(freed.deleted_files) == 1 and freed.deleted_bytes > 0
    assert on_disk(table.uri, "data") == before - set(freed.deleted_files)
    assert ids(table.refresh().to_arrow()) == [100, 101, 200]


def test_timestamp_before_every_retained_version_falls_back_to_the_newest_tag(table):
    table.append(batch([1]))
    table.tags.create("first")
    table.append(batch([2]))
    t1 = table.metadata.timestamp_ms
    table.append(batch([3]))
    table.append(batch([4]))
    table.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert ids(table.scan(timestamp=t1).to_arrow()) == [1]  # versions <= t1 are gone: tag 'first'
    with pytest.raises(VersionNotFound):
        table.scan(timestamp=0)


def test_expired_tags_are_deleted_by_expiry(table):
    table.append(batch([1]))
    table.tags.create("short", expires_at=datetime.now(timezone.utc) - timedelta(seconds=1))
    table.tags.create("long", expires_at=timedelta(days=30))
    rep = table.maintenance.expire_versions(retain_last=5, reader_grace=NOW)
    assert rep.expired_tags == ["short"]
    assert [t.name for t in table.tags.list()] == ["long"]


def test_corrupt_tag_file_is_a_clear_error(table):
    table.append(batch([1]))
    table.tags.create("ok")
    with open(os.path.join(table.uri, TAGS_DIR, "bad.json"), "wb") as f:
        f.write(b'{"name": "bad", "tagged_version": 3')
    with pytest.raises(CorruptMetadata, match="tag file"):
        table.scan(version="bad")


def test_a_tag_created_through_a_lost_answer_is_created_once(tmp_path):
    from lamina.commit import VersionLog
    from lamina.io import FileIO
    from support.faults import FaultInjectingIO
    from lamina.commit.tags import TagStore

    uri = str(tmp_path / "t")
    lamina.create_table(uri, workers.schema()).append(workers.batch(0, 0, 3))
    for fault in ("lost", "retried"):
        rates = {"lost_rate": 1.0} if fault == "lost" else {"retried_rate": 1.0}
        fio = FaultInjectingIO(FileIO(uri), error_rate=0.0, slow_rate=0.0, only={"_create_once"}, **{"lost_rate": 0.0, **rates})
        log = VersionLog(fio)
        tag = TagStore(fio, log).create(f"t-{fault}", log.latest())  # the first attempt lands, its answer is lost
        assert fio.stats[f"_create_once:{fault}"] >= 1
        assert lamina.open_table(uri).tags.get(f"t-{fault}").tagged_version == tag.tagged_version == 1


# A tag of the version its creator read as the newest skips its checks when that version is
# still the newest after the tag is written (one request on S3, tests/io/test_s3.py). When it
# is not, every check runs: these are the races the shortcut must not let through.

def test_a_tag_of_a_version_expired_between_the_read_and_the_write_is_withdrawn(table):
    table.append(batch([1]))
    read = table.log.latest()  # a creator read version 1 as the newest ...
    other = lamina.open_table(table.uri)
    other.append(batch([2]))  # ... then another writer committed and expired it
    other.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    with pytest.raises(VersionNotFound, match="was expired while tag 'late' was being created"):
        table.tag_store.create("late", read, latest=read)
    assert table.tags.list() == []
    assert fsck(other).ok


def test_a_tag_racing_the_first_branch_of_its_name_is_refused(table):
    table.append(batch([1]))
    read = table.log.latest()  # no branch feature yet in the version read
    other = lamina.open_table(table.uri)
    other.branches.create("audit")  # enables branches (a new version), then the record
    with pytest.raises(TagAlreadyExists, match="'audit' is a branch"):
        table.tag_store.create("audit", read, latest=read)
    assert table.tags.list() == [] and [b.name for b in other.branches.list()] == ["audit"]


def test_a_tag_of_the_newest_version_needs_no_confirmation_and_reads_back(table):
    table.append(batch([1, 2]))
    tag = table.tags.create("now")
    assert tag.tagged_version == table.version == 1
    assert ids(table.scan(version="now").to_arrow()) == [1, 2]


def test_a_tag_from_a_handle_whose_version_was_expired_and_its_slots_freed(tmp_path):
    """The handle's version is taken as the latest only if the slot above it is empty *and*
    cannot lie in a freed chunk: here the versions from the handle's on were expired and their
    slots freed (retention 0), so the empty slot says nothing. The default tag must name the
    table's latest; a tag of the handle's (expired) version must be refused."""
    props = {"version.slot-chunk-size": "2", "expire.slot-retention-ms": "0"}
    t = lamina.create_table(str(tmp_path / "t"), batch([0]).schema, properties=props)
    t.append(batch([1]))
    held = lamina.open_table(t.uri)  # version 1, held while the table moves on
    for i in range(2, 7):
        t.append(batch([i]))
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert rep.freed_slots >= 4
    assert held.log.is_newest(held.version)  # the slot above the handle's version is gone ...
    tag = held.tags.create("latest")  # ... yet the tag names the real latest
    assert tag.tagged_version == t.version == 6
    assert ids(t.scan(version="latest").to_arrow()) == list(range(1, 7))
    with pytest.raises(VersionNotFound):
        held.tags.create("old", held.version)
    assert [x.name for x in t.tags.list()] == ["latest"]
    assert fsck(t).ok
