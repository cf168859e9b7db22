"""Sort orders: how writers order the rows of the data files they write.

A ``SortOrder`` (Iceberg's) is a list of sort fields, each a source column by field id,
a direction and a null order, so a renamed column stays in the order without any
rewrite. It lives in the version manifest (``sort_order``) once a table's order was
set with ``Table.update_sort_order``; before that, the older table property
``write.sort-order`` (column names, ascending, nulls last) is the order, if set.
``effective_sort_keys`` resolves either into the keys ``sort_rows`` sorts a table by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina.errors import CorruptMetadata, InvalidArgument, SchemaMismatch
from lamina.spec.properties import TableProperties
from lamina.spec.schema import Schema

ASC, DESC = "asc", "desc"
NULLS_FIRST, NULLS_LAST = "nulls-first", "nulls-last"

# A sort key as ``sort_rows`` takes it: (column name, "ascending"|"descending", "at_start"|"at_end"),
# or a bare column name (ascending, nulls last). Plain tuples: they travel to Spark tasks.
SortKey = "str | tuple[str, str, str]"


@dataclass(frozen=True)
class SortField:
    source_id: int
    direction: str = ASC
    null_order: str = NULLS_FIRST

    def to_json(self) -> dict[str, Any]:
        return {"source_id": self.source_id, "direction": self.direction, "null_order": self.null_order}


@dataclass(frozen=True)
class SortOrder:
    """``order_id`` 0 with no fields is "unsorted"; each change of order takes the next id."""

    order_id: int = 0
    fields: tuple[SortField, ...] = ()

    @property
    def is_unsorted(self) -> bool:
        return not self.fields

    @property
    def source_ids(self) -> tuple[int, ...]:
        return tuple(f.source_id for f in self.fields)

    def to_json(self) -> dict[str, Any]:
        return {"order_id": self.order_id, "fields": [f.to_json() for f in self.fields]}

    @classmethod
    def from_json(cls, j: Any) -> SortOrder:
        try:
            if not isinstance(j, dict) or not isinstance(j.get("fields"), list):
                raise TypeError("expected an object with a 'fields' list")
            order_id = j["order_id"]
            if not isinstance(order_id, int) or isinstance(order_id, bool) or order_id < 0:
                raise TypeError(f"order_id must be a non-negative integer, got {order_id!r}")
            fields = []
            for f in j["fields"]:
                sid, direction, nulls = f["source_id"], f["direction"], f["null_order"]
                if not isinstance(sid, int) or isinstance(sid, bool):
                    raise TypeError(f"source_id must be an integer in {f!r}")
                if direction not in (ASC, DESC) or nulls not in (NULLS_FIRST, NULLS_LAST):
                    raise TypeError(f"direction must be asc|desc and null_order nulls-first|nulls-last in {f!r}")
                fields.append(SortField(sid, direction, nulls))
        except (KeyError, TypeError) as e:
            raise CorruptMetadata(f"sort order is malformed: {e}") from None
        return cls(order_id, tuple(fields))

    def describe(self, schema: Schema) -> str:
        """E.g. ``ts ASC NULLS FIRST, id DESC NULLS LAST`` (``unsorted`` if empty)."""
        if self.is_unsorted:
            return "unsorted"
        return ", ".join(
            f"{_name_of(schema, f.source_id)} {f.direction.upper()} {f.null_order.replace('-', ' ').upper()}"
            for f in self.fields
        )


def _name_of(schema: Schema, fid: int) -> str:
    try:
        return schema.name_of(fid)
    except SchemaMismatch:
        return f"<dropped column {fid}>"


# What ``sortable`` refuses, as errors name it.
UNORDERED_TYPES = "lists, structs, maps and half floats"


def sortable(t: pa.DataType) -> bool:
    # (half floats: Arrow has no sort kernel for them)
    return not (pa.types.is_nested(t) or pa.types.is_null(t) or pa.types.is_dictionary(t) or pa.types.is_float16(t))


def sortable_field(schema: Schema, column: str) -> pa.Field:
    """``column``'s field; SchemaMismatch naming the columns if there is none, InvalidArgument
    if rows cannot be sorted by it."""
    f = schema.field(column)
    if not sortable(f.type):
        raise InvalidArgument(
            f"cannot sort by column {column!r} of type {f.type}: {UNORDERED_TYPES} have no order; "
            "sort by another column"
        )
    return f


def sort_field(schema: Schema, column: str, descending: bool, nulls_first: bool | None) -> SortField:
    """The sort field for ``column`` of ``schema``; nulls first by default when ascending,
    last when descending (Iceberg's defaults)."""
    sortable_field(schema, column)
    if nulls_first is None:
        nulls_first = not descending
    return SortField(schema.field_id(column), DESC if descending else ASC, NULLS_FIRST if nulls_first else NULLS_LAST)


def effective_sort_order(schema: Schema, order: SortOrder | None, properties: Mapping[str, str]) -> SortOrder:
    """The order writers use, by field id: ``order`` (the version's) if set, else the
    ``write.sort-order`` property's columns (ascending, nulls last), else unsorted.

    Schema changes (renames) can pin a property-defined order with this: store the
    result as the version's ``sort_order`` and drop the property."""
    if order is not None:
        return order
    names = TableProperties.WRITE_SORT_ORDER.get(properties)
    if not names:
        return SortOrder()
    return SortOrder(0, tuple(SortField(schema.field_id(n), ASC, NULLS_LAST) for n in names))


def sort_keys(schema: Schema, order: SortOrder) -> list[tuple[str, str, str]]:
    """``order`` as ``sort_rows`` keys on ``schema`` (fields whose column is gone are skipped)."""
    keys = []
    for f in order.fields:
        try:
            name = schema.name_of(f.source_id)
        except SchemaMismatch:
            continue
        keys.append(
            (
                name,
                "ascending" if f.direction == ASC else "descending",
                "at_start" if f.null_order == NULLS_FIRST else "at_end",
            )
        )
    return keys


def effective_sort_keys(vm: Any) -> list[tuple[str, str, str]]:
    """The keys writes of version ``vm`` (a VersionManifest) sort their rows by."""
    return sort_keys(vm.schema, effective_sort_order(vm.schema, vm.sort_order, vm.properties))


def _key(k: Any) -> tuple[str, str, str]:
    return (k, "ascending", "at_end") if isinstance(k, str) else tuple(k)


def sort_rows(rows: pa.Table, keys: Sequence[Any]) -> pa.Table:
    """``rows`` sorted by ``keys`` (see ``SortKey``): one Arrow sort, each key with its own
    null placement."""
    if not keys or rows.num_rows < 2:
        return rows
    return rows.sort_by([_key(k) for k in keys])
