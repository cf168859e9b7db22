"""System tables ($snapshots, $tags, $files, $manifests) as Arrow tables."""

from __future__ import annotations

import pytest

from lamina.commit import flush_hints
from lamina.errors import InvalidArgument

from support.grouped import batch, new_table


@pytest.fixture
def table(tmp_path):
    yield new_table(tmp_path)
    flush_hints()


def test_system_tables(table):
    table.append(batch(range(4)))
    table.append(batch(range(4, 6), "b"))
    table.create_tag("t1", 1)
    snaps = table.system_table("$snapshots")
    assert snaps.column("version").to_pylist() == [0, 1, 2]
    assert snaps.column("operation").to_pylist() == ["create", "append", "append"]
    assert snaps.column("parent_version").to_pylist() == [None, 0, 1]
    tags = table.system_table("$tags").to_pylist()
    assert [(r["tag_name"], r["tagged_version"], r["record_count"]) for r in tags] == [("t1", 1, 4)]
    files = table.system_table("$files")
    assert files.num_rows == 2 and sorted(files.column("record_count").to_pylist()) == [2, 4]
    assert files.column("lower.id").to_pylist() in ([0, 4], [4, 0])
    assert table.files(tag="t1").num_rows == 1
    m = table.system_table("$manifests")
    assert m.column("kind").to_pylist()[0] == "root" and m.column("file_count").to_pylist()[0] == 2
    with pytest.raises(InvalidArgument, match=r"\$snapshots"):
        table.system_table("$nope")
