"""Every `lamina` command (lamina/cli/main.py, lamina/cli/catalog.py) run through typer's
CliRunner on a real table.

Each command's effect is checked on the table through the Python API (after `rollback`
the rows are the target version's, after `tag create` the tag exists, ...), and what it
prints against the same API. Bad input -- a location holding no table, a version that
does not exist, a duration or name that is not one -- exits non-zero with a message
saying what is wrong, and changes no file of the table.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.commit import flush_hints
from support.cli import console_width, ok, rows_of, run
from support.files import ids_of, table_files
from support.files import set_age as age

pytestmark = pytest.mark.slow  # every command's full run on its own tables

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("c", pa.string())])


@pytest.fixture(autouse=True)
def wide_console():
    with console_width(400):  # wide enough for whole paths
        yield


def batch(ids, c: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "c": [c] * len(ids)}, schema=SCHEMA)








_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def size_in_bytes(text: str) -> float:
    """A size as the tables print it ('905 B', '5.5 KiB') in bytes."""
    number, unit = text.split()
    return float(number.replace(",", "")) * _UNITS[unit]


@pytest.fixture
def table(tmp_path):
    """v1: ids 1-3 (c=a, c=b), v2: id 4, v3: id 2 deleted (a deletion vector)."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["c"])
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "c": ["a", "b", "a"]}, schema=SCHEMA))
    t.append(batch([4], "b"))
    t.delete("id = 2")
    yield t
    flush_hints()


# -- inspecting ----------------------------------------------------------------------------


def test_info(table):
    doc = json.loads(ok("info", table.uri, "--json"))
    vm = table.metadata
    assert (doc["location"], doc["uuid"], doc["version"]) == (table.uri, table.uuid, 3)
    assert (doc["files"], doc["records"]) == (vm.summary["total-files"], vm.summary["total-records"]) == (2, 3)
    assert doc["schema"] == ["id: int64 not null", "c: string"] and doc["partition_by"] == ["identity(c) as c"]
    assert doc["reader_features"] == list(vm.reader_features) and doc["writer_features"] == list(vm.writer_features)
    old = json.loads(ok("info", table.uri, "--json", "--version", "1"))
    assert (old["version"], old["records"]) == (1, 3)
    text = ok("info", table.uri)
    assert re.search(r"version\s+3\n", text) and re.search(r"records\s+3\n", text) and table.uuid in text


def test_history(table):
    body = rows_of(ok("history", table.uri))
    want = table.history()
    assert [int(r[0]) for r in body] == [h["version"] for h in want] == [3, 2, 1, 0]
    assert [r[2] for r in body] == [h["operation"] for h in want] == ["delete", "append", "append", "create"]
    assert [r[5] for r in body] == [str(h["summary"]["total-records"]) for h in want]  # +rows, -rows, total rows
    assert [int(r[0]) for r in rows_of(ok("history", table.uri, "--limit", "2"))] == [3, 2]


def test_files(table):
    out = ok("files", table.uri)
    live = {r["path"]: r for r in table.inspect.files().to_pylist()}
    body = rows_of(out)
    assert {r[0] for r in body} == set(live) and len(body) == 2
    for path, n, size, added, deleted in body:
        f = live[path]
        assert path.startswith(f"data/{f['partition']}/")  # the path shows the partition
        assert (int(n), int(added), int(deleted)) == (f["record_count"], f["added_version"], f["dv_cardinality"] or 0)
        assert abs(size_in_bytes(size) - f["size"]) <= 0.05 * 1024  # in KiB, to a tenth
    assert "2 files, 3 rows" in out
    a = rows_of(ok("files", table.uri, "--where", "c = 'a'"))
    assert [r[0].split("/")[1] for r in a] == ["c=a"] and a[0][4] == "0"
    assert rows_of(ok("files", table.uri, "--where", "c LIKE 'a%' AND length(c) = 1")) == a  # an expression prunes too
    v1 = rows_of(ok("files", table.uri, "--version", "1"))
    assert {r[0] for r in v1} == set(table.inspect.files(version=1).column("path").to_pylist())
    assert all(r[4] == "0" for r in v1)  # no deletion vector at version 1
    short = ok("files", table.uri, "--limit", "1")
    assert len(rows_of(short)) == 1 and "... 1 more (use --limit)" in short


