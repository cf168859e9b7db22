"""The table schema (lamina.spec.schema): field ids kept through JSON; data that does not fit is
refused and commits nothing."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import lamina
from lamina.errors import SchemaMismatch
from lamina.spec.schema import Schema

from support.sample import SCHEMA, batch


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def test_schema_round_trip_keeps_field_ids():
    s = Schema.from_arrow(
        pa.schema([("a", pa.int32()), ("s", pa.struct([("x", pa.string()), ("y", pa.list_(pa.int64()))])), ("d", pa.decimal128(10, 2))])
    )
    back = Schema.from_json(json.loads(json.dumps(s.to_json())))
    assert back.arrow.equals(s.arrow, check_metadata=True)
    assert [back.field_id(n) for n in ("a", "s", "d")] == [1, 2, 6]
    assert back.highest_field_id == 6


def test_schema_mismatch_commits_nothing(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3))
    before = sorted(os.listdir(os.path.join(uri, "data")))
    with pytest.raises(SchemaMismatch, match="not in the table schema"):
        t.append(batch(0, 3).append_column("extra", pa.array([1, 2, 3])))
    with pytest.raises(SchemaMismatch, match="'id' is string in the data, the table has int64"):
        t.append(pa.table({"id": pa.array(["x"]), "category": ["a"], "value": [1.0], "ts": batch(0, 1).column("ts")}))
    with pytest.raises(SchemaMismatch, match="required"):
        t.append(pa.table({"id": pa.array([None], pa.int64()), "category": ["a"], "value": [1.0], "ts": batch(0, 1).column("ts")}))
    with pytest.raises(SchemaMismatch):
        t.append({"id": [1]})
    assert lamina.open_table(uri).version == 1
    assert sorted(os.listdir(os.path.join(uri, "data"))) == before
