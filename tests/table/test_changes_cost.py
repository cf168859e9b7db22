"""The change feed's cost follows the change, not the table.

A one-row update in a table of 40 data files and a dozen leaf manifests: ``changes()`` of that
version must read only the data files the update added, removed or gave a new deletion
vector, and no leaf manifest both versions list. Two proofs: every file read is recorded (at
the FileIO, below every reader), and every file it must not read is overwritten with garbage
first, after which the feed still answers while a full scan of either version fails.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import lamina
from lamina.data import deletes
from lamina.errors import CorruptMetadata
from lamina.io import FileIO
from lamina.manifest import files as manifest_files

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
PROPS = {"write.max-rows-per-file": 50, "manifest.inline-max-files": 0, "manifest.leaf-target-files": 4}
BATCHES, ROWS = 8, 250  # 8 appends of 5 files each: 40 files in several leaves


@pytest.fixture
def table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=PROPS)
    for b in range(BATCHES):
        t.append(pa.table({"id": list(range(b * ROWS, (b + 1) * ROWS)), "v": ["x"] * ROWS}))
    return t


def files_of(t: lamina.Table, version: int) -> dict[str, str | None]:
    """Data file path -> its deletion vector's file (None: no DV; a commit writes one DV file)."""
    f = t.inspect.files(version=version)
    return dict(zip(f.column("path").to_pylist(), f.column("dv_path").to_pylist()))


def manifests_of(t: lamina.Table, version: int) -> set[str]:
    return set(t.inspect.manifests(version=version).column("path").to_pylist())


class ReadLog:
    """Every table file a FileIO hands to a reader (local files go through ``local_path``,
    object stores through ``get``/``get_range``), from any thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: set[str] = set()
        lock = threading.Lock()
        for name in ("local_path", "get", "get_range"):
            real = getattr(FileIO, name)

            def spy(io, path, *args, _real=real, **kwargs):  # noqa: ANN001
                with lock:
                    self.paths.add(path)
                return _real(io, path, *args, **kwargs)

            monkeypatch.setattr(FileIO, name, spy)

    def data(self) -> set[str]:
        return {p for p in self.paths if p.startswith("data/") and not p.startswith("data/_dv/")}

    def manifests(self) -> set[str]:
        return {p for p in self.paths if p.startswith("_lamina/manifests/")}


def spoil(t: lamina.Table, paths: set[str]) -> None:
    """Overwrite the files with bytes no reader accepts, and forget cached copies."""
    for p in paths:
        with open(t.io.local_path(p), "wb") as f:
            f.write(b"not parquet")
    manifest_files.clear_cache()
    deletes._cache.clear()


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_changes_of_a_small_update_read_only_the_files_it_changed(table, mode, monkeypatch):
    t = table
    start = t.version
    t.update(where="id = 777", set={"v": "'U'"}, mode=mode)
    end = t.version
    before, after = files_of(t, start), files_of(t, end)
    # files added, removed, or whose DV changed: a path whose (path, DV) is on one side only
    changed = {p for p in before.keys() | after.keys() if before.get(p, "gone") != after.get(p, "gone")}
    assert len(changed) == (2 if mode == "merge-on-read" else 3)  # the row's file, its rewrite(s)
    shared_leaves = manifests_of(t, start) & manifests_of(t, end)
    assert len(shared_leaves) >= 8  # most of the tree is the same in both versions
    untouched = (before.keys() | after.keys()) - changed
    spoil(t, untouched | shared_leaves)

    reads = ReadLog(monkeypatch)
    got = t.changes(start, end, columns=["id", "v", "_row_id"]).to_arrow()
    assert sorted(zip(got.column("id").to_pylist(), got.column("v").to_pylist(), got.column("_change_type").to_pylist())) == [
        (777, "U", "update_postimage"), (777, "x", "update_preimage")]
    assert reads.data() == changed
    assert not reads.manifests() & shared_leaves
    for v in (start, end):  # a full read of either version meets a spoiled file
        with pytest.raises(CorruptMetadata):
            t.scan(version=v).to_arrow()


def test_versions_that_move_rows_are_not_read(table, monkeypatch):
    """Compaction and manifest rewrites change no row: their versions are answered from the
    version manifests alone."""
    t = table
    start = t.version
    t.update(where="id < 10", set={"v": "'U'"})
    t.maintenance.compact()
    t.maintenance.rewrite_manifests()
    spoil(t, set(files_of(t, t.version)) | set(files_of(t, start + 1)) | manifests_of(t, t.version) | manifests_of(t, start + 1))
    reads = ReadLog(monkeypatch)
    assert t.changes(start + 1).count() == 0
    assert not reads.data() and not reads.manifests()