def test_fsck(table):
    out = ok("fsck", table.uri)
    assert "version 3: checked" in out and "0 missing, 0 errors, 0 unreferenced" in out
    victim = table.inspect.files().column("path").to_pylist()[0]
    os.remove(os.path.join(table.uri, victim))
    r = run("fsck", table.uri)
    assert r.exit_code == 1 and f"missing {victim}" in r.output and "1 missing" in r.output
    # a missing manifest hides which files the version holds: none is called unreferenced
    # (a table whose roots are files: the fixture's version manifests carry theirs)
    other = lamina.create_table(os.path.join(table.uri + "-files"), SCHEMA, properties={"manifest.root-format": "arrow"})
    other.append(batch([5], "b"))
    root = other.metadata.root_manifest
    os.remove(os.path.join(other.uri, root))
    r = run("fsck", other.uri)
    assert r.exit_code == 1 and f"missing {root}" in r.output and "0 unreferenced" in r.output
    assert "unreferenced files not listed" in r.output


def test_system(table):
    table.tags.create("t1", 1)
    snaps = rows_of(ok("system", table.uri, "snapshots"))
    assert [int(r[0]) for r in snaps] == [0, 1, 2, 3]
    assert [r[7] for r in snaps] == [h["commit_id"] for h in reversed(table.history())]
    tags = rows_of(ok("system", table.uri, "$tags"))
    assert [(r[0], r[1]) for r in tags] == [("t1", "1")]
    files = rows_of(ok("system", table.uri, "files", "--version", "t1"))
    assert {r[0] for r in files} == set(table.inspect.files(version="t1").column("path").to_pylist())
    manifests = rows_of(ok("system", table.uri, "manifests"))
    assert [r[0] for r in manifests] == table.inspect.manifests().column("path").to_pylist()
    r = run("system", table.uri, "nope")
    assert r.exit_code == 2 and "no system table 'nope'" in r.output


# -- tags -------------------------------------------------------------------------------------


def test_tag_create_list_delete(table):
    out = ok("tag", "create", table.uri, "gold", "--version", "1")
    assert "tagged version 1 as gold" in out and table.tags.get("gold").tagged_version == 1
    before = time.time()
    ok("tag", "create", table.uri, "monthly", "--expires-in", "30d")
    tag = table.tags.get("monthly")
    assert tag.tagged_version == 3
    assert before * 1000 + 30 * 86_400_000 - 5_000 <= tag.expires_at_ms <= time.time() * 1000 + 30 * 86_400_000
    body = rows_of(ok("tag", "list", table.uri))
    assert [(r[0], int(r[1]), r[3]) for r in body] == [("gold", 1, "3"), ("monthly", 3, "3")]
    assert body[1][5] != "-" and body[0][5] == "-"  # the expiry shows
    table.overwrite(batch([9]))
    table.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))  # gold alone holds version 1's files now
    plan = table.tags.delete("gold", dry_run=True)
    files = table_files(table.uri)
    out = ok("tag", "delete", table.uri, "gold", "--dry-run")
    assert table_files(table.uri) == files and table.tags.get("gold").tagged_version == 1
    assert f"would delete tag gold; would free {len(plan.deleted_files)} data files" in out
    out = ok("tag", "delete", table.uri, "gold")
    assert f"deleted tag gold; freed {len(plan.deleted_files)} data files, {len(plan.deleted_manifests)} manifests" in out
    assert [t.name for t in table.tags.list()] == ["monthly"]
    assert set(files) - set(table_files(table.uri)) == set(plan.deleted_files) | set(plan.deleted_manifests) | {
        "_lamina/tags/gold.json"}


# -- rollback, expiry, orphans, compaction ----------------------------------------------------------


def test_rollback_to_a_version_and_to_a_tag(table):
    out = ok("rollback", table.uri, "1")
    t = lamina.open_table(table.uri)
    assert "rolled back to 1: committed version 4" in out and t.version == 4
    assert ids_of(t.to_arrow()) == ids_of(t.scan(version=1).to_arrow()) == [1, 2, 3]
    t.tags.create("with-4", 2)
    ok("rollback", table.uri, "with-4")
    t.refresh()
    assert t.version == 5 and ids_of(t.to_arrow()) == [1, 2, 3, 4] and t.metadata.summary["rollback-to"] == 2


