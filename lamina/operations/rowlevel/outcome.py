"""What a row-level change does to each data file it reads (``FileOutcome``), and the columns
its per-file functions see.

A change evaluates many files' live rows at once (rows carry their file's index, ``FILE``,
and their physical position in it, ``POS``); ``split_outcome`` turns that batch outcome into
one per file, which ``RowDelta`` caches by the file's identity so a retry reuses it. Apart
from the operation because delete, update and merge each make outcomes and share these
helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lamina.data.deletes import DV, non_decreasing
from lamina.spec.lineage import ROW_ID

POS = "__lamina_pos"  # physical row position within its data file
FILE = "__lamina_file"  # which of the files read together a row comes from


@dataclass
class FileOutcome:
    """What a row-level change does to one data file (as it is in one base)."""

    # physical positions newly deleted (sorted, unique), or their bitmap (an engine's change:
    # PositionDelta; a bitmap stays as small as the deletion vector it becomes)
    delete: np.ndarray | BitMap
    new_rows: pa.Table | None = None  # rows written in their place (update / merge)
    matched_source: np.ndarray | None = None  # merge: source row indices matched in this file
    # merge that writes its source's rows (RowDelta.whole_source), on a table with row lineage: the
    # matched target rows' ids, in matched_source's order (the rows written in their place keep them)
    matched_ids: np.ndarray | None = None
    # batch form (many files evaluated at once): the file of each delete / matched source row;
    # new_rows then carry a FILE column
    delete_file: np.ndarray | None = None
    matched_file: np.ndarray | None = None
    # filled lazily, reused by retries on the same base entry:
    remainder_entries: pa.Table | None = None  # copy-on-write
    dv: DV | None = None


# (live rows of many files, with POS and FILE columns) -> one FileOutcome in batch form
FileFn = Callable[[pa.Table], FileOutcome]


def _file_order(files: np.ndarray, n: int) -> tuple[np.ndarray | None, np.ndarray]:
    """(row indices ordered by file, stable; where each file 0..n-1 starts in them, and the end).
    Rows already in file order (read file by file, matched in the files' order) are not
    sorted: their order is None, the rows as they are."""
    if non_decreasing(files):
        return None, np.searchsorted(files, np.arange(n + 1))
    order = np.argsort(files, kind="stable")
    return order, np.searchsorted(files[order], np.arange(n + 1))


def _by_file(files: np.ndarray, n: int) -> list[np.ndarray | slice]:
    """Row indices per file 0..n-1 (stable): slices where the rows are in file order (an index
    into a NumPy array by a slice is a view, by an array of indices a copy)."""
    order, bounds = _file_order(files, n)
    if order is None:
        return [slice(int(bounds[k]), int(bounds[k + 1])) for k in range(n)]
    return [order[bounds[k] : bounds[k + 1]] for k in range(n)]


def split_outcome(o: FileOutcome, n: int) -> list[FileOutcome]:
    """A batch outcome over files 0..n-1 as one outcome per file."""
    empty = np.zeros(0, dtype=np.int64)
    deletes: list[np.ndarray | BitMap]
    if o.delete_file is not None and len(o.delete):
        assert isinstance(o.delete, np.ndarray)  # (a batch deletes positions: a bitmap is an engine's, one file's)
        positions = o.delete
        deletes = [positions[ix] for ix in _by_file(o.delete_file, n)]
    else:
        deletes = [empty] * n
    news: list[pa.Table | None]
    if o.new_rows is not None and o.new_rows.num_rows:
        files = o.new_rows.column(FILE).to_numpy()
        rows = o.new_rows.drop_columns([FILE])
        order, bounds = _file_order(files, n)
        if order is not None:  # (rows made file by file, one clause's, are in order: slices, no copy)
            rows = rows.take(pa.array(order))  # one take, then a slice per file
        news = [rows.slice(bounds[k], bounds[k + 1] - bounds[k]) for k in range(n)]
    else:
        news = [None] * n
    ids: list[np.ndarray | None] = [None] * n
    mats: list[np.ndarray | None]
    if o.matched_source is not None and len(o.matched_source):
        assert o.matched_file is not None  # (a batch's matched source rows come with their files)
        matched = o.matched_source
        by_file = _by_file(o.matched_file, n)
        mats = [matched[ix] for ix in by_file]
        if o.matched_ids is not None:
            matched_ids = o.matched_ids
            ids = [matched_ids[ix] for ix in by_file]
    else:
        mats = [empty if o.matched_source is not None else None] * n
    return [
        FileOutcome(d if len(d) else empty, new if new is not None and new.num_rows else None, mat, matched_ids=i)
        for d, new, mat, i in zip(deletes, news, mats, ids)
    ]


def _keep_row_ids(new_rows: pa.Table, old_rows: pa.Table) -> pa.Table:
    """Rows written in place of ``old_rows`` (an update), with their row ids when the table
    keeps lineage; their ``_last_updated_version`` is left null: the version that writes them."""
    if ROW_ID not in old_rows.column_names:
        return new_rows
    return new_rows.append_column(ROW_ID, old_rows.column(ROW_ID))
