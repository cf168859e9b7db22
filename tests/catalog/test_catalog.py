"""Catalog behaviour on SQLite, a real PostgreSQL server and a plain warehouse directory.

Namespaces, tables by name, rename/drop/online, catalog-less (path) readers of
catalog tables, and bad input: every refusal is a typed error and
changes nothing.
"""

from __future__ import annotations

import json
import os
import socket

import pyarrow as pa
import pytest

import lamina
from lamina.catalog import DirectoryCatalog, SqlCatalog
from lamina.commit import flush_hints
from lamina.errors import (
    CatalogError,
    CatalogTableAlreadyExists,
    CatalogTableNotFound,
    CatalogUnreachable,
    InvalidCatalogUri,
    InvalidIdentifier,
    LaminaError,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    TableAlreadyExists,
    TableInUse,
    TableOffline,
)
from lamina.spec.layout import HINT_PATH
from lamina.data.inflight import register_write

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def _data(ids, day="d1"):
    return pa.table({"id": pa.array(ids, pa.int64()), "day": [day] * len(ids)})


@pytest.fixture(params=["sqlite", "postgres", "directory"])
def cat(request, tmp_path):
    if request.param == "sqlite":
        c = lamina.load_catalog(f"sqlite:///{tmp_path}/wh/catalog.db")
    elif request.param == "postgres":
        c = lamina.load_catalog(request.getfixturevalue("pg_uri"))
    else:
        c = lamina.load_catalog(str(tmp_path / "wh"))
    yield c
    c.close()


@pytest.fixture(params=["sqlite", "postgres"])
def sql_cat(request, tmp_path):
    if request.param == "sqlite":
        c = lamina.load_catalog(f"sqlite:///{tmp_path}/wh/catalog.db")
    else:
        c = lamina.load_catalog(request.getfixturevalue("pg_uri"))
    yield c
    c.close()


def _state(c) -> tuple:
    """Everything a refused operation must leave unchanged."""
    infos = [(i.identifier, i.uuid, i.location, i.version, i.online) for i in c.tables()]
    return c.list_namespaces(), infos


# --- namespaces ---------------------------------------------------------------------------


def test_namespaces(cat):
    assert cat.list_namespaces() == []
    cat.create_namespace("b")
    cat.create_namespace("a")
    assert cat.list_namespaces() == ["a", "b"]
    assert cat.namespace_exists("a") and not cat.namespace_exists("c")
    with pytest.raises(NamespaceAlreadyExists):
        cat.create_namespace("a")
    cat.create_table("a.t", SCHEMA)
    with pytest.raises(NamespaceNotEmpty):
        cat.drop_namespace("a")
    cat.drop_namespace("b")
    with pytest.raises(NamespaceNotFound):
        cat.drop_namespace("b")
    with pytest.raises(NamespaceNotFound):
        cat.list_tables("b")
    assert cat.list_namespaces() == ["a"]
    cat.drop_table("a.t", purge=True)
    cat.drop_namespace("a")
    assert cat.list_namespaces() == []


# --- tables --------------------------------------------------------------------------------


def test_create_load_list(cat, tmp_path):
    cat.create_namespace("sales")
    t = cat.create_table("sales.orders", SCHEMA, partition_by=["day"], properties={"owner": "me"})
    assert t.identifier == "sales.orders" and t.version == 0
    assert t.uri == str(tmp_path / "wh" / "sales" / "orders")
    assert t.append(_data([1, 2])).version == 1
    cat.create_table(("sales", "returns"), SCHEMA)
    assert cat.list_tables("sales") == ["sales.orders", "sales.returns"]
    assert cat.table_exists("sales.orders") and not cat.table_exists("sales.nope")
    info = cat.table_info("sales.orders")
    assert (info.namespace, info.name, info.uuid, info.location, info.online, info.version) == (
        "sales", "orders", t.uuid, t.uri, True, 1)
    assert [f["name"] for f in info.schema["fields"]] == ["id", "day"]
    t2 = cat.load_table("sales.orders")
    assert t2.version == 1 and t2.properties["owner"] == "me"
    assert t2.scan(where="id = 2").to_arrow().num_rows == 1
    assert t2.partition_spec.fields[0].name == "day"
    with pytest.raises(CatalogTableAlreadyExists):
        cat.create_table("sales.orders", SCHEMA)
    with pytest.raises(CatalogTableNotFound):
        cat.load_table("sales.nope")
    with pytest.raises(NamespaceNotFound):
        cat.create_table("nope.t", SCHEMA)
    assert not os.path.exists(tmp_path / "wh" / "nope")


