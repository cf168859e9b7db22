"""The (id, cat, amt) table of the row-level tests (delete, update, merge, deletion vectors, and
the CLI showing them): ``three_files`` is ids 0..149 in three data files of 50 rows; and
``concurrently_on_first_attempt``, a commit landing inside a row-level change's first attempt."""

from __future__ import annotations

import pyarrow as pa

import lamina
from lamina.operations import rowlevel

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("cat", pa.string()), pa.field("amt", pa.float64())])


def rows(n0: int, n1: int) -> pa.Table:
    ids = list(range(n0, n1))
    return pa.table({"id": ids, "cat": ["a" if i % 2 else "b" for i in ids], "amt": [float(i) for i in ids]}, schema=SCHEMA)


def as_dict(t: pa.Table) -> dict[int, tuple]:
    return {r["id"]: (r["cat"], r["amt"]) for r in t.to_pylist()}


def three_files(tmp_path) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"write.max-rows-per-file": 50})
    t.append(rows(0, 100))  # two files
    t.append(rows(100, 150))  # a third
    return t


def concurrently_on_first_attempt(monkeypatch, commit):
    """Run ``commit()`` (a commit through another handle) inside the merge's first attempt,
    after it has started writing: its own commit then finds the version taken and rebases."""
    calls = []
    orig = rowlevel.RowDelta._apply

    def apply(self, base):
        change = orig(self, base)
        calls.append(base.metadata.version)
        if len(calls) == 1:
            commit()
        return change

    monkeypatch.setattr(rowlevel.RowDelta, "_apply", apply)
    return calls
