"""The version log (lamina.commit.log) finds the latest version through the hint, and past a
hint that is missing, stale, damaged, ahead, or another table's."""

from __future__ import annotations

import os

import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import CorruptMetadata, TableNotFound
from lamina.io import FileIO
from lamina.spec.hint import VersionHint
from lamina.spec.layout import HINT_PATH, version_path

from support.sample import SCHEMA, batch, ids


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def _hint(uri) -> VersionHint:
    flush_hints()
    return VersionHint.parse(FileIO(uri).get(HINT_PATH))


def test_hint_written_after_each_commit(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 1))
    h = _hint(uri)
    assert (h.version, h.table_uuid, h.manifest_path) == (1, t.uuid, version_path(1))
    assert "manifest-tree-v1" in h.reader_features and h.format_version == 1


@pytest.mark.parametrize("damage", ["missing", "stale", "corrupt", "other-table", "ahead"])
def test_open_latest_survives_a_bad_hint(uri, tmp_path, damage):
    t = lamina.create_table(uri, SCHEMA)
    for i in range(5):
        t.append(batch(i * 2, 2))
    flush_hints()  # hints are written in the background; plant the damage after them
    io = FileIO(uri)
    path = io.local_path(HINT_PATH)
    if damage == "missing":
        os.remove(path)
    elif damage == "stale":
        io.put(HINT_PATH, VersionHint(1, version_path(1), t.uuid, None, 0, (), (), 1).to_json())
    elif damage == "corrupt":
        io.put(HINT_PATH, b'{"version": 3, "manif')
    elif damage == "other-table":
        other = lamina.create_table(str(tmp_path / "other"), SCHEMA)
        io.put(HINT_PATH, VersionHint(0, version_path(0), other.uuid, None, 0, (), (), 1).to_json())
    elif damage == "ahead":
        io.put(HINT_PATH, VersionHint(99, version_path(99), t.uuid, None, 0, (), (), 1).to_json())
    t2 = lamina.open_table(uri)
    assert t2.version == 5 and ids(t2.scan().to_arrow()) == list(range(10))


def test_no_list_reader_uses_hint_and_probes(uri):
    t = lamina.create_table(uri, SCHEMA)
    for i in range(3):
        t.append(batch(i, 1))
    flush_hints()
    FileIO(uri).put(HINT_PATH, VersionHint(1, version_path(1), t.uuid, None, 0, (), (), 1).to_json())
    t2 = lamina.open_table(uri, allow_list=False)
    assert t2.version == 3


def test_uuid_check_refuses_another_table(uri, tmp_path):
    t = lamina.create_table(uri, SCHEMA)
    with pytest.raises((CorruptMetadata, TableNotFound)):
        lamina.open_table(uri, table_uuid="not-" + t.uuid)
