"""A merge whose new rows are a staged Parquet source's rows (``SourceRead.staged``: what
lamina.spark.merge passes for ``spark.read.parquet(dir)``): where the files are what the table
stores, they become its data files as they are (lamina.data.copy), their rows never read.

Every result is compared with the same merge of the same rows from memory (the rows written
by the writer) on a copy of the table: rows, row ids and versions, what later changes,
compaction and DuckDB read; and a source that cannot be copied (a layout, a codec, a key the
table holds twice) merges as before."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest

import lamina
import lamina.duckdb
from lamina.data import copy as copy_mod
from lamina.data.copy import StagedFile, StagedFiles
from lamina.errors import InvalidArgument
from lamina.operations import rowlevel
from support.rowlevel import concurrently_on_first_attempt
from support.staged import staged_files

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string()), pa.field("x", pa.float64()),
                    pa.field("n", pa.int64(), nullable=False)])
LINEAGE: dict[str, str] = {}
NO_LINEAGE = {"row-lineage.enabled": "false"}
PROPS = {"lineage": LINEAGE, "no-lineage": NO_LINEAGE}
COLUMNS = ["id", "v", "x", "n", "_row_id", "_last_updated_version"]


@pytest.fixture(autouse=True)
def small_files_copied(monkeypatch):
    """The tests' files are small: copy from one row on (a real source's files: COPY_MIN_ROWS)."""
    monkeypatch.setattr(copy_mod, "COPY_MIN_ROWS", 1)


@pytest.fixture
def copies(monkeypatch) -> list[int]:
    """How many files each merge copied (one entry per StagedFiles.copy that stored its files)."""
    out: list[int] = []
    real = StagedFiles.copy

    def spy(self, *a, **k):
        entries = real(self, *a, **k)
        out.append(len(entries))
        return entries

    monkeypatch.setattr(StagedFiles, "copy", spy)
    return out


def rows(ids, tag="new", n0=100) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids], "x": [i / 4 if i % 5 else float("nan") for i in ids],
                     "n": [n0 + i for i in ids]}, schema=SCHEMA)


def pair(tmp_path, props, ids=range(10), prepare=None, **create) -> tuple[lamina.Table, lamina.Table]:
    """Two equal tables (the rows ``ids`` appended 4 at a time): one for the staged merge, one
    for the merge from memory. ``prepare(table)`` runs first."""
    t = lamina.create_table(str(tmp_path / "staged"), SCHEMA, properties=props, **create)
    if prepare is not None:
        prepare(t)
    ids = list(ids)
    for k in range(0, len(ids), 4):
        t.append(rows(ids[k:k + 4]))
    shutil.copytree(t.uri, str(tmp_path / "memory"), ignore=shutil.ignore_patterns("*#*"))
    return t, lamina.open_table(str(tmp_path / "memory"))


def staged_source(tmp_path, *parts: pa.Table, **write) -> rowlevel.SourceRead:
    """``parts`` written as Parquet files and staged as lamina.spark's collect does: the key
    column read, the rest on demand (READS counts the reads of the rest)."""
    staged = staged_files(tmp_path / "src", *parts, **write)
    schema = staged.files[0].schema

    def rest() -> pa.Table:
        READS.append(1)
        return staged.read(schema.names)

    return rowlevel.SourceRead(schema, staged.read(["id"]), rowlevel.OnDemand(rest), staged=staged)


READS: list[int] = []


def upsert(t: lamina.Table, src):
    return t.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()


def state(t: lamina.Table) -> list[tuple]:
    """Every row with its lineage, sorted (NaN as a string: it equals itself then)."""
    from lamina.spec.lineage import has_lineage

    out = []
    columns = [c for c in COLUMNS if has_lineage(t.refresh().metadata) or not c.startswith("_")]
    for r in t.scan(columns=columns).to_arrow().to_pylist():
        out.append(tuple("nan" if isinstance(v, float) and v != v else v for v in r.values()))
    return sorted(out, key=repr)


def on_disk(t: lamina.Table) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), t.uri) for d, _, fs in os.walk(os.path.join(t.uri, "data")) for f in fs}


def left_behind(t: lamina.Table, before: set[str]) -> set[str]:
    files = t.refresh().inspect.files()
    used = set(files.column("path").to_pylist()) | {p for p in files.column("dv_path").to_pylist() if p}
    return on_disk(t) - before - used


@pytest.mark.parametrize("props", list(PROPS))
@pytest.mark.parametrize("parts", [1, 3])
def test_a_staged_source_becomes_data_files_as_it_is(tmp_path, copies, props, parts):
    """Each staged file becomes one data file, its rows never read; rows, ids and versions are
    those of the merge from memory, and nothing is left behind."""
    a, b = pair(tmp_path, PROPS[props])
    files = on_disk(a)
    src = rows([1, 2, 5, 9, 20, 21, 22])
    cut = [src.slice(k * 3, 3) for k in range(3)] if parts == 3 else [src]
    READS.clear()
    got, want = upsert(a, staged_source(tmp_path, *cut, row_group_size=2)), upsert(b, src)
    assert copies == [parts] and READS == []
    assert (got.rows_updated, got.rows_inserted, got.files_touched) == (want.rows_updated, want.rows_inserted, want.files_touched)
    assert state(a) == state(b)
    added = a.inspect.files().filter(pa.compute.equal(a.inspect.files().column("added_version"), a.version))
    assert sorted(added.column("record_count").to_pylist()) == sorted(p.num_rows for p in cut)
    assert left_behind(a, files) == set()


def test_the_copies_statistics_prune_as_the_writers(tmp_path, copies):
    """The copied files' statistics are their rows': a scan pruned by them finds what the merge
    from memory finds, file for file, NaN included."""
    a, b = pair(tmp_path, LINEAGE)
    src = rows(range(5, 30))
    upsert(a, staged_source(tmp_path, src)), upsert(b, src)
    assert copies == [1]
    for where in ("id >= 20", "v = 'new7'", "x > 5", "x = 'NaN'", "n < 110"):
        ga, gb = a.scan(where=where), b.scan(where=where)
        assert state_of(ga) == state_of(gb), where
    fa = a.inspect.files().filter(pa.compute.equal(a.inspect.files().column("added_version"), a.version))
    fb = b.inspect.files().filter(pa.compute.equal(b.inspect.files().column("added_version"), b.version))
    stats = [c for c in fa.column_names if c.split(".")[0] in ("lower", "upper", "null_count")]
    assert fa.select(stats).to_pylist() == fb.select(stats).to_pylist()  # one file of 25 rows each way here


def state_of(scan) -> list:
    return sorted(repr(r) for r in scan.to_arrow().to_pylist())


@pytest.mark.parametrize("props", list(PROPS))
def test_what_follows_a_copy_reads_as_what_follows_the_write(tmp_path, copies, props):
    """Updates, deletes, another merge, compaction and DuckDB on the copied files give what they
    give on the written ones, lineage included."""
    a, b = pair(tmp_path, PROPS[props])
    src = rows(range(3, 15))
    upsert(a, staged_source(tmp_path, src)), upsert(b, src)
    for t in (a, b):
        t.update("id >= 12", {"v": "'upd'"})
        t.delete("id = 4")
        upsert(t, rows([5, 40], tag="again"))
        t.maintenance.compact(target_file_size=1 << 20)
    assert copies == [1]
    assert state(a) == state(b)
    import duckdb

    con = duckdb.connect()
    for name, t in (("a", a), ("b", b)):
        lamina.duckdb.register(con, t, name)
    assert con.sql("SELECT * FROM a EXCEPT SELECT * FROM b").fetchall() == []
    assert con.sql("SELECT count(*) FROM a").fetchall() == con.sql("SELECT count(*) FROM b").fetchall()


def test_renamed_columns_are_copied_under_their_physical_names(tmp_path, copies):
    """A table whose column was renamed stores it under its old (physical) name: the copy
    takes the source's column under that name, and reads back as the table's."""
    a, b = pair(tmp_path, LINEAGE)
    for t in (a, b):
        with t.update_schema() as u:
            u.rename_column("v", "label")
    src = rows([1, 2, 30]).rename_columns(["id", "label", "x", "n"])
    upsert(a, staged_source(tmp_path, src)), upsert(b, src)
    assert copies == [1]
    assert sorted(map(repr, a.to_arrow().to_pylist())) == sorted(map(repr, b.to_arrow().to_pylist()))
    assert state_of(a.scan(where="label = 'new30'")) == state_of(b.scan(where="label = 'new30'"))


@pytest.mark.parametrize("why", ["partitioned", "sorted", "another codec", "a key held twice", "another type"])
def test_a_source_that_cannot_be_copied_is_written_as_before(tmp_path, copies, why):
    create, src, write, prepare = {}, rows([1, 2, 30]), {}, None
    ids = range(10)
    if why == "partitioned":
        create["partition_by"] = ["v"]
    elif why == "sorted":
        prepare = lambda t: t.update_sort_order().desc("n").commit()  # noqa: E731
    elif why == "another codec":
        write["compression"] = "zstd"
    elif why == "a key held twice":
        ids = [1, 2, 2, 3]
    a, b = pair(tmp_path, LINEAGE, ids=ids, prepare=prepare, **create)
    staged = staged_source(tmp_path, src if why != "another type" else src.set_column(3, pa.field("n", pa.int32(), False), src["n"].cast(pa.int32())), **write)
    READS.clear()
    upsert(a, staged), upsert(b, src)
    assert copies == [] and READS == [1]
    assert state(a) == state(b)


@pytest.mark.parametrize("props", list(PROPS))
def test_a_damaged_staged_file_fails_commits_nothing_and_leaves_nothing(tmp_path, props):
    """Its footer and keys read, a page of another column not: the merge raises InvalidArgument
    naming the file, the table keeps its version and rows, and no file is left behind."""
    a, _ = pair(tmp_path, PROPS[props])
    files, version, before = on_disk(a), a.version, state(a)
    src = staged_source(tmp_path, rows([1, 2, 30]), use_dictionary=False)
    f = src.staged.files[0]
    at = f.metadata.row_group(0).column(1).data_page_offset
    raw = bytearray(f.data.to_pybytes())
    raw[at:at + 12] = b"\xff" * 12
    src.staged.files[0] = StagedFile(f.path, pa.py_buffer(bytes(raw)), f.metadata, f.schema)
    with pytest.raises(InvalidArgument, match=f"{os.path.basename(f.path)} could not be read"):
        upsert(a, src)
    assert a.refresh().version == version and state(a) == before and left_behind(a, files) == set()


def test_a_retry_onto_a_newer_version_reuses_the_copy(tmp_path, copies, monkeypatch):
    """A commit lands while the merge applies: the merge rebases and commits the files it
    copied, once, with the ids of the rows they replace."""
    a, b = pair(tmp_path, LINEAGE)
    files = on_disk(a)
    other = lamina.open_table(a.uri)
    real = rowlevel.RowDelta._apply
    calls = concurrently_on_first_attempt(monkeypatch, lambda: other.append(rows([50], tag="app")))
    src = rows([3, 60])
    upsert(a, staged_source(tmp_path, src))
    monkeypatch.setattr(rowlevel.RowDelta, "_apply", real)  # (b: the same commits, one after the other)
    b.append(rows([50], tag="app"))
    upsert(b, src)
    assert len(calls) == 2 and copies == [1]
    assert state(a) == state(b)  # the same versions: the same ids
    assert len({r[4] for r in state(a)}) == len(state(a))
    assert {p for p in left_behind(a, files) if p.endswith(".parquet")} == set()


@pytest.mark.parametrize("props", list(PROPS))
def test_duplicate_source_keys_fail_and_leave_no_copy_behind(tmp_path, props):
    """Two source rows of one key: the merge fails as any merge does, and the copy a table
    without lineage starts at once (before matching) is deleted: nothing is left behind."""
    a, _ = pair(tmp_path, PROPS[props])
    files, version, before = on_disk(a), a.version, state(a)
    dup = pa.concat_tables([rows([2, 3, 40]), rows([3], tag="again")])
    with pytest.raises(InvalidArgument, match="more than one source row"):
        upsert(a, staged_source(tmp_path, dup))
    assert a.refresh().version == version and state(a) == before and left_behind(a, files) == set()