def test_destructive_rollback_asks_first(table):
    before = table_files(table.uri)
    r = run("rollback", table.uri, "1", "--destructive", input="n\n")
    assert r.exit_code == 1 and "Aborted" in r.output
    assert table_files(table.uri) == before
    out = ok("rollback", table.uri, "1", "--destructive", "--yes")
    t = lamina.open_table(table.uri)
    assert "committed version 4" in out and [h["version"] for h in t.history()] == [4, 1, 0]
    assert ids_of(t.to_arrow()) == [1, 2, 3]


def test_expire(table):
    before = table_files(table.uri)
    out = ok("expire", table.uri)  # default: older than 5 days, so nothing yet
    assert "expire 0 versions (none)" in out and table_files(table.uri) == before
    out = ok("expire", table.uri, "--retain-last", "1", "--reader-grace", "0s", "--dry-run")
    assert "would expire 3 versions (0..2)" in out and table_files(table.uri) == before
    out = ok("expire", table.uri, "--retain-last", "1", "--reader-grace", "0s")
    t = lamina.open_table(table.uri)
    assert "expire 3 versions (0..2)" in out and "would" not in out
    assert [h["version"] for h in t.history()] == [3] and ids_of(t.to_arrow()) == [1, 3, 4]
    held = ok("expire", table.uri, "--retain-last", "1")
    assert "expire 0 versions" in held


def test_remove_orphans_and_vacuum(table):
    old = "data/0123456789abcdef-000000000000.parquet"
    young = "data/fedcba9876543210-000000000000.parquet"
    for p, days in ((old, 10), (young, 0.1)):
        with open(os.path.join(table.uri, p), "wb") as f:
            f.write(b"left by a crashed writer")
        age(os.path.join(table.uri, p), days)
    rows = ids_of(table.to_arrow())
    out = ok("remove-orphans", table.uri, "--dry-run")
    assert f"would delete {old}" in out and "1 orphans" in out and "kept 1 younger than 3d" in out
    assert os.path.exists(os.path.join(table.uri, old))
    r = run("remove-orphans", table.uri, "--older-than", "1h")
    assert r.exit_code == 2 and "allow_short_age" in r.output
    assert os.path.exists(os.path.join(table.uri, old))
    out = ok("vacuum", table.uri)
    assert f"deleted {old}" in out and not os.path.exists(os.path.join(table.uri, old))
    assert os.path.exists(os.path.join(table.uri, young))
    out = ok("remove-orphans", table.uri, "--older-than", "1h", "--allow-short-age")
    assert f"deleted {young}" in out and not os.path.exists(os.path.join(table.uri, young))
    t = lamina.open_table(table.uri)
    assert ids_of(t.to_arrow()) == rows and ok("fsck", t.uri).strip().endswith("0 missing, 0 errors, 0 unreferenced")


def test_compact(table):
    for i in range(10, 16):
        table.append(batch([i], "a"))
    rows = ids_of(table.to_arrow())
    files_before = len(table.refresh().inspect.files())
    out = ok("compact", table.uri, "--target-mb", "1")
    t = lamina.open_table(table.uri)
    assert t.version == table.version + 1 and t.metadata.operation == "compact"
    assert f"table files {files_before} -> {len(t.inspect.files())}" in out and len(t.inspect.files()) == 2  # one per partition
    assert ids_of(t.to_arrow()) == rows
    assert "nothing to compact" in ok("compact", table.uri)
    assert lamina.open_table(table.uri).version == t.version


# -- table properties -------------------------------------------------------------------------


def test_properties_set_unset_list(table):
    out = ok("properties", "set", table.uri, "write.parquet.compression=zstd", "owner=ops=team")  # a value may hold '='
    t = lamina.open_table(table.uri)
    assert f"version {t.version}: set owner, write.parquet.compression" in out
    assert t.version == table.version + 1 and t.metadata.operation == "update-properties"
    assert dict(t.properties) == {"write.parquet.compression": "zstd", "owner": "ops=team"}
    assert [json.loads(line) for line in ok("properties", "list", table.uri, "-o", "json").splitlines()] == [
        {"key": "owner", "value": "ops=team"}, {"key": "write.parquet.compression", "value": "zstd"}]
    assert rows_of(ok("properties", "list", table.uri)) == [["owner", "ops=team"], ["write.parquet.compression", "zstd"]]
    t.append(batch([9], "a"))  # writes after it use it
    (new,) = [p for p in t.inspect.files().column("path").to_pylist() if p not in table.inspect.files().column("path").to_pylist()]
    assert pq.read_metadata(os.path.join(t.uri, new)).row_group(0).column(0).compression == "ZSTD"
    assert "nothing to change" in ok("properties", "set", t.uri, "owner=ops=team")
    out = ok("properties", "unset", t.uri, "owner")
    assert f"version {t.version + 1}: removed owner" in out
    assert dict(lamina.open_table(t.uri).properties) == {"write.parquet.compression": "zstd"}
    assert "nothing to change" in ok("properties", "unset", t.uri, "owner")


