"""The Iceberg view read by DuckDB's iceberg extension (duckdb-extension-iceberg, in the test
extra), by path and through ``lamina serve-iceberg`` (ATTACH ... (TYPE iceberg)). The reader runs
in a process of its own (tests/iceberg/duckdb/read_view.py), as an outside engine would. Random
histories; every retained version, tag and branch by snapshot id, and a filtered scan, equal
Lamina's reads."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.iceberg import flush
from support.iceberg_history import normalized, play
from support.readers import run_reader

READER = Path(__file__).parent / "duckdb" / "read_view.py"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("duckdb_extension_iceberg") is None,
    reason="DuckDB's iceberg extension (duckdb-extension-iceberg) is not installed: pip install -e '.[test]'",
)


def duckdb_reads(queries: list[dict]) -> list[dict]:
    return run_reader([sys.executable, str(READER)], queries, timeout=300)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_duckdb_reads_every_version_of_the_view_as_lamina_does(tmp_path_factory, seed):
    history = play(str(tmp_path_factory.mktemp("duck") / "t"), seed)
    flush()  # the view is written in the background: what this process committed lands first
    answers = duckdb_reads([{"location": history.location, "snapshot_id": c.snapshot_id, "where": c.where}
                            for c in history.checks])
    for check, answer in zip(history.checks, answers):
        assert "error" not in answer, f"{check.label}: {answer.get('error')}"
        assert normalized(answer["rows"]) == check.rows, check.label


@pytest.mark.slow  # starts the REST server
def test_duckdb_attaches_the_rest_catalog_and_reads_its_tables(tmp_path):
    import pyarrow as pa

    import lamina
    from lamina.rest import serve

    uri = f"sqlite:///{tmp_path}/wh/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("shop")
    t = cat.create_table("shop.orders", pa.schema([("id", pa.int64()), ("v", pa.string())]),
                         properties={"iceberg.enabled": "true"})
    t.append(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}))
    t.delete("id = 3")
    server, url = serve(uri, "127.0.0.1", 0)
    try:
        answer, filtered = duckdb_reads([{"rest": url, "table": "shop.orders"},
                                         {"rest": url, "table": "shop.orders", "where": "id >= 2"}])
    finally:
        server.shutdown()
        server.server_close()
    assert "error" not in answer, answer.get("error")
    assert normalized(answer["rows"]) == normalized(t.to_arrow().to_pylist())
    assert sorted(r["id"] for r in filtered["rows"]) == [2, 4]
    cat.close()
