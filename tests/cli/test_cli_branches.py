"""`lamina branch create|list|rename|delete|publish` and `--branch` on the table commands, run
through typer's CliRunner on a real table.

Each command's effect is checked on the table through the Python API (after `branch create`
the branch's rows are its source version's, after `branch publish` main's rows are the
branch's, ...). The fixture's branch shares version numbers with main (both have versions 2
and 3, with different rows), so a command that read main's version where the branch's was
asked for fails its check. Bad input exits 2 with a message saying what is wrong, and
changes no file of the table.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from support.cli import console_width, ok, rows_of, run
from support.files import ids_of, referenced, table_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("c", pa.string())])


@pytest.fixture(autouse=True)
def wide_console():
    with console_width(400):  # wide enough for whole paths
        yield


def batch(ids, c: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "c": [c] * len(ids)}, schema=SCHEMA)


def fresh(tmp_path) -> lamina.Table:
    """main: v1 ids 1-3, v2 id 4; no branch yet."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(batch([1, 2, 3]))
    t.append(batch([4], "b"))
    return t


@pytest.fixture
def table(tmp_path):
    """main: v1 ids 1-3, v2 id 4, v3 enables branches; tag gold at v1. Branch audit, made from
    main's v1: v2 appends ids 10, 11 and v3 deletes id 1."""
    t = fresh(tmp_path)
    t.tags.create("gold", 1)
    b = t.branches.create("audit", version=1)
    b.append(batch([10, 11], "b"))
    b.delete("id = 1")
    assert (t.refresh().version, b.version) == (3, 3)
    yield t
    flush_hints()


MAIN_ROWS, AUDIT_ROWS = [1, 2, 3, 4], [2, 3, 10, 11]


def main_of(t: lamina.Table) -> lamina.Table:
    return lamina.open_table(t.uri)


# -- create, list, rename, delete ----------------------------------------------------------------


@pytest.mark.parametrize("args,base_branch,base_version,rows", [
    ([], "main", 3, MAIN_ROWS),  # main's latest
    (["--from-version", "1"], "main", 1, [1, 2, 3]),
    (["--from-tag", "gold"], "main", 1, [1, 2, 3]),
    (["--from-branch", "audit"], "audit", 3, AUDIT_ROWS),
    (["--from-branch", "audit", "--from-version", "2"], "audit", 2, [1, 2, 3, 10, 11]),  # the branch's version 2
])
def test_create_from_each_source(table, args, base_branch, base_version, rows):
    out = ok("branch", "create", table.uri, "new", *args)
    assert f"created branch new from version {base_version} of {base_branch}" in out
    b = lamina.open_table(table.uri, version="new")
    assert (b.branch_record.base_branch, b.branch_record.base_version, b.version) == (base_branch, base_version, base_version)
    assert ids_of(b.to_arrow()) == rows
    assert ids_of(main_of(table).to_arrow()) == MAIN_ROWS and main_of(table).version == 3  # nothing committed on main


def test_create_from_a_timestamp_and_with_retention(table):
    at = table.scan(version=1).vm.timestamp_ms
    ok("branch", "create", table.uri, "then", "--from-timestamp", str(at), "--retain-last", "2", "--max-age", "36h")
    r = lamina.open_table(table.uri, version="then").branch_record
    assert (r.base_version, r.retain_last, r.max_age_ms) == (1, 2, 36 * 3_600_000)


def test_the_first_branch_enables_the_feature_on_main(tmp_path):
    t = fresh(tmp_path)
    ok("branch", "create", t.uri, "first")
    m = main_of(t)
    assert [h["operation"] for h in m.history()][:2] == ["enable-branches", "append"] and "branches" in m.metadata.writer_features
    b = m.branch("first")
    assert b.version == m.version == 3 and ids_of(b.to_arrow()) == MAIN_ROWS


def test_list_shows_main_and_every_branch(table):
    ok("branch", "create", table.uri, "keep", "--from-branch", "audit", "--retain-last", "5", "--max-age", "7d")
    before = time.time() * 1000
    body = rows_of(ok("branch", "list", table.uri))
    # branch, version, committed, records, versions, made from, retain last, max age, created
    assert [(r[0], int(r[1]), int(r[3]), int(r[4]), r[5], r[6], r[7]) for r in body] == [
        ("main", 3, 4, 4, "-", "-", "-"),
        ("audit", 3, 4, 3, "main@1", "-", "-"),  # its base slot and two commits
        ("keep", 3, 4, 1, "audit@3", "5", "1w"),
    ]
    assert body[0][8] == "-" and body[2][8] != "-"
    assert before > lamina.open_table(table.uri, version="keep").branch_record.created_at_ms