def test_properties_of_a_catalog_table_by_name(tmp_path):
    uri = f"sqlite:///{tmp_path}/wh/catalog.db"
    c = lamina.load_catalog(uri)
    c.create_namespace("ns")
    c.create_table("ns.t", SCHEMA)
    ok("--catalog", uri, "properties", "set", "ns.t", "tag.auto-create=daily")
    assert c.load_table("ns.t").properties["tag.auto-create"] == "daily" and c.table_info("ns.t").version == 1
    c.close()


@pytest.mark.parametrize("args,words", [
    (["set", "{t}", "version.slot-chunk-size=10"], "version.slot-chunk-size cannot change"),
    (["set", "{t}", "write.parquet.compression=lzma"], "write.parquet.compression='lzma'"),
    (["set", "{t}", "write.parquet.compresion=zstd"], "did you mean 'write.parquet.compression'"),
    (["set", "{t}", "compression"], "is not key=value"),
    (["set", "{t}", "=zstd"], "is not key=value"),
    (["set", "{t}", "a=1", "a=2"], "given twice"),
    (["unset", "{t}", "manifest.root-format"], "manifest.root-format cannot change"),
], ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_properties_refused_exit_non_zero_and_change_nothing(tmp_path, args, words):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"manifest.root-format": "arrow"})
    before = table_files(t.uri)
    r = run("properties", *[a.format(t=t.uri) for a in args])
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output
    assert table_files(t.uri) == before


# -- catalogs ---------------------------------------------------------------------------------


def test_catalog_commands(tmp_path):
    uri = f"sqlite:///{tmp_path}/wh/catalog.db"

    def cat(*args: str) -> str:
        return ok("catalog", *args, "--catalog", uri)

    assert "created namespace ns" in cat("create", "ns")
    out = cat("create", "ns.events", "--schema", "id:int64,day:date,name:string", "--partition-by", "day")
    c = lamina.load_catalog(uri)
    t = c.load_table("ns.events")
    assert f"created table ns.events (uuid {t.uuid}) at {t.uri}" in out
    assert t.schema == pa.schema([("id", pa.int64()), ("day", pa.date32()), ("name", pa.string())])
    assert [f.name for f in t.partition_spec.fields] == ["day"]
    t.append(pa.table({"id": pa.array([1], pa.int64()), "day": pa.array([None], pa.date32()), "name": ["x"]}))
    listed = rows_of(cat("list"))
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in listed] == [("ns.events", "1", "yes", t.uuid, t.uri)]
    cat("offline", "ns.events")
    assert not c.is_online("ns.events") and rows_of(cat("list"))[0][2] == "offline"
    cat("online", "ns.events")
    assert c.is_online("ns.events")
    # table commands reach it by name, and commit through the catalog's row
    ok("--catalog", uri, "tag", "create", "ns.events", "first")
    assert c.load_table("ns.events").tags.get("first").tagged_version == 1
    c.load_table("ns.events").append(pa.table({"id": pa.array([2], pa.int64()), "day": pa.array([None], pa.date32()),
                                               "name": ["y"]}))
    ok("--catalog", uri, "rollback", "ns.events", "first")
    assert c.table_info("ns.events").version == 3 and ids_of(c.load_table("ns.events").to_arrow()) == [1]
    cat("rename", "ns.events", "ns.renamed")
    assert not c.table_exists("ns.events") and c.table_info("ns.renamed").uuid == t.uuid
    cat("drop", "ns.renamed")
    assert not c.table_exists("ns.renamed") and os.path.exists(t.uri)  # the files stay without --purge
    cat("create", "ns.gone", "--schema", "id:int64")
    gone = c.table_info("ns.gone").location
    cat("drop", "ns.gone", "--purge")
    assert not c.table_exists("ns.gone") and not os.path.exists(gone)
    cat("drop", "ns")
    assert c.list_namespaces() == []
    c.close()


