"""The `lamina catalog` commands, and table commands reaching catalog tables by name."""

from __future__ import annotations

import json
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


# -- a catalog that is not there: refused, never created by a command that only uses one --------

# Every command that opens a catalog, on a table or namespace that would be in it.
USES_A_CATALOG = [
    ["catalog", "list"], ["catalog", "list", "ns"], ["catalog", "rename", "ns.a", "ns.b"], ["catalog", "drop", "ns"],
    ["catalog", "drop", "ns.a"], ["catalog", "online", "ns.a"], ["catalog", "offline", "ns.a"],
    ["catalog", "create", "ns.a", "--schema", "id:int64"],  # a table needs its namespace, so its catalog, there
    ["info", "ns.a"], ["history", "ns.a"], ["files", "ns.a"], ["expire", "ns.a"], ["compact", "ns.a"],
    ["sql", "SELECT * FROM ns.a"], ["ui"],
]


def _sources(tmp_path, kind: str) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(URI, options, environment, how the message names where the URI came from) of a
    catalog that is not there: the embedded default in the working directory, or one named
    with --catalog or LAMINA_CATALOG (SQLite, or a warehouse directory)."""
    uri = f"sqlite:///{tmp_path}/none/catalog.db" if kind == "sqlite" else str(tmp_path / "none" / "warehouse")
    return [
        ("sqlite:///warehouse/catalog.db", [], {}, "the default catalog"),
        (uri, ["--catalog", uri], {}, "given with --catalog"),
        (uri, [], {"LAMINA_CATALOG": uri}, "from LAMINA_CATALOG"),
    ]


@pytest.mark.parametrize("kind", ["sqlite", "directory"])
@pytest.mark.parametrize("args", USES_A_CATALOG, ids=" ".join)
def test_a_command_that_uses_a_catalog_refuses_one_that_is_not_there(tmp_path, monkeypatch, kind, args):
    monkeypatch.chdir(tmp_path)
    for uri, options, env, source in _sources(tmp_path, kind):
        where = os.path.join(str(tmp_path), "warehouse", "catalog.db") if not options and not env else (
            uri[len("sqlite:///"):] if uri.startswith("sqlite:") else uri)
        placed = options if args[0] != "catalog" else []  # `lamina --catalog X catalog list` or `catalog list --catalog X`
        r = CliRunner().invoke(app, [*placed, *args, *(options if args[0] == "catalog" else [])], env=env)
        assert r.exit_code == 2, r.output
        text = " ".join(r.output.split())
        assert f"{uri} (" in text and source in text and where in text and "does not exist" in text, text
        assert "lamina catalog create NAMESPACE" in text and "--catalog URI or LAMINA_CATALOG" in text, text
        assert os.listdir(tmp_path) == [], f"{args} with {source} left {os.listdir(tmp_path)}"


def test_catalog_create_makes_the_catalog_it_names_and_then_every_command_finds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["catalog", "create", "ns"])
    assert r.exit_code == 0 and "created namespace ns in a new catalog sqlite:///warehouse/catalog.db" in r.output, r.output
    assert os.path.isfile(tmp_path / "warehouse" / "catalog.db")
    r = runner.invoke(app, ["catalog", "create", "ns.a", "--schema", "id:int64"])
    assert r.exit_code == 0 and "created table ns.a" in r.output, r.output
    r = runner.invoke(app, ["catalog", "create", "other"])
    assert r.exit_code == 0 and "new catalog" not in r.output  # the catalog was there
    listed = runner.invoke(app, ["catalog", "list", "-o", "json"])
    assert listed.exit_code == 0 and [json.loads(line)["table"] for line in listed.output.splitlines()] == ["ns.a"]
    assert lamina.load_catalog(f"sqlite:///{tmp_path}/warehouse/catalog.db").list_namespaces() == ["ns", "other"]


@pytest.mark.parametrize("given", ["option", "environment"])
def test_serve_iceberg_without_a_target_serves_the_catalog_lamina_was_given(given):
    """`lamina --catalog URI serve-iceberg` (or LAMINA_CATALOG) serves that catalog: here one
    whose URI cannot be opened, so the command stops at opening it and names it."""
    uri = "bogus://nowhere"
    options, env = (["--catalog", uri], {}) if given == "option" else ([], {"LAMINA_CATALOG": uri})
    r = CliRunner().invoke(app, [*options, "serve-iceberg", "--port", "0"], env=env)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "unknown catalog scheme 'bogus' in 'bogus://nowhere'" in " ".join(r.output.split()), r.output
