"""Every listing of the `lamina` command at 80 and at 200 columns, and as json and csv.

On a catalog table with long paths, partitions, a deletion, tags and a branch: each table
printed for people stays within the terminal's width, shows every version number whole and
sizes and counts in human units; `--output json` (JSON Lines) and `--output csv` (a header,
then the rows) hold the same rows as the Python API's system tables, whole and raw, however
narrow the terminal.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

import lamina
from lamina.cli._output import human_bytes, human_count, wrap_path
from lamina.commit import flush_hints
from support.cli import console_width, ok, rows_of

SCHEMA = pa.schema([("id", pa.int64()), ("customer_region_name", pa.string()), ("ts", pa.timestamp("us", "UTC"))])
REGIONS = ["europe-west-and-central", "asia-pacific-southeast"]
ROWS = 1500  # per append: counts past a thousand
WIDTHS = [80, 200]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """A catalog table at a long location, partitioned by a long region name and a day: three
    appends, a deletion (deletion vectors), two tags, a branch and a schema change."""
    root = tmp_path_factory.mktemp("widths")
    uri = f"sqlite:///{root}/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("sales")
    location = str(root / "warehouse" / "a_rather_long_directory_name" / "events_by_region_and_day")
    t = cat.create_table("sales.events_by_region_and_day", SCHEMA, partition_by=["customer_region_name", "day(ts)"],
                         location=location)
    day = datetime(2026, 1, 5, tzinfo=timezone.utc)
    for k in range(3):
        t.append(pa.table({"id": pa.array(range(k * ROWS, (k + 1) * ROWS), pa.int64()),
                           "customer_region_name": [REGIONS[i % 2] for i in range(ROWS)],
                           "ts": [day + timedelta(days=k)] * ROWS}, schema=SCHEMA))
    t.delete("id < 100 OR (id > 2000 AND id < 2150)")
    t.tags.create("nightly-2026-01-05", 1)
    t.tags.create("gold", 3)
    t.branches.create("etl-2026-01-05-backfill")
    with t.update_schema() as u:
        u.add_column("email", pa.string())
    flush_hints()
    yield {"table": lamina.open_table(location), "catalog": uri}
    cat.close()


def listings(lake) -> dict[str, list[str]]:
    """Every command that lists rows, by name."""
    uri = lake["table"].uri
    return {
        "info": ["info", uri], "history": ["history", uri], "files": ["files", uri],
        **{f"system {n}": ["system", uri, n] for n in ("snapshots", "tags", "branches", "files", "manifests", "schemas")},
        "tag list": ["tag", "list", uri], "branch list": ["branch", "list", uri],
        "catalog list": ["catalog", "list", "--catalog", lake["catalog"]],
        "changes": ["changes", uri, "--from", "3"], "changes --summary": ["changes", uri, "--from", "0", "--summary"],
        "sql": ["sql", f'SELECT customer_region_name, count(*) AS n FROM "{uri}" GROUP BY ALL ORDER BY 1'],
    }


def fits(out: str, width: int) -> None:
    too_long = [line for line in out.splitlines() if cell_len(line) > width]
    assert not too_long, f"{len(too_long)} lines wider than {width}:\n" + out


def header_of(out: str) -> str:
    """The header cells of a rich table, its lines joined (a header wraps over several)."""
    return " ".join(line for line in out.splitlines() if line.startswith("┃"))


def first_cells(out: str) -> list[str]:
    """The first cell of each row of a table (a row's wrapped lines continue with an empty one)."""
    return [r[0] for r in rows_of(out) if r[0]]


# -- for people: within the width, versions whole, human units --------------------------------------


@pytest.mark.slow  # every listing of every command
@pytest.mark.parametrize("width", WIDTHS)
def test_every_listing_fits_the_terminal(lake, width):
    with console_width(width):
        for name, args in listings(lake).items():
            out = ok(*args)
            assert out.strip(), name
            fits(out, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_version_number_is_whole(lake, width):
    t = lake["table"]
    versions = [h["version"] for h in t.history()]
    with console_width(width):
        assert [int(v) for v in first_cells(ok("history", t.uri))] == versions
        assert [int(v) for v in first_cells(ok("system", t.uri, "snapshots"))] == sorted(versions)
        assert [int(r[1]) for r in rows_of(ok("tag", "list", t.uri)) if r[1]] == [1, 3]
        branches = [r for r in rows_of(ok("branch", "list", t.uri)) if r[1]]
        assert [int(r[1]) for r in branches] == t.inspect.branches().column("head_version").to_pylist()


@pytest.mark.slow  # runs the CLI in a process
@pytest.mark.parametrize("width", WIDTHS)
def test_the_command_reads_the_width_from_COLUMNS(lake, width):
    """COLUMNS as a shell sets it, read when the command starts (the tests above set it in-process)."""
    t = lake["table"]
    env = {**os.environ, "COLUMNS": str(width)}
    r = subprocess.run([sys.executable, "-m", "lamina.cli.main", "history", t.uri], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fits(r.stdout, width)
    assert max(cell_len(line) for line in r.stdout.splitlines()) > 80 if width == 200 else True  # 200 is used
    assert [int(v) for v in first_cells(r.stdout)] == [h["version"] for h in t.history()]


def test_info_folds_a_list_that_does_not_fit_into_one_item_a_line(lake):
    t = lake["table"]
    features = list(t.metadata.writer_features)
    with console_width(80):
        narrow = ok("info", t.uri).splitlines()
    with console_width(400):  # wide enough for the whole list (a new table has nine features)
        wide = ok("info", t.uri).splitlines()
    value_at = narrow[0].index(t.uri[:10])  # where every value starts
    items = [line[value_at:] for line in narrow[next(i for i, line in enumerate(narrow) if "writer_features" in line):]]
    assert items[: len(features)] == features  # each feature whole, on its own line, under the first
    assert any(line.split(None, 1) == ["writer_features", ", ".join(features)] for line in wide)  # one line when it fits
    assert any(line.split() == ["records", human_count(t.metadata.summary["total-records"])] for line in narrow)


def folded_cells(out: str) -> list[list[str]]:
    """The lines of each row's first cell (a row's next lines have its other cells empty)."""
    rows: list[list[str]] = []
    for r in rows_of(out):
        if any(r[1:]) or not rows:
            rows.append([])
        rows[-1].append(r[0])
    return rows


@pytest.mark.parametrize("width", [60, 80])
@pytest.mark.parametrize("command", ["files", "system files", "system manifests"])
def test_paths_fold_after_their_slashes_whole_with_their_directory_and_name(lake, width, command):
    """Every path shown whole, never cut: folded after its slashes, ``data/``, the partition's
    directories and the file name each on a line of its own where they fit (the README's promise)."""
    t = lake["table"]
    listed = t.inspect.files() if command != "system manifests" else t.inspect.manifests()
    paths = listed.column("path").to_pylist()
    with console_width(width):
        out = ok(*command.split()[:1], t.uri, *command.split()[1:])
    fits(out, width)
    assert "…" not in out
    shown = folded_cells(out)
    assert sorted("".join(lines) for lines in shown) == sorted(paths)
    for lines in shown:
        path = "".join(lines)
        name = path.rsplit("/", 1)[-1]
        assert lines[-1] == name  # the file name whole, on its own line
        days = [s for s in path.split("/") if s.startswith("ts_day=")]
        # the day partition's directory whole, within one line (beside others that fit there)
        assert all(any(line == f"{d}/" or line.endswith(f"/{d}/") for line in lines) for d in days), lines
        if path.startswith("data/"):
            assert lines[0].startswith("data/")


UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]


def size_in_bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * 1024 ** UNITS.index(unit)


def test_tables_show_human_units_right_aligned(lake):
    t = lake["table"]
    with console_width(200):
        hist = ok("history", t.uri)
        files = ok("files", t.uri)
        manifests = ok("system", t.uri, "manifests")
    header = header_of(hist).split("┃")
    plus_rows = next(i for i, h in enumerate(header) if h.strip() == "+rows") - 1
    appends = [r for r in rows_of(hist) if r[2] == "append"]
    assert [r[plus_rows] for r in appends] == ["1,500"] * 3  # thousands apart
    live = {r["path"]: r for r in t.inspect.files().to_pylist()}
    for path, rows, size, *_ in rows_of(files):
        assert rows == human_count(live[path]["record_count"]) and re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB)", size)
        assert abs(size_in_bytes(size) - live[path]["size"]) <= 0.05 * 1024
    root = t.inspect.manifests().to_pylist()[0]
    assert abs(size_in_bytes(rows_of(manifests)[0][2]) - root["size"]) <= 0.05 * 1024
    # numbers right-aligned: a count's cell ends at its column's right edge
    for line in files.splitlines():
        if line.startswith("│"):
            assert re.search(r"│ +[\d,]+ │ +\d+(\.\d)? \w+ │", line), line


# -- for programs: every row and column, whole and raw, at any width ---------------------------------


def parse(out: str, fmt: str, schema: pa.Schema) -> pa.Table:
    """json (JSON Lines) or csv output as a table of ``schema`` (times from their ISO text)."""
    if fmt == "csv":
        return pacsv.read_csv(io.BytesIO(out.encode()), convert_options=pacsv.ConvertOptions(column_types=schema, strings_can_be_null=True))
    rows = [json.loads(line) for line in out.splitlines()]
    for row in rows:
        for f in schema:
            if pa.types.is_timestamp(f.type) and row[f.name] is not None:
                row[f.name] = datetime.fromisoformat(row[f.name])
    return pa.Table.from_pylist(rows, schema=schema)


def flat(tbl: pa.Table) -> pa.Table:
    """``tbl`` with its nested columns as JSON text, as CSV holds them."""
    for i, f in enumerate(tbl.schema):
        if pa.types.is_nested(f.type):
            tbl = tbl.set_column(i, f.name, pa.array([json.dumps(v) for v in tbl.column(i).to_pylist()], pa.string()))
    return tbl


def expected_listings(t) -> dict[str, tuple[list[str], pa.Table]]:
    """The machine output of each listing, as the Python API has it."""
    snapshots = t.inspect.snapshots()
    files = t.inspect.files().select(["path", "size", "record_count", "added_version", "partition", "dv_cardinality"])
    return {
        "history": (["history", t.uri], snapshots.take(pa.array(range(snapshots.num_rows - 1, -1, -1)))),
        "files": (["files", t.uri], files),
        **{f"system {n}": (["system", t.uri, n], t.inspect.table(n))
           for n in ("snapshots", "tags", "branches", "files", "manifests", "schemas")},
        "tag list": (["tag", "list", t.uri], t.inspect.tags()),
        "branch list": (["branch", "list", t.uri], t.inspect.branches()),
    }


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_machine_output_equals_the_system_tables_whole_and_raw(lake, fmt):
    t = lake["table"]
    with console_width(80):
        for name, (args, want) in expected_listings(t).items():
            out = ok(*args, "--output", fmt)
            want = flat(want) if fmt == "csv" else want
            got = parse(out, fmt, want.schema)
            key = want.column_names[0]
            assert got.sort_by(key).equals(want.sort_by(key)), name
            assert "…" not in out and "KiB" not in out and "1,500" not in out, name
            lines = out.splitlines()
            assert len(lines) == want.num_rows + (fmt == "csv"), name  # a line a row: nothing wrapped
            if fmt == "csv":
                assert next(csv.reader([lines[0]])) == want.column_names


def test_catalog_list_and_info_for_programs(lake):
    t = lake["table"]
    cat = lamina.load_catalog(lake["catalog"])
    with console_width(80):
        listed = [json.loads(line) for line in ok("catalog", "list", "--catalog", lake["catalog"], "-o", "json").splitlines()]
        as_csv = list(csv.DictReader(io.StringIO(ok("catalog", "list", "--catalog", lake["catalog"], "-o", "csv"))))
        doc = json.loads(ok("info", t.uri, "--output", "json"))
        info_csv = list(csv.DictReader(io.StringIO(ok("info", t.uri, "--output", "csv"))))
    want = [{"table": i.identifier, "version": i.version, "online": i.online, "uuid": i.uuid, "location": i.location}
            for i in cat.tables()]
    assert listed == want
    assert as_csv == [{**w, "version": str(w["version"]), "online": str(w["online"]).lower()} for w in want]
    vm = t.metadata
    assert (doc["location"], doc["version"], doc["records"]) == (t.uri, vm.version, vm.summary["total-records"])
    assert doc["writer_features"] == list(vm.writer_features)
    assert len(info_csv) == 1 and json.loads(info_csv[0]["writer_features"]) == list(vm.writer_features)
    assert info_csv[0]["records"] == str(vm.summary["total-records"]) and info_csv[0]["location"] == t.uri
    cat.close()


def test_limit_cuts_a_table_but_not_machine_output_unless_given(lake):
    t = lake["table"]
    versions = len(t.history())
    assert len(first_cells(ok("history", t.uri, "--limit", "2"))) == 2
    assert len(ok("history", t.uri, "--output", "json").splitlines()) == versions
    assert [json.loads(x)["version"] for x in ok("history", t.uri, "-o", "json", "-n", "2").splitlines()] == [versions - 1, versions - 2]


# -- the helpers ----------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**62))
def test_human_bytes_reads_back_to_the_size(n):
    text = human_bytes(n)
    number, unit = text.split()
    assert unit in UNITS
    assert 1 <= float(number) < 1024 or n < 1024  # the largest unit that holds it
    assert abs(size_in_bytes(text) - n) <= 0.0501 * 1024 ** UNITS.index(unit)  # to a tenth of it


def test_human_units_as_the_issue_spells_them():
    assert [human_bytes(n) for n in (0, 905, 1024, 1_258_291, 1024**2 - 1)] == ["0 B", "905 B", "1.0 KiB", "1.2 MiB", "1.0 MiB"]
    assert [human_count(n) for n in (0, 999, 1840, 4_251_000)] == ["0", "999", "1,840", "4,251,000"]


_SEGMENT = st.text(st.sampled_from("abc=_-0123456789"), min_size=1, max_size=45)


@settings(max_examples=300, deadline=None)
@given(st.lists(_SEGMENT, min_size=1, max_size=6), st.integers(min_value=1, max_value=120))
def test_a_folded_path_is_the_path_whole_each_segment_on_one_line_where_it_fits(segments, width):
    path = "/".join(segments)
    lines = wrap_path(path, width).split("\n")
    assert "".join(lines) == path  # nothing left out, nothing added
    assert all(cell_len(line) <= width for line in lines)
    breaks = {sum(len(line) for line in lines[:k]) for k in range(1, len(lines))}  # where a line ends
    start = 0
    for i, segment in enumerate(segments):
        piece = segment + ("/" if i < len(segments) - 1 else "")
        if cell_len(piece) <= width:  # a directory or the name that fits the width is never split
            assert not any(start < b < start + len(piece) for b in breaks), (piece, lines)
        start += len(piece)