def test_rename(table):
    assert "renamed branch audit to checked" in ok("branch", "rename", table.uri, "audit", "checked")
    assert [r[0] for r in rows_of(ok("branch", "list", table.uri))] == ["main", "checked"]
    assert ids_of(lamina.open_table(table.uri, version="checked").to_arrow()) == AUDIT_ROWS
    r = run("history", table.uri, "--branch", "audit")
    assert r.exit_code == 2 and "no branch 'audit'" in r.output


def test_delete_frees_what_only_the_branch_held(table):
    b = table.branch("audit")
    held_by_main = referenced(main_of(table))  # main's versions and the tags
    only_branch = {p for v in (2, 3) for p in b.inspect.files(version=v).to_pydict()["path"] + b.inspect.files(version=v).to_pydict()["dv_path"]
                   if p is not None} - held_by_main
    assert len(only_branch) == 2  # the file of ids 10, 11 and the deletion vector of id 1
    before = table_files(table.uri)
    out = ok("branch", "delete", table.uri, "audit")
    assert "deleted branch audit; the next `lamina expire` frees" in out
    assert {p for p in before if not p.startswith("_lamina/")} <= set(table_files(table.uri))  # nothing freed yet
    out = ok("expire", table.uri, "--retain-last", "100", "--reader-grace", "0s")
    after = table_files(table.uri)
    assert "delete 2 data files" in out, out  # deletion vectors counted with data files
    assert {p for p in set(before) - set(after) if not p.startswith("_lamina/")} == only_branch
    assert held_by_main <= set(after) and not any(p.startswith("_lamina/branches/") for p in after)
    assert ids_of(main_of(table).to_arrow()) == MAIN_ROWS and ids_of(main_of(table).scan(version="gold").to_arrow()) == [1, 2, 3]
    checked = ok("fsck", table.uri)
    assert "0 missing, 0 errors" in checked and "unreferenced data/" not in checked, checked
    r = run("info", table.uri, "--branch", "audit")
    assert r.exit_code == 2 and "no branch 'audit'" in r.output


# -- publish ----------------------------------------------------------------------------------------


def test_publish_by_fast_forward(tmp_path):
    t = fresh(tmp_path)
    ok("branch", "create", t.uri, "etl")
    b = main_of(t).branch("etl")
    b.append(batch([5, 6]))
    audited = main_of(t).version
    out = ok("branch", "publish", t.uri, "etl", "--expected-version", str(audited))
    m = main_of(t)
    assert f"published branch etl into main (fast-forward): version {audited + 1}" in out
    assert m.version == audited + 1 and m.metadata.summary["publish"] == "fast-forward"
    assert ids_of(m.to_arrow()) == ids_of(b.to_arrow()) == [1, 2, 3, 4, 5, 6]


def test_publish_by_rebase_keeps_what_main_committed_meanwhile(table):
    main_of(table).append(batch([7]))
    out = ok("branch", "publish", table.uri, "audit")
    m = main_of(table)
    assert "published branch audit into main (rebase): version 5" in out and m.version == 5
    assert ids_of(m.to_arrow()) == [2, 3, 4, 7, 10, 11]  # the branch's append and delete, on main's latest


def test_publish_into_the_branch_it_was_made_from(table):
    ok("branch", "create", table.uri, "fix", "--from-branch", "audit")
    table.branch("fix").append(batch([12]))
    out = ok("branch", "publish", table.uri, "fix", "--into", "audit")
    assert "published branch fix into audit (fast-forward): version 4" in out
    assert ids_of(lamina.open_table(table.uri, version="audit").to_arrow()) == AUDIT_ROWS + [12]
    assert main_of(table).version == 3  # main untouched


def test_publish_refused_when_main_moved_past_the_expected_version(table):
    before = table_files(table.uri)
    r = run("branch", "publish", table.uri, "audit", "--expected-version", "2")
    assert r.exit_code == 2 and "not publishing branch 'audit'" in r.output and "Traceback" not in r.output
    assert table_files(table.uri) == before


def test_publish_conflict_names_the_clashing_file(tmp_path):
    t = fresh(tmp_path)
    ok("branch", "create", t.uri, "fix")
    main_of(t).branch("fix").delete("id = 1")  # a deletion vector on the file of ids 1-3
    main_of(t).delete("id = 2")  # ... and main gives that file another one
    clash = t.scan(version=1).plan().paths[0]
    before = table_files(t.uri)
    r = run("branch", "publish", t.uri, "fix")
    assert r.exit_code == 2 and "cannot publish branch 'fix'" in r.output and clash in r.output, r.output
    assert table_files(t.uri) == before


