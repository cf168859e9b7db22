"""The compaction planner (``plan_groups``, vectorized for tables of 100,000s of small
files) against a model: per partition, the candidate files by size, first-fit by cumulative
size, a group kept when it has several files or one carrying deletes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.operations.compaction import plan_groups

TARGET, MIN_SIZE = 100, 75


def model(sizes: list[int], parts: list[str | None], dvs: list[bool]) -> list[list[int]]:
    groups = []
    cand = [i for i in range(len(sizes)) if sizes[i] < MIN_SIZE or dvs[i]]
    for p in sorted({parts[i] or "" for i in cand}):
        files = sorted((i for i in cand if (parts[i] or "") == p), key=lambda i: (sizes[i], i))
        bins: dict[int, list[int]] = {}
        total = 0
        for i in files:
            total += sizes[i]
            bins.setdefault((total - 1) // TARGET, []).append(i)
        groups += [g for _, g in sorted(bins.items()) if len(g) > 1 or any(dvs[i] for i in g)]
    return groups


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 120), st.sampled_from(["a", "b", "c=1/d=x", None]), st.booleans()), max_size=40))
def test_plan_groups_is_the_model(files):
    sizes, parts, dvs = [f[0] for f in files], [f[1] for f in files], [f[2] and f[0] % 3 == 0 for f in files]
    entries = pa.table({
        "size": pa.array(sizes, pa.int64()), "partition_path": pa.array(parts, pa.string()),
        "dv_path": pa.array([f"dv{i}" if d else None for i, d in enumerate(dvs)], pa.string()),
    })
    got = [g.tolist() for g in plan_groups(entries, TARGET, MIN_SIZE)]
    assert got == model(sizes, parts, dvs)


def test_plan_groups_of_many_files():
    rng = np.random.default_rng(7)
    n = 5000
    sizes = rng.integers(1, 120, n).tolist()
    parts = [f"p{k}" for k in rng.integers(0, 30, n)]
    dvs = (rng.random(n) < 0.01).tolist()
    entries = pa.table({"size": pa.array(sizes, pa.int64()), "partition_path": parts,
                        "dv_path": pa.array([f"dv{i}" if d else None for i, d in enumerate(dvs)], pa.string())})
    assert [g.tolist() for g in plan_groups(entries, TARGET, MIN_SIZE)] == model(sizes, parts, dvs)
