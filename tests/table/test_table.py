"""The table (lamina.table): create, open, append, read back any version; inputs from pandas and
record batch readers; a location that already holds a table, or none."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import TableAlreadyExists, TableNotFound

from support.sample import SCHEMA, batch, ids


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def test_create_append_read_and_versions(uri):
    t = lamina.create_table(uri, SCHEMA)
    assert t.version == 0 and t.scan().to_arrow().num_rows == 0
    assert t.append(batch(0, 10)).version == 1
    assert t.append(batch(10, 10)).version == 2
    t2 = lamina.open_table(uri)
    assert t2.version == 2 and t2.uuid == t.uuid
    assert ids(t2.scan().to_arrow()) == list(range(20))
    assert ids(t2.scan(version=1).to_arrow()) == list(range(10))
    assert t2.scan(version=0).to_arrow().num_rows == 0
    assert [h["version"] for h in t2.history()] == [2, 1, 0]
    assert t2.metadata.summary["total-records"] == 20
    assert t2.to_pandas(columns=["id"]).shape == (20, 1)
    assert sum(b.num_rows for b in t2.scan(where="id < 15").to_batches()) == 15


def test_pandas_and_reader_inputs(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3).to_pandas())
    t.append(pa.RecordBatchReader.from_batches(SCHEMA, batch(3, 3).to_batches()))
    assert ids(t.scan().to_arrow()) == list(range(6))


def test_table_exists_and_not_a_table(uri, tmp_path):
    lamina.create_table(uri, SCHEMA)
    with pytest.raises(TableAlreadyExists, match="already exists"):
        lamina.create_table(uri, SCHEMA)
    with pytest.raises(TableNotFound, match="no Lamina table"):
        lamina.open_table(str(tmp_path / "nothing"))
