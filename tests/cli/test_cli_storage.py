"""What `lamina info`, `expire` and `remove-orphans` (`vacuum`) say about a table's space.

The table of the issue: appends, a tag, a compaction that doubles it on disk, a branch.
Each figure printed is checked against the disk (os.walk) and the public system tables
($files and $manifests of each version, tag and branch), and each reason against what the
run was given; every line stays within the terminal's width."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import lamina
from lamina.cli._output import human_bytes
from lamina.commit import flush_hints
from support.cli import console_width, ok
from support.files import referenced_by, set_age

SCHEMA = pa.schema([("id", pa.int64()), ("note", pa.string())])
WIDTHS = [80, 200]


@pytest.fixture
def lake(tmp_path):
    """Six appends (versions 1..6), tag nightly on version 3, a compaction (version 7) and a
    branch audit with one append of its own."""
    t = lamina.create_table(str(tmp_path / "events"), SCHEMA)
    for k in range(6):
        t.append(pa.table({"id": pa.array(range(k * 500, (k + 1) * 500), pa.int64()),
                           "note": [f"order {i} of day {k}" for i in range(500)]}))
    t.tags.create("nightly", 3)
    t.maintenance.compact()
    t.branches.create("audit").append(pa.table({"id": pa.array([-1], pa.int64()), "note": ["audit"]}))
    yield t.refresh()
    flush_hints()


def disk(root: str) -> dict[str, int]:
    flush_hints()
    return {os.path.relpath(os.path.join(d, f), root): os.path.getsize(os.path.join(d, f))
            for d, _, names in os.walk(root) for f in names}


def held_files(t: lamina.Table) -> dict[str, set[str]]:
    """The files each holder keeps beyond the current version, by the system tables."""
    current = referenced_by(t)
    older = set().union(*(referenced_by(t, version=h["version"]) for h in t.history() if h["version"] != t.version))
    b = t.branch("audit")
    holders = {"versions": older, "nightly": referenced_by(t, version="nightly"),
               "audit": set().union(*(referenced_by(b, version=h["version"]) for h in b.history()))}
    return {k: v - current for k, v in holders.items()}


def held(t: lamina.Table) -> dict[str, int]:
    """The bytes each holder keeps beyond the current version."""
    sizes = disk(t.uri)
    return {k: sum(sizes[p] for p in v if p in sizes) for k, v in held_files(t).items()}


def said(out: str) -> str:
    return " ".join(out.split())


def fits(out: str, width: int) -> None:
    assert all(len(line) <= width for line in out.splitlines()), out


def holder_lines_hold(text: str, t: lamina.Table, versions: bool = True) -> None:
    h = held(t)
    uri = t.uri
    if versions:
        n = t.version  # every version before the latest (0 .. n-1)
        assert f"{n} older versions (0..{n - 1}) hold {human_bytes(h['versions'])}" in text, text
        assert f"`lamina expire {uri}` expires those superseded more than 5d ago" in text
    else:
        assert h["versions"] == 0 and "older versions" not in text
    files = held_files(t)
    alone = files["nightly"] - files["versions"] - files["audit"]
    sizes = disk(uri)
    only = "" if alone == files["nightly"] else f", {human_bytes(sum(sizes[p] for p in alone if p in sizes))} of it held by nothing else"
    assert f"tag nightly holds version 3: {human_bytes(h['nightly'])}{only};" in text, text
    assert f"`lamina tag delete {uri} nightly` frees {'it' if not only else 'what nothing else holds'}" in text
    assert f"branch audit holds {human_bytes(h['audit'])}: `lamina branch delete {uri} audit`" in text, text


@pytest.mark.parametrize("width", WIDTHS)
def test_expire_says_why_it_kept_the_versions_and_what_holds_the_space(lake, width):
    uri, n = lake.uri, lake.version
    with console_width(width):
        default = ok("expire", uri)
        newest = ok("expire", uri, "--retain-last", "2")
    for out in (default, newest):
        fits(out, width)
        assert "expire 0 versions (none)" in said(out)
        holder_lines_hold(said(out), lake)
    assert (f"kept {n} versions besides the latest: {n} superseded less than 5d ago, the retention (--older-than AGE "
            "expires those superseded longer ago than AGE)") in said(default)
    assert (f"kept {n} versions besides the latest: {n - 1} superseded less than the reader grace of 1h ago "
            "(--reader-grace 0s when no reader may still read them); 1 among the 2 newest (--retain-last)") in said(newest)
    sizes = disk(uri)
    live = referenced_by(lake) - {p for p in lake.inspect.manifests().column("path").to_pylist()}
    assert (f"{human_bytes(sum(sizes.values()))} under the location: {human_bytes(sum(sizes[p] for p in live))} is what "
            f"version {n} reads") in said(default)


def test_once_the_versions_expire_the_tag_and_the_branch_hold_what_is_left(lake):
    n = lake.version
    with console_width(200):
        out = ok("expire", lake.uri, "--older-than", "0s", "--reader-grace", "0s")
    text = said(out)
    assert f"expire {n} versions (0..{n - 1})" in text and "kept" not in text.replace("files kept for tags", "")
    holder_lines_hold(text, lake.refresh(), versions=False)


@pytest.mark.parametrize("width", WIDTHS)
def test_vacuum_says_what_holds_the_space_it_cannot_free(lake, width):
    orphan = "data/0123456789abcdef-000000000000.parquet"
    with open(os.path.join(lake.uri, orphan), "wb") as f:
        f.write(b"left by a crashed writer" * 10)
    set_age(os.path.join(lake.uri, orphan), 1)  # younger than vacuum's 3 days
    with console_width(width):
        out = ok("vacuum", lake.uri)
    fits(out, width)
    text = said(out)
    assert "0 orphans (0 B)" in text and "kept 1 younger than 3d" in text
    holder_lines_hold(text, lake)
    assert (f"1 files no version references hold {human_bytes(240)}: `lamina remove-orphans {lake.uri}` deletes those "
            "older than 3d") in text


def test_info_shows_live_and_total_bytes_and_what_holds_the_rest(lake):
    sizes = disk(lake.uri)
    files = lake.inspect.files()
    live = set(files.column("path").to_pylist()) | {p for p in files.column("dv_path").to_pylist() if p}
    doc = json.loads(ok("info", lake.uri, "--output", "json"))
    assert (doc["live_bytes"], doc["live_files"]) == (sum(sizes[p] for p in live), len(live))
    assert (doc["total_bytes"], doc["total_files"]) == (sum(sizes.values()), len(sizes))
    h = held(lake)
    by_name = {x["name"] or x["kind"]: x for x in doc["holders"]}
    assert {k: v["bytes"] for k, v in by_name.items()} == h
    assert doc["held_bytes"] == sum(sizes[p] for p in set().union(*held_files(lake).values()) if p in sizes)  # each once
    assert doc["live_bytes"] + doc["held_bytes"] + doc["unreferenced_bytes"] + doc["metadata_bytes"] == doc["total_bytes"]
    for width in WIDTHS:
        with console_width(width):
            out = ok("info", lake.uri)
        fits(out, width)
        text = said(out)
        assert f"live_bytes {human_bytes(doc['live_bytes'])} in {len(live)} files, what version {lake.version} (main's latest) reads" in text
        assert f"total_bytes {human_bytes(doc['total_bytes'])} in {len(sizes)} files under the location" in text
        if width == 200:  # (at 80, a path in a line folds after a slash)
            holder_lines_hold(text, lake)
