"""Concurrent writers in separate processes on one local-disk table.

Every commit is a put-if-absent of its version file, so racing writers must
each get a distinct version, and no acknowledged write may be lost or applied
twice, whatever the interleaving.
"""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest

import lamina
from lamina.maintenance import fsck

from support import workers

procs = pytest.mark.xdist_group("procs")

WRITERS = 8
APPENDS = 50
ROWS = 5


def _rows(t: pa.Table) -> collections.Counter:
    d = t.select(["writer", "seq", "i"]).to_pydict()
    return collections.Counter(zip(d["writer"], d["seq"], d["i"]))


def test_sequential_appends_all_visible(tmp_path):
    """Minimal single-process check the race test relies on: every append stays visible."""
    t = lamina.create_table(str(tmp_path / "t"), workers.schema())
    for seq in range(3):
        assert t.append(workers.batch(0, seq, 2)).version == seq + 1
    got = _rows(lamina.open_table(str(tmp_path / "t")).scan().to_arrow())
    assert got == collections.Counter((0, s, i) for s in range(3) for i in range(2))


@procs
def test_parallel_appends_lose_nothing(tmp_path):
    uri = str(tmp_path / "t")
    lamina.create_table(uri, workers.schema())
    specs = [
        {"mode": "race_append", "uri": uri, "writer": w, "n": APPENDS, "rows": ROWS} for w in range(WRITERS)
    ]
    results = workers.spawn_workers(specs, str(tmp_path))

    # Which version each acknowledged append says it landed as.
    version_of: dict[tuple[int, int], int] = {}
    for w, r in enumerate(results):
        assert [s for s, _ in r["acked"]] == list(range(APPENDS)), f"writer {w} did not ack every append"
        for seq, v in r["acked"]:
            version_of[(w, seq)] = v
        vs = [v for _, v in r["acked"]]
        assert vs == sorted(vs), f"writer {w} got versions out of order: {vs}"
    versions = list(version_of.values())
    assert len(versions) == len(set(versions)), "a version was claimed by two appends"
    assert set(versions) == set(range(1, WRITERS * APPENDS + 1))
    append_at = {v: key for key, v in version_of.items()}

    t = lamina.open_table(uri)
    final = WRITERS * APPENDS
    assert t.version == final
    assert t.log.list_versions() == list(range(final + 1))

    # Latest: every acknowledged append exactly once, nothing else.
    rows = _rows(t.scan().to_arrow())
    assert sum(rows.values()) == WRITERS * APPENDS * ROWS
    expected = collections.Counter((w, s, i) for (w, s) in version_of for i in range(ROWS))
    dup = {k: c for k, c in rows.items() if c > 1}
    assert not dup, f"rows present more than once: {list(dup.items())[:10]}"
    assert rows == expected, f"lost: {list((expected - rows).items())[:10]} extra: {list((rows - expected).items())[:10]}"
    assert t.metadata.summary["total-records"] == WRITERS * APPENDS * ROWS

    # Every version loads, chains to its parent, and carries a distinct commit id.
    commit_ids, last_ts = set(), -1
    for v in range(final + 1):
        vm = t.log.load(v)
        assert vm.version == v
        assert vm.parent_version == (v - 1 if v else None)
        assert vm.timestamp_ms > last_ts
        last_ts = vm.timestamp_ms
        commit_ids.add(vm.commit_id)
        assert vm.summary["total-records"] == v * ROWS
        if v:
            assert vm.operation == "append"
            assert vm.summary["added-records"] == ROWS
    assert len(commit_ids) == final + 1

    # A sample of versions reads exactly the appends acknowledged at or below it.
    for v in sorted({0, 1, 2, 3, 7, final // 3, final // 2, final - 1, final} | set(range(25, final, 50))):
        got = _rows(t.scan(version=v).to_arrow())
        want = collections.Counter((*append_at[u], i) for u in range(1, v + 1) for i in range(ROWS))
        assert got == want, f"version {v} reads the wrong rows"
        assert sum(got.values()) == t.log.load(v).summary["total-records"]

    hist = t.history()
    assert [h["version"] for h in hist] == list(range(final, -1, -1))

    report = fsck(t)
    assert report.ok, (report.missing, report.errors)
    assert not report.missing
    # Losing attempts leave manifests behind; every data file was committed.
    assert not [p for p in report.unreferenced if not p.startswith("_lamina/manifests/")], report.unreferenced


@procs
def test_overwrite_where_races_appends(tmp_path):
    """An overwrite of ``k >= 1000`` racing appends never loses appended rows outside that range.

    The appender's batches have 4 rows outside the range and 1 inside, so the
    overwrite must also rewrite the appender's files (keeping the outside rows).
    Serializable outcome at every version: inside rows are the last overwrite's
    rows plus the inside rows of appends committed after it.
    """
    uri = str(tmp_path / "t")
    where = "k >= 1000"
    lamina.create_table(uri, workers.schema())
    n_app, n_ow, rows = 40, 15, 5
    specs = [
        {"mode": "race_append", "uri": uri, "writer": 1, "n": n_app, "rows": rows,
         "outside_step": 10, "k_in_base": 1000, "read_back": True},
        {"mode": "race_overwrite", "uri": uri, "writer": 99, "n": n_ow, "rows": 3,
         "k_in_base": 100_000, "where": where},
    ]
    app, ow = workers.spawn_workers(specs, str(tmp_path))
    app_v = {v: seq for seq, v in app["acked"]}
    ow_v = {v: seq for seq, v in ow["acked"]}
    assert len(app_v) == n_app and len(ow_v) == n_ow
    assert not set(app_v) & set(ow_v), "a version was claimed twice"
    final = n_app + n_ow
    assert set(app_v) | set(ow_v) == set(range(1, final + 1))

    t = lamina.open_table(uri)
    assert t.version == final
    def expected_at(v: int) -> collections.Counter:
        want: collections.Counter = collections.Counter()
        last_ow = max((u for u in ow_v if u <= v), default=0)
        for u, seq in app_v.items():
            if u > v:
                continue
            for i in range(rows - 1):  # outside the range: must survive every overwrite
                want[(1, seq, i)] += 1
            if u > last_ow:  # inside the range: only if appended after the last overwrite
                want[(1, seq, rows - 1)] += 1
        if last_ow:
            want.update((99, ow_v[last_ow], i) for i in range(3))
        return want

    for v in range(final + 1):
        data = t.scan(version=v).to_arrow()
        got = _rows(data)
        assert got == expected_at(v), (
            f"version {v} ({t.log.load(v).operation}): lost {list((expected_at(v) - got).items())[:10]}, "
            f"extra {list((got - expected_at(v)).items())[:10]}"
        )
        assert data.num_rows == t.log.load(v).summary["total-records"]
    outside = t.scan(where="k < 1000").to_arrow()
    assert _rows(outside) == collections.Counter((1, s, i) for s in range(n_app) for i in range(rows - 1))

    report = fsck(t)
    assert report.ok and not report.missing, (report.missing, report.errors)
