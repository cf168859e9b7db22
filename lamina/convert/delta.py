"""A Delta table's current version as an ``Adoptable``, through ``deltalake`` (delta-rs).

Its add actions give the files with their statistics (``stats``: min, max, null counts),
its schema the columns (with column mapping: each column's physical name and id), its
deletion vectors the deleted rows. Reader features this does not know are refused, naming
them: they may change which rows a file holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from lamina.convert.adopt import Adoptable
from lamina.errors import UnconvertibleTable
from lamina.spec.partition import parse_partition_by
from lamina.spec.schema import FIELD_ID_KEY, PHYSICAL_NAME_KEY, Schema

# Delta reader features whose tables Lamina reads as they are: deletion vectors become
# Lamina's, column mapping its physical names, the others change no row a file holds.
KNOWN_READER_FEATURES = frozenset(
    {
        "deletionVectors",
        "columnMapping",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
    }
)
_MAPPING_ID = "delta.columnMapping.id"
_MAPPING_NAME = "delta.columnMapping.physicalName"


def _delta_table(source: Any, storage_options: Mapping[str, Any] | None) -> Any:
    import deltalake

    if isinstance(source, deltalake.DeltaTable):
        return source
    return deltalake.DeltaTable(source, storage_options=dict(storage_options) if storage_options else None)


def _field(f: pa.Field, mapping: bool, next_id: list[int]) -> pa.Field:
    """``f`` with Lamina's field id and physical name (Delta's column mapping), recursively."""
    md = dict(f.metadata or {})
    if mapping:
        fid = int(md[_MAPPING_ID.encode()])
        meta = {FIELD_ID_KEY: str(fid).encode(), PHYSICAL_NAME_KEY: md[_MAPPING_NAME.encode()]}
    else:
        fid = next_id[0]
        next_id[0] += 1
        meta = {FIELD_ID_KEY: str(fid).encode()}
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_field(c, mapping, next_id) for c in t])
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        t = pa.list_(_field(t.value_field, mapping, next_id))
    elif pa.types.is_map(t):
        t = pa.map_(_field(t.key_field, mapping, next_id), _field(t.item_field, mapping, next_id))
    return pa.field(f.name, t, f.nullable, meta)


def _schema(dt: Any, mapping: bool) -> Schema:
    arrow = pa.schema(dt.schema().to_arrow())
    for f in arrow:
        if "variant" in str(f.type).lower() or pa.types.is_null(f.type):
            raise UnconvertibleTable(
                f"column {f.name!r} is of Delta type {f.type}, which Lamina has no type for; nothing was written",
                feature=f"type:{f.type}",
            )
    if not mapping:
        return Schema.from_arrow(arrow)
    fields = [_field(f, True, [0]) for f in arrow]
    highest = int(dt.metadata().configuration.get("delta.columnMapping.maxColumnId", 0))
    return Schema(pa.schema(fields), 0, highest)


def read_delta(source: Any, storage_options: Mapping[str, Any] | None = None) -> Adoptable:
    dt = _delta_table(source, storage_options)
    protocol = dt.protocol()
    unknown = sorted(set(protocol.reader_features or ()) - KNOWN_READER_FEATURES)
    if unknown:
        raise UnconvertibleTable(
            f"the Delta table at {dt.table_uri} needs reader feature(s) {unknown}, which Lamina does not know: "
            "they may change which rows its files hold. Nothing was written.",
            feature=unknown[0],
        )
    config = dt.metadata().configuration
    mode = config.get("delta.columnMapping.mode", "none")
    schema = _schema(dt, mode in ("name", "id"))
    partition_columns = list(dt.metadata().partition_columns)
    if partition_columns:
        raise UnconvertibleTable(
            f"the Delta table at {dt.table_uri} is partitioned by {partition_columns}, whose values Delta keeps in "
            "its log, not in the data files; Lamina reads every column from its files, so adopting them would lose "
            "the values. Nothing was written.",
            feature="partition-values-in-log",
        )
    spec = parse_partition_by(None, schema)
    actions = pa.table(dt.get_add_actions(flatten=True))
    root = dt.table_uri.rstrip("/")
    paths = [p if "://" in p else f"{root}/{p}" for p in actions.column("path").to_pylist()]
    local = root.startswith("file://")
    if local:
        paths = [p[len("file://") :] if p.startswith("file://") else p for p in paths]
    cols: dict[str, Any] = {
        "path": pa.array(paths, pa.string()),
        "size": actions.column("size_bytes"),
        "record_count": actions.column("num_records"),
    }
    for f in schema.arrow:
        if pa.types.is_nested(f.type):
            continue
        for delta_key, ours in (("null_count", "null_count"), ("min", "lower"), ("max", "upper")):
            name = f"{delta_key}.{f.name}"
            if name not in actions.column_names:
                continue
            if ours != "null_count" and pa.types.is_floating(f.type):
                continue  # Delta's float bounds say nothing of NaN: a Lamina float bound says there is none
            col = actions.column(name)
            try:
                cols[f"{ours}.{f.name}"] = col.cast(pa.int64() if ours == "null_count" else f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue  # a bound of a type Arrow cannot cast: unknown
    if any(c is None for c in cols["record_count"].to_pylist()):
        raise UnconvertibleTable(
            f"the Delta table at {dt.table_uri} has files without a record count in their "
            "statistics; nothing was written",
            feature="add-without-numRecords",
        )
    return Adoptable("delta", dt.table_uri, schema, spec, pa.table(cols), deleted=_deleted_rows(dt, local))


def _deleted_rows(dt: Any, local: bool) -> dict[str, np.ndarray]:
    """Each file's deleted row positions, from its deletion vector (deltalake's keep masks)."""
    out: dict[str, np.ndarray] = {}
    dvs = pa.table(dt.deletion_vectors())
    for path, keep in zip(dvs.column("filepath").to_pylist(), dvs.column("selection_vector").to_pylist()):
        if local and path.startswith("file://"):
            path = path[len("file://") :]
        out[path] = np.flatnonzero(~np.asarray(keep, dtype=bool)).astype(np.uint32)
    return out
