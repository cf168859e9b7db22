"""Data-file statistics from Parquet footers: record counts, per-column bounds and null
counts, and the partition values they imply.

For files Lamina did not write: Spark's native writer reports nothing of what it wrote,
``add_files`` is handed files without their statistics, and ``lamina.convert`` adopts
another table's files. Footers are read in threads (a footer is a few KB: one ranged read
on object stores) and row-group statistics turned into file statistics with Arrow
group-bys, not per-value Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lamina.errors import CorruptMetadata, InvalidArgument, NotFound
from lamina.io import FileIO
from lamina.spec import content as C
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema, field_id_of
from lamina.spec.transforms import apply_transform

_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lamina-footers")
_TAIL = 64 * 1024  # bytes of a file's end read first: the footer of all but very wide files

# Transforms under which all values of a partition map to one value, so transform(min)
# must equal transform(max): a cheap check that a file really holds a single partition.
_ORDER_PRESERVING = ("identity", "year", "month", "day", "hour", "truncate")


def _bound(v: Any) -> Any:
    # parquet-java orders NaN above every number (Double.compare), so a NaN in a float
    # column shows up as the max: such bounds are unknown for Lamina (format.md).
    return None if isinstance(v, float) and math.isnan(v) else v


def stats_columns(
    footers: Sequence[pq.FileMetaData], schema: Schema, columns: Sequence[pa.Field], float_bounds: bool = True
) -> dict[str, pa.Array]:
    """``lower.<col>`` / ``upper.<col>`` / ``null_count.<col>`` per file (null = unknown) of
    ``columns`` (fields of ``schema``); the files hold each column under its physical name.
    ``float_bounds=False`` leaves out float bounds: Arrow's writer and others leave NaN out of
    them, and a float bound Lamina keeps says the file holds no NaN (format.md)."""
    n_files = len(footers)
    physical = schema.physical_names
    file_idx: list[int] = []
    per_col: dict[str, tuple[list[Any], list[Any], list[int | None], list[bool]]] = {
        f.name: ([], [], [], []) for f in columns
    }
    for i, md in enumerate(footers):
        index = {md.schema.column(j).path: j for j in range(md.num_columns)}
        for rg in range(md.num_row_groups):
            group = md.row_group(rg)
            file_idx.append(i)
            for name, (lo, hi, nulls, known) in per_col.items():
                j = index.get(physical[name])
                st = group.column(j).statistics if j is not None else None
                if st is None:
                    lo.append(None)
                    hi.append(None)
                    nulls.append(None)
                    known.append(False)
                    continue
                has = st.has_min_max
                lo.append(_bound(st.min) if has else None)
                hi.append(_bound(st.max) if has else None)
                nulls.append(st.null_count if st.has_null_count else None)
                # A row group of nulls only has no bounds and that is exact, not unknown.
                known.append(
                    has
                    and lo[-1] is not None
                    and hi[-1] is not None
                    or (st.has_null_count and st.null_count == group.num_rows)
                )
    out: dict[str, pa.Array] = {}
    if not file_idx:
        return out
    idx = pa.array(file_idx, pa.int64())
    for f in columns:
        lo, hi, nulls, known = per_col[f.name]
        cols: dict[str, pa.Array] = {
            "file": idx,
            "nulls": pa.array(nulls, pa.int64()),
            "unknown": pc.invert(pa.array(known, pa.bool_())),
        }
        stats_ok = C.stats_supported(f.type) and (float_bounds or not pa.types.is_floating(f.type))
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


def partition_values(
    files: pa.Table,
    first_values: Callable[[list[int], str, pa.DataType], list[Any]],
    schema: Schema,
    spec: PartitionSpec,
) -> pa.Table:
    """Each file's partition tuple: the transform of its source column's lower bound.

    Every row of a file shares one partition value, and a partition value is null
    exactly when its source value is, so an all-null file has a null partition.
    Files without usable bounds (rare: values over parquet-java's 4 KB statistics
    limit) are read for the one value: ``first_values(file numbers, physical column, type)``
    gives the first non-null value of each (``first_values_of`` reads them).
    """
    ptype = spec.partition_type(schema)
    arrays = []
    for pf, field in zip(spec.fields, ptype):
        src = schema.name_of(pf.source_id)
        src_type = schema.field(src).type
        lower = (
            files.column(f"lower.{src}") if f"lower.{src}" in files.column_names else pa.nulls(files.num_rows, src_type)
        )
        upper = (
            files.column(f"upper.{src}") if f"upper.{src}" in files.column_names else pa.nulls(files.num_rows, src_type)
        )
        lower = lower.combine_chunks() if isinstance(lower, pa.ChunkedArray) else lower
        nulls = files.column(f"null_count.{src}")
        all_null = pc.fill_null(pc.equal(nulls, files.column("record_count")), False)
        missing = np.flatnonzero(pc.and_(pc.is_null(lower), pc.invert(all_null)).to_numpy(zero_copy_only=False))
        if len(missing):
            found = dict(zip(missing.tolist(), first_values(missing.tolist(), schema.physical_names[src], src_type)))
            lower = pa.array([found[i] if i in found else lower[i].as_py() for i in range(len(lower))], src_type)
        value = apply_transform(pf.transform, lower, src_type)
        if pf.transform.split("[")[0] in _ORDER_PRESERVING and pc.any(pc.is_valid(upper)).as_py():
            hi = apply_transform(
                pf.transform, upper.combine_chunks() if isinstance(upper, pa.ChunkedArray) else upper, src_type
            )
            differs = pc.fill_null(pc.not_equal(value, hi), False)
            if pc.any(differs).as_py():
                bad = files.column("path").filter(differs)[0].as_py()
                raise CorruptMetadata(f"data file {bad} holds rows of more than one {pf.name} partition")
        arrays.append(value.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=ptype)


def first_values_of(read: Callable[[int, str], pa.Table]) -> Callable[[list[int], str, pa.DataType], list[Any]]:
    """``partition_values``'s reader of first values, from ``read(file number, column)``."""

    def first(indices: list[int], physical: str, t: pa.DataType) -> list[Any]:
        def one(i: int) -> Any:
            col = read(i, physical).column(0).drop_null()
            return col[0].cast(t).as_py() if len(col) else None

        return list(_pool.map(one, indices))

    return first


