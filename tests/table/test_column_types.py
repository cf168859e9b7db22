"""Every operation on a column of every type a table may have either does what it says or
raises a typed error (LaminaError) and changes nothing: no raw Arrow error, no half-done
version. (A half-float column once failed every append with Arrow's missing min/max kernel;
a comparison with an Arrow scalar of a list column's own type reached Arrow's kernels.)"""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import LaminaError
from lamina.expr import col
from support.column_samples import SAMPLES, same_rows

OPERATIONS = ["filter", "delete", "update other column", "merge on id", "merge on it", "compact sorted by it", "partition by it"]


def _rows(kind: pa.DataType, ids: list[int]) -> pa.Table:
    """Rows of (id, c): the sample's values cycled over ``ids``."""
    values = SAMPLES[kind]
    return pa.table({"id": pa.array(ids, pa.int64()), "c": pa.array([values[(i - 1) % 3] for i in ids], kind)})


def _ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("kind", list(SAMPLES), ids=str)
def test_an_operation_on_a_column_of_any_type_works_or_says_why_and_changes_nothing(tmp_path, kind, operation):
    rows = _rows(kind, [1, 2, 3])
    if operation == "partition by it":
        try:
            t = lamina.create_table(str(tmp_path / "t"), rows.schema, partition_by="c")
        except LaminaError:
            assert not (tmp_path / "t" / "_lamina").exists()
            return
        t.append(rows)
        assert same_rows(t.to_arrow(), rows.cast(t.schema))
        return
    t = lamina.create_table(str(tmp_path / "t"), rows.schema)
    t.append(rows)
    stored = rows.cast(t.schema)  # (a large string is stored as a string)
    first = stored.column("c")[0]
    assert t.scan("c IS NULL").to_arrow().column("id").to_pylist() == [2]
    if operation == "compact sorted by it":
        t.append(rows)
        stored = pa.concat_tables([stored, stored])
    version = t.version
    try:
        if operation == "filter":
            got = t.scan(col("c") == first).to_arrow()
            assert _ids(got) == [1]  # (= NaN is true for NaN: the binder's rule)
        elif operation == "delete":
            t.delete(col("c") == first)
            assert _ids(t.to_arrow()) == [2, 3]
        elif operation == "update other column":
            t.update("id = 1", {"id": "10"})
            assert same_rows(t.to_arrow(), pa.table({"id": pa.array([10, 2, 3], pa.int64()), "c": stored.column("c")}, schema=stored.schema))
        elif operation == "merge on id":
            source = _rows(kind, [3, 4]).cast(t.schema)
            t.merge(source, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
            assert same_rows(t.to_arrow(), pa.concat_tables([stored.slice(0, 2), source]))
        elif operation == "merge on it":
            source = stored.slice(0, 1).set_column(0, "id", pa.array([7], pa.int64()))  # row 1's value of c
            t.merge(source, on="c").when_matched_update_all().execute()
            assert _ids(t.to_arrow()) == [2, 3, 7]
        elif operation == "compact sorted by it":
            t.maintenance.compact(sort_by="c")
            assert same_rows(t.to_arrow(), stored)
    except LaminaError:
        assert t.version == version and same_rows(lamina.open_table(t.uri).to_arrow(), stored)
