"""Lamina manifest entries as Iceberg manifests: one data manifest, and one delete manifest
of deletion vectors, per partition spec of a group of entries.

A group is what one Iceberg manifest pair is derived from, and what decides its reuse: a
Lamina leaf manifest (immutable, so its Iceberg manifests are written once and carried by
every later snapshot that still lists the leaf), or the inline entries of a root that one
version added (a new group for each version that adds inline files; unchanged groups are
carried too). The manifest names carry the group's key (``m-<key>-s<spec>-<d|x>-<random>.avro``)
so the manifests of a snapshot can be matched to Lamina's tree again from its manifest list.

Entries become Iceberg data files as follows (docs/iceberg.md, "Files"):

- ``record_count`` is the physical rows (Lamina's live rows plus those its DV deletes);
- sequence numbers: the data sequence number is the entry's ``data_version`` (the version
  whose write made its rows; its ``added_version`` on tables without lineage), the file
  sequence number its ``added_version``; status ADDED with the snapshot's id for files the
  version added, EXISTING otherwise (their snapshot id is inherited from the manifest);
- statistics: null counts, value counts (physical rows, for top-level primitive columns
  whose null count is known), NaN counts (0 where a float column has bounds: Lamina keeps no
  float bounds for a file holding NaN), and bounds in the single-value serialization;
- ``first_row_id`` is the entry's (row lineage).

A deletion vector becomes a delete file (content 1, format PUFFIN) naming its data file
(``referenced_data_file``, and the ``file_path`` bounds Iceberg readers index position
deletes by) with the data file's partition and data sequence number, so it applies to it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.iceberg import avro
from lamina.iceberg.values import avro_column, serialize_column
from lamina.io import FileIO
from lamina.spec import content as C
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema, field_id_of

METADATA_DIR = "metadata"
FILE_PATH_FIELD_ID = 2147483546  # Iceberg's file_path column of position deletes


def leaf_key(leaf_path: str) -> str:
    """The group key of a Lamina leaf manifest (its unique name's stem)."""
    stem = leaf_path.rsplit("/", 1)[-1].split(".", 1)[0]
    return "L" + stem.replace("-", "")


def inline_key_of(files: list[tuple[str, str | None, int | None]]) -> str:
    """The group key of inline entries: a digest of their (path, DV path, DV offset)s."""
    h = hashlib.sha1()
    for row in sorted(files, key=lambda r: (r[0], r[1] or "", r[2] or 0)):
        h.update(repr(row).encode())
        h.update(b"\0")
    return "I" + h.hexdigest()[:24]


def key_of_manifest(path: str) -> str | None:
    """The group key in a manifest name this module wrote (None for another name)."""
    name = path.rsplit("/", 1)[-1]
    parts = name.split("-")
    return parts[1] if len(parts) >= 5 and parts[0] == "m" else None


def avro_name(name: str) -> str:
    """``name`` as a valid Avro name, as Iceberg's writers make it (readers match by field id)."""
    out = []
    for i, ch in enumerate(name):
        if ch.isascii() and (ch.isalpha() or ch == "_" or (i and ch.isdigit())):
            out.append(ch)
        elif i == 0 and ch.isdigit():
            out.append("_" + ch)
        else:
            out.append(f"_x{ord(ch):X}")
    return "".join(out) or "_"


@dataclass
class DvLocation:
    puffin_path: str  # relative to the table root
    offset: int
    length: int
    puffin_size: int
    cardinality: int


@dataclass
class GroupContext:
    """What converting one version's groups needs."""

    io: FileIO
    schema: Schema  # the version's schema
    schema_json: dict[str, Any]  # as the view's metadata has it
    specs: dict[int, PartitionSpec]  # Lamina spec id -> spec
    view_spec_ids: dict[int, int]  # Lamina spec id -> view spec id
    mschema: pa.Schema  # the version's manifest schema
    version: int
    snapshot_id: int
    uri: Callable[[str], str]  # a table path as Iceberg readers open it
    # (dv path, offset, length, data file path) of each DV -> where its Puffin blob is
    find_dvs: Callable[[list[tuple[str, int, int, str]]], dict[tuple[str, int], DvLocation]]
    new_puffins: set[str] = field(default_factory=set)  # written for this version
    written: list[str] = field(default_factory=list)  # manifests written


def _partition(spec: PartitionSpec, schema: Schema) -> list[tuple[int, str, pa.DataType]]:
    return [(f.field_id, avro_name(f.name), t.type) for f, t in zip(spec.fields, spec.partition_type(schema))]


def _spec_json(spec: PartitionSpec, view_id: int) -> dict[str, Any]:
    return {
        "spec-id": view_id,
        "fields": [
            {"source-id": f.source_id, "field-id": f.field_id, "name": f.name, "transform": f.transform}
            for f in spec.fields
        ],
    }


def _stats(entries: pa.Table, schema: Schema, physical: list[int]) -> list[dict[str, Any]]:
    """Per entry: value, null and NaN counts and bounds, as the manifest's maps."""
    names = set(entries.column_names)
    n = entries.num_rows
    out: list[dict[str, Any]] = [
        {"value_counts": [], "null_value_counts": [], "nan_value_counts": [], "lower_bounds": [], "upper_bounds": []}
        for _ in range(n)
    ]
    for f in schema.arrow:
        fid = field_id_of(f)
        nulls_name, lo_name, hi_name = C.nulls_col(fid), C.min_col(fid), C.max_col(fid)
        if nulls_name in names and not pa.types.is_nested(f.type):
            for i, v in enumerate(entries.column(nulls_name).to_pylist()):
                if v is not None:
                    out[i]["null_value_counts"].append({"key": fid, "value": v})
                    out[i]["value_counts"].append({"key": fid, "value": physical[i]})
        if lo_name in names and hi_name in names:
            lo = serialize_column(entries.column(lo_name), f.type, upper=False)
            hi = serialize_column(entries.column(hi_name), f.type, upper=True)
            floats = pa.types.is_floating(f.type)
            for i in range(n):
                if lo[i] is not None:
                    out[i]["lower_bounds"].append({"key": fid, "value": lo[i]})
                if hi[i] is not None:
                    out[i]["upper_bounds"].append({"key": fid, "value": hi[i]})
                if floats and lo[i] is not None and hi[i] is not None:
                    out[i]["nan_value_counts"].append({"key": fid, "value": 0})
    return out


def _summaries(values: list[list[Any]], types: list[pa.DataType]) -> list[dict[str, Any]]:
    """The manifest list's partition field summaries of a manifest's partition values."""
    out = []
    for col, t in zip(values, types):
        arr = pa.array(col, t)
        nan = bool(pa.types.is_floating(t) and pc.any(pc.is_nan(arr)).as_py())
        clean = arr.filter(pc.invert(pc.fill_null(pc.is_nan(arr), False))) if pa.types.is_floating(t) else arr
        clean = clean.drop_null()
        lo = hi = None
        if len(clean):
            mm = pc.min_max(clean)
            lo = serialize_column(pa.array([mm["min"].as_py()], t), t, upper=False)[0]
            hi = serialize_column(pa.array([mm["max"].as_py()], t), t, upper=True)[0]
        out.append({"contains_null": arr.null_count > 0, "contains_nan": nan, "lower_bound": lo, "upper_bound": hi})
    return out


def _name(key: str, view_spec: int, kind: str) -> str:
    return f"{METADATA_DIR}/m-{key}-s{view_spec}-{kind}-{uuid.uuid4().hex[:16]}.avro"


def write_group(ctx: GroupContext, key: str, entries: pa.Table) -> list[dict[str, Any]]:
    """Write the Iceberg manifests of one group's live data-file ``entries`` (in the version's
    manifest schema); returns their manifest list rows."""
    rows: list[dict[str, Any]] = []
    if not entries.num_rows:
        return rows
    spec_ids = entries.column("spec_id").to_pylist()
    for spec_id in sorted(set(spec_ids)):
        part = entries if len(set(spec_ids)) == 1 else entries.filter(pc.equal(entries.column("spec_id"), spec_id))
        rows += _write_spec_group(ctx, key, spec_id, part)
    return rows


def _write_spec_group(ctx: GroupContext, key: str, spec_id: int, entries: pa.Table) -> list[dict[str, Any]]:
    spec = ctx.specs[spec_id]
    view_spec = ctx.view_spec_ids[spec_id]
    partition = _partition(spec, ctx.schema)
    n = entries.num_rows
    names = set(entries.column_names)
    # partition values (a data file's value is its pmin; a field whose source was dropped: null)
    pvalues = []
    for fid, _, t in partition:
        col = C.pmin_col(fid)
        pvalues.append(avro_column(entries.column(col), t) if col in names else [None] * n)
    partitions = [{name: pvalues[j][i] for j, (_, name, _) in enumerate(partition)} for i in range(n)]
    live = entries.column("record_count").to_pylist()
    dv_card = entries.column("dv_cardinality").to_pylist()
    physical = [r + (d or 0) for r, d in zip(live, dv_card)]
    added = entries.column("added_version").to_pylist()
    data_version = entries.column(DATA_VERSION).to_pylist() if DATA_VERSION in names else [None] * n
    first_row = entries.column(FIRST_ROW_ID).to_pylist() if FIRST_ROW_ID in names else [None] * n
    data_seq = [d if d is not None else a for d, a in zip(data_version, added)]
    paths = entries.column("path").to_pylist()
    sizes = entries.column("size").to_pylist()
    stats = _stats(entries, ctx.schema, physical)
    records = []
    for i in range(n):
        is_new = added[i] == ctx.version
        records.append(
            _entry(
                ctx,
                is_new,
                data_seq[i],
                added[i],
                content=avro.DATA,
                file_path=ctx.uri(paths[i]),
                file_format="PARQUET",
                partition=partitions[i],
                record_count=physical[i],
                file_size_in_bytes=sizes[i],
                first_row_id=first_row[i],
                **{k: (v or None) for k, v in stats[i].items()},
            )
        )
    spec_json = _spec_json(spec, view_spec)
    types = [t for _, _, t in partition]
    rows = [
        _store(
            ctx,
            _name(key, view_spec, "d"),
            records,
            partition,
            spec_json,
            avro.DATA,
            pvalues,
            types,
            first_row_id=min((f for f in first_row if f is not None), default=None),
        )
    ]
    # deletion vectors
    dv_paths = entries.column("dv_path").to_pylist()
    with_dv = [i for i in range(n) if dv_paths[i] is not None]
    if with_dv:
        offsets = entries.column("dv_offset").to_pylist()
        lengths = entries.column("dv_length").to_pylist()
        found = ctx.find_dvs([(dv_paths[i], offsets[i], lengths[i], paths[i]) for i in with_dv])
        deletes = []
        for i in with_dv:
            loc = found[(dv_paths[i], offsets[i])]
            is_new = loc.puffin_path in ctx.new_puffins
            ref = ctx.uri(paths[i]).encode()
            deletes.append(
                _entry(
                    ctx,
                    is_new,
                    data_seq[i],
                    data_seq[i],
                    content=avro.DELETES,
                    file_path=ctx.uri(loc.puffin_path),
                    file_format="PUFFIN",
                    partition=partitions[i],
                    record_count=loc.cardinality,
                    file_size_in_bytes=loc.puffin_size,
                    lower_bounds=[{"key": FILE_PATH_FIELD_ID, "value": ref}],
                    upper_bounds=[{"key": FILE_PATH_FIELD_ID, "value": ref}],
                    referenced_data_file=ctx.uri(paths[i]),
                    content_offset=loc.offset,
                    content_size_in_bytes=loc.length,
                )
            )
        dvalues = [[col[i] for i in with_dv] for col in pvalues]
        rows.append(
            _store(
                ctx,
                _name(key, view_spec, "x"),
                deletes,
                partition,
                spec_json,
                avro.DELETES,
                dvalues,
                types,
                first_row_id=None,
            )
        )
    return rows


_OPTIONAL = (
    "column_sizes",
    "value_counts",
    "null_value_counts",
    "nan_value_counts",
    "lower_bounds",
    "upper_bounds",
    "key_metadata",
    "split_offsets",
    "equality_ids",
    "sort_order_id",
    "first_row_id",
    "referenced_data_file",
    "content_offset",
    "content_size_in_bytes",
)


def _entry(
    ctx: GroupContext, is_new: bool, sequence_number: int, file_sequence_number: int, **data_file: Any
) -> dict[str, Any]:
    """A manifest entry: ADDED with the snapshot's id if the file is new to this version, else
    EXISTING (its snapshot id inherited from the manifest); ``data_file``'s fields not given are null."""
    return {
        "status": avro.ADDED if is_new else avro.EXISTING,
        "snapshot_id": ctx.snapshot_id if is_new else None,
        "sequence_number": sequence_number,
        "file_sequence_number": file_sequence_number,
        "data_file": {**dict.fromkeys(_OPTIONAL), **data_file},
    }


def _store(
    ctx: GroupContext,
    path: str,
    records: list[dict[str, Any]],
    partition: list[tuple[int, str, pa.DataType]],
    spec_json: dict[str, Any],
    content: int,
    pvalues: list[list[Any]],
    types: list[pa.DataType],
    first_row_id: int | None,
) -> dict[str, Any]:
    data = avro.manifest_bytes(records, partition, ctx.schema_json, spec_json, content)
    ctx.io.put_new(path, data)
    ctx.written.append(path)
    added = [r for r in records if r["status"] == avro.ADDED]
    existing = [r for r in records if r["status"] == avro.EXISTING]
    seqs = [r["sequence_number"] for r in records]
    return {
        "manifest_path": ctx.uri(path),
        "manifest_length": len(data),
        "partition_spec_id": spec_json["spec-id"],
        "content": content,
        "sequence_number": ctx.version,
        "min_sequence_number": min(seqs),
        "added_snapshot_id": ctx.snapshot_id,
        "added_files_count": len(added),
        "existing_files_count": len(existing),
        "deleted_files_count": 0,
        "added_rows_count": sum(r["data_file"]["record_count"] for r in added),
        "existing_rows_count": sum(r["data_file"]["record_count"] for r in existing),
        "deleted_rows_count": 0,
        "partitions": _summaries(pvalues, types) if partition else None,
        "key_metadata": None,
        "first_row_id": first_row_id,
    }
