"""Inspecting an evolved schema: `lamina schema`, the `$schemas` system table and history.

Each figure printed is checked against what the table's versions say through the
Python API (the schema of the version or tag asked for), not against the code's own
rendering of it.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli.main import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console():
    from lamina.cli._output import console, err

    saved = [(c, c._width) for c in (console, err)]
    for c in (console, err):
        c.width = 400
    yield
    for c, w in saved:
        c._width = w


@pytest.fixture
def evolved(tmp_path):
    """v1 append; v2 add email (doc), rename s.x -> xx, add required k default 3; tag
    'before'; v3 widen id to int64."""
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int32()), ("s", pa.struct([("x", pa.int32())]))]))
    t.append(pa.table({"id": pa.array([1], pa.int32()), "s": pa.array([{"x": 1}], pa.struct([("x", pa.int32())]))}))
    t.update_schema().add_column("email", pa.string(), doc="work address").rename_column("s.x", "xx").add_column(
        "k", pa.int64(), required=True, default=3
    ).commit()
    t.tags.create("before")
    t.update_schema().update_column("id", pa.int64()).commit()
    return t


def test_schema_command_prints_the_asked_versions_schema_with_ids(evolved):
    out = runner.invoke(app, ["schema", evolved.uri, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["version"] == 3 and doc["schema_id"] == 2
    by_path = {f["path"]: f for f in doc["fields"]}
    assert by_path["id"]["type"] == "int64" and by_path["id"]["field_id"] == 1
    assert by_path["s.xx"]["field_id"] == 3 and by_path["s.xx"]["physical_name"] == "x"
    assert by_path["email"]["doc"] == "work address"
    assert by_path["k"]["required"] and by_path["k"]["initial_default"] == "3"

    before = json.loads(runner.invoke(app, ["schema", evolved.uri, "--tag", "before", "--json"]).output)
    assert before["version"] == 2
    assert {f["path"]: f["type"] for f in before["fields"]}["id"] == "int32"
    first = json.loads(runner.invoke(app, ["schema", evolved.uri, "--version", "1", "--json"]).output)
    assert [f["path"] for f in first["fields"]] == ["id", "s", "s.x"]

    table = runner.invoke(app, ["schema", evolved.uri])
    assert table.exit_code == 0
    assert "work address" in table.output and "xx" in table.output


def test_schema_command_refuses_an_unknown_version(evolved):
    out = runner.invoke(app, ["schema", evolved.uri, "--version", "99"])
    assert out.exit_code != 0
    assert "99" in out.output


def test_schemas_system_table_lists_each_schema_once_with_its_versions(evolved):
    s = evolved.inspect.schemas().to_pylist()
    assert [r["schema_id"] for r in s] == [0, 1, 2]
    assert [(r["first_version"], r["last_version"], r["versions"]) for r in s] == [(0, 1, 2), (2, 2, 1), (3, 3, 1)]
    for row in s:
        vm = lamina.open_table(evolved.uri, version=row["first_version"]).metadata
        assert [c["path"] for c in row["columns"]] == [f["path"] for f in vm.schema.describe()]
    printed = runner.invoke(app, ["system", evolved.uri, "schemas"])
    assert printed.exit_code == 0 and "s.xx int32" in printed.output


def test_history_names_schema_changes(evolved):
    hist = {h["version"]: h for h in evolved.history()}
    assert hist[2]["operation"] == "update-schema"
    assert "rename s.x to xx" in hist[2]["summary"]["schema-changes"]
    out = runner.invoke(app, ["history", evolved.uri])
    assert "update-schema (update id type int64)" in out.output


TYPED = pa.schema([
    ("ts", pa.timestamp("us", "UTC")), ("local", pa.timestamp("us")), ("at_ms", pa.timestamp("ms", "Europe/Paris")),
    ("price", pa.decimal128(10, 2)), ("tags", pa.list_(pa.string())), ("day", pa.date32()), ("[bold]x", pa.string()),
])


@pytest.mark.parametrize("width", [60, 80, 200])
def test_schema_prints_each_type_whole_unit_and_zone_included(tmp_path, width):
    """`lamina schema` shows the type the Python API has (timestamp[us, tz=UTC], not
    "timestamp"), and names as they are (no markup), at any width."""
    from support.cli import console_width, rows_of

    t = lamina.create_table(str(tmp_path / "t"), TYPED)
    with console_width(width):
        out = runner.invoke(app, ["schema", t.uri])
    assert out.exit_code == 0, out.output
    assert all(len(line) <= width for line in out.output.splitlines()), out.output
    rows: list[list[str]] = []  # (id, column, type) of each field, a wrapped cell's lines joined
    for r in rows_of(out.output):
        if r[0]:
            rows.append(r[:3])
        else:
            rows[-1] = [a + (" " if a and b else "") + b for a, b in zip(rows[-1], r[:3])]
    top = {f.name: str(t.schema.field(f.name).type) for f in TYPED}
    shown = {name: typ for _, name, typ in rows if name in top}
    assert {n: typ for n, typ in shown.items()} == {n: typ for n, typ in top.items() if not n == "tags"} | {"tags": "list"}
    assert shown["ts"] == "timestamp[us, tz=UTC]" and shown["at_ms"] == "timestamp[ms, tz=Europe/Paris]"
