"""The `lamina` command against a real table: info, history, files, fsck, tags, rollback, expire,
vacuum, compact, and its refusals. The catalog commands: test_cli_catalog.py."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli.main import app
from lamina.commit import flush_hints

from support.grouped import batch, ids, new_table
from support.rowlevel import three_files
from support.small_files import small_files

runner = CliRunner()


@pytest.fixture(autouse=True)
def hints_written():
    yield
    flush_hints()  # written in the background after each commit: done before the next test


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
    Path(stray).write_bytes(b"x")
    victim = t.scan().plan().paths[0]
    os.remove(os.path.join(t.uri, victim))
    r = runner.invoke(app, ["fsck", t.uri])
    assert r.exit_code == 1 and "1 missing" in r.output and "data/stray.parquet" in r.output


def test_not_a_table_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["info", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no Lamina table" in r.output


@pytest.mark.parametrize("text", ["nanh", "infd", "1e30w"])
def test_cli_durations_that_are_not_durations_are_refused(tmp_path, text):
    uri = str(tmp_path / "t")
    new_table(tmp_path).append(batch([1]))
    result = CliRunner().invoke(app, ["expire", uri, "--older-than", text])
    assert result.exit_code == 2 and "is not a duration like" in result.output
    assert lamina.open_table(uri).log.list_versions() == [0, 1]


def test_cli_tag_rollback_expire_vacuum(tmp_path):
    table = new_table(tmp_path)
    runner = CliRunner()
    table.append(batch([1]))
    table.append(batch([2]))
    r = runner.invoke(app, ["tag", "create", table.uri, "gold", "--version", "1"])
    assert r.exit_code == 0, r.output
    assert "gold" in runner.invoke(app, ["tag", "list", table.uri]).output
    assert runner.invoke(app, ["tag", "create", table.uri, "gold"]).exit_code == 2  # exists
    assert runner.invoke(app, ["tag", "create", table.uri, "12"]).exit_code == 2  # numeric
    r = runner.invoke(app, ["rollback", table.uri, "gold"])
    assert r.exit_code == 0 and "version 3" in r.output
    assert "1 files" in runner.invoke(app, ["files", table.uri, "--version", "gold"]).output
    r = runner.invoke(app, ["expire", table.uri, "--retain-last", "1", "--reader-grace", "0s", "--dry-run"])
    assert r.exit_code == 0 and "would expire 3 versions" in r.output, r.output
    assert lamina.open_table(table.uri).log.list_versions() == [0, 1, 2, 3]
    r = runner.invoke(app, ["expire", table.uri, "--retain-last", "1", "--reader-grace", "0s"])
    assert r.exit_code == 0 and "expire 3 versions" in r.output
    assert runner.invoke(app, ["system", table.uri, "snapshots"]).exit_code == 0
    r = runner.invoke(app, ["vacuum", table.uri, "--dry-run"])
    assert r.exit_code == 0 and "0 orphans" in r.output
    assert runner.invoke(app, ["tag", "delete", table.uri, "gold"]).exit_code == 0
    assert ids(lamina.open_table(table.uri).to_arrow()) == [1]


def test_cli_shows_dv_cardinality_and_deleted_rows(tmp_path):
    table = three_files(tmp_path)
    table.delete("id < 7")
    r = CliRunner().invoke(app, ["files", table.uri])
    assert r.exit_code == 0 and " 7 " in r.output.replace("│", " ")
    r = CliRunner().invoke(app, ["history", table.uri])
    assert r.exit_code == 0 and "delete" in r.output


def test_cli_compact(tmp_path):
    table = small_files(tmp_path)
    r = CliRunner().invoke(app, ["compact", table.uri, "--target-mb", "1"])
    assert r.exit_code == 0 and "table files 24 -> 2" in r.output, r.output
    assert "nothing to compact" in CliRunner().invoke(app, ["compact", table.uri]).output
