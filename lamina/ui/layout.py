"""How a version's live data files are laid out: per partition (files, rows, bytes, rows
deleted by deletion vectors) and by size; the layout panel shows both, the health advice
reads the first."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["partition_stats", "size_histogram"]


def partition_stats(e: pa.Table) -> list[dict[str, Any]]:
    """Files, live rows, bytes and DV-deleted rows per partition (one group_by)."""
    if not e.num_rows:
        return []
    part = pc.fill_null(e.column("partition_path"), "")
    dv = pc.fill_null(e.column("dv_cardinality"), 0)
    t = pa.table({"partition": part, "size": e.column("size"), "rows": e.column("record_count"), "deleted": dv})
    g = t.group_by("partition").aggregate([("size", "count"), ("size", "sum"), ("rows", "sum"), ("deleted", "sum")])
    g = g.sort_by("partition")
    out = []
    for r in g.to_pylist():
        physical = r["rows_sum"] + r["deleted_sum"]
        out.append(
            {
                "partition": r["partition"],
                "files": r["size_count"],
                "bytes": r["size_sum"],
                "rows": r["rows_sum"],
                "deleted_rows": r["deleted_sum"],
                "deleted_share": (r["deleted_sum"] / physical) if physical else 0.0,
            }
        )
    return out


def size_histogram(e: pa.Table) -> list[dict[str, Any]]:
    """Data files per size bucket [2^k, 2^(k+1)) bytes, every bucket from the smallest to the
    largest file's (empty ones too, so the plot's axis is honest)."""
    if not e.num_rows:
        return []
    size = np.maximum(e.column("size").to_numpy(), 1)
    k = np.floor(np.log2(size)).astype(np.int64)
    lo, hi = int(k.min()), int(k.max())
    counts = np.bincount(k - lo, minlength=hi - lo + 1)
    return [{"min_bytes": 1 << (lo + i), "max_bytes": 1 << (lo + i + 1), "files": int(c)} for i, c in enumerate(counts)]
