"""lamina.convert of Iceberg tables whose deletes were written by Iceberg's Java library (as
Spark and Flink write them; pyiceberg deletes copy-on-write only): v2 position-delete files
and v3 deletion vectors become Lamina's deletion vectors, read back equal to the Java
library's own read and to pyiceberg's; equality deletes are refused and nothing is written.
The tables are made by tests/iceberg/java's WriteDeletes (``make iceberg-java``)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.errors import UnconvertibleTable
from support.iceberg_java import needs_iceberg_java, run_java

pytestmark = [needs_iceberg_java, pytest.mark.slow]  # slow: starts JVMs


def _java(main: str, requests: list[dict]) -> list[dict]:
    answers = run_java(main, requests)
    for a in answers:
        assert "error" not in a, a["error"]
    return answers


def _ids(rows) -> Counter:
    return Counter(int(r) for r in rows)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_position_deletes_and_deletion_vectors_written_by_iceberg_java_are_adopted(tmp_path_factory, seed):
    pytest.importorskip("pyiceberg")
    from pyiceberg.table import StaticTable

    rnd = random.Random(seed)
    root = tmp_path_factory.mktemp("java-deletes")
    files = [list(range(0, 50)), list(range(50, 80)), list(range(80, 81))]
    requests = []
    for kind in ("position", "dv"):
        deleted = [sorted(rnd.sample(range(len(f)), rnd.randint(0, len(f)))) for f in files]
        deleted[0] = deleted[0] or [0]  # at least one delete in the table
        requests.append({"location": str(root / kind), "kind": kind, "files": files, "deleted": deleted})
    made = _java("WriteDeletes", requests)
    for request, answer in zip(requests, made):
        metadata = answer["metadata"]
        want = Counter(i for f, gone in zip(files, request["deleted"]) for p, i in enumerate(f) if p not in set(gone))
        source = StaticTable.from_metadata(metadata)
        java = _java("ReadView", [{"metadata": metadata, "snapshot_id": source.current_snapshot().snapshot_id}])[0]
        assert _ids(r["id"] for r in java["rows"]) == want  # the reference reader applies the deletes
        assert _ids(source.scan().to_arrow().column("id").to_pylist()) == want  # so does pyiceberg
        t = lamina.convert(source, str(root / f"lamina-{request['kind']}"))
        assert _ids(t.scan().to_arrow().column("id").to_pylist()) == want
        assert sorted(t.scan().to_arrow().column("s").to_pylist()) == sorted(f"v{i}" for i in want.elements())
        assert t.scan(where="id >= 50").count() == sum(n for i, n in want.items() if i >= 50)
        t.delete("id % 2 = 0")  # Lamina's own delete on top of the adopted ones
        assert _ids(t.scan().to_arrow().column("id").to_pylist()) == Counter(
            {i: n for i, n in want.items() if i % 2}
        )


def test_equality_deletes_written_by_iceberg_java_are_refused_and_nothing_is_written(tmp_path):
    pytest.importorskip("pyiceberg")
    from pyiceberg.table import StaticTable

    (answer,) = _java("WriteDeletes", [{"location": str(tmp_path / "eq"), "kind": "equality",
                                        "files": [list(range(10))], "deleted": [[3, 4]]}])
    source = StaticTable.from_metadata(answer["metadata"])
    with pytest.raises(UnconvertibleTable, match="equality deletes") as e:
        lamina.convert(source, str(tmp_path / "lamina"))
    assert e.value.feature == "equality-deletes"
    assert not (tmp_path / "lamina").exists()
