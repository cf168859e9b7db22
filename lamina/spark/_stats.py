"""Data-file entries for the files Spark's native writer wrote, from their footers
(``lamina.data.footer_stats``): Spark reports nothing of what it wrote."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lamina.data.footer_stats import first_values_of, footers_of, partition_values, stats_columns
from lamina.io import FileIO
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema, field_id_of
from lamina.spec.stats import StatsPolicy


def file_entries(
    io: FileIO,
    rel_paths: Sequence[str],
    sizes: Sequence[int],
    schema: Schema,
    spec: PartitionSpec,
    stats: StatsPolicy,
) -> pa.Table:
    """The ``add_files`` table for data files just written under the table at ``io``: path,
    size, record_count, partition_path, stats and ``partition.<field>`` values derived from the
    stats. Files without rows (Spark writes one for a task that had none) are deleted and left
    out. Stats are read of the columns the table's policy ``stats`` keeps and of the partition
    sources, exact (``add_files`` cuts them as the policy says, after the partition values
    are derived from them). Footers are read in threads: one ranged read each on object stores."""
    footers = footers_of(io, rel_paths, sizes)
    empty = [i for i, md in enumerate(footers) if md.num_rows == 0]
    if empty:
        io.delete_many([rel_paths[i] for i in empty])
        keep = [i for i, md in enumerate(footers) if md.num_rows]
        rel_paths, sizes, footers = [rel_paths[i] for i in keep], [sizes[i] for i in keep], [footers[i] for i in keep]
    cols: dict[str, Any] = {
        "path": pa.array(rel_paths, pa.string()),
        "size": pa.array(sizes, pa.int64()),
        "record_count": pa.array([md.num_rows for md in footers], pa.int64()),
    }
    sources = {pf.source_id for pf in spec.fields}
    wanted = [f for f in schema.arrow if stats.mode(field_id_of(f)).counts or field_id_of(f) in sources]
    cols.update(stats_columns(footers, schema, wanted))
    table = pa.table(cols)
    if spec.is_unpartitioned or table.num_rows == 0:
        return table
    values = partition_values(table, first_values_of(lambda i, c: _column(io, rel_paths[i], c)), schema, spec)
    for name in values.column_names:
        table = table.append_column(f"partition.{name}", values.column(name))
    paths = [spec.path_for(row) for row in values.to_pylist()]
    return table.append_column("partition_path", pa.array(paths, pa.string()))


def _column(io: FileIO, path: str, column: str) -> pa.Table:
    """One column of a data file (rare: a file whose footer has no bounds for a partition source)."""
    local = io.local_path(path)
    return pq.read_table(local if local is not None else pa.BufferReader(io.get(path)), columns=[column])
