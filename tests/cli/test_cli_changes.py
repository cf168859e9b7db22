"""`lamina changes` (the change data feed), `lamina info`'s row lineage and `lamina history` of
a table that turns lineage on: what they print, checked against a model of the history the
test made, at a wide terminal and at 80 columns; and bad input, a one-line error with exit 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

import lamina
from lamina.commit import flush_hints
from support.cli import console_width, ok, rows_of, run
from support.files import table_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("c", pa.string())])

# The change rows of each version of the `history` fixture: (id, c, change type).
MODEL = {
    1: [(1, "a", "insert"), (2, "a", "insert"), (3, "a", "insert"), (4, "a", "insert")],
    2: [(2, "a", "update_preimage"), (2, "B", "update_postimage"), (3, "a", "delete"), (9, "i", "insert")],
    3: [],  # compaction
    4: [(1, "a", "delete")],
}
OPERATIONS = {1: "append", 2: "merge", 3: "compact", 4: "delete"}


def model(versions) -> list[tuple[int, str, int, str]]:
    """(version, change type, id, c) of every change of ``versions``, sorted."""
    return sorted((v, kind, i, c) for v in versions for i, c, kind in MODEL[v])


def batch(ids, c: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "c": [c] * len(ids)}, schema=SCHEMA)


@pytest.fixture
def history(tmp_path):
    """v1: ids 1-4; v2: a merge updating 2, deleting 3, inserting 9; v3: compaction; v4: id 1 deleted.
    Tags: `loaded` at v1, `merged` at v2."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(batch([1, 2, 3, 4], "a"))
    src = pa.table({"id": pa.array([2, 3, 9], pa.int64()), "c": ["B", "drop", "i"]}, schema=SCHEMA)
    (t.merge(src, on="id").when_matched_delete(condition="source.c = 'drop'")
     .when_matched_update({"c": "source.c"}).when_not_matched_insert_all().execute())
    assert t.maintenance.compact().version == 3
    t.delete("id = 1")
    assert t.version == 4 and [h["operation"] for h in reversed(t.history())][1:] == list(OPERATIONS.values())
    t.tags.create("loaded", 1)
    t.tags.create("merged", 2)
    yield t
    flush_hints()


@pytest.fixture(autouse=True)
def wide_console():
    with console_width(400):
        yield


def listed(output: str) -> list[tuple[int, str, int, str]]:
    """(version, change type, id, c) of the rows of `lamina changes`' table, sorted."""
    return sorted((int(r[0]), r[2], int(r[3]), r[4]) for r in rows_of(output))


def iso(t: lamina.Table, version: int) -> str:
    return datetime.fromtimestamp(t.scan(version=version).vm.timestamp_ms / 1000, tz=timezone.utc).isoformat()


def ms(t: lamina.Table, version: int) -> str:
    return str(t.scan(version=version).vm.timestamp_ms)


# -- the rows --------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,versions", [
    (["--from", "0"], [1, 2, 3, 4]),
    (["--from", "1"], [2, 3, 4]),
    (["--from", "1", "--to", "2"], [2]),
    (["--from-tag", "loaded"], [2, 3, 4]),
    (["--from", "0", "--to-tag", "merged"], [1, 2]),
    (["--from-timestamp", "{iso2}"], [2, 3, 4]),  # the versions committed at or after it
    (["--from-timestamp", "{ms4}"], [4]),  # epoch milliseconds
    (["--from", "0", "--to-timestamp", "{iso1}"], [1]),  # ... at or before it
    (["--from", "2", "--to", "3"], [3]),  # compaction: no change rows
])
def test_changes_lists_the_rows_of_the_range(history, args, versions):
    t = history
    args = [a.format(iso1=iso(t, 1), iso2=iso(t, 2), ms4=ms(t, 4)) for a in args]
    out = ok("changes", t.uri, *args)
    assert listed(out) == model(versions)
    start = min(versions) - 1
    assert f"changes in versions ({start}, {max(versions)}]" in out
    assert ("no row changes" in out) == (not model(versions))


