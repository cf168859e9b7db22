"""Table locations (lamina.io): memory:// and file:// URIs, and paths kept inside the table."""

from __future__ import annotations

import os

import pytest

import lamina
from lamina.io import FileIO
from lamina.maintenance import fsck

from support.sample import SCHEMA, batch, ids


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
