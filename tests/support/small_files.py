"""The (id, cat) table of the compaction tests (and the CLI's compact command): ``small_files``
is twelve appends of ten rows, partitioned by cat, so 24 small data files."""

from __future__ import annotations

import pyarrow as pa

import lamina

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("cat", pa.string())])


def batch(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": list(range(lo, hi)), "cat": ["a" if i % 2 else "b" for i in range(lo, hi)]}, schema=SCHEMA)


def ids(t) -> list[int]:
    return sorted(t.column("id").to_pylist())


def small_files(tmp_path) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["cat"])
    for i in range(12):
        t.append(batch(i * 10, i * 10 + 10))
    return t
