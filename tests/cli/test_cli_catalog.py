"""The `lamina catalog` commands, and table commands reaching catalog tables by name."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli.main import app
from lamina.errors import TableOffline


def test_cli_catalog(tmp_path):
    runner = CliRunner()
    uri = f"sqlite:///{tmp_path}/wh/catalog.db"

    def run(*args):
        return runner.invoke(app, ["catalog", *args, "--catalog", uri])

    assert run("create", "ns").exit_code == 0
    r = run("create", "ns.events", "--schema", "id:int64,day:date,name:string", "--partition-by", "day")
    assert r.exit_code == 0, r.output
    assert "created table" in r.output
    r = run("list")
    assert r.exit_code == 0 and "ns.events" in r.output
    assert run("offline", "ns.events").exit_code == 0
    t = lamina.load_catalog(uri).load_table("ns.events")
    with pytest.raises(TableOffline):
        t.append(pa.table({"id": [1], "day": [None], "name": ["x"]}))
    assert run("online", "ns.events").exit_code == 0
    assert run("rename", "ns.events", "ns.ev2").exit_code == 0
    r = run("rename", "ns.ev2", "ns.ev2")
    assert r.exit_code == 2 and "exists" in r.output
    r = run("drop", "ns")
    assert r.exit_code == 2 and "holds 1 table" in r.output
    r = run("create", "ns.bad;name", "--schema", "id:int64")
    assert r.exit_code == 2 and "invalid table name" in r.output
    r = run("create", "ns.x", "--schema", "id:uuid")
    assert r.exit_code != 0
    r = run("drop", "ns.missing")
    assert r.exit_code == 2 and "no table" in r.output
    assert run("drop", "ns.ev2", "--purge").exit_code == 0
    assert run("drop", "ns").exit_code == 0
    r = runner.invoke(app, ["catalog", "list", "--catalog", "oracle://x"])
    assert r.exit_code == 2 and "unknown catalog scheme" in r.output


def test_cli_table_commands_reach_catalog_tables_by_name(tmp_path):
    """`lamina compact ns.name` (and every table command) goes through the catalog: the
    compaction commits by the catalog's swap, and an offline table refuses it."""
    runner = CliRunner()
    uri = f"sqlite:///{tmp_path}/wh/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("ns")
    t = cat.create_table("ns.events", pa.schema([("id", pa.int64())]))
    for i in range(6):
        t.append(pa.table({"id": pa.array([i, i + 100], pa.int64())}))
    cat.set_online("ns.events", False)
    r = runner.invoke(app, ["--catalog", uri, "compact", "ns.events"])
    assert r.exit_code == 2 and "offline" in r.output
    assert cat.table_info("ns.events").version == 6
    cat.set_online("ns.events", True)
    r = runner.invoke(app, ["--catalog", uri, "compact", "ns.events", "--target-mb", "1"])
    assert r.exit_code == 0, r.output
    assert "table files 6 -> 1" in r.output
    info = cat.table_info("ns.events")
    assert info.version == 7 and lamina.open_table(info.location).version == 7  # the catalog row moved
    assert sorted(cat.load_table("ns.events").to_arrow().column("id").to_pylist()) == sorted(
        [i for i in range(6)] + [i + 100 for i in range(6)])
    r = runner.invoke(app, ["--catalog", uri, "history", "ns.events"])
    assert r.exit_code == 0 and re.search(r"│\s+7 │", r.output)  # the newest version, read through the catalog
    r = runner.invoke(app, ["--catalog", uri, "catalog", "list"])  # the catalog commands follow `lamina --catalog`
    assert r.exit_code == 0 and "ns.events" in r.output
    r = runner.invoke(app, ["--catalog", f"sqlite:///{tmp_path}/none/catalog.db", "info", "ns.events"])
    assert r.exit_code == 2 and "does not exist" in r.output
    assert not os.path.exists(tmp_path / "none")  # a missing catalog is not created by a lookup
