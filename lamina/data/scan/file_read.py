"""Reading one data file into Arrow (``FileRead``): plain, exact, evolved schemas, with row
lineage, with the row ids a file stores; deleted rows dropped before the row filter, since
DV positions are physical row numbers. The reads of many files at once build on these
(``lamina.data.scan.read``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from types import TracebackType
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs
import pyarrow.parquet as pq

from lamina.data.deletes import DV, dv_of
from lamina.errors import CorruptMetadata, MissingFile, NotFound
from lamina.expr import (
    AlwaysTrue,
    Expr,
    evaluation_error,
    is_evaluation_failure,
    predicate_may_fail,
    pushdown_filter,
    referenced_columns,
    to_arrow_filter,
    to_sql,
)
from lamina.io import FileIO
from lamina.spec.lineage import (
    LAST_UPDATED,
    LINEAGE_COLUMNS,
    LINEAGE_FIELDS,
    ROW_ID,
    no_row_ids,
    row_lineage,
)
from lamina.spec.version import VersionManifest

_LINEAGE_FIELD = {f.name: f for f in LINEAGE_FIELDS}

# A data file as a read takes it: its local path, or the file open (a local file, or the
# bytes an object store returned).
Source: TypeAlias = "str | pa.NativeFile"

# The loops that read thousands of small local files (compaction, deletes by dictionary) open
# them through the file system object: pa.OSFile first asks Python's os.path.isdir (a stat
# per file, which such a loop would pay thousands of times). Errors are the same
# (FileNotFoundError for a missing file).
_open_local = pyarrow.fs.LocalFileSystem().open_input_file


class _FileErrors:
    """``FileRead.file_errors``: a class rather than a generator-based context manager, whose
    set-up per file adds up where compaction reads thousands."""

    __slots__ = ("read", "path")

    def __init__(self, read: FileRead, path: str) -> None:
        self.read, self.path = read, path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            return
        if issubclass(kind, (NotFound, FileNotFoundError)):
            raise MissingFile(
                f"data file {self.path} of version {self.read.vm.version} is missing; run `lamina fsck {self.read.io.uri}`"
            ) from None
        if isinstance(e, pa.ArrowInvalid):  # (e: an instance of kind)
            self.read.raise_if_evaluation_error(e)
            raise CorruptMetadata(f"data file {self.path} is unreadable: {e}") from None


class FileRead:
    """The rows of one data file of version ``vm`` at a time, columns by the table's schema,
    restricted to the rows ``predicate`` (bound to that schema) selects where a row filter is
    given."""

    def __init__(self, io: FileIO, vm: VersionManifest, predicate: Expr) -> None:
        self.io = io
        self.vm = vm
        self.schema = vm.schema
        self.predicate = predicate
        self._schemas: dict[tuple[str, ...], pa.Schema] = {}
        # An evolved schema's columns are mapped from the files (physical names, defaults,
        # see lamina.spec.schema), not read by name as they are.
        self._evolved = self.schema.is_evolved

    @cached_property
    def may_fail(self) -> bool:
        """Whether the predicate can fail on a row (see ``lamina.expr.compile.raises``)."""
        return predicate_may_fail(self.predicate)

    def raise_if_evaluation_error(self, e: Exception) -> None:
        """EvaluationError from ``e`` when it is the predicate failing on a row (an overflow, a
        division by zero: Spark's ANSI errors)."""
        if self.may_fail and is_evaluation_failure(e):
            raise evaluation_error(e, to_sql(self.predicate)) from None

    @cached_property
    def row_filter(self) -> pc.Expression | None:
        """The predicate as an Arrow filter over rows; None when it selects every row."""
        return None if isinstance(self.predicate, AlwaysTrue) else to_arrow_filter(self.predicate)

    @cached_property
    def _pushdown(self) -> pc.Expression | None:
        """The filter a Parquet scan may be given instead of the row filter; None: the row
        filter itself (asked when reading, not when planning)."""
        return pushdown_filter(self.predicate)

    @cached_property
    def _physical_pushdown(self) -> pc.Expression | None:
        """For an evolved schema: the filter a Parquet scan may be given, on physical names
        (a superset of the matching rows: the row filter follows); None when a column the
        predicate uses reads a default where a file lacks it (the scan would see nulls)."""
        if isinstance(self.predicate, AlwaysTrue):
            return None
        if any(c in self.schema.initial_defaults for c in referenced_columns(self.predicate)):
            return None
        names = self.schema.physical_names
        pushdown = pushdown_filter(self.predicate, names)
        return pushdown if pushdown is not None else to_arrow_filter(self.predicate, names)

    def _read_evolved(
        self,
        source: Source,
        columns: list[str],
        filt: pc.Expression | None,
        dv: DV | None,
        memory_pool: pa.MemoryPool | None,
    ) -> pa.Table:
        """Rows of one data file of an evolved table: its columns selected by physical name
        (missing ones null, narrower ones cast up), relabelled, defaults filled where the file
        lacks a column, then deleted rows and the row filter."""
        need = self._needed(columns, filt)
        schema = self.schema
        pushdown = self._physical_pushdown if filt is not None and dv is None else None
        if isinstance(source, str):
            with pa.OSFile(source) as f:
                return self._read_evolved(f, columns, filt, dv, memory_pool)
        t = pq.read_table(
            source,
            columns=[schema.physical_names[c] for c in need],
            schema=schema.physical_arrow,
            filters=pushdown,
            use_threads=False,
            memory_map=False,
        )
        t = self._fill_defaults(source, schema.to_logical(t, need))
        if dv is not None:
            t = t.filter(dv_of(self.io, dv).keep(t.num_rows))
        return (t.filter(filt) if filt is not None else t).select(columns)

    def _fill_defaults(self, source: pa.NativeFile, t: pa.Table) -> pa.Table:
        """``t`` with the columns that have an initial default and that the file lacks set to it."""
        defaults = {c: d for c, d in self.schema.initial_defaults.items() if c in t.column_names}
        if not defaults:
            return t
        source.seek(0)
        in_file = set(pq.read_schema(source).names)
        for name, value in defaults.items():
            if self.schema.physical_names[name] not in in_file:
                i = t.schema.get_field_index(name)
                t = t.set_column(i, t.schema.field(i), pa.repeat(value, t.num_rows))
        return t

    def _needed(self, columns: list[str], filt: pc.Expression | None) -> list[str]:
        """The columns to read for ``columns``: with the predicate's too when ``filt`` is applied."""
        return self.with_predicate_columns(columns) if filt is not None else columns

    def with_predicate_columns(self, columns: Sequence[str]) -> list[str]:
        """``columns`` and, after them, those the scan's predicate uses."""
        return list(dict.fromkeys([*columns, *referenced_columns(self.predicate)]))

    def _parquet_scan(
        self,
        read: Callable[[list[str], pc.Expression | None], pa.Table],
        columns: list[str],
        filt: pc.Expression | None,
    ) -> pa.Table:
        """The rows of ``read(columns, filter)``, a Parquet scan, that the row filter ``filt``
        keeps. The scan gets ``filt`` itself unless row-group statistics could mislead it
        (NaN, see ``lamina.expr.pushdown_filter``); then a safe part, and ``filt`` after."""
        if filt is None or self._pushdown is None:
            return read(columns, filt)
        return read(self.with_predicate_columns(columns), self._pushdown).filter(filt).select(columns)

    def arrow_schema_of(self, columns: tuple[str, ...]) -> pa.Schema:
        """The Arrow schema of ``columns`` of the table schema, or row lineage columns
        (memoized: asked once per file read)."""
        if columns not in self._schemas:
            self._schemas[columns] = pa.schema(
                [_LINEAGE_FIELD[c] if c in _LINEAGE_FIELD else self.schema.field(c) for c in columns]
            )
        return self._schemas[columns]

    def _read_plain(self, source: Source, columns: list[str], memory_pool: pa.MemoryPool | None = None) -> pa.Table:
        """All rows of ``columns``: one Parquet read, cheaper per file than read_table's
        dataset machinery; files lacking a column go the general way."""
        if isinstance(source, str):
            # An open file rather than a path: skips pyarrow's filesystem resolution (a
            # noticeable part of reading a small file).
            with pa.OSFile(source) as f:
                return self._read_plain(f, columns, memory_pool)
        # pq.ParquetReader (what ParquetFile wraps; pyarrow is pinned) rather than
        # ParquetFile: the wrapper's Python set-up (nested column paths) holds the GIL for
        # much of a small file's read, and reads on several threads then queue for it.
        # No pre-buffering: for a small file that only hands the I/O to pyarrow's I/O
        # threads and back.
        reader = pq.ParquetReader(memory_pool)
        reader.open(source, pre_buffer=False)
        if reader.metadata.num_columns == len(columns):
            # Likely the whole file, in the table's column order (any file this table
            # wrote): read it all and check, rather than ask for its schema first.
            t = reader.read_all(use_threads=False)
            if t.column_names == columns:
                want = self.arrow_schema_of(tuple(columns))
                return t if t.schema.equals(want) else t.cast(want)
        file_schema = reader.schema_arrow
        names = file_schema.names
        if names == columns:
            t = reader.read_all(use_threads=False)
        elif all(c in names for c in columns) and not any(pa.types.is_nested(f.type) for f in file_schema):
            # a subset of flat columns: leaf column i is field i
            t = reader.read_all(column_indices=[names.index(c) for c in columns], use_threads=False).select(columns)
        elif all(c in names for c in columns):
            # a subset: ParquetFile maps names to (nested) leaf columns
            t = pq.ParquetFile(source, pre_buffer=False).read(columns=columns, use_threads=False).select(columns)
        else:
            return pq.read_table(source, columns=columns, schema=self.schema.arrow, use_threads=False)
        want = self.arrow_schema_of(tuple(columns))
        return t if t.schema.equals(want) else t.cast(want)

    def _read_exact(
        self, source: pa.NativeFile, columns: list[str], memory_pool: pa.MemoryPool | None
    ) -> tuple[pa.Table | None, int]:
        """The rows of a file that holds exactly ``columns`` (flat, under their names, in that
        order: what this table writes from new rows), as _read_plain reads them, and its row
        count; (None, 0) for any other file (evolved tables, stored lineage, other columns),
        after reading no more than its footer."""
        if not columns or self._evolved:
            return None, 0
        reader = pq.ParquetReader(memory_pool)
        reader.open(source, pre_buffer=False)
        if reader.metadata.num_columns != len(columns):
            return None, 0
        t = reader.read_all(use_threads=False)
        want = self.arrow_schema_of(tuple(columns))
        # One C++ comparison of names, order and types settles the common case (compaction
        # reads thousands of such files: Python work per file adds up).
        if not t.schema.equals(want):
            if t.column_names != columns:
                return None, 0
            t = t.cast(want)
        return t, t.num_rows

    def _read_with_lineage(
        self,
        source: Source,
        columns: list[str],
        filt: pc.Expression | None,
        dv: DV | None,
        memory_pool: pa.MemoryPool | None,
        lineage: tuple[int, int],
    ) -> pa.Table:
        """Rows of one data file with their ``_row_id`` and ``_last_updated_version``: every
        physical row numbered (lamina.spec.lineage), then deleted rows and the row filter."""
        if isinstance(source, str):
            with pa.OSFile(source) as f:
                return self._read_with_lineage(f, columns, filt, dv, memory_pool, lineage)
        data_cols = [c for c in self._needed(columns, filt) if c not in _LINEAGE_FIELD]
        t, n = self._read_exact(source, data_cols, memory_pool)
        if t is not None:  # the file holds data_cols and no lineage: every id from its entry
            ids, versions = row_lineage(lineage[0], lineage[1], n, None)
            t = pa.Table.from_arrays(
                [*t.columns, ids, versions], schema=self.arrow_schema_of((*data_cols, *LINEAGE_COLUMNS))
            )
            if dv is not None:
                t = t.filter(dv_of(self.io, dv).keep(t.num_rows))
            t = t.filter(filt) if filt is not None else t
            return t if t.column_names == columns else t.select(columns)
        file = pq.ParquetFile(source, pre_buffer=False, memory_map=False)  # one footer read
        names = file.schema_arrow.names
        stored = [c for c in LINEAGE_COLUMNS if c in names]
        if self._evolved or not all(c in names for c in data_cols):  # mapped, or a file added without a column
            t = (
                self._read_evolved(source, data_cols, None, None, memory_pool)
                if self._evolved
                else self._read_plain(source, data_cols, memory_pool)
            )
            kept = file.read(columns=stored, use_threads=False) if stored else None
        else:  # every column is in the file, under its name
            both = file.read(columns=[*data_cols, *stored], use_threads=False)
            t = both.select(data_cols)
            want = self.arrow_schema_of(tuple(data_cols))
            t = t if t.schema.equals(want) else t.cast(want)
            kept = both.select(stored) if stored else None
        n = file.metadata.num_rows  # (a read of no column may not say how many rows there are)
        if kept is not None:
            kept = pa.table({c: kept.column(c) if c in stored else pa.nulls(n, pa.int64()) for c in LINEAGE_COLUMNS})
        ids, versions = row_lineage(lineage[0], lineage[1], n, kept)
        if data_cols:
            t = t.append_column(_LINEAGE_FIELD[ROW_ID], ids).append_column(_LINEAGE_FIELD[LAST_UPDATED], versions)
        else:
            t = pa.Table.from_arrays([ids, versions], schema=pa.schema(LINEAGE_FIELDS))
        if dv is not None:
            t = t.filter(dv_of(self.io, dv).keep(t.num_rows))
        return (t.filter(filt) if filt is not None else t).select(columns)

    def read_file(
        self,
        path: str,
        columns: list[str],
        filt: pc.Expression | None,
        dv: DV | None = None,
        memory_pool: pa.MemoryPool | None = None,
        lineage: tuple[int, int] | None = None,
    ) -> pa.Table:
        """Rows of one data file: deleted rows (``dv``) go first, since DV positions are
        row numbers in the file, then the row filter. ``lineage``: the file's entry's
        (first_row_id, data_version), needed when ``columns`` has row lineage columns."""
        io = self.io
        with self.file_errors(path):
            local = io.local_path(path)
            source = local if local is not None else pa.BufferReader(io.get(path))
            if any(c in _LINEAGE_FIELD for c in columns):
                if lineage is None:  # (lineages_of gives None for an entry without first_row_id)
                    raise no_row_ids(path, self.vm.version)
                return self._read_with_lineage(source, columns, filt, dv, memory_pool, lineage)
            if self._evolved:
                return self._read_evolved(source, columns, filt, dv, memory_pool)
            if dv is not None:
                need = self._needed(columns, filt)
                t = self._read_plain(source, need, memory_pool)
                t = t.filter(dv_of(io, dv).keep(t.num_rows))
                return (t.filter(filt) if filt is not None else t).select(columns)
            if filt is None:
                return self._read_plain(source, columns, memory_pool)
            return self._parquet_scan(
                lambda cols, f: pq.read_table(
                    source, columns=cols, filters=f, schema=self.schema.arrow, use_threads=False
                ),
                columns,
                filt,
            )

    def file_errors(self, path: str) -> _FileErrors:
        """A data file that is missing or not Parquet as CorruptMetadata naming it."""
        return _FileErrors(self, path)

    def _read_with_stored_row_ids(
        self,
        path: str,
        cols: list[str],
        memory_pool: pa.MemoryPool | None,
    ) -> tuple[pa.Table, pa.ChunkedArray | None]:
        """``read_file``'s rows of ``cols`` (every physical row) and the ``_row_id`` column the
        file stores, or None: the file opened (got) once, its footer parsed again for the
        stored column (cheaper than opening, or on an object store getting, the file again)."""
        io = self.io
        with self.file_errors(path):
            local = io.local_path(path)
            with _open_local(local) if local is not None else pa.BufferReader(io.get(path)) as source:
                rows = (
                    self._read_evolved(source, cols, None, None, memory_pool)
                    if self._evolved
                    else self._read_plain(source, cols, memory_pool)
                )
                source.seek(0)
                reader = pq.ParquetReader(memory_pool)
                reader.open(source, pre_buffer=False)
                names = reader.schema_arrow.names
                # read_column takes the index among the top-level fields, not the leaf index:
                # they differ after a nested column
                return rows, (reader.read_column(names.index(ROW_ID)) if ROW_ID in names else None)

    @staticmethod
    def _conformed(t: pa.Table, cols: list[str], out_schema: pa.Schema) -> pa.Table:
        return t if t.schema.equals(out_schema) else t.select(cols).cast(out_schema)
