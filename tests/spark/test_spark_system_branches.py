"""``lamina.spark.system_table``: ``$branches``, and ``$snapshots`` of a branch, as DataFrames
equal to the Arrow system tables."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])


def test_branches_and_a_branch_s_snapshots_as_dataframes(spark, tmp_path):
    from lamina.spark import system_table

    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    b = t.branches.create("audit", retain_last=3)
    b.append(pa.table({"id": [3]}, schema=SCHEMA))
    flush_hints()
    branches = system_table(spark, t.uri, "$branches").collect()
    assert [(r.name, r.base_branch, r.base_version, r.head_version, r.head_records, r.versions, r.retain_last)
            for r in branches] == [("main", None, None, 2, 2, 3, None), ("audit", "main", 2, 3, 3, 2, 3)]
    snaps = system_table(spark, t.uri, "$snapshots", branch="audit").orderBy("version").collect()
    assert [(r.version, r.operation, r.branch) for r in snaps] == [(2, "enable-branches", "audit"), (3, "append", "audit")]
    assert {r.branch for r in system_table(spark, t.uri, "$snapshots").collect()} == {"main"}
