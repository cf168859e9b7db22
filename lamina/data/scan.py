"""Scans: plan (prune the manifest tree to file scan tasks), then read rows.

Planning works on Arrow tables of entries end to end; tasks are materialised
as Python objects only when iterated.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property, wraps
from inspect import isgeneratorfunction
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs
import pyarrow.parquet as pq

if TYPE_CHECKING:
    import pyarrow.dataset as ds

from lamina.errors import CorruptMetadata, LaminaError, MissingFile, NotFound, RowLineageNotEnabled, VersionNotFound
from lamina.expr import AlwaysTrue, Expr, bind, may_match, pushdown_filter, referenced_columns, to_arrow_filter, to_expr
from lamina.io import FileIO
from lamina.manifest.entries import manifest_schema_of
from lamina.manifest.tree import live_data_entries
from lamina.data.deletes import DV, dv_of, dvs_of_plan, positions_array, read_bitmaps
from lamina.spec import content as C
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID, LAST_UPDATED, LINEAGE_COLUMNS, LINEAGE_FIELDS, ROW_ID, has_lineage, lineages_of, no_row_ids, row_lineage
from lamina.spec.partition import fields_by_id
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-read")
# Reading local files is CPU work (decoding): one thread per core; more only contend.
_local_pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="lamina-read-local")
# For a consumer that is busy itself (a rewrite encoding what it reads): one reader thread, so
# the reading and the encoding each have a core (``read_files(single_reader=True)``).
_single_reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lamina-read-one")

_LINEAGE_FIELD = {f.name: f for f in LINEAGE_FIELDS}

# The loops that read thousands of small local files (compaction, deletes by dictionary) open
# them through the file system object: pa.OSFile first asks Python's os.path.isdir (a stat),
# ~2.5 us of a ~0.1 ms read. Errors are the same (FileNotFoundError for a missing file).
_open_local = pyarrow.fs.LocalFileSystem().open_input_file

PLAN_COLUMNS = (
    "content", "status", "path", "size", "record_count", "added_version", "partition_path",
    "dv_path", "dv_offset", "dv_length", "dv_cardinality",
)


@dataclass(frozen=True)
class FileScanTask:
    path: str  # relative to the table root
    uri: str  # absolute location, for engines
    size: int
    record_count: int
    partition_path: str | None
    added_version: int
    dv_path: str | None = None
    dv_offset: int | None = None
    dv_length: int | None = None
    dv_cardinality: int | None = None  # rows deleted; record_count is what is left


class ScanPlan(Sequence[FileScanTask]):
    """The planned files: an Arrow table of entries, viewed as a sequence of tasks."""

    def __init__(self, entries: pa.Table, io: Any) -> None:
        self.entries = entries
        self._io = io

    def __len__(self) -> int:
        return self.entries.num_rows

    def __repr__(self) -> str:
        return f"ScanPlan(files={len(self)}, records={self.record_count})"

    def _task(self, row: dict[str, Any]) -> FileScanTask:
        return FileScanTask(
            path=row["path"],
            uri=self._io.full_uri(row["path"]),
            size=row["size"],
            record_count=row["record_count"],
            partition_path=row["partition_path"],
            added_version=row["added_version"],
            dv_path=row["dv_path"],
            dv_offset=row["dv_offset"],
            dv_length=row["dv_length"],
            dv_cardinality=row["dv_cardinality"],
        )

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._task(r) for r in self.entries.slice(*_slice_bounds(i, len(self))).to_pylist()]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._task(self.entries.slice(i, 1).to_pylist()[0])

    def __iter__(self) -> Iterator[FileScanTask]:
        cols = ["path", "size", "record_count", "partition_path", "added_version", "dv_path", "dv_offset", "dv_length", "dv_cardinality"]
        for batch in self.entries.select(cols).to_batches(max_chunksize=4096):
            for r in batch.to_pylist():
                yield self._task(r)

    @property
    def record_count(self) -> int:
        return pc.sum(self.entries.column("record_count")).as_py() or 0

    @property
    def paths(self) -> list[str]:
        return self.entries.column("path").to_pylist()


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


def _codes_with_null_slot(chunk: pa.DictionaryArray) -> np.ndarray:
    """A dictionary array's codes as NumPy, a null's code being one past the dictionary's end."""
    codes = chunk.indices
    if codes.null_count:
        codes = pc.fill_null(codes, pa.scalar(len(chunk.dictionary), codes.type))
    return codes.to_numpy(zero_copy_only=False)