def test_create_takes_the_schema_of_data(cat):
    """As lamina.create_table: a DataFrame (or Arrow data) gives the schema; its rows are not written."""
    import pandas as pd

    cat.create_namespace("sales")
    df = pd.DataFrame({"id": [1, 2], "day": ["d1", "d2"], "ts": pd.to_datetime(["2024-01-01", "2024-01-02"])})
    t = cat.create_table("sales.orders", df)
    assert [(f.name, str(f.type)) for f in t.schema] == [("id", "int64"), ("day", "string"), ("ts", "timestamp[us]")]
    assert t.version == 0 and t.to_arrow().num_rows == 0
    assert t.append(df).version == 1 and sorted(t.to_arrow().column("id").to_pylist()) == [1, 2]


def test_create_refuses_a_location_holding_a_table(sql_cat, tmp_path):
    sql_cat.create_namespace("ns")
    existing = lamina.create_table(str(tmp_path / "elsewhere"), SCHEMA)
    before = _state(sql_cat)
    with pytest.raises(TableAlreadyExists):
        sql_cat.create_table("ns.t", SCHEMA, location=existing.uri)
    assert _state(sql_cat) == before
    assert lamina.open_table(existing.uri).uuid == existing.uuid
    t = sql_cat.create_table("ns.t", SCHEMA, location=str(tmp_path / "custom"))
    assert t.uri == str(tmp_path / "custom")
    with pytest.raises(CatalogTableAlreadyExists):  # one location, one catalog table
        sql_cat.create_table("ns.u", SCHEMA, location=t.uri)


def test_rename(cat):
    cat.create_namespace("a")
    cat.create_namespace("b")
    t = cat.create_table("a.t", SCHEMA)
    t.append(_data([1]))
    cat.create_table("a.other", SCHEMA)
    before = _state(cat)
    with pytest.raises(CatalogTableAlreadyExists):
        cat.rename_table("a.t", "a.other")
    with pytest.raises(CatalogTableNotFound):
        cat.rename_table("a.missing", "a.x")
    with pytest.raises(NamespaceNotFound):
        cat.rename_table("a.t", "zz.t")
    assert _state(cat) == before
    cat.rename_table("a.t", "b.renamed")
    assert not cat.table_exists("a.t")
    t2 = cat.load_table("b.renamed")
    assert t2.uuid == t.uuid and t2.scan().to_arrow().num_rows == 1
    assert t2.append(_data([2])).version == 2


def test_rename_keeps_path_readers_working(sql_cat):
    """The location does not move on rename, so readers by path need no catalog."""
    sql_cat.create_namespace("ns")
    t = sql_cat.create_table("ns.t", SCHEMA)
    t.append(_data([1, 2]))
    path_reader = lamina.open_table(t.uri, table_uuid=t.uuid)
    sql_cat.rename_table("ns.t", "ns.u")
    u = sql_cat.load_table("ns.u")
    assert u.uri == t.uri
    u.append(_data([3]))
    flush_hints()
    assert path_reader.refresh().version == 2
    fresh = lamina.open_table(t.uri, table_uuid=t.uuid, allow_list=False)
    assert fresh.version == 2 and fresh.scan().to_arrow().num_rows == 3
    with open(os.path.join(t.uri, HINT_PATH)) as f:
        hint = json.load(f)
    assert hint["table_uuid"] == t.uuid and hint["table_identifier"] == "ns.u" and hint["version"] == 2
    with pytest.raises(LaminaError):  # a reader expecting another table refuses this one
        lamina.open_table(t.uri, table_uuid="00000000-0000-0000-0000-000000000000")


