"""Table schema: an Arrow schema whose fields carry stable field ids.

Field ids live in each Arrow field's metadata under ``lamina.field_id`` and
are what manifests key their statistics by, so a later rename or reorder does
not break old manifests. Ids are assigned depth-first from 1.

A field's *physical name* is the name its values have in the Parquet files; it
is the field's name unless the schema evolved (``lamina.spec.schema_update``): a
renamed field keeps the physical name it had, and a field added later gets a
fresh one (``col-<uuid>``) that no file written before can hold, so a dropped
column's old values never resurface under a new column of the same name.
Readers select Parquet columns by physical name and relabel them (see
``to_logical``).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from lamina.errors import CorruptMetadata, SchemaMismatch
from lamina.spec.write_types import check_cast_mode, fit, mismatch, store

FIELD_ID_KEY = b"lamina.field_id"
PHYSICAL_NAME_KEY = b"lamina.physical_name"
DOC_KEY = b"lamina.doc"
# Iceberg v3's two defaults: what rows of files written before the field existed read
# (initial), and what a write that lacks the field stores (write). JSON text.
INITIAL_DEFAULT_KEY = b"lamina.initial_default"
WRITE_DEFAULT_KEY = b"lamina.write_default"
# The Parquet field id (Iceberg's convention) written into files of evolved tables.
PARQUET_FIELD_ID_KEY = b"PARQUET:field_id"

log = logging.getLogger(__name__)


def _type_to_json(t: pa.DataType) -> Any:
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field_to_json(t.field(i)) for i in range(t.num_fields)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "list", "element": _field_to_json(t.value_field)}
    if pa.types.is_map(t):
        return {"type": "map", "key": _field_to_json(t.key_field), "value": _field_to_json(t.item_field)}
    if pa.types.is_timestamp(t):
        return {"type": "timestamp", "unit": t.unit, "tz": t.tz}
    if pa.types.is_decimal(t):
        return {"type": "decimal", "precision": t.precision, "scale": t.scale}
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed", "width": t.byte_width}
    return str(t)


_PRIMITIVES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32[day]": pa.date32(),
    "date64[ms]": pa.date64(),
    "time64[us]": pa.time64("us"),
    "time32[ms]": pa.time32("ms"),
}


def _type_from_json(j: Any) -> pa.DataType:
    if isinstance(j, str):
        if j not in _PRIMITIVES:
            raise CorruptMetadata(f"unknown column type {j!r} in schema")
        return _PRIMITIVES[j]
    kind = j["type"]
    if kind == "struct":
        return pa.struct([_field_from_json(f) for f in j["fields"]])
    if kind == "list":
        return pa.list_(_field_from_json(j["element"]))
    if kind == "map":
        return pa.map_(_field_from_json(j["key"]), _field_from_json(j["value"]))
    if kind == "timestamp":
        return pa.timestamp(j["unit"], j["tz"])
    if kind == "decimal":
        return pa.decimal128(j["precision"], j["scale"])
    if kind == "fixed":
        return pa.binary(j["width"])
    raise CorruptMetadata(f"unknown column type {kind!r} in schema")


# Optional field attributes: JSON key <-> Arrow field metadata key. Defaults are stored as
# JSON text (see ``encode_default``).
_OPTIONAL_KEYS = (
    ("physical_name", PHYSICAL_NAME_KEY),
    ("doc", DOC_KEY),
    ("initial_default", INITIAL_DEFAULT_KEY),
    ("write_default", WRITE_DEFAULT_KEY),
)
_JSON_VALUED = {"initial_default", "write_default"}


def _field_to_json(f: pa.Field) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": field_id_of(f),
        "name": f.name,
        "nullable": f.nullable,
        "type": _type_to_json(f.type),
    }
    md = f.metadata or {}
    for key, mkey in _OPTIONAL_KEYS:
        if mkey in md:
            text = md[mkey].decode()
            out[key] = json.loads(text) if key in _JSON_VALUED else text
    return out


def _field_from_json(j: dict[str, Any]) -> pa.Field:
    md = {FIELD_ID_KEY: str(int(j["id"])).encode()}
    for key, mkey in _OPTIONAL_KEYS:
        if j.get(key) is not None:
            value = j[key]
            md[mkey] = (json.dumps(value) if key in _JSON_VALUED else str(value)).encode()
    return pa.field(j["name"], _type_from_json(j["type"]), j["nullable"], md)


def encode_default(value: Any, t: pa.DataType) -> Any:
    """``value`` as a default of a column of type ``t`` in JSON (raises SchemaMismatch if it
    does not fit): numbers, booleans and strings as they are, dates and times ISO 8601,
    decimals as strings, binary as hex."""
    if pa.types.is_nested(t):
        raise SchemaMismatch(f"defaults are supported for primitive columns only, not {t}")
    try:
        if isinstance(value, str) and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            py = pa.scalar(value).cast(t).as_py()  # "2026-01-02" for a date, "1.25" for a decimal
        else:
            py = pa.scalar(value, t).as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError) as e:
        raise SchemaMismatch(f"default {value!r} does not fit type {t}: {e}") from None
    if isinstance(py, (_dt.date, _dt.datetime, _dt.time)):
        return py.isoformat()
    if isinstance(py, decimal.Decimal):
        return str(py)
    if isinstance(py, (bytes, bytearray)):
        return bytes(py).hex()
    if isinstance(py, float) and py != py:
        return "NaN"
    return py


def decode_default(j: Any, t: pa.DataType) -> pa.Scalar:
    """The Arrow scalar of a default stored by ``encode_default``."""
    try:
        if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_large_binary(t):
            return pa.scalar(bytes.fromhex(j), t)
        if isinstance(j, str) and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return pa.scalar(j).cast(t)
        return pa.scalar(j, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
        raise CorruptMetadata(f"column default {j!r} is not a {t}: {e}") from None


def physical_name_of(f: pa.Field) -> str:
    md = f.metadata or {}
    return md[PHYSICAL_NAME_KEY].decode() if PHYSICAL_NAME_KEY in md else f.name


def children_of(t: pa.DataType) -> list[pa.Field]:
    """The child fields of a nested type (struct fields, list element, map key and value)."""
    if pa.types.is_struct(t):
        return list(t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def _with_children(t: pa.DataType, children: list[pa.Field]) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct(children)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(children[0])
    if pa.types.is_map(t):
        return pa.map_(children[0], children[1])
    return t


def _physical_field(f: pa.Field) -> pa.Field:
    """``f`` named by its physical name at every depth, with its Parquet field id."""
    md = dict(f.metadata or {})
    md[PARQUET_FIELD_ID_KEY] = md[FIELD_ID_KEY]
    kids = children_of(f.type)
    t = _with_children(f.type, [_physical_field(c) for c in kids]) if kids else f.type
    return pa.field(physical_name_of(f), t, f.nullable, md)


def _walk(fields: Any) -> Iterator[pa.Field]:
    for f in fields:
        yield f
        yield from _walk(children_of(f.type))


def relabel(col: pa.ChunkedArray | pa.Array, t: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """``col`` as type ``t``, which differs from its type in field names only (zero-copy)."""
    if col.type.equals(t):
        return col
    if isinstance(col, pa.ChunkedArray):
        return pa.chunked_array([c.view(t) for c in col.chunks], type=t)
    return col.view(t)


def field_id_of(f: pa.Field) -> int:
    md = f.metadata or {}
    if FIELD_ID_KEY not in md:
        raise CorruptMetadata(f"field {f.name!r} has no field id")
    return int(md[FIELD_ID_KEY])


def _assign_ids(t: pa.DataType, next_id: list[int]) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_assign_field(t.field(i), next_id) for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_assign_field(t.value_field, next_id))
    if pa.types.is_map(t):
        return pa.map_(_assign_field(t.key_field, next_id), _assign_field(t.item_field, next_id))
    return t


def _assign_field(f: pa.Field, next_id: list[int]) -> pa.Field:
    fid = next_id[0]
    next_id[0] += 1
    return pa.field(f.name, _assign_ids(f.type, next_id), f.nullable, {FIELD_ID_KEY: str(fid).encode()})


def normalize_type(t: pa.DataType) -> pa.DataType:
    """Table types use the plain (not large/view) variants so Spark and Parquet agree."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return normalize_type(t.value_type)
    if pa.types.is_timestamp(t) and t.unit == "ns":
        # Parquet stores us natively; ns round-trips poorly through Spark.
        return pa.timestamp("us", t.tz)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(x.name, normalize_type(x.type), x.nullable) for x in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field(t.value_field.name, normalize_type(t.value_type), t.value_field.nullable))
    return t


