"""Data-file entries from Parquet footers: size, row count, per-column bounds and null counts.

Spark's native writer does not report what it wrote, so the driver reads each
new file's footer (threads; a footer is a few KB) and turns row-group statistics
into Lamina's file statistics with Arrow group-bys, not per-value Python.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lamina.errors import CorruptMetadata
from lamina.spec import content as C
from lamina.spec.partition import PartitionSpec, apply_transform
from lamina.spec.schema import Schema, field_id_of
from lamina.spec.stats import StatsPolicy

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-footers")

# Transforms under which all values of a partition map to one value, so transform(min)
# must equal transform(max): a cheap check that a file really holds a single partition.
_ORDER_PRESERVING = ("identity", "year", "month", "day", "hour", "truncate")


def read_footers(local_paths: Sequence[str]) -> list[pq.FileMetaData]:
    return list(_pool.map(pq.read_metadata, local_paths))


def _bound(v: Any) -> Any:
    # parquet-java orders NaN above every number (Double.compare), so a NaN in a float
    # column shows up as the max: such bounds are unknown for Lamina (format.md).
    return None if isinstance(v, float) and math.isnan(v) else v


def _stats_columns(footers: list[pq.FileMetaData], schema: Schema, columns: list[pa.Field]) -> dict[str, pa.Array]:
    """``lower.<col>`` / ``upper.<col>`` / ``null_count.<col>`` per file (null = unknown) of
    ``columns`` (fields of ``schema``); the files hold each column under its physical name."""
    n_files = len(footers)
    physical = schema.physical_names
    file_idx: list[int] = []
    per_col: dict[str, tuple[list, list, list, list]] = {f.name: ([], [], [], []) for f in columns}
    for i, md in enumerate(footers):
        index = {md.schema.column(j).path: j for j in range(md.num_columns)}
        for rg in range(md.num_row_groups):
            group = md.row_group(rg)
            file_idx.append(i)
            for name, (lo, hi, nulls, known) in per_col.items():
                j = index.get(physical[name])
                st = group.column(j).statistics if j is not None else None
                if st is None:
                    lo.append(None), hi.append(None), nulls.append(None), known.append(False)
                    continue
                has = st.has_min_max
                lo.append(_bound(st.min) if has else None)
                hi.append(_bound(st.max) if has else None)
                nulls.append(st.null_count if st.has_null_count else None)
                # A row group of nulls only has no bounds and that is exact, not unknown.
                known.append(has and lo[-1] is not None and hi[-1] is not None or (st.has_null_count and st.null_count == group.num_rows))
    out: dict[str, pa.Array] = {}
    if not file_idx:
        return out
    idx = pa.array(file_idx, pa.int64())
    for f in columns:
        lo, hi, nulls, known = per_col[f.name]
        cols: dict[str, Any] = {"file": idx, "nulls": pa.array(nulls, pa.int64()), "unknown": pc.invert(pa.array(known, pa.bool_()))}
        stats_ok = C.stats_supported(f.type)
        if stats_ok:
            try:
                cols["lo"] = pa.array(lo, f.type)
                cols["hi"] = pa.array(hi, f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                stats_ok = False
        t = pa.table(cols)
        aggs = [("nulls", "sum"), ("nulls", "count", pc.CountOptions("only_null")), ("unknown", "any")]
        if stats_ok:
            aggs += [("lo", "min"), ("hi", "max")]
        g = t.group_by("file", use_threads=False).aggregate(aggs).sort_by("file")
        if g.num_rows != n_files:
            raise CorruptMetadata("a written data file has no row groups in its footer")
        # Null count is known only if every row group reported one.
        null_known = pc.equal(g.column("nulls_count"), 0)
        out[f"null_count.{f.name}"] = pc.if_else(null_known, g.column("nulls_sum"), pa.scalar(None, pa.int64()))
        if stats_ok:
            unknown = g.column("unknown_any")
            out[f"lower.{f.name}"] = pc.if_else(unknown, pa.scalar(None, f.type), g.column("lo_min"))
            out[f"upper.{f.name}"] = pc.if_else(unknown, pa.scalar(None, f.type), g.column("hi_max"))
    return out


def file_entries(
    rel_paths: Sequence[str],
    sizes: Sequence[int],
    local_paths: Sequence[str],
    schema: Schema,
    spec: PartitionSpec,
    stats: StatsPolicy,
) -> pa.Table:
    """The ``add_files`` table for data files just written: path, size, record_count,
    partition_path, stats and ``partition.<field>`` values derived from the stats. Files
    without rows (Spark writes one for a task that had none) are deleted and left out.
    Stats are read of the columns the table's policy ``stats`` keeps and of the partition
    sources, exact (``add_files`` cuts them as the policy says, after the partition values
    are derived from them)."""
    footers = read_footers(local_paths)
    empty = {i for i, md in enumerate(footers) if md.num_rows == 0}
    if empty:
        for i in empty:
            os.remove(local_paths[i])
        keep = [i for i in range(len(footers)) if i not in empty]
        rel_paths, sizes, local_paths = [rel_paths[i] for i in keep], [sizes[i] for i in keep], [local_paths[i] for i in keep]
        footers = [footers[i] for i in keep]
    cols: dict[str, Any] = {
        "path": pa.array(rel_paths, pa.string()),
        "size": pa.array(sizes, pa.int64()),
        "record_count": pa.array([md.num_rows for md in footers], pa.int64()),
    }
    sources = {pf.source_id for pf in spec.fields}
    wanted = [f for f in schema.arrow if stats.mode(field_id_of(f)).counts or field_id_of(f) in sources]
    cols.update(_stats_columns(footers, schema, wanted))
    table = pa.table(cols)
    if spec.is_unpartitioned or table.num_rows == 0:
        return table
    values = partition_values(table, local_paths, schema, spec)
    for name in values.column_names:
        table = table.append_column(f"partition.{name}", values.column(name))
    paths = [spec.path_for(row) for row in values.to_pylist()]
    return table.append_column("partition_path", pa.array(paths, pa.string()))


def partition_values(files: pa.Table, local_paths: Sequence[str], schema: Schema, spec: PartitionSpec) -> pa.Table:
    """Each file's partition tuple: the transform of its source column's lower bound.

    Every row of a file shares one partition value, and a partition value is null
    exactly when its source value is, so an all-null file has a null partition.
    Files without usable bounds (rare: values over parquet-java's 4 KB statistics
    limit) are read for the one value.
    """
    ptype = spec.partition_type(schema)
    arrays = []
    for pf, field in zip(spec.fields, ptype):
        src = schema.name_of(pf.source_id)
        src_type = schema.field(src).type
        lower = files.column(f"lower.{src}") if f"lower.{src}" in files.column_names else pa.nulls(files.num_rows, src_type)
        upper = files.column(f"upper.{src}") if f"upper.{src}" in files.column_names else pa.nulls(files.num_rows, src_type)
        lower = lower.combine_chunks() if isinstance(lower, pa.ChunkedArray) else lower
        nulls = files.column(f"null_count.{src}")
        all_null = pc.fill_null(pc.equal(nulls, files.column("record_count")), False)
        missing = np.flatnonzero(pc.and_(pc.is_null(lower), pc.invert(all_null)).to_numpy(zero_copy_only=False))
        if len(missing):
            lower = _fill_from_files(lower, missing, local_paths, schema.physical_names[src], src_type)
        value = apply_transform(pf.transform, lower, src_type)
        if pf.transform.split("[")[0] in _ORDER_PRESERVING and pc.any(pc.is_valid(upper)).as_py():
            hi = apply_transform(pf.transform, upper.combine_chunks() if isinstance(upper, pa.ChunkedArray) else upper, src_type)
            differs = pc.fill_null(pc.not_equal(value, hi), False)
            if pc.any(differs).as_py():
                bad = files.column("path").filter(differs)[0].as_py()
                raise CorruptMetadata(f"data file {bad} holds rows of more than one {pf.name} partition")
        arrays.append(value.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=ptype)


def _fill_from_files(lower: pa.Array, missing: np.ndarray, local_paths: Sequence[str], physical: str, t: pa.DataType) -> pa.Array:
    def first(i: int) -> Any:
        col = pq.read_table(local_paths[i], columns=[physical]).column(0).drop_null()
        return col[0].cast(t) if len(col) else pa.scalar(None, t)

    found = dict(zip(missing.tolist(), _pool.map(first, missing.tolist())))
    return pa.array([found[i].as_py() if i in found else lower[i].as_py() for i in range(len(lower))], t)
