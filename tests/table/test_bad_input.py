"""Bad input gets a typed error that says what to do, and changes nothing
(reliability issue, points 6 and 13).

Table-driven: each case is a call on a small table (four versions, a tag, a data file
lying under data/ that is not in the table yet) or on the directory around it, the
``lamina.errors`` class it must raise, and words its message must hold (what is wrong
and what to do). Around every call, everything on disk under the test's directory
(paths, sizes, modification times) must stay the same, and the table must still read
its rows: the case of the issue where a bad add_files path broke every later scan.
"""

from __future__ import annotations

import errno
import os
import time
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina import errors as E
from lamina.io import fileio

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.string())])
NAN, INF = float("nan"), float("inf")
DIRECTIONS = "e.g. '2026-01-31T12:00:00+00:00'"


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


class World:
    """A table with versions 0..3 and a tag, inside ``root`` (the test's directory)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.uri = os.path.join(root, "t")
        self.table = lamina.create_table(self.uri, SCHEMA)
        for i in range(3):
            self.table.append(rows([i * 10, i * 10 + 1]))
        self.table.tags.create("keep", 1)
        first = self.table.inspect.files().slice(0, 1).to_pylist()[0]
        self.held = (first["path"], first["size"])  # a file the table holds
        # A file under data/ the table does not hold yet (what add_files registers).
        self.loose = "data/loose.parquet"
        pq.write_table(rows([100, 101]), os.path.join(self.uri, self.loose))
        self.loose_size = os.path.getsize(os.path.join(self.uri, self.loose))
        # Things around the table: a plain file, a symlink loop.
        self.file = os.path.join(root, "a-file")
        with open(self.file, "w") as f:
            f.write("not a table")
        self.loop = os.path.join(root, "loop")
        os.symlink(self.loop, self.loop)
        lamina.commit.flush_hints()

    def add(self, paths: list, sizes: list | None = None, counts: list | None = None, **kw):
        sizes = sizes if sizes is not None else [self.loose_size] * len(paths)
        counts = counts if counts is not None else [2] * len(paths)
        return self.table.add_files(pa.table({"path": pa.array(paths, pa.string()), "size": sizes, "record_count": counts}), **kw).version

    def snapshot(self) -> list[tuple[str, int, int]]:
        out = []
        for d, _, names in os.walk(self.root):
            for n in names:
                st = os.lstat(os.path.join(d, n))
                out.append((os.path.relpath(os.path.join(d, n), self.root), st.st_size, st.st_mtime_ns))
        return sorted(out)

    def content(self) -> list[int]:
        fresh = lamina.open_table(self.uri)
        return sorted(fresh.to_arrow().column("id").to_pylist())


@pytest.fixture
def world(tmp_path) -> World:
    return World(str(tmp_path))


def read_only_unlink(path, *args, **kwargs):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)


def read_only_put(store, path, *args, **kwargs):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)


_os_open = os.open


def read_only_open(path, flags, *args, **kwargs):
    # FileIO writes local files itself (lamina.io.fileio: FileIO._local_put); reads still work
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
    return _os_open(path, flags, *args, **kwargs)


def expire_on_read_only_fs(w: World, monkeypatch) -> None:
    # No read-only file system can be mounted here without root tricks; the writes a
    # read-only one refuses (expiry's first: a version slot's tombstone) and its unlinks are
    # made to fail as they would (EROFS).
    monkeypatch.setattr(fileio.os, "unlink", read_only_unlink)
    monkeypatch.setattr(fileio.obstore, "put", read_only_put)
    monkeypatch.setattr(fileio.os, "open", read_only_open)
    w.table.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))


def orphans_on_read_only_fs(w: World, monkeypatch) -> None:
    old = os.path.join(w.uri, "data", "orphan.parquet")
    with open(old, "wb") as f:
        f.write(b"left behind by a failed writer")
    os.utime(old, (1_000_000_000, 1_000_000_000))
    before = w.snapshot()
    monkeypatch.setattr(fileio.os, "unlink", read_only_unlink)
    try:
        w.table.maintenance.remove_orphans(timedelta(days=2))
    finally:
        monkeypatch.undo()
        assert w.snapshot() == before
        os.unlink(old)  # the case's own setup, so the snapshot around the case stays equal


# (id, call, error class, words the message must hold)
CASES = [
    # -- add_files: every path is checked before anything is committed (point 6)
    ("add-parent-escape", lambda w, m: w.add([w.loose, "../evil.parquet"]), E.InvalidArgument,
     ["'../evil.parquet'", "'.' or '..' segment", "e.g. 'data/part-0001.parquet'", "Nothing was committed"]),
    ("add-absolute", lambda w, m: w.add([w.loose, "/etc/passwd"]), E.InvalidArgument, ["'/etc/passwd' is absolute", "relative to the table root"]),
    ("add-dot-segment", lambda w, m: w.add([w.loose, "data/./x.parquet"]), E.InvalidArgument, ["'data/./x.parquet'", "segment"]),
    ("add-backslashes", lambda w, m: w.add([w.loose, "data\\..\\x.parquet"]), E.InvalidArgument, ["contains '\\'", "separator is '/'"]),
    ("add-many-bad", lambda w, m: w.add([w.loose] + [f"../{i}.parquet" for i in range(7)] + ["data//x"]), E.InvalidArgument,
     ["8 of 9 files refused", "'../0.parquet'", "and 2 more", "'data//x' has an empty segment"]),
    ("add-other-store", lambda w, m: w.add([w.loose, "s3://bucket/x.parquet"]), E.InvalidArgument,
     ["'s3://bucket/x.parquet' is not a location on the table's store"]),
    ("add-metadata", lambda w, m: w.add(["_lamina/versions/x.json"]), E.InvalidArgument, ["is under _lamina/"]),
    ("add-dv-dir", lambda w, m: w.add(["data/_dv/x.dv"]), E.InvalidArgument, ["deletion vectors"]),
    ("add-null-path", lambda w, m: w.add([w.loose, None]), E.InvalidArgument, ["is null"]),
    ("add-nul-char", lambda w, m: w.add(["data/a\x00b.parquet"]), E.InvalidArgument, ["control character"]),
    ("add-twice-in-call", lambda w, m: w.add([w.loose, w.loose]), E.InvalidArgument, ["given more than once", "Give each file once"]),
    ("add-already-in-table", lambda w, m: w.add([w.held[0]], sizes=[w.held[1]]), E.InvalidArgument,
     ["already in the table", "Register only files the table does not hold"]),
    ("add-missing-file", lambda w, m: w.add([w.loose, "data/nowhere.parquet"]), E.InvalidArgument,
     ["'data/nowhere.parquet' does not exist", "Write the files under the table first"]),
    ("add-wrong-size", lambda w, m: w.add([w.loose], sizes=[w.loose_size + 1]), E.InvalidArgument, ["another size on storage"]),
    # (a size left out is listed: only a file that is not there has none)
    ("add-no-size", lambda w, m: w.add(["data/nowhere.parquet"], sizes=pa.array([None], pa.int64())), E.InvalidArgument, ["no size"]),
    ("add-negative-count", lambda w, m: w.add([w.loose], counts=[-1]), E.InvalidArgument, ["negative"]),
    ("add-bad-mode", lambda w, m: w.add([w.loose], mode="upsert"), E.InvalidArgument, ["'append' or 'overwrite'"]),
    # -- versions and tags (point 13)
    ("scan-superscript", lambda w, m: w.table.scan(version="²").to_arrow(), E.InvalidArgument, ["'²' is not a version number", "ASCII digits"]),
    ("scan-double-plus", lambda w, m: w.table.scan(version="++1").to_arrow(), E.InvalidArgument, ["'++1' is not a version number"]),
    ("scan-beyond-max", lambda w, m: w.table.scan(version=2**64), E.InvalidArgument, ["largest version number"]),
    ("scan-float-version", lambda w, m: w.table.scan(version=1.0), E.InvalidArgument, ["version number (int) or a tag name"]),
    ("scan-version-and-timestamp", lambda w, m: w.table.scan(version="keep", timestamp=0), E.InvalidArgument, ["version or timestamp"]),
    ("open-superscript", lambda w, m: lamina.open_table(w.uri, version="²"), E.InvalidArgument, ["ASCII digits"]),
    ("open-version-and-timestamp", lambda w, m: lamina.open_table(w.uri, version=1, timestamp=0), E.InvalidArgument, ["version or timestamp"]),
    ("rollback-superscript", lambda w, m: w.table.rollback("²"), E.InvalidArgument, ["ASCII digits"]),
    ("rollback-double-plus", lambda w, m: w.table.rollback("++1"), E.InvalidArgument, ["ASCII digits"]),
    ("tag-plus", lambda w, m: w.table.tags.create("+1a"), E.InvalidTagName, ["must start with a letter or digit, not '+'"]),
    ("tag-minus", lambda w, m: w.table.tags.create("-abc"), E.InvalidTagName, ["must start with a letter or digit, not '-'"]),
    ("tag-space", lambda w, m: w.table.tags.create("a b"), E.InvalidTagName, ["contains ' '", "letters, digits and"]),
    ("tag-number", lambda w, m: w.table.tags.create("-1"), E.InvalidTagName, ["is a number", "'v1'"]),
    # -- points in time and durations
    ("scan-ts-nan", lambda w, m: w.table.scan(timestamp=NAN), E.InvalidArgument, ["not a finite number", DIRECTIONS]),
    ("scan-ts-inf", lambda w, m: w.table.scan(timestamp=INF), E.InvalidArgument, ["not a finite number"]),
    ("scan-ts-huge", lambda w, m: w.table.scan(timestamp=1e300), E.InvalidArgument, ["out of range", "years 1 to 9999"]),
    ("rollback-ts-nan", lambda w, m: w.table.rollback(timestamp=NAN), E.InvalidArgument, ["not a finite number"]),
    ("scan-ts-seconds", lambda w, m: w.table.scan(timestamp=time.time()), E.InvalidArgument,
     ["looks like epoch seconds", "int(seconds * 1000)"]),
    ("tag-expires-seconds", lambda w, m: w.table.tags.create("later", expires_at=time.time() + 3600), E.InvalidArgument,
     ["expires_at", "looks like epoch seconds"]),
    ("expire-older-seconds", lambda w, m: w.table.maintenance.expire_versions(older_than=int(time.time()) - 60, reader_grace=timedelta(0)),
     E.InvalidArgument, ["older_than", "looks like epoch seconds"]),
    ("tag-expires-inf", lambda w, m: w.table.tags.create("later", expires_at=INF), E.InvalidArgument, ["expires_at inf"]),
    ("tag-expires-negative", lambda w, m: w.table.tags.create("later", expires_at=timedelta(days=-1)), E.InvalidArgument, ["negative duration"]),
    ("expire-older-nan", lambda w, m: w.table.maintenance.expire_versions(older_than=NAN, reader_grace=timedelta(0)), E.InvalidArgument, ["older_than nan"]),
    ("expire-older-inf", lambda w, m: w.table.maintenance.expire_versions(older_than=INF, reader_grace=timedelta(0)), E.InvalidArgument, ["older_than inf"]),
    ("expire-older-negative-age", lambda w, m: w.table.maintenance.expire_versions(older_than=timedelta(days=-5), reader_grace=timedelta(0)),
     E.InvalidArgument, ["negative duration"]),
    ("expire-older-far-date", lambda w, m: w.table.maintenance.expire_versions(older_than=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))),
     E.InvalidArgument, ["out of range"]),
    ("expire-grace-text", lambda w, m: w.table.maintenance.expire_versions(retain_last=1, reader_grace="abc"), E.InvalidArgument,
     ["reader_grace 'abc' is not a duration", "timedelta(hours=1)"]),
    ("expire-grace-inf", lambda w, m: w.table.maintenance.expire_versions(retain_last=1, reader_grace=INF), E.InvalidArgument, ["reader_grace inf"]),
    ("expire-grace-negative", lambda w, m: w.table.maintenance.expire_versions(retain_last=1, reader_grace=-1), E.InvalidArgument, ["negative"]),
    ("orphans-older-nan", lambda w, m: w.table.maintenance.remove_orphans(NAN), E.InvalidArgument, ["older_than nan"]),
    ("orphans-negative-age", lambda w, m: w.table.maintenance.remove_orphans(timedelta(days=-3), allow_short_age=True), E.InvalidArgument, ["negative duration"]),
    # -- locations
    ("open-file", lambda w, m: lamina.open_table(w.file), E.InvalidUri, ["is a file, not a directory", "directory holding _lamina/"]),
    ("create-file", lambda w, m: lamina.create_table(w.file, SCHEMA), E.InvalidUri, ["is a file"]),
    ("create-under-file", lambda w, m: lamina.create_table(os.path.join(w.file, "t"), SCHEMA), E.InvalidUri, ["inside a file"]),
    ("open-loop", lambda w, m: lamina.open_table(w.loop), E.InvalidUri, ["symbolic links form a loop", "real path"]),
    ("create-loop", lambda w, m: lamina.create_table(w.loop, SCHEMA), E.InvalidUri, ["loop"]),
    ("open-nul", lambda w, m: lamina.open_table(w.uri + "\x00x"), E.InvalidUri, ["NUL character", "remove it"]),
    ("create-nul", lambda w, m: lamina.create_table(os.path.join(w.root, "n\x00"), SCHEMA), E.InvalidUri, ["NUL character"]),
    ("catalog-nul", lambda w, m: lamina.load_catalog("sqlite:///" + w.root + "/c\x00.db"), E.InvalidCatalogUri, ["NUL character", "remove it"]),
    ("catalog-dir-nul", lambda w, m: lamina.load_catalog(w.root + "/wh\x00"), E.InvalidCatalogUri, ["NUL character"]),
    ("catalog-warehouse-file", lambda w, m: lamina.load_catalog(w.file), E.InvalidCatalogUri,
     ["warehouse", "is a file, not a directory", "one directory per namespace"]),
    ("catalog-warehouse-loop", lambda w, m: lamina.load_catalog(w.loop), E.InvalidCatalogUri, ["symbolic links form a loop"]),
    ("catalog-warehouse-in-file", lambda w, m: lamina.load_catalog(os.path.join(w.file, "wh")), E.InvalidCatalogUri, ["inside a file"]),
    ("catalog-bad-port", lambda w, m: lamina.load_catalog("postgresql://u:secret@h:abc/db"), E.InvalidCatalogUri,
     ["a port is a number from 1 to 65535", "u:***@h:abc"]),
    # -- data
    ("pandas-mixed-column", lambda w, m: w.table.append(__import__("pandas").DataFrame({"id": [1, 2], "name": ["a", 3]})),
     E.SchemaMismatch, ["column 'name' holds int, str values", "astype(str)", "Nothing was written"]),
    # -- a read-only file system under maintenance
    ("expire-read-only-fs", expire_on_read_only_fs, E.ReadOnlyStorage, ["read-only (EROFS)", "remount it read-write"]),
    ("orphans-read-only-fs", orphans_on_read_only_fs, E.ReadOnlyStorage, ["read-only (EROFS)", "data/orphan.parquet"]),
]


@pytest.mark.parametrize("case, call, error, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_clearly_and_changes_nothing(world, monkeypatch, case, call, error, words):
    before, content = world.snapshot(), world.content()
    with pytest.raises(error) as raised:
        call(world, monkeypatch)
    monkeypatch.undo()
    message = str(raised.value)
    for w in words:
        assert w in message, f"{case}: {w!r} not in {message!r}"
    assert "secret" not in message
    assert world.snapshot() == before, f"{case} changed files"
    assert world.content() == content and lamina.open_table(world.uri).version == 3


def test_versions_and_tag_names_given_as_text_still_open_what_they_name(world):
    """The stricter parsing keeps every form that worked: digits (signed, spaced) and tag names."""
    for given in (2, "2", "+2", " 2 "):
        assert world.table.scan(version=given).to_arrow().num_rows == 4
        assert lamina.open_table(world.uri, version=given).version == 2
    assert world.table.scan(version="keep").version == 1 == lamina.open_table(world.uri, version="keep").version
    with pytest.raises(E.VersionNotFound, match="versions start at 0"):
        world.table.scan(version="-1")


def test_a_rejected_add_files_leaves_later_scans_working(world):
    """The issue's failure mode: one good path first, a bad one later. Refused whole; the
    good file is then registered on its own and every later scan works."""
    with pytest.raises(E.InvalidArgument):
        world.add([world.loose, "../evil.parquet"])
    assert world.add([world.loose]) == 4
    assert world.content() == [0, 1, 10, 11, 20, 21, 100, 101]
    assert world.table.scan(version=3).to_arrow().num_rows == 6


def test_a_file_added_meanwhile_is_refused_when_the_append_rebases(world):
    """Checked against each version the append lands on, not only the one it was built
    on: a stale handle registering a file another handle registered meanwhile."""
    stale = lamina.open_table(world.uri)
    world.add([world.loose])
    stale._latest_at = None  # as if long open: it rebases onto the version holding the file
    with pytest.raises(E.InvalidArgument, match="already in the table \\(version 4\\)"):
        stale.add_files(pa.table({"path": [world.loose], "size": [world.loose_size], "record_count": [2]}))
    assert lamina.open_table(world.uri).version == 4 and world.content() == [0, 1, 10, 11, 20, 21, 100, 101]


def test_add_files_check_files_false_trusts_the_caller(world):
    """Registering entries without files (as the planning benchmark does) stays possible;
    the path rules still hold."""
    assert world.add(["data/synthetic/0000001.parquet"], sizes=[4_000_000], check_files=False) == 4
    with pytest.raises(E.InvalidArgument, match="'.' or '..' segment"):
        world.add(["data/../0000002.parquet"], check_files=False)


def test_add_files_checks_a_long_list_with_one_listing_per_directory(world, monkeypatch):
    """Existence and size of 2,400 files in two directories: two directory listings (each
    past one 1,000-entry page), no request per file."""
    paths = []
    for part in ("p=1", "p=2"):
        os.makedirs(os.path.join(world.uri, "data", part))
        for i in range(1200):
            rel = f"data/{part}/f{i:04d}.parquet"
            os.link(os.path.join(world.uri, world.loose), os.path.join(world.uri, rel))
            paths.append(rel)
    listed = []
    real = fileio.FileIO.list_dir
    monkeypatch.setattr(fileio.FileIO, "list_dir", lambda self, prefix: listed.append(prefix) or real(self, prefix))
    monkeypatch.setattr(fileio.FileIO, "size", lambda *a: pytest.fail("a request per file"))
    assert world.add(paths) == 4
    assert sorted(listed) == ["data/p=1", "data/p=2"]
    assert lamina.open_table(world.uri).inspect.files().num_rows == 3 + 2400


@pytest.mark.parametrize("properties, words", [
    ({"expire.reader-grace-ms": "one hour"}, "expire.reader-grace-ms='one hour' (give an integer >= 0)"),
    ({"write.max-rows-per-file": "0"}, "write.max-rows-per-file='0' (give an integer >= 1)"),
    ({"write.max-rows-per-file": "1e6"}, "write.max-rows-per-file='1e6'"),
    ({"commit.retry.max-seconds": "nan"}, "commit.retry.max-seconds='nan' (give a number >= 0)"),
    ({"version.slot-chunk-size": "0"}, "version.slot-chunk-size='0' (give an integer >= 1)"),
    ({"expire.slot-retention-ms": "1 day"}, "expire.slot-retention-ms='1 day' (give an integer >= 0)"),
    ({"manifest.leaf-target-files": "lots", "tag.auto-retain-max": -1}, "tag.auto-retain-max='-1'"),
    ({"tag.auto-create": "weekly"}, "tag.auto-create='weekly' (give one of daily, hourly)"),
    ({"write.delete.mode": "merge"}, "write.delete.mode='merge' (give one of merge-on-read, copy-on-write)"),
])
def test_numeric_table_properties_are_checked_when_the_table_is_created(tmp_path, properties, words):
    """A property every later write or expiry would fail to parse is refused up front."""
    uri = str(tmp_path / "t")
    with pytest.raises(E.InvalidArgument, match="properties that cannot be used") as raised:
        lamina.create_table(uri, SCHEMA, properties=properties)
    assert words in str(raised.value) and "Nothing was created" in str(raised.value)
    assert not os.path.exists(uri)


def test_reader_grace_property_that_is_not_a_number_is_refused_by_expiry(tmp_path, monkeypatch):
    """A table written before properties were checked (simulated: the check skipped)."""
    import lamina.table.table as table_module

    monkeypatch.setattr(table_module, "check_properties", lambda props: None)
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"expire.reader-grace-ms": "one hour"})
    t.append(rows([1]))
    t.append(rows([2]))
    with pytest.raises(E.InvalidArgument, match=r"table property expire.reader-grace-ms='one hour' cannot be used: give an integer >= 0"):
        t.maintenance.expire_versions(retain_last=1)
    assert t.log.list_versions() == [0, 1, 2]


