"""Block lists and commit-named roots: what expiry learns of the versions it does not read.

Every version carries the short commit ids and flags of the versions before it in its block
of COMMIT_BLOCK (``block_commits``), and a commit's root manifest is named by its short id and
version. Expiry names each expired slot's first occupant, and finds what it must free, from
those alone, so they must say exactly what the versions themselves say. Checked here against
the versions as they are read back (the oracle: each version's own commit id, summary and
root), over random histories of the operations that change what the flags record.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.spec.slot import (
    COMMIT_BLOCK, IRREGULAR, REMOVED, WROTE_LEAVES, block_flags, commit_root_path, is_commit_root_path,
    parse_block_entry, short_id,
)

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.string())])
# tiny leaves and inline limits: spills and leaf merges happen within a few commits
TREE = {"manifest.inline-max-files": "2", "manifest.leaf-target-files": "3", "manifest.merge-min-leaves": "2"}


def batch(ids: list[int], grp: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "grp": [grp] * len(ids)}, schema=SCHEMA)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("delete")),
        st.tuples(st.just("overwrite")),
        st.tuples(st.just("rollback"), st.integers(0, 1000)),
        st.tuples(st.just("schema")),
        st.tuples(st.just("compact")),
    ),
    min_size=COMMIT_BLOCK - 4,
    max_size=COMMIT_BLOCK + 12,
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=steps)
def test_every_version_names_the_versions_before_it_in_its_block(tmp_path_factory, history):
    t = lamina.create_table(str(tmp_path_factory.mktemp("blk") / "t"), SCHEMA, properties=TREE)
    next_id = 0
    for step in history:
        kind = step[0]
        if kind == "append":
            t.append(batch(list(range(next_id, next_id + step[1]))))
            next_id += step[1]
        elif kind == "delete" and next_id:
            t.delete(f"id = {next_id - 1}")
        elif kind == "overwrite":
            t.overwrite(batch([next_id], "b"), where="grp = 'b'")
            next_id += 1
        elif kind == "rollback":
            t.rollback(step[1] % (t.version + 1))
        elif kind == "schema":
            t.update_schema().add_column(f"c{t.version}", pa.int64()).commit()
        elif kind == "compact":
            t.maintenance.compact()
    vms = [t.log.load(v) for v in range(t.version + 1)]
    for vm in vms:
        start = vm.version - vm.version % COMMIT_BLOCK
        assert vm.block_commits is not None and len(vm.block_commits) == vm.version - start, vm.version
        for u, entry in zip(range(start, vm.version), vm.block_commits):
            sid, flags = parse_block_entry(entry, "test")
            before = vms[u]
            assert sid == short_id(before.commit_id) and flags == block_flags(before), (vm.version, u)
        # what the flags stand for, read off the version itself
        flags = block_flags(vm)
        summary = vm.summary
        if vm.version:
            assert bool(flags & REMOVED) == bool(summary["removed-files"] or summary["removed-records"])
            assert bool(flags & WROTE_LEAVES) == bool(summary["leaves-written"])
        if vm.operation == "rollback" and summary.get("readded-files"):
            assert flags & IRREGULAR
        # a root this commit wrote is named by it; one it carried is its parent's, by that name
        if vm.root_manifest is not None:
            assert is_commit_root_path(vm.root_manifest)
            parent = vms[vm.version - 1] if vm.version else None
            # (a root the version manifest carries has the name too, as ``.root.inline``)
            own = commit_root_path(vm.commit_id, vm.version, True).rsplit(".root", 1)[0]
            named = vm.root_manifest.rsplit(".root", 1)[0] == own
            assert named or (parent is not None and vm.root_manifest == parent.root_manifest)
            assert named or not flags & WROTE_LEAVES
