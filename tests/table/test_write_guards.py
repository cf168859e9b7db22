"""Every method that writes or deletes anything is marked ``@writes`` (lamina.table.guards),
and a marked method refuses before any file is written: on a table whose latest version
needs a writer feature this Lamina lacks (UnsupportedFeature), and on a catalog's table taken
offline (TableOffline).

``CALLS`` names one call of every writing method of Table and of its namespaces (``t.tags``,
``t.branches``, ``t.maintenance``). The test fails if a method is marked but has no call here
(add it) or has a call here but is not marked (mark it), so the list is the code's."""

from __future__ import annotations

import inspect
import uuid
from datetime import timedelta
from typing import Any, Callable

import pyarrow as pa
import pytest

import lamina
from lamina.errors import TableOffline, UnsupportedFeature
from lamina.spec.layout import version_path
from lamina.table.branches import Branches
from lamina.table.guards import is_write
from lamina.table.maintenance import Maintenance
from lamina.table.tags import Tags
from support.files import table_files

SCHEMA = pa.schema([("id", pa.int64()), ("note", pa.string())])
NOW = timedelta(0)


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "note": [f"n{i}" for i in ids]})


CALLS: dict[str, Callable[[Any], Any]] = {
    "Table.transaction": lambda t: t.transaction(),
    "Table.append": lambda t: t.append(rows([7])),
    "Table.overwrite": lambda t: t.overwrite(rows([7])),
    "Table.add_files": lambda t: t.add_files(pa.table({"path": ["data/x.parquet"]}), check_files=False),
    "Table.delete": lambda t: t.delete("id = 1"),
    "Table.update": lambda t: t.update("id = 1", {"note": "'x'"}),
    "Table.merge": lambda t: t.merge(rows([1, 9]), on="id"),
    "Table.rollback": lambda t: t.rollback(1),
    "Table.update_schema": lambda t: t.update_schema(),
    "Table.update_spec": lambda t: t.update_spec(),
    "Table.update_sort_order": lambda t: t.update_sort_order(),
    "Table.update_properties": lambda t: t.update_properties({"write.target-file-size-bytes": "1000000"}),
    "Table.enable_row_lineage": lambda t: t.enable_row_lineage(),
    "Table.set_iceberg_enabled": lambda t: t.set_iceberg_enabled(),
    "Table.sync_iceberg": lambda t: t.sync_iceberg(),
    "Tags.create": lambda t: t.tags.create("new"),
    "Tags.replace": lambda t: t.tags.replace("keep", 1),
    "Tags.rename": lambda t: t.tags.rename("keep", "kept"),
    "Tags.delete": lambda t: t.tags.delete("keep"),
    "Branches.create": lambda t: t.branches.create("other"),
    "Branches.rename": lambda t: t.branches.rename("dev", "qa"),
    "Branches.delete": lambda t: t.branches.delete("dev"),
    "Branches.publish": lambda t: t.branches.publish("dev"),
    "Maintenance.compact": lambda t: t.maintenance.compact(),
    "Maintenance.rewrite_manifests": lambda t: t.maintenance.rewrite_manifests(),
    "Maintenance.expire_versions": lambda t: t.maintenance.expire_versions(retain_last=1, reader_grace=NOW),
    "Maintenance.remove_orphans": lambda t: t.maintenance.remove_orphans(NOW, allow_short_age=True),
}


def marked() -> set[str]:
    out = set()
    for cls in (lamina.Table, Tags, Branches, Maintenance):
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if is_write(member):
                out.add(f"{cls.__name__}.{name}")
    return out


def test_every_writing_method_is_marked_and_listed():
    assert marked() == set(CALLS)


def _history(t: lamina.Table) -> None:
    """Versions 1 and 2, tag ``keep``, branch ``dev`` with a commit of its own."""
    t.append(rows([1, 2]))
    t.append(rows([3]))
    t.tags.create("keep", 1)
    t.branches.create("dev").append(rows([4]))


def test_a_table_needing_an_unknown_writer_feature_refuses_every_write(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    _history(t)
    # A newer Lamina commits the next version with a writer feature of its own.
    vm = t.log.latest()
    future = vm.next(version=vm.version + 1, parent_version=vm.version, timestamp_ms=vm.timestamp_ms + 1,
                     commit_id=uuid.uuid4().hex, writer_features=vm.writer_features + ("future-feature",))
    t.io.put_if_absent(version_path(future.version), future.to_json())
    t = lamina.open_table(uri)
    before = table_files(uri)
    for name, call in CALLS.items():
        with pytest.raises(UnsupportedFeature, match="future-feature"):
            call(t)
        assert table_files(uri) == before, f"{name} wrote before refusing"
    assert t.to_arrow().num_rows == 3  # reads are fine: it is a writer feature


def test_an_offline_catalog_table_refuses_every_write(tmp_path):
    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/wh/catalog.db")
    try:
        cat.create_namespace("ns")
        t = cat.create_table("ns.t", SCHEMA)
        _history(t)
        cat.set_online("ns.t", False)
        before = table_files(t.uri)
        for name, call in CALLS.items():
            with pytest.raises(TableOffline):
                call(t)
            assert table_files(t.uri) == before, f"{name} wrote before refusing"
    finally:
        cat.close()
