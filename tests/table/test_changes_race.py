"""Row lineage and the change feed under racing writers in separate processes.

Two appenders (one compacting its own files every few appends, and the whole table at the
end) and two updaters of rows in the same files (one with deletion vectors, one copying files
on write) commit at once, each rebasing onto what won. Afterwards every
row id is unique, every acknowledged append's rows are there with ids no other row has, every
acknowledged update kept its row's id and stamped the row with its version, each version's
changes are exactly what its writer did, and the whole history's changes replay to the final
state.
"""

from __future__ import annotations

import collections

import pytest

import lamina

from support import workers

RID, LU = "_row_id", "_last_updated_version"
COLS = ["writer", "seq", "i", "k"]
BASE_WRITER = 100
BASE_ROWS = 20  # per base file
APPENDERS, APPENDS, ROWS = 2, 9, 5  # appender 0 compacts its files after every third append
UPDATES = 8  # per updater


def feed(t: lamina.Table, a: int, b: int | None = None) -> list[dict]:
    return t.changes(a, b, columns=[*COLS, RID, LU]).to_arrow().to_pylist()


@pytest.mark.xdist_group("procs")
def test_racing_appends_updates_and_compactions_keep_lineage(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    for f in range(2):  # two base files, both updaters hit both
        t.append(workers.batch(BASE_WRITER, 0, BASE_ROWS, k_base=f * BASE_ROWS))
    base_v = t.version
    base = {r["k"]: r for r in t.scan(columns=[*COLS, RID, LU]).to_arrow().to_pylist()}
    # updater 0 takes even keys, updater 1 odd ones, alternating between the two files
    keys = [[(2 * s + u) % BASE_ROWS + (s % 2) * BASE_ROWS for s in range(UPDATES)] for u in range(2)]
    assert len({k for ks in keys for k in ks}) == 2 * UPDATES
    specs = [{"mode": "race_append_compact", "uri": uri, "writer": 0, "n": APPENDS, "rows": ROWS, "every": 3},
             {"mode": "race_append", "uri": uri, "writer": 1, "n": APPENDS, "rows": ROWS}]
    specs += [{"mode": "race_update", "uri": uri, "delete_mode": m,
               "steps": [[f"writer = {BASE_WRITER} AND k = {k}", 1000 + k] for k in keys[u]]}
              for u, m in enumerate(["merge-on-read", "copy-on-write"])]
    results = workers.spawn_workers(specs, str(tmp_path), timeout=300)

    appended = {v: (w, seq) for w in range(APPENDERS) for seq, v in results[w]["acked"]}
    updated = {v: keys[u][step] for u in range(2) for step, v in results[APPENDERS + u]["acked"]}
    compacted = {v for v in results[0]["compacted"] if v is not None}
    assert len(compacted) >= APPENDS // 3  # appender 0's own files, at least
    assert len(appended) == APPENDERS * APPENDS and len(updated) == 2 * UPDATES
    t = lamina.open_table(uri)
    assert set(appended) | set(updated) | compacted == set(range(base_v + 1, t.version + 1))

    final = t.scan(columns=[*COLS, RID, LU]).to_arrow().to_pylist()
    ids = [r[RID] for r in final]
    assert len(set(ids)) == len(ids), "a row id is held by two rows"
    assert max(ids) < t.metadata.next_row_id
    # every acknowledged append, once, with ids no base row had
    rows = collections.Counter((r["writer"], r["seq"], r["i"]) for r in final if r["writer"] != BASE_WRITER)
    assert rows == collections.Counter((w, seq, i) for w, seq in appended.values() for i in range(ROWS))
    assert not {r[RID] for r in final if r["writer"] != BASE_WRITER} & {r[RID] for r in base.values()}
    # every base row keeps its id; an updated one carries its update and that version
    version_of_update = {k: v for v, k in updated.items()}
    got_base = {r["k"]: r for r in final if r["writer"] == BASE_WRITER}
    assert sorted(got_base) == sorted(base)
    for k, r in got_base.items():
        assert r[RID] == base[k][RID], f"row k={k} changed id"
        if k in version_of_update:
            assert (r["seq"], r[LU]) == (1000 + k, version_of_update[k]), f"row k={k}"
        else:
            assert (r["seq"], r[LU]) == (0, base[k][LU]), f"row k={k} changed though no one updated it"

    # each version's changes are its writer's, exactly
    for v in range(base_v + 1, t.version + 1):
        got = sorted((r["_change_type"], r["writer"], r["seq"], r["i"] if v in appended else r["k"], r[RID])
                     for r in feed(t, v - 1, v))
        if v in appended:
            w, seq = appended[v]
            assert [g[:4] for g in got] == [("insert", w, seq, i) for i in range(ROWS)], f"append version {v}"
        elif v in updated:
            k = updated[v]
            assert got == [("update_postimage", BASE_WRITER, 1000 + k, k, base[k][RID]),
                           ("update_preimage", BASE_WRITER, 0, k, base[k][RID])], f"update version {v}"
        else:
            assert got == [], f"compaction version {v}"

    # the whole history replays to the final state
    state: dict[int, tuple] = {}
    for r in sorted(feed(t, 0), key=lambda r: (r["_commit_version"], r["_change_type"] in ("insert", "update_postimage"))):
        image = tuple(r[c] for c in [*COLS, LU])
        if r["_change_type"] in ("delete", "update_preimage"):
            assert state.pop(r[RID]) == image
        else:
            assert r[RID] not in state
            state[r[RID]] = image
    assert state == {r[RID]: tuple(r[c] for c in [*COLS, LU]) for r in final}
