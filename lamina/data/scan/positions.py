"""Rows a predicate on one string or binary column selects, found by position in each data
file from the column's Parquet dictionaries (what a row-level delete or update needs first:
``Scan.matching_positions``), without decoding a value or reading another column.

The predicate is evaluated once per distinct value across every file's dictionaries
(``_MatchingCodes``), and positions are picked by code. Reads go through ``ArrowRead``
(``lamina.data.scan.read``): its threads, its errors for missing and unreadable files.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lamina.data.scan.file_read import _open_local
from lamina.data.scan.read import ArrowRead
from lamina.errors import CorruptMetadata
from lamina.expr import AlwaysTrue, referenced_columns


def _codes_with_null_slot(chunk: pa.DictionaryArray) -> np.ndarray:
    """A dictionary array's codes as NumPy, a null's code being one past the dictionary's end."""
    codes = chunk.indices
    if codes.null_count:
        codes = pc.fill_null(codes, pa.scalar(len(chunk.dictionary), codes.type))
    return codes.to_numpy(zero_copy_only=False)


def _positions_of_codes(lut: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The positions whose code ``lut`` marks. With one code marked (an equality) or none,
    the common cases, the codes are compared rather than ``lut`` indexed by them (a compare
    costs less than a gather). (``nonzero()[0]`` rather than ``np.flatnonzero``: the same,
    without its two Python-level wrappers, which on a small file cost as much as the search.)"""
    hit = lut.nonzero()[0]
    if not len(hit):
        return np.zeros(0, dtype=np.int64)
    # (the code as a Python int: a NumPy int64 would have the int32 codes widened first)
    mask = codes == int(hit[0]) if len(hit) == 1 else lut[codes]
    return mask.nonzero()[0].astype(np.int64, copy=False)


class _MatchingCodes:
    """Which codes of a dictionary the predicate (on one column) selects, as a mask with one
    more slot for a null's code, for the dictionaries of many files, on many threads.

    The predicate is evaluated once per distinct *value*, not per dictionary: files written
    apart hold the same few values in different orders, so their dictionaries differ while
    their values do not. A dictionary seen before costs a lookup; one of known values, an
    ``index_in`` against them; only values never seen are run through the row filter."""

    def __init__(self, positions: DictionaryPositions, column: str) -> None:
        self._positions, self._column = positions, column
        self._type = positions._table_type(column)
        self._lock = threading.Lock()
        self._by_dictionary: dict[tuple[str, int, int, tuple[bytes | None, ...]], np.ndarray] = {}
        self._values = pa.array([], self._type)  # every value evaluated so far ...
        self._hits = np.zeros(0, dtype=bool)  # ... and whether the predicate selects it
        self._null_hit: bool | None = None
        self._hit_by_value: dict[Any, bool] = {}  # value (as Python) -> selected; None: a null

    def null_hit(self) -> bool:
        """Whether the predicate selects a null (a file without the column reads null in every row)."""
        with self._lock:
            if self._null_hit is None:
                self._null_hit = bool(self._positions._matches(pa.nulls(1, self._type))[0])
            return self._null_hit

    def of(self, dictionary: pa.Array) -> np.ndarray:
        if len(dictionary) <= _SMALL_DICTIONARY:
            return self._of_small(dictionary)
        key = _dictionary_key(dictionary)
        lut = self._by_dictionary.get(key)
        if lut is not None:
            return lut
        values = self._positions._as_table_type(dictionary, self._column)
        null_hit = self.null_hit()
        with self._lock:
            at = pc.index_in(values, value_set=self._values)
            if at.null_count:  # values never seen: evaluate them, once
                fresh = pc.unique(values.filter(pc.is_null(at)))
                self._values = pa.concat_arrays([self._values, fresh])
                self._hits = np.concatenate([self._hits, self._positions._matches(fresh)])
                at = pc.index_in(values, value_set=self._values)
            lut = np.append(self._hits[at.to_numpy(zero_copy_only=False)], null_hit)
            self._by_dictionary[key] = lut
        return lut

    def _of_small(self, dictionary: pa.Array) -> np.ndarray:
        """``of`` for a dictionary of a few values (the common case: a category column), by
        looking each value up in a dict: the handful of Arrow kernel calls ``of`` makes per
        dictionary cost more than that, and hold the interpreter lock the file reads need."""
        hit = self._hit_by_value
        values = dictionary.to_pylist()
        values.append(None)  # the null's slot
        try:
            return np.array([hit[v] for v in values], dtype=bool)
        except KeyError:  # values never seen (in the first files): evaluate them, once
            pass
        null_hit = self.null_hit()
        with self._lock:
            hit[None] = null_hit
            fresh = list(dict.fromkeys(v for v in values if v not in hit))
            if fresh:
                got = self._positions._matches(
                    self._positions._as_table_type(pa.array(fresh, dictionary.type), self._column)
                )
                hit.update(zip(fresh, got.tolist()))
        return np.array([hit[v] for v in values], dtype=bool)


# ``Scan.matching_positions`` reads the columns of up to this many local files (and rows)
# before picking their positions.
_POSITIONS_BATCH_FILES = 64
_POSITIONS_BATCH_ROWS = 1 << 22

# Dictionaries of at most this many values go through ``_MatchingCodes._of_small``.
_SMALL_DICTIONARY = 256


def _dictionary_key(dictionary: pa.Array) -> tuple[str, int, int, tuple[bytes | None, ...]]:
    """Equal for two dictionaries whose buffers hold the same bytes (and so the same values)."""
    return (
        str(dictionary.type),
        dictionary.offset,
        len(dictionary),
        tuple(b.to_pybytes() if b is not None else None for b in dictionary.buffers()),
    )


class DictionaryPositions:
    """Position matching of one scan's predicate, read through ``read`` (the scan's ``ArrowRead``)."""

    def __init__(self, read: ArrowRead) -> None:
        self._read = read
        self.io, self.schema, self.predicate = read.io, read.schema, read.predicate
        self._evolved = self.schema.is_evolved

    @cached_property
    def dictionary_column(self) -> str | None:
        """The one column the predicate reads when it is a string or binary column of a table
        whose files store columns by name: then ``matching_positions`` can evaluate the
        predicate on each row group's dictionary instead of on every row. Else None."""
        refs = referenced_columns(self.predicate)
        # (not for a predicate that can fail on a row: a dictionary holds deleted rows' values too)
        if len(refs) != 1 or self._evolved or isinstance(self.predicate, AlwaysTrue) or self._read.may_fail:
            return None
        (name,) = refs
        t = self.schema.field(name).type
        dictionary_kind = (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
        )
        return name if dictionary_kind else None

    @cached_property
    def _dictionary_leaf(self) -> int:
        """The Parquet leaf index of ``dictionary_column`` in the table's schema: leaves of the
        columns before it (a struct has one per field, a list one, a map two, recursively)."""

        def leaves(t: pa.DataType) -> int:
            return max(1, sum(leaves(t.field(i).type) for i in range(t.num_fields))) if t.num_fields else 1

        arrow = self.schema.arrow
        return sum(leaves(arrow.field(i).type) for i in range(arrow.get_field_index(self.dictionary_column)))

    def matching_positions(self, entries: pa.Table) -> list[np.ndarray]:
        """For each file of ``entries``, in order: the physical positions (row numbers in the
        file, ascending, each once) of its rows the predicate selects, deletion vectors not
        applied.

        Only for a predicate on its ``dictionary_column``: each file's column is read as
        dictionary codes (Parquet stores such a column dictionary-encoded as a rule, so no
        value is decoded), the predicate evaluated once per distinct value across all the
        dictionaries (``_MatchingCodes``), and the positions picked by code: no row's value
        is compared, nothing is concatenated.

        Local files are read one after another on this thread: a file is a few short pyarrow
        calls, each of which releases and retakes the interpreter lock, and on read threads
        those hand-offs cost more than the reads (more threads do not read faster). The
        columns of a batch of files are read first, then their positions picked: pyarrow's
        reading and NumPy's picking alternated file by file evict each other's code and data
        from the CPU's caches. Object stores: file by file on the read threads, whose reads
        mostly wait."""
        column = self.dictionary_column
        assert column is not None, "matching_positions needs a predicate on one string or binary column"
        paths = entries.column("path").to_pylist()
        # which codes match, per distinct dictionary, from the predicate per value; shared by the threads
        matching_codes = _MatchingCodes(self, column)
        if not self.io.is_local:
            read = lambda i: self._positions_in(paths[i], self._file_column(paths[i], column), matching_codes)  # noqa: E731
            return [pos for run in self._read.map_runs(entries, read, 16, 8 << 20, 8) for pos in run]
        out: list[np.ndarray] = []
        batch: list[tuple[str, tuple[pa.ChunkedArray | None, int]]] = []
        rows = 0
        for path in paths:
            batch.append((path, self._file_column(path, column)))
            rows += batch[-1][1][1]
            if len(batch) >= _POSITIONS_BATCH_FILES or rows >= _POSITIONS_BATCH_ROWS:
                out += [self._positions_in(p, read, matching_codes) for p, read in batch]
                batch, rows = [], 0
        out += [self._positions_in(p, read, matching_codes) for p, read in batch]
        return out

    def _file_column(self, path: str, column: str) -> tuple[pa.ChunkedArray | None, int]:
        """The predicate's column of a data file, as dictionary codes where the file stores
        it so, and the file's row count; None for a file without the column."""
        io = self.io
        with self._read.file_errors(path):
            local = io.local_path(path)
            source = _open_local(local) if local is not None else pa.BufferReader(io.get(path))
            with source:
                reader = pq.ParquetReader()
                # Dictionary codes for the column's leaf in files laid out as the table's schema
                # (what it writes); in a file laid out otherwise that leaf is another column, and
                # this one is read as plain values (see _positions_in). By field, one column:
                # ``read_column`` returns it without assembling a table, as ``read_all`` of that
                # column would (the file's Arrow schema, to find the field, is cheap beside it).
                reader.open(source, read_dictionary=[self._dictionary_leaf], pre_buffer=False)
                rows = reader.metadata.num_rows
                # (the index among the top-level fields, not the leaf index: they differ after a nested column)
                field = reader.schema_arrow.get_field_index(column)
                return (reader.read_column(field) if field >= 0 else None), rows

    def _positions_in(
        self, path: str, read: tuple[pa.ChunkedArray | None, int], matching_codes: _MatchingCodes
    ) -> np.ndarray:
        """The positions of the rows of one file that the predicate selects, from its column
        as ``_file_column`` read it."""
        values, rows = read
        if values is None:  # a file added without the column: it reads null in every row
            return np.arange(rows, dtype=np.int64) if matching_codes.null_hit() else np.zeros(0, dtype=np.int64)
        if len(values) != rows:
            raise CorruptMetadata(
                f"data file {path} has {rows} rows in its footer but {len(values)} in its column {self.dictionary_column!r}"
            )
        chunks = values.chunks
        if len(chunks) == 1 and pa.types.is_dictionary(chunks[0].type):
            return _positions_of_codes(matching_codes.of(chunks[0].dictionary), _codes_with_null_slot(chunks[0]))
        column = self.dictionary_column
        assert column is not None  # (as in matching_positions, the only caller)
        masks = []
        for chunk in chunks:
            if pa.types.is_dictionary(chunk.type):
                masks.append(matching_codes.of(chunk.dictionary)[_codes_with_null_slot(chunk)])
            else:
                masks.append(self._matches(self._as_table_type(chunk, column)))
        positions = np.flatnonzero(np.concatenate(masks)) if masks else np.zeros(0, dtype=np.int64)
        return positions.astype(np.int64, copy=False)

    def _table_type(self, column: str) -> pa.DataType:
        return self._read.arrow_schema_of((column,)).field(0).type

    def _as_table_type(self, values: pa.Array, column: str) -> pa.Array:
        typ = self._table_type(column)
        return values if values.type.equals(typ) else values.cast(typ)

    def _matches(self, values: pa.Array) -> np.ndarray:
        """Which of ``values`` (of the predicate's one column) the row filter keeps, as a mask."""
        column = self.dictionary_column
        index = "__lamina_index" if column != "__lamina_index" else "__lamina_index_"
        t = pa.table({column: values, index: pa.array(np.arange(len(values), dtype=np.int64))})
        mask = np.zeros(len(values), dtype=bool)
        mask[t.filter(self._read.row_filter).column(index).to_numpy()] = True
        return mask
