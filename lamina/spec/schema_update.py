"""Schema evolution as pure functions: a list of changes applied to a ``Schema``.

Every change is metadata only: no data file is rewritten. What makes that exact:

- fields are identified by id, never by name; a renamed field keeps its physical
  name (the name its values have in Parquet files), so old files still read;
- a field added later gets a fresh physical name (``col-<uuid>``) and a fresh id (ids
  are never reused: ``Schema.last_column_id``), so no file written before can hold
  values for it: those files read it as its initial default, or null;
- a type may only widen (``WIDENINGS``), and readers cast old files' values up.

Iceberg's rules, which our users know, decide what is allowed. Paths are dotted
(``"address.city"``, ``"tags.element"``, ``"attrs.value"``) or tuples of names (for
names that contain a dot); a dotted string that could name two fields is refused.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lamina.errors import SchemaMismatch
from lamina.spec.schema import (
    Schema,
    _assign_ids,
    _type_from_json,
    _type_to_json,
    encode_default,
    field_id_of,
    normalize_type,
    reserved_name,
)
from lamina.spec.write_types import widens

Path = str | Sequence[str]

_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


class InvalidSchemaChange(SchemaMismatch):
    """A schema change that is not allowed (unknown column, narrowing, duplicate name, ...)."""


class _UnknownColumn(InvalidSchemaChange):
    """A path that names no column (told apart from an ambiguous one)."""


# --- the changes -------------------------------------------------------------------------


def new_physical_name() -> str:
    """A physical name no file of any table holds yet (Delta's column mapping uses the same form)."""
    return f"col-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class AddColumn:
    path: tuple[str, ...]
    type: pa.DataType
    required: bool = False
    doc: str | None = None
    default: Any = None
    position: tuple[str, tuple[str, ...] | None] | None = None  # ("first"|"after"|"before", sibling)
    # Chosen once, when the change is made: files a transaction writes after adding the
    # column hold its values under this name, whichever attempt commits.
    physical_name: str = field(default_factory=lambda: new_physical_name())

    def describe(self) -> str:
        return f"add {show_path(self.path)} {self.type}"


@dataclass(frozen=True)
class DropColumn:
    path: tuple[str, ...]

    def describe(self) -> str:
        return f"drop {show_path(self.path)}"


@dataclass(frozen=True)
class RenameColumn:
    path: tuple[str, ...]
    new_name: str

    def describe(self) -> str:
        return f"rename {show_path(self.path)} to {self.new_name}"


@dataclass(frozen=True)
class MoveColumn:
    path: tuple[str, ...]
    position: tuple[str, tuple[str, ...] | None]

    def describe(self) -> str:
        where, ref = self.position
        return f"move {show_path(self.path)} {where}" + (f" {show_path(ref)}" if ref else "")


@dataclass(frozen=True)
class UpdateColumn:
    path: tuple[str, ...]
    type: pa.DataType | None = None
    nullable: bool | None = None
    doc: str | None = None

    def describe(self) -> str:
        parts = [
            f"type {self.type}" if self.type is not None else "",
            "optional" if self.nullable else "",
            "doc" if self.doc is not None else "",
        ]
        return f"update {show_path(self.path)} " + ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class ReplaceColumn:
    """A top-level column replaced by a new one of the same name and place (a new id: no
    old value is read for it). Only for overwrites of every row."""

    path: tuple[str, ...]
    type: pa.DataType
    physical_name: str = field(default_factory=lambda: new_physical_name())

    def describe(self) -> str:
        return f"replace {show_path(self.path)} with {self.type}"


SchemaChange = AddColumn | DropColumn | RenameColumn | MoveColumn | UpdateColumn | ReplaceColumn


def show_path(path: Sequence[str] | str) -> str:
    return path if isinstance(path, str) else ".".join(path)


def as_path(path: Path) -> tuple[str, ...] | str:
    """A tuple path as is; a string is resolved later against the schema (it may be dotted)."""
    if isinstance(path, str):
        if not path:
            raise InvalidSchemaChange("a column path must not be empty")
        return path
    parts = tuple(path)
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise InvalidSchemaChange(f"a column path is a dotted string or a tuple of names, got {path!r}")
    return parts


# --- applying them -------------------------------------------------------------------------


class _Tree:
    """A schema as its JSON tree (plain dicts), changed in place, then parsed back."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.fields: list[dict[str, Any]] = copy.deepcopy(schema.to_json()["fields"])
        self.last_id = schema.last_column_id

    # -- paths --------------------------------------------------------------------------

    @staticmethod
    def _kids(node: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[dict[str, Any]] | None]]:
        """(name, child, the list that holds it: struct fields, or None for element/key/value)."""
        t = node["type"]
        if not isinstance(t, dict):
            return []
        if t["type"] == "struct":
            return [(c["name"], c, t["fields"]) for c in t["fields"]]
        if t["type"] == "list":
            return [("element", t["element"], None)]
        if t["type"] == "map":
            return [("key", t["key"], None), ("value", t["value"], None)]
        return []

    def _level(self, parent: dict[str, Any] | None) -> list[tuple[str, dict[str, Any], list[dict[str, Any]] | None]]:
        if parent is None:
            return [(f["name"], f, self.fields) for f in self.fields]
        return self._kids(parent)

    def resolve(
        self, path: tuple[str, ...] | str
    ) -> tuple[tuple[str, ...], dict[str, Any], list[dict[str, Any]] | None, dict[str, Any] | None]:
        """(path as names, the field, the list holding it, its parent field or None)."""
        if isinstance(path, tuple):
            parent, holder, node = None, None, None
            for i, name in enumerate(path):
                match = [(c, h) for n, c, h in self._level(parent) if n == name]
                if not match:
                    self._unknown(path[: i + 1], parent)
                node, holder = match[0]
                if i < len(path) - 1:
                    parent = node
            return path, node, holder, (parent if len(path) > 1 else None)  # type: ignore[return-value]
        found: list[tuple[tuple[str, ...], dict[str, Any], Any, Any]] = []

        def walk(parent: dict[str, Any] | None, rest: str, names: tuple[str, ...]) -> None:
            for n, c, h in self._level(parent):
                if rest == n:
                    found.append((names + (n,), c, h, parent))
                elif rest.startswith(n + "."):
                    walk(c, rest[len(n) + 1 :], names + (n,))

        walk(None, path, ())
        if not found:
            self._unknown((path,), None)
        if len(found) > 1:
            raise InvalidSchemaChange(
                f"column path {path!r} is ambiguous: it names {[f[0] for f in found]!r} "
                "(a name contains a dot); pass the path as a tuple of names instead"
            )
        return found[0]

    def _unknown(self, path: Sequence[str], parent: dict[str, Any] | None) -> None:
        names = [n for n, _, _ in self._level(parent)]
        raise _UnknownColumn(f"no column {show_path(path)!r} in the table schema; columns there are {names}")

    # -- changes --------------------------------------------------------------------------

    def _check_name(self, name: str, siblings: Iterable[dict[str, Any]], top_level: bool) -> None:
        if not isinstance(name, str) or not name or any(ord(c) < 32 for c in name):
            raise InvalidSchemaChange(
                f"invalid column name {name!r}: names must be non-empty without control characters"
            )
        why = reserved_name(name) if top_level else None
        if why:
            raise InvalidSchemaChange(why)
        if any(s["name"] == name for s in siblings):
            raise InvalidSchemaChange(f"a column named {name!r} already exists there; choose another name")

    def _new_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def add(self, c: AddColumn) -> None:
        path = c.path
        if isinstance(path, str):
            if "." in path:
                head, name = path.rsplit(".", 1)
                try:
                    names, parent, _, _ = self.resolve(head)
                except _UnknownColumn:
                    raise InvalidSchemaChange(
                        f"cannot add {path!r}: no struct column {head!r} to add {name!r} to. To add a top-level "
                        f"column whose name contains a dot, pass the path as a tuple: ({path!r},)"
                    ) from None
                path = names + (name,)
            else:
                path = (path,)
        parent = self.resolve(path[:-1])[1] if len(path) > 1 else None
        if parent is not None and not (isinstance(parent["type"], dict) and parent["type"]["type"] == "struct"):
            raise InvalidSchemaChange(f"cannot add {show_path(path)!r}: {show_path(path[:-1])!r} is not a struct")
        siblings = self.fields if parent is None else parent["type"]["fields"]
        name = path[-1]
        self._check_name(name, siblings, parent is None)
        t = normalize_type(c.type) if isinstance(c.type, pa.DataType) else None
        if t is None:
            raise InvalidSchemaChange(f"the type of a new column is a pyarrow.DataType, got {c.type!r}")
        if c.required and c.default is None:
            raise InvalidSchemaChange(
                f"cannot add required column {show_path(path)!r} without a default: rows written before it have "
                "no value for it. Give it a default=..., or add it as optional (required=False)"
            )
        if c.default is not None and parent is not None:
            raise InvalidSchemaChange(
                f"defaults are supported for top-level columns only; {show_path(path)!r} is nested"
            )
        # ids: the column's first, then its nested fields depth-first
        node: dict[str, Any] = {"id": self._new_id(), "name": name, "nullable": not c.required}
        counter = [self.last_id + 1]
        typ = _assign_ids(t, counter)
        self.last_id = counter[0] - 1
        node["type"] = _type_to_json(typ)
        node["physical_name"] = c.physical_name
        if c.doc is not None:
            node["doc"] = str(c.doc)
        if c.default is not None:
            try:
                node["initial_default"] = node["write_default"] = encode_default(c.default, t)
            except SchemaMismatch as e:  # one error type for every bad change
                raise InvalidSchemaChange(f"cannot add {show_path(path)!r}: {e}") from None
        siblings.append(node)
        if c.position is not None:
            self._place(path, siblings, node, c.position)

    def _place(
        self, path: tuple[str, ...], siblings: list[dict[str, Any]], node: dict[str, Any], position: Any
    ) -> None:
        where, ref = position
        if where == "first":
            siblings.remove(node)
            siblings.insert(0, node)
            return
        # The reference is resolved while the node is still in place: "after itself" is
        # then told as such, not as an unknown column.
        ref_names, ref_node, ref_holder, _ = self.resolve(ref)
        if ref_holder is not siblings:
            raise InvalidSchemaChange(
                f"cannot place {show_path(path)!r} {where} {show_path(ref_names)!r}: they are not in the same struct"
            )
        if ref_node is node:
            raise InvalidSchemaChange(f"cannot move {show_path(path)!r} {where} itself")
        siblings.remove(node)
        i = siblings.index(ref_node)
        siblings.insert(i + 1 if where == "after" else i, node)

    def replace(self, c: ReplaceColumn) -> None:
        names, node, holder, parent = self.resolve(c.path)
        if parent is not None or holder is None:
            raise InvalidSchemaChange(f"only top-level columns can be replaced, not {show_path(names)!r}")
        i = holder.index(node)
        holder.remove(node)
        self.add(AddColumn(names, c.type, physical_name=c.physical_name))
        holder.insert(i, holder.pop())

    def drop(self, c: DropColumn) -> None:
        names, node, holder, parent = self.resolve(c.path)
        if holder is None:
            raise InvalidSchemaChange(
                f"cannot drop {show_path(names)!r}: a list element or map key/value cannot be dropped"
            )
        if len(holder) == 1:
            what = (
                "the table's last column" if parent is None else f"the last field of struct {show_path(names[:-1])!r}"
            )
            raise InvalidSchemaChange(f"cannot drop {show_path(names)!r}: it is {what}")
        holder.remove(node)

    def rename(self, c: RenameColumn) -> None:
        names, node, holder, parent = self.resolve(c.path)
        if holder is None:
            raise InvalidSchemaChange(
                f"cannot rename {show_path(names)!r}: list elements and map keys/values have fixed names"
            )
        if c.new_name == node["name"]:
            return
        self._check_name(c.new_name, [s for s in holder if s is not node], parent is None)
        node.setdefault("physical_name", node["name"])  # its values keep their name in the files
        node["name"] = c.new_name

    def move(self, c: MoveColumn) -> None:
        names, node, holder, _ = self.resolve(c.path)
        if holder is None:
            raise InvalidSchemaChange(f"cannot move {show_path(names)!r}: it is a list element or map key/value")
        self._place(names, holder, node, c.position)

    def update(self, c: UpdateColumn) -> None:
        names, node, _, _ = self.resolve(c.path)
        if c.type is not None:
            old = _type_from_json(node["type"])
            new = normalize_type(c.type)
            if pa.types.is_nested(old) or pa.types.is_nested(new):
                raise InvalidSchemaChange(
                    f"cannot change the type of {show_path(names)!r} from {old} to {new}: change its fields one by one"
                )
            if not widens(old, new):
                raise InvalidSchemaChange(
                    f"cannot change the type of {show_path(names)!r} from {old} to {new}: only widening is allowed "
                    "(int8→int16→int32→int64, float32→float64, decimal(P,S)→decimal(P',S) with P'>P, "
                    "date→timestamp without time zone). Add a new column and copy the values instead"
                )
            node["type"] = _type_to_json(new)
        if c.nullable is not None:
            if not c.nullable and node["nullable"]:
                raise InvalidSchemaChange(
                    f"cannot make optional column {show_path(names)!r} required: existing rows may hold nulls"
                )
            node["nullable"] = bool(c.nullable) or node["nullable"]
        if c.doc is not None:
            node["doc"] = str(c.doc)

    def result(self) -> Schema:
        schema = Schema.from_json(
            {"schema_id": self.schema.schema_id + 1, "fields": self.fields, "last_column_id": self.last_id}
        )
        return schema


def apply_schema_changes(
    schema: Schema, changes: Sequence[SchemaChange], protected: Mapping[int, str] | None = None
) -> Schema:
    """``schema`` with ``changes`` applied in order (a new schema id); raises
    InvalidSchemaChange naming the first change that is not allowed.

    ``protected``: field id -> what uses it (a partition field, the sort order); such a
    column may not be dropped, nor change type except between integer widths."""
    tree = _Tree(schema)
    for c in changes:
        {
            AddColumn: tree.add,
            DropColumn: tree.drop,
            RenameColumn: tree.rename,
            MoveColumn: tree.move,
            UpdateColumn: tree.update,
            ReplaceColumn: tree.replace,
        }[type(c)](c)  # type: ignore[operator]
    new = tree.result()
    check_protected(schema, new, protected)
    return new


def check_protected(schema: Schema, new: Schema, protected: Mapping[int, str] | None) -> None:
    """Refuse ``new`` if it drops, or changes the type (other than widening an integer) of, a
    column of ``schema`` that ``protected`` names a user of."""
    for fid, user in (protected or {}).items():
        before, after = _field_by_id(schema, fid), _field_by_id(new, fid)
        if after is None and before is not None:
            raise InvalidSchemaChange(
                f"cannot drop column {before.name!r}: {user} uses it. Remove that first (update_spec().remove_field "
                "or update_sort_order()), in the same transaction if you like"
            )
        if before is not None and after is not None and not before.type.equals(after.type):
            if not (before.type in _INTS and after.type in _INTS):
                raise InvalidSchemaChange(
                    f"cannot change the type of column {before.name!r} from {before.type} to {after.type}: {user} uses it"
                )


def _field_by_id(schema: Schema, fid: int) -> pa.Field | None:
    return next((f for f in schema.arrow if field_id_of(f) == fid), None)
