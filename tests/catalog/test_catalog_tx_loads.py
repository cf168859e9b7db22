"""How a catalog transaction loads its tables (one catalog read each: the row gives the version and
the online flag) and where it checks the flag again (the SQL commit swaps only online rows)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lamina
from lamina.catalog.coordinator import SqlCoordinator
from lamina.commit import flush_hints
from lamina.errors import TableOffline
from lamina.spec.layout import version_path

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture(params=["sqlite", "postgres"])
def cat(request, tmp_path):
    uri = f"sqlite:///{tmp_path}/wh/catalog.db" if request.param == "sqlite" else request.getfixturevalue("pg_uri")
    c = lamina.load_catalog(uri)
    c.create_namespace("shop")
    for name in ("a", "b"):
        c.create_table(f"shop.{name}", SCHEMA).append(pa.table({"id": [1, 2]}))
    yield c
    c.close()


def data_files(cat, ident: str) -> set[str]:
    root = os.path.join(cat.table_info(ident).location, "data")
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names}


def test_a_table_taken_offline_before_the_commit_refuses_it_and_nothing_lands(cat):
    before = {t: data_files(cat, t) for t in ("shop.a", "shop.b")}
    tx = cat.transaction()
    tx.table("shop.a").append(pa.table({"id": [3]}))
    tx.table("shop.b").append(pa.table({"id": [4]}))
    cat.set_online("shop.b", False)  # after its row was read: the SQL commit refuses it
    with pytest.raises(TableOffline):
        tx.commit()
    assert tx.state == "aborted"
    assert cat.snapshot().versions == {"shop.a": 1, "shop.b": 1}
    assert {t: data_files(cat, t) for t in ("shop.a", "shop.b")} == before  # the files it wrote are deleted
    cat.set_online("shop.b", True)
    assert sorted(cat.load_table("shop.a").to_arrow().column("id").to_pylist()) == [1, 2]


def test_an_offline_table_is_refused_when_the_transaction_takes_it(cat):
    cat.set_online("shop.a", False)
    tx = cat.transaction()
    with pytest.raises(TableOffline):
        tx.table("shop.a")
    assert cat.snapshot().versions["shop.a"] == 1


def test_taking_a_table_completes_a_publish_its_writer_left_undone(cat, monkeypatch):
    # The writer stops right after its row swap: version 2 is committed but only staged.
    monkeypatch.setattr(SqlCoordinator, "_publish_final", lambda *a, **k: None)
    cat.load_table("shop.a").append(pa.table({"id": [5]}))
    monkeypatch.undo()
    flush_hints()
    location = cat.table_info("shop.a").location
    assert not os.path.exists(os.path.join(location, version_path(2)))
    with cat.transaction() as tx:
        changes = tx.table("shop.a")
        assert changes.table.version == 2  # loaded at the row's version, published on the way
        assert os.path.exists(os.path.join(location, version_path(2)))
        changes.append(pa.table({"id": [6]}))
    assert tx.versions == {"shop.a": 3}
    assert sorted(lamina.open_table(location).to_arrow().column("id").to_pylist()) == [1, 2, 5, 6]
