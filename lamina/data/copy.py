"""Data files made of a staged Parquet file's bytes, not of its rows decoded and encoded again.

A merge whose new rows are exactly a staged source's rows (``lamina.spark.merge`` of
``spark.read.parquet(dir)`` updating all and inserting all) would decode every column of the
source and encode it again, most of such a merge's work (BENCHMARKS.md, the Spark merge).
When the source's files are already what
the table stores (``StagedFiles.copyable``: the table's column names in order, its types and
nullability as pyarrow reads them, its compression codec, a flat unpartitioned unsorted table,
files of a fair size), each becomes a data file of its own bytes (``StagedFiles.copy``): its
column chunks as they are, the row lineage columns appended where the table keeps lineage,
under a footer of the table's own (``lamina.data.parquet_footer.joined``: physical names,
field ids, the table's Arrow schema, no float statistics, as the writer's files).

What the copy does not skip is reading the source: every page is decoded before anything is
written (``checked``), so a damaged source fails the merge as it did when it was read whole,
and the columns whose statistics its footer cannot give exactly (floats: NaN; decimals and
unsigned integers; every column of a file from a writer other than Arrow's or parquet-java)
are read for them. The copy is then checked as it is built: its footer read back by pyarrow
(schema, row groups, each column chunk where the source had it) and its lineage columns
decoded; anything unexpected is a ``FooterError`` and the caller writes the rows instead.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lamina.data.parquet_footer import joined
from lamina.data.writer import _encodings
from lamina.errors import FooterError, InvalidArgument
from lamina.io import FileIO
from lamina.manifest.entries import column_stats, values_needed
from lamina.spec.layout import new_data_path
from lamina.spec.lineage import LINEAGE_COLUMNS, LINEAGE_FIELDS
from lamina.spec.properties import WriterProperties
from lamina.spec.schema import PARQUET_FIELD_ID_KEY, Schema
from lamina.spec.sort import effective_sort_keys
from lamina.spec.stats import StatsPolicy
from lamina.spec.version import VersionManifest

# Fewer rows than this in a staged file: the writer would have put them in a file with others
# (and encodes so few rows cheaply), so they are written, not copied.
COPY_MIN_ROWS = 32_768

# The table's ``write.parquet.compression`` as pyarrow names a column chunk's codec.
_CODECS = {
    "none": "UNCOMPRESSED",
    "snappy": "SNAPPY",
    "gzip": "GZIP",
    "brotli": "BROTLI",
    "lz4": "LZ4",
    "lz4_raw": "LZ4_RAW",
    "zstd": "ZSTD",
}

# Writers whose footer statistics are those of the values (pyarrow's, parquet-java's under
# Spark): for the columns column_stats takes from a footer. Any other writer's file has its
# statistics computed from its values.
_TRUSTED_WRITERS = ("parquet-cpp-arrow ", "parquet-mr ")

# Decodes the staged files while the merge matches (one thread each: the merge has the other core).
_checks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lamina-staged")


@dataclass(frozen=True, eq=False)
class StagedFile:
    """One Parquet file of a staged source, read into memory once: its rows, its copy and the
    checks all come from these bytes, whatever happens to the file meanwhile."""

    path: str
    data: pa.Buffer
    metadata: pq.FileMetaData
    schema: pa.Schema  # as pyarrow reads it

    @classmethod
    def read(cls, path: str) -> StagedFile:
        with pa.OSFile(path) as f:
            data = f.read_buffer()
        pf = pq.ParquetFile(pa.BufferReader(data))
        return cls(path, data, pf.metadata, pf.schema_arrow)

    def columns(self, names: Sequence[str], use_threads: bool = True) -> pa.Table:
        return pq.ParquetFile(pa.BufferReader(self.data), metadata=self.metadata).read(
            columns=list(names), use_threads=use_threads
        )


class StagedFiles:
    """A staged Parquet source: its files, in order (the source's rows are theirs, in order)."""

    def __init__(self, files: Sequence[StagedFile]) -> None:
        self.files = list(files)
        self._lock = threading.Lock()
        self._checked: list[tuple[Schema, StatsPolicy, Future]] = []
        self._decoded: set[str] = set()  # columns ``read`` has decoded in every file (checked, then)

    @property
    def num_rows(self) -> int:
        return sum(f.metadata.num_rows for f in self.files)

    def read(self, columns: Sequence[str]) -> pa.Table:
        """The source's rows of ``columns``, every file in order."""
        rows = pa.concat_tables([f.columns(columns) for f in self.files])
        with self._lock:
            self._decoded.update(columns)
        return rows

    def copyable(self, schema: Schema, spec: Any, sort_keys: Sequence[Any], writer: WriterProperties) -> bool:
        """Whether each file is what the table stores, so that it may become a data file as it
        is: the table flat, unpartitioned and unsorted (a write would lay the rows out); each
        file's columns the table's (names in order, types and nullability as pyarrow reads
        them), compressed by the table's codec, with COPY_MIN_ROWS to ``max_rows_per_file``
        rows. (Encodings and row groups are the file's own: any standard Parquet reader reads
        them, and compaction rewrites the file as the writer would.)"""
        if (spec is not None and not spec.is_unpartitioned) or sort_keys:
            return False
        want = schema.arrow
        if any(pa.types.is_nested(f.type) for f in want):
            return False
        codec = _CODECS.get(writer.parquet_compression)
        for f in self.files:
            md = f.metadata
            if not COPY_MIN_ROWS <= md.num_rows <= writer.max_rows_per_file or md.num_columns != len(want):
                return False
            if f.schema.names != want.names or any(
                not a.type.equals(b.type) or a.nullable != b.nullable for a, b in zip(f.schema, want)
            ):
                return False
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                if any(rg.column(j).compression != codec for j in range(rg.num_columns)):
                    return False
        return True

    def copyable_to(self, vm: VersionManifest) -> bool:
        """``copyable`` for the table as version ``vm`` has it."""
        return self.copyable(
            vm.schema, vm.partition_spec, effective_sort_keys(vm), WriterProperties.from_properties(vm.properties)
        )

    def checked(self, schema: Schema, policy: StatsPolicy) -> Future:
        """Each file's column statistics (``column_stats``, for a table of ``schema`` keeping
        ``policy``'s), once every page of it has been decoded: started on first call, in the
        background (InvalidArgument from the future for a file that does not decode)."""
        with self._lock:
            for s, p, fut in self._checked:
                if s == schema and p == policy:
                    return fut
            decoded = frozenset(self._decoded)
            fut = _checks.submit(lambda: [_check(f, schema, policy, decoded) for f in self.files])
            self._checked.append((schema, policy, fut))
            return fut

    def copy(
        self,
        io: FileIO,
        schema: Schema,
        policy: StatsPolicy,
        write_id: str,
        writer: WriterProperties,
        lineage: pa.Table | None = None,
    ) -> list[dict[str, Any]]:
        """Each file as a data file of the table (``copyable`` must hold), named by ``write_id``:
        entry dicts as ``write_data_files`` gives them. ``lineage``: the row lineage columns
        (LINEAGE_FIELDS) of the source's rows, stored after the table's. Every copy is built and
        checked before the first is stored: FooterError (nothing stored) where one is not as
        expected; InvalidArgument where a file does not decode."""
        stats = self.checked(schema, policy).result()
        physical = schema.physical_arrow
        names = [schema.physical_names[f.name] for f in schema.arrow]
        field_ids = [
            int(f.metadata[PARQUET_FIELD_ID_KEY]) if f.metadata and PARQUET_FIELD_ID_KEY in f.metadata else None
            for f in physical
        ]
        floats = [i for i, f in enumerate(physical) if pa.types.is_floating(f.type)]
        expected = pa.schema([*physical, *(LINEAGE_FIELDS if lineage is not None else ())])
        key_value = [(b"ARROW:schema", base64.b64encode(expected.serialize().to_pybytes()))]
        built, at = [], 0
        for f in self.files:
            n = f.metadata.num_rows
            part = None if lineage is None else lineage.slice(at, n)
            at += n
            extra = None if part is None else _lineage_file(part, f.metadata, writer)
            data = joined(f.data, extra, names=names, field_ids=field_ids, without_stats=floats, key_value=key_value)
            _verify(data, f, expected, part)
            built.append(data)
        out = []
        for f, data, st in zip(self.files, built, stats):
            path = new_data_path(None, write_id)
            io.put_new(path, pa.py_buffer(data))
            out.append(
                {"path": path, "size": len(data), "record_count": f.metadata.num_rows, "partition_path": None, **st}
            )
        return out


def _check(f: StagedFile, schema: Schema, policy: StatsPolicy, decoded: frozenset[str]) -> dict[str, Any]:
    """``f``'s column statistics; every page decoded (the columns they need read, the others
    scanned but those ``decoded`` already: the keys a merge has read)."""
    created_by = f.metadata.created_by or ""
    footer = f.metadata if created_by.startswith(_TRUSTED_WRITERS) else None
    needed = values_needed(schema, policy, footer)
    try:
        values = f.columns(needed, use_threads=False)
        rest = [n for n in f.schema.names if n not in needed and n not in decoded]
        if rest:
            pq.ParquetFile(pa.BufferReader(f.data), metadata=f.metadata).scan_contents(columns=rest)
    except (OSError, pa.ArrowException) as e:
        raise InvalidArgument(f"the staged Parquet file {f.path} could not be read: {e}. Nothing was committed.") from e
    return column_stats(values, schema, policy, footer=footer)


def _lineage_file(lineage: pa.Table, source: pq.FileMetaData, writer: WriterProperties) -> pa.Buffer:
    """A Parquet file of ``lineage``'s columns in row groups of ``source``'s sizes, encoded as
    the writer encodes them (statistics kept: a publish by rebase reads the ids' maximum there)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink,
        lineage.schema,
        compression=writer.parquet_compression,
        store_schema=False,
        **_encodings(lineage, writer.parquet_integer_encoding),
    ) as w:
        at = 0
        for g in range(source.num_row_groups):
            n = source.row_group(g).num_rows
            w.write_table(lineage.slice(at, n), row_group_size=max(n, 1))
            at += n
    return sink.getvalue()


def _verify(data: bytes, f: StagedFile, expected: pa.Schema, lineage: pa.Table | None) -> None:
    """The joined file as pyarrow reads it: ``expected``'s columns, ``f``'s row groups, each of
    ``f``'s column chunks where ``f`` has it, and the lineage columns as given."""
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        md, src = pf.metadata, f.metadata
        same = (
            pf.schema_arrow.equals(expected) and md.num_rows == src.num_rows and md.num_row_groups == src.num_row_groups
        )
        for g in range(src.num_row_groups if same else 0):
            a, b = md.row_group(g), src.row_group(g)
            same = same and a.num_rows == b.num_rows
            for j in range(b.num_columns):
                x, y = a.column(j), b.column(j)
                same = same and (
                    x.data_page_offset,
                    x.dictionary_page_offset,
                    x.total_compressed_size,
                    x.num_values,
                ) == (y.data_page_offset, y.dictionary_page_offset, y.total_compressed_size, y.num_values)
        if same and lineage is not None:
            same = pf.read(columns=list(LINEAGE_COLUMNS)).equals(lineage)
    except (OSError, pa.ArrowException) as e:
        raise FooterError(f"the copy of {f.path} does not read back: {e}") from e
    if not same:
        raise FooterError(f"the copy of {f.path} does not read back as its source")
