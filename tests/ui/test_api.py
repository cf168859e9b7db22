"""The explorer's JSON API against the table's own system tables (and DuckDB over them),
its refusals of hostile requests, and that browsing writes nothing."""

from __future__ import annotations

import http.client
import math
import urllib.parse

import duckdb
import pytest
from typer.testing import CliRunner

from lamina.cli.main import app
from lamina.errors import InvalidArgument
from lamina.ui.api import SAMPLE_MAX_ROWS
from lamina.ui.server import start_server
from support.ui_sample import get, listing

ORDERS = "tables/shop.orders"


def api(sample, path: str, **query) -> tuple[int, dict]:
    q = ("?" + urllib.parse.urlencode(query)) if query else ""
    return get(sample["url"] + "api/" + path + q)


def ok(sample, path: str, **query) -> dict:
    status, doc = api(sample, path, **query)
    assert status == 200, doc
    return doc


def test_catalog_lists_every_table_with_its_version_rows_files_and_size(sample):
    doc = ok(sample, "catalog")
    t = sample["table"]
    by_key = {r["key"]: r for r in doc["tables"]}
    assert sorted(by_key) == ["shop.empty", "shop.orders"]
    assert set(doc["namespaces"]) == {"shop", "staging"}
    files = t.inspect.files()
    row = by_key["shop.orders"]
    assert (row["version"], row["rows"], row["files"], row["online"]) == (t.version, sum(files["record_count"].to_pylist()), files.num_rows, True)
    assert row["bytes"] == sum(files["size"].to_pylist())
    assert row["last_commit_ms"] == t.metadata.timestamp_ms
    assert by_key["shop.empty"]["rows"] == 0


def test_history_is_the_snapshots_system_table(sample):
    snaps = sample["table"].inspect.snapshots()
    doc = ok(sample, f"{ORDERS}/history")
    assert (doc["total"], doc["sampled"]) == (snaps.num_rows, False)  # a short history: every version
    assert doc["version"] == snaps["version"].to_pylist()
    assert doc["operation"] == snaps["operation"].to_pylist()
    assert doc["total_records"] == snaps["total_records"].to_pylist()
    assert doc["total_files"] == snaps["total_files"].to_pylist()
    assert doc["timestamp_ms"] == [x.timestamp() * 1000 for x in snaps["timestamp"].to_pylist()]
    # the timeline's pages, newest first, with whole summaries and the tags on each version
    page = ok(sample, f"{ORDERS}/versions", offset=1, limit=3)
    assert [v["version"] for v in page["versions"]] == snaps["version"].to_pylist()[::-1][1:4]
    tags = {r["tag_name"]: r["tagged_version"] for r in sample["table"].inspect.tags().to_pylist()}
    everything = ok(sample, f"{ORDERS}/versions")["versions"]
    assert {n: v["version"] for v in everything for n in v["tags"]} == tags


def test_branch_history_is_the_branch_snapshots(sample):
    snaps = sample["table"].branch("audit").inspect.snapshots()
    doc = ok(sample, f"{ORDERS}/history", branch="audit")
    assert doc["version"] == snaps["version"].to_pylist() and doc["branch"] == "audit"


def test_overview_tags_and_branches_are_the_system_tables(sample):
    t = sample["table"]
    doc = ok(sample, ORDERS)
    assert [r["tag_name"] for r in doc["tags"]] == t.inspect.tags()["tag_name"].to_pylist()
    assert [r["name"] for r in doc["branches"]] == t.inspect.branches()["name"].to_pylist()
    assert [c["path"] for c in doc["schema"]] == ["id", "day", "amount"]
    assert [f["name"] for f in doc["partition_spec"]["fields"]] == ["day"]


