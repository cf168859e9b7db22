"""The pure key-join functions of a merge (lamina.operations.rowlevel.keys), on arrays alone:
``join_key`` makes Arrow's hash join match as SQL's ``=`` does on floats (one zero, one NaN,
nulls never), and ``key_range`` selects exactly the target keys a source's bounds can match.
The oracle is Python's comparison of the values; the merges built on them are checked against
DuckDB in test_merge_keys.py and test_rowlevel_nan.py."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lamina.errors import SchemaMismatch
from lamina.expr import to_arrow_filter
from lamina.operations.rowlevel.keys import join_key, key_range

# Floats with the values the join must treat alike: both zeros, NaNs (Arrow's 0/0 has other bits
# than Python's nan: see arrow_nans), nulls.
FLOATS = st.one_of(st.sampled_from([0.0, -0.0, 1.5, -2.0, float("inf"), None]), st.floats(allow_nan=True, width=64))


def sql_equal(a: float | None, b: float | None) -> bool:
    """The merge's key equality: SQL's =, except that NaN equals NaN (Spark's and Delta's rule);
    a null equals nothing."""
    if a is None or b is None:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b


def arrow_nans(n: int) -> pa.Array:
    """NaNs as Arrow computes them (0/0), a bit pattern other than Python's float('nan')."""
    return pc.divide(pa.array([0.0] * n), pa.array([0.0] * n))


@settings(max_examples=60, deadline=None)
@given(left=st.lists(FLOATS, max_size=12), right=st.lists(FLOATS, max_size=12), arrow_nan=st.booleans(),
       typ=st.sampled_from([pa.float64(), pa.float32()]))
@example(left=[0.0, None], right=[-0.0, None], arrow_nan=False, typ=pa.float64())
@example(left=[float("nan"), 2.0], right=[2.0, float("nan")], arrow_nan=True, typ=pa.float32())
def test_join_key_makes_the_hash_join_match_as_sql_equality(left, right, arrow_nan, typ):
    """Joined on ``join_key``, two sides pair exactly the rows whose keys are equal (NaN to
    every NaN whatever its bits, -0.0 to 0.0), and no null pairs with anything."""
    lt = pa.array(left, pa.float64())
    if arrow_nan and left:  # the left side's NaNs from Arrow's arithmetic, the right's from Python
        is_nan = pc.fill_null(pc.is_nan(lt), False)
        lt = pc.if_else(is_nan, arrow_nans(len(left)), lt)
    lk, rk = join_key(lt, typ, "left"), join_key(pa.array(right, pa.float64()), typ, "right")
    joined = pa.table({"k": lk, "l": pa.array(range(len(left)), pa.int64())}).join(
        pa.table({"k": rk, "r": pa.array(range(len(right)), pa.int64())}), keys="k", join_type="inner")
    got = sorted(zip(joined.column("l").to_pylist(), joined.column("r").to_pylist()))
    as_typ = [v.as_py() for v in lk], [v.as_py() for v in rk]  # (float32: the values as the join sees them)
    want = sorted((i, j) for i, a in enumerate(as_typ[0]) for j, b in enumerate(as_typ[1]) if sql_equal(a, b))
    assert got == want


def test_join_key_leaves_other_types_as_they_are_and_refuses_what_does_not_cast():
    keys = pa.array([3, None, -1], pa.int32())
    assert join_key(keys, pa.int32(), "k") is keys
    assert join_key(keys, pa.int64(), "k").type == pa.int64()
    with pytest.raises(SchemaMismatch, match="cannot be compared as int64"):
        join_key(pa.array(["x"]), pa.int64(), "the source's key 'id'")


@settings(max_examples=60, deadline=None)
@given(source=st.lists(FLOATS, min_size=1, max_size=8), target=st.lists(FLOATS, max_size=20))
@example(source=[float("nan")], target=[float("nan"), 1.0, None])
@example(source=[-1.0, float("nan"), 3.0], target=[float("nan"), -1.0, 0.0, 3.0, 4.0, -0.0, float("inf")])
def test_key_range_selects_every_target_key_a_source_key_can_match(source, target):
    """The pruning predicate of ``key_range`` (bounds of the non-NaN source keys, NaN where a
    source key is NaN) keeps every target key equal to a source key; and it keeps no key
    outside the bounds, other than NaN when the source has one."""
    real = [v for v in source if v is not None and not math.isnan(v)]
    has_nan = any(v is not None and math.isnan(v) for v in source)
    lo, hi = (min(real), max(real)) if real else (None, None)
    if lo is None and not has_nan:
        return  # (no key can match: the merge reads no file, never asking for a range)
    expr = key_range("k", lo, hi, has_nan)
    rows = pa.table({"k": pa.array(target, pa.float64())})
    kept = rows.filter(to_arrow_filter(expr)).column("k").to_pylist()
    for t in target:
        if any(sql_equal(t, s) for s in source):
            assert any(sql_equal(t, k) for k in kept), t
    for k in kept:
        assert (lo is not None and lo <= k <= hi) or (has_nan and math.isnan(k)), k