def test_drop(sql_cat, tmp_path):
    sql_cat.create_namespace("ns")
    t = sql_cat.create_table("ns.t", SCHEMA)
    t.append(_data([1]))
    with pytest.raises(CatalogTableNotFound):
        sql_cat.drop_table("ns.missing")
    sql_cat.drop_table("ns.t")  # no purge: the files stay, path readers still read them
    assert not sql_cat.table_exists("ns.t")
    assert lamina.open_table(t.uri).scan().to_arrow().num_rows == 1
    with pytest.raises(CatalogTableNotFound):  # the dropped table's commits have no row to swap
        t.append(_data([2]))
    back = sql_cat.register_table("ns.t", t.uri)
    assert back.version == 1 and back.append(_data([2])).version == 2
    register_write(back.io, "abcdef0123456789")  # a Spark job's files in flight
    with pytest.raises(TableInUse):
        sql_cat.drop_table("ns.t", purge=True)
    assert sql_cat.table_exists("ns.t") and os.path.isdir(t.uri)
    sql_cat.drop_table("ns.t", purge=True, force=True)
    assert not os.path.exists(t.uri) and not sql_cat.table_exists("ns.t")


def test_directory_drop(tmp_path):
    c = lamina.load_catalog(str(tmp_path / "wh"))
    assert isinstance(c, DirectoryCatalog)
    c.create_namespace("ns")
    t = c.create_table("ns.t", SCHEMA)
    with pytest.raises(CatalogError):
        c.drop_table("ns.t")  # without purge there is nothing to drop but the directory
    with pytest.raises(CatalogTableNotFound):
        c.drop_table("ns.missing", purge=True)
    c.drop_table("ns.t", purge=True)
    assert not os.path.exists(t.uri) and c.list_tables("ns") == []


def test_offline_refuses_writes_and_maintenance(cat):
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", SCHEMA)
    t.append(_data([1, 2, 3]))
    cat.set_online("ns.t", False)
    assert not cat.is_online("ns.t") and not cat.table_info("ns.t").online
    refused = [
        lambda: t.append(_data([4])),
        lambda: t.overwrite(_data([9])),
        lambda: t.delete("id = 1"),
        lambda: t.update("id = 1", {"id": "10"}),
        lambda: t.rollback(0),
        lambda: t.maintenance.expire_versions(retain_last=1),
        lambda: t.maintenance.remove_orphans(),
        lambda: t.tags.create("x"),
    ]
    for op in refused:
        with pytest.raises(TableOffline, match="offline"):
            op()
    # Another handle of the same table, loaded while offline, refuses as well; reads work.
    t2 = cat.load_table("ns.t")
    with pytest.raises(TableOffline):
        t2.append(_data([4]))
    assert t2.version == 1 and t2.scan().to_arrow().num_rows == 3
    assert t.tags.list() == []
    cat.set_online("ns.t", True)
    assert t.append(_data([4])).version == 2
    with pytest.raises(CatalogTableNotFound):
        cat.set_online("ns.missing", False)


# --- bad input -------------------------------------------------------------------------------

BAD_IDENTIFIERS = [
    "ns.t; DROP TABLE lamina_tables",
    "ns.t' OR '1'='1",
    "ns.../etc",
    "../ns.t",
    "ns./abs",
    "ns.a/b",
    "ns.a\\b",
    "a.b.c",
    "nodot",
    "ns.",
    ".t",
    "ns.-rf",
    "ns.t\x00",
    "ns.tä",
    "ns." + "x" * 129,
    ("ns", "a b"),
    ("ns", None),
    42,
]


