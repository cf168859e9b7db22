"""The read-only Iceberg REST catalog (``lamina serve-iceberg``) with pyiceberg's RestCatalog:
namespaces, tables and loadTable per the REST spec; writes refused with Lamina's message; a
token required beyond loopback and checked when set; no file outside the catalog's tables
served, whatever the identifiers carry."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pyarrow as pa
import pytest

import lamina
from lamina.errors import InvalidArgument
from lamina.rest import serve

pytestmark = pytest.mark.slow  # an HTTP server per test, read through pyiceberg

rest = pytest.importorskip("pyiceberg.catalog.rest", reason="pyiceberg is in the test extra")
from pyiceberg import exceptions as ice_errors  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def lake(tmp_path):
    uri = f"sqlite:///{tmp_path}/wh/catalog.db"
    with lamina.load_catalog(uri) as cat:
        cat.create_namespace("shop")
        t = cat.create_table("shop.orders", SCHEMA, properties={"iceberg.enabled": "true"})
        t.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
        t.delete("id = 3")
        cat.create_table("shop.hidden", SCHEMA)  # no Iceberg view
        (tmp_path / "secret.txt").write_text("not a table")
        yield uri, t


@pytest.fixture
def server(lake):
    srv, url = serve(lake[0], "127.0.0.1", 0)
    yield url, lake[1]
    srv.shutdown()
    srv.server_close()


def get(url: str, path: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
    finally:
        conn.close()
    return r.status, (json.loads(data) if data else None)


def test_pyiceberg_rest_catalog_lists_and_loads_tables(server):
    url, t = server
    cat = rest.RestCatalog("lamina", uri=url)
    assert cat.list_namespaces() == [("shop",)]
    assert cat.list_tables("shop") == [("shop", "orders")]  # the table without a view is not listed
    table = cat.load_table("shop.orders")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2]
    assert table.metadata_location.endswith(".metadata.json")
    t.append(pa.table({"id": [4], "v": ["d"]}))
    assert sorted(cat.load_table("shop.orders").scan().to_arrow().column("id").to_pylist()) == [1, 2, 4]
    assert cat.table_exists("shop.orders") and not cat.table_exists("shop.hidden")
    with pytest.raises(ice_errors.NoSuchTableError, match="no Iceberg view"):
        cat.load_table("shop.hidden")
    with pytest.raises(ice_errors.NoSuchNamespaceError):
        cat.list_tables("nope")


def test_writes_are_refused_with_a_clear_error(server):
    url, _ = server
    cat = rest.RestCatalog("lamina", uri=url)
    # pyiceberg refuses, before any request, what /v1/config does not advertise
    for write in (lambda: cat.create_namespace("new"), lambda: cat.drop_table("shop.orders"),
                  lambda: cat.create_table("shop.other", schema=cat.load_table("shop.orders").schema())):
        with pytest.raises(NotImplementedError, match="Server does not support endpoint"):
            write()
    # and a client that sends one anyway is told why
    for method, path in (("POST", "/v1/namespaces"), ("POST", "/v1/namespaces/shop/tables/orders"),
                         ("DELETE", "/v1/namespaces/shop/tables/orders"), ("PUT", "/v1/namespaces/shop")):
        status, body = get(url, path, method, body=b"{}")
        assert status == 403 and "read-only: Lamina is the writer" in body["error"]["message"]
        assert body["error"]["type"] == "ForbiddenException"


@pytest.mark.parametrize("path", [
    "/v1/namespaces/..%2F..%2Fsecret.txt/tables/x",
    "/v1/namespaces/shop/tables/..%2F..%2F..%2Fsecret.txt",
    "/v1/namespaces/shop/tables/%2E%2E",
    "/v1/namespaces/shop/tables/orders%2F..%2Fhidden",
    "/v1/namespaces/shop/tables/orders%00",
    "/v1/namespaces/shop%1Forders/tables/orders",
    "/v1/../../etc/passwd",
    "/v1/namespaces/shop/tables/" + "x" * 5000,
    "/v1/namespaces/shop/tables/orders/../../../../secret.txt",
    "/secret.txt",
    "/v1/namespaces/shop/tables/hidden",
])
def test_hostile_identifiers_reach_no_file_outside_the_catalogs_views(server, path):
    url, _ = server
    status, body = get(url, path)
    assert status in (400, 404)
    assert "not a table" not in json.dumps(body)


def test_beyond_loopback_a_token_is_required_and_checked(lake):
    with pytest.raises(InvalidArgument, match="needs a token"):
        serve(lake[0], "0.0.0.0", 0)
    srv, url = serve(lake[0], "127.0.0.1", 0, token="s3cret")  # a token on loopback: checked too
    try:
        status, _ = get(url, "/v1/namespaces")
        assert status == 401
        with pytest.raises(ice_errors.OAuthError):
            rest.RestCatalog("lamina", uri=url, credential="client:wrong", **{"oauth2-server-uri": f"{url}/v1/oauth/tokens"}).list_namespaces()
        assert rest.RestCatalog("lamina", uri=url, token="s3cret").list_namespaces() == [("shop",)]
        oauth = {"oauth2-server-uri": f"{url}/v1/oauth/tokens"}
        assert rest.RestCatalog("lamina", uri=url, credential="client:s3cret", **oauth).list_tables("shop") == [("shop", "orders")]
    finally:
        srv.shutdown()
        srv.server_close()
