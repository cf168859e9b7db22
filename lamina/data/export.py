"""Handing one version to other engines (DuckDB, Polars, anything that scans an Arrow dataset).

A version's rows are its planned data files minus the rows their deletion vectors delete.
Engines read Parquet themselves (their readers are fast); what they need from Lamina is
``LiveFiles``: the files that may hold matching rows (the planner has pruned them by
partition and statistics), where each is, how many rows each holds, and which of those rows
are deleted. ``to_pyarrow_dataset`` builds a genuine ``pyarrow.dataset.Dataset`` from it.

Why a pyarrow Dataset cannot be lazy for a file with a deletion vector: a Dataset's scan
pushes the filter into the Parquet reader, and no column of the scan says which row of its
file a row was, so no one can drop deleted rows after. A file with a DV is therefore read
by Lamina when the dataset is made (its live rows, the scan's columns, the scan's filter)
and the dataset holds those rows; every other file stays a lazy Parquet fragment. Engines
with a row-number column read every file lazily instead (``lamina.duckdb``: DuckDB's
``file_row_number``; ``lamina.polars``: Polars' selection vectors). See docs/engines.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

if TYPE_CHECKING:
    import pyarrow.dataset as ds

from lamina.data.deletes import DV, dvs_of_plan, positions_array, read_bitmaps_of
from lamina.data.scan import Scan
from lamina.io import FileIO
from lamina.spec import content as C
from lamina.spec.lineage import LINEAGE_COLUMNS, physical_rows
from lamina.spec.schema import Schema, field_id_of


@dataclass
class LiveFiles:
    """The planned data files of one scan, for an engine that reads Parquet itself."""

    scan: Scan
    entries: pa.Table

    @classmethod
    def of(cls, scan: Scan, statistics: bool = False) -> LiveFiles:
        """``statistics``: with every column's bounds and null counts (a plan otherwise reads
        only those its predicate uses)."""
        return cls(scan, scan.plan(all_columns=statistics).entries)

    def __len__(self) -> int:
        return self.entries.num_rows

    @cached_property
    def paths(self) -> list[str]:
        return self.entries.column("path").to_pylist()

    @cached_property
    def uris(self) -> list[str]:
        """Absolute locations, in plan order (a local path, or ``s3://bucket/...``)."""
        io = self.scan.io
        return [io.full_uri(p) for p in self.paths]

    @cached_property
    def rows(self) -> np.ndarray:
        """Rows each file holds (live and deleted): what a row position indexes."""
        return physical_rows(self.entries) if len(self) else np.zeros(0, dtype=np.int64)

    @cached_property
    def dvs(self) -> list[DV | None]:
        return dvs_of_plan(self.entries)

    @property
    def has_deletes(self) -> bool:
        return any(d is not None for d in self.dvs)

    @cached_property
    def deleted(self) -> list[np.ndarray | None]:
        """Each file's deleted row positions, sorted (None: no DV). The DVs of all files are
        read at once: one range request per DV file."""
        out: list[np.ndarray | None] = [None] * len(self)
        for i, bm in read_bitmaps_of(self.scan.io, self.dvs).items():
            out[i] = positions_array(bm).astype(np.int64, copy=False)
        return out

    def deleted_table(self, indices: Sequence[int] | None = None) -> pa.Table:
        """(file_index, pos) of every deleted row of the files ``indices`` (default: all):
        file_index is the file's place in ``indices`` (in the plan, for all)."""
        deleted = self.deleted if indices is None else [self.deleted[i] for i in indices]
        parts = [(i, p) for i, p in enumerate(deleted) if p is not None and len(p)]
        if not parts:
            return pa.table({"file_index": pa.array([], pa.int64()), "pos": pa.array([], pa.int64())})
        index = np.concatenate([np.full(len(p), i, dtype=np.int64) for i, p in parts])
        pos = np.concatenate([p for _, p in parts])
        return pa.table({"file_index": index, "pos": pos})

    def keep_masks(self, indices: list[int]) -> pa.Array:
        """For files ``indices``: a list<bool> per file (True: the row is live), null for a
        file without deletes; built from one flat array, no per-row Python."""
        deleted = self.deleted
        if not any(deleted[i] is not None for i in indices):
            return pa.nulls(len(indices), pa.large_list(pa.bool_()))
        sizes = np.array([self.rows[i] if deleted[i] is not None else 0 for i in indices], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        total = int(offsets[-1])
        # Arrow's bitmap (LSB first) made directly: all ones, then the deleted rows' bits
        # cleared, byte by byte; no array of one bool per row (a visible share of a large
        # Polars scan).
        parts = [offsets[k] + deleted[i] for k, i in enumerate(indices) if deleted[i] is not None]
        gone = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        bytes_ = np.full((total + 7) // 8, 0xFF, dtype=np.uint8)
        if len(gone):
            at = gone >> 3  # (ascending: positions are sorted per file, files follow in order)
            bit = np.left_shift(1, gone & 7).astype(np.uint8)
            first = np.flatnonzero(np.concatenate([[True], at[1:] != at[:-1]]))
            bytes_[at[first]] &= ~np.bitwise_or.reduceat(bit, first)
        values = pa.Array.from_buffers(pa.bool_(), total, [None, pa.py_buffer(bytes_)])
        mask = pa.array([deleted[i] is None for i in indices])
        return pa.LargeListArray.from_arrays(pa.array(offsets), values, mask=mask)

    def files_holding(self, columns: Sequence[str]) -> list[bool]:
        """Per file, whether it is known to hold each of ``columns``: its entry records the
        column's null count. Lamina's writer records one for every column it writes; a file
        written before the column was added has none (its entry predates the column), nor
        has one added by ``add_files`` without its statistics. Needs a plan with statistics."""
        names = self.entries.column_names
        known = np.ones(len(self), dtype=bool)
        for c in columns:
            col = C.nulls_col(self.scan.schema.field_id(c))
            if col not in names:
                return [False] * len(self)
            known &= self.entries.column(col).is_valid().to_numpy(zero_copy_only=False)
        return known.tolist()


def readable_by_name(scan: Scan) -> bool:
    """Whether an engine reading the files' columns by name sees the scan's columns: no
    column mapping or defaults to apply (lamina.spec.schema), no row lineage asked."""
    return not scan.schema.is_evolved and not any(c in LINEAGE_COLUMNS for c in scan.output_columns)


def statistics_guarantee(entry: dict[str, Any], rows: int, schema: Schema) -> ds.Expression:
    """What a file's manifest statistics guarantee about its rows, as an Arrow expression:
    per column ``min <= c <= max`` (or null, when the file has nulls). pyarrow prunes a
    fragment whose guarantee contradicts a scan's filter without opening it, so a filter an
    engine pushes into the dataset skips files as Lamina's planner would (floats aside).
    ``rows``: the rows the file holds (``LiveFiles.rows``), against its null count."""
    import pyarrow.dataset as ds

    parts = []
    for f in schema.arrow:
        if pa.types.is_floating(f.type):
            # pyarrow simplifies a filter against a NaN literal under a range guarantee to
            # "always true" (x < NaN, given 0 <= x <= 0): no guarantee on floats.
            continue
        fid = field_id_of(f)
        lo, hi, nulls = entry.get(C.min_col(fid)), entry.get(C.max_col(fid)), entry.get(C.nulls_col(fid))
        if nulls is None:
            continue
        field = ds.field(f.name)
        if nulls == rows:
            parts.append(field.is_null())
        elif lo is not None and hi is not None:
            bounds = (field >= pa.scalar(lo, f.type)) & (field <= pa.scalar(hi, f.type))
            parts.append(bounds | field.is_null() if nulls else bounds)
    if not parts:
        return ds.scalar(True)
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out


class _FileIOHandler(pafs.FileSystemHandler):
    """A read-only pyarrow filesystem over a table's FileIO (object stores, ``memory://``):
    Parquet fragments fetch footers and column chunks with range reads, through the same
    store (and credentials) Lamina uses. Paths are relative to the table root."""

    def __init__(self, io: FileIO) -> None:
        self.io = io

    def get_type_name(self) -> str:
        return "lamina-fileio"

    def equals(self, other: object) -> bool:
        return isinstance(other, _FileIOHandler) and other.io is self.io

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [pafs.FileInfo(p, pafs.FileType.File, size=self.io.size(p)) for p in paths]

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(_RangeFile(self.io, path), mode="r")

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self.io.get(path))

    def normalize_path(self, path: str) -> str:
        return path

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise OSError("a Lamina dataset's filesystem is read-only")

    get_file_info_selector = create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


class _RangeFile:
    """A seekable file of ranged reads (what ``pa.PythonFile`` wraps)."""

    def __init__(self, io: FileIO, path: str) -> None:
        self.io, self.path, self.pos = io, path, 0
        self.size = io.size(path)
        self.closed = False

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        data = self.io.get_range(self.path, self.pos, n) if n > 0 else b""
        self.pos += len(data)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def _filesystem(scan: Scan, paths: list[str]) -> tuple[pafs.FileSystem, list[str]]:
    """A pyarrow filesystem that opens the scan's files, and their names in it."""
    io = scan.io
    if io.is_local:
        # (local_path is None only for a file by URI on a remote store, which a local
        # filesystem could not open under any name)
        return pafs.LocalFileSystem(), [cast(str, io.local_path(p)) for p in paths]
    return pafs.PyFileSystem(_FileIOHandler(io)), list(paths)


def to_pyarrow_dataset(scan: Scan) -> ds.Dataset:
    """The scan's rows as a genuine ``pyarrow.dataset.Dataset`` (exact for every consumer):
    files without a deletion vector are lazy Parquet fragments, each with its statistics as
    a guarantee (a pushed-down filter skips files unopened, then row groups); files with one
    are read now, their live rows only (module docstring). The scan's ``where`` has pruned
    the files and filters every row; a consumer applies its own filter on top. Its columns:
    the scan's, and after them any its ``where`` uses (a Dataset filters on its own columns)."""
    import pyarrow.dataset as ds  # (lazily, as lamina.data.scan: it imports pandas)

    if not readable_by_name(scan):
        # Column mapping, defaults or row lineage: only Lamina's reader maps the files.
        return ds.dataset(scan.to_arrow())
    live = LiveFiles.of(scan, statistics=True)
    cols = (
        scan.with_predicate_columns(scan.output_columns) if scan.row_filter is not None else list(scan.output_columns)
    )
    schema = scan.arrow_schema_of(tuple(cols))
    lazy = [i for i, d in enumerate(live.dvs) if d is None]
    with_dv = [i for i, d in enumerate(live.dvs) if d is not None]
    parts: list[ds.Dataset] = []
    if lazy:
        fmt = ds.ParquetFileFormat()
        filesystem, names = _filesystem(scan, [live.paths[i] for i in lazy])
        entries = live.entries.take(pa.array(lazy, pa.int64())).to_pylist()
        fragments = [
            fmt.make_fragment(
                name, filesystem, partition_expression=statistics_guarantee(e, int(live.rows[i]), scan.schema)
            )
            for name, e, i in zip(names, entries, lazy)
        ]
        parts.append(ds.FileSystemDataset(fragments, schema, fmt, filesystem))
    if with_dv:
        entries = live.entries.take(pa.array(with_dv, pa.int64()))
        parts.append(ds.dataset(scan.read_entries(entries, cols, scan.row_filter)))
    dataset = parts[0] if len(parts) == 1 else ds.dataset(parts) if parts else ds.dataset(schema.empty_table())
    return dataset.filter(scan.row_filter) if scan.row_filter is not None else dataset


__all__ = ["LiveFiles", "readable_by_name", "statistics_guarantee", "to_pyarrow_dataset"]
