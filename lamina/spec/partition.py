"""Hidden partitioning: the partition spec model and the ``partition_by`` it is parsed from.

A ``PartitionSpec`` derives partition values from source columns through Iceberg's
transforms (``lamina.spec.transforms``: what a transform computes and how a predicate
projects onto it); this module holds the spec and its fields, their JSON, the
partition type and values of a table's rows, the Hive-style directory of a partition,
and the parsing and checking of ``partition_by`` entries (``day(ts)``, ``bucket(16, id)``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from lamina.errors import CorruptMetadata, InvalidPartitionSpec, PartitionSpecMismatch, SchemaMismatch
from lamina.spec.schema import FIELD_ID_KEY, Schema
from lamina.spec.transforms import _ALIASES, _parse_transform, apply_transform, transform_result_type

FIRST_PARTITION_FIELD_ID = 1000
NULL_PATH_VALUE = "__NULL__"
_MAX_SEGMENT_VALUE = 120  # escaped characters kept from a value before hashing the rest

_TEMPORAL = ("year", "month", "day", "hour")
_SUFFIX = {"year": "year", "month": "month", "day": "day", "hour": "hour"}


# --- spec ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionField:
    """One partition column: ``transform`` of source column ``source_id``."""

    source_id: int
    field_id: int
    name: str
    transform: str

    def to_json(self) -> dict[str, Any]:
        return {"source_id": self.source_id, "field_id": self.field_id, "name": self.name, "transform": self.transform}


def _format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _escape(s: str) -> str:
    """URL-escape every byte but [A-Za-z0-9_.~-], so no '/', '..' segment or control char survives."""
    out = quote(s, safe="")
    if len(out) > _MAX_SEGMENT_VALUE:
        # Keep directory names under filesystem limits; the exact value lives in the manifest.
        head = out[:_MAX_SEGMENT_VALUE]
        cut = head.rfind("%", len(head) - 2)
        if cut != -1:
            head = head[:cut]
        out = head + "~" + hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return out


@dataclass(frozen=True)
class PartitionSpec:
    """An ordered tuple of partition fields; ``spec_id`` identifies it in table metadata."""

    spec_id: int = 0
    fields: tuple[PartitionField, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))

    @property
    def is_unpartitioned(self) -> bool:
        return not self.fields

    def fields_for_source(self, source_id: int) -> tuple[PartitionField, ...]:
        return tuple(f for f in self.fields if f.source_id == source_id)

    @property
    def layout(self) -> tuple[tuple[int, int, str], ...]:
        """What the spec does to data, without names: (field id, source id, transform) per
        field. Specs with one layout (a rename apart) lay out files alike."""
        return tuple((f.field_id, f.source_id, f.transform) for f in self.fields)

    def to_json(self) -> dict[str, Any]:
        return {"spec_id": self.spec_id, "fields": [f.to_json() for f in self.fields]}

    @classmethod
    def from_json(cls, j: Any) -> PartitionSpec:
        try:
            if not isinstance(j, dict) or not isinstance(j.get("fields", []), list):
                raise TypeError("expected an object with a 'fields' list")
            spec_id = j.get("spec_id", 0)
            if not isinstance(spec_id, int) or isinstance(spec_id, bool):
                raise TypeError(f"spec_id must be an integer, got {spec_id!r}")
            fields = []
            for f in j.get("fields", []):
                sid, fid, name, tr = f["source_id"], f["field_id"], f["name"], f["transform"]
                if not all(isinstance(x, int) and not isinstance(x, bool) for x in (sid, fid)):
                    raise TypeError(f"source_id/field_id must be integers in {f!r}")
                if not isinstance(name, str) or not name:
                    raise TypeError(f"partition field name must be a non-empty string in {f!r}")
                _parse_transform(tr)
                fields.append(PartitionField(sid, fid, name, tr))
        except (KeyError, TypeError, AttributeError, InvalidPartitionSpec) as e:
            raise CorruptMetadata(f"partition spec is malformed: {e}") from e
        return cls(spec_id, tuple(fields))

    def _source(self, f: PartitionField, schema: Schema) -> pa.Field:
        try:
            return schema.field(schema.name_of(f.source_id))
        except SchemaMismatch:
            raise InvalidPartitionSpec(
                f"partition field {f.name!r} refers to column id {f.source_id}, which is not in the schema"
            ) from None

    def partition_type(self, schema: Schema) -> pa.Schema:
        """One nullable field per partition field (named ``field.name``, carrying its field id)."""
        return pa.schema(
            [
                pa.field(
                    f.name,
                    transform_result_type(f.transform, self._source(f, schema).type),
                    True,
                    {FIELD_ID_KEY: str(f.field_id).encode()},
                )
                for f in self.fields
            ]
        )

    def compute(self, table: pa.Table, schema: Schema) -> pa.Table:
        """Partition values of every row of ``table`` (columns as ``partition_type``)."""
        ptype = self.partition_type(schema)
        arrays = []
        for f in self.fields:
            src = self._source(f, schema)
            if src.name not in table.column_names:
                raise InvalidPartitionSpec(f"data lacks column {src.name!r} needed by partition field {f.name!r}")
            arrays.append(apply_transform(f.transform, table.column(src.name), src.type))
        return pa.Table.from_arrays(arrays, schema=ptype)

    def path_for(self, row: dict[str, Any]) -> str:
        """Hive-style relative directory, e.g. ``ts_day=2024-01-03/category=c%2F3``.

        Names and values are URL-escaped (nothing but [A-Za-z0-9_.~-] is kept), so a
        segment never contains '/' or a control char, and never is '.' or '..' since it
        always holds '='. Null is ``__NULL__``; a real string "__NULL__" is escaped so
        it differs. Very long values are shortened with a hash.
        """
        parts = []
        for f in self.fields:
            if f.name not in row:
                raise InvalidPartitionSpec(f"no value for partition field {f.name!r}; got keys {sorted(row)}")
            v = row[f.name]
            if isinstance(v, pa.Scalar):
                v = v.as_py()
            if v is None:
                text = NULL_PATH_VALUE
            else:
                s = _format_value(v)
                text = "%5F" + _escape(s[1:]) if s == NULL_PATH_VALUE else _escape(s)
            parts.append(f"{_escape(f.name)}={text}")
        return "/".join(parts)


# --- parsing partition_by ----------------------------------------------------------------

_CALL_RE = re.compile(r"^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.S)


def split_top_level(s: str) -> list[str]:
    """Split on commas outside parentheses and quotes: "day(ts), bucket(16, id)" -> 2 entries."""
    out: list[str] = []
    cur: list[str] = []
    depth, quote_char = 0, None
    for ch in s:
        if quote_char:
            if ch == quote_char:
                quote_char = None
        elif ch in '"`':
            quote_char = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out


def _unquote(name: str) -> str:
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] and name[0] in '"`':
        q = name[0]
        return name[1:-1].replace(q * 2, q)
    return name


def _positive_int(text: str, transform: str, entry: str) -> int:
    t = text.strip()
    if not re.fullmatch(r"[0-9]+", t) or int(t) <= 0:
        raise InvalidPartitionSpec(
            f"{transform} needs a positive integer as its first argument, got {t!r} in {entry!r}; "
            f"write e.g. {transform}(16, column)"
        )
    return int(t)


def _resolve(name: str, schema: Schema, entry: str) -> pa.Field:
    if name not in schema.names:
        raise InvalidPartitionSpec(
            f"unknown column {name!r} in partition_by entry {entry!r}; columns are {schema.names}"
        )
    return schema.field(name)


def _parse_entry(entry: str, schema: Schema) -> tuple[pa.Field, str, str]:
    """One partition_by entry -> (source field, transform string, partition field name)."""
    if not isinstance(entry, str) or not entry.strip():
        raise InvalidPartitionSpec(f"empty or non-string partition_by entry {entry!r}")
    m = _CALL_RE.match(entry)
    call = m if m is not None and entry.strip()[0] not in '"`' else None
    fn = _ALIASES.get(call.group(1).lower(), call.group(1).lower()) if call is not None else "identity"
    args = split_top_level(call.group(2)) if call is not None else [entry]
    if fn in ("bucket", "truncate"):
        if len(args) != 2:
            raise InvalidPartitionSpec(f"{fn} takes (N, column), e.g. {fn}(16, id); got {entry!r}")
        n = _positive_int(args[0], fn, entry)
        src = _resolve(_unquote(args[1]), schema, entry)
        transform = f"{fn}[{n}]"
    elif fn in _TEMPORAL:
        if len(args) != 1:
            raise InvalidPartitionSpec(f"{fn} takes one column, e.g. {fn}(ts); got {entry!r}")
        src = _resolve(_unquote(args[0]), schema, entry)
        transform = fn
    elif fn == "identity":
        if len(args) != 1:
            raise InvalidPartitionSpec(f"identity takes one column, e.g. identity(category); got {entry!r}")
        src = _resolve(_unquote(args[0]), schema, entry)
        transform = "identity"
    else:
        raise InvalidPartitionSpec(
            f"unknown partition transform {call.group(1) if call else fn!r} in {entry!r}; use a column name or "
            "year(col), month(col), day(col), hour(col), bucket(N, col), truncate(W, col)"
        )
    try:
        transform_result_type(transform, src.type)
    except InvalidPartitionSpec as e:
        raise InvalidPartitionSpec(
            f"cannot partition by {entry.strip()!r}: column {src.name!r} is {src.type}; {e}"
        ) from None
    return src, transform, default_field_name(src.name, transform)


def default_field_name(source: str, transform: str) -> str:
    """A partition field's name unless one is given: ``category``, ``ts_day``, ``id_bucket_16``,
    ``name_trunc_4`` (Iceberg's)."""
    name, arg = _parse_transform(transform)
    if name == "identity":
        return source
    if name == "bucket":
        return f"{source}_bucket_{arg}"
    if name == "truncate":
        return f"{source}_trunc_{arg}"
    return f"{source}_{_SUFFIX[name]}"


def source_and_transform(entry: str, schema: Schema) -> tuple[pa.Field, str]:
    """The source column and transform of one ``partition_by`` entry (``day(ts)``, ``category``)."""
    src, transform, _ = _parse_entry(entry, schema)
    return src, transform


def check_field_name(name: str, source: pa.Field, transform: str, schema: Schema, what: str) -> None:
    """Refuse a partition field name that would be mistaken for a column: only an identity
    field may share its own source column's name (Iceberg's rule)."""
    if not isinstance(name, str) or not name or any(ord(c) < 32 for c in name):
        raise InvalidPartitionSpec(
            f"partition field name {name!r} must be a non-empty string without control characters"
        )
    if name in schema.names and not (transform == "identity" and name == source.name):
        raise InvalidPartitionSpec(f"partition field name {name!r} ({what}) clashes with a table column of that name")


def parse_partition_by(
    partition_by: str | Iterable[str] | None,
    schema: Schema,
    *,
    spec_id: int = 0,
    first_field_id: int = FIRST_PARTITION_FIELD_ID,
) -> PartitionSpec:
    """Build a spec from entries like "category", "day(ts)", "bucket(16, id)", "truncate(4, name)".

    A single string may hold several comma-separated entries.
    """
    if partition_by is None:
        return PartitionSpec(spec_id, ())
    if isinstance(partition_by, str):
        entries = [e for e in split_top_level(partition_by)] if partition_by.strip() else []
    else:
        entries = list(partition_by)
    fields: list[PartitionField] = []
    seen: dict[tuple[int, str], str] = {}
    for i, entry in enumerate(entries):
        src, transform, name = _parse_entry(entry, schema)
        sid = schema.field_id(src.name)
        if (sid, transform) in seen:
            raise InvalidPartitionSpec(
                f"duplicate partition field: {entry.strip()!r} repeats {seen[(sid, transform)]!r}"
            )
        if any(f.name == name for f in fields):
            raise InvalidPartitionSpec(f"duplicate partition field name {name!r} (from {entry.strip()!r})")
        check_field_name(name, src, transform, schema, f"from {entry.strip()!r}")
        seen[(sid, transform)] = entry.strip()
        fields.append(PartitionField(sid, first_field_id + i, name, transform))
    return PartitionSpec(spec_id, tuple(fields))


def partition_entry(field: PartitionField, schema: Schema) -> str:
    """A partition field as a ``partition_by`` entry: ``category``, ``day(ts)``, ``bucket(16, id)``."""
    name, arg = _parse_transform(field.transform)
    source = schema.name_of(field.source_id)
    if name == "identity":
        return source
    return f"{name}({arg}, {source})" if arg is not None else f"{name}({source})"


def check_partition_by(
    partition_by: str | Iterable[str] | None, spec: PartitionSpec, schema: Schema, table: str
) -> None:
    """Refuse a write's ``partition_by`` (None: not given, nothing to check) that differs from the
    table's partitioning ``spec``: the same transforms of the same columns in the same order are
    the same partitioning, whatever the fields' names and ids."""
    if partition_by is None:
        return
    wanted = parse_partition_by(partition_by, schema)
    if [(f.source_id, f.transform) for f in wanted.fields] != [(f.source_id, f.transform) for f in spec.fields]:
        have = [partition_entry(f, schema) for f in spec.fields]
        raise PartitionSpecMismatch(
            f"table {table} is partitioned by {have or 'nothing'}, the write by "
            f"{[partition_entry(f, schema) for f in wanted.fields] or 'nothing'}: a write does not change a table's "
            f"partitioning; drop partitionBy (the table's is used) or change the table's (Table.update_spec())"
        )


def fields_by_id(specs: Iterable[PartitionSpec]) -> dict[int, PartitionField]:
    """Every partition field of ``specs`` by field id (a field id means one source and
    transform in every spec of a table; the newest name is kept)."""
    out: dict[int, PartitionField] = {}
    for spec in specs:
        for f in spec.fields:
            out[f.field_id] = f
    return out


def specs_with_field(specs: Iterable[PartitionSpec], field_id: int) -> tuple[int, ...]:
    """The ids of the specs among ``specs`` that have partition field ``field_id``."""
    return tuple(s.spec_id for s in specs if any(f.field_id == field_id for f in s.fields))
