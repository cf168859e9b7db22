"""Rollback: a new version with an older version's files (undoable), or destructive (later versions
dropped, their tags kept)."""

from __future__ import annotations

import pytest

from lamina.commit import flush_hints
from lamina.errors import InvalidArgument
from lamina.maintenance import fsck

from support.grouped import batch, ids, new_table, on_disk


@pytest.fixture
def table(tmp_path):
    yield new_table(tmp_path)
    flush_hints()


def test_rollback_is_a_new_version_and_can_be_rolled_back(table):
    table.append(batch([1]))
    table.append(batch([2]))
    table.overwrite(batch([9]))
    v = table.rollback(2).version
    assert v == 4 and ids(table.to_arrow()) == [1, 2]
    assert table.metadata.operation == "rollback" and table.metadata.summary["rollback-to"] == 2
    assert ids(table.scan(version=3).to_arrow()) == [9]  # history kept
    table.rollback(3)  # undo the rollback
    assert ids(table.to_arrow()) == [9]
    table.tags.create("one")
    table.append(batch([5]))
    table.rollback("one")
    assert ids(table.to_arrow()) == [9]
    with pytest.raises(InvalidArgument):
        table.rollback()


def test_destructive_rollback_drops_later_versions_but_keeps_their_tags(table):
    table.append(batch([1]))  # v1
    table.append(batch([2]))  # v2
    table.tags.create("two")
    table.append(batch([3]))  # v3
    ts3 = table.metadata.timestamp_ms
    table.append(batch([4]))  # v4
    v = table.rollback(1, destructive=True).version
    assert v == 5
    assert table.log.list_versions() == [0, 1, 5]
    assert ids(table.to_arrow()) == [1]
    assert ids(table.scan(version="two").to_arrow()) == [1, 2]  # the tag's files survive
    assert ids(table.scan(timestamp=ts3).to_arrow()) == [1]  # time travel across the gap
    assert fsck(table).ok
    # the files of versions 3 and 4 only are gone: data left = v1's file and the tag's
    assert len(on_disk(table.uri, "data")) == 2
