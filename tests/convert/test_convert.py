"""lamina.convert: Parquet directories, Delta and Iceberg tables adopted in place, read back
equal to the source engine's own read (as multisets), later Lamina writes working, and the
source's files never written or deleted (their bytes and names unchanged after appends,
deletes, compaction, expiry and orphan cleanup)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.errors import InvalidArgument, UnconvertibleTable
from lamina.spec.features import EXTERNAL_FILES


def _multiset(t: pa.Table, columns: list[str]) -> Counter:
    t = t.select(columns)
    return Counter(zip(*(t.column(c).to_pylist() for c in columns)))


def _fingerprints(root: Path, skip: tuple[str, ...] = ("_lamina", "data")) -> dict[str, str]:
    """Every file under ``root`` (but the Lamina table's own directories) and its bytes' hash."""
    out = {}
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel.split(os.sep)[0] in skip:
            continue
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def _maintain(t: lamina.Table) -> None:
    """Append, delete, compact, then expire every old version and clean up orphans: what
    would delete a file the table owned."""
    long_ago = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    t.maintenance.expire_versions(older_than=long_ago, retain_last=1, reader_grace=dt.timedelta(0))
    t.maintenance.remove_orphans(older_than=long_ago, allow_short_age=True)


_ROWS = st.lists(st.tuples(st.integers(-1000, 1000), st.sampled_from(["a", "b", "c", "é/x"]), st.floats(allow_nan=True)),
                 min_size=1, max_size=40)


def _hive_dir(root: Path, rows: list[tuple]) -> pa.Table:
    """A Hive-style directory written by pyarrow (the partition column kept in the files, as
    DuckDB's WRITE_PARTITION_COLUMNS and Spark's with the column duplicated write it)."""
    data = pa.table({"id": [r[0] for r in rows], "k": [r[1] for r in rows], "x": [r[2] for r in rows]})
    for i, k in enumerate(sorted(set(data.column("k").to_pylist()))):
        part = data.filter(pa.compute.equal(data.column("k"), k))
        d = root / f"k={k.replace('/', '%2F')}"
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, d / f"part-{i:05d}.parquet", row_group_size=7)
    (root / "_SUCCESS").write_text("")
    return data


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_ROWS)
def test_a_hive_directory_is_adopted_in_place(tmp_path_factory, rows):
    root = tmp_path_factory.mktemp("hive")
    data = _hive_dir(root, rows)
    before = _fingerprints(root)
    t = lamina.convert(str(root))
    assert t.version == 1 and EXTERNAL_FILES in t.metadata.reader_features
    assert [f.name for f in t.metadata.partition_spec.fields] == ["k"]
    source = ds.dataset(str(root), format="parquet", partitioning="hive", exclude_invalid_files=True).to_table()
    assert _multiset(t.scan().to_arrow(), ["id", "k"]) == _multiset(source, ["id", "k"]) == _multiset(data, ["id", "k"])
    # partition and statistics pruning from the footers
    some = rows[0][1]
    assert _multiset(t.scan(where=f"k = '{some}'").to_arrow(), ["id"]) == Counter((r[0],) for r in rows if r[1] == some)
    assert len(t.scan(where=f"k = '{some}'").plan()) == 1
    assert t.scan(where="id > 1000").count() == 0 and len(t.scan(where="id > 1000").plan()) == 0
    # later writes: the source's files are read, never written or deleted
    t.append(pa.table({"id": [5000], "k": ["a"], "x": [1.0]}))
    t.delete("id < 0")
    t.maintenance.compact()
    _maintain(t)
    want = Counter((r[0], r[1]) for r in rows if r[0] >= 0) + Counter([(5000, "a")])
    assert _multiset(lamina.open_table(str(root)).scan().to_arrow(), ["id", "k"]) == want
    assert _fingerprints(root) == before


def test_hive_partition_values_only_in_directory_names_are_refused(tmp_path):
    root = tmp_path / "hive"
    ds.write_dataset(pa.table({"id": [1, 2], "k": ["a", "b"]}), str(root), format="parquet", partitioning=["k"],
                     partitioning_flavor="hive")
    with pytest.raises(UnconvertibleTable, match="do not store the partition column") as e:
        lamina.convert(str(root))
    assert e.value.feature == "hive-partition-values-in-directory-names"
    assert not (root / "_lamina").exists() and not (root / "data").exists()


def test_a_delta_table_is_adopted_with_its_statistics(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    src = tmp_path / "delta"
    for i in range(3):
        deltalake.write_deltalake(str(src), pa.table({"id": list(range(i * 10, i * 10 + 10)), "s": [f"v{i}"] * 10}),
                                  mode="append")
    deltalake.DeltaTable(str(src)).delete("id = 3")  # (copy-on-write: deltalake writes no DVs)
    before = _fingerprints(src, skip=())
    t = lamina.convert(str(src), str(tmp_path / "lamina"))
    dt_ = deltalake.DeltaTable(str(src))
    assert _multiset(t.scan().to_arrow(), ["id", "s"]) == _multiset(pa.table(dt_.scan()), ["id", "s"])
    plan = t.scan(where="id >= 20").plan()
    assert all(p.startswith("file://") for p in plan.paths) and len(plan) < len(t.scan().plan())
    t.append(pa.table({"id": [100], "s": ["new"]}))
    t.delete("id < 5")
    t.maintenance.compact()
    _maintain(t)
    source = _multiset(pa.table(dt_.scan()), ["id", "s"])
    want = Counter({row: n for row, n in source.items() if row[0] >= 5}) + Counter([(100, "new")])
    assert _multiset(t.scan().to_arrow(), ["id", "s"]) == want
    assert _fingerprints(src, skip=()) == before


def test_a_partitioned_delta_table_is_refused_naming_why(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    src = tmp_path / "delta"
    deltalake.write_deltalake(str(src), pa.table({"id": [1, 2], "k": ["a", "b"]}), partition_by=["k"])
    with pytest.raises(UnconvertibleTable) as e:
        lamina.convert(str(src), str(tmp_path / "lamina"))
    assert e.value.feature == "partition-values-in-log"
    assert not (tmp_path / "lamina").exists()


def test_delta_and_iceberg_need_a_location_of_their_own(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    deltalake.write_deltalake(str(tmp_path / "d"), pa.table({"id": [1]}))
    with pytest.raises(InvalidArgument, match="needs a location"):
        lamina.convert(str(tmp_path / "d"))


def _iceberg_catalog(tmp_path: Path):
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    cat.create_namespace("db")
    return cat


def test_an_iceberg_table_is_adopted_with_its_specs_deletes_and_tags(tmp_path):
    pytest.importorskip("pyiceberg")
    from pyiceberg.transforms import IdentityTransform

    cat = _iceberg_catalog(tmp_path)
    data = pa.table({"id": pa.array(range(100), pa.int64()), "cat": pa.array(["a", "b", "c", "d"] * 25),
                     "v": pa.array([float(i) for i in range(100)])})
    tbl = cat.create_table("db.t", schema=data.schema)
    tbl.append(data.slice(0, 40))  # written under spec 0 (unpartitioned)
    with tbl.update_spec() as u:
        u.add_field("cat", IdentityTransform(), "cat")
    tbl.append(data.slice(40))  # under spec 1
    tbl.delete("id < 10 or id = 77")  # pyiceberg deletes copy-on-write
    tbl.manage_snapshots().create_tag(tbl.current_snapshot().snapshot_id, "release").commit()
    before = _fingerprints(tmp_path / "warehouse", skip=())
    t = lamina.convert(tbl, str(tmp_path / "lamina"), tags=True)
    ids = [f.field_id for f in tbl.schema().fields]
    assert [t.metadata.schema.field_id(n) for n in ("id", "cat", "v")] == ids
    assert [s.spec_id for s in t.metadata.all_partition_specs] == [0, 1]
    source = tbl.scan().to_arrow()
    assert _multiset(t.scan().to_arrow(), ["id", "cat", "v"]) == _multiset(source, ["id", "cat", "v"])
    assert _multiset(t.scan(where="cat = 'b'").to_arrow(), ["id"]) == _multiset(tbl.scan(row_filter="cat = 'b'").to_arrow(), ["id"])
    assert lamina.open_table(str(tmp_path / "lamina"), version="release").scan().count() == source.num_rows
    t.append(pa.table({"id": pa.array([1000], pa.int64()), "cat": ["z"], "v": [0.5]}))
    t.delete("id >= 90 and id < 1000")
    t.maintenance.compact()
    _maintain(t)
    want = Counter(r for r in zip(*(source.column(c).to_pylist() for c in ("id", "cat"))) if r[0] < 90) + Counter([(1000, "z")])
    assert _multiset(t.scan().to_arrow(), ["id", "cat"]) == want
    assert _fingerprints(tmp_path / "warehouse", skip=()) == before
    assert _multiset(tbl.refresh().scan().to_arrow(), ["id"]) == _multiset(source, ["id"])  # the source still reads


def test_iceberg_tags_of_older_snapshots_are_refused(tmp_path):
    pytest.importorskip("pyiceberg")
    cat = _iceberg_catalog(tmp_path)
    tbl = cat.create_table("db.t", schema=pa.schema([("id", pa.int64())]))
    tbl.append(pa.table({"id": pa.array([1], pa.int64())}))
    tbl.manage_snapshots().create_tag(tbl.current_snapshot().snapshot_id, "old").commit()
    tbl.append(pa.table({"id": pa.array([2], pa.int64())}))
    with pytest.raises(UnconvertibleTable, match="'old'") as e:
        lamina.convert(tbl, str(tmp_path / "lamina"), tags=True)
    assert e.value.feature == "tags-of-older-snapshots" and not (tmp_path / "lamina").exists()
    assert lamina.convert(tbl, str(tmp_path / "lamina")).scan().count() == 2  # without its tags


def test_add_files_reads_what_it_is_not_given_from_the_footers_and_never_deletes_external_files(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("k", pa.string())]), partition_by=["k"])
    outside = tmp_path / "elsewhere" / "f.parquet"
    outside.parent.mkdir()
    pq.write_table(pa.table({"id": pa.array([3, 9], pa.int64()), "k": ["a", "a"]}), outside)
    inside = tmp_path / "t" / "staging" / "g.parquet"
    inside.parent.mkdir()
    pq.write_table(pa.table({"id": pa.array([20, 30], pa.int64()), "k": ["b", "b"]}), inside)
    t.add_files(pa.table({"path": [f"file://{outside}", "staging/g.parquet"]}))
    assert t.scan().count() == 4 and EXTERNAL_FILES in t.metadata.writer_features
    assert len(t.scan(where="k = 'a'").plan()) == 1 and len(t.scan(where="id > 25").plan()) == 1  # footers' stats
    t.overwrite(pa.table({"id": pa.array([1], pa.int64()), "k": ["c"]}))
    _maintain(t)
    assert t.scan().to_arrow()["id"].to_pylist() == [1]
    assert outside.exists() and inside.exists()


def test_lamina_convert_from_the_shell(tmp_path):
    from tests.support.cli import ok, run

    root = tmp_path / "hive"
    _hive_dir(root, [(1, "a", 0.5), (2, "b", 1.5), (3, "b", 2.5)])
    out = " ".join(ok("convert", str(root)).split())  # (rich wraps long lines)
    assert "version 1, 2 files, 3 rows" in out
    assert lamina.open_table(str(root)).scan(where="k = 'b'").count() == 2
    again = run("convert", str(root))  # a table is there now: refused, naming it
    assert again.exit_code != 0 and "already exists" in " ".join(again.output.split())
    ds.write_dataset(pa.table({"id": [1], "k": ["a"]}), str(tmp_path / "bare"), format="parquet", partitioning=["k"],
                     partitioning_flavor="hive")
    refused = run("convert", str(tmp_path / "bare"))
    assert refused.exit_code != 0 and "do not store the partition column" in " ".join(refused.output.split())