@pytest.mark.parametrize("ident", BAD_IDENTIFIERS, ids=[repr(i)[:30] for i in BAD_IDENTIFIERS])
def test_bad_names_change_nothing(cat, tmp_path, ident):
    cat.create_namespace("ns")
    cat.create_table("ns.ok", SCHEMA)
    before = _state(cat)
    files_before = sorted(os.listdir(tmp_path))
    for op in (
        lambda: cat.create_table(ident, SCHEMA),
        lambda: cat.load_table(ident),
        lambda: cat.drop_table(ident, purge=True),
        lambda: cat.rename_table("ns.ok", ident),
        lambda: cat.set_online(ident, False),
    ):
        with pytest.raises(InvalidIdentifier):
            op()
    for bad_ns in ("a;b", "../x", "", "x" * 129, "-x"):
        with pytest.raises(InvalidIdentifier):
            cat.create_namespace(bad_ns)
    assert _state(cat) == before
    assert sorted(os.listdir(tmp_path)) == files_before


@pytest.mark.parametrize("uri", ["mysql://u@h/db", "s3://bucket/catalog", "sqlite://host/x.db", "sqlite:///", "", "postgresql:///db"])
def test_unknown_or_malformed_catalog_uri(uri):
    with pytest.raises(InvalidCatalogUri):
        lamina.load_catalog(uri)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when we return: nothing listens there


def test_unreachable_postgres_names_uri_not_password():
    pytest.importorskip("psycopg")
    uri = f"postgresql://lamina:hunter2secret@127.0.0.1:{_closed_port()}/db?connect_timeout=3"
    with pytest.raises(CatalogUnreachable) as e:
        lamina.load_catalog(uri)
    msg = str(e.value)
    assert "127.0.0.1" in msg and "lamina:***@" in msg
    assert "hunter2secret" not in msg and "hunter2secret" not in repr(e.value)


def test_unreachable_sqlite(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CatalogUnreachable, match="catalog"):
        lamina.load_catalog(f"sqlite:///{blocker}/sub/catalog.db")


def test_sql_catalog_without_warehouse_needs_location(pg_server, tmp_path):
    uri = pg_server.create_database("nowh")
    with lamina.load_catalog(uri) as c, lamina.load_catalog(uri) as again:
        assert isinstance(c, SqlCatalog)
        c.create_namespace("ns")
        with pytest.raises(CatalogError, match="warehouse"):
            c.create_table("ns.t", SCHEMA)
        assert c.tables() == []
        t = c.create_table("ns.t", SCHEMA, location=str(tmp_path / "t"))
        assert again.load_table("ns.t").uuid == t.uuid


def test_two_catalog_handles_share_state(sql_cat):
    """A second connection (another process, in practice) sees every change at once."""
    sql_cat.create_namespace("ns")
    t = sql_cat.create_table("ns.t", SCHEMA)
    other = lamina.load_catalog(sql_cat.uri, warehouse=sql_cat.warehouse)  # test servers have no password
    t.append(_data([1]))
    assert other.table_info("ns.t").version == 1
    t2 = other.load_table("ns.t")
    t2.append(_data([2]))
    assert t.refresh().version == 2
    other.set_online("ns.t", False)
    with pytest.raises(TableOffline):
        t.append(_data([3]))
    other.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "directory"])
def test_reopen_uri_reopens_the_same_catalog_without_the_password_in_it(kind, tmp_path, request):
    """What Spark's Python workers use to commit through the catalog: the URI (never carrying
    the password) plus the password on its own."""
    if kind == "postgres":
        base = request.getfixturevalue("pg_uri")
        uri = base.replace("lamina@", "lamina:s%3Acret@")  # trust auth on the test server: any password works
    elif kind == "sqlite":
        uri = f"sqlite:///{tmp_path}/c.db?warehouse={tmp_path}/elsewhere"
    else:
        uri = str(tmp_path / "wh")
    cat = lamina.load_catalog(uri)
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([("id", pa.int64())])).append(pa.table({"id": pa.array([1], pa.int64())}))
    plain, password = cat.reopen_uri()
    assert "s:cret" not in plain and "s%3Acret" not in plain
    assert password == ("s:cret" if kind == "postgres" else None)
    again = lamina.load_catalog(plain, password=password)
    info = again.table_info("ns.t")
    assert (info.version, info.location) == (1, cat.table_info("ns.t").location)
    again.close()
    cat.close()
