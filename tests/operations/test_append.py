"""Append and add_files: registering files already under the table; idempotent appends and
add_files by application transaction (app id, sequence number)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lamina
from lamina.errors import TransactionAlreadyCommitted

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


def test_idempotent_append_and_add_files(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("a", pa.int64())]))
    assert t.append(pa.table({"a": [1]}), app_transaction=("job", 5)).version == 1
    for seq in (5, 4):
        with pytest.raises(TransactionAlreadyCommitted) as e:
            t.append(pa.table({"a": [1]}), app_transaction=("job", seq))
        assert e.value.app_id == "job" and e.value.version == 1
    assert t.append(pa.table({"a": [2]}), app_transaction=("other", 0)).version == 2
    assert lamina.open_table(t.uri).metadata.app_transactions == {"job": 5, "other": 0}
    # A stale handle that rebases onto a version recording the transaction commits nothing.
    stale = lamina.open_table(t.uri, version=0)
    lamina.open_table(t.uri).append(pa.table({"a": [3]}), app_transaction=("race", 1))
    files = pa.table({"path": ["data/none.parquet"], "size": [1], "record_count": [1]})
    with pytest.raises(TransactionAlreadyCommitted):
        stale._vm = lamina.open_table(t.uri, version=2).metadata  # as if opened just before the race
        stale.add_files(files, app_transaction=("race", 1))
    assert lamina.open_table(t.uri).version == 3
    with pytest.raises(lamina.errors.InvalidArgument):
        t.add_files(files, mode="overwrite", app_transaction=("x", 1))
    with pytest.raises(lamina.errors.InvalidArgument):
        t.append(pa.table({"a": [1]}), app_transaction=("x", -1))
