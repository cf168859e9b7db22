"""A writer SIGKILLed at every step of a commit leaves a readable, consistent table.

The commit point is the put-if-absent of the version file: killed before it,
the write never happened (its files are unreferenced leftovers); killed after
it, the write is committed even though the hint may not say so.
"""

from __future__ import annotations

import collections
import json
import os
import signal

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.maintenance import fsck
from lamina.spec.layout import HINT_PATH, VERSIONS_DIR

from support import workers

procs = pytest.mark.xdist_group("procs")

ROWS = 4


def _rows(t: pa.Table) -> collections.Counter:
    d = t.select(["writer", "seq", "i"]).to_pydict()
    return collections.Counter(zip(d["writer"], d["seq"], d["i"]))


def _batch_rows(writer: int, seq: int, rows: int = ROWS) -> collections.Counter:
    return collections.Counter((writer, seq, i) for i in range(rows))


def _files(root: str) -> set[str]:
    out = set()
    for d, _, names in os.walk(root):
        for n in names:
            out.add(os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/"))
    return out


def _hint_version(root: str) -> int:
    with open(os.path.join(root, HINT_PATH), "rb") as f:
        return json.loads(f.read())["version"]


def _two_versions(uri: str) -> dict[int, collections.Counter]:
    """A table with versions 0..2 (two appends); returns the expected rows per version."""
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, ROWS))
    t.append(workers.batch(0, 1, ROWS))
    return {0: collections.Counter(), 1: _batch_rows(0, 0), 2: _batch_rows(0, 0) + _batch_rows(0, 1)}


def _check_versions(t: lamina.Table, expected: dict[int, collections.Counter]) -> None:
    for v, want in expected.items():
        data = t.scan(version=v).to_arrow()
        assert _rows(data) == want, f"version {v} reads the wrong rows"
        assert t.log.load(v).summary["total-records"] == data.num_rows


# Where to kill -> whether the killed commit is committed.
CRASH_POINTS = [
    ("write-data", False),
    ("manifests-written", False),
    ("before-publish", False),
    ("published", True),
    ("hinted", True),
]


@procs
@pytest.mark.parametrize("at,committed", CRASH_POINTS, ids=[c for c, _ in CRASH_POINTS])
def test_sigkill_during_append(tmp_path, at, committed):
    uri = str(tmp_path / "t")
    expected = _two_versions(uri)
    before = _files(uri)
    marker = str(tmp_path / "marker")

    proc = workers.run_crash_worker({"uri": uri, "at": at, "marker": marker, "writer": 1, "seq": 0, "rows": ROWS})
    assert proc.returncode == -signal.SIGKILL, f"worker was not killed at {at}: rc={proc.returncode}\n{proc.stderr}"
    with open(marker) as f:
        assert f.read().startswith(at)

    leftovers = _files(uri) - before
    assert all(not p.startswith(f"{VERSIONS_DIR}/") for p in leftovers) or committed
    if committed:
        expected[3] = expected[2] + _batch_rows(1, 0)
        # Killed before the hint was rewritten, the hint is stale: open must still find 3.
        assert _hint_version(uri) == (2 if at == "published" else 3)
    if at == "write-data":
        assert leftovers and all(p.startswith("data/") for p in leftovers), leftovers
    latest = max(expected)

    for allow_list in (True, False):
        t = lamina.open_table(uri, allow_list=allow_list)
        assert t.version == latest
    assert t.log.list_versions() == list(range(latest + 1))
    _check_versions(t, expected)

    report = fsck(t)
    assert report.ok and not report.missing, (report.missing, report.errors)
    # Unreferenced: only what the crashed write left, and never a version file.
    assert set(report.unreferenced) <= leftovers, set(report.unreferenced) - leftovers
    assert all(p.startswith(("data/", "_lamina/manifests/")) for p in report.unreferenced), report.unreferenced
    if committed:
        assert report.unreferenced == []
    else:
        assert report.unreferenced, "the crashed write's files should be left unreferenced"

    # The table keeps working: the next append gets the next version.
    t2 = lamina.open_table(uri)
    assert t2.append(workers.batch(2, 0, ROWS)).version == latest + 1
    expected[latest + 1] = expected[latest] + _batch_rows(2, 0)
    t3 = lamina.open_table(uri)
    assert t3.version == latest + 1
    _check_versions(t3, expected)
    report = fsck(t3)
    assert report.ok and not report.missing
    assert set(report.unreferenced) <= leftovers


OVERWRITE_POINTS = [("before-publish", False), ("published", True)]


