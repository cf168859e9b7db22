"""A merge's source: its rows at hand, or still being read while its keys are matched.

``lamina.spark.merge`` hands a merge a source staged as Parquet files whose key columns are
read first and whose other columns are read on ``_source_pool`` behind them (``SourceRead``,
``OnDemand``); a merge that takes its new rows from its source matches on the keys alone, so
the two overlap. Kept apart from the operation (``rowlevel.delta``) because it is what an
engine builds, and the only thing here that runs reads of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

import pyarrow as pa

from lamina.data.copy import StagedFiles

# Reads a merge source's other columns while its keys are matched (pyarrow decodes on its own threads).
_source_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lamina-source-read")


class OnDemand:
    """A computation started on ``_source_pool`` the first time its future is asked for (by any thread), once."""

    def __init__(self, fn: Callable[[], pa.Table]) -> None:
        self._fn, self._lock = fn, threading.Lock()
        self._future: Future[pa.Table] | None = None

    def __call__(self) -> Future[pa.Table]:
        with self._lock:
            if self._future is None:
                self._future = _source_pool.submit(self._fn)
            return self._future


@dataclass(frozen=True)
class SourceRead:
    """A merge source still being read: its columns (``schema``) and its key columns
    (``keys``, every row) at hand, the whole of it from ``rows`` (a future of a table of
    ``schema``'s columns, the same rows in the same order, or an ``OnDemand`` read of them
    started when first needed: ``start``), then passed through ``then``.
    A merge that takes its new rows from its source (``MergeBuilder._whole_source``) needs
    only the keys to match, so matching overlaps the read of the other columns (what
    ``lamina.spark.merge`` does with a source staged as Parquet files); any other merge
    waits for the rows. A failed read fails the merge: nothing is committed.

    ``staged``: the Parquet files whose rows these are, in memory: where they are what the
    table stores, they become its data files as they are (``lamina.data.copy``) and the rows
    are never read."""

    schema: pa.Schema
    keys: pa.Table
    rows: Future[pa.Table] | OnDemand
    then: Callable[[pa.Table], pa.Table] | None = None
    staged: StagedFiles | None = None

    @property
    def num_rows(self) -> int:
        return self.keys.num_rows

    def start(self) -> Future[pa.Table]:
        """The read of the rows, started if it was not."""
        return self.rows if isinstance(self.rows, Future) else self.rows()

    def table(self) -> pa.Table:
        rows = self.start().result()
        return rows if self.then is None else self.then(rows)

    def map(self, fn: Callable[[pa.Table], pa.Table]) -> SourceRead:
        """This source with ``fn`` applied to its rows once read (``schema`` and ``keys`` as they are)."""
        first = self.then
        return replace(self, then=fn if first is None else (lambda t: fn(first(t))))


def rows_of(source: pa.Table | SourceRead) -> pa.Table:
    """A source's rows: the table, or the read's once done."""
    return source.table() if isinstance(source, SourceRead) else source
