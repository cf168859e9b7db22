"""Lamina schemas as Iceberg v3 schemas: types, field ids, defaults, and the name mapping.

A Lamina field keeps its field id in Iceberg (list elements and map keys and values
included: Lamina numbers them depth-first as Iceberg does). Types map one to one where
Iceberg has the type; where it has none (unsigned 32/64-bit integers, half floats,
millisecond times) the table cannot be viewed as Iceberg and ``iceberg_schema`` raises
``IcebergUnsupported`` naming the column. Narrow integers (int8, int16, uint8, uint16) are
Iceberg ``int``: Parquet stores them as INT32 and every reader reads them so.

Data files of a table whose schema never evolved carry no Parquet field ids: Iceberg
readers find their columns through the table's name mapping
(``schema.name-mapping.default``), which ``name_mapping`` builds from every field's
physical name (never its display name: a renamed column's files still hold the old name,
and a dropped column's name may be taken by a new column whose files hold ``col-<hex>``).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import pyarrow as pa

from lamina.errors import IcebergUnsupported
from lamina.spec.lineage import LAST_UPDATED, ROW_ID
from lamina.spec.schema import (
    DOC_KEY,
    INITIAL_DEFAULT_KEY,
    WRITE_DEFAULT_KEY,
    Schema,
    children_of,
    field_id_of,
    physical_name_of,
)

# Iceberg v3's reserved field ids of the row lineage metadata columns.
ROW_ID_FIELD_ID = 2147483540
LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID = 2147483539
# The name mapping entries of the lineage columns as Lamina's files store them.
LINEAGE_MAPPING = (
    {"field-id": ROW_ID_FIELD_ID, "names": [ROW_ID]},
    {"field-id": LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID, "names": [LAST_UPDATED]},
)


def primitive_type(t: pa.DataType, where: str) -> str:
    """The Iceberg name of primitive Arrow type ``t`` (``where``: the column, for the error)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()):
        return "int"
    if t == pa.int64():
        return "long"
    if t == pa.float32():
        return "float"
    if t == pa.float64():
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed[{t.byte_width}]"
    if pa.types.is_date(t):
        return "date"  # date64 is stored as Parquet DATE (days) too
    if t == pa.time64("us"):
        return "time"
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms", "us"):
        # Parquet keeps s and ms as TIMESTAMP(MILLIS), which Iceberg readers read as micros
        return "timestamp" if t.tz is None else "timestamptz"
    if pa.types.is_timestamp(t) and t.unit == "ns":
        return "timestamp_ns" if t.tz is None else "timestamptz_ns"
    if pa.types.is_decimal(t) and t.precision <= 38:
        return f"decimal({t.precision}, {t.scale})"
    raise IcebergUnsupported(
        f"column {where!r} has type {t}, which Iceberg v3 has no type for (it has int, long, float, "
        "double, decimal up to 38 digits, date, time in microseconds, timestamps, string, binary, fixed); "
        "no Iceberg view of this table can be written. Change the column's type, or leave iceberg.enabled off"
    )


def _type(t: pa.DataType, where: str) -> Any:
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field(f, f"{where}.{f.name}") for f in t]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        e = t.value_field
        return {
            "type": "list",
            "element-id": field_id_of(e),
            "element": _type(e.type, f"{where}.element"),
            "element-required": not e.nullable,
        }
    if pa.types.is_map(t):
        k, v = t.key_field, t.item_field
        return {
            "type": "map",
            "key-id": field_id_of(k),
            "key": _type(k.type, f"{where}.key"),
            "value-id": field_id_of(v),
            "value": _type(v.type, f"{where}.value"),
            "value-required": not v.nullable,
        }
    return primitive_type(t, where)


def _field(f: pa.Field, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": field_id_of(f),
        "name": f.name,
        "required": not f.nullable,
        "type": _type(f.type, where),
    }
    md = f.metadata or {}
    if DOC_KEY in md:
        out["doc"] = md[DOC_KEY].decode()
    for key, name in ((INITIAL_DEFAULT_KEY, "initial-default"), (WRITE_DEFAULT_KEY, "write-default")):
        if key in md:
            out[name] = default_json(json.loads(md[key]), f.type, where)
    return out


@lru_cache(maxsize=64)
def _fields(schema: Schema) -> tuple[dict[str, Any], ...]:
    # (schemas are immutable, and every sync asks for the same one several times)
    return tuple(_field(f, f.name) for f in schema.arrow)


