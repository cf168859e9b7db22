"""An Iceberg table's current snapshot as an ``Adoptable``, through pyiceberg.

Opened by its metadata file (``StaticTable``), a table directory (its newest
``metadata/*.metadata.json``) or any pyiceberg ``Table`` (so through every catalog pyiceberg
has). Its schema keeps Iceberg's field ids, every partition spec its files were written with
is kept (same ids and transforms: Lamina's transforms are Iceberg's), the manifests' column
bounds (Iceberg's single-value serialization) become the entries' statistics, and position
deletes and v3 deletion vectors the rows the Lamina deletion vectors delete. Equality deletes,
types Lamina has no type for, non-Parquet files and the void transform are refused.
"""

from __future__ import annotations

import decimal
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamina.convert.adopt import Adoptable
from lamina.errors import InvalidArgument, UnconvertibleTable
from lamina.spec.partition import PartitionField, PartitionSpec
from lamina.spec.schema import FIELD_ID_KEY, Schema
from lamina.spec.transforms import transform_result_type

_POS_DELETE_PATH, _POS_DELETE_POS = 2147483546, 2147483545  # Iceberg's reserved field ids


def _load(source: Any, storage_options: Mapping[str, Any] | None) -> Any:
    from pyiceberg.table import StaticTable
    from pyiceberg.table import Table as IcebergTable

    if isinstance(source, IcebergTable):
        return source
    path = str(source)
    if not path.endswith(".metadata.json"):
        path = _newest_metadata(path)
    return StaticTable.from_metadata(path, properties=dict(storage_options or {}))


def _newest_metadata(directory: str) -> str:
    """The metadata file a table directory's ``version-hint.text`` names, else its newest."""
    import os

    meta = os.path.join(directory, "metadata")
    hint = os.path.join(meta, "version-hint.text")
    if os.path.exists(hint):
        with open(hint) as f:
            v = f.read().strip()
        for name in (f"v{v}.metadata.json", f"{v}.metadata.json"):
            if os.path.exists(os.path.join(meta, name)):
                return os.path.join(meta, name)
    found = sorted(n for n in os.listdir(meta) if n.endswith(".metadata.json")) if os.path.isdir(meta) else []
    if not found:
        raise InvalidArgument(f"{directory} holds no Iceberg metadata (metadata/*.metadata.json); nothing was written")
    return os.path.join(meta, max(found, key=_metadata_number))


def _metadata_number(name: str) -> tuple[int, str]:
    """``00003-<uuid>.metadata.json`` and ``v3.metadata.json`` are number 3."""
    head = name.lstrip("v").split("-")[0].split(".")[0]
    return (int(head) if head.isdigit() else -1, name)


def _arrow_type(t: Any, where: str) -> pa.DataType:
    from pyiceberg import types as it

    simple = {
        it.BooleanType: pa.bool_(),
        it.IntegerType: pa.int32(),
        it.LongType: pa.int64(),
        it.FloatType: pa.float32(),
        it.DoubleType: pa.float64(),
        it.DateType: pa.date32(),
        it.TimeType: pa.time64("us"),
        it.TimestampType: pa.timestamp("us"),
        it.TimestamptzType: pa.timestamp("us", "UTC"),
        it.TimestampNanoType: pa.timestamp("ns"),
        it.TimestamptzNanoType: pa.timestamp("ns", "UTC"),
        it.StringType: pa.string(),
        it.BinaryType: pa.binary(),
        it.UUIDType: pa.binary(16),
    }
    for cls, arrow in simple.items():
        if isinstance(t, cls):
            return arrow
    if isinstance(t, it.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, it.FixedType):
        return pa.binary(len(t))
    if isinstance(t, it.StructType):
        return pa.struct([_arrow_field(f, where) for f in t.fields])
    if isinstance(t, it.ListType):
        return pa.list_(
            pa.field(
                "element",
                _arrow_type(t.element_type, where),
                not t.element_required,
                {FIELD_ID_KEY: str(t.element_id).encode()},
            )
        )
    if isinstance(t, it.MapType):
        return pa.map_(
            pa.field("key", _arrow_type(t.key_type, where), False, {FIELD_ID_KEY: str(t.key_id).encode()}),
            pa.field(
                "value",
                _arrow_type(t.value_type, where),
                not t.value_required,
                {FIELD_ID_KEY: str(t.value_id).encode()},
            ),
        )
    raise UnconvertibleTable(
        f"{where} is of Iceberg type {t}, which Lamina has no type for; nothing was written", feature=f"type:{t}"
    )


def _arrow_field(f: Any, where: str = "") -> pa.Field:
    return pa.field(
        f.name,
        _arrow_type(f.field_type, f"column {f.name!r}"),
        not f.required,
        {FIELD_ID_KEY: str(f.field_id).encode()},
    )