def test_publish_of_a_branch_without_commits_changes_nothing(tmp_path):
    t = fresh(tmp_path)
    ok("branch", "create", t.uri, "idle")
    before = table_files(t.uri)
    out = ok("branch", "publish", t.uri, "idle")
    assert "branch idle has no commits: nothing published into main" in out and table_files(t.uri) == before


# -- --branch on the table commands -----------------------------------------------------------------


def test_info_and_history_of_a_branch(table):
    doc = json.loads(ok("info", table.uri, "--json", "--branch", "audit"))
    assert (doc["branch"], doc["version"], doc["records"]) == ("audit", 3, 4)
    old = json.loads(ok("info", table.uri, "--json", "-b", "audit", "--version", "2"))
    assert (old["version"], old["records"]) == (2, 5)  # the branch's version 2, not main's (4 rows)
    assert json.loads(ok("info", table.uri, "--json"))["branch"] == "main"
    body = rows_of(ok("history", table.uri, "--branch", "audit"))
    assert [(int(r[0]), r[2]) for r in body] == [(3, "delete"), (2, "append"), (1, "append")]  # from its base
    assert [int(r[0]) for r in rows_of(ok("history", table.uri))] == [3, 2, 1, 0]


def test_files_schema_and_changes_of_a_branch(table):
    b = table.branch("audit")
    listed = rows_of(ok("files", table.uri, "--branch", "audit", "--version", "2"))
    assert {r[0] for r in listed} == set(b.inspect.files(version=2).column("path").to_pylist())
    assert {r[0] for r in listed} != set(table.inspect.files(version=2).column("path").to_pylist())
    assert "version 2" in ok("schema", table.uri, "-b", "audit", "--version", "2")
    rows = [json.loads(line) for line in ok("changes", table.uri, "--branch", "audit", "--from", "1", "--json").splitlines()]
    assert sorted((r["_change_type"], r["id"]) for r in rows) == [("delete", 1), ("insert", 10), ("insert", 11)]


def test_system_tables_of_a_branch(table):
    snaps = rows_of(ok("system", table.uri, "snapshots", "--branch", "audit"))
    assert [(int(r[0]), r[-1]) for r in snaps] == [(1, "audit"), (2, "audit"), (3, "audit")]
    assert [r[-1] for r in rows_of(ok("system", table.uri, "snapshots"))] == ["main"] * 4
    files = rows_of(ok("system", table.uri, "files", "--branch", "audit", "--version", "2"))
    assert {r[0] for r in files} == set(table.branch("audit").inspect.files(version=2).column("path").to_pylist())
    branches = rows_of(ok("system", table.uri, "branches"))
    assert [r[0] for r in branches] == ["main", "audit"]


def test_tag_a_version_of_a_branch(table):
    assert "tagged version 2 of branch audit as audited" in ok("tag", "create", table.uri, "audited", "-b", "audit", "-v", "2")
    assert ids_of(main_of(table).scan(version="audited").to_arrow()) == [1, 2, 3, 10, 11]


def test_rollback_expire_and_compact_on_a_branch(table):
    out = ok("rollback", table.uri, "2", "--branch", "audit")
    b = lamina.open_table(table.uri, version="audit")
    assert "committed version 4" in out and b.version == 4 and ids_of(b.to_arrow()) == [1, 2, 3, 10, 11]
    out = ok("compact", table.uri, "--branch", "audit")
    b = lamina.open_table(table.uri, version="audit")
    assert b.version == 5 and b.metadata.operation == "compact" and len(b.inspect.files()) == 1
    assert ids_of(b.to_arrow()) == [1, 2, 3, 10, 11]
    out = ok("expire", table.uri, "--branch", "audit", "--retain-last", "1", "--reader-grace", "0s")
    assert "expire 4 versions (1..4)" in out
    assert [h["version"] for h in lamina.open_table(table.uri, version="audit").history()] == [5]
    m = main_of(table)
    assert [h["version"] for h in m.history()] == [3, 2, 1, 0] and ids_of(m.to_arrow()) == MAIN_ROWS


def test_sql_reads_a_branch(table):
    got = [json.loads(line) for line in ok(
        "sql", "--json", f"SELECT id FROM \"{table.uri}\" AT (BRANCH => 'audit') WHERE id > 2 ORDER BY id").splitlines()]
    assert [r["id"] for r in got] == [3, 10, 11]


