"""Layout of content entries: the rows of root and leaf manifests.

Root and leaf manifests share one Arrow layout (the content entry, docs/format.md):
a row is either a data file (``content = DATA``) or, in a root manifest only,
a leaf manifest (``content = LEAF``) whose statistics summarise the files in it.
Statistics are flat columns keyed by field id, so pruning is one vectorized
Arrow expression over a whole manifest:

- ``min_<fid>`` / ``max_<fid>``: lower/upper bound of column ``fid`` (column's own
  type; null = unknown), ``nulls_<fid>``: null count (int64; null = unknown);
- ``pmin_<pid>`` / ``pmax_<pid>``: bounds of partition field ``pid``'s value (a data
  file has one value, so min == max; a leaf has the range over its files).
"""

from __future__ import annotations

import pyarrow as pa

# content
DATA = 0
LEAF = 1

# status
EXISTING = 0
ADDED = 1
REMOVED = 2


def min_col(fid: int) -> str:
    return f"min_{fid}"


def max_col(fid: int) -> str:
    return f"max_{fid}"


def nulls_col(fid: int) -> str:
    return f"nulls_{fid}"


def pmin_col(pid: int) -> str:
    return f"pmin_{pid}"


def pmax_col(pid: int) -> str:
    return f"pmax_{pid}"


# Columns every manifest has, in order, before the per-schema stats columns.
BASE_FIELDS: list[pa.Field] = [
    pa.field("content", pa.int8(), False),
    pa.field("status", pa.int8(), False),
    pa.field("path", pa.string(), False),
    pa.field("size", pa.int64(), False),
    pa.field("record_count", pa.int64(), False),  # live rows (records - deleted)
    pa.field("file_count", pa.int64(), False),  # 1 for a data file; live files in a leaf
    pa.field("added_version", pa.int64(), False),
    pa.field("removed_version", pa.int64(), True),
    pa.field("spec_id", pa.int32(), False),
    pa.field("partition_path", pa.string(), True),
    # deletion vector slot (row-level issue): where this file's DV lives
    pa.field("dv_path", pa.string(), True),
    pa.field("dv_offset", pa.int64(), True),
    pa.field("dv_length", pa.int64(), True),
    pa.field("dv_cardinality", pa.int64(), True),
]
BASE_NAMES = [f.name for f in BASE_FIELDS]


def stats_supported(t: pa.DataType) -> bool:
    """Whether min/max bounds are kept for a column of this type. Not for half floats: Arrow
    has no min/max kernel for them (their files keep null counts, and prune by nothing else)."""
    return (
        pa.types.is_integer(t)
        or (pa.types.is_floating(t) and not pa.types.is_float16(t))
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
        or pa.types.is_time(t)
    )
