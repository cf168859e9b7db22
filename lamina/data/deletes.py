"""Reading and writing deletion vectors through FileIO (format: ``lamina.spec.dv``)."""

from __future__ import annotations

import array
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lamina.errors import CorruptMetadata, MissingFile, NotFound
from lamina.io import FileIO
from lamina.spec import dv as dvfmt
from lamina.spec.layout import new_dv_path


@dataclass(frozen=True)
class DV:
    """Where one data file's deletion vector lives."""

    path: str
    offset: int
    length: int
    cardinality: int


class LoadedDV:
    def __init__(self, bitmap: BitMap) -> None:
        self.bitmap = bitmap

    def keep(self, num_rows: int) -> pa.BooleanArray:
        return pa.array(self.keep_mask(num_rows))

    def keep_mask(self, num_rows: int) -> np.ndarray:
        return dvfmt.keep_mask(self.bitmap, num_rows)


_cache: OrderedDict[tuple[str, str, int], BitMap] = OrderedDict()
_lock = threading.Lock()
_CACHE_ENTRIES = 4096


def read_bitmap(io: FileIO, dv: DV) -> BitMap:
    return read_bitmaps(io, [dv])[0]


def read_bitmaps_of(io: FileIO, dvs: Mapping[int, DV | None] | Sequence[DV | None]) -> dict[int, BitMap]:
    """The bitmaps of the DVs there are among ``dvs`` (by index: a list's positions, or a
    mapping's keys), read together like ``read_bitmaps``."""
    items = dvs.items() if isinstance(dvs, Mapping) else enumerate(dvs)
    present = [(k, dv) for k, dv in items if dv is not None]
    return dict(zip((k for k, _ in present), read_bitmaps(io, [dv for _, dv in present])))


def read_bitmaps(io: FileIO, dvs: list[DV]) -> list[BitMap]:
    """The bitmaps of ``dvs``: cached ones from the cache, the others read with one range
    request per DV file (a delete writes the DVs of all the files it touched into one
    file, side by side), not one per DV."""
    out: list[BitMap | None] = [None] * len(dvs)
    missing: dict[str, list[int]] = {}
    with _lock:
        for i, dv in enumerate(dvs):
            hit = _cache.get((io.uri, dv.path, dv.offset))
            if hit is not None:
                _cache.move_to_end((io.uri, dv.path, dv.offset))
                out[i] = hit
            else:
                missing.setdefault(dv.path, []).append(i)
    for path, idx in missing.items():
        for run in _coalesced(sorted(idx, key=lambda i: dvs[i].offset), dvs):
            lo = dvs[run[0]].offset
            hi = max(dvs[i].offset + dvs[i].length for i in run)
            try:
                span = io.get_range(path, lo, hi - lo)
            except NotFound:
                raise MissingFile(f"deletion vector file {path} is missing; run `lamina fsck`") from None
            for i in run:
                start = dvs[i].offset - lo
                out[i] = _decoded(io, dvs[i], span[start : start + dvs[i].length])
    return out  # type: ignore[return-value]


_MAX_GAP = 64 * 1024


def _coalesced(idx: list[int], dvs: list[DV]) -> list[list[int]]:
    """``idx`` (by offset) in runs whose DVs lie at most _MAX_GAP bytes apart: one read each."""
    runs: list[list[int]] = []
    end = 0  # of the current run
    for i in idx:
        if runs and dvs[i].offset - end <= _MAX_GAP:
            runs[-1].append(i)
            end = max(end, dvs[i].offset + dvs[i].length)
        else:
            runs.append([i])
            end = dvs[i].offset + dvs[i].length
    return runs


def _decoded(io: FileIO, dv: DV, blob: bytes) -> BitMap:
    key = (io.uri, dv.path, dv.offset)
    bm = dvfmt.decode(blob, dv.path, dv.offset)
    if len(bm) != dv.cardinality:
        raise CorruptMetadata(
            f"deletion vector {dv.path} at offset {dv.offset} deletes {len(bm)} rows but its entry says "
            f"{dv.cardinality}: the DV file does not belong to this entry; run `lamina fsck`"
        )
    with _lock:
        _cache[key] = bm
        if len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)
    return bm


def dv_of(io: FileIO, dv: DV) -> LoadedDV:
    return LoadedDV(read_bitmap(io, dv))


# A data file's identity in one base: (path, DV path, DV offset); no DV: (path, None, None).
FileKey = tuple[str, str | None, int | None]


