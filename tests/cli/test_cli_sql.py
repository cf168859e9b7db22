"""`lamina sql`: a query on DuckDB over Lamina tables, by location, by --table name and by
catalog name, with time travel; as a table, JSON Lines, CSV, or a CSV / Parquet file. Every
result is checked against an oracle: the version's rows read by Lamina (`scan().to_arrow()`)
and queried by DuckDB directly on Arrow. Bad input: a one-line error, exit 2, nothing changed."""

from __future__ import annotations

import io
import json
import os
from datetime import datetime, timezone

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli.main import app
from lamina.commit import flush_hints
from support.cli import console_width, ok, rows_of, run
from support.files import table_files

pytestmark = pytest.mark.slow  # the CLI's SQL through DuckDB and its extensions, a table per test

EVENTS = pa.schema([pa.field("id", pa.int64(), False), pa.field("c", pa.string()), pa.field("amount", pa.int64())])
NAMES = pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.string())])


def events_batch(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "c": ["ab"[i % 2] for i in ids], "amount": [None if i % 7 == 0 else 10 * i for i in ids]},
                    schema=EVENTS)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """`events` (a path table): v1 ids 0-19, v2 ids 20-29, v3 deletes every id divisible by 4
    (deletion vectors); tag `loaded` at v2. `names` (in the SQLite catalog as ns.names): a
    name for every third id 0-30."""
    root = tmp_path_factory.mktemp("lake")
    events = lamina.create_table(str(root / "events"), EVENTS)
    events.append(events_batch(range(20)))
    events.append(events_batch(range(20, 30)))
    events.delete(f"id IN ({', '.join(str(i) for i in range(0, 30, 4))})")
    events.tags.create("loaded", 2)
    assert events.version == 3
    uri = f"sqlite:///{root}/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("ns")
    names = cat.create_table("ns.names", NAMES)
    names.append(pa.table({"id": list(range(0, 31, 3)), "name": [f"n{i}" for i in range(0, 31, 3)]}, schema=NAMES))
    cat.close()
    flush_hints()
    return {"events": events, "names": names, "catalog": uri}


@pytest.fixture(autouse=True)
def elsewhere(tmp_path, monkeypatch):
    """Run in an empty directory (the default catalog, sqlite:///warehouse/catalog.db, is not
    there), at a wide terminal."""
    monkeypatch.chdir(tmp_path)
    with console_width(400):
        yield


def oracle(query: str, **tables: pa.Table) -> list[dict]:
    """``query``'s rows computed by DuckDB on the Arrow ``tables`` (Lamina's own reads)."""
    con = duckdb.connect()
    for name, tbl in tables.items():
        con.register(name, tbl)
    return con.sql(query).to_arrow_table().to_pylist()


def sql_json(*args: str) -> list[dict]:
    return [json.loads(line) for line in ok("sql", *args, "--json").splitlines()]


