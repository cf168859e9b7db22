"""Merge keys: how a target's keys are joined to a source's, as pure functions of key arrays.

``join_key`` puts both sides' keys in the form Arrow's hash join matches as SQL's ``=`` does;
``key_membership`` and ``unique_key_index`` find, without a join, which target keys may match
and the one source row each matches when the source's keys are unique; ``key_range`` is the
predicate that prunes the target's files by the source keys' bounds. No I/O and no table: each
is tested on arrays alone (tests/operations/test_merge_keys.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.data.deletes import strictly_increasing, unique_sorted
from lamina.errors import SchemaMismatch
from lamina.expr import Expr, col, or_

KEY = "__lamina_key"  # merge: the join key columns, KEY0, KEY1, ... (see join_key)


def join_key(keys: pa.Array | pa.ChunkedArray, typ: pa.DataType, what: str) -> pa.Array | pa.ChunkedArray:
    """Merge keys as ``typ`` (the type both sides are joined as), in the form in which
    Arrow's hash join matches them as SQL's = does (docs/format.md, Deletion vectors and
    row-level changes): the join hashes and compares bits, so -0.0 would miss 0.0 and a NaN
    would miss NaNs of other bit patterns (Arrow's 0/0 is 0xfff8..., NumPy's nan 0x7ff8...).
    Floats therefore become one zero and one NaN; nulls stay null, and never match."""
    try:
        keys = keys if keys.type.equals(typ) else pc.cast(keys, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SchemaMismatch(f"merge: {what} cannot be compared as {typ} ({e}); cast it to the table's type") from None
    if not pa.types.is_floating(typ):
        return keys
    zero, nan = pa.scalar(0, typ), pa.scalar(float("nan"), typ)
    return pc.if_else(pc.is_nan(keys), nan, pc.if_else(pc.equal(keys, zero), zero, keys))


# A membership test by lookup table covers the source keys' range with one byte per key: up
# to LOOKUP_TABLE_BYTES, or LOOKUP_BYTES_PER_KEY per source key if more.
LOOKUP_TABLE_BYTES = 1 << 24
LOOKUP_BYTES_PER_KEY = 16


def key_membership(
    values: pa.Array | pa.ChunkedArray,
    positions: bool = False,
) -> Callable[[pa.Array | pa.ChunkedArray], np.ndarray]:
    """A test of which keys may be among ``values`` (a superset; nulls are in no set), as a NumPy
    mask, or with ``positions`` as the positions of those keys (ascending).

    Integer keys (up to 64 bits signed, 32 unsigned) use a lookup table over the range of
    ``values`` when it is small enough (dense keys: ids), else a binary search in the
    sorted values; other types Arrow's hash-based ``is_in``. The first two cost less than
    ``is_in``, which hashes every key, when many keys are tested against the values."""

    def wanted(mask: np.ndarray) -> np.ndarray:
        return np.flatnonzero(mask) if positions else mask

    values = values.drop_null()
    typ = values.type
    if not (pa.types.is_signed_integer(typ) or (pa.types.is_unsigned_integer(typ) and typ.bit_width <= 32)):
        return lambda keys: wanted(pc.is_in(keys, value_set=values, skip_nulls=True).to_numpy(zero_copy_only=False))
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    v = values.to_numpy().astype(np.int64)
    if not len(v):
        return lambda keys: wanted(np.zeros(len(keys), dtype=bool))
    lo, hi = int(v.min()), int(v.max())
    span = hi - lo + 1
    ordered = unique_sorted(v)  # also what _members_of_increasing looks up
    if span <= max(LOOKUP_TABLE_BYTES, LOOKUP_BYTES_PER_KEY * len(v)):
        # Made on the first file whose keys do not increase: files of increasing keys (the
        # common case) are looked up by _members_of_increasing, and a table over the range of
        # ids spread thinly is many fresh pages the first merge of a process would fault in for
        # nothing.
        tables: list[np.ndarray] = []

        def test(k: np.ndarray) -> np.ndarray:
            if not tables:
                table = np.zeros(span + 1, dtype=bool)  # table[span]: every key outside [lo, hi]
                table[ordered - lo] = True
                tables.append(table)
            # k - lo as unsigned: keys below lo wrap to huge offsets, and all past the end of
            # the range look up table[span]. (Keys some 2**63 apart from lo may wrap into the
            # range: a superset of the members, which the join then sorts out.)
            off = np.subtract(k, lo, dtype=np.int64, casting="unsafe").view(np.uint64)
            return tables[0][np.minimum(off, span, out=off)]
    else:
        # Sparse keys (random ids, hashes): a binary search per key misses the cache at every
        # step of a large source. A bit table over a multiplicative hash of the source keys
        # rules out most keys by one lookup in a table small enough to stay in cache; only
        # the few it keeps are searched.
        bits = min(HASH_TABLE_MAX_BITS, max(10, int(np.ceil(np.log2(len(ordered) * HASH_SLOTS_PER_KEY)))))
        shift = np.uint64(64 - bits)
        hashed = np.zeros(1 << bits, dtype=bool)
        hashed[_hash_slots(ordered, shift)] = True

        def test(k: np.ndarray) -> np.ndarray:
            cand = np.flatnonzero(hashed[_hash_slots(k, shift)])
            kc = k[cand]
            hit = cand[ordered[np.minimum(np.searchsorted(ordered, kc), len(ordered) - 1)] == kc]
            if positions:
                return hit
            out = np.zeros(len(k), dtype=bool)
            out[hit] = True
            return out

    def member(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        valid = None
        if keys.null_count:
            valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
            keys = pc.fill_null(keys, lo)
        k = keys.to_numpy().astype(np.int64, copy=False)
        at = _members_of_increasing(k, ordered)
        if at is None:
            out = test(k)
            if out.dtype != np.bool_:  # (positions already: the hashed test)
                return out if valid is None else out[valid[out]]
            return wanted(out if valid is None else out & valid)
        if valid is not None:
            at = at[valid[at]]
        if positions:
            return at
        out = np.zeros(len(k), dtype=bool)
        out[at] = True
        return out

    return member


# The hashed membership test's table: a slot per HASH_SLOTS_PER_KEY-th of a source key (about
# one key in that many passes it by chance and is searched), at most 2**HASH_TABLE_MAX_BITS slots.
HASH_SLOTS_PER_KEY = 16
HASH_TABLE_MAX_BITS = 26
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads keys that differ in any bits


def _hash_slots(keys: np.ndarray, shift: np.uint64) -> np.ndarray:
    """The slot of each int64 key in a table of ``2 ** (64 - shift)`` slots (its hash's top bits)."""
    return (keys.view(np.uint64) * _GOLDEN) >> shift


def _members_of_increasing(keys: np.ndarray, ordered: np.ndarray) -> np.ndarray | None:
    """The positions (ascending) of those of ``keys`` that are in ``ordered`` (sorted, unique),
    exactly, when ``keys`` strictly increase (a file of a table sorted or appended by its key:
    the common case for ids) and outnumber the values in their range several times: each
    value in the range is looked up in the keys (a binary search), so the cost is one pass to
    check the order, not a lookup per key. None otherwise (the caller tests key by key)."""
    n = len(keys)
    if n < 64:
        return None
    a, b = np.searchsorted(ordered, [keys[0], keys[-1]], side="left")
    b = b + (b < len(ordered) and ordered[b] == keys[-1])
    sub = ordered[a:b]
    # Consecutive keys (ids): a value's position is its offset from the first key, however
    # many values fall in the range (a change of most of a file's rows: a merge of the newest
    # ids). Otherwise a binary search per value, worth it only for few values.
    consecutive = int(keys[-1]) - int(keys[0]) == n - 1
    if (not consecutive and 8 * len(sub) > n) or not strictly_increasing(keys):
        return None
    at = sub - keys[0] if consecutive else np.searchsorted(keys, sub)
    return at[keys[np.minimum(at, n - 1)] == sub]


def _consecutive(rows: np.ndarray | pa.Array | pa.ChunkedArray) -> int | None:
    """The first of ``rows`` when they are consecutive row numbers (``first, first + 1, ...``),
    else None. A source sorted by key, merged into files laid out by key, matches its rows in
    their own order: the matched rows are then a slice of the source, no take (a copy of every
    column) needed."""
    if not isinstance(rows, np.ndarray) or len(rows) < 2:
        return None
    first = int(rows[0])
    if int(rows[-1]) - first != len(rows) - 1 or not strictly_increasing(rows):
        return None
    return first  # strictly increasing from first to first + n - 1: exactly those


def unique_key_index(values: pa.Array | pa.ChunkedArray) -> Callable[[pa.Array | pa.ChunkedArray], np.ndarray] | None:
    """For integer keys ``values`` (the source's) of which no two non-null ones are equal: a
    function giving, for each of some keys, the index in ``values`` of the equal one, or -1
    (none; a null key matches nothing). None for other types, or if two keys are equal.
    One sort of the source keys (cheaper than a hash table of them, which is built for the
    uniqueness count and again for each lookup), then a binary search."""
    typ = values.type
    if not (pa.types.is_signed_integer(typ) or (pa.types.is_unsigned_integer(typ) and typ.bit_width <= 32)):
        return None
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    rows = np.arange(len(values), dtype=np.int64)
    if values.null_count:
        rows = rows[pc.is_valid(values).to_numpy(zero_copy_only=False)]
        values = values.drop_null()
    v = values.to_numpy().astype(np.int64)
    # (no sort for keys already in order, a source sorted by key: see unique_sorted)
    s, first = unique_sorted(v, return_index=True)
    if len(s) != len(v):
        return None  # two equal keys
    rows = rows[first]

    def index(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        if not len(s):
            return np.full(len(keys), -1, dtype=np.int64)
        valid = None
        if keys.null_count:
            valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
            keys = pc.fill_null(keys, 0)
        k = keys.to_numpy().astype(np.int64, copy=False)
        run = _run_of(s, k) if valid is None else None
        if run is not None:
            return rows[run : run + len(k)]  # (a view: the caller only reads it)
        i = np.minimum(np.searchsorted(s, k), len(s) - 1)
        hit = s[i] == k
        if valid is not None:
            hit &= valid
        return np.where(hit, rows[i], -1)

    return index


def _run_of(ordered: np.ndarray, keys: np.ndarray) -> int | None:
    """Where ``keys`` stand in ``ordered`` (sorted, unique) as one run, ``ordered[i:i + len(keys)]``,
    else None. A file's rows that a sorted source matches, in a table laid out by key, are
    such a run: found by one comparison, not a binary search per key."""
    n = len(keys)
    if n < 2:
        return None
    i = int(np.searchsorted(ordered, keys[0]))
    if i + n > len(ordered) or ordered[i + n - 1] != keys[-1] or not np.array_equal(ordered[i : i + n], keys):
        return None
    return i


def key_range(name: str, lo: Any, hi: Any, has_nan: bool) -> Expr:
    """The target rows that source keys of column ``name`` may match, for pruning: keys in
    [lo, hi] (the bounds of the non-NaN source keys; None if there are none), and NaN keys
    if a source key is NaN (NaN matches NaN only, while an ordering would put it above
    ``hi`` and widen the range to everything above ``lo``)."""
    terms = [] if lo is None else [(col(name) >= lo) & (col(name) <= hi)]
    if has_nan:
        terms.append(col(name) == float("nan"))
    return or_(*terms)