def _renamed(tbl: Any) -> list[int]:
    """Field ids a schema of the table's history names otherwise than the current one."""
    current = {f.field_id: f.name for f in tbl.schema().fields}
    out = set()
    for s in tbl.metadata.schemas:
        for f in s.fields:
            if f.field_id in current and current[f.field_id] != f.name:
                out.add(f.field_id)
    return sorted(out)


def _specs(tbl: Any, schema: Schema) -> dict[int, PartitionSpec]:
    out = {}
    for spec_id, spec in sorted(tbl.specs().items()):
        fields = []
        for f in spec.fields:
            transform = str(f.transform)
            if transform == "void":
                raise UnconvertibleTable(
                    f"partition spec {spec_id} has a void field {f.name!r}; nothing was written",
                    feature="transform:void",
                )
            fields.append(PartitionField(f.source_id, f.field_id, f.name, transform))
        out[spec_id] = PartitionSpec(spec_id, tuple(fields))
    return out


def _bound(t: Any, raw: bytes | None, arrow: pa.DataType) -> Any:
    """A manifest bound (Iceberg's single-value serialization) as a Python value of ``arrow``."""
    from pyiceberg.conversions import from_bytes

    if raw is None:
        return None
    v = from_bytes(t, raw)
    if isinstance(v, uuid.UUID):
        return v.bytes
    if pa.types.is_timestamp(arrow) or pa.types.is_time(arrow) or pa.types.is_date(arrow):
        return (
            pa.scalar(v, pa.int64() if arrow.bit_width == 64 else pa.int32()).cast(arrow) if isinstance(v, int) else v
        )
    if isinstance(v, decimal.Decimal):
        return v
    return v


def _partition_value(v: Any, t: pa.DataType) -> Any:
    """An Iceberg partition value (days for ``day``, a uuid) as Lamina's partition type holds it."""
    if v is None:
        return None
    if isinstance(v, uuid.UUID):
        return v.bytes
    if isinstance(v, int) and (pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t)):
        return pa.scalar(v, pa.int64() if t.bit_width == 64 else pa.int32()).cast(t)
    return v


def read_iceberg(source: Any, storage_options: Mapping[str, Any] | None = None, tags: bool = False) -> Adoptable:
    from pyiceberg.manifest import DataFileContent, FileFormat

    tbl = _load(source, storage_options)
    renamed = _renamed(tbl)
    if renamed:
        raise UnconvertibleTable(
            f"the Iceberg table renamed column(s) {renamed} (field ids): its files store them under older names, "
            "which Iceberg finds by field id and Lamina by one physical name per column. Nothing was written.",
            feature="renamed-columns",
        )
    ischema = tbl.schema()
    schema = Schema(
        pa.schema([_arrow_field(f) for f in ischema.fields]), ischema.schema_id, tbl.metadata.last_column_id
    )
    specs = _specs(tbl, schema)
    current = specs[tbl.metadata.default_spec_id]
    snapshot = tbl.current_snapshot()
    if snapshot is not None:
        _refuse_equality_deletes(tbl, snapshot)
    tasks = list(tbl.scan().plan_files()) if snapshot is not None else []
    io = tbl.io
    rows: dict[str, list[Any]] = {"path": [], "size": [], "record_count": []}
    top = [(f, ischema.find_field(f.name)) for f in schema.arrow if not pa.types.is_nested(f.type)]
    for f, _ in top:
        for prefix in ("lower.", "upper.", "null_count."):
            rows[prefix + f.name] = []
    for pf in current.fields:
        rows["partition." + pf.name] = []
    older: list[tuple[int, int, dict[int, Any]]] = []
    deletes: dict[str, np.ndarray] = {}
    delete_cache: dict[str, dict[str, np.ndarray]] = {}
    for i, task in enumerate(tasks):
        df = task.file
        if df.file_format != FileFormat.PARQUET:
            raise UnconvertibleTable(
                f"data file {df.file_path} is {df.file_format}; Lamina's data files are Parquet. Nothing was written.",
                feature=f"format:{df.file_format}",
            )
        rows["path"].append(df.file_path)
        rows["size"].append(df.file_size_in_bytes)
        rows["record_count"].append(df.record_count)
        nan = df.nan_value_counts or {}
        for f, field in top:
            fid = field.field_id
            floating = pa.types.is_floating(f.type)
            keep = not floating or nan.get(fid) == 0
            rows["lower." + f.name].append(
                _bound(field.field_type, (df.lower_bounds or {}).get(fid), f.type) if keep else None
            )
            rows["upper." + f.name].append(
                _bound(field.field_type, (df.upper_bounds or {}).get(fid), f.type) if keep else None
            )
            rows["null_count." + f.name].append((df.null_value_counts or {}).get(fid))
        spec = specs[df.spec_id]
        values = {pf.field_id: df.partition[j] for j, pf in enumerate(spec.fields)}
        typed = {
            pf.field_id: _partition_value(
                values[pf.field_id],
                transform_result_type(pf.transform, schema.field(schema.name_of(pf.source_id)).type),
            )
            for pf in spec.fields
        }
        if df.spec_id == current.spec_id:
            for pf in current.fields:
                rows["partition." + pf.name].append(typed[pf.field_id])
        else:
            for pf in current.fields:
                rows["partition." + pf.name].append(None)
            older.append((i, df.spec_id, typed))
        positions = [
            _deleted_positions(io, d, df.file_path, delete_cache)
            for d in task.delete_files
            if _is_position_delete(d, DataFileContent)
        ]
        if positions:
            deletes[df.file_path] = np.unique(np.concatenate(positions)).astype(np.uint32)
    files = pa.table({k: _column(k, v, schema, current) for k, v in rows.items()})
    tagged = _tags(tbl, snapshot) if tags else ()
    return Adoptable(
        "iceberg",
        tbl.metadata_location,
        schema,
        current,
        files,
        specs=tuple(specs.values()) if len(specs) > 1 else (),
        older_partitions=older,
        deleted=deletes,
        tags=tagged,
    )