def test_where_and_columns_push_down_and_row_ids_pair_the_images(history):
    out = ok("changes", history.uri, "--from", "1", "--where", "id >= 2", "--columns", "id, _row_id", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert all(set(r) == {"id", "_row_id", "_change_type", "_commit_version", "_commit_timestamp"} for r in rows)
    assert sorted((r["_commit_version"], r["_change_type"], r["id"]) for r in rows) == [
        (v, kind, i) for v, kind, i, _ in model([2, 3, 4]) if i >= 2]
    row_ids = dict(zip(*history.scan(version=1, columns=["id", "_row_id"]).to_arrow().to_pydict().values()))
    assert {r["_row_id"] for r in rows if r["id"] == 2} == {row_ids[2]}  # one row, both images
    assert {r["_row_id"] for r in rows if r["id"] == 3} == {row_ids[3]}


def test_json_lines_hold_every_column_and_the_commit_times(history):
    rows = [json.loads(line) for line in ok("changes", history.uri, "--from", "0", "--json").splitlines()]
    assert sorted((r["_commit_version"], r["_change_type"], r["id"], r["c"]) for r in rows) == model([1, 2, 3, 4])
    for r in rows:
        committed = history.scan(version=r["_commit_version"]).vm.timestamp_ms
        assert datetime.fromisoformat(r["_commit_timestamp"]) == datetime.fromtimestamp(committed / 1000, tz=timezone.utc)
    assert len(ok("changes", history.uri, "--from", "0", "--json", "--limit", "2").splitlines()) == 2


def test_csv_has_a_header_and_every_row(history):
    out = ok("changes", history.uri, "--from", "0", "--csv")
    got = pacsv.read_csv(io.BytesIO(out.encode()))
    assert got.column_names == ["id", "c", "_change_type", "_commit_version", "_commit_timestamp"]
    assert sorted(zip(got["_commit_version"].to_pylist(), got["_change_type"].to_pylist(), got["id"].to_pylist(),
                      got["c"].to_pylist())) == model([1, 2, 3, 4])
    stamps = {v: history.scan(version=v).vm.timestamp_ms for v in MODEL}
    assert [int(ts.timestamp() * 1000 + 0.5) for ts in got["_commit_timestamp"].to_pylist()] == [
        stamps[v] for v in got["_commit_version"].to_pylist()]


def test_limit_shows_the_first_rows_and_says_more_follow(history):
    out = ok("changes", history.uri, "--from", "0", "--limit", "3")
    assert len(rows_of(out)) == 3 and "the first 3 change rows; more follow" in out
    every = ok("changes", history.uri, "--from", "0", "--limit", "9")  # exactly all of them
    assert listed(every) == model([1, 2, 3, 4]) and "more follow" not in every
    assert listed(ok("changes", history.uri, "--from", "0")) == model([1, 2, 3, 4])  # the default, 50


def test_summary_counts_by_version_and_change_type(history):
    out = ok("changes", history.uri, "--from", "0", "--summary")
    kinds = ["insert", "delete", "update_preimage", "update_postimage"]
    want = [(v, OPERATIONS[v], *[sum(k == kind for *_, k in MODEL[v]) for kind in kinds]) for v in MODEL]
    assert [(int(r[0]), r[2], *map(int, r[3:])) for r in rows_of(out)] == want
    assert "9 change rows: 5 insert, 2 delete, 1 update_preimage, 1 update_postimage" in out
    as_json = [json.loads(line) for line in ok("changes", history.uri, "--from", "0", "--summary", "--json").splitlines()]
    assert [(r["version"], r["operation"], *[r[k] for k in kinds]) for r in as_json] == want
    only_2 = rows_of(ok("changes", history.uri, "--from", "0", "--summary", "--where", "id = 2"))
    assert [(int(r[0]), *map(int, r[3:])) for r in only_2] == [(1, 1, 0, 0, 0), (2, 0, 0, 1, 1), (3, 0, 0, 0, 0), (4, 0, 0, 0, 0)]


def test_a_catalog_table_by_name(tmp_path):
    uri = f"sqlite:///{tmp_path}/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(batch([1, 2], "a"))
    out = ok("--catalog", uri, "changes", "ns.t", "--from", "0")
    assert listed(out) == [(1, "insert", 1, "a"), (1, "insert", 2, "a")]
    cat.close()


# -- 80 columns ------------------------------------------------------------------------------------

WIDE = pa.schema([pa.field("id", pa.int64(), False)] + [pa.field(f"column_{i}", pa.string()) for i in range(7)])


@pytest.fixture
def wide_rows(tmp_path):
    """Eight columns of long values; v2 updates ids 1 and 2 (every column but id)."""
    t = lamina.create_table(str(tmp_path / "wide"), WIDE)
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                       **{f"column_{i}": [f"value-{i}-of-row-{r}-long" for r in (1, 2, 3)] for i in range(7)}}, schema=WIDE))
    t.update(where="id <= 2", set={f"column_{i}": "'changed'" for i in range(7)})
    yield t
    flush_hints()


