"""Iceberg v3 manifests and manifest lists as Avro files, written by fastavro.

The record schemas are the Iceberg spec's (format version 3), field ids included (Iceberg
readers resolve Avro fields by ``field-id``); maps keyed by int are Avro arrays of key/value
records with ``logicalType: map``, as the spec and Iceberg's writers lay them out. The
partition struct of a manifest entry is built from the spec's fields and their result types.
"""

from __future__ import annotations

import io as _io
import json
from typing import Any, cast

import fastavro
import pyarrow as pa

from lamina.iceberg.types import primitive_type

FORMAT_VERSION = 3
DATA, DELETES = 0, 1  # manifest content (and data file content: 0 data, 1 position deletes)
ADDED, EXISTING, DELETED = 1, 0, 2  # manifest entry status


def _opt(t: Any) -> list[Any]:
    return ["null", t]


def _field(name: str, fid: int, t: Any, required: bool = True, doc: str | None = None) -> dict[str, Any]:
    f: dict[str, Any] = {"name": name, "type": t if required else _opt(t), "field-id": fid}
    if not required:
        f["default"] = None
    if doc:
        f["doc"] = doc
    return f


def _int_map(fid: int, key_id: int, value_id: int, value: Any) -> dict[str, Any]:
    items = {
        "type": "record",
        "name": f"k{key_id}_v{value_id}",
        "fields": [
            {"name": "key", "type": "int", "field-id": key_id},
            {"name": "value", "type": value, "field-id": value_id},
        ],
    }
    return {"type": "array", "logicalType": "map", "items": items}


def avro_primitive(t: pa.DataType, name: str) -> Any:
    """The Avro type of a partition value of Arrow type ``t`` (Iceberg's Avro mapping)."""
    kind = primitive_type(t, name)
    if kind.startswith("decimal"):
        size = _decimal_bytes(t.precision)
        return {
            "type": "fixed",
            "name": f"decimal_{t.precision}_{t.scale}",
            "size": size,
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if kind.startswith("fixed"):
        return {"type": "fixed", "name": f"fixed_{t.byte_width}", "size": t.byte_width}
    return {
        "boolean": "boolean",
        "int": "int",
        "long": "long",
        "float": "float",
        "double": "double",
        "string": "string",
        "binary": "bytes",
        "date": {"type": "int", "logicalType": "date"},
        "time": {"type": "long", "logicalType": "time-micros"},
        "timestamp": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False},
        "timestamptz": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True},
    }[kind]


def _decimal_bytes(precision: int) -> int:
    """Bytes of the smallest fixed that holds every unscaled value of ``precision`` digits."""
    n = 1
    while 2 ** (8 * n - 1) <= 10**precision:
        n += 1
    return n


def manifest_entry_schema(partition: list[tuple[int, str, pa.DataType]]) -> dict[str, Any]:
    """The manifest_entry record of a manifest whose spec's fields are ``partition``
    ((field id, name, result type) each)."""
    part = {
        "type": "record",
        "name": "r102",
        "fields": [_field(name, fid, avro_primitive(t, name), required=False) for fid, name, t in partition],
    }
    data_file = {
        "type": "record",
        "name": "r2",
        "fields": [
            _field("content", 134, "int"),
            _field("file_path", 100, "string"),
            _field("file_format", 101, "string"),
            _field("partition", 102, part),
            _field("record_count", 103, "long"),
            _field("file_size_in_bytes", 104, "long"),
            _field("column_sizes", 108, _int_map(108, 117, 118, "long"), required=False),
            _field("value_counts", 109, _int_map(109, 119, 120, "long"), required=False),
            _field("null_value_counts", 110, _int_map(110, 121, 122, "long"), required=False),
            _field("nan_value_counts", 137, _int_map(137, 138, 139, "long"), required=False),
            _field("lower_bounds", 125, _int_map(125, 126, 127, "bytes"), required=False),
            _field("upper_bounds", 128, _int_map(128, 129, 130, "bytes"), required=False),
            _field("key_metadata", 131, "bytes", required=False),
            _field("split_offsets", 132, {"type": "array", "items": "long", "element-id": 133}, required=False),
            _field("equality_ids", 135, {"type": "array", "items": "int", "element-id": 136}, required=False),
            _field("sort_order_id", 140, "int", required=False),
            _field("first_row_id", 142, "long", required=False),
            _field("referenced_data_file", 143, "string", required=False),
            _field("content_offset", 144, "long", required=False),
            _field("content_size_in_bytes", 145, "long", required=False),
        ],
    }
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            _field("status", 0, "int"),
            _field("snapshot_id", 1, "long", required=False),
            _field("sequence_number", 3, "long", required=False),
            _field("file_sequence_number", 4, "long", required=False),
            _field("data_file", 2, data_file),
        ],
    }


