"""What an operation sees of the version it is applied to, and what it gives back.

The committer applies every operation to a ``Base``: the metadata of the version
the operation applies to (the latest version at that attempt, or within a
transaction that version plus the transaction's earlier operations), a scan of
it, its live entries, and a writer for new data files. An operation returns a
``Change``. Nothing here knows ``Table``: operations reach the table only
through this context, so an engine, a transaction and a retry all apply them
the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from lamina.data.copy import StagedFiles
from lamina.data.scan import Scan
from lamina.data.writer import RowGroups, write_data_files, write_data_stream
from lamina.errors import InvalidArgument
from lamina.expr import Expr
from lamina.io import FileIO
from lamina.manifest.entries import conform, data_entries, fill_constant, manifest_schema_of
from lamina.manifest.tree import live_data_entries
from lamina.spec.properties import TableProperties, WriterProperties
from lamina.spec.schema import Schema
from lamina.spec.sort import effective_sort_keys, sort_rows
from lamina.spec.stats import StatsPolicy, stats_policy
from lamina.spec.version import VersionManifest

# What a change removes: the live files' paths and the versions that added them (which is
# how the manifest tree finds the leaves that hold them without reading every leaf).
# Summary counts the committer computes from the manifest tree's result; a transaction's
# operations' own figures for them are replaced by the transaction's totals.
COUNT_KEYS = ("added-files", "removed-files", "added-records", "removed-records")

REMOVED_SCHEMA = pa.schema([pa.field("path", pa.string()), pa.field("added_version", pa.int64())])


def removed_of(entries: pa.Table) -> pa.Table:
    """The REMOVED_SCHEMA rows that remove the files ``entries`` describe."""
    return pa.table(
        {"path": entries.column("path"), "added_version": entries.column("added_version")}, schema=REMOVED_SCHEMA
    )


@dataclass
class Change:
    """What one operation does to one base."""

    operation: str
    added: pa.Table  # data-file entries to add (manifest schema)
    removed: pa.Table  # REMOVED_SCHEMA: live files to remove
    summary: dict[str, Any] = field(default_factory=dict)
    schema: Schema | None = None  # new schema, if the operation changes it
    partition_spec: Any = None  # new partition spec (a PartitionSpec), if the operation changes it
    sort_order: Any = None  # new sort order (a lamina.spec.sort.SortOrder), if the operation changes it
    properties: dict[str, str] | None = None
    app_transactions: dict[str, int] | None = None
    readds: bool = False  # ``added`` includes files an earlier version removed (rollback, add_files)
    writer_features: tuple[str, ...] = ()  # writer features the change turns on (e.g. row lineage)
    # A version whose content the new version takes as it is (a branch published by
    # fast-forward: lamina.operations.publish); ``added``/``removed`` are then empty.
    tree: VersionManifest | None = None
    # (first, next): the row ids ``added`` already holds, given from the table's row id counter
    # at ``first`` (and ``data_version`` the version being made), as ``assign_row_ids`` would:
    # an append built on the version it commits onto. The committer keeps them if its counter
    # is at ``first`` when it reaches this change, and gives ids afresh otherwise.
    row_ids: tuple[int, int] | None = None

    @property
    def is_empty(self) -> bool:
        return (
            not self.added.num_rows
            and not self.removed.num_rows
            and self.schema is None
            and self.partition_spec is None
            and self.sort_order is None
            and self.properties is None
            and not self.writer_features
            and self.tree is None
        )


class Operation:
    """A change as data (every operation subclasses this): ``apply`` runs once per commit attempt, on that attempt's base, and
    raises CommitConflict if the base no longer allows it. Work that does not depend on
    the base (writing new rows) is done once, before the first attempt, and reused.

    ``skip_if_noop``: a change that turns out to change nothing (a delete that matched no
    row) commits no version. ``refresh_base``: the operation reads the base's files, so
    it starts from the latest version instead of the one its table object holds.

    ``conflict_checks``: the named checks of ``lamina.commit.checks`` the operation runs
    against each base (what a concurrent commit must not have done); every operation
    declares its own (an empty tuple: it applies to any base)."""

    conflict_checks: ClassVar[tuple[Callable[..., Any], ...] | None] = None
    skip_if_noop: ClassVar[bool] = False
    refresh_base: ClassVar[bool] = False

    def apply(self, base: Base) -> Change:
        raise NotImplementedError


@lru_cache(maxsize=64)
def _empty_entries(mschema: pa.Schema) -> pa.Table:
    # A wide table's manifest schema has three statistics columns per column: building its
    # empty table costs ms, and a metadata-only change asks for one per commit attempt.
    return mschema.empty_table()


class Base:
    """The version an operation is applied to, and the tools to build its change.

    ``metadata`` is what the operation sees (within a transaction: the base plus the
    earlier operations, built lazily, only when an operation looks); ``version`` is the
    version the commit creates, which every new entry is stamped with."""

    def __init__(self, io: FileIO, metadata: VersionManifest | Callable[[], VersionManifest], version: int) -> None:
        self.io = io
        self._metadata = metadata
        self.version = version

    @cached_property
    def metadata(self) -> VersionManifest:
        return self._metadata if isinstance(self._metadata, VersionManifest) else self._metadata()

    @property
    def schema(self) -> Schema:
        return self.metadata.schema

    @property
    def partition_spec(self) -> Any:
        return self.metadata.partition_spec

    @property
    def properties(self) -> dict[str, str]:
        return self.metadata.properties

    @property
    def manifest_schema(self) -> pa.Schema:
        return manifest_schema_of(self.metadata)

    # -- reading the base ----------------------------------------------------------------

    def scan(self, where: str | Expr | None = None, columns: Sequence[str] | None = None) -> Scan:
        return Scan(self.io, self.metadata, where, columns)

    def entries(self, where: str | Expr | None = None) -> pa.Table:
        """Live data-file entries (every manifest column), pruned by ``where``."""
        return self.scan(where).plan(all_columns=True).entries

    def live_entries(self, columns: list[str] | None = None) -> pa.Table:
        """Every live data-file entry (``columns`` of them), without a predicate."""
        vm = self.metadata
        return live_data_entries(
            self.io, vm.root_manifest, self.manifest_schema, columns=columns, inline=vm.root_inline
        )

    # -- building the change --------------------------------------------------------------

    def stamp(self, entries: pa.Table, built_for: int | None = None) -> pa.Table:
        """New entries as the committed version records them: in the base's manifest schema,
        added by ``version``. ``built_for``: the version ``new_files`` built ``entries`` for;
        when it is this one (an append's first attempt, most often) and the manifest schema
        is the same, they are already what it records (no column is set again)."""
        if built_for == self.version and entries.schema.equals(self.manifest_schema):
            return entries
        e = conform(entries, self.manifest_schema)
        return fill_constant(e, added_version=self.version, status=1, removed_version=None)

    def empty(self) -> pa.Table:
        return _empty_entries(self.manifest_schema)

    def new_files(self, files: list[dict[str, Any]], row_ids_from: int | None = None) -> pa.Table:
        """Entries for data files written for this base (see ``lamina.data.writer``);
        ``row_ids_from``: their row ids, from that counter (see ``Change.row_ids``)."""
        vm = self.metadata
        return data_entries(files, self.manifest_schema, self.version, vm.partition_spec.spec_id, row_ids_from)

    def write(
        self,
        rows: pa.Table,
        write_id: str,
        *,
        max_rows: int | None = None,
        pending: Any = None,
        sort_by: Sequence[Any] | None = None,
        row_ids_from: int | None = None,
    ) -> pa.Table:
        """Write ``rows`` (in the base's schema) as data files named by ``write_id``, laid out
        by the current partition spec and sorted by ``sort_by`` (``lamina.spec.sort.sort_rows``
        keys; default: the table's sort order); their entries (``row_ids_from``: see
        ``new_files``)."""
        vm = self.metadata
        rows = sort_rows(rows, self.sort_keys if sort_by is None else sort_by)
        return self.new_files(
            write_data_files(
                self.io,
                vm.schema,
                vm.partition_spec,
                rows,
                write_id,
                self._max_rows(max_rows),
                compression=self.writer.parquet_compression,
                pending=pending,
                stats=self.stats_policy,
                integer_encoding=self.writer.parquet_integer_encoding,
                small_file_bytes=self.writer.parquet_small_file_bytes,
                row_groups=RowGroups.of(self.writer),
            ),
            row_ids_from,
        )

    def can_copy(self, staged: StagedFiles) -> bool:
        """Whether staged Parquet files may become this base's data files as they are (``StagedFiles.copyable``)."""
        return staged.copyable_to(self.metadata)

    def copy_staged(self, staged: StagedFiles, write_id: str, lineage: pa.Table | None = None) -> pa.Table:
        """``write`` of a staged source's rows, as its files' own bytes (``can_copy`` must hold;
        ``lineage``: the rows' lineage columns); FooterError where a copy is not as expected."""
        return self.new_files(staged.copy(self.io, self.schema, self.stats_policy, write_id, self.writer, lineage))

    def write_stream(
        self, tables: Iterable[pa.Table], write_id: str, max_rows: int, memory_pool: pa.MemoryPool | None = None
    ) -> pa.Table:
        """``write`` for an unpartitioned table, from a stream of tables (see write_data_stream)."""
        return self.new_files(
            write_data_stream(
                self.io,
                self.metadata.schema,
                tables,
                write_id,
                self._max_rows(max_rows),
                compression=self.writer.parquet_compression,
                memory_pool=memory_pool,
                stats=self.stats_policy,
                integer_encoding=self.writer.parquet_integer_encoding,
                row_groups=RowGroups.of(self.writer),
            )
        )

    @cached_property
    def sort_keys(self) -> list[tuple[str, str, str]]:
        """The table's sort order, as ``sort_rows`` keys (empty: unsorted)."""
        return effective_sort_keys(self.metadata)

    @cached_property
    def stats_policy(self) -> StatsPolicy:
        """Which column statistics the table's entries keep (``write.metadata.metrics.*``)."""
        return stats_policy(self.schema, self.properties)

    @cached_property
    def writer(self) -> WriterProperties:
        """The table's writer settings (``write.*`` properties)."""
        return WriterProperties.from_properties(self.properties)

    def _max_rows(self, max_rows: int | None) -> int:
        limit = self.writer.max_rows_per_file
        n = limit if max_rows is None else min(max_rows, limit)
        if n < 1:
            raise InvalidArgument(f"{TableProperties.WRITE_MAX_ROWS_PER_FILE.key} must be >= 1")
        return n


def combine(changes: Sequence[Change], base_version: int) -> Change:
    """One change with the effect of ``changes`` applied in order to version ``base_version``
    (a transaction's operations).

    A file added by one change and removed by a later one never reaches the version; a
    file of the base removed (or given a new deletion vector, which is a removal plus an
    addition of the same path) several times is removed once, and only its last
    replacement is added."""
    if len(changes) == 1:
        return changes[0]
    if any(c.tree is not None for c in changes):
        raise InvalidArgument(
            "a publish of a branch is a version of its own: it cannot share a transaction with other changes"
        )
    added: list[pa.Table] = []
    removed: list[pa.Table] = []
    summary: dict[str, Any] = {"operations": ",".join(c.operation for c in changes)}
    out = Change("transaction", pa.table({}), REMOVED_SCHEMA.empty_table(), summary)
    for c in changes:
        if c.removed.num_rows:
            gone = c.removed.column("path")
            added = [a.filter(pc.invert(pc.is_in(a.column("path"), value_set=gone))) for a in added]
            removed.append(c.removed.filter(pc.less_equal(c.removed.column("added_version"), base_version)))
        if c.added.num_rows:
            added.append(c.added)
        for k, v in c.summary.items():
            if k in COUNT_KEYS:
                continue
            if isinstance(v, int) and not isinstance(v, bool) and isinstance(summary.get(k), int):
                summary[k] += v
            else:
                summary[k] = v
        out.schema = c.schema or out.schema
        out.partition_spec = c.partition_spec or out.partition_spec
        out.sort_order = c.sort_order if c.sort_order is not None else out.sort_order
        out.properties = c.properties if c.properties is not None else out.properties
        if c.app_transactions:
            out.app_transactions = {**(out.app_transactions or {}), **c.app_transactions}
        out.readds = out.readds or c.readds
        out.writer_features = (*out.writer_features, *(f for f in c.writer_features if f not in out.writer_features))
    schema = changes[-1].added.schema
    out.added = pa.concat_tables([conform(a, schema) for a in added]) if added else changes[-1].added
    if removed:
        r = pa.concat_tables(removed)
        first = pc.unique(r.column("path"))
        r = r.take(pc.index_in(first, value_set=r.column("path")))
        out.removed = r
    return out
