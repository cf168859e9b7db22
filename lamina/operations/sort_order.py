"""Sort order changes: ``UpdateSortOrder`` and the fluent ``SortOrderUpdate`` builder.

    with table.update_sort_order() as s:
        s.asc("ts").desc("id", nulls_first=True)

The builder replaces the table's sort order as a whole (Iceberg's ``replace_sort_order``;
no fields: unsorted), one version, metadata only. The order is stored by field id in the
version manifest (renamed columns stay in it) and supersedes the older
``write.sort-order`` property, which the change removes. Writes (append, overwrite, the
rewrites of row-level changes) and compaction sort the rows of every file they write by it.

Conflicts: none with data changes (files already written stay as they are). Two
concurrent sort order changes: the later commit's order wins (it replaces the order as a
whole); a concurrent schema change that dropped a column of the new order makes the
commit fail with CommitConflict.
"""

from __future__ import annotations

from collections.abc import Callable

from lamina.commit.base import REMOVED_SCHEMA, Base, Change, Operation
from lamina.commit.checks import require_sort_sources_live
from lamina.commit.result import CommitResult
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.operations.partition_spec import MetadataBuilder
from lamina.spec.properties import TableProperties
from lamina.spec.schema import Schema
from lamina.spec.sort import SortField, SortOrder, sort_field
from lamina.spec.version import VersionManifest


class UpdateSortOrder(Operation):
    """Make ``fields`` the table's sort order."""

    conflict_checks = (require_sort_sources_live,)

    def __init__(self, fields: tuple[SortField, ...]) -> None:
        self.fields = fields

    def apply(self, base: Base) -> Change:
        schema = base.schema
        require_sort_sources_live((f.source_id for f in self.fields), schema)
        previous = base.metadata.sort_order
        order = SortOrder(0 if not self.fields else (previous.order_id if previous else 0) + 1, self.fields)
        props = dict(base.properties)
        dropped = props.pop(TableProperties.WRITE_SORT_ORDER.key, None)
        summary = {"sort-order-id": order.order_id, "sort-order": order.describe(schema)}
        return Change(
            "update-sort-order",
            base.empty(),
            REMOVED_SCHEMA.empty_table(),
            summary,
            sort_order=order,
            properties=props if dropped is not None else None,
        )


class SortOrderUpdate(MetadataBuilder):
    """Fluent builder of a new sort order (``Table.update_sort_order``,
    ``Transaction.update_sort_order``): ``asc``/``desc`` add sort fields, in order of
    significance; committing no field makes the table unsorted."""

    def __init__(self, metadata: VersionManifest, run: Callable[[Operation], CommitResult | None]) -> None:
        super().__init__(run)
        self._schema: Schema = metadata.schema
        self._fields: list[SortField] = []

    def _add(self, column: str, descending: bool, nulls_first: bool | None) -> SortOrderUpdate:
        self._check_open()
        if not isinstance(column, str):
            raise InvalidArgument(f"sort columns are given by name, got {column!r}")
        if column not in self._schema.names:
            near = [n for n in self._schema.names if n.lower() == column.lower()]
            hint = (
                f"; did you mean {near[0]!r}?"
                if len(near) == 1
                else (f"; it could be any of {near} (names are case-sensitive)" if near else "")
            )
            raise SchemaMismatch(f"no column {column!r} to sort by; columns are {self._schema.names}{hint}")
        f = sort_field(self._schema, column, descending, nulls_first)
        if any(g.source_id == f.source_id for g in self._fields):
            raise InvalidArgument(f"column {column!r} is already in the sort order; give each column once")
        self._fields.append(f)
        return self

    def asc(self, column: str, *, nulls_first: bool = True) -> SortOrderUpdate:
        """Sort by ``column`` ascending (nulls first unless told otherwise, as Iceberg)."""
        return self._add(column, False, nulls_first)

    def desc(self, column: str, *, nulls_first: bool = False) -> SortOrderUpdate:
        """Sort by ``column`` descending (nulls last unless told otherwise, as Iceberg)."""
        return self._add(column, True, nulls_first)

    @property
    def order(self) -> SortOrder:
        """The order so far (its id is assigned at commit)."""
        return SortOrder(0, tuple(self._fields))

    def operation(self) -> UpdateSortOrder:
        return UpdateSortOrder(tuple(self._fields))
