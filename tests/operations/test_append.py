"""Append and add_files."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lamina

from support.sample import SCHEMA, batch, ids


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def test_add_files_registers_existing_files(uri, tmp_path):
    t = lamina.create_table(uri, SCHEMA)
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(uri, "data"), exist_ok=True)
    pq.write_table(batch(0, 7), os.path.join(uri, "data", "ext.parquet"))
    files = pa.table({"path": ["data/ext.parquet"], "size": [os.path.getsize(os.path.join(uri, "data", "ext.parquet"))], "record_count": [7],
                      "lower.id": [0], "upper.id": [6], "null_count.id": [0]})
    t.add_files(files)
    assert ids(t.scan().to_arrow()) == list(range(7))
    assert len(t.scan(where="id > 100").plan()) == 0
