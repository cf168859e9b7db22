"""Bad input to row lineage and the change feed: a typed error that says
what to do, raised before any data file is read, with nothing written.

Ranges: an end before its start, versions that never existed, ranges reaching expired
versions or a run a destructive rollback dropped, tables without lineage. Corrupt lineage
state: a version that keeps lineage without its row id counter, a live file whose entry
lacks ``first_row_id``; reading its ids or rewriting it fails naming the file, rather than
numbering its rows afresh or counting ids from 0 again.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from support.files import rewrite_root

import lamina
from lamina.data.scan import Scan
from lamina.errors import ChangesUnavailable, CorruptMetadata, InvalidArgument, RowLineageNotEnabled, SchemaMismatch, VersionNotFound
from lamina.manifest import files as manifest_files
from lamina.spec.layout import version_path

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


def tree(root: str) -> list[tuple[str, int, int]]:
    """Every file under ``root`` with its size and modification time."""
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            st = os.stat(os.path.join(d, n))
            out.append((os.path.relpath(os.path.join(d, n), root), st.st_size, st.st_mtime_ns))
    return sorted(out)


@pytest.fixture
def no_data_reads(monkeypatch):
    """Fails the test if any data file is read while it is in use."""
    def refuse(self, path, *args, **kwargs):  # noqa: ANN001
        raise AssertionError(f"data file {path} was read")

    monkeypatch.setattr(Scan, "read_file", refuse)


@pytest.fixture
def t(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"expire.reader-grace-ms": "0"})
    for i in range(5):
        t.append(rows(i))  # versions 1..5
    lamina.commit.flush_hints()
    return t


def at(t: lamina.Table, version: int) -> datetime:
    return datetime.fromtimestamp(t.log.load(version).timestamp_ms / 1000, timezone.utc)


def test_bad_ranges_fail_before_reading(t, no_data_reads):
    before = tree(t.uri)
    with pytest.raises(InvalidArgument, match="ends at version 2, before its start 4"):
        t.changes(4, 2)
    with pytest.raises(InvalidArgument, match="before its start"):
        t.changes(start_timestamp=at(t, 4), end_timestamp=at(t, 2))
    for call in (lambda: t.changes(6), lambda: t.changes(1, 9), lambda: t.changes(1, "nope")):
        with pytest.raises(VersionNotFound) as e:
            call()
        assert not isinstance(e.value, ChangesUnavailable)  # never existed: nothing to start from instead
    with pytest.raises(VersionNotFound, match="latest version is 5"):
        t.changes(6)
    for bad in (-1, "-1", 1.5, True, "²"):
        with pytest.raises(InvalidArgument, match="version"):
            t.changes(bad)
    with pytest.raises(InvalidArgument, match="exactly one of"):
        t.changes(1, start_timestamp=at(t, 1))
    with pytest.raises(InvalidArgument, match="not both"):
        t.changes(1, 3, end_timestamp=at(t, 3))
    assert tree(t.uri) == before


def test_ranges_into_expired_versions_name_the_oldest_answerable(t, no_data_reads):
    t.maintenance.expire_versions(retain_last=3)  # 3, 4, 5 are left
    assert t.log.list_versions() == [3, 4, 5]
    before = tree(t.uri)
    for call in (lambda: t.changes(1), lambda: t.changes(0, 4), lambda: t.changes(2, 5)):
        with pytest.raises(ChangesUnavailable, match="the oldest start version still answerable is 3") as e:
            call()
        assert e.value.oldest == 3
    with pytest.raises(ChangesUnavailable, match="version 1 was expired"):
        t.changes(1)
    assert tree(t.uri) == before
    assert t.changes(3).versions == [4, 5]


def test_a_range_across_versions_a_rollback_dropped(t, no_data_reads):
    t.rollback(2, destructive=True)  # version 6; 3, 4 and 5 are dropped
    assert t.version == 6 and t.log.try_load(4) is None
    with pytest.raises(ChangesUnavailable, match="version 3 of the range") as e:
        t.changes(2)
    assert e.value.oldest == 6
    with pytest.raises(ChangesUnavailable, match="version 4 was expired or dropped"):
        t.changes(4)


def test_a_table_without_lineage_refuses_ids_and_changes(tmp_path, no_data_reads):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"row-lineage.enabled": "false"})
    t.append(rows(1, 2))
    lamina.commit.flush_hints()
    before = tree(t.uri)
    for columns in (["id", "_row_id"], ["_last_updated_version"]):
        with pytest.raises(RowLineageNotEnabled, match="enable_row_lineage"):
            t.scan(columns=columns)
    for call in (lambda: t.changes(0), lambda: t.changes(0, columns=["_row_id"]), lambda: t.changes(1)):
        with pytest.raises(ChangesUnavailable, match="enable_row_lineage") as e:
            call()
        assert e.value.oldest is None
    assert tree(t.uri) == before


def corrupt_counter(t: lamina.Table) -> None:
    """The latest version manifest loses its next_row_id, lineage still on."""
    path = os.path.join(t.uri, version_path(t.version))
    with open(path) as f:
        j = json.load(f)
    assert j.pop("next_row_id") > 0 and "row-lineage" in j["writer_features"]
    with open(path, "w") as f:
        json.dump(j, f)


def test_a_version_without_its_row_id_counter_takes_no_commit(t):
    corrupt_counter(t)
    t = lamina.open_table(t.uri)
    before = tree(t.uri)
    for write in (lambda: t.append(rows(9)), lambda: t.update(where="id = 1", set={"v": "'U'"}),
                  lambda: t.overwrite(rows(7))):
        with pytest.raises(CorruptMetadata, match="next_row_id is None; nothing was committed"):
            write()
    assert lamina.open_table(t.uri).version == 5
    assert [(p, s) for p, s, _ in tree(t.uri) if "/versions/" in p] == [(p, s) for p, s, _ in before if "/versions/" in p]
    # the ids it has are still read: only counting on from it is refused
    assert sorted(t.scan(columns=["_row_id"]).to_arrow().column("_row_id").to_pylist()) == [0, 1, 2, 3, 4]


def lose_first_row_id(t: lamina.Table, id_value: int) -> str:
    """The latest root manifest (entries inline) loses the first_row_id of the file holding
    row ``id_value``; returns that file's path."""
    target = t.scan(where=f"id = {id_value}").plan().paths[0]

    def edit(entries: pa.Table) -> pa.Table:
        i = entries.schema.get_field_index("first_row_id")
        hit = pc.equal(entries.column("path"), target)
        return entries.set_column(i, entries.schema.field(i), pc.if_else(hit, pa.scalar(None, pa.int64()), entries.column(i)))

    rewrite_root(t, edit)
    manifest_files.clear_cache()
    return target


