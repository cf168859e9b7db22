"""The (id, grp) table of the history tests: tags, rollback, expiry, orphan cleanup, system
tables, automatic tags, and the CLI commands for them."""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa

import lamina

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.string())])
NOW = timedelta(0)


def new_table(tmp_path) -> lamina.Table:
    """An empty table at ``tmp_path / "t"``."""
    return lamina.create_table(str(tmp_path / "t"), SCHEMA)


def batch(ids, grp="a") -> pa.Table:
    return pa.table({"id": list(ids), "grp": [grp] * len(ids)}, schema=SCHEMA)


def ids(t) -> list[int]:
    return sorted(t.column("id").to_pylist())


def on_disk(root: str, sub: str = "") -> set[str]:
    out = set()
    for d, _, fs in os.walk(os.path.join(root, sub)):
        out.update(os.path.relpath(os.path.join(d, f), root) for f in fs)
    return out
