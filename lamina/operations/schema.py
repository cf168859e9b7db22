"""Schema changes as operations: ``UpdateSchema`` and the fluent ``SchemaUpdate`` builder.

    with table.update_schema() as u:
        u.add_column("email", pa.string(), doc="work address")
        u.rename_column("ts", "event_time")
        u.update_column("amount", type=pa.float64())

A schema change is one version and metadata only (see ``lamina.spec.schema_update``
for why no data file needs rewriting). The builder checks every call at once
against the schema it started from, so a bad change raises where it is made.

Conflicts (also docs/format.md, Conflicts and retries): at commit a standalone
schema change is re-applied, by path, to the latest schema. Two schema changes
conflict only when the second no longer makes sense on the first's result (e.g.
both add a column ``email``): it then fails with CommitConflict naming the change,
and nothing is committed. In a transaction (also ``schema_mode``) a schema change
is strict: any concurrent schema change fails it with CommitConflict (its files'
statistics are keyed by the field ids it planned).

A schema change itself never fails because of a concurrent data change. The data
change, re-applied after a schema change, keeps serializability:

- appends and compaction never conflict: files are read by field id, whichever
  schema wrote them (a dropped and re-added name is a new column: the old values
  never resurface under it);
- a delete or ``overwrite(where)`` fails with CommitConflict if a column its
  condition uses was dropped, renamed or dropped and re-added (``PlannedColumns``);
- an update or merge writes whole rows in the schema it was planned on: any
  concurrent change of the table's columns fails it with CommitConflict, where it
  would otherwise null a value a concurrent write set in a column it does not know.

So a merge whose condition uses a column that a concurrent commit drops either
lands first (then the drop) or fails clearly; never a wrong row or a silent loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina.commit.base import REMOVED_SCHEMA, Base, Change, Operation
from lamina.commit.checks import column_identity, require_schema_change_applies, require_schema_unchanged
from lamina.commit.result import CommitResult
from lamina.errors import InvalidArgument
from lamina.spec.properties import TableProperties
from lamina.spec.schema import Schema, field_id_of, normalize_type, note_stored_units
from lamina.spec.schema_update import (
    AddColumn,
    DropColumn,
    MoveColumn,
    Path,
    RenameColumn,
    ReplaceColumn,
    SchemaChange,
    UpdateColumn,
    apply_schema_changes,
    as_path,
    check_protected,
    show_path,
    widens,
)
from lamina.spec.sort import effective_sort_order
from lamina.spec.stats import COLUMN_PREFIX, column_mode_keys
from lamina.spec.version import VersionManifest


def protected_columns(vm: VersionManifest) -> dict[int, str]:
    """Field id -> what uses the column in version ``vm``: its partition spec's fields and its
    sort order (set by ``update_sort_order``, or the ``write.sort-order`` property)."""
    out: dict[int, str] = {}
    for pf in vm.partition_spec.fields:
        out.setdefault(pf.source_id, f"partition field {pf.name!r}")
    for fid in effective_sort_order(vm.schema, vm.sort_order, vm.properties).source_ids:
        out.setdefault(fid, "the table's sort order")
    return out


@dataclass(frozen=True)
class PlannedColumns:
    """The columns a data change was planned on (name, field id and, for whole rows, type),
    checked against the schema of each base it is applied to (by
    ``lamina.commit.checks.require_columns_unchanged``).

    A delete or an overwrite's condition names columns: applied after a concurrent drop,
    rename, or drop and re-add of one of them, it would test another column (or none), so
    it fails with CommitConflict instead. An update or merge writes whole rows built in the
    planned schema: applied after any concurrent change of the columns (even an add: a
    concurrent write may have set the new column in a row it rewrites), it could silently
    lose values, so it fails with CommitConflict too. Appends never conflict: their files
    are read by field id whatever schema wrote them."""

    columns: frozenset[tuple[Any, ...]]
    whole_rows: bool

    @classmethod
    def of(cls, schema: Schema, names: Iterable[str] | None = None) -> PlannedColumns:
        """``names`` (a condition's columns) or, if None, every column (whole rows)."""
        whole = names is None
        fields = schema.arrow if whole else [schema.field(n) for n in names]  # type: ignore[union-attr]
        return cls(frozenset(column_identity(f, whole) for f in fields), whole)


def renamed_properties(properties: Mapping[str, str], old: Schema, new: Schema) -> dict[str, str] | None:
    """``properties`` with column names that a rename changed updated (the sort order, the
    keys of columns' statistics modes); None if nothing changed."""
    by_id = {field_id_of(f): f.name for f in new.arrow}

    def renamed(name: str) -> str:
        return by_id.get(old.field_id(name), name) if name in old.names else name

    out = dict(properties)
    sort = TableProperties.WRITE_SORT_ORDER.get(properties)
    if sort and tuple(map(renamed, sort)) != tuple(sort):
        out[TableProperties.WRITE_SORT_ORDER.key] = TableProperties.WRITE_SORT_ORDER.render(tuple(map(renamed, sort)))
    for name, mode in column_mode_keys(properties).items():
        del out[COLUMN_PREFIX + name]
        out[COLUMN_PREFIX + renamed(name)] = mode
    return None if out == dict(properties) else out


class UpdateSchema(Operation):
    """Apply schema ``changes`` (planned against schema ``planned_schema_id``) to the base's schema.

    ``strict``: the base's schema must still be the planned one (a transaction that also
    wrote data files: their statistics are keyed by the field ids the planned schema gave
    new columns, which a re-application on another schema could give other columns)."""

    conflict_checks = (require_schema_unchanged, require_schema_change_applies)

    def __init__(
        self,
        changes: Sequence[SchemaChange],
        planned_schema_id: int,
        *,
        strict: bool = False,
        planned: tuple[Schema, Schema] | None = None,
    ) -> None:
        self.changes = list(changes)
        self.planned_schema_id = planned_schema_id
        self.strict = strict
        # (schema the changes were made on, their result): a base with that very schema
        # gets the result without applying the changes again (the usual case).
        self.planned = planned

    @property
    def planned_schema(self) -> Schema:
        """The schema the changes make of the one they were planned on (what a write staged
        with them writes its files for)."""
        if self.planned is None:
            raise InvalidArgument("this schema update was not planned by a SchemaUpdate builder")
        return self.planned[1]

    def new_schema(self, vm: VersionManifest) -> Schema:
        base_schema = vm.schema
        if self.strict:
            require_schema_unchanged(base_schema, self.planned_schema_id)
        if self.planned is not None and self.planned[0] == base_schema:
            check_protected(base_schema, self.planned[1], protected_columns(vm))  # the spec may have changed
            return self.planned[1]
        with require_schema_change_applies(base_schema, self.planned_schema_id):
            return apply_schema_changes(base_schema, self.changes, protected_columns(vm))

    def apply(self, base: Base) -> Change:
        new = self.new_schema(base.metadata)
        summary = {"schema-id": new.schema_id, "schema-changes": "; ".join(c.describe() for c in self.changes)}
        return Change(
            "update-schema",
            base.empty(),
            REMOVED_SCHEMA.empty_table(),
            summary,
            schema=new,
            properties=renamed_properties(base.properties, base.schema, new),
        )


def _position(first: bool, after: Path | None, before: Path | None) -> tuple[str, Any] | None:
    given = [x for x in (first or None, after, before) if x is not None]
    if len(given) > 1:
        raise InvalidArgument("give at most one of first=True, after=... and before=...")
    if first:
        return ("first", None)
    if after is not None:
        return ("after", as_path(after))
    if before is not None:
        return ("before", as_path(before))
    return None


class SchemaUpdate:
    """Fluent builder of one schema change (``Table.update_schema``, ``Transaction.update_schema``).

    Every call is checked at once against the schema so far; ``commit()`` (or leaving a
    ``with`` block without an exception) commits the changes as one version, or queues
    them in the transaction."""

    def __init__(
        self,
        vm: VersionManifest,
        run: Callable[[UpdateSchema], CommitResult | None],
        *,
        strict: bool = False,
    ) -> None:
        self._base = vm.schema
        self._protected = protected_columns(vm)
        self._current = vm.schema
        self._changes: list[SchemaChange] = []
        self._run = run
        self._strict = strict
        self._done = False

    @property
    def schema(self) -> pa.Schema:
        """The schema as the changes so far make it."""
        return self._current.arrow

    def _add(self, change: SchemaChange) -> SchemaUpdate:
        if self._done:
            raise InvalidArgument("this schema update was already committed; start a new one with update_schema()")
        self._current = apply_schema_changes(self._current, [change], self._protected)
        self._changes.append(change)
        return self

    def add_column(
        self,
        path: Path,
        type: pa.DataType,
        *,
        doc: str | None = None,
        default: Any = None,
        required: bool = False,
        after: Path | None = None,
        before: Path | None = None,
        first: bool = False,
    ) -> SchemaUpdate:
        """Add a column (``"a.b"`` inside struct ``a``). Optional unless ``required`` (which needs
        a ``default``). ``default``: what rows written before read, and what writes that lack
        the column store."""
        change = AddColumn(as_path(path), type, required, doc, default, _position(first, after, before))  # type: ignore[arg-type]
        self._add(change)
        note_stored_units(show_path(change.path), type)
        return self

    def drop_column(self, path: Path) -> SchemaUpdate:
        return self._add(DropColumn(as_path(path)))  # type: ignore[arg-type]

    def rename_column(self, path: Path, new_name: str) -> SchemaUpdate:
        return self._add(RenameColumn(as_path(path), new_name))  # type: ignore[arg-type]

    def move_column(
        self, path: Path, *, first: bool = False, after: Path | None = None, before: Path | None = None
    ) -> SchemaUpdate:
        position = _position(first, after, before)
        if position is None:
            raise InvalidArgument("move_column needs first=True, after=... or before=...")
        return self._add(MoveColumn(as_path(path), position))  # type: ignore[arg-type]

    def update_column(
        self, path: Path, type: pa.DataType | None = None, *, nullable: bool | None = None, doc: str | None = None
    ) -> SchemaUpdate:
        """Widen a column's type, make it optional (``nullable=True``) or set its doc."""
        return self._add(UpdateColumn(as_path(path), type, nullable, doc))  # type: ignore[arg-type]

    def union_by_name(self, schema: pa.Schema, *, widen: bool = True) -> SchemaUpdate:
        """Add the columns (at any depth) of ``schema`` the table lacks, and (``widen``) widen
        the ones ``schema`` has wider (what ``schema_mode="merge"`` does on write, widening only
        where the table property ``schema.type-widening.enabled`` is true)."""
        for change in merge_changes(self._current, schema, widen=widen):
            self._add(change)
        return self

    def replace_with(self, schema: pa.Schema) -> SchemaUpdate:
        """Make the table's columns exactly ``schema``'s, in its order (what
        ``schema_mode="overwrite"`` does with an overwrite of every row): a column of both keeps
        its id if its type is the same or wider, otherwise it is replaced."""
        for change in overwrite_changes(self._current, schema):
            self._add(change)
        return self

    def commit(self) -> CommitResult | None:
        """Commit the changes as one version (its ``CommitResult``; nothing committed if there
        were none); None if the update is part of a transaction (it commits with it)."""
        if self._done:
            raise InvalidArgument("this schema update was already committed")
        self._done = True
        if not self._changes:
            return CommitResult(None)
        # One version, one new schema id (the builder's running schema counted every call).
        result = Schema(self._current.arrow, self._base.schema_id + 1, self._current.last_column_id)
        planned = (self._base, result)
        return self._run(UpdateSchema(self._changes, self._base.schema_id, strict=self._strict, planned=planned))

    def __enter__(self) -> SchemaUpdate:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and not self._done:
            self.commit()


def widens_on_merge(vm: VersionManifest) -> bool:
    """Whether a write with ``schema_mode="merge"`` into version ``vm`` widens columns the data
    holds wider (table property ``schema.type-widening.enabled``, Delta's opt-in), or only adds
    columns."""
    return TableProperties.SCHEMA_TYPE_WIDENING_ENABLED.get(vm.properties) == "true"


def merge_changes(
    table: Schema, data: pa.Schema, prefix: tuple[str, ...] = (), *, widen: bool = True
) -> list[SchemaChange]:
    """The changes that make ``table`` accept ``data``: columns it lacks added (optional, at
    any depth), and (``widen``) columns ``data`` has wider widened. Columns ``data`` lacks
    stay; a column whose type the data holds as it is stored (a nanosecond timestamp for a
    microsecond column, a large_string for a string) is no change."""
    changes: list[SchemaChange] = []
    fields = table.arrow if not prefix else _struct_at(table, prefix)
    have = {f.name: f for f in fields}
    for f in data:
        path = prefix + (f.name,)
        mine = have.get(f.name)
        if mine is None:
            changes.append(AddColumn(path, f.type))
            note_stored_units(show_path(path), f.type)
        elif pa.types.is_struct(mine.type) and pa.types.is_struct(f.type):
            changes += merge_changes(table, pa.schema(list(f.type)), path, widen=widen)
        elif widen and not pa.types.is_nested(mine.type):
            stored = normalize_type(f.type)
            if not mine.type.equals(stored) and widens(mine.type, stored):
                changes.append(UpdateColumn(path, stored))
    return changes


def _struct_at(schema: Schema, path: tuple[str, ...]) -> list[pa.Field]:
    t = schema.field(path[0]).type
    for name in path[1:]:
        t = t.field(name).type
    return list(t)


def overwrite_changes(table: Schema, data: pa.Schema) -> list[SchemaChange]:
    """The changes that make ``table`` exactly ``data``'s columns, in its order, for an
    overwrite of every row (``schema_mode="overwrite"``): a column of both keeps its id if its
    type is the same or wider, otherwise it is replaced."""
    changes: list[SchemaChange] = []
    drops: list[DropColumn] = []
    incoming = {f.name: f for f in data}
    kept = []
    for f in table.arrow:
        new = incoming.get(f.name)
        if new is None:
            drops.append(DropColumn((f.name,)))
            continue
        t = normalize_type(new.type)
        if widens(f.type, t):  # the same type, or a wider one (a nested type only the same)
            kept.append(f.name)
            if not f.type.equals(t):
                changes.append(UpdateColumn((f.name,), t))
            if f.nullable != new.nullable and new.nullable:
                changes.append(UpdateColumn((f.name,), nullable=True))
    # Drops after adds: a table always keeps a column. A column of both whose type cannot
    # widen is replaced in place.
    for f in data:
        if f.name not in kept:
            changes.append(ReplaceColumn((f.name,), f.type) if f.name in table.names else AddColumn((f.name,), f.type))
            note_stored_units(f.name, f.type)
    changes += drops
    previous = None
    for f in data:
        changes.append(MoveColumn((f.name,), ("first", None) if previous is None else ("after", (previous,))))
        previous = f.name
    return changes
