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


@pytest.mark.parametrize("retention_ms", ["0", "86400000"], ids=["chunks-freed", "slots-kept-under-records"])
def test_loading_many_versions_is_loading_each(tmp_path, retention_ms):
    """try_load_many (history, change ranges) gives exactly what try_load gives version by
    version: expired versions (slots still holding their manifest under a range record, or
    freed chunks), versions a destructive rollback dropped, numbers below 0 and above the
    latest all left out."""
    from datetime import timedelta

    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={
        "version.slot-chunk-size": "3", "expire.slot-retention-ms": retention_ms})
    for i in range(14):
        t.append(batch(i, 1))
    t.maintenance.expire_versions(retain_last=6, reader_grace=timedelta(0))  # versions 0..8: records, freed chunks
    t.rollback(12, destructive=True)  # 13 and 14 dropped; the rollback is version 15
    t.append(batch(99, 1))  # 16
    flush_hints()
    log = lamina.open_table(t.uri).log
    if retention_ms != "0":  # the expired versions' manifests are still in their slots
        assert all(isinstance(log.read_slot(v), type(t.metadata)) for v in range(9))
    span = range(-2, t.version + 4)
    want = {v: vm for v in span if (vm := log.try_load(v)) is not None}
    got = log.try_load_many(span)
    assert {v: vm.commit_id for v, vm in got.items()} == {v: vm.commit_id for v, vm in want.items()}
    assert sorted(got) == [9, 10, 11, 12, 15, 16]
    assert [r["version"] for r in lamina.open_table(t.uri).history()] == [16, 15, 12, 11, 10, 9]
    assert [r["version"] for r in lamina.open_table(t.uri).history(limit=2)] == [16, 15]
