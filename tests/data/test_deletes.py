"""Deletion vectors as scans apply them: a damaged one is a clear error; files of many row groups,
read file by file or as one dataset scan, lose exactly the deleted rows."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import CorruptMetadata

from support.rowlevel import SCHEMA, rows, three_files


@pytest.fixture
def table(tmp_path):
    yield three_files(tmp_path)
    flush_hints()


def test_corrupt_dv_is_a_clear_error(table):
    table.delete("id < 5")
    dv = [p for p in table.inspect.files().column("dv_path").to_pylist() if p][0]
    path = os.path.join(table.uri, dv)
    data = bytearray(Path(path).read_bytes())
    data[-1] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    from lamina.data.deletes import _cache

    _cache.clear()
    with pytest.raises(CorruptMetadata, match="checksum"):
        table.to_arrow()


def test_reading_files_with_dvs_over_many_row_groups_drops_exactly_the_deleted_rows(tmp_path):
    """Local DV-carrying files are read as one dataset scan masking each batch by its rows'
    part of its file's DV: files of several row groups (several batches each), files without
    a DV next to them, a filter, and a file gone from disk."""
    import pyarrow.parquet as pq

    t = lamina.create_table(str(tmp_path / "rg"), SCHEMA)
    os.makedirs(os.path.join(t.uri, "data"))
    added = []
    for k in range(3):
        rel = f"data/rg-{k}.parquet"
        pq.write_table(rows(k * 100, k * 100 + 100), os.path.join(t.uri, rel), row_group_size=7)
        added.append((rel, os.path.getsize(os.path.join(t.uri, rel))))
    t.add_files(pa.table({"path": [a[0] for a in added], "size": [a[1] for a in added], "record_count": [100] * 3}))
    gone = [i for i in range(200) if i % 9 == 4]  # in files 0 and 1 (many row groups each); file 2 has none
    t.delete(f"id IN ({', '.join(map(str, gone))})")
    want = [i for i in range(300) if i not in gone]
    assert sorted(t.to_arrow().column("id").to_pylist()) == want
    assert sorted(t.scan(where="amt > 150", columns=["id"]).to_arrow().column("id").to_pylist()) == [i for i in want if i > 150]
    from lamina.data.deletes import _cache

    _cache.clear()  # DVs read again: one range request per DV file
    assert sorted(t.to_arrow().column("id").to_pylist()) == want
    os.remove(os.path.join(t.uri, added[0][0]))
    with pytest.raises(CorruptMetadata, match="missing"):
        t.to_arrow()


@pytest.mark.parametrize("rows_now", [60, 140], ids=["fewer-rows", "more-rows"])
def test_a_data_file_whose_rows_differ_from_its_entry_is_corrupt_not_a_shifted_mask(tmp_path, rows_now):
    """The rows of files read in one scan are masked by where their entries put each file's
    first row: a file replaced by one of another length would shift every later file's
    deletes onto the wrong rows. It is CorruptMetadata, and no rows are returned."""
    import pyarrow.parquet as pq

    t = lamina.create_table(str(tmp_path / "shift"), SCHEMA)
    for k in range(3):
        t.append(rows(k * 100, k * 100 + 100))
    t.delete("id IN (" + ", ".join(str(i) for i in range(3, 300, 10)) + ")")
    first = t.inspect.files().sort_by("path")
    victim = os.path.join(t.uri, t.scan().plan().entries.column("path")[0].as_py())
    pq.write_table(rows(1000, 1000 + rows_now).select(SCHEMA.names), victim)
    with pytest.raises(CorruptMetadata, match="rows"):
        t.to_arrow()
    assert t.inspect.files().sort_by("path").equals(first)  # nothing changed


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), order=st.sampled_from(["any", "increasing", "sorted"]),
       return_index=st.booleans())
def test_unique_sorted_is_numpys_unique(values, order, return_index):
    """unique_sorted (positions, file numbers, source keys) gives what np.unique gives, with
    first indices, whether it sorts, finds the values already strictly increasing, or in
    order with repeats (file numbers of rows read file by file)."""
    from lamina.data.deletes import unique_sorted

    ordered = {"any": values, "increasing": sorted(set(values)), "sorted": sorted(values + values[: len(values) // 2])}
    a = np.array(ordered[order], dtype=np.int64)
    if return_index:
        got, first = unique_sorted(a, return_index=True)
        want, want_first = np.unique(a, return_index=True)
        assert first.tolist() == want_first.tolist()
    else:
        got, want = unique_sorted(a), np.unique(a)
    assert got.tolist() == want.tolist()
