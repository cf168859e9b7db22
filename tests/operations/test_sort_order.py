"""Sort orders: ``update_sort_order``, used by writes and compaction,
stored by field id; the older ``write.sort-order`` property keeps working."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.spec.sort import sort_rows

SCHEMA = pa.schema([("id", pa.int64()), ("grp", pa.string()), ("score", pa.float64()), ("tags", pa.list_(pa.string()))])


@pytest.fixture(autouse=True)
def _hints():
    yield
    flush_hints()


def shuffled(n: int, seed: int = 7) -> pa.Table:
    rnd = random.Random(seed)
    ids = list(range(n))
    rnd.shuffle(ids)
    return pa.table({
        "id": ids,
        "grp": [None if i % 7 == 0 else f"g{i % 3}" for i in ids],
        "score": [None if i % 5 == 0 else float(i % 11) for i in ids],
        "tags": [[str(i)] for i in ids],
    }, schema=SCHEMA)


def file_rows(t: lamina.Table) -> list[pa.Table]:
    return [pq.read_table(f"{t.uri}/{p}") for p in t.inspect.files().column("path").to_pylist()]


def python_sorted(rows: list[dict], keys: list[tuple[str, bool, bool]]) -> list[dict]:
    """The model: a stable sort per key, least significant first (name, descending, nulls_first)."""
    out = list(rows)
    for name, desc, nulls_first in reversed(keys):
        present = [r for r in out if r[name] is not None]
        missing = [r for r in out if r[name] is None]
        present.sort(key=lambda r: r[name], reverse=desc)  # stable, reversed or not
        out = missing + present if nulls_first else present + missing
    return out


def test_writes_and_compaction_sort_by_the_order(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(shuffled(50, 1))  # before any order: as given
    v = t.update_sort_order().asc("grp", nulls_first=False).desc("score").commit().version
    hist = t.history(limit=1)[0]
    assert hist["version"] == v and hist["operation"] == "update-sort-order"
    assert hist["summary"]["sort-order"] == "grp ASC NULLS LAST, score DESC NULLS LAST"
    assert hist["summary"]["added-files"] == 0
    t.append(shuffled(60, 2))
    keys = [("grp", False, False), ("score", True, False)]
    first, second = file_rows(t)
    assert first.to_pylist() == shuffled(50, 1).to_pylist()
    got = second.to_pylist()
    assert [(r["grp"], r["score"]) for r in got] == [(r["grp"], r["score"]) for r in python_sorted(got, keys)]
    assert got[0]["grp"] == "g0" and got[-1]["grp"] is None
    t.maintenance.compact(target_file_size=1 << 20)
    (only,) = file_rows(t)
    rows = only.to_pylist()
    assert only.num_rows == 110
    assert [(r["grp"], r["score"]) for r in rows] == [(r["grp"], r["score"]) for r in python_sorted(rows, keys)]


def test_order_is_kept_by_field_id_and_replaces_the_property(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"write.sort-order": "id"})
    t.append(shuffled(20))
    t.maintenance.compact(target_file_size=1 << 20, min_file_size=1 << 20)
    assert file_rows(t)[0].column("id").to_pylist() == list(range(20))  # the property still sorts compaction
    t.append(shuffled(20, 3))
    assert file_rows(t)[-1].column("id").to_pylist() == list(range(20))  # and writes
    t.update_sort_order().desc("id").commit()
    assert "write.sort-order" not in t.properties  # one source of truth from now on
    raw = json.loads(t.metadata.to_json())
    assert raw["sort_order"] == {"order_id": 1, "fields": [{"source_id": 1, "direction": "desc", "null_order": "nulls-last"}]}
    assert "sort-orders" in t.metadata.writer_features
    t.append(shuffled(20, 4))
    assert file_rows(t)[-1].column("id").to_pylist() == list(range(19, -1, -1))
    v = t.update_sort_order().commit().version  # no fields: unsorted
    assert t.metadata.sort_order.is_unsorted and t.metadata.sort_order.order_id == 0 and v == t.version
    t.append(shuffled(20, 5))
    assert file_rows(t)[-1].to_pylist() == shuffled(20, 5).to_pylist()


def test_sort_order_in_a_transaction_sorts_the_writes_after_it(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    with t.transaction() as tx:
        tx.update_sort_order().asc("id").commit()
        tx.append(shuffled(30))
    assert t.version == 1 and file_rows(t)[0].column("id").to_pylist() == list(range(30))


def test_copy_on_write_rewrites_are_sorted(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(shuffled(30))
    t.update_sort_order().asc("id").commit()
    t.delete("id = 3", mode="copy-on-write")
    assert file_rows(t)[0].column("id").to_pylist() == [i for i in range(30) if i != 3]


@pytest.mark.parametrize("change, error", [
    (lambda s: s.asc("nope"), SchemaMismatch),  # unknown column
    (lambda s: s.asc("ID"), SchemaMismatch),  # names are case-sensitive (the message suggests "id")
    (lambda s: s.asc("id").desc("id"), InvalidArgument),  # the same column twice: which way?
    (lambda s: s.asc("tags"), InvalidArgument),  # not a primitive column
    (lambda s: s.desc(3), InvalidArgument),
])
def test_bad_sort_orders_are_refused_and_commit_nothing(tmp_path, change, error):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(error):
        with t.update_sort_order() as s:
            change(s)
    assert t.refresh().version == 0 and t.metadata.sort_order is None


def test_the_error_for_a_wrongly_cased_column_suggests_the_column(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(SchemaMismatch, match="did you mean 'id'"):
        t.update_sort_order().asc("ID")


_VALUES = st.one_of(st.none(), st.integers(-3, 3))


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(_VALUES, _VALUES, st.integers(0, 1000)), min_size=0, max_size=30),
    keys=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.booleans(), st.booleans()), min_size=1, max_size=2,
                  unique_by=lambda k: k[0]),
)
def test_sort_rows_matches_a_stable_model(data, keys):
    table = pa.table({"a": [a for a, _, _ in data], "b": [b for _, b, _ in data], "i": [i for _, _, i in data]},
                     schema=pa.schema([("a", pa.int64()), ("b", pa.int64()), ("i", pa.int64())]))
    arrow_keys = [(n, "descending" if d else "ascending", "at_start" if nf else "at_end") for n, d, nf in keys]
    got = sort_rows(table, arrow_keys).to_pylist()
    want = python_sorted(table.to_pylist(), keys)
    assert [(r["a"], r["b"]) for r in got] == [(r["a"], r["b"]) for r in want]
