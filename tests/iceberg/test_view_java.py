"""The Iceberg view read by Iceberg's Java library (iceberg-core, iceberg-data,
iceberg-parquet 1.10: the reference implementation of the spec), through a small reader built
by ``make iceberg-java`` (tests/iceberg/java). Random histories; every retained version, tag
and branch by snapshot id, and a filtered scan, equal Lamina's reads; a selective filter plans
fewer files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.iceberg import read_head
from lamina.io import FileIO
from support.iceberg_history import normalized, play
from support.iceberg_java import needs_iceberg_java, run_java

pytestmark = [needs_iceberg_java, pytest.mark.slow]  # slow: starts a JVM


def java_reads(queries: list[dict]) -> list[dict]:
    return run_java("ReadView", queries)


@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_iceberg_java_reads_every_version_of_the_view_as_lamina_does(tmp_path_factory, seed):
    history = play(str(tmp_path_factory.mktemp("java") / "t"), seed)
    metadata = FileIO(history.location).full_uri(read_head(FileIO(history.location)).path)
    head = read_head(FileIO(history.location)).metadata
    latest = head["current-snapshot-id"]
    queries = []
    for c in history.checks:
        q = {"metadata": metadata, "snapshot_id": c.snapshot_id if c.snapshot_id is not None else latest}
        if c.where is not None:
            q["min_id"] = int(c.where.split(">=")[1])
        queries.append(q)
    answers = java_reads(queries)
    for check, answer in zip(history.checks, answers):
        assert "error" not in answer, f"{check.label}: {answer.get('error')}"
        assert normalized(answer["rows"]) == check.rows, check.label


def test_iceberg_java_prunes_files_by_the_views_statistics(tmp_path):
    import lamina
    from support.iceberg_history import SCHEMA, batch

    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"iceberg.enabled": "true"})
    for i in range(10):
        t.append(batch(100 * i, 100))
    metadata = t.io.full_uri(read_head(t.io).path)
    sid = read_head(t.io).metadata["current-snapshot-id"]
    every, selective = java_reads([{"metadata": metadata, "snapshot_id": sid},
                                   {"metadata": metadata, "snapshot_id": sid, "min_id": 950}])
    assert len(every["files"]) == 10
    assert len(selective["files"]) == 1
    assert sorted(r["id"] for r in selective["rows"]) == list(range(950, 1000))