MANIFEST_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        _field("manifest_path", 500, "string"),
        _field("manifest_length", 501, "long"),
        _field("partition_spec_id", 502, "int"),
        _field("content", 517, "int"),
        _field("sequence_number", 515, "long"),
        _field("min_sequence_number", 516, "long"),
        _field("added_snapshot_id", 503, "long"),
        _field("added_files_count", 504, "int"),
        _field("existing_files_count", 505, "int"),
        _field("deleted_files_count", 506, "int"),
        _field("added_rows_count", 512, "long"),
        _field("existing_rows_count", 513, "long"),
        _field("deleted_rows_count", 514, "long"),
        _field(
            "partitions",
            507,
            {
                "type": "array",
                "element-id": 508,
                "items": {
                    "type": "record",
                    "name": "r508",
                    "fields": [
                        _field("contains_null", 509, "boolean"),
                        _field("contains_nan", 518, "boolean", required=False),
                        _field("lower_bound", 510, "bytes", required=False),
                        _field("upper_bound", 511, "bytes", required=False),
                    ],
                },
            },
            required=False,
        ),
        _field("key_metadata", 519, "bytes", required=False),
        _field("first_row_id", 520, "long", required=False),
    ],
}


_parsed: dict[str, Any] = {}  # schema JSON -> fastavro's parsed schema (parsing is most of a small file's cost)
SMALL = 256  # records below which a file is written uncompressed (deflate's set-up outweighs its savings)


def _parse(schema: dict[str, Any]) -> Any:
    key = json.dumps(schema, sort_keys=True)
    parsed = _parsed.get(key)
    if parsed is None:
        if len(_parsed) > 128:
            _parsed.clear()
        parsed = _parsed[key] = fastavro.parse_schema(schema)
    return parsed


def encode(schema: dict[str, Any], records: list[dict[str, Any]], metadata: dict[str, str]) -> bytes:
    """An Avro object container file of ``records`` (deflate unless small), with ``metadata``
    in its header."""
    out = _io.BytesIO()
    fastavro.writer(
        out, _parse(schema), records, metadata=metadata, codec="deflate" if len(records) >= SMALL else "null"
    )
    return out.getvalue()


def manifest_list_bytes(
    rows: list[dict[str, Any]], snapshot_id: int, parent_id: int | None, sequence_number: int, first_row_id: int | None
) -> bytes:
    meta = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_id is None else str(parent_id),
        "sequence-number": str(sequence_number),
        "format-version": str(FORMAT_VERSION),
    }
    if first_row_id is not None:
        meta["first-row-id"] = str(first_row_id)
    return encode(MANIFEST_FILE_SCHEMA, rows, meta)


def manifest_bytes(
    records: list[dict[str, Any]],
    partition: list[tuple[int, str, pa.DataType]],
    schema_json: dict[str, Any],
    spec_json: dict[str, Any],
    content: int,
) -> bytes:
    meta = {
        "schema": json.dumps(schema_json),
        "schema-id": str(schema_json["schema-id"]),
        "partition-spec": json.dumps(spec_json["fields"]),
        "partition-spec-id": str(spec_json["spec-id"]),
        "format-version": str(FORMAT_VERSION),
        "content": "data" if content == DATA else "deletes",
    }
    return encode(manifest_entry_schema(partition), records, meta)


def read(data: bytes) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The records and header metadata of an Avro file this module wrote."""
    reader = fastavro.reader(_io.BytesIO(data))
    records = cast(list[dict[str, Any]], list(reader))  # this module writes record schemas only
    return records, dict(reader.metadata)
