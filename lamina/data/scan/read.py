"""Reading planned data files into Arrow, many at once: runs of files on the read threads,
one dataset scan of local files, deletion vectors applied. The read paths of one file
(plain, exact, evolved schemas, with row lineage) are ``lamina.data.scan.file_read``'s.

``ArrowRead`` is what ``Scan`` reads with (as pyiceberg's ``ArrowScan`` beside its
``DataScan``): it knows one version's schema and the scan's predicate, never the manifests.
DV positions are physical row numbers, so deleted rows are dropped before the row filter.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lamina.data.deletes import DV, dvs_of_plan, positions_array, read_bitmaps
from lamina.data.scan.file_read import _LINEAGE_FIELD, FileRead, _open_local
from lamina.errors import CorruptMetadata, MissingFile
from lamina.spec.lineage import (
    LAST_UPDATED,
    ROW_ID,
    lineages_of,
)

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-read")
# Reading local files is CPU work (decoding): one thread per core; more only contend.
_local_pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="lamina-read-local")
# For a consumer that is busy itself (a rewrite encoding what it reads): one reader thread, so
# the reading and the encoding each have a core (``read_files(single_reader=True)``).
_single_reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lamina-read-one")

_T = TypeVar("_T")

# A file of a run as ``_read_run`` read it: its rows, its entry's (first_row_id, data_version)
# where ``_numbered`` gives its rows their lineage (else None: read with it), its path.
_RunFile = tuple[pa.Table, tuple[int, int] | None, str]


def _runs(sizes: list[int], max_files: int, max_bytes: int) -> list[range]:
    """Consecutive index ranges of at most ``max_files`` files and (unless one file is
    bigger) ``max_bytes`` bytes."""
    runs, start, acc = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= max_files or acc + size > max_bytes):
            runs.append(range(start, i))
            start, acc = i, 0
        acc += size
    if start < len(sizes):
        runs.append(range(start, len(sizes)))
    return runs


def _physical_rows(entries: pa.Table) -> np.ndarray:
    """Rows each data file of ``entries`` holds, deleted ones included: record_count (live
    rows) + dv_cardinality."""
    live = entries.column("record_count").to_numpy(zero_copy_only=False)
    return (live + pc.fill_null(entries.column("dv_cardinality"), 0).to_numpy(zero_copy_only=False)).astype(np.int64)


class ArrowRead(FileRead):
    """The rows of data files of version ``vm``, columns by the table's schema, restricted to
    the rows ``predicate`` (bound to that schema) selects where a row filter is given: one
    file's (``FileRead``), or many files' read together, on the read threads."""

    def read_files(
        self,
        entries: pa.Table,
        cols: list[str],
        filt: pc.Expression | None = None,
        *,
        files_per_task: int = 64,
        bytes_per_task: int = 8 << 20,
        tasks_ahead: int = 8,
        memory_pool: pa.MemoryPool | None = None,
        per_run: bool = False,
        single_reader: bool = False,
        stored_row_ids: bool = False,
    ) -> Iterator[pa.Table | tuple[pa.Table, pa.ChunkedArray | None]]:
        """The live rows of each file of ``entries`` (deleted rows dropped), one table per
        file, in entry order (``per_run``: one table per run of files, see below, in order).

        Each file is one Parquet read: for small files cheaper than a dataset scan, and the
        GIL is released while decoding. Runs of consecutive files
        (up to ``files_per_task`` files or ``bytes_per_task`` of input) are read as one
        task (a task per small file would spend much of its time handing the GIL and
        results around), ``tasks_ahead`` tasks queued ahead of the consumer: local files
        on one thread per core, object stores on the 8 read threads (their reads mostly
        wait). A consumer that writes what it gets overlaps with the reading, and the
        readers keep going while it writes. ``memory_pool``: where whole-file reads
        allocate (default: Arrow's).

        ``single_reader``: local files on one reader thread, for a consumer that keeps a
        core busy itself (compaction encoding its output). A small file's read takes and
        releases the interpreter lock several times; two readers and the encoder then wait
        for the lock and for the two cores, and read no faster than one reader.

        ``stored_row_ids`` (no ``filt``, no ``per_run``, no lineage column in ``cols``): yields
        ``(rows, ids)`` per file, ``ids`` the ``_row_id`` column the file stores (a file that
        rewrote rows: lamina.spec.lineage), every physical row's, or None (an appended file),
        from the same open of the file: a merge learns which of the rows it keeps have stored
        ids without opening each file again (on an object store, getting it again).
        """
        out_schema = self.arrow_schema_of(tuple(cols))
        paths = entries.column("path").to_pylist()
        dvs = dvs_of_plan(entries)
        lineages = lineages_of(entries) if any(c in _LINEAGE_FIELD for c in cols) else [None] * len(paths)
        if per_run:

            def read_run(run: range) -> list[_RunFile]:
                return self._read_run(
                    [paths[i] for i in run], cols, filt, [dvs[i] for i in run], [lineages[i] for i in run], memory_pool
                )

            for files in self._map_run_tasks(
                entries, read_run, files_per_task, bytes_per_task, tasks_ahead, single_reader=single_reader
            ):
                yield self._numbered(files, cols, memory_pool, out_schema)  # on the consumer's thread
            return
        if stored_row_ids:
            assert filt is None and not any(dvs) and not any(c in _LINEAGE_FIELD for c in cols), (
                "stored row ids number physical rows: read with them data columns, every row"
            )
            read_ids = lambda i: self._read_with_stored_row_ids(paths[i], cols, memory_pool)  # noqa: E731
            for results in self.map_runs(
                entries, read_ids, files_per_task, bytes_per_task, tasks_ahead, single_reader=single_reader
            ):
                yield from ((self._conformed(t, cols, out_schema), ids) for t, ids in results)
            return
        read = lambda i: self.read_file(paths[i], cols, filt, dvs[i], memory_pool, lineages[i])  # noqa: E731
        for tables in self.map_runs(
            entries, read, files_per_task, bytes_per_task, tasks_ahead, single_reader=single_reader
        ):
            yield from (self._conformed(t, cols, out_schema) for t in tables)

    def _read_run(
        self,
        paths: list[str],
        cols: list[str],
        filt: pc.Expression | None,
        dvs: list[DV | None],
        lineages: list[tuple[int, int] | None],
        memory_pool: pa.MemoryPool | None,
    ) -> list[_RunFile]:
        """The files of a run read (``read_files``), for ``_numbered`` to make one table of,
        on the consumer's thread: per file (its rows, lineage, path). The row lineage of
        files that store none and have no DV (files written from new rows, the bulk of what
        compaction reads) is left to ``_numbered``, which numbers the whole run at once: here
        such a file is only opened and read whole (its entry's (first_row_id, data_version)
        as its lineage), the reading thread's one job. Other files are read as ``read_file``
        reads them (lineage None)."""
        data_cols = [c for c in cols if c not in _LINEAGE_FIELD]
        quick = len(data_cols) < len(cols) and filt is None and not self._evolved  # lineage asked for, no row filter
        io = self.io
        files: list[_RunFile] = []
        for path, dv, lineage in zip(paths, dvs, lineages):
            if not (quick and dv is None and lineage is not None):
                files.append((self.read_file(path, cols, filt, dv, memory_pool, lineage), None, path))
                continue
            with self.file_errors(path):
                local = io.local_path(path)
                with _open_local(local) if local is not None else pa.BufferReader(io.get(path)) as source:
                    reader = pq.ParquetReader(memory_pool)
                    reader.open(source, pre_buffer=False)
                    if reader.metadata.num_columns == len(data_cols):  # (the whole file: data columns only, likely)
                        files.append((reader.read_all(use_threads=False), lineage, path))
                        continue
                    source.seek(0)  # (one footer read again, from the open file)
                    t = self._read_with_lineage(source, cols, None, None, memory_pool, lineage)
            files.append((t, None, path))
        return files

    def _numbered(
        self,
        files: list[_RunFile],
        cols: list[str],
        memory_pool: pa.MemoryPool | None,
        out_schema: pa.Schema,
    ) -> pa.Table:
        """The tables ``_read_run`` read, concatenated into ``out_schema``. Those with a lineage
        hold a whole file that stores only the data columns, as read: checked to be the data
        columns, under their names and in order (else the file is read again as ``read_file``
        reads it), and their rows get ``_row_id`` (first_row_id + position) and
        ``_last_updated_version`` (data_version) here, for all of them in one pass."""
        if not files:
            return out_schema.empty_table()
        data_cols = [c for c in cols if c not in _LINEAGE_FIELD]
        data_schema = self.arrow_schema_of(tuple(data_cols))
        tables, numbered = [], []
        for t, lineage, path in files:
            if lineage is not None and not t.schema.equals(data_schema):  # (one C++ comparison: the common case)
                if t.column_names == data_cols:
                    t = t.cast(data_schema)
                else:  # the file holds other columns than the data columns
                    t, lineage = self.read_file(path, cols, None, None, memory_pool, lineage), None
            if lineage is None and not t.schema.equals(out_schema):
                t = t.select(cols).cast(out_schema)
            tables.append(t)
            numbered.append(lineage)
        counts = np.fromiter((t.num_rows for t in tables), np.int64, len(tables))
        firsts = np.fromiter((0 if n is None else n[0] for n in numbered), np.int64, len(tables))
        versions = np.fromiter((0 if n is None else n[1] for n in numbered), np.int64, len(tables))
        starts = np.cumsum(counts) - counts
        ids = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(firsts - starts, counts)
        last = np.repeat(versions, counts)
        if all(n is not None for n in numbered):
            made = {ROW_ID: pa.array(ids), LAST_UPDATED: pa.array(last)}
            data = pa.concat_tables(tables)
            return pa.Table.from_arrays([made[c] if c in made else data.column(c) for c in cols], schema=out_schema)
        parts = []
        for t, n, start, count in zip(tables, numbered, starts, counts):
            if n is not None:
                made = {
                    ROW_ID: pa.array(ids[start : start + count]),
                    LAST_UPDATED: pa.array(last[start : start + count]),
                }
                t = pa.Table.from_arrays([made[c] if c in made else t.column(c) for c in cols], schema=out_schema)
            parts.append(t)
        return pa.concat_tables(parts)

    def map_runs(
        self,
        entries: pa.Table,
        fn: Callable[[int], _T],
        files_per_task: int,
        bytes_per_task: int,
        tasks_ahead: int,
        single_reader: bool = False,
    ) -> Iterator[list[_T]]:
        """``fn(i)`` for every file ``i`` of ``entries``, run by run (see ``read_files``) on
        the read threads, ``tasks_ahead`` runs queued ahead; each run's results, in order."""
        return self._map_run_tasks(
            entries, lambda r: [fn(i) for i in r], files_per_task, bytes_per_task, tasks_ahead, single_reader
        )

    def _map_run_tasks(
        self,
        entries: pa.Table,
        fn: Callable[[range], _T],
        files_per_task: int,
        bytes_per_task: int,
        tasks_ahead: int,
        single_reader: bool = False,
    ) -> Iterator[_T]:
        """``fn(run)`` once per run of ``entries``' files (a range of file indices: see
        ``read_files``) on the read threads, ``tasks_ahead`` runs queued ahead; the results, in order."""
        runs = _runs(entries.column("size").to_pylist(), files_per_task, bytes_per_task)
        pool = (_single_reader if single_reader else _local_pool) if self.io.is_local else _pool
        pending: deque[Future[_T]] = deque()
        for run in runs:
            if len(pending) >= tasks_ahead:
                yield pending.popleft().result()
            pending.append(pool.submit(fn, run))
        while pending:
            yield pending.popleft().result()

    def read_entries(self, entries: pa.Table, cols: list[str], filt: pc.Expression | None) -> pa.Table:
        """The live rows of the files ``entries`` describe. Files with a deletion vector:
        their deleted rows dropped, then the filter; files without: on local disk one
        threaded dataset scan, filter pushed down, on object stores file by file in
        parallel."""
        out_schema = self.arrow_schema_of(tuple(cols))
        if not entries.num_rows:
            return out_schema.empty_table()
        if not cols:
            # A read of no column still has rows (what a count reads), but pyarrow's cast and
            # concatenation of tables without columns drop their row count: count the rows
            # (the entries' live rows, or those a read of the predicate's columns keeps),
            # then make a table of that many rows and no column.
            rows = (
                int(pc.sum(entries.column("record_count")).as_py() or 0)
                if filt is None
                else self.read_entries(entries, self.with_predicate_columns([]), filt).num_rows
            )
            return pa.table({"rows": pa.nulls(rows)}).select([])
        if any(c in _LINEAGE_FIELD for c in cols):
            # Row ids number a file's physical rows: file by file, before deletes and filter
            # (numbered per run where files store none).
            return pa.concat_tables(list(self.read_files(entries, cols, filt, files_per_task=16, per_run=True)))
        io = self.io
        dvs = dvs_of_plan(entries)
        paths = entries.column("path").to_pylist()
        with_dv = [i for i, d in enumerate(dvs) if d is not None]
        dv_list = [d for d in dvs if d is not None]  # (with_dv's, in its order)
        parts = []
        if with_dv:
            # Deletes first (DV positions are row numbers in the file), then the filter, on
            # all the files at once (one filter plan instead of one per file).
            dv_entries = entries.take(pa.array(with_dv))
            read_bitmaps(io, dv_list)  # into the cache: one range read per DV file
            if io.is_local and not self._evolved:  # local files read by name: one dataset scan
                parts.append(self._scan_local_with_dvs(dv_entries, dv_list, cols, filt).cast(out_schema))
            else:
                # file by file on the read threads, each file's deleted rows dropped in the
                # thread that read it
                live = pa.concat_tables(list(self.read_files(dv_entries, self._needed(cols, filt), files_per_task=16)))
                parts.append((live.filter(filt) if filt is not None else live).select(cols).cast(out_schema))
        if len(with_dv) < len(paths):
            plain = paths if not with_dv else [p for p, d in zip(paths, dvs) if d is None]
            if io.is_local and self._evolved and not self.schema.initial_defaults:
                parts.append(self._scan_local_evolved(plain, cols, filt))
            elif self._evolved:
                plain_entries = entries if not with_dv else entries.filter(pc.is_null(entries.column("dv_path")))
                parts += list(self.read_files(plain_entries, cols, filt, files_per_task=16))
            elif io.is_local:
                import pyarrow.dataset as ds  # (lazily: it imports pandas, which a read without it never needs)

                with self._missing_file_is_corrupt():
                    dataset = ds.dataset([io.local_path(p) for p in plain], schema=self.schema.arrow, format="parquet")
                    parts.append(
                        self._parquet_scan(lambda c, f: dataset.to_table(columns=c, filter=f), cols, filt).cast(
                            out_schema
                        )
                    )
            else:
                tables = list(_pool.map(lambda p: self.read_file(p, cols, filt), plain))
                parts += [t.select(cols).cast(out_schema) for t in tables]
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _scan_local_evolved(self, paths: list[str], cols: list[str], filt: pc.Expression | None) -> pa.Table:
        """Local files of an evolved table without deletes or defaults: one threaded dataset
        scan by physical names, relabelled, then the row filter."""
        import pyarrow.dataset as ds

        schema = self.schema
        need = self._needed(cols, filt)
        with self._missing_file_is_corrupt():
            dataset = ds.dataset([self.io.local_path(p) for p in paths], schema=schema.physical_arrow, format="parquet")
            t = dataset.to_table(columns=[schema.physical_names[c] for c in need], filter=self._physical_pushdown)
        t = schema.to_logical(t, need)
        return (t.filter(filt) if filt is not None else t).select(cols)

    def _scan_local_with_dvs(
        self, entries: pa.Table, dvs: list[DV], cols: list[str], filt: pc.Expression | None
    ) -> pa.Table:
        """The live rows of local files that carry deletion vectors, that the row filter
        ``filt`` (if any) keeps, columns ``cols``: one threaded dataset scan of every row, as a
        read without deletes (its threads decode several files, and a large file's row groups,
        at once, and evaluate ``filt`` into a column), each batch cut as it arrives to the
        rows no DV deletes and ``filt`` keeps. The DVs make one mask over every row of the
        files (the manifest puts each file's first row at record_count + dv_cardinality of
        the files before it): a byte a row, little beside the rows, and sliced per batch far
        cheaper than a mask made per batch from its file's DV. Reading and masking file by
        file instead loses the dataset scan's parallel decoding.

        Batch by batch rather than the whole table after the scan: each batch is freed once
        cut, so its memory serves the next, and the read touches about as much fresh memory
        as one without deletes, which in a fresh process is much of a read's cost.

        Every batch names its file (the scan yields them in fragment order): it must be the
        next file of ``entries`` with rows, and each file's rows what its entry says, else
        CorruptMetadata, never a mask applied to the wrong rows."""
        import pyarrow.dataset as ds

        io = self.io
        physical = _physical_rows(entries)
        starts = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(physical)])
        keep = np.ones(int(starts[-1]), dtype=bool)
        for start, n, bm in zip(starts, physical, read_bitmaps(io, dvs)):
            keep[positions_array(bm, int(n)).astype(np.int64) + start] = False
        mask = pa.array(keep)
        need = self._needed(cols, filt)
        projection = {c: ds.field(c) for c in need}
        kept = "__lamina_kept"
        while kept in projection:
            kept += "_"
        # A predicate that can fail on a row (an overflow) is evaluated on live rows only: a
        # deleted row must not fail the read.
        after = filt if filt is not None and self.may_fail else None
        if filt is not None and after is None:
            projection[kept] = filt
        paths = [io.local_path(p) for p in entries.column("path").to_pylist()]
        parts: list[pa.RecordBatch] = []
        file, seen, at = 0, 0, 0  # the file being read, its rows seen, all rows seen
        with self._missing_file_is_corrupt():
            dataset = ds.dataset(paths, schema=self.schema.arrow, format="parquet")
            for tagged in dataset.scanner(columns=projection).scan_batches():
                batch = tagged.record_batch
                n = batch.num_rows
                if not n:
                    continue
                while file < len(paths) and seen == physical[file]:
                    file, seen = file + 1, 0
                if file == len(paths) or tagged.fragment.path != paths[file] or seen + n > physical[file]:
                    raise self._rows_differ(at + n, physical)
                cut = mask.slice(at, n)
                if filt is not None and after is None:
                    cut = pc.and_(cut, pc.fill_null(batch.column(kept), False))
                parts.append(
                    batch.filter(cut).filter(after).select(cols)
                    if after is not None
                    else batch.select(cols).filter(cut)
                )
                seen, at = seen + n, at + n
        if at != starts[-1]:
            raise self._rows_differ(at, physical)
        return pa.Table.from_batches(parts, schema=self.arrow_schema_of(tuple(cols)))

    def _rows_differ(self, rows: int, physical: np.ndarray) -> CorruptMetadata:
        return CorruptMetadata(
            f"the data files of version {self.vm.version} hold {rows} rows where their entries say {int(physical.sum())} "
            f"(record_count + dv_cardinality, file by file); run `lamina fsck`"
        )

    @contextmanager
    def _missing_file_is_corrupt(self) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError as e:
            raise MissingFile(f"a data file of version {self.vm.version} is missing ({e}); run `lamina fsck`") from None