def note_stored_units(column: str, t: pa.DataType) -> None:
    """Say (a warning in this module's log) that column ``column``'s nanosecond timestamps, at
    any depth of ``t``, are stored as microseconds (``normalize_type``): Delta, Iceberg and
    Spark store microseconds. Writes keep every value that is a whole microsecond and refuse
    one that is not (lamina.spec.write_types): nothing is truncated silently."""
    if any(pa.types.is_timestamp(x) and x.unit == "ns" for x in _types_in(t)):
        log.warning(
            "column %r: %s is stored as %s (tables store microseconds, as Delta and Iceberg do); "
            "writes of values with nanoseconds are refused, whole microseconds are kept exactly",
            column,
            t,
            normalize_type(t),
        )


def _types_in(t: pa.DataType) -> Iterator[pa.DataType]:
    yield t
    if pa.types.is_dictionary(t):
        yield from _types_in(t.value_type)
    for c in children_of(t):
        yield from _types_in(c.type)


# Names a table's columns may not take: the metadata columns a scan or the change feed adds
# (row lineage, lamina.spec.lineage; lamina.data.changes) and Lamina's internal prefix.
RESERVED_NAMES = frozenset({"_row_id", "_last_updated_version", "_change_type", "_commit_version", "_commit_timestamp"})
RESERVED_PREFIX = "__lamina"


