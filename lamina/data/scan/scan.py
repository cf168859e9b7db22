"""``Scan``: a read of one version, the façade users and operations get from ``Table.scan``
and ``Base.scan``.

It checks what is asked (columns, row lineage), plans with ``lamina.data.scan.plan``, reads
with ``lamina.data.scan.read`` (``ArrowRead``) and finds rows by position with
``lamina.data.scan.positions``; what it adds is the answers users want (``to_arrow``,
``to_batches``, ``count``...) and telling a file missing because its version was expired
since the scan was made (``VersionNotFound``) from a corrupt table (``MissingFile``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import cached_property, wraps
from inspect import isgeneratorfunction
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    import pyarrow.dataset as ds

from lamina.data.deletes import DV
from lamina.data.scan.plan import ScanPlan, plan_files
from lamina.data.scan.positions import DictionaryPositions
from lamina.data.scan.read import ArrowRead
from lamina.errors import LaminaError, MissingFile, RowLineageNotEnabled, VersionNotFound
from lamina.expr import AlwaysTrue, Expr, bind, to_arrow_filter, to_expr
from lamina.io import FileIO
from lamina.spec.lineage import LAST_UPDATED, LINEAGE_COLUMNS, ROW_ID, has_lineage
from lamina.spec.version import VersionManifest


class VersionKeeper(Protocol):
    """What a scan asks of its table's log (lamina.commit.VersionLog), through this layer's
    view of it: whether a version is still kept."""

    def is_live(self, version: int) -> bool: ...


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _expiry_aware(method: _Method) -> _Method:
    """``method`` of a Scan, with a missing file of a version that is no longer kept raised as
    VersionNotFound (``Scan._raise_if_no_longer_kept``) rather than MissingFile, and the
    predicate failing on a row (an overflow, a division by zero: Spark's ANSI errors) as
    EvaluationError. Generators too: a stream's files are read as it is consumed."""
    if isgeneratorfunction(method):

        @wraps(method)
        def stream(self: Scan, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(self, *args, **kwargs)
            except MissingFile as e:
                self._raise_if_no_longer_kept(e)
                raise
            except pa.ArrowInvalid as e:
                self._reader.raise_if_evaluation_error(e)
                raise

        return stream  # type: ignore[return-value]

    @wraps(method)
    def run(self: Scan, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except MissingFile as e:
            self._raise_if_no_longer_kept(e)
            raise
        except pa.ArrowInvalid as e:
            self._reader.raise_if_evaluation_error(e)
            raise

    return run  # type: ignore[return-value]


class Scan:
    """A read of one version: ``plan()`` prunes the manifest tree to file scan tasks, the
    readers return its live rows (``ArrowRead`` reads them). Built by ``Table.scan`` and, for
    the version an operation is applied to, by ``lamina.commit.Base.scan``."""

    def __init__(
        self,
        io: FileIO,
        vm: VersionManifest,
        where: str | Expr | None = None,
        columns: Sequence[str] | None = None,
        *,
        log: VersionKeeper | None = None,
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
        # What the user wrote, for the repr (the bound predicate spells out its implicit casts).
        self._where_text = where if isinstance(where, str) else None
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
        self._reader = ArrowRead(io, vm, self.predicate)

    @property
    def version(self) -> int:
        return self.vm.version

    def __repr__(self) -> str:
        shown = self._where_text if self._where_text is not None else str(self.predicate)
        where = "" if isinstance(self.predicate, AlwaysTrue) else f", where={shown!r}"
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
            "a superseded version for reads like this one for reader_grace (default 1 hour)"
        ) from missing

    @_expiry_aware
    def plan(self, all_columns: bool = False) -> ScanPlan:
        """Files that may hold matching rows: leaf summaries first, then file stats.

        ``all_columns``: every entry column (a row-level change re-lists entries whole)."""
        return plan_files(self.io, self.vm, self.predicate, lineage=self.lineage, all_columns=all_columns)

    # -- reading (lamina.data.scan.read) -------------------------------------------------

    def _read_columns(self) -> list[str]:
        return self.columns if self.columns is not None else self.schema.names

    @property
    def output_columns(self) -> tuple[str, ...]:
        """The columns a read returns: those asked for, else the schema's."""
        return tuple(self._read_columns())

    @property
    def row_filter(self) -> Any:
        """The predicate as an Arrow filter over rows; None when it selects every row."""
        return self._reader.row_filter

    def with_predicate_columns(self, columns: Sequence[str]) -> list[str]:
        """``columns`` and, after them, those the scan's predicate uses."""
        return self._reader.with_predicate_columns(columns)

    def arrow_schema_of(self, columns: tuple[str, ...]) -> pa.Schema:
        """The Arrow schema of ``columns`` of the table schema, or row lineage columns."""
        return self._reader.arrow_schema_of(columns)

    @_expiry_aware
    def read_file(
        self,
        path: str,
        columns: list[str],
        filt: Any,
        dv: DV | None = None,
        memory_pool: pa.MemoryPool | None = None,
        lineage: tuple[int, int] | None = None,
    ) -> pa.Table:
        """Rows of one data file (``ArrowRead.read_file``)."""
        return self._reader.read_file(path, columns, filt, dv, memory_pool, lineage)

    @_expiry_aware
    def read_files(self, entries: pa.Table, cols: list[str], filt: Any = None, **options: Any) -> Iterator[Any]:
        """The live rows of each file of ``entries``, one table per file, in entry order
        (``ArrowRead.read_files`` says how, and its ``options``)."""
        yield from self._reader.read_files(entries, cols, filt, **options)

    @_expiry_aware
    def read_entries(self, entries: pa.Table, cols: list[str], filt: Any) -> pa.Table:
        """The live rows of the files ``entries`` describe (``ArrowRead.read_entries``)."""
        return self._reader.read_entries(entries, cols, filt)

    # -- rows matching the predicate, by position (lamina.data.scan.positions) -----------

    @cached_property
    def _positions(self) -> DictionaryPositions:
        return DictionaryPositions(self._reader)

    @property
    def dictionary_column(self) -> str | None:
        """The one string or binary column the predicate reads, when ``matching_positions``
        can evaluate it on the column's dictionaries; else None."""
        return self._positions.dictionary_column

    @_expiry_aware
    def matching_positions(self, entries: pa.Table) -> list[np.ndarray]:
        """For each file of ``entries``, in order: the physical positions of its rows the
        predicate selects, deletion vectors not applied (``DictionaryPositions``)."""
        return self._positions.matching_positions(entries)

    # -- results ---------------------------------------------------------------------------

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
    def to_arrow(self) -> pa.Table:
        plan = self.plan()
        filt = None if isinstance(self.predicate, AlwaysTrue) else to_arrow_filter(self.predicate)
        return self.read_entries(plan.entries, self._read_columns(), filt)

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.to_arrow().to_pandas(**kwargs)

    @_expiry_aware
    def count(self) -> int:
        if isinstance(self.predicate, AlwaysTrue):
            return self.plan().record_count
        return self.to_arrow().num_rows