def footer_of(io: FileIO, path: str, size: int) -> pq.FileMetaData:
    """The Parquet footer of ``path`` (``size`` bytes): one ranged read of the file's last
    64 KiB, a second one only for a larger footer (CorruptMetadata if it is no Parquet file)."""
    tail = io.get_range(path, max(0, size - _TAIL), min(size, _TAIL))
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise CorruptMetadata(f"{path} is not a Parquet file (no PAR1 footer)")
    need = int.from_bytes(tail[-8:-4], "little") + 8
    if need > len(tail):
        if need > size:
            raise CorruptMetadata(f"{path}: its footer length ({need - 8} bytes) exceeds the file")
        tail = io.get_range(path, size - need, need)
    try:
        return pq.read_metadata(pa.BufferReader(tail))
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptMetadata(f"{path}: unreadable Parquet footer: {e}") from None


def footers_of(io: FileIO, paths: Sequence[str], sizes: Sequence[int]) -> list[pq.FileMetaData]:
    """``footer_of`` every file, on threads (a footer read is one request on object stores)."""
    return list(_pool.map(lambda ps: footer_of(io, *ps), zip(paths, sizes)))


def complete_files(files: pa.Table, io: FileIO, schema: Schema, spec: PartitionSpec, kept: set[int]) -> pa.Table:
    """An ``add_files`` table with what it leaves out taken from the files themselves, as
    pyiceberg's ``add_files`` does: sizes (one listing per directory), and where the record
    count is missing, the footers' record counts and, unless some are given, the statistics of the
    columns whose field ids are ``kept`` (float bounds left out: NaN), the partition values
    they imply (``partition.<field>``) and the partition directory. What is given is kept as
    given. A file that is no Parquet file, or whose rows are of several partitions, is
    InvalidArgument."""
    try:
        return _completed(files, io, schema, spec, kept)
    except CorruptMetadata as e:
        raise InvalidArgument(f"add_files: {e}; nothing was committed") from None


def _completed(files: pa.Table, io: FileIO, schema: Schema, spec: PartitionSpec, kept: set[int]) -> pa.Table:
    if "path" not in files.column_names:
        return files
    paths = files.column("path").combine_chunks().cast(pa.string())
    n = files.num_rows
    if "size" not in files.column_names or files.column("size").null_count:
        listed = io.sizes(paths)
        given = (
            files.column("size").combine_chunks().cast(pa.int64())
            if "size" in files.column_names
            else pa.nulls(n, pa.int64())
        )
        files = _set(files, "size", pc.coalesce(given, listed))
    has_stats = any(c.startswith(("lower.", "upper.", "null_count.")) for c in files.column_names)
    counted = "record_count" in files.column_names and not files.column("record_count").null_count
    if counted or n == 0:
        return files
    sizes = files.column("size").to_pylist()
    if any(z is None for z in sizes):  # (a missing file: add_files names it)
        return files
    try:
        footers = footers_of(io, paths.to_pylist(), sizes)
    except NotFound:
        return files  # (add_files names the missing file)
    counts = pa.array([md.num_rows for md in footers], pa.int64())
    if not counted:
        given = (
            files.column("record_count").combine_chunks().cast(pa.int64())
            if "record_count" in files.column_names
            else pa.nulls(n, pa.int64())
        )
        files = _set(files, "record_count", pc.coalesce(given, counts))
    if has_stats:
        return files
    sources = {pf.source_id for pf in spec.fields}
    wanted = [f for f in schema.arrow if field_id_of(f) in kept | sources]
    for name, col in stats_columns(footers, schema, wanted, float_bounds=False).items():
        files = _set(files, name, col)
    if spec.is_unpartitioned or all(f"partition.{pf.name}" in files.column_names for pf in spec.fields):
        return files
    values = partition_values(files, first_values_of(lambda i, c: _read_column(io, paths[i].as_py(), c)), schema, spec)
    for pf, name in zip(spec.fields, values.column_names):
        if f"partition.{pf.name}" not in files.column_names:
            files = _set(files, f"partition.{pf.name}", values.column(name))
    if "partition_path" not in files.column_names:
        files = _set(files, "partition_path", pa.array([spec.path_for(row) for row in values.to_pylist()], pa.string()))
    return files


def _set(table: pa.Table, name: str, column: pa.Array | pa.ChunkedArray) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.append_column(name, column) if i < 0 else table.set_column(i, name, column)


def _read_column(io: FileIO, path: str, column: str) -> pa.Table:
    local = io.local_path(path)
    return pq.read_table(local if local is not None else pa.BufferReader(io.get(path)), columns=[column])
