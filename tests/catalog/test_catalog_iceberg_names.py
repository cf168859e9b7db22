"""The SQL catalog answers as an Iceberg SQL catalog: pyiceberg's SqlCatalog on the same
SQLite or PostgreSQL database lists the namespaces and tables whose Iceberg view is on and
loads them (read-only), and every write through it is refused with Lamina's message."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lamina.iceberg import flush

sql_catalog = pytest.importorskip("pyiceberg.catalog.sql", reason="pyiceberg is in the test extra")

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def iceberg_uri(catalog_uri: str) -> str:
    """The SQLAlchemy URI pyiceberg takes for the catalog's database."""
    if catalog_uri.startswith("sqlite:///"):
        return "sqlite:///" + catalog_uri[len("sqlite:///"):]
    base = catalog_uri.split("?", 1)[0]
    return base.replace("postgresql://", "postgresql+psycopg://", 1)


def open_iceberg_catalog(request, catalog_uri: str):
    """pyiceberg's SqlCatalog on the catalog's database; its engine's pooled connections are
    closed when the test ends."""
    ice = sql_catalog.SqlCatalog("lamina", uri=iceberg_uri(catalog_uri))
    request.addfinalizer(ice.engine.dispose)
    return ice


def test_pyiceberg_sql_catalog_lists_and_loads_lamina_tables(catalog_uri, open_catalog, request):
    cat = open_catalog(catalog_uri)
    cat.create_namespace("shop")
    cat.create_namespace("hr")
    orders = cat.create_table("shop.orders", SCHEMA, properties={"iceberg.enabled": "true"})
    orders.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    orders.delete("id = 2")
    cat.create_table("shop.plain", SCHEMA)  # no view: no Iceberg name
    people = cat.create_table("hr.people", SCHEMA)
    people.append(pa.table({"id": [7], "v": ["x"]}))
    people.set_iceberg_enabled()
    flush()  # the view (and its name) is written in the background: this process's commits land first
    ice = open_iceberg_catalog(request, catalog_uri)
    assert sorted(ice.list_namespaces()) == [("hr",), ("shop",)]
    assert ice.list_tables("shop") == [("shop", "orders")]
    table = ice.load_table("shop.orders")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 3]
    assert ice.load_table("hr.people").scan().to_arrow().column("id").to_pylist() == [7]
    # the row follows every commit
    orders.append(pa.table({"id": [4], "v": ["d"]}))
    flush()
    assert sorted(ice.load_table("shop.orders").scan().to_arrow().column("id").to_pylist()) == [1, 3, 4]
    # renames and drops follow too
    cat.rename_table("shop.orders", "shop.orders_v2")
    assert ice.list_tables("shop") == []
    cat.load_table("shop.orders_v2").sync_iceberg()
    assert ice.list_tables("shop") == [("shop", "orders_v2")]
    cat.drop_table("hr.people")
    assert ice.list_tables("hr") == []


def test_writes_through_the_iceberg_catalog_are_refused_with_lamina_s_message(catalog_uri, open_catalog, request):
    cat = open_catalog(catalog_uri)
    cat.create_namespace("shop")
    t = cat.create_table("shop.orders", SCHEMA, properties={"iceberg.enabled": "true"})
    t.append(pa.table({"id": [1], "v": ["a"]}))
    flush()
    ice = open_iceberg_catalog(request, catalog_uri)
    from sqlalchemy import text

    location = ice.load_table("shop.orders").metadata_location
    with ice.engine.connect() as conn:
        for stmt in (
            text("UPDATE iceberg_tables SET metadata_location = :m WHERE table_name = 'orders'"),
            text("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                 "VALUES ('lamina', 'shop', 'other', :m)"),
            text("DELETE FROM iceberg_tables WHERE table_name = 'orders'"),
        ):
            with pytest.raises(Exception, match="read-only through Iceberg catalogs"):
                with conn.begin():
                    conn.execute(stmt, {"m": location.replace("/v", "/00009-abc")})
    with pytest.raises(Exception, match="read-only through Iceberg catalogs|NotImplementedError|not yet supported"):
        ice.drop_table("shop.orders")
    assert ice.load_table("shop.orders").metadata_location == location
    # other catalog names in the same database are an Iceberg catalog's own
    with ice.engine.connect() as conn, conn.begin():
        conn.execute(text("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                          "VALUES ('other', 'ns', 't', 's3://x/t/metadata/00001-a.metadata.json')"))
