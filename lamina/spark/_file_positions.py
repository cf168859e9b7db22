"""The rows a Spark job selects, brought to the driver as one deletion bitmap per data file.

A delete, update or merge finds its rows in Spark: each selected row is (``__lamina_file``,
``__lamina_row``), its data file as Spark reports it and its position there, and for a merge
the clause that took it. Collecting those rows would put a row per match on the driver: 5
million matches are 5 million strings. Instead each task folds its rows into a roaring bitmap
per file it saw (pyroaring, in the Python worker, ``_fold``) and returns one row per file:
the bitmap of every position it saw, the bitmap of those a clause took, how many positions it
saw twice, and how many rows each clause took. The driver ORs the bitmaps of a file from all
tasks (``collect_positions``): its memory grows with the files touched and the bitmaps' size
(a few bits per row at worst, far less for runs), not with a row per match.

A position seen twice (a target row matched by two source rows) is found where it is seen:
within a task by the bitmap's cardinality, across tasks (a skewed join split by Spark's
adaptive execution) by intersecting their bitmaps on the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lamina.data.deletes import bitmap_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_SCHEMA = "file string, hits binary, taken binary, rows long, duplicates long, counts array<long>"


@dataclass
class FilePositions:
    """The positions a job selected, per data file (by the path Spark reports)."""

    taken: dict[str, BitMap] = field(default_factory=dict)  # positions a clause took (all, without clauses)
    counts: np.ndarray = field(
        default_factory=lambda: np.zeros(1, np.int64)
    )  # rows per clause code + 1 (0: none; no codes: zeros)
    rows: int = 0  # rows selected (each position once per time it was selected)
    duplicates: int = 0  # positions selected more than once
    collected: int = 0  # rows the driver received: one per (task, file)


def _fold(coded: bool, n_codes: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What each task runs: its (file, row[, code]) batches into one row per file."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        hits: dict[str, BitMap] = {}
        taken: dict[str, BitMap] = {}
        dups: dict[str, int] = {}
        n_rows: dict[str, int] = {}
        counts: dict[str, np.ndarray] = {}
        for b in batches:
            if not b.num_rows:
                continue
            files = pc.dictionary_encode(b.column(0))
            idx = files.indices.to_numpy(zero_copy_only=False)
            rows = b.column(1).to_numpy(zero_copy_only=False)
            codes = pc.fill_null(b.column(2), -1).to_numpy(zero_copy_only=False) if coded else None
            order = np.argsort(idx, kind="stable")
            bounds = np.searchsorted(idx[order], np.arange(len(files.dictionary) + 1))
            for k, name in enumerate(files.dictionary.to_pylist()):
                sel = order[bounds[k] : bounds[k + 1]]
                pos = rows[sel]
                new = bitmap_of(pos)
                seen = hits.get(name)
                repeated = len(pos) - len(new) + (seen.intersection_cardinality(new) if seen is not None else 0)
                dups[name] = dups.get(name, 0) + repeated
                n_rows[name] = n_rows.get(name, 0) + len(pos)
                if seen is None:
                    hits[name] = new
                else:
                    seen |= new
                if codes is not None:  # coded
                    c = codes[sel]
                    counts[name] = counts.get(name, 0) + np.bincount(c + 1, minlength=n_codes + 1)
                    t = bitmap_of(pos[c >= 0])
                    if name in taken:
                        taken[name] |= t
                    else:
                        taken[name] = t
        names = list(hits)
        if not names:
            return
        yield pa.RecordBatch.from_pydict(
            {
                "file": names,
                "hits": [hits[n].serialize() for n in names],
                "taken": [taken[n].serialize() if coded else b"" for n in names],  # without codes: the hits
                "rows": [n_rows[n] for n in names],
                "duplicates": [dups[n] for n in names],
                "counts": [counts[n].tolist() if coded else [] for n in names],
            },
            schema=pa.schema(
                [
                    ("file", pa.string()),
                    ("hits", pa.binary()),
                    ("taken", pa.binary()),
                    ("rows", pa.int64()),
                    ("duplicates", pa.int64()),
                    ("counts", pa.list_(pa.int64())),
                ]
            ),
        )

    return run


def collect_positions(
    df: DataFrame, file_col: str, row_col: str, code_col: str | None = None, n_codes: int = 0
) -> FilePositions:
    """The positions of ``df``'s rows (``file_col``: the file as Spark reports it, ``row_col``:
    the position in it; ``code_col``: the clause code 0..n_codes-1 that took the row, null:
    none) per file, folded on the executors (see the module docstring)."""
    from pyspark.sql import functions as F

    cols = [F.col(file_col), F.col(row_col), *([F.col(code_col).cast("long")] if code_col else [])]
    parts = df.select(*cols).mapInArrow(_fold(code_col is not None, n_codes), _SCHEMA).toArrow()
    out = FilePositions(counts=np.zeros(n_codes + 1, np.int64), collected=parts.num_rows)
    hits: dict[str, BitMap] = {}
    columns = (parts.column(n).to_pylist() for n in ("file", "hits", "taken", "rows", "duplicates", "counts"))
    for name, h, t, rows, dups, counts in zip(*columns):
        bm = BitMap.deserialize(h)
        seen = hits.get(name)
        out.duplicates += dups + (seen.intersection_cardinality(bm) if seen is not None else 0)
        out.rows += rows
        if seen is None:
            hits[name] = bm
        else:
            seen |= bm
        took = BitMap.deserialize(t) if code_col else bm
        if name in out.taken:
            out.taken[name] = out.taken[name] | took
        else:
            out.taken[name] = BitMap(took)
        if code_col:
            out.counts += np.asarray(counts, np.int64)
    return out