def _column(name: str, values: list[Any], schema: Schema, spec: PartitionSpec) -> pa.Array:
    if name in ("path",):
        return pa.array(values, pa.string())
    if name in ("size", "record_count") or name.startswith("null_count."):
        return pa.array(values, pa.int64())
    if name.startswith("partition."):
        pf = next(f for f in spec.fields if f.name == name[len("partition.") :])
        t = transform_result_type(pf.transform, schema.field(schema.name_of(pf.source_id)).type)
    else:
        t = schema.field(name.split(".", 1)[1]).type
    return pa.array([v.as_py() if isinstance(v, pa.Scalar) else v for v in values], t)


def _refuse_equality_deletes(tbl: Any, snapshot: Any) -> None:
    """Refuse a snapshot with equality deletes before planning (pyiceberg's planner itself
    fails on them with a bare ValueError); only delete manifests are read for it."""
    from pyiceberg.manifest import DataFileContent, ManifestContent

    for manifest in snapshot.manifests(tbl.io):
        if manifest.content != ManifestContent.DELETES:
            continue
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            _is_position_delete(entry.data_file, DataFileContent)


def _is_position_delete(d: Any, content: Any) -> bool:
    if d.content == content.EQUALITY_DELETES:
        raise UnconvertibleTable(
            f"delete file {d.file_path} holds equality deletes, which Lamina cannot represent (its deletes are "
            "positions). Rewrite them first (Iceberg's rewrite_position_delete_files / a compaction); nothing was "
            "written.",
            feature="equality-deletes",
        )
    return d.content == content.POSITION_DELETES


def _deleted_positions(
    io: Any, delete_file: Any, data_path: str, cache: dict[str, dict[str, np.ndarray]]
) -> np.ndarray:
    """The positions ``delete_file`` (position deletes, or a v3 deletion vector) deletes in ``data_path``."""
    from pyiceberg.manifest import FileFormat
    from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
    from pyiceberg.table.puffin import PuffinFile

    by_file = cache.get(delete_file.file_path)
    if by_file is None:
        with io.new_input(delete_file.file_path).open() as f:
            payload = f.read()
        if delete_file.file_format == FileFormat.PUFFIN:
            by_file = {
                dv.referenced_data_file: np.asarray(dv.to_vector(), dtype=np.int64)
                for dv in deletion_vectors_from_puffin_file(PuffinFile(payload))
            }
        elif delete_file.file_format == FileFormat.PARQUET:
            t = pq.read_table(pa.BufferReader(payload))
            by_file = {}
            paths, pos = t.column(0).to_pylist(), t.column(1).to_numpy()
            for p in set(paths):
                by_file[p] = pos[np.asarray(paths) == p]
        else:
            raise UnconvertibleTable(
                f"delete file {delete_file.file_path} is {delete_file.file_format}; nothing was written",
                feature=f"format:{delete_file.file_format}",
            )
        cache[delete_file.file_path] = by_file
    return by_file.get(data_path, np.array([], dtype=np.int64))


def _tags(tbl: Any, snapshot: Any) -> tuple[str, ...]:
    """The table's tags, which must all name the snapshot adopted (Lamina's first version)."""
    tags = {name: ref.snapshot_id for name, ref in tbl.metadata.refs.items() if str(ref.snapshot_ref_type) == "tag"}
    other = sorted(n for n, sid in tags.items() if snapshot is None or sid != snapshot.snapshot_id)
    if other:
        raise UnconvertibleTable(
            f"tag(s) {other} name snapshots older than the current one, which becomes Lamina's only version; convert "
            "without tags, or drop those tags first. Nothing was written.",
            feature="tags-of-older-snapshots",
        )
    return tuple(sorted(tags))