# -- bad input changes nothing --------------------------------------------------------------------


COMMANDS_ON_A_TABLE = [
    ["info", "{t}"], ["history", "{t}"], ["files", "{t}"], ["changes", "{t}", "--from", "0"], ["fsck", "{t}"],
    ["system", "{t}", "snapshots"],
    ["tag", "create", "{t}", "x"], ["tag", "delete", "{t}", "x"], ["tag", "list", "{t}"], ["rollback", "{t}", "1"],
    ["expire", "{t}"], ["remove-orphans", "{t}"], ["vacuum", "{t}"], ["compact", "{t}"],
    ["properties", "set", "{t}", "k=v"], ["properties", "unset", "{t}", "k"], ["properties", "list", "{t}"],
]


@pytest.mark.parametrize("command", COMMANDS_ON_A_TABLE, ids=lambda c: " ".join(c[:2]))
def test_a_location_without_a_table_is_a_clear_error(tmp_path, command):
    where = tmp_path / "nothing-here"
    r = run(*[a.format(t=where) for a in command])
    assert r.exit_code == 2 and "no Lamina table" in r.output and str(where) in r.output, r.output
    assert not where.exists()  # nothing was created


BAD = [
    (["info", "{t}", "--version", "99"], "version 99"),
    (["files", "{t}", "--version", "99"], "version 99"),
    (["files", "{t}", "--version", "no-such-tag"], "no tag 'no-such-tag'"),
    (["files", "{t}", "--where", "nope > 1"], "nope"),
    (["files", "{t}", "--where", "frob(c) = 1"], "unknown function frob()"),
    (["system", "{t}", "files", "--version", "99"], "version 99"),
    (["rollback", "{t}", "99"], "version 99"),
    (["rollback", "{t}", "no-such-tag"], "no tag 'no-such-tag'"),
    (["tag", "create", "{t}", "x", "--version", "99"], "version 99"),
    (["tag", "create", "{t}", "12"], "12"),
    (["tag", "create", "{t}", "a/b"], "a/b"),
    (["tag", "create", "{t}", "x", "--expires-in", "soon"], "not a duration"),
    (["tag", "delete", "{t}", "no-such-tag"], "no tag 'no-such-tag'"),
    (["expire", "{t}", "--older-than", "5x"], "not a duration"),
    (["expire", "{t}", "--retain-last", "0"], "retain_last"),
    (["expire", "{t}", "--reader-grace", "-1h"], "negative"),
    (["remove-orphans", "{t}", "--older-than", "forever"], "not a duration"),
    (["compact", "{t}", "--where", "id >"], "id >"),
]


@pytest.mark.parametrize("command,words", BAD, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_bad_input_exits_non_zero_says_why_and_changes_nothing(table, command, words):
    before = table_files(table.uri)
    r = run(*[a.format(t=table.uri) for a in command])
    assert r.exit_code != 0, r.output
    assert words in r.output, r.output
    assert "Traceback" not in r.output
    assert table_files(table.uri) == before


def test_an_existing_tag_is_not_overwritten(table):
    table.tags.create("gold", 1)
    before = table_files(table.uri)
    r = run("tag", "create", table.uri, "gold")
    assert r.exit_code == 2 and "already exists (version 1)" in r.output
    assert table_files(table.uri) == before and table.tags.get("gold").tagged_version == 1


def test_a_corrupt_tag_can_be_deleted_as_its_error_says(table):
    """A damaged tag file's error says: delete it with `lamina tag delete` and re-create it."""
    table.tags.create("gold", 1)
    path = os.path.join(table.uri, "_lamina", "tags", "gold.json")
    with open(path, "r+b") as f:
        f.truncate(20)
    r = run("files", table.uri, "--version", "gold")
    assert r.exit_code == 2 and "lamina tag delete" in r.output
    before = table_files(table.uri)
    assert "would delete tag gold" in ok("tag", "delete", table.uri, "gold", "--dry-run")
    assert table_files(table.uri) == before
    r = run("tag", "delete", table.uri, "gold")
    assert r.exit_code == 0, r.output
    assert not os.path.exists(path)
    ok("tag", "create", table.uri, "gold", "--version", "1")
    assert table.tags.get("gold").tagged_version == 1
