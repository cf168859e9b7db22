"""Tags under concurrency: a tagger racing a writer that expires every version but the newest
after each append (no reader grace), and a process making branches under the same names.

A tag of the latest version skips its confirmations when that version is still the newest
after the tag lands (docs/format.md, "Tags"). These races are what that shortcut must not
let through: every acknowledged tag reads back exactly the rows of its version, however soon
expiry came for it, and no name ends up both a tag and a branch.
"""

from __future__ import annotations

import collections

import pytest

import lamina
from lamina.commit import flush_hints
from lamina.maintenance import fsck

from support import workers

procs = pytest.mark.xdist_group("procs")
ROWS = 3


def _rows(tbl) -> collections.Counter:
    return collections.Counter(zip(tbl.column("writer").to_pylist(), tbl.column("seq").to_pylist(), tbl.column("i").to_pylist()))


@procs
def test_tags_racing_an_expiring_writer_and_a_brancher_keep_their_versions(tmp_path):
    uri = str(tmp_path / "t")
    lamina.create_table(uri, workers.schema())
    done = str(tmp_path / "writer-done")
    specs = [
        {"mode": "race_expiring_writer", "uri": uri, "writer": 1, "n": 25, "rows": ROWS, "done": done},
        {"mode": "race_names", "uri": uri, "kind": "tag", "prefix": "n", "n": 300, "until": [done]},
        # (few branches: the first is the race that matters, each makes every expiry longer)
        {"mode": "race_names", "uri": uri, "kind": "branch", "prefix": "n", "n": 8, "until": [done]},
    ]
    writer, tagger, brancher = workers.spawn_workers(specs, str(tmp_path), timeout=300)
    flush_hints()
    t = lamina.open_table(uri)

    # What each version holds: the appends acknowledged at or before it.
    version_of = {seq: v for seq, v in writer["acked"]}
    assert sorted(version_of.values()) == sorted(set(version_of.values())), "a version was claimed twice"
    assert tagger["acked"], "no tag was made while the writer ran"

    tags = {x.name: x.tagged_version for x in t.tags.list()}
    branches = {b.name for b in t.branches.list()}
    assert not set(tags) & branches, "a name is both a tag and a branch"
    assert dict(tagger["acked"]).keys() <= tags.keys() and {n for n, _ in brancher["acked"]} <= branches
    assert not set(tags) & {n for n, _ in tagger["refused"]}, "a refused tag was left behind"
    for name, v in tagger["acked"]:
        assert tags[name] == v
        want = collections.Counter((1, seq, i) for seq, sv in version_of.items() if sv <= v for i in range(ROWS))
        assert _rows(t.scan(version=name).to_arrow()) == want, f"tag {name} (version {v}) does not read back"
    report = fsck(t)
    assert report.ok and not report.missing, (report.missing, report.errors)