def iceberg_schema(schema: Schema, schema_id: int) -> dict[str, Any]:
    """``schema`` as an Iceberg schema object with id ``schema_id`` (its fields' ids are Lamina's)."""
    return {"type": "struct", "schema-id": schema_id, "fields": list(_fields(schema))}


def check_supported(schema: Schema) -> None:
    """IcebergUnsupported naming the first column Iceberg cannot represent."""
    iceberg_schema(schema, schema.schema_id)


def default_json(stored: Any, t: pa.DataType, where: str) -> Any:
    """A Lamina default (as ``lamina.spec.schema.encode_default`` stores it) in Iceberg's JSON
    single-value serialization: numbers and booleans as they are, decimals as strings, dates
    ``YYYY-MM-DD``, times and timestamps ISO 8601 with microseconds (``+00:00`` with a
    zone), binary and fixed as hexadecimal."""
    kind = primitive_type(t, where)
    if stored is None:
        return None
    if kind in ("float", "double") and stored == "NaN":
        raise IcebergUnsupported(f"column {where!r} has a NaN default, which Iceberg's JSON defaults cannot hold")
    if kind.startswith("decimal"):
        exact = decimal.Context(prec=80)
        return str(decimal.Decimal(str(stored)).quantize(decimal.Decimal(1).scaleb(-t.scale), context=exact))
    if kind == "date":
        return _dt.date.fromisoformat(str(stored)[:10]).isoformat()
    if kind == "time":
        return _dt.time.fromisoformat(str(stored)).strftime("%H:%M:%S.%f")
    if kind.startswith("timestamp"):
        ts = _dt.datetime.fromisoformat(str(stored))
        if kind.startswith("timestamptz"):
            ts = (ts if ts.tzinfo is not None else ts.replace(tzinfo=_dt.UTC)).astimezone(_dt.UTC)
            return ts.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00"
        return ts.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return stored  # numbers, booleans, strings; binary and fixed are hexadecimal already


def name_mapping(schemas: Iterable[Schema], lineage: bool) -> list[dict[str, Any]]:
    """The name mapping of every field of ``schemas`` (by field id, each under its physical
    name), plus the lineage columns' when the table keeps row lineage."""

    def walk(fields: Iterable[tuple[pa.Field, str]], out: dict[int, dict[str, Any]]) -> None:
        for f, name in fields:
            fid = field_id_of(f)
            entry = out.setdefault(fid, {"field-id": fid, "names": [], "_kids": {}})
            if name not in entry["names"]:
                entry["names"].append(name)
            walk(_parquet_children(f.type), entry["_kids"])

    def render(level: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for fid in sorted(level):
            e = level[fid]
            item: dict[str, Any] = {"field-id": fid, "names": e["names"]}
            if e["_kids"]:
                item["fields"] = render(e["_kids"])
            out.append(item)
        return out

    top: dict[int, dict[str, Any]] = {}
    for s in schemas:
        walk(((f, physical_name_of(f)) for f in s.arrow), top)
    mapping = render(top)
    if lineage:
        mapping += [dict(m) for m in LINEAGE_MAPPING]
    return mapping


def _parquet_children(t: pa.DataType) -> list[tuple[pa.Field, str]]:
    """A nested type's children with the names Parquet gives them: struct fields their physical
    names, a list's element ``element`` and a map's ``key`` and ``value`` (the compliant
    nested layout pyarrow writes)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [(t.value_field, "element")]
    if pa.types.is_map(t):
        return [(t.key_field, "key"), (t.item_field, "value")]
    return [(c, physical_name_of(c)) for c in children_of(t)]


def merge_mappings(*mappings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The union of name mappings, by field id at every depth (names of a field unioned):
    a view's mapping keeps the fields of every schema a kept snapshot has."""
    merged: dict[int, dict[str, Any]] = {}
    for mapping in mappings:
        for m in mapping:
            fid = int(m["field-id"])
            into = merged.setdefault(fid, {"field-id": fid, "names": [], "fields": []})
            into["names"] += [n for n in m.get("names", []) if n not in into["names"]]
            if m.get("fields"):
                into["fields"] = merge_mappings(into["fields"], m["fields"])
    out = []
    for fid in sorted(merged):
        e = merged[fid]
        out.append({k: v for k, v in e.items() if k != "fields" or v})
    return out