def test_at_80_columns_versions_and_change_types_are_whole_and_what_does_not_fit_is_named(wide_rows):
    t = wide_rows
    with console_width(80):
        out = ok("changes", t.uri, "--from", "0")
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    body = [r for r in rows_of(out) if r[0]]  # a row's first line (wrapped cells continue below)
    assert sorted((int(r[0]), r[2], int(r[3])) for r in body) == sorted(
        [(1, "insert", i) for i in (1, 2, 3)] + [(2, kind, i) for kind in ("update_preimage", "update_postimage") for i in (1, 2)])
    day = datetime.fromtimestamp(t.metadata.timestamp_ms / 1000, tz=timezone.utc)
    assert day.strftime("%Y-%m-%d") in out  # the date once, in the header: the cells are times of day
    times = {datetime.fromtimestamp(t.scan(version=v).vm.timestamp_ms / 1000, tz=timezone.utc).strftime("%H:%M:%S")
             for v in (1, 2)}
    assert {r[1] for r in body} == times
    dropped = " ".join(out[out.index("more columns do not fit"):].split())  # the note wraps too
    assert dropped.startswith("more columns do not fit in 80 characters: ")
    named = dropped.split(": ", 1)[1].split(" (")[0].split(", ")
    columns = [f"column_{i}" for i in range(7)]
    assert 0 < len(named) < 7 and named == columns[-len(named):]  # the last columns give way
    headers = "".join(line for line in lines if line.startswith("┃"))
    assert all(c in headers for c in columns[: -len(named)]) and not any(c in headers for c in named)
    assert "--columns picks columns" in dropped
    with console_width(400):
        wide = ok("changes", t.uri, "--from", "0")
    assert "not fit" not in wide and all(f"column_{i}" in wide for i in range(7))
    assert "value-6-of-row-3-long" in wide and "update_postimage" in wide
    with console_width(80):
        picked = ok("changes", t.uri, "--from", "1", "--columns", "id,column_6")
    assert "not fit" not in picked and all(len(line) <= 80 for line in picked.splitlines())
    assert sorted((r[2], int(r[3]), r[4]) for r in rows_of(picked)) == [
        ("update_postimage", 1, "changed"), ("update_postimage", 2, "changed"),
        ("update_preimage", 1, "value-6-of-row-1-long"), ("update_preimage", 2, "value-6-of-row-2-long")]


def test_summary_and_history_fit_80_columns(wide_rows):
    with console_width(80):
        summary = ok("changes", wide_rows.uri, "--from", "0", "--summary")
        history = ok("history", wide_rows.uri)
    for out in (summary, history):
        assert all(len(line) <= 80 for line in out.splitlines()), out
    assert [(int(r[0]), r[2], *map(int, r[3:7])) for r in rows_of(summary)] == [(1, "append", 3, 0, 0, 0), (2, "update", 0, 0, 2, 2)]
    assert [(int(r[0]), r[2]) for r in rows_of(history)] == [(2, "update"), (1, "append"), (0, "create")]