def reserved_name(name: str) -> str | None:
    """Why ``name`` may not name a top-level column (None: it may)."""
    if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIX):
        return (
            f"column name {name!r} is reserved for metadata columns ({sorted(RESERVED_NAMES)} and "
            f"names starting with {RESERVED_PREFIX!r}); choose another name"
        )
    return None


# A schema's repr names its first columns in about this many characters, then how many more there are.
_REPR_WIDTH = 120


@dataclass(frozen=True, eq=False)
class Schema:
    """An immutable table schema. ``arrow`` carries field ids in field metadata."""

    arrow: pa.Schema
    schema_id: int = 0
    # The highest field id ever assigned (ids of dropped fields are never reused); 0: the
    # highest id in ``arrow``.
    last_column_id: int = 0
    _by_name: dict[str, pa.Field] = field(default_factory=dict, compare=False, repr=False)
    _json: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __repr__(self) -> str:
        """One line: the id and the top-level columns with their types (as many as fit in a line)."""
        shown: list[str] = []
        for f in self.arrow:
            column = f"{f.name}: {f.type}"
            if shown and sum(len(c) + 2 for c in shown) + len(column) > _REPR_WIDTH:
                break
            shown.append(column)
        more = len(self.arrow) - len(shown)
        return f"Schema(schema_id={self.schema_id}, columns=[{', '.join(shown)}{f', ... {more} more' if more > 0 else ''}])"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {f.name: f for f in self.arrow})
        if self.last_column_id < self.highest_field_id:
            object.__setattr__(self, "last_column_id", self.highest_field_id)

    # Equal schemas are equal field for field, ids, physical names and defaults included
    # (pyarrow's schema equality ignores field metadata, where those live).
    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Schema):
            return NotImplemented
        return (
            self.schema_id == other.schema_id
            and self.last_column_id == other.last_column_id
            and self.to_json() == other.to_json()
        )

    def __getstate__(self) -> dict[str, Any]:
        # The memoized hash is not pickled: string hashes differ between processes (a Spark worker).
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __hash__(self) -> int:
        # memoized (the schema is immutable): schemas key the caches a commit consults several times
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.schema_id, self.last_column_id, tuple(self.arrow.names)))
            object.__setattr__(self, "_hash", h)
        return h

    # -- physical names, defaults -----------------------------------------------------------

    @cached_property
    def has_column_mapping(self) -> bool:
        """Whether some field's Parquet name differs from its name (the schema evolved)."""
        return any(PHYSICAL_NAME_KEY in (f.metadata or {}) and physical_name_of(f) != f.name for f in _walk(self.arrow))

    @cached_property
    def physical_arrow(self) -> pa.Schema:
        """The schema as data files store it: physical names at every depth. The Arrow schema
        itself when no name differs."""
        if not self.has_column_mapping:
            return self.arrow
        return pa.schema([_physical_field(f) for f in self.arrow])

    @cached_property
    def physical_names(self) -> dict[str, str]:
        """Column name -> its physical name, for top-level columns."""
        return {f.name: physical_name_of(f) for f in self.arrow}

    @cached_property
    def initial_defaults(self) -> dict[str, pa.Scalar]:
        """Top-level columns that rows of files written before them read as a default."""
        return self._defaults(INITIAL_DEFAULT_KEY)

    @cached_property
    def _required_positions(self) -> tuple[int, ...]:
        """Positions of the top-level columns that may hold no null."""
        return tuple(i for i, f in enumerate(self.arrow) if not f.nullable)

    @cached_property
    def write_defaults(self) -> dict[str, pa.Scalar]:
        """Top-level columns a write that lacks them fills with a default."""
        return self._defaults(WRITE_DEFAULT_KEY)

    def _defaults(self, key: bytes) -> dict[str, pa.Scalar]:
        return {
            f.name: decode_default(json.loads(f.metadata[key]), f.type) for f in self.arrow if key in (f.metadata or {})
        }

    @property
    def is_evolved(self) -> bool:
        """Whether readers must map file columns (physical names or defaults) instead of
        reading them by name as they are."""
        return self.has_column_mapping or bool(self.initial_defaults)

    def to_physical(self, data: pa.Table) -> pa.Table:
        """Rows conformed to this schema, as data files store them (physical names)."""
        if not self.has_column_mapping:
            return data
        phys = self.physical_arrow
        return pa.Table.from_arrays([relabel(c, f.type) for c, f in zip(data.columns, phys)], schema=phys)

    def to_logical(self, data: pa.Table, columns: list[str]) -> pa.Table:
        """Columns read from data files under their physical names (with this schema's types)
        as the table's ``columns``."""
        if not self.has_column_mapping:
            return data
        fields = [self.field(c) for c in columns]
        cols = [relabel(data.column(self.physical_names[c]), f.type) for c, f in zip(columns, fields)]
        return pa.Table.from_arrays(cols, schema=pa.schema(fields))

    @classmethod
    def from_arrow(cls, schema: pa.Schema, schema_id: int = 0) -> Schema:
        """Assign fresh field ids (depth-first from 1) to a user-supplied Arrow schema."""
        if not isinstance(schema, pa.Schema):
            raise SchemaMismatch(f"expected a pyarrow.Schema, got {type(schema).__name__}")
        names = [f.name for f in schema]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise SchemaMismatch(f"duplicate column names {sorted(dupes)}: every column needs a unique name")
        for n in names:
            if not n or any(ord(c) < 32 for c in n):
                raise SchemaMismatch(f"invalid column name {n!r}: names must be non-empty without control characters")
            why = reserved_name(n)
            if why:
                raise SchemaMismatch(why)
        for f in schema:
            note_stored_units(f.name, f.type)
        next_id = [1]
        fields = [_assign_field(pa.field(f.name, normalize_type(f.type), f.nullable), next_id) for f in schema]
        return cls(pa.schema(fields), schema_id)

    @property
    def names(self) -> list[str]:
        return self.arrow.names

    def field(self, name: str) -> pa.Field:
        try:
            return self._by_name[name]
        except KeyError:
            raise SchemaMismatch(f"no column {name!r} in table schema; columns are {self.names}") from None

    def field_id(self, name: str) -> int:
        return field_id_of(self.field(name))

    def name_of(self, fid: int) -> str:
        for f in self.arrow:
            if field_id_of(f) == fid:
                return f.name
        raise SchemaMismatch(f"no column with field id {fid}")

    @property
    def highest_field_id(self) -> int:
        best = 0

        def walk(t: pa.DataType) -> None:
            nonlocal best
            children: list[pa.Field] = []
            if pa.types.is_struct(t):
                children = list(t)
            elif pa.types.is_list(t) or pa.types.is_large_list(t):
                children = [t.value_field]
            elif pa.types.is_map(t):
                children = [t.key_field, t.item_field]
            for c in children:
                best = max(best, field_id_of(c))
                walk(c.type)

        for f in self.arrow:
            best = max(best, field_id_of(f))
            walk(f.type)
        return best

    def describe(self) -> list[dict[str, Any]]:
        """Every field at any depth, depth-first: path (dotted; list element / map key and
        value by their names), field id, type, required, doc, defaults and physical name."""
        out: list[dict[str, Any]] = []

        def walk(fields: Any, prefix: str, depth: int) -> None:
            for f in fields:
                md = f.metadata or {}
                path = f"{prefix}{f.name}"
                out.append(
                    {
                        "path": path,
                        "depth": depth,
                        "field_id": field_id_of(f),
                        "type": str(f.type) if not pa.types.is_nested(f.type) else _type_to_json(f.type)["type"],
                        "required": not f.nullable,
                        "doc": md[DOC_KEY].decode() if DOC_KEY in md else None,
                        "initial_default": md[INITIAL_DEFAULT_KEY].decode() if INITIAL_DEFAULT_KEY in md else None,
                        "write_default": md[WRITE_DEFAULT_KEY].decode() if WRITE_DEFAULT_KEY in md else None,
                        "physical_name": physical_name_of(f),
                    }
                )
                walk(children_of(f.type), path + ".", depth + 1)

        walk(self.arrow, "", 0)
        return out

    def to_json(self) -> dict[str, Any]:
        # Serialized on every commit; the schema is immutable, so build it once.
        if self._json is None:
            j: dict[str, Any] = {"schema_id": self.schema_id, "fields": [_field_to_json(f) for f in self.arrow]}
            if self.last_column_id > self.highest_field_id:
                j["last_column_id"] = self.last_column_id
            object.__setattr__(self, "_json", j)
        return self._json  # type: ignore[return-value]

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> Schema:
        try:
            schema = cls(
                pa.schema([_field_from_json(f) for f in j["fields"]]),
                int(j.get("schema_id", 0)),
                int(j.get("last_column_id", 0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptMetadata(f"schema is malformed: {e}") from e
        schema._check_identities()
        return schema

    def _check_identities(self) -> None:
        """Raise CorruptMetadata unless field ids are unique at every depth, and names and
        physical names unique among siblings, and the defaults parse: statistics are keyed
        by id and file columns read by physical name, so a clash would read wrong values
        rather than fail."""
        ids = [field_id_of(f) for f in _walk(self.arrow)]
        if len(set(ids)) != len(ids):
            raise CorruptMetadata(
                f"schema is malformed: field ids {sorted({i for i in ids if ids.count(i) > 1})} are used twice"
            )
        levels = [list(self.arrow)] + [children_of(f.type) for f in _walk(self.arrow) if pa.types.is_struct(f.type)]
        for level in levels:
            for what, names in (
                ("name", [f.name for f in level]),
                ("physical name", [physical_name_of(f) for f in level]),
            ):
                if len(set(names)) != len(names):
                    raise CorruptMetadata(f"schema is malformed: two sibling fields have the same {what} ({names})")
        _ = (self.initial_defaults, self.write_defaults)  # parsed now: a bad default is CorruptMetadata here

    def conform(self, data: pa.Table, cast: str | None = None) -> pa.Table:
        """Return ``data`` as this schema's columns and types, or raise SchemaMismatch before
        anything is written.

        Columns are matched by name; order may differ. Missing nullable columns are filled
        with their write default or nulls; extra columns, missing required columns, nulls in
        a required column are errors, and a column's type follows the rule of
        ``lamina.spec.write_types`` (lossless widening only; ``cast="safe"``: pyarrow's safe
        casts), naming every column it refuses at once.
        """
        if data.schema.equals(self.arrow):
            # The columns in order, of the same types and nullability (the common case): only
            # the required ones' nulls to check, and the table relabelled with this schema's
            # fields (ids) in one call (from_arrays wraps every column in Python, which adds up
            # on wide tables).
            for i in self._required_positions:
                col = data.column(i)
                if col.null_count:
                    raise SchemaMismatch(
                        f"column {self.arrow.field(i).name!r} is required (not null) but the data has {col.null_count} nulls"
                    )
            return pa.Table.from_batches(data.to_batches(), schema=self.arrow)
        extra = [n for n in data.column_names if n not in self._by_name]
        if extra:
            raise SchemaMismatch(
                f"data has columns not in the table schema: {extra}; table columns are {self.names}. "
                "Drop them, pass schema_mode='merge' to add them in the same version, or add them "
                "first with table.update_schema().add_column(...)."
            )
        if len(set(data.column_names)) != len(data.column_names):
            raise SchemaMismatch(f"data has duplicate column names: {data.column_names}")
        index = {n: i for i, n in enumerate(data.column_names)}  # by position: a lookup by name scans every column
        check_cast_mode(cast)
        if cast is None:
            refused = [
                mismatch(f.name, data.schema.field(index[f.name]).type, f.type)
                for f in self.arrow
                if f.name in index and fit(data.schema.field(index[f.name]).type, f.type) is None
            ]
            if refused:
                raise SchemaMismatch("; ".join(refused) + "; nothing was written")
        arrays = []
        for f in self.arrow:
            if f.name not in index:
                default = self.write_defaults.get(f.name)
                if default is not None:
                    arrays.append(pa.repeat(default, data.num_rows))
                    continue
                if not f.nullable:
                    raise SchemaMismatch(f"data lacks required column {f.name!r} ({f.type})")
                arrays.append(pa.nulls(data.num_rows, f.type))
                continue
            col = store(data.column(index[f.name]), f.type, f.name, cast=cast)
            if not f.nullable and col.null_count:
                raise SchemaMismatch(
                    f"column {f.name!r} is required (not null) but the data has {col.null_count} nulls"
                )
            arrays.append(col)
        return pa.Table.from_arrays(arrays, schema=self.arrow)