@procs
@pytest.mark.parametrize("at,committed", OVERWRITE_POINTS, ids=[c for c, _ in OVERWRITE_POINTS])
def test_sigkill_during_overwrite_where(tmp_path, at, committed):
    """Killed mid-overwrite (which rewrites partly matching files) the old rows stay intact."""
    uri = str(tmp_path / "t")
    expected = _two_versions(uri)  # k = i: rows with i >= 2 match k >= 2
    before = _files(uri)
    proc = workers.run_crash_worker(
        {"uri": uri, "at": at, "marker": str(tmp_path / "m"), "writer": 5, "seq": 0, "rows": 2,
         "k_base": 10, "op": "overwrite", "where": "k >= 2"}
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    leftovers = _files(uri) - before
    if committed:
        kept = collections.Counter({r: c for r, c in expected[2].items() if r[2] < 2})
        expected[3] = kept + _batch_rows(5, 0, 2)
    t = lamina.open_table(uri)
    assert t.version == max(expected)
    _check_versions(t, expected)
    report = fsck(t)
    assert report.ok and not report.missing
    assert set(report.unreferenced) <= leftovers
    assert all(p.startswith(("data/", "_lamina/manifests/")) for p in report.unreferenced)
    assert t.append(workers.batch(6, 0, ROWS)).version == max(expected) + 1


# --- the hint is only a hint ---------------------------------------------------------------------


@pytest.fixture
def three_versions(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    hints = {}
    for seq in range(3):
        t.append(workers.batch(0, seq, ROWS))
        flush_hints()  # hints are written in the background
        with open(os.path.join(uri, HINT_PATH), "rb") as f:
            hints[t.version] = f.read()
    return uri, hints


def _write_hint(uri: str, data: bytes) -> None:
    with open(os.path.join(uri, HINT_PATH), "wb") as f:
        f.write(data)


def _assert_latest(uri: str, version: int = 3) -> None:
    for allow_list in (True, False):
        t = lamina.open_table(uri, allow_list=allow_list)
        assert t.version == version, f"allow_list={allow_list}"
        assert t.scan().to_arrow().num_rows == version * ROWS
    assert lamina.open_table(uri).append(workers.batch(9, 0, ROWS)).version == version + 1


def test_stale_hint(three_versions):
    uri, hints = three_versions
    _write_hint(uri, hints[1])
    assert _hint_version(uri) == 1
    _assert_latest(uri)


def test_deleted_hint(three_versions):
    uri, _ = three_versions
    os.remove(os.path.join(uri, HINT_PATH))
    _assert_latest(uri)


@pytest.mark.parametrize("garbage", [b"", b"{not json", b'{"version": 1}'], ids=["empty", "torn", "partial"])
def test_unreadable_hint(three_versions, garbage):
    uri, hints = three_versions
    _write_hint(uri, garbage)
    t = lamina.open_table(uri)
    assert t.version == 3
    _assert_latest(uri)


def test_torn_hint_mixing_two_hints(tmp_path):
    """On local disk the hint is rewritten in place, so a read racing the rewrite (or a crash in
    it) may see the new hint's first bytes over the old one's rest: whatever the split, opening
    finds the latest version."""
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    hints = {}
    for seq in range(10):
        t.append(workers.batch(0, seq, ROWS))
        flush_hints()
        with open(os.path.join(uri, HINT_PATH), "rb") as f:
            hints[t.version] = f.read().rstrip(b" ")
    old, new = hints[9], hints[10]
    assert len(new) > len(old)  # one more digit: the version and the ordinal
    for k in range(len(new) + 1):
        _write_hint(uri, new[:k] + old[k:])
        for allow_list in (True, False):
            assert lamina.open_table(uri, allow_list=allow_list).version == 10, (k, allow_list)


def test_local_hint_is_rewritten_in_place_before_the_commit_returns(tmp_path):
    """No new file per commit for the hint (a replace creates one and frees the old), and no
    wait for a background write: the hint names the version as soon as the append returns."""
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    inode = os.stat(os.path.join(uri, HINT_PATH)).st_ino
    for seq in range(3):
        t.append(workers.batch(0, seq, ROWS))
        assert _hint_version(uri) == t.version
        assert os.stat(os.path.join(uri, HINT_PATH)).st_ino == inode
    _write_hint(uri, b" " * 600)  # longer than any hint here: the next one is padded to it
    t.append(workers.batch(0, 3, ROWS))
    assert _hint_version(uri) == 4
    _assert_latest(uri, 4)


def test_hint_ahead_of_versions(three_versions):
    """A hint naming a version that does not exist (e.g. restored from elsewhere) is ignored."""
    uri, hints = three_versions
    h = json.loads(hints[3])
    h["version"] = h["ordinal"] = 17
    _write_hint(uri, json.dumps(h).encode())
    t = lamina.open_table(uri)
    assert t.version == 3
    assert t.append(workers.batch(9, 0, ROWS)).version == 4


def test_hint_of_another_table(three_versions, tmp_path):
    """A hint copied from another table (other uuid) must not be trusted over this table's versions."""
    uri, _ = three_versions
    other = str(tmp_path / "other")
    o = lamina.create_table(other, workers.schema())
    for seq in range(2):  # its hint names version 2, which this table also has
        o.append(workers.batch(7, seq, ROWS))
    with open(os.path.join(other, HINT_PATH), "rb") as f:
        _write_hint(uri, f.read())
    t = lamina.open_table(uri)
    assert t.version == 3
    assert t.uuid == lamina.open_table(uri, version=0).uuid
    assert _rows(t.scan().to_arrow()) == sum((_batch_rows(0, s) for s in range(3)), collections.Counter())
