"""Branches of catalog tables, on SQLite and a real PostgreSQL server.

The catalog row tracks main only: creating a branch commits ``enable-branches`` on main
through the catalog's coordinator, commits on a branch are put-if-absent in the branch's own
log (the row does not move), and a publish into main is a main commit, so it goes through the
row's compare-and-swap. A handle opened by path may write the branches but never main
(CatalogManaged, nothing changed). Expected rows are built with pyarrow from what was written.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import CatalogManaged, TableOffline

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def rows(ids, tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def bag(t: pa.Table) -> list[tuple]:
    return sorted(zip(*[t.column(c).to_pylist() for c in t.column_names]), key=repr)


@pytest.fixture(params=["sqlite", "postgres"])
def cat(request, tmp_path):
    uri = f"sqlite:///{tmp_path}/wh/catalog.db" if request.param == "sqlite" else request.getfixturevalue("pg_uri")
    c = lamina.load_catalog(uri)
    c.create_namespace("shop")
    yield c
    c.close()


def orders(cat) -> lamina.Table:
    t = cat.create_table("shop.orders", SCHEMA)
    t.append(rows(range(10), "m"))
    return t


def row_version(cat) -> int:
    return cat.table_info("shop.orders").version


def metadata_files(uri: str) -> set[str]:
    """Every file under the table's _lamina/ (version files, manifests, tags, branch logs), once
    the hints this process queued have landed (a hint mid-write is a temporary file)."""
    flush_hints()
    root = os.path.join(uri, "_lamina")
    return {os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}


def test_write_audit_publish_through_the_catalog(cat):
    t = orders(cat)
    b = t.branches.create("audit")
    # enable-branches is a main commit: through the catalog row
    assert row_version(cat) == t.refresh().version == 2
    b.append(rows(range(10, 20), "b"))
    b.delete("id < 3")
    want = pa.concat_tables([rows(range(3, 10), "m"), rows(range(10, 20), "b")])
    assert row_version(cat) == 2 and bag(cat.load_table("shop.orders").to_arrow()) == bag(rows(range(10), "m"))
    assert bag(cat.load_table("shop.orders").branch("audit").to_arrow()) == bag(want)
    assert bag(lamina.open_table(t.uri, version="audit").to_arrow()) == bag(want)  # a path reader sees it too

    # fast-forward: main has not moved since the branch was made
    v = cat.load_table("shop.orders").branches.publish("audit").version
    assert v == row_version(cat) == 3
    main = cat.load_table("shop.orders")
    assert main.version == 3 and main.history(1)[0]["summary"]["publish"] == "fast-forward"
    assert bag(main.to_arrow()) == bag(want)
    assert lamina.open_table(t.uri).version == 3  # published under its final name, as every catalog commit

    # a rebase: main moved (through the catalog) since the branch was made
    c = main.branches.create("cleanup")
    c.delete("id >= 15")
    stale = cat.load_table("shop.orders")  # at version 3: its publish loses the swap, then rebases
    main.append(rows(range(100, 105), "m"))
    assert row_version(cat) == 4
    v = stale.branches.publish("cleanup").version
    assert v == row_version(cat) == 5 and stale.history(1)[0]["summary"]["publish"] == "rebase"
    want = pa.concat_tables([want.filter(pc.less(want.column("id"), 15)), rows(range(100, 105), "m")])
    assert bag(cat.load_table("shop.orders").to_arrow()) == bag(want)


def test_publish_moves_the_catalog_row_schema(cat):
    t = orders(cat)
    b = t.branches.create("wide")
    with b.update_schema() as u:
        u.add_column("note", pa.string())
    b.append(pa.table({"id": pa.array([10], pa.int64()), "v": ["b10"], "note": ["new"]}))
    assert [f["name"] for f in cat.table_info("shop.orders").schema["fields"]] == ["id", "v"]  # main's
    cat.load_table("shop.orders").branches.publish("wide")
    assert [f["name"] for f in cat.table_info("shop.orders").schema["fields"]] == ["id", "v", "note"]


def test_path_handle_writes_branches_but_never_main(cat):
    t = orders(cat)
    t.branches.create("audit")
    p = lamina.open_table(t.uri)
    row, main_rows = row_version(cat), t.to_arrow()

    pb = p.branch("audit")
    assert pb.append(rows(range(10, 15), "p")).version == 3  # put-if-absent in the branch's own log
    p.branches.create("second")                          # a branch record: not a main commit
    assert [r.name for r in cat.load_table("shop.orders").branches.list()] == ["audit", "second"]
    assert bag(cat.load_table("shop.orders").branch("audit").to_arrow()) == bag(
        pa.concat_tables([rows(range(10), "m"), rows(range(10, 15), "p")]))

    # main: refused, nothing changed (also a publish, fast-forward or rebase)
    before = metadata_files(t.uri)
    with pytest.raises(CatalogManaged):
        p.append(rows(range(50, 55), "x"))
    with pytest.raises(CatalogManaged):
        p.branches.publish("audit")
    assert metadata_files(t.uri) == before
    cat.load_table("shop.orders").append(rows(range(60, 62), "m"))  # main moves: a publish now rebases
    row, main_rows = row_version(cat), cat.load_table("shop.orders").to_arrow()
    before = metadata_files(t.uri)
    with pytest.raises(CatalogManaged):
        lamina.open_table(t.uri).branches.publish("audit")
    assert metadata_files(t.uri) == before and p.tags.list() == []
    assert row_version(cat) == row and bag(cat.load_table("shop.orders").to_arrow()) == bag(main_rows)

    # a stale path handle and a catalog handle on one branch: both commits land, in turn
    via_cat = cat.load_table("shop.orders").branch("audit")
    via_path = lamina.open_table(t.uri, version="audit")
    assert via_path.append(rows([20], "p")).version == 4
    assert via_cat.append(rows([21], "c")).version == 5
    assert sorted(lamina.open_table(t.uri, version="audit").to_arrow().column("id").to_pylist()) == \
        list(range(15)) + [20, 21]
    assert row_version(cat) == row


def test_path_handle_cannot_enable_branches(cat):
    t = orders(cat)
    before = metadata_files(t.uri)
    with pytest.raises(CatalogManaged):
        lamina.open_table(t.uri).branches.create("audit")  # the first branch commits enable-branches on main
    assert metadata_files(t.uri) == before and t.branches.list() == []
    t.branches.create("audit")  # through the catalog it works, and then a path handle can make more
    lamina.open_table(t.uri).branches.create("other")
    assert [r.name for r in t.branches.list()] == ["audit", "other"]


def test_offline_table_refuses_branch_changes_through_the_catalog(cat):
    t = orders(cat)
    b = t.branches.create("audit")
    b.append(rows([10], "b"))
    cat.set_online("shop.orders", False)
    flush_hints()  # the branch append's hint is written in the background: not part of what is compared
    before, row = metadata_files(t.uri), row_version(cat)
    offline = cat.load_table("shop.orders")
    for change in (lambda: offline.branch("audit").append(rows([11], "x")), lambda: offline.branches.publish("audit"),
                   lambda: offline.branches.create("other"), lambda: offline.branches.delete("audit")):
        with pytest.raises(TableOffline):
            change()
    assert metadata_files(t.uri) == before and row_version(cat) == row