def file_key(entry: Mapping[str, Any]) -> FileKey:
    """A data file's identity in one base: the same file with another DV is another set of rows."""
    return (entry["path"], entry["dv_path"], entry["dv_offset"])


def file_keys(entries: pa.Table) -> list[FileKey]:
    """``file_key`` of every entry, column-wise."""
    d = entries.select(["path", "dv_path", "dv_offset"]).to_pydict()
    return list(zip(d["path"], d["dv_path"], d["dv_offset"]))


def file_key_array(entries: pa.Table) -> pa.Array:
    """``file_key`` of every entry as one Arrow string array (for ``is_in`` between versions)."""
    if not entries.num_rows:
        return pa.array([], pa.string())
    dv = pc.binary_join_element_wise(
        pc.fill_null(entries.column("dv_path"), ""),
        pc.cast(pc.fill_null(entries.column("dv_offset"), -1), pa.string()),
        "@",
    )
    key = pc.binary_join_element_wise(entries.column("path"), dv, "#")
    return key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key


def dvs_of_plan(entries: pa.Table) -> list[DV | None]:
    """Per planned file, its DV or None (one column check when no file has one)."""
    n = entries.num_rows
    if "dv_path" not in entries.column_names or entries.column("dv_path").null_count == n:
        return [None] * n
    cols = entries.select(["dv_path", "dv_offset", "dv_length", "dv_cardinality"]).to_pydict()
    return [
        None if p is None else DV(p, o, ln, c)
        for p, o, ln, c in zip(cols["dv_path"], cols["dv_offset"], cols["dv_length"], cols["dv_cardinality"])
    ]


def write_dv_file(io: FileIO, write_id: str, bitmaps: list[BitMap]) -> list[DV]:
    """One DV file holding ``bitmaps``; returns where each one lives."""
    if not bitmaps:
        return []
    data, where = dvfmt.encode(bitmaps)
    path = new_dv_path(write_id)
    io.put_new(path, data)
    return [DV(path, off, ln, len(bm)) for (off, ln), bm in zip(where, bitmaps)]


def bitmap_of(positions: np.ndarray | BitMap) -> BitMap:
    """The bitmap of row positions (non-negative, below 2**32): a new one (a bitmap given is
    copied, so the caller may change what it gets). Built from an ``array.array``: pyroaring
    copies that in one go, whereas a NumPy array it iterates value by value (much slower; a
    delete builds one per file it touches)."""
    if isinstance(positions, BitMap):
        return BitMap(positions)
    return BitMap(array.array("I", np.asarray(positions, dtype=np.uint32).tobytes()))


def positions_array(bm: BitMap, num_rows: int | None = None) -> np.ndarray:
    """The DV's positions (ascending uint32); with ``num_rows``, checked to be rows of a file
    of that many rows (CorruptMetadata otherwise)."""
    return dvfmt.positions(bm) if num_rows is None else dvfmt.positions_within(bm, num_rows)


def strictly_increasing(values: np.ndarray) -> bool:
    """Whether each value is above the one before (so all distinct, in order): one comparison
    pass, what lets a sort, a hash or a take be skipped for data already in order."""
    return bool((values[1:] > values[:-1]).all())


def non_decreasing(values: np.ndarray) -> bool:
    """Whether each value is at least the one before (in order, repeats allowed)."""
    return bool((values[1:] >= values[:-1]).all())


@overload
def unique_sorted(values: np.ndarray, return_index: Literal[False] = False) -> np.ndarray: ...
@overload
def unique_sorted(values: np.ndarray, return_index: Literal[True]) -> tuple[np.ndarray, np.ndarray]: ...
def unique_sorted(values: np.ndarray, return_index: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``np.unique(values)`` (with ``return_index``: the first index of each) by one sort.
    numpy 2's default hash-based unique is much slower on the integer arrays of row
    positions, file numbers and source rows this is used for."""
    if len(values) > 1 and strictly_increasing(values):
        # already strictly increasing (positions made in order, sources sorted by key):
        # unique as they are, for the cost of one comparison pass instead of a sort
        return (values, np.arange(len(values))) if return_index else values
    order: np.ndarray | None
    if non_decreasing(values):
        # in order with repeats (the file numbers of rows read file by file): no sort
        order, s = (np.arange(len(values)) if return_index else None), values
    elif return_index:
        order = np.argsort(values, kind="stable")
        s = values[order]
    else:
        order, s = None, np.sort(values)
    first = np.ones(len(s), dtype=bool)
    np.not_equal(s[1:], s[:-1], out=first[1:])
    if order is None:
        return s[first]
    return s[first], order[first]