def _positions_of_codes(lut: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The positions whose code ``lut`` marks. With one code marked (an equality) or none,
    the common cases, the codes are compared rather than ``lut`` indexed by them (4x cheaper).
    (``nonzero()[0]`` rather than ``np.flatnonzero``: the same, without its two Python-level
    wrappers, which cost as much as the search on a file of a few thousand rows.)"""
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

    def __init__(self, scan: "Scan", column: str) -> None:
        self._scan, self._column = scan, column
        self._type = scan._table_type(column)
        self._lock = threading.Lock()
        self._by_dictionary: dict[tuple, np.ndarray] = {}
        self._values = pa.array([], self._type)  # every value evaluated so far ...
        self._hits = np.zeros(0, dtype=bool)  # ... and whether the predicate selects it
        self._null_hit: bool | None = None
        self._hit_by_value: dict[Any, bool] = {}  # value (as Python) -> selected; None: a null

    def null_hit(self) -> bool:
        """Whether the predicate selects a null (a file without the column reads null in every row)."""
        with self._lock:
            if self._null_hit is None:
                self._null_hit = bool(self._scan._matches(pa.nulls(1, self._type))[0])
            return self._null_hit

    def of(self, dictionary: pa.Array) -> np.ndarray:
        if len(dictionary) <= _SMALL_DICTIONARY:
            return self._of_small(dictionary)
        key = _dictionary_key(dictionary)
        lut = self._by_dictionary.get(key)
        if lut is not None:
            return lut
        values = self._scan._as_table_type(dictionary, self._column)
        null_hit = self.null_hit()
        with self._lock:
            at = pc.index_in(values, value_set=self._values)
            if at.null_count:  # values never seen: evaluate them, once
                fresh = pc.unique(values.filter(pc.is_null(at)))
                self._values = pa.concat_arrays([self._values, fresh])
                self._hits = np.concatenate([self._hits, self._scan._matches(fresh)])
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
                got = self._scan._matches(self._scan._as_table_type(pa.array(fresh, dictionary.type), self._column))
                hit.update(zip(fresh, got.tolist()))
        return np.array([hit[v] for v in values], dtype=bool)


# ``Scan.matching_positions`` reads the columns of up to this many local files (and rows)
# before picking their positions.
_POSITIONS_BATCH_FILES = 64
_POSITIONS_BATCH_ROWS = 1 << 22

# Dictionaries of at most this many values go through ``_MatchingCodes._of_small``.
_SMALL_DICTIONARY = 256


def _dictionary_key(dictionary: pa.Array) -> tuple:
    """Equal for two dictionaries whose buffers hold the same bytes (and so the same values)."""
    return (str(dictionary.type), dictionary.offset, len(dictionary),
            tuple(b.to_pybytes() if b is not None else None for b in dictionary.buffers()))


class _FileErrors:
    """``Scan._file_errors``: a class rather than a generator-based context manager, which
    costs a few microseconds per file (compaction reads thousands)."""

    __slots__ = ("scan", "path")

    def __init__(self, scan: "Scan", path: str) -> None:
        self.scan, self.path = scan, path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, e: Any, tb: Any) -> None:
        if kind is None:
            return
        if issubclass(kind, (NotFound, FileNotFoundError)):
            raise MissingFile(
                f"data file {self.path} of version {self.scan.vm.version} is missing; run `lamina fsck {self.scan.io.uri}`"
            ) from None
        if issubclass(kind, pa.ArrowInvalid):
            raise CorruptMetadata(f"data file {self.path} is unreadable: {e}") from None


def _physical_rows(entries: pa.Table) -> np.ndarray:
    """Rows each data file of ``entries`` holds, deleted ones included: record_count (live
    rows) + dv_cardinality."""
    live = entries.column("record_count").to_numpy(zero_copy_only=False)
    return (live + pc.fill_null(entries.column("dv_cardinality"), 0).to_numpy(zero_copy_only=False)).astype(np.int64)


def _slice_bounds(s: slice, n: int) -> tuple[int, int]:
    start, stop, step = s.indices(n)
    if step != 1:
        raise ValueError("ScanPlan slices take no step")
    return start, max(0, stop - start)


class VersionKeeper(Protocol):
    """What a scan asks of its table's log (lamina.commit.VersionLog), through this layer's
    view of it: whether a version is still kept."""

    def is_live(self, version: int) -> bool: ...


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _expiry_aware(method: _Method) -> _Method:
    """``method`` of a Scan, with a missing file of a version that is no longer kept raised as
    VersionNotFound (``Scan._raise_if_no_longer_kept``) rather than MissingFile. Generators too: a
    stream's files are read as it is consumed."""
    if isgeneratorfunction(method):
        @wraps(method)
        def stream(self: "Scan", *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(self, *args, **kwargs)
            except MissingFile as e:
                self._raise_if_no_longer_kept(e)
                raise
        return stream  # type: ignore[return-value]

    @wraps(method)
    def run(self: "Scan", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except MissingFile as e:
            self._raise_if_no_longer_kept(e)
            raise
    return run  # type: ignore[return-value]


class Scan:
    """A read of one version: ``plan()`` prunes the manifest tree to file scan tasks, the
    readers return its live rows. Built by ``Table.scan`` and, for the version an operation
    is applied to, by ``lamina.commit.Base.scan``."""

    def __init__(
        self, io: FileIO, vm: VersionManifest, where: str | Expr | None = None, columns: Sequence[str] | None = None,
        *, log: VersionKeeper | None = None,
    ) -> None:
        self.io = io
        self.vm = vm
        # The log of the table (or branch) ``vm`` is a version of, when known: a file found
        # missing is then told apart from a version expired since this scan was made.
        self.log = log
        self.schema = vm.schema
        self.spec = vm.partition_spec
        self.specs = vm.all_partition_specs  # files keep the spec they were written with
        self.predicate = bind(to_expr(where), self.schema)
        if columns is not None:
            columns = list(columns)
            for c in columns:
                if c not in LINEAGE_COLUMNS:
                    self.schema.field(c)  # raises SchemaMismatch naming the columns
        self.columns = columns
        # Row lineage columns asked for (lamina.spec.lineage): read from each file's entry and
        # its stored lineage columns, by physical position.
        self.lineage = columns is not None and any(c in LINEAGE_COLUMNS for c in columns)
        if self.lineage and not has_lineage(vm):
            raise RowLineageNotEnabled(
                f"version {vm.version} of this table has no row lineage, so it has no {ROW_ID} or {LAST_UPDATED}; "
                "turn it on with table.enable_row_lineage() (rows get ids from that version on)"
            )
        self._schemas: dict[tuple[str, ...], pa.Schema] = {}
        # An evolved schema's columns are mapped from the files (physical names, defaults,
        # see lamina.spec.schema), not read by name as they are.
        self._evolved = self.schema.is_evolved

    @property
    def version(self) -> int:
        return self.vm.version

    def __repr__(self) -> str:
        where = "" if isinstance(self.predicate, AlwaysTrue) else f", where={str(self.predicate)!r}"
        columns = "" if self.columns is None else f", columns={self.columns!r}"
        return f"Scan({self.io.uri!r}, version={self.vm.version}{where}{columns})"

    def _raise_if_no_longer_kept(self, missing: MissingFile) -> None:
        """VersionNotFound (from ``missing``) when the version this scan reads is no longer
        kept (``self.log`` says so): expiry (or a destructive rollback) removed it and its
        files after the scan was made, as when a notebook reuses a scan, a DataFrame or a
        stream after maintenance. That is not corruption, and `lamina fsck` would find none.
        Nothing when it is still kept, or when nothing tells: the missing file is then the
        table's fault, and the caller raises ``missing``."""
        if self.log is None:
            return
        try:
            if self.log.is_live(self.vm.version):
                return
        except LaminaError:
            return
        raise VersionNotFound(
            f"version {self.vm.version} of {self.io.uri} is no longer kept: it was expired (or dropped by a rollback) "
            "after this scan was made, and the files it reads were deleted with it. Scan the table again for its "
            "current version, or scan a version that is still kept (`lamina history`); expire_versions keeps "
            "a superseded version for reads like this one for reader_grace (default 1 hour)") from missing

    @_expiry_aware
    def plan(self, all_columns: bool = False) -> ScanPlan:
        """Files that may hold matching rows: leaf summaries first, then file stats.

        ``all_columns``: every entry column (a row-level change re-lists entries whole)."""
        io = self.io
        mschema = manifest_schema_of(self.vm)
        prune = None
        if not isinstance(self.predicate, AlwaysTrue):
            pred, schema, specs = self.predicate, self.schema, self.specs
            prune = lambda t: may_match(pred, t, schema, specs)  # noqa: E731
        cols = None if all_columns else self._manifest_columns(mschema)
        return ScanPlan(live_data_entries(io, self.vm.root_manifest, mschema, prune, cols, inline=self.vm.root_inline), io)

    def _manifest_columns(self, mschema: pa.Schema) -> list[str]:
        """The entry columns a file scan task needs, plus the statistics the predicate can use.

        Bookkeeping columns (file_count, removed_version, spec_id, max_added_version)
        are not read: at a million files each costs ~8 MB of decoding. (spec_id is, on a
        table with several partition specs whose fields the predicate can use: a file is
        never pruned by a field of a spec other than its own.)
        """
        wanted = set(PLAN_COLUMNS)
        if self.lineage:
            wanted |= {FIRST_ROW_ID, DATA_VERSION}
        refs = referenced_columns(self.predicate)
        fids = {self.schema.field_id(n) for n in refs}
        for fid in fids:
            wanted |= {C.min_col(fid), C.max_col(fid), C.nulls_col(fid)}
        for pf in fields_by_id(self.specs).values():
            if pf.source_id in fids:
                wanted |= {C.pmin_col(pf.field_id), C.pmax_col(pf.field_id)}
                if len(self.specs) > 1:
                    wanted.add("spec_id")
        return [n for n in mschema.names if n in wanted]

    # -- reading ---------------------------------------------------------------------

    def _read_columns(self) -> list[str]:
        return self.columns if self.columns is not None else self.schema.names

    @property
    def output_columns(self) -> tuple[str, ...]:
        """The columns a read returns: those asked for, else the schema's."""
        return tuple(self._read_columns())

    @cached_property
    def row_filter(self) -> Any:
        """The predicate as an Arrow filter over rows; None when it selects every row."""
        return None if isinstance(self.predicate, AlwaysTrue) else to_arrow_filter(self.predicate)

    @cached_property
    def _pushdown(self) -> Any:
        """The filter a Parquet scan may be given instead of the row filter; None: the row
        filter itself (asked when reading, not when planning)."""
        return pushdown_filter(self.predicate)

    @cached_property
    def _physical_pushdown(self) -> Any:
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
        self, source: Any, columns: list[str], filt: Any, dv: DV | None, memory_pool: pa.MemoryPool | None
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
            source, columns=[schema.physical_names[c] for c in need], schema=schema.physical_arrow,
            filters=pushdown, use_threads=False, memory_map=False,
        )
        t = self._fill_defaults(source, schema.to_logical(t, need))
        if dv is not None:
            t = t.filter(dv_of(self.io, dv).keep(t.num_rows))
        return (t.filter(filt) if filt is not None else t).select(columns)

    def _fill_defaults(self, source: Any, t: pa.Table) -> pa.Table:
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

    def _needed(self, columns: list[str], filt: Any) -> list[str]:
        """The columns to read for ``columns``: with the predicate's too when ``filt`` is applied."""
        return self.with_predicate_columns(columns) if filt is not None else columns

    def with_predicate_columns(self, columns: Sequence[str]) -> list[str]:
        """``columns`` and, after them, those the scan's predicate uses."""
        return list(dict.fromkeys([*columns, *referenced_columns(self.predicate)]))

    def _parquet_scan(self, read: Callable[[list[str], Any], pa.Table], columns: list[str], filt: Any) -> pa.Table:
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
            self._schemas[columns] = pa.schema([_LINEAGE_FIELD[c] if c in _LINEAGE_FIELD else self.schema.field(c) for c in columns])
        return self._schemas[columns]

    def _read_plain(self, source: Any, columns: list[str], memory_pool: pa.MemoryPool | None = None) -> pa.Table:
        """All rows of ``columns``: one Parquet read, several times cheaper per file than
        read_table's dataset machinery; files lacking a column go the general way."""
        if isinstance(source, str):
            # An open file rather than a path: skips pyarrow's filesystem resolution (~10%
            # of reading a small file).
            with pa.OSFile(source) as f:
                return self._read_plain(f, columns, memory_pool)
        # pq.ParquetReader (what ParquetFile wraps; pyarrow is pinned) rather than
        # ParquetFile: the wrapper's Python set-up (nested column paths) holds the GIL for
        # a third of a small file's read, and reads on several threads then queue for it.
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

    def _read_exact(self, source: Any, columns: list[str], memory_pool: pa.MemoryPool | None) -> tuple[pa.Table | None, int]:
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
        # reads thousands of such files: Python work per file is a fifth of its read).
        if not t.schema.equals(want):
            if t.column_names != columns:
                return None, 0
            t = t.cast(want)
        return t, t.num_rows

    def _read_with_lineage(
        self, source: Any, columns: list[str], filt: Any, dv: DV | None, memory_pool: pa.MemoryPool | None,
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
            t = pa.Table.from_arrays([*t.columns, ids, versions], schema=self.arrow_schema_of((*data_cols, *LINEAGE_COLUMNS)))
            if dv is not None:
                t = t.filter(dv_of(self.io, dv).keep(t.num_rows))
            t = t.filter(filt) if filt is not None else t
            return t if t.column_names == columns else t.select(columns)
        file = pq.ParquetFile(source, pre_buffer=False, memory_map=False)  # one footer read
        names = file.schema_arrow.names
        stored = [c for c in LINEAGE_COLUMNS if c in names]
        if self._evolved or not all(c in names for c in data_cols):  # mapped, or a file added without a column
            t = (self._read_evolved(source, data_cols, None, None, memory_pool) if self._evolved
                 else self._read_plain(source, data_cols, memory_pool))
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

    @_expiry_aware
    def read_file(
        self, path: str, columns: list[str], filt: Any, dv: DV | None = None, memory_pool: pa.MemoryPool | None = None,
        lineage: tuple[int, int] | None = None,
    ) -> pa.Table:
        """Rows of one data file: deleted rows (``dv``) go first, since DV positions are
        row numbers in the file, then the row filter. ``lineage``: the file's entry's
        (first_row_id, data_version), needed when ``columns`` has row lineage columns."""
        io = self.io
        with self._file_errors(path):
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
                lambda cols, f: pq.read_table(source, columns=cols, filters=f, schema=self.schema.arrow, use_threads=False),
                columns, filt,
            )

    # -- rows matching the predicate, by position (row-level deletes) ---------------------

    @cached_property
    def dictionary_column(self) -> str | None:
        """The one column the predicate reads when it is a string or binary column of a table
        whose files store columns by name: then ``matching_positions`` can evaluate the
        predicate on each row group's dictionary instead of on every row. Else None."""
        refs = referenced_columns(self.predicate)
        if len(refs) != 1 or self._evolved or isinstance(self.predicate, AlwaysTrue):
            return None
        (name,) = refs
        t = self.schema.field(name).type
        dictionary_kind = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
        return name if dictionary_kind else None

    @cached_property
    def _dictionary_leaf(self) -> int:
        """The Parquet leaf index of ``dictionary_column`` in the table's schema: leaves of the
        columns before it (a struct has one per field, a list one, a map two, recursively)."""
        def leaves(t: pa.DataType) -> int:
            return max(1, sum(leaves(t.field(i).type) for i in range(t.num_fields))) if t.num_fields else 1

        arrow = self.schema.arrow
        return sum(leaves(arrow.field(i).type) for i in range(arrow.get_field_index(self.dictionary_column)))

    @_expiry_aware
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
        calls (~0.1 ms), each of which releases and retakes the interpreter lock, and on read
        threads those hand-offs cost more than the reads (two threads took longer than one
        for 200 files). The columns of a batch of files are read first, then their positions
        picked: pyarrow's reading and NumPy's picking alternated file by file evict each
        other's code and data from the CPU's caches (~20% slower). Object stores: file by
        file on the read threads, whose reads mostly wait."""
        column = self.dictionary_column
        assert column is not None, "matching_positions needs a predicate on one string or binary column"
        paths = entries.column("path").to_pylist()
        # which codes match, per distinct dictionary, from the predicate per value; shared by the threads
        matching_codes = _MatchingCodes(self, column)
        if not self.io.is_local:
            read = lambda i: self._positions_in(paths[i], self._file_column(paths[i], column), matching_codes)  # noqa: E731
            return [pos for run in self._map_runs(entries, read, 16, 8 << 20, 8) for pos in run]
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
        with self._file_errors(path):
            local = io.local_path(path)
            source = _open_local(local) if local is not None else pa.BufferReader(io.get(path))
            with source:
                reader = pq.ParquetReader()
                # Dictionary codes for the column's leaf in files laid out as the table's schema
                # (what it writes); in a file laid out otherwise that leaf is another column, and
                # this one is read as plain values (see _positions_in). By field, one column:
                # ``read_column`` returns it without assembling a table (~15 µs a file less than
                # ``read_all`` of that column; the file's Arrow schema, to find the field, ~2 µs).
                reader.open(source, read_dictionary=[self._dictionary_leaf], pre_buffer=False)
                rows = reader.metadata.num_rows
                # (the index among the top-level fields, not the leaf index: they differ after a nested column)
                field = reader.schema_arrow.get_field_index(column)
                return (reader.read_column(field) if field >= 0 else None), rows

    def _positions_in(self, path: str, read: tuple[pa.ChunkedArray | None, int], matching_codes: "_MatchingCodes") -> np.ndarray:
        """The positions of the rows of one file that the predicate selects, from its column
        as ``_file_column`` read it."""
        values, rows = read
        if values is None:  # a file added without the column: it reads null in every row
            return np.arange(rows, dtype=np.int64) if matching_codes.null_hit() else np.zeros(0, dtype=np.int64)
        if len(values) != rows:
            raise CorruptMetadata(
                f"data file {path} has {rows} rows in its footer but {len(values)} in its column {self.dictionary_column!r}")
        chunks = values.chunks
        if len(chunks) == 1 and pa.types.is_dictionary(chunks[0].type):
            return _positions_of_codes(matching_codes.of(chunks[0].dictionary), _codes_with_null_slot(chunks[0]))
        masks = []
        for chunk in chunks:
            if pa.types.is_dictionary(chunk.type):
                masks.append(matching_codes.of(chunk.dictionary)[_codes_with_null_slot(chunk)])
            else:
                masks.append(self._matches(self._as_table_type(chunk, self.dictionary_column)))
        positions = np.flatnonzero(np.concatenate(masks)) if masks else np.zeros(0, dtype=np.int64)
        return positions.astype(np.int64, copy=False)

    def _table_type(self, column: str) -> pa.DataType:
        return self.arrow_schema_of((column,)).field(0).type

    def _as_table_type(self, values: pa.Array, column: str) -> pa.Array:
        typ = self._table_type(column)
        return values if values.type.equals(typ) else values.cast(typ)

    def _matches(self, values: pa.Array) -> np.ndarray:
        """Which of ``values`` (of the predicate's one column) the row filter keeps, as a mask."""
        column = self.dictionary_column
        index = "__lamina_index" if column != "__lamina_index" else "__lamina_index_"
        t = pa.table({column: values, index: pa.array(np.arange(len(values), dtype=np.int64))})
        mask = np.zeros(len(values), dtype=bool)
        mask[t.filter(self.row_filter).column(index).to_numpy()] = True
        return mask

    def _file_errors(self, path: str) -> "_FileErrors":
        """A data file that is missing or not Parquet as CorruptMetadata naming it."""
        return _FileErrors(self, path)

    @_expiry_aware
    def to_batches(self) -> Iterator[pa.RecordBatch]:
        plan = self.plan()
        filt = None if isinstance(self.predicate, AlwaysTrue) else to_arrow_filter(self.predicate)
        # One file per task, 8 ahead: a streaming reader holds little.
        for t in self.read_files(plan.entries, self._read_columns(), filt, files_per_task=1):
            for b in t.to_batches():
                if b.num_rows:
                    yield b

    def to_reader(self) -> pa.RecordBatchReader:
        """The rows as a lazy Arrow stream (one pass): files are read as it is consumed,
        deletes and the filter applied. Any Arrow engine takes it (``__arrow_c_stream__``)."""
        return pa.RecordBatchReader.from_batches(self.arrow_schema_of(self.output_columns), self.to_batches())

    @_expiry_aware
    def to_pyarrow_dataset(self) -> ds.Dataset:
        """The rows as a ``pyarrow.dataset.Dataset`` that engines scan lazily, with projection
        and filter pushdown (``lamina.data.export``: files with deletion vectors are read
        when it is made; docs/engines.md)."""
        from lamina.data.export import to_pyarrow_dataset

        return to_pyarrow_dataset(self)

    def to_polars(self) -> Any:
        """The rows as a Polars DataFrame (eager; ``lamina.polars.scan`` is the lazy one)."""
        import polars as pl

        return pl.from_arrow(self.to_arrow(), rechunk=False)

    @_expiry_aware
    def read_files(
        self, entries: pa.Table, cols: list[str], filt: Any = None, *,
        files_per_task: int = 64, bytes_per_task: int = 8 << 20, tasks_ahead: int = 8,
        memory_pool: pa.MemoryPool | None = None, per_run: bool = False, single_reader: bool = False,
        stored_row_ids: bool = False,
    ) -> Iterator[Any]:
        """The live rows of each file of ``entries`` (deleted rows dropped), one table per
        file, in entry order (``per_run``: one table per run of files, see below, in order).

        Each file is one Parquet read: for small files several times cheaper than a
        dataset scan, and the GIL is released while decoding. Runs of consecutive files
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
        for the lock and for the two cores, and read no faster than one reader (2,000 files
        of 500 rows: about 0.13 ms of CPU each either way).

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
            read_run = lambda run: self._read_run([paths[i] for i in run], cols, filt, [dvs[i] for i in run],  # noqa: E731
                                                  [lineages[i] for i in run], memory_pool)
            for files in self._map_runs(entries, read_run, files_per_task, bytes_per_task, tasks_ahead, per_run=True,
                                        single_reader=single_reader):
                yield self._numbered(files, cols, memory_pool, out_schema)  # on the consumer's thread
            return
        if stored_row_ids:
            assert filt is None and not any(dvs) and not any(c in _LINEAGE_FIELD for c in cols), \
                "stored row ids number physical rows: read with them data columns, every row"
            read_ids = lambda i: self._read_with_stored_row_ids(paths[i], cols, memory_pool)  # noqa: E731
            for results in self._map_runs(entries, read_ids, files_per_task, bytes_per_task, tasks_ahead,
                                          single_reader=single_reader):
                yield from ((self._conformed(t, cols, out_schema), ids) for t, ids in results)
            return
        read = lambda i: self.read_file(paths[i], cols, filt, dvs[i], memory_pool, lineages[i])  # noqa: E731
        for tables in self._map_runs(entries, read, files_per_task, bytes_per_task, tasks_ahead, single_reader=single_reader):
            yield from (self._conformed(t, cols, out_schema) for t in tables)

    def _read_with_stored_row_ids(
        self, path: str, cols: list[str], memory_pool: pa.MemoryPool | None,
    ) -> tuple[pa.Table, pa.ChunkedArray | None]:
        """``read_file``'s rows of ``cols`` (every physical row) and the ``_row_id`` column the
        file stores, or None: the file opened (got) once, its footer parsed again for the
        stored column (tens of µs, against an open per file)."""
        io = self.io
        with self._file_errors(path):
            local = io.local_path(path)
            with (_open_local(local) if local is not None else pa.BufferReader(io.get(path))) as source:
                rows = (self._read_evolved(source, cols, None, None, memory_pool) if self._evolved
                        else self._read_plain(source, cols, memory_pool))
                source.seek(0)
                reader = pq.ParquetReader(memory_pool)
                reader.open(source, pre_buffer=False)
                names = reader.schema_arrow.names
                # read_column takes the index among the top-level fields, not the leaf index:
                # they differ after a nested column
                return rows, (reader.read_column(names.index(ROW_ID)) if ROW_ID in names else None)

    def _read_run(
        self, paths: list[str], cols: list[str], filt: Any, dvs: list[DV | None], lineages: list[Any],
        memory_pool: pa.MemoryPool | None,
    ) -> list[tuple[pa.Table, Any, str]]:
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
        files: list[tuple[pa.Table, Any, str]] = []
        for path, dv, lineage in zip(paths, dvs, lineages):
            if not (quick and dv is None and lineage is not None):
                files.append((self.read_file(path, cols, filt, dv, memory_pool, lineage), None, path))
                continue
            with self._file_errors(path):
                local = io.local_path(path)
                with (_open_local(local) if local is not None else pa.BufferReader(io.get(path))) as source:
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
        self, files: list[tuple[pa.Table, Any, str]], cols: list[str], memory_pool: pa.MemoryPool | None,
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
            lineage = {ROW_ID: pa.array(ids), LAST_UPDATED: pa.array(last)}
            data = pa.concat_tables(tables)
            return pa.Table.from_arrays(
                [lineage[c] if c in lineage else data.column(c) for c in cols], schema=out_schema)
        parts = []
        for t, n, start, count in zip(tables, numbered, starts, counts):
            if n is not None:
                lineage = {ROW_ID: pa.array(ids[start:start + count]), LAST_UPDATED: pa.array(last[start:start + count])}
                t = pa.Table.from_arrays([lineage[c] if c in lineage else t.column(c) for c in cols], schema=out_schema)
            parts.append(t)
        return pa.concat_tables(parts)

    def _map_runs(
        self, entries: pa.Table, fn: Callable[[Any], Any], files_per_task: int, bytes_per_task: int, tasks_ahead: int,
        per_run: bool = False, single_reader: bool = False,
    ) -> Iterator[Any]:
        """``fn(i)`` for every file ``i`` of ``entries``, run by run (see ``read_files``) on
        the read threads, ``tasks_ahead`` runs queued ahead; each run's results, in order
        (``per_run``: ``fn(run)`` once per run, a range of file indices, and its result)."""
        runs = _runs(entries.column("size").to_pylist(), files_per_task, bytes_per_task)
        pool = (_single_reader if single_reader else _local_pool) if self.io.is_local else _pool
        pending: deque = deque()
        for run in runs:
            if len(pending) >= tasks_ahead:
                yield pending.popleft().result()
            pending.append(pool.submit(fn, run) if per_run else pool.submit(lambda r: [fn(i) for i in r], run))
        while pending:
            yield pending.popleft().result()

    @staticmethod
    def _conformed(t: pa.Table, cols: list[str], out_schema: pa.Schema) -> pa.Table:
        return t if t.schema.equals(out_schema) else t.select(cols).cast(out_schema)

    @_expiry_aware
    def to_arrow(self) -> pa.Table:
        plan = self.plan()
        filt = None if isinstance(self.predicate, AlwaysTrue) else to_arrow_filter(self.predicate)
        return self.read_entries(plan.entries, self._read_columns(), filt)

    @_expiry_aware
    def read_entries(self, entries: pa.Table, cols: list[str], filt: Any) -> pa.Table:
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
            rows = (int(pc.sum(entries.column("record_count")).as_py() or 0) if filt is None
                    else self.read_entries(entries, self.with_predicate_columns([]), filt).num_rows)
            return pa.table({"rows": pa.nulls(rows)}).select([])
        if any(c in _LINEAGE_FIELD for c in cols):
            # Row ids number a file's physical rows: file by file, before deletes and filter
            # (numbered per run where files store none).
            return pa.concat_tables(list(self.read_files(entries, cols, filt, files_per_task=16, per_run=True)))
        io = self.io
        dvs = dvs_of_plan(entries)
        paths = entries.column("path").to_pylist()
        with_dv = [i for i, d in enumerate(dvs) if d is not None]
        parts = []
        if with_dv:
            # Deletes first (DV positions are row numbers in the file), then the filter, on
            # all the files at once (one filter plan instead of one per file).
            dv_entries = entries.take(pa.array(with_dv))
            dv_list = [dvs[i] for i in with_dv]
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
                import pyarrow.dataset as ds  # (lazily: it imports pandas, ~60 MB and 0.3 s)

                with self._missing_file_is_corrupt():
                    dataset = ds.dataset([io.local_path(p) for p in plain], schema=self.schema.arrow, format="parquet")
                    parts.append(self._parquet_scan(lambda c, f: dataset.to_table(columns=c, filter=f), cols, filt).cast(out_schema))
            else:
                tables = list(_pool.map(lambda p: self.read_file(p, cols, filt), plain))
                parts += [t.select(cols).cast(out_schema) for t in tables]
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _scan_local_evolved(self, paths: list[str], cols: list[str], filt: Any) -> pa.Table:
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

    def _scan_local_with_dvs(self, entries: pa.Table, dvs: list[DV], cols: list[str], filt: Any) -> pa.Table:
        """The live rows of local files that carry deletion vectors, that the row filter
        ``filt`` (if any) keeps, columns ``cols``: one threaded dataset scan of every row, as a
        read without deletes (its threads decode several files, and a large file's row groups,
        at once, and evaluate ``filt`` into a column), each batch cut as it arrives to the
        rows no DV deletes and ``filt`` keeps. The DVs make one mask over every row of the
        files (the manifest puts each file's first row at record_count + dv_cardinality of
        the files before it): a byte a row, little beside the rows, and sliced per batch far
        cheaper than a mask made per batch from its file's DV (~5% of the read). Reading and
        masking file by file on two cores ran at 0.7-0.8x the speed of the read without
        deletes.

        Batch by batch rather than the whole table after the scan: each batch is freed once
        cut, so its memory serves the next, and the read touches about as much fresh memory
        as one without deletes, which in a fresh process is much of a read's cost (first
        reads of the row-level benchmark's tables, median of 10 fresh processes: 0.71-0.75x
        the speed without deletes for the whole table cut at once, 0.84-0.85x batch by batch).

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
        if filt is not None:
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
                if filt is not None:
                    cut = pc.and_(cut, pc.fill_null(batch.column(kept), False))
                parts.append(batch.select(cols).filter(cut))
                seen, at = seen + n, at + n
        if at != starts[-1]:
            raise self._rows_differ(at, physical)
        return pa.Table.from_batches(parts, schema=self.arrow_schema_of(tuple(cols)))

    def _rows_differ(self, rows: int, physical: np.ndarray) -> CorruptMetadata:
        return CorruptMetadata(
            f"the data files of version {self.vm.version} hold {rows} rows where their entries say {int(physical.sum())} "
            f"(record_count + dv_cardinality, file by file); run `lamina fsck`")

    @contextmanager
    def _missing_file_is_corrupt(self) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError as e:
            raise MissingFile(f"a data file of version {self.vm.version} is missing ({e}); run `lamina fsck`") from None

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.to_arrow().to_pandas(**kwargs)

    @_expiry_aware
    def count(self) -> int:
        if isinstance(self.predicate, AlwaysTrue):
            return self.plan().record_count
        return self.to_arrow().num_rows
