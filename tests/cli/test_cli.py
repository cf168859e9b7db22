"""The `lamina` command against a real table."""

from __future__ import annotations

import os

import pyarrow as pa
from typer.testing import CliRunner

import lamina
from lamina.cli.main import app

runner = CliRunner()


def _table(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("c", pa.string())])
    t = lamina.create_table(str(tmp_path / "t"), schema, partition_by=["c"])
    t.append(pa.table({"id": [1, 2, 3], "c": ["a", "b", "a"]}, schema=schema))
    t.append(pa.table({"id": [4], "c": ["b"]}, schema=schema))
    return t


def test_info_history_files(tmp_path):
    t = _table(tmp_path)
    r = runner.invoke(app, ["info", t.uri, "--json"])
    assert r.exit_code == 0 and '"version": 2' in r.output and t.uuid in r.output
    r = runner.invoke(app, ["history", t.uri])
    assert r.exit_code == 0 and "append" in r.output and "create" in r.output
    r = runner.invoke(app, ["files", t.uri, "--where", "c = 'a'"])
    assert r.exit_code == 0 and "1 files, 2 rows" in r.output and "c=a" in r.output


def test_fsck_reports_missing_and_unreferenced(tmp_path):
    t = _table(tmp_path)
    r = runner.invoke(app, ["fsck", t.uri])
    assert r.exit_code == 0 and "0 missing" in r.output and "0 unreferenced" in r.output
    stray = os.path.join(t.uri, "data", "stray.parquet")
    open(stray, "wb").write(b"x")
    victim = t.scan().plan().paths[0]
    os.remove(os.path.join(t.uri, victim))
    r = runner.invoke(app, ["fsck", t.uri])
    assert r.exit_code == 1 and "1 missing" in r.output and "data/stray.parquet" in r.output


def test_not_a_table_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["info", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no Lamina table" in r.output