@pytest.mark.slow  # runs the CLI in a process
def test_the_command_in_a_terminal_of_80_columns(wide_rows):
    """COLUMNS=80 as a shell sets it, read when the command starts (the tests above set the
    width in-process)."""
    env = {**os.environ, "COLUMNS": "80"}
    r = subprocess.run([sys.executable, "-m", "lamina.cli.main", "changes", wide_rows.uri, "--from", "0"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert all(len(line) <= 80 for line in r.stdout.splitlines()) and "not fit in 80 characters" in r.stdout
    assert sorted(int(row[0]) for row in rows_of(r.stdout) if row[0]) == [1, 1, 1, 2, 2, 2, 2]


# -- row lineage in info and history ---------------------------------------------------------------


def test_info_shows_row_lineage_and_the_next_row_id(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"row-lineage.enabled": "false"})
    t.append(batch([1, 2, 3], "a"))
    t.delete("id = 2")  # a deletion vector: the file keeps 3 physical rows
    doc = json.loads(ok("info", t.uri, "--json"))
    assert (doc["row_lineage"], doc["next_row_id"]) == (False, None)
    text = ok("info", t.uri)
    assert "row_lineage  off" in text and "next_row_id  -" in text
    v = t.enable_row_lineage().version
    t.append(batch([7, 8], "b"))
    doc = json.loads(ok("info", t.uri, "--json"))
    assert (doc["row_lineage"], doc["next_row_id"]) == (True, 3 + 2)  # one id per physical row
    assert "row_lineage  on" in ok("info", t.uri) and "next_row_id  5" in ok("info", t.uri)
    old = json.loads(ok("info", t.uri, "--json", "--version", str(v - 1)))
    assert (old["row_lineage"], old["next_row_id"]) == (False, None)


def test_history_and_changes_of_a_table_that_turns_lineage_on(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"row-lineage.enabled": "false"})
    t.append(batch([1, 2], "a"))
    v = t.enable_row_lineage().version
    t.append(batch([3], "b"))
    with console_width(80):
        out = ok("history", t.uri)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    rows = {int(r[0]): r for r in rows_of(out)}
    plus_rows, minus_rows, _total, plus_files = rows[v][3:7]
    assert rows[v][2] == "enable-row-lineage" and [plus_rows, minus_rows, plus_files] == ["0", "0", "0"]  # none added or removed
    r = run("changes", t.uri, "--from", str(v - 1))
    assert r.exit_code == 2 and f"the oldest start version still answerable is {v}" in r.output
    assert listed(ok("changes", t.uri, "--from", str(v))) == [(v + 1, "insert", 3, "b")]
    summary = rows_of(ok("changes", t.uri, "--from", str(v), "--summary"))
    assert [(int(r[0]), r[2], r[3]) for r in summary] == [(v + 1, "append", "1")]


# -- bad input -------------------------------------------------------------------------------------

BAD = [
    ([], "--from VERSION, --from-timestamp TIME or --from-tag TAG"),
    (["--from", "1", "--from-tag", "loaded"], "one of --from"),
    (["--from", "0", "--to", "1", "--to-tag", "merged"], "at most one of --to"),
    (["--from", "3", "--to", "1"], "ends at version 1, before its start 3"),
    (["--from", "99"], "version 99 does not exist: the latest version is 4"),
    (["--from", "0", "--to", "99"], "version 99 does not exist"),
    (["--from", "-1"], "non-negative"),
    (["--from-tag", "nope"], "no tag 'nope'"),
    (["--from-timestamp", "yesterday"], "not ISO 8601"),
    (["--from-timestamp", "1999-01-01T00:00:00+00:00", "--to-timestamp", "1999-01-02T00:00:00+00:00"], "before the table was created"),
    (["--from", "0", "--columns", "id,nope"], "nope"),
    (["--from", "0", "--where", "nope > 1"], "nope"),
    (["--from", "0", "--json", "--csv"], "one of --json, --csv or --output"),
    (["--from", "0", "--output", "csv", "--json"], "one of --json, --csv or --output"),
    (["--from", "0", "--summary", "--limit", "3"], "--summary counts every change"),
    (["--from", "0", "--summary", "--columns", "id"], "--summary counts every change"),
]


@pytest.mark.parametrize("args,words", BAD, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_bad_input_is_a_one_line_error_with_exit_2_and_changes_nothing(history, args, words):
    before = table_files(history.uri)
    with console_width(80):
        r = run("changes", history.uri, *args)
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1 and r.output.startswith("error: "), r.output  # even past 80 characters
    assert table_files(history.uri) == before


def test_csv_refuses_nested_columns_before_printing_anything(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("tags", pa.list_(pa.string()))])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": [1], "tags": [["x", "y"]]}, schema=schema))
    r = run("changes", t.uri, "--from", "0", "--csv")
    assert r.exit_code == 2 and r.output.startswith("error: CSV cannot hold the nested column tags")
    assert [json.loads(line)["tags"] for line in ok("changes", t.uri, "--from", "0", "--json").splitlines()] == [["x", "y"]]
    assert "--columns" in r.output and ok("changes", t.uri, "--from", "0", "--csv", "--columns", "id").startswith('"id"')


def test_a_range_into_expired_versions_names_the_oldest_start(history):
    history.maintenance.expire_versions(retain_last=2, reader_grace=timedelta(0))
    r = run("changes", history.uri, "--from", "1")
    assert r.exit_code == 2 and "the oldest start version still answerable is 3" in r.output
    assert listed(ok("changes", history.uri, "--from", "3")) == model([4])


def test_values_print_as_they_are_not_as_markup(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(batch([1], "[bold]x[/bold] :smile:"))
    assert [r[4] for r in rows_of(ok("changes", t.uri, "--from", "0"))] == ["[bold]x[/bold] :smile:"]
