"""Writes that evolve the schema: ``overwrite(..., schema_mode="overwrite" | "merge")``.

The expected schema and rows are written out by hand from the rule (Delta's
``overwriteSchema``, Iceberg's ids): a column of both keeps its field id if its type is
the same or wider, a column whose type cannot widen is replaced by a new one (new id: its
old values never show), a column the data lacks is dropped, new columns are added, and the
data's column order wins. One version for schema and rows; the version before keeps its own.
"""

from __future__ import annotations

import pyarrow as pa

import lamina


def _table(tmp_path):
    t = lamina.create_table(
        str(tmp_path / "t"),
        pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.int64()), ("gone", pa.string())]),
    )
    t.append(pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"], "score": [10, 20], "gone": ["x", "y"]}))
    return t


def test_overwrite_schema_replaces_the_schema_and_the_rows_in_one_version(tmp_path):
    t = _table(tmp_path)
    before = t.metadata.schema
    data = pa.table({
        "score": pa.array(["high"], pa.string()),  # string over int64: cannot widen -> a new column
        "id": pa.array([3], pa.int64()),           # int32 -> int64: widens, keeps its id
        "name": ["c"],                             # same type: keeps its id
        "extra": [1.5],                            # new
    })
    v = t.overwrite(data, schema_mode="overwrite").version
    assert v == 2 and t.history()[0]["version"] == 2
    after = t.metadata.schema
    assert after.names == ["score", "id", "name", "extra"]
    assert after.field("id").type == pa.int64() and after.field_id("id") == before.field_id("id")
    assert after.field_id("name") == before.field_id("name")
    assert after.field("score").type == pa.string() and after.field_id("score") > before.last_column_id
    assert after.physical_names["score"] != before.physical_names["score"]
    assert "gone" not in after.names
    assert t.to_arrow().to_pylist() == [{"score": "high", "id": 3, "name": "c", "extra": 1.5}]
    old = t.scan(version=1).to_arrow()
    assert old.schema.names == ["id", "name", "score", "gone"] and old.column("score").to_pylist() == [10, 20]


def test_overwrite_merge_adds_columns_and_keeps_the_others(tmp_path):
    t = _table(tmp_path)
    v = t.overwrite(pa.table({"id": pa.array([5], pa.int32()), "flag": [True]}), schema_mode="merge").version
    assert v == 2
    assert t.metadata.schema.names == ["id", "name", "score", "gone", "flag"]
    assert t.to_arrow().to_pylist() == [{"id": 5, "name": None, "score": None, "gone": None, "flag": True}]