def multiset(rows: list[dict]) -> list[str]:
    """Rows as a sorted list; a decimal (DuckDB's sum of BIGINT) as its text, as --json prints it."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def commit_time(t: lamina.Table, version: int) -> int:
    return t.scan(version=version).vm.timestamp_ms


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


# -- results against the oracle ---------------------------------------------------------------


def test_a_table_by_location_without_its_deleted_rows(lake):
    t = lake["events"]
    assert pc.sum(t.scan().plan().entries.column("dv_cardinality")).as_py() == 8  # deletes by deletion vectors
    got = sql_json(f'SELECT * FROM "{t.uri}"')
    assert multiset(got) == multiset(t.scan().to_arrow().to_pylist())
    assert len(got) == 30 - 8 and all(r["id"] % 4 for r in got)
    aggregate = f'SELECT c, count(*) AS n, sum(amount) AS total FROM "{t.uri}" WHERE id > 5 GROUP BY c'
    assert multiset(sql_json(aggregate)) == multiset(
        oracle("SELECT c, count(*) AS n, sum(amount) AS total FROM e WHERE id > 5 GROUP BY c", e=t.scan().to_arrow()))
    assert not os.path.exists("warehouse")  # the default catalog, not needed, is not created
    unreachable = "postgresql://lamina@127.0.0.1:1/none"  # nor is a catalog opened that no name needs
    assert multiset(sql_json("-c", unreachable, f'SELECT * FROM "{t.uri}"')) == multiset(got)


@pytest.mark.parametrize("clause,version", [
    ("AT (VERSION => 1)", 1),
    ("FOR VERSION AS OF 2", 2),
    ("AT (TAG => 'loaded')", 2),
    ("FOR VERSION AS OF 'loaded'", 2),
    ("AT (TIMESTAMP => '{iso2}')", 2),  # the latest version committed at or before it
    ("FOR TIMESTAMP AS OF '{iso1}'", 1),
    ("AT (TIMESTAMP => {ms1})", 1),  # epoch milliseconds
    ("AT (VERSION => 3)", 3),
])
def test_time_travel(lake, clause, version):
    t = lake["events"]
    clause = clause.format(iso1=iso(commit_time(t, 1)), iso2=iso(commit_time(t, 2)), ms1=commit_time(t, 1))
    got = sql_json("--table", f"events={t.uri}", f"SELECT id, amount FROM events {clause} AS e WHERE e.id >= 3")
    want = oracle("SELECT id, amount FROM e WHERE id >= 3", e=t.scan(version=version).to_arrow())
    assert multiset(got) == multiset(want) and got


@pytest.mark.slow  # DuckDB's delta extension
def test_a_join_of_two_tables_at_two_versions(lake):
    t, names = lake["events"], lake["names"]
    query = ("SELECT n.name, e.c, count(*) AS k, sum(e.amount) AS total FROM {e} AS e JOIN {n} AS n ON e.id = n.id "
             "WHERE e.id < 25 AND n.name <> 'n9' GROUP BY ALL")
    now = query.format(e="events", n="names")
    old = query.format(e="events AT (VERSION => 1)", n="names")
    bound = ["--table", f"events={t.uri}", "--table", f"names={names.uri}"]
    assert multiset(sql_json(*bound, now)) == multiset(oracle(now, events=t.scan().to_arrow(), names=names.scan().to_arrow()))
    assert multiset(sql_json(*bound, old)) == multiset(
        oracle(query.format(e="events", n="names"), events=t.scan(version=1).to_arrow(), names=names.scan().to_arrow()))
    assert sql_json(*bound, old) != sql_json(*bound, now)  # id 4, 8, 12, 16 are in version 1 only


def test_catalog_tables_by_name_with_the_option_the_global_option_or_the_environment(lake):
    t, cat = lake["events"], lake["catalog"]
    names = lake["names"].scan().to_arrow()
    want = multiset(oracle("SELECT * FROM names WHERE id > 10", names=names))
    assert multiset(sql_json("--catalog", cat, "SELECT * FROM ns.names WHERE id > 10")) == want
    assert multiset(sql_json("-c", cat, "SELECT * FROM names WHERE id > 10")) == want  # a bare name, unique in the catalog
    assert multiset(json.loads(line) for line in ok("--catalog", cat, "sql", "FROM ns.names WHERE id > 10", "--json")
                    .splitlines()) == want
    r = CliRunner().invoke(app, ["sql", "SELECT * FROM ns.names WHERE id > 10", "--json"], env={"LAMINA_CATALOG": cat})
    assert r.exit_code == 0, r.output
    assert multiset(json.loads(line) for line in r.output.splitlines()) == want
    # a catalog table joined with a table by location
    join = f'SELECT e.id, n.name FROM ns.names AS n JOIN "{t.uri}" AS e USING (id)'
    assert multiset(sql_json("-c", cat, join)) == multiset(
        oracle("SELECT e.id, n.name FROM n JOIN e USING (id)", n=names, e=t.scan().to_arrow()))


def test_a_parquet_file_by_path_is_read_by_duckdb_beside_lamina_tables(lake, tmp_path):
    t = lake["events"]
    ids = pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()), "w": ["x", "y", "z", "u", "v"]})
    pq.write_table(ids, tmp_path / "ids.parquet")
    got = sql_json(f"SELECT e.id, f.w, e.amount FROM '{tmp_path}/ids.parquet' AS f JOIN \"{t.uri}\" AS e USING (id)")
    want = oracle("SELECT e.id, f.w, e.amount FROM f JOIN e USING (id)", f=ids, e=t.scan().to_arrow())
    assert multiset(got) == multiset(want) and len(got) == 4  # id 4 is deleted


def test_a_table_shows_columns_of_one_name_side_by_side(lake):
    t = lake["events"]
    out = ok("sql", f'SELECT a.id, b.id FROM "{t.uri}" AS a JOIN "{t.uri}" AS b ON a.id = b.id + 1 ORDER BY a.id')
    want = oracle("SELECT a.id, b.id AS id_b FROM e AS a JOIN e AS b ON a.id = b.id + 1 ORDER BY a.id", e=t.scan().to_arrow())
    assert [[int(x) for x in r] for r in rows_of(out)] == [[r["id"], r["id_b"]] for r in want] and want


def test_the_table_prints_what_the_oracle_says_nulls_as_null(lake):
    t = lake["events"]
    out = ok("sql", f'SELECT id, c, amount FROM "{t.uri}" WHERE id < 16 ORDER BY id')
    want = oracle("SELECT id, c, amount FROM e WHERE id < 16 ORDER BY id", e=t.scan().to_arrow())
    assert rows_of(out) == [[str(r["id"]), r["c"], "NULL" if r["amount"] is None else str(r["amount"])] for r in want]
    assert "NULL" in out and f"{len(want)} rows" in out and "shown" not in out


@pytest.mark.slow  # a large result
def test_a_large_result_prints_the_first_rows_and_counts_them_all(lake):
    t = lake["events"]
    query = f'SELECT e.id, k.range AS k FROM "{t.uri}" AS e CROSS JOIN range(3) AS k ORDER BY e.id, k'
    want = oracle("SELECT e.id, k.range AS k FROM e CROSS JOIN range(3) AS k ORDER BY e.id, k", e=t.scan().to_arrow())
    assert len(want) == 66
    out = ok("sql", query)
    assert [[int(x) for x in r] for r in rows_of(out)] == [[r["id"], r["k"]] for r in want[:40]]  # DuckDB's shell shows 40
    assert "66 rows, the first 40 shown" in out
    out = ok("sql", query, "--limit", "5")
    assert len(rows_of(out)) == 5 and "66 rows, the first 5 shown" in out
    assert len(ok("sql", query, "--json", "-n", "7").splitlines()) == 7
    assert len(ok("sql", query, "--json").splitlines()) == 66  # --json: every row unless --limit


def test_csv_to_stdout_and_a_query_from_stdin(lake):
    t = lake["events"]
    query = f'SELECT id, c FROM "{t.uri}" WHERE c = \'b\''
    got = pacsv.read_csv(io.BytesIO(ok("sql", query, "--csv").encode()))
    want = oracle("SELECT id, c FROM e WHERE c = 'b'", e=t.scan().to_arrow())
    assert got.column_names == ["id", "c"] and multiset(got.to_pylist()) == multiset(want)
    r = CliRunner().invoke(app, ["sql", "-", "--json"], input=query)
    assert r.exit_code == 0, r.output
    assert multiset(json.loads(line) for line in r.output.splitlines()) == multiset(want)


@pytest.mark.parametrize("name", ["out.csv", "out.parquet", "OUT.PARQUET"])
def test_output_writes_every_row_to_a_csv_or_parquet_file(lake, tmp_path, name):
    t = lake["events"]
    path = str(tmp_path / name)
    query = f'SELECT * FROM "{t.uri}" AS e CROSS JOIN range(2) AS k(k)'
    out = ok("sql", query, "--output", path)
    want = oracle("SELECT * FROM e CROSS JOIN range(2) AS k(k)", e=t.scan().to_arrow())
    assert f"wrote {len(want)} rows to {path}" in " ".join(out.split()) and len(want) > 40
    got = pacsv.read_csv(path) if name.endswith(".csv") else pq.read_table(path)
    assert got.column_names == list(want[0]) == ["id", "c", "amount", "k"]
    assert multiset(got.to_pylist()) == multiset(want)
    if not name.endswith(".csv"):  # Parquet keeps the types
        assert got.schema.field("amount").type == pa.int64() and got.schema.field("c").type == pa.string()
    assert os.listdir(tmp_path) == [name]  # no temporary file left beside it


# -- bad input ---------------------------------------------------------------------------------

BAD = [
    ("SELEC * FROM t", [], 'syntax error at or near "SELEC"'),
    ("SELECT * FROM nope", [], "no table nope"),
    ("SELECT * FROM ns.nope", ["--catalog", "{cat}"], "no table ns.nope in catalog"),
    ("SELECT * FROM nope", ["--catalog", "sqlite:///missing/catalog.db"], "no table nope in catalog sqlite:///missing/catalog.db (which does not exist"),
    ('SELECT * FROM "{root}/nowhere"', [], "no Lamina table at"),
    ("DROP TABLE events", ["--table", "events={events}"], "DROP is not a query: lamina sql runs one SELECT"),
    ("EXPLAIN SELECT 1", [], "EXPLAIN is not a query"),
    ("COPY (SELECT 1) TO '{root}/copied.csv'", [], "COPY is not a query"),
    ("INSERT INTO events VALUES (1, 'a', 1)", ["--table", "events={events}"], "INSERT is not a query"),
    ("SELECT 1; DELETE FROM events", ["--table", "events={events}"], "pass one query, not 2 statements"),
    ("SELECT * FROM events AT (VERSION => 9)", ["--table", "events={events}"], "version 9 of"),
    ("SELECT * FROM events AT (VERSION => 1.5)", ["--table", "events={events}"], "1.5 is not a version number"),
    ("SELECT * FROM events AT (TAG => 'nope')", ["--table", "events={events}"], "no tag 'nope'"),
    ("SELECT * FROM events FOR VERSION AS OF 'nope'", ["--table", "events={events}"], "no tag 'nope'"),
    ("SELECT * FROM events AT (TIMESTAMP => '1999-01-01')", ["--table", "events={events}"], "before the table was created"),
    ("SELECT * FROM events AT (TIMESTAMP => 'noon')", ["--table", "events={events}"], "not ISO 8601"),
    ("SELECT nope FROM events", ["--table", "events={events}"], 'Binder Error: Referenced column "nope" not found'),
    ('SELECT "[red]x" FROM events', ["--table", "events={events}"], 'column "[red]x" not found'),  # not markup
    ("SELECT c::INTEGER FROM events", ["--table", "events={events}"], "Conversion Error: Could not convert string"),
    ("SELECT 1", ["--table", "events"], "give NAME=LOCATION"),
    ("SELECT 1", ["--table", "a={events}", "--table", "a={events}"], "names 'a' twice"),
    ("SELECT 1", ["--json", "--csv"], "one of --json, --csv or --output"),
    ("SELECT 1", ["--output", "{root}/x.csv", "--json"], "one of --json, --csv or --output"),
    ("SELECT 1", ["--output", "json", "--csv"], "one of --json, --csv or --output"),
    ("SELECT 1", ["--output", "{root}/x.parquet", "--limit", "3"], "put a LIMIT in the query"),
    ("SELECT 1", ["--output", "{root}/x.json"], "name a .csv or .parquet file"),
    ("SELECT [1, 2] AS l", ["--csv"], "CSV cannot hold the nested column l"),
    ("SELECT * FROM events AS a JOIN events AS b ON a.id = b.id", ["--table", "events={events}", "--json"],
     "more than one column named amount, c, id"),
    ("SELECT 1 AS x, 2 AS x", ["--output", "{root}/x.parquet"], "more than one column named x"),
    ("SELECT 1", ["--output", "{root}/no/such/dir/x.csv"], "cannot write"),
]


@pytest.mark.parametrize("query,args,words", BAD, ids=[b[0][:40] + " " + " ".join(b[1]) for b in BAD])
def test_bad_input_is_a_one_line_error_with_exit_2_and_changes_nothing(lake, tmp_path, query, args, words):
    t = lake["events"]
    fill = {"root": str(tmp_path), "events": t.uri, "cat": lake["catalog"]}
    before = table_files(t.uri), sorted(os.listdir(tmp_path))
    with console_width(80):
        r = run("sql", query.format(**fill), *[a.format(**fill) for a in args])
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output and "\x1b" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and r.output.startswith("error: "), r.output
    assert (table_files(t.uri), sorted(os.listdir(tmp_path))) == before  # no table change, no file written


def test_a_failing_query_leaves_an_existing_output_file_as_it_was(lake, tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("kept\n")
    r = run("sql", f'SELECT c::INTEGER FROM "{lake["events"].uri}"', "--output", str(path))
    assert r.exit_code == 2 and "Conversion Error" in r.output
    assert path.read_text() == "kept\n" and os.listdir(tmp_path) == ["out.csv"]


def test_at_80_columns_the_columns_that_do_not_fit_are_named(lake):
    t = lake["events"]
    wide = ", ".join(f"'a long text value {i}' AS column_{i}" for i in range(8))
    with console_width(80):
        out = ok("sql", f'SELECT id, {wide} FROM "{t.uri}" WHERE id < 4 ORDER BY id')
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert [int(r[0]) for r in rows_of(out) if r[0]] == [1, 2, 3]
    note = " ".join(out[out.index("not fit in 80 characters"):].split())
    assert "column_7" in note and "--output json, csv or FILE holds every one" in note