@pytest.mark.parametrize("pick", [{"version": "1"}, {"version": "3"}, {"tag": "first-load"}, {"tag": "after-delete"}, {}])
def test_files_of_a_version_or_tag_are_its_files_system_table(sample, pick):
    t = sample["table"]
    expected = t.inspect.files(int(pick["version"]) if "version" in pick else pick.get("tag"))
    doc = ok(sample, f"{ORDERS}/files", **pick, limit=1000)
    assert doc["total"] == expected.num_rows
    got = {f["path"]: (f["size"], f["record_count"], f["dv_cardinality"]) for f in doc["files"]}
    assert got == {r["path"]: (r["size"], r["record_count"], r["dv_cardinality"]) for r in expected.to_pylist()}
    pages = [f["path"] for o in range(0, expected.num_rows, 2) for f in ok(sample, f"{ORDERS}/files", **pick, offset=o, limit=2)["files"]]
    assert sorted(pages) == sorted(got)


@pytest.mark.parametrize("version", [2, 4, None])
def test_layout_is_a_group_by_of_the_files_system_table(sample, version):
    files = sample["table"].inspect.files(**({"version": version} if version is not None else {}))
    oracle = duckdb.sql(
        "SELECT coalesce(partition, '') AS p, count(*) AS files, sum(size) AS bytes, sum(record_count) AS rows, "
        "coalesce(sum(dv_cardinality), 0) AS deleted FROM files GROUP BY 1 ORDER BY 1"
    ).fetchall()
    doc = ok(sample, f"{ORDERS}/layout", **({"version": version} if version is not None else {}))
    got = [(p["partition"], p["files"], p["bytes"], p["rows"], p["deleted_rows"]) for p in doc["partitions"]]
    assert got == [tuple(r) for r in oracle]
    # the size histogram: power-of-two buckets from the smallest file's to the largest's
    sizes = files["size"].to_pylist()
    lo, hi = min(math.floor(math.log2(s)) for s in sizes), max(math.floor(math.log2(s)) for s in sizes)
    hist = doc["size_histogram"]
    assert [b["min_bytes"] for b in hist] == [1 << k for k in range(lo, hi + 1)]
    assert [b["files"] for b in hist] == [sum(1 << k <= s < 1 << (k + 1) for s in sizes) for k in range(lo, hi + 1)]


def test_sample_pages_are_the_versions_rows_and_bounded(sample):
    t = sample["table"]
    for pick, version in (({"tag": "first-load"}, 1), ({"version": "4"}, 4), ({}, t.version)):
        expected = t.to_arrow(version=version).sort_by("id")["id"].to_pylist()
        pages = [ok(sample, f"{ORDERS}/sample", **pick, offset=o, limit=7) for o in range(0, len(expected) + 7, 7)]
        assert all(p["total"] == len(expected) for p in pages)
        assert all(len(p["rows"]) <= 7 for p in pages)
        ids = [r["id"] for p in pages for r in p["rows"]]
        assert sorted(ids) == expected  # every row once, none of the deleted ones
    doc = ok(sample, f"{ORDERS}/sample", limit=10_000)
    assert doc["limit"] == SAMPLE_MAX_ROWS
    assert ok(sample, f"{ORDERS}/sample", limit=3)["files_read"] == 1  # the first file holds them


def test_health_advice_from_the_table(sample):
    files = sample["table"].inspect.files()  # noqa: F841 (read by DuckDB)
    advice = {a["kind"]: a for a in ok(sample, f"{ORDERS}/health")["advice"]}
    # deletion vectors hide 20 of day 2026-01-02's 85 rows (the sample's delete)
    deleted = advice["deleted-rows"]
    assert deleted["facts"]["partition"] == "day=2026-01-02" and deleted["facts"]["deleted_rows"] == 20
    assert "24% of rows in partition day=2026-01-02" in deleted["message"]
    assert deleted["command"].endswith("""compact shop.orders --where "day = '2026-01-02'\"""")
    # small files: compaction takes the files of partitions with several, and any with deletes
    oracle = duckdb.sql(
        "SELECT sum(n) FROM (SELECT partition, count(*) AS n, count(dv_path) AS dvs FROM files GROUP BY 1) "
        "WHERE n > 1 OR dvs > 0"
    ).fetchall()[0][0]
    assert advice["small-files"]["facts"]["input_files"] == oracle
    assert " compact shop.orders" in advice["small-files"]["command"]
    assert "expiry" not in advice  # its own request, which the page makes last
    (expiry,) = ok(sample, f"{ORDERS}/expiry")["advice"]
    assert expiry["kind"] == "expiry"
    assert expiry["facts"]["retained_versions"] == sample["table"].inspect.snapshots().num_rows
    assert expiry["facts"]["expired_versions"] == [] and expiry["severity"] == "ok"  # every version is new