def test_catalog_tables_take_branches_by_name(tmp_path):
    uri = f"sqlite:///{tmp_path}/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("ns")
    t = cat.create_table("ns.events", SCHEMA)
    t.append(batch([1]))
    ok("--catalog", uri, "branch", "create", "ns.events", "etl")
    cat.load_table("ns.events").branch("etl").append(batch([2]))
    assert json.loads(ok("--catalog", uri, "info", "ns.events", "-b", "etl", "--json"))["records"] == 2
    ok("--catalog", uri, "branch", "publish", "ns.events", "etl")
    assert cat.table_info("ns.events").version == 3  # the publish went through the catalog's row
    assert ids_of(cat.load_table("ns.events").to_arrow()) == [1, 2]
    cat.close()


# -- bad input changes nothing ----------------------------------------------------------------------


BAD = [
    (["branch", "create", "{t}", "main"], "main"),
    (["branch", "create", "{t}", "12"], "12"),
    (["branch", "create", "{t}", "a/b"], "a/b"),
    (["branch", "create", "{t}", "audit"], "branch 'audit' already exists"),
    (["branch", "create", "{t}", "gold"], "'gold' is a tag"),
    (["branch", "create", "{t}", "x", "--from-version", "99"], "version 99"),
    (["branch", "create", "{t}", "x", "--from-tag", "nope"], "no tag 'nope'"),
    (["branch", "create", "{t}", "x", "--from-branch", "nope"], "no branch 'nope'"),
    (["branch", "create", "{t}", "x", "--from-branch", "audit", "--from-version", "0"], "version 0 of branch 'audit'"),
    (["branch", "create", "{t}", "x", "--from-tag", "gold", "--from-branch", "audit"], "not both"),
    (["branch", "create", "{t}", "x", "--from-tag", "gold", "--from-version", "1"], "not several"),
    (["branch", "create", "{t}", "x", "--retain-last", "0"], "retain_last"),
    (["branch", "create", "{t}", "x", "--max-age", "soon"], "not a duration"),
    (["branch", "delete", "{t}", "main"], "cannot be deleted"),
    (["branch", "delete", "{t}", "nope"], "no branch 'nope'"),
    (["branch", "rename", "{t}", "main", "x"], "cannot be renamed"),
    (["branch", "rename", "{t}", "audit", "gold"], "'gold' is a tag"),
    (["branch", "rename", "{t}", "audit", "main"], "main"),
    (["branch", "rename", "{t}", "nope", "x"], "no branch 'nope'"),
    (["branch", "publish", "{t}", "audit", "--into", "audit"], "into itself"),
    (["branch", "publish", "{t}", "main", "--into", "audit"], "publish a branch into main"),
    (["branch", "publish", "{t}", "nope"], "no branch 'nope'"),
    (["branch", "publish", "{t}", "audit", "--into", "nope"], "no branch 'nope'"),
    (["tag", "create", "{t}", "audit"], "'audit' is a branch"),
    (["history", "{t}", "--branch", "nope"], "no branch 'nope'"),
    (["info", "{t}", "--branch", "nope"], "no branch 'nope'"),
    (["info", "{t}", "--branch", "audit", "--version", "0"], "version 0 of branch 'audit'"),
    (["files", "{t}", "--branch", "audit", "--version", "99"], "version 99 of branch 'audit'"),
    (["system", "{t}", "snapshots", "--branch", "nope"], "no branch 'nope'"),
    (["rollback", "{t}", "0", "--branch", "audit"], "version 0 of branch 'audit'"),
    (["compact", "{t}", "--branch", "nope"], "no branch 'nope'"),
    (["expire", "{t}", "--branch", "nope"], "no branch 'nope'"),
    (["sql", "SELECT * FROM \"{t}\" AT (BRANCH => 'nope')"], "no branch 'nope'"),
]


@pytest.mark.parametrize("command,words", BAD, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_bad_input_exits_2_says_why_and_changes_nothing(table, command, words):
    before = table_files(table.uri)
    r = run(*[a.format(t=table.uri) for a in command])
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output, r.output
    assert table_files(table.uri) == before


@pytest.mark.parametrize("source", [["--from-version", "99"], ["--from-tag", "nope"], ["--from-timestamp", "1999-01-01T00:00:00Z"]])
def test_a_bad_source_of_the_first_branch_does_not_enable_branches(tmp_path, source):
    """The first branch commits the feature on main: not when its source does not exist."""
    t = fresh(tmp_path)
    before = table_files(t.uri)
    r = run("branch", "create", t.uri, "x", *source)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert table_files(t.uri) == before and main_of(t).version == 2
