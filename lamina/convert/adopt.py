"""Adopting another table's files as a Lamina table's first version, in place.

A source reader (``parquet_dir``, ``delta``, ``iceberg``) describes what it found as an
``Adoptable``: the schema (field ids, physical names), the partition specs, one row per data
file (path, size, record count, statistics, partition values) and the positions of the
rows its deletes remove. ``adopt`` checks all of it before anything is written, creates
the table (version 0, with the source's schema and specs) and commits version 1 adding the
files as external files (format.md, "External files"): no data file is copied or
rewritten, and the table never deletes one. Deletes become Lamina deletion vectors, in
one DV file the table owns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lamina.data.deletes import bitmap_of, write_dv_file
from lamina.data.inflight import new_write_id
from lamina.errors import InvalidArgument
from lamina.io import FileIO
from lamina.manifest.entries import entries_from_user_files, manifest_schema_of
from lamina.operations import check_added_files
from lamina.spec import content as C
from lamina.spec.features import COLUMN_MAPPING, EXTERNAL_FILES, HIDDEN_PARTITIONING, PARTITION_EVOLUTION, with_features
from lamina.spec.layout import DATA_DIR, META_DIR
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema
from lamina.spec.stats import stats_policy
from lamina.table import Table
from lamina.table.table import create_table_at, initial_version


@dataclass
class Adoptable:
    """What a source reader found: enough to make the table, checked before anything is written."""

    kind: str  # "parquet", "delta", "iceberg"
    source: str  # where the source is (for the version's summary)
    schema: Schema
    spec: PartitionSpec  # the current spec
    files: pa.Table  # the add_files columns, ``path`` an absolute location (or a local path)
    specs: tuple[PartitionSpec, ...] = ()  # every spec, oldest first, when there are several
    # for files of another spec than the current: (file number, spec id, {field id: value})
    older_partitions: list[tuple[int, int, dict[int, Any]]] = field(default_factory=list)
    deleted: dict[str, np.ndarray] = field(default_factory=dict)  # path -> deleted row positions
    tags: tuple[str, ...] = ()  # tags of the adopted snapshot, made for version 1


def entry_path(io: FileIO, location: str) -> str:
    """The entry path of a source file: relative when it lies under the table's root (in
    place), else its absolute location (``file:///...``, ``s3://bucket/key``). A file
    under the root's ``data/`` or ``_lamina/`` would be taken for one the table owns."""
    if io.is_local:
        absolute = location[len("file://") :] if location.startswith("file://") else location
        root = io.uri
        uri = "file://" + absolute
    else:
        absolute, root, uri = location, io.uri, location
    if absolute.startswith(root.rstrip("/") + "/"):
        rel = absolute[len(root.rstrip("/")) + 1 :]
        if rel.startswith((f"{DATA_DIR}/", f"{META_DIR}/")):
            raise InvalidArgument(
                f"source file {location} lies under the new table's {rel.split('/')[0]}/, which a Lamina table "
                "owns (it would delete the file once no version needs it): give the table another location. "
                "Nothing was written."
            )
        return rel
    return uri


def adopt(
    found: Adoptable,
    location: str,
    *,
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Table:
    """Create the Lamina table at ``location`` holding ``found``'s files, without copying
    them: version 0 has the source's schema and partition specs, version 1 adds its files
    (``operation: "convert"``), their deletes as deletion vectors, and ``found.tags``.
    Everything that can be refused is checked before the table is created."""
    io = FileIO(location, storage_options)
    files = found.files
    paths = [entry_path(io, p) for p in files.column("path").to_pylist()]
    files = files.set_column(files.schema.get_field_index("path"), "path", pa.array(paths, pa.string()))
    vm = _version_zero(found, properties)
    entries = entries_from_user_files(
        files, vm.schema, vm.partition_spec, manifest_schema_of(vm), stats_policy(vm.schema, vm.properties)
    )
    entries = _with_older_partitions(entries, found)
    check_added_files(entries, io, check_files=False)  # (sizes come from the source's own metadata)
    table = create_table_at(location, vm, storage_options=storage_options)
    write_id = new_write_id()
    entries = _with_deletion_vectors(entries, paths, found, table.io, write_id)
    tx = table.transaction()
    tx.add_entries(entries, operation="convert", write_id=write_id, refuse_present=True)
    for tag in found.tags:
        tx.create_tag(tag)
    tx.commit()
    return table.refresh()


def _version_zero(found: Adoptable, properties: Mapping[str, Any] | None) -> Any:
    """The new table's version 0: the source's schema (ids, physical names) and specs."""
    names = pa.schema([pa.field(f.name, f.type, f.nullable) for f in found.schema.arrow])
    base = initial_version(names, None, properties)  # (checks the names and properties)
    specs = found.specs or (found.spec,)
    reader = with_features(base.reader_features, EXTERNAL_FILES)
    writer = with_features(base.writer_features, EXTERNAL_FILES)
    if not found.spec.is_unpartitioned or len(specs) > 1:
        reader, writer = with_features(reader, HIDDEN_PARTITIONING), with_features(writer, HIDDEN_PARTITIONING)
    if len(specs) > 1:
        writer = with_features(writer, PARTITION_EVOLUTION)
    if found.schema.is_evolved:
        reader, writer = with_features(reader, COLUMN_MAPPING), with_features(writer, COLUMN_MAPPING)
    return dataclasses.replace(
        base,
        schema=found.schema,
        partition_spec=found.spec,
        partition_specs=specs if len(specs) > 1 else (),
        reader_features=reader,
        writer_features=writer,
        summary={**base.summary, "converted-from": found.kind, "source": found.source},
    )


def _with_older_partitions(entries: pa.Table, found: Adoptable) -> pa.Table:
    """Entries of files written under an older spec: its id and its fields' values."""
    if not found.older_partitions:
        return entries
    cols = {n: entries.column(n).to_pylist() for n in entries.column_names}
    for i, spec_id, values in found.older_partitions:
        cols["spec_id"][i] = spec_id
        for pf in found.spec.fields:  # the current spec's values do not apply to it
            for name in (C.pmin_col(pf.field_id), C.pmax_col(pf.field_id)):
                if name in cols:
                    cols[name][i] = None
        for fid, v in values.items():
            for name in (C.pmin_col(fid), C.pmax_col(fid)):
                if name in cols:
                    cols[name][i] = v
    return pa.table(
        {n: pa.array(cols[n], entries.schema.field(n).type) for n in entries.column_names}, schema=entries.schema
    )


def _with_deletion_vectors(
    entries: pa.Table, paths: list[str], found: Adoptable, io: FileIO, write_id: str
) -> pa.Table:
    """Entries with the source's deleted rows as deletion vectors (one DV file), their
    record counts the live rows."""
    if not found.deleted:
        return entries
    by_source = dict(zip(found.files.column("path").to_pylist(), range(len(paths))))
    hit = [(by_source[p], pos) for p, pos in found.deleted.items() if p in by_source and len(pos)]
    if not hit:
        return entries
    dvs = write_dv_file(io, write_id, [bitmap_of(pos) for _, pos in hit])
    cols = {
        n: entries.column(n).to_pylist()
        for n in ("record_count", "dv_path", "dv_offset", "dv_length", "dv_cardinality")
    }
    for (i, _), dv in zip(hit, dvs):
        cols["record_count"][i] -= dv.cardinality
        cols["dv_path"][i], cols["dv_offset"][i], cols["dv_length"][i], cols["dv_cardinality"][i] = (
            dv.path,
            dv.offset,
            dv.length,
            dv.cardinality,
        )
    for name, values in cols.items():
        i = entries.schema.get_field_index(name)
        entries = entries.set_column(i, entries.schema.field(i), pa.array(values, entries.schema.field(i).type))
    return entries