def test_advised_commands_are_commands_of_the_cli(sample):
    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    for a in ok(sample, f"{ORDERS}/health")["advice"] + ok(sample, f"{ORDERS}/expiry")["advice"]:
        if a["command"]:
            words = a["command"].split()
            assert words[0] == "lamina" and words[3] in names  # lamina --catalog URI COMMAND ...


@pytest.mark.parametrize("path,status", [
    ("api/tables/shop.nope", 404),
    ("api/tables/nope", 404),
    ("api/tables/..%2F..%2Fetc", 404),
    ("api/tables/shop.orders/files?version=999", 404),
    ("api/tables/shop.orders/files?version=abc", 400),
    ("api/tables/shop.orders/files?tag=nope", 404),
    ("api/tables/shop.orders/sample?limit=-1", 400),
    ("api/tables/shop.orders/history?branch=nope", 404),
    ("api/tables/shop.orders/drop", 404),
    ("api/nothing", 404),
    ("static/../../../etc/passwd", 404),
    ("static/%2e%2e%2fapi.py", 404),
    ("static/api.py", 404),
])
def test_hostile_requests_get_a_json_error(sample, path, status):
    got, doc = get(sample["url"] + path)
    assert got == status, doc
    assert doc["status"] == status and doc["error"] and "Traceback" not in doc["error"]


def _raw(sample, method: str, path: str, host: str | None = None) -> tuple[int, bytes]:
    u = urllib.parse.urlsplit(sample["url"])
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            c.putheader("Host", host)
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_only_get_and_only_for_a_loopback_host(sample):
    assert _raw(sample, "POST", "/api/catalog")[0] == 405
    assert _raw(sample, "DELETE", "/api/tables/shop.orders")[0] == 405
    assert _raw(sample, "GET", "/api/catalog", host="evil.example:80")[0] == 403  # DNS rebinding
    assert _raw(sample, "GET", "/api/catalog", host="localhost:1")[0] == 200


def test_page_forbids_anything_from_elsewhere(sample):
    u = urllib.parse.urlsplit(sample["url"])
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request("GET", "/")
        r = c.getresponse()
        page = r.read().decode()
        csp = r.getheader("Content-Security-Policy")
    finally:
        c.close()
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert "http" not in page.replace('href="/static', "").lower().replace("http-equiv", "")


def test_server_refuses_a_non_loopback_address(sample):
    for host in ("0.0.0.0", "192.168.1.10", "example.com", "::"):
        with pytest.raises(InvalidArgument, match="loopback"):
            start_server(sample["explorer"], host=host)
    r = CliRunner().invoke(app, ["ui", sample["uri"], "--host", "0.0.0.0", "--port", "0"])
    assert r.exit_code == 2 and "loopback" in r.output


def test_browsing_writes_nothing(sample):
    for path in ("catalog", ORDERS, f"{ORDERS}/history", f"{ORDERS}/bytes", f"{ORDERS}/layout", f"{ORDERS}/health", f"{ORDERS}/expiry",
                 f"{ORDERS}/versions", f"{ORDERS}/files?tag=first-load", f"{ORDERS}/sample?version=2", "tables/shop.empty/health"):
        assert get(sample["url"] + "api/" + path)[0] == 200
    assert listing(sample["root"]) == sample["before"]
