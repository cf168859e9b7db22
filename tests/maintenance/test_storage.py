"""Where a table's bytes are (lamina.maintenance.storage through ``Table.maintenance.storage()``).

Random histories of appends, deletes, compactions, tags, branches, expiry and files left by
a crashed writer; after each, the report is checked against the disk and the public system
tables: every file under the location (os.walk) counted once, the current version's data
and deletion-vector files ($files) as live, what each older version, tag and branch
references beyond them ($files and $manifests of its versions) as held by it, the planted
files as unreferenced."""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import timedelta

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.maintenance.storage import BRANCH, TAG, VERSIONS
from support.files import referenced_by

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.string())])
NO_GRACE = timedelta(0)

OPS = st.sampled_from(["append", "append", "delete", "compact", "tag", "untag", "branch", "expire", "orphan"])


def on_disk(root: str) -> dict[str, int]:
    flush_hints()
    return {os.path.relpath(os.path.join(d, f), root): os.path.getsize(os.path.join(d, f))
            for d, _, names in os.walk(root) for f in names}


def size(paths: set[str], disk: dict[str, int]) -> tuple[int, int]:
    present = [p for p in paths if p in disk]
    return len(present), sum(disk[p] for p in present)


class History:
    """A table and what the test did to it: its rows grow by appends, a delete takes some."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.t = lamina.create_table(root, SCHEMA)
        self.next_id = 0
        self.tags: list[str] = []
        self.tags_made = 0  # names are never reused: an untag then a tag makes a new name
        self.branches: list[str] = []
        self.planted: set[str] = set()

    def do(self, op: str) -> None:
        t = self.t
        if op == "append":
            ids = list(range(self.next_id, self.next_id + 50))
            self.next_id += 50
            t.append(pa.table({"id": pa.array(ids, pa.int64()), "grp": [f"g{i % 3}" for i in ids]}, schema=SCHEMA))
        elif op == "delete" and self.next_id:  # a row in seven: deletion vectors
            t.delete(f"id IN ({', '.join(str(i) for i in range(3, self.next_id, 7))})")
        elif op == "compact":
            t.maintenance.compact()
        elif op == "tag":
            self.tags.append(f"t{self.tags_made}")
            self.tags_made += 1
            t.tags.create(self.tags[-1])
        elif op == "untag" and self.tags:
            t.tags.delete(self.tags.pop(0))
        elif op == "branch":
            name = f"b{len(self.branches)}"
            b = t.branches.create(name)
            b.append(pa.table({"id": pa.array([10**6 + len(self.branches)], pa.int64()), "grp": ["b"]}, schema=SCHEMA))
            self.branches.append(name)
        elif op == "expire":
            t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE)
        elif op == "orphan":  # what a writer that crashed before its commit leaves
            path = f"data/{len(self.planted):016x}-000000000000.parquet"
            os.makedirs(os.path.join(self.root, "data"), exist_ok=True)
            with open(os.path.join(self.root, path), "wb") as f:
                f.write(b"x" * (100 + len(self.planted)))
            self.planted.add(path)
        t.refresh()

    def check(self) -> None:
        t = self.t.refresh()
        rep = t.maintenance.storage()
        disk = on_disk(self.root)
        current = referenced_by(t)
        f = t.inspect.files()
        live = set(f.column("path").to_pylist()) | {p for p in f.column("dv_path").to_pylist() if p}
        assert (rep.version, rep.location) == (t.version, t.uri)
        assert (rep.live_files, rep.live_bytes) == size(live, disk)
        assert (rep.total_files, rep.total_bytes) == (len(disk), sum(disk.values()))
        older = [h["version"] for h in t.history() if h["version"] != t.version]
        holders = {(VERSIONS, ""): set().union(*(referenced_by(t, version=v) for v in older))}
        holders.update({(TAG, tag.name): referenced_by(t, version=tag.name) for tag in t.tags.list()})
        for r in t.branches.list():
            b = t.branch(r.name)
            holders[(BRANCH, r.name)] = set().union(*(referenced_by(b, version=h["version"]) for h in b.history()))
        beyond = {k: v - current for k, v in holders.items()}
        got = {(h.kind, h.name): h for h in rep.holders}
        assert set(got) == set(beyond)
        for k, paths in beyond.items():
            others = set().union(*(v for j, v in beyond.items() if j != k))
            assert (got[k].files, got[k].bytes) == size(paths, disk), k
            assert (got[k].only_files, got[k].only_bytes) == size(paths - others, disk), k
        held = set().union(*beyond.values())
        assert (rep.held_files, rep.held_bytes) == size(held, disk)
        assert (rep.unreferenced_files, rep.unreferenced_bytes) == size(self.planted, disk)
        # every file counted once: what is not data, held or unreferenced is metadata
        assert rep.live_files + rep.held_files + rep.unreferenced_files + rep.metadata_files == rep.total_files
        assert rep.live_bytes + rep.held_bytes + rep.unreferenced_bytes + rep.metadata_bytes == rep.total_bytes
        assert rep.metadata_bytes == sum(n for p, n in disk.items() if p not in live | held | self.planted)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=9))
def test_every_byte_under_the_table_is_counted_once_by_what_holds_it(ops):
    root = tempfile.mkdtemp(prefix="lamina-storage-")
    try:
        h = History(os.path.join(root, "t"))
        for op in ops:
            h.do(op)
            h.check()
    finally:
        flush_hints()
        shutil.rmtree(root, ignore_errors=True)


def test_after_a_compaction_the_older_versions_hold_what_it_rewrote(tmp_path):
    """The issue's table: compaction doubles it on disk; the report says the older versions
    hold the files it rewrote, which expiring them frees (and a tag then holds its own)."""
    h = History(str(tmp_path / "t"))
    for op in ["append"] * 6:
        h.do(op)
    before = {p for p in h.t.inspect.files().column("path").to_pylist()}
    h.do("tag")
    h.do("compact")
    rep = h.t.maintenance.storage()
    versions = next(x for x in rep.holders if x.kind == VERSIONS)
    disk = on_disk(h.root)
    rewritten = sum(disk[p] for p in before)  # the roots are in the version files: no manifest file is held
    assert versions.versions == tuple(range(h.t.version)) and (versions.files, versions.bytes) == (6, rewritten)
    assert rep.held_bytes == rewritten and rep.live_files == 1
    tag = next(x for x in rep.holders if x.kind == TAG)
    assert tag.versions == (6,) and tag.only_bytes == 0  # version 6 itself still holds the same files
    h.t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE)
    rep = h.t.maintenance.storage()
    assert [x.kind for x in rep.holders if x.bytes] == [TAG]  # now only the tag keeps them ...
    tag = next(x for x in rep.holders if x.kind == TAG)
    assert tag.only_bytes == tag.bytes == rewritten  # ... and deleting it frees them
    h.check()