def test_a_file_without_first_row_id_is_named_and_never_renumbered(t):
    t.append(rows(5, 6))  # version 6
    path = lose_first_row_id(t, 5)
    t = lamina.open_table(t.uri)
    assert sorted(t.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 6]  # plain reads need no ids
    lamina.commit.flush_hints()
    before = tree(t.uri)
    reads = [lambda: t.scan(columns=["id", "_row_id"]).to_arrow(), lambda: t.changes(5).to_arrow(),
             lambda: t.scan(where="id = 5", columns=["_last_updated_version"]).to_arrow()]
    # every write that re-lists or rewrites the file: its rows would get new ids
    writes = [lambda: t.update(where="id = 5", set={"v": "'U'"}), lambda: t.delete("id = 5", mode="merge-on-read"),
              lambda: t.delete("id = 5", mode="copy-on-write"), lambda: t.overwrite(rows(5), where="id = 5"),
              lambda: t.maintenance.compact(), lambda: t.merge(rows(5), on="id").when_matched_update_all().execute()]
    for call in reads + writes:
        with pytest.raises(CorruptMetadata, match=f"data file {path} of version 6 has no first_row_id"):
            call()
    assert tree(t.uri) == before
    # the rest of the table is unaffected: the versions before, the other files, and
    # deleting every row of the file (nothing of it is kept)
    assert t.changes(1, 5).count() == 4
    assert t.delete("id = 1").version == 7
    assert t.delete("id >= 5", mode="merge-on-read").version == 8
    with pytest.raises(CorruptMetadata, match=f"data file {path} of version 6 has no first_row_id"):
        t.rollback(6)  # re-adding it would number its rows afresh
    assert t.rollback(5).version == 9


@pytest.mark.parametrize("name", ["_row_id", "_last_updated_version", "_change_type", "_commit_version", "_commit_timestamp"])
def test_metadata_column_names_are_not_table_columns(tmp_path, name):
    """A column named as a metadata column would be taken for it (appends failed with a
    KeyError, the feed could not be built): a new table refuses the name."""
    with pytest.raises(SchemaMismatch, match=f"column name '{name}' is reserved"):
        lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), (name, pa.int64())]))
    assert not os.path.exists(tmp_path / "t" / "_lamina")


def test_enabling_lineage_on_a_table_with_a_metadata_column_name_asks_for_a_rename(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("ct", pa.string())]),
                            properties={"row-lineage.enabled": "false"})
    t.append(pa.table({"id": [1], "ct": ["a"]}))
    # a table from before the names were reserved: its version manifest names the column so
    path = os.path.join(t.uri, version_path(t.version))
    with open(path) as f:
        j = json.load(f)
    j["schema"]["fields"][1]["name"] = "_change_type"
    with open(path, "w") as f:
        json.dump(j, f)
    t = lamina.open_table(t.uri)
    with pytest.raises(SchemaMismatch, match=r"columns named \['_change_type'\].*rename_column"):
        t.enable_row_lineage()
    assert t.refresh().version == 1
    t.update_schema().rename_column("_change_type", "change").commit()
    on = t.enable_row_lineage().version
    t.append(pa.table({"id": [2], "change": ["b"]}))
    got = t.changes(on, columns=["id", "change"]).to_arrow().select(["id", "change", "_change_type", "_commit_version"])
    assert got.to_pylist() == [{"id": 2, "change": "b", "_change_type": "insert", "_commit_version": on + 1}]


def test_fsck_reports_broken_row_lineage(t):
    from lamina.maintenance import fsck

    assert fsck(t).ok  # five appends: ranges 0..4, counter 5
    path = lose_first_row_id(t, 3)
    report = fsck(lamina.open_table(t.uri))
    assert not report.ok and any(f"have no first_row_id, e.g. ['{path}']" in e for e in report.errors), report.errors
    assert report.unreferenced_known  # lineage damage hides no reference


def test_fsck_reports_overlapping_ids_and_a_counter_behind_them(t):
    from lamina.maintenance import fsck

    def edit(entries: pa.Table) -> pa.Table:
        i = entries.schema.get_field_index("first_row_id")
        return entries.set_column(i, entries.schema.field(i), pa.array([0, 0, 2, 3, 9], pa.int64()))  # two share id 0

    rewrite_root(t, edit)
    manifest_files.clear_cache()
    errors = fsck(lamina.open_table(t.uri)).errors
    assert any("1 data file(s) have row ids another live file has" in e for e in errors), errors
    assert any("row ids up to 9, at or beyond next_row_id 5" in e for e in errors), errors
