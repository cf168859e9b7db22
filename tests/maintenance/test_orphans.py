"""Orphan cleanup (lamina.maintenance.orphans through ``Table.remove_orphans``).

A table with history (expired versions, freed slot chunks, a tag that alone holds old
files) gets files planted the way failed writers and crashes leave them, each aged by
its mtime. The oracle is the list of files planted as orphans, and the public system
tables: everything else is referenced by a surviving version or tag, or is table
metadata, or is young, or belongs to a write registered in flight -- and stays.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import InvalidArgument
from lamina.maintenance import fsck
from lamina.spec.layout import version_path
from lamina.spec.slot import Tombstone
from support.files import ids_of, referenced, set_age, table_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.string())])
NOW = timedelta(0)
OLD_DAYS = 10


def inflight():
    """The in-flight write markers (lamina.data.inflight; moving to lamina.data.inflight)."""
    from lamina.data import inflight as module

    return module


def batch(ids, grp: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "grp": [grp] * len(ids)}, schema=SCHEMA)


def age_all(root: str, days: float = OLD_DAYS) -> None:
    flush_hints()
    for d, _, names in os.walk(root):
        for n in names:
            set_age(os.path.join(d, n), days)


def plant(root: str, rel: str, days: float = OLD_DAYS, data: bytes | None = None) -> str:
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data if data is not None else os.urandom(37))
    set_age(p, days)
    return rel


def reads(t: lamina.Table) -> tuple[dict, dict]:
    versions = {h["version"]: ids_of(t.scan(version=h["version"]).to_arrow()) for h in t.history()}
    tags = {tg.name: ids_of(t.scan(version=tg.name).to_arrow()) for tg in t.tags.list()}
    return versions, tags


def wid() -> str:
    return uuid.uuid4().hex[:16]


@pytest.fixture
def world(tmp_path):
    """A table with history and, planted around it, orphans of every kind plus files that
    look like orphans but must stay. Returns (table, planted orphans, kept lookalikes)."""
    props = {"manifest.inline-max-files": "2", "manifest.leaf-target-files": "3",
             "version.slot-chunk-size": "2", "expire.slot-retention-ms": "0"}
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["grp"], properties=props)
    t.append(batch(range(0, 5), "a"))
    t.append(batch(range(5, 9), "b"))
    t.delete("id = 2")  # a deletion vector
    t.tags.create("old")  # holds files the later versions drop
    t.overwrite(batch([100], "a"), where="grp = 'a'")
    t.append(batch([101], "b"))
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)  # tombstones, freed chunks; "old" alone holds files
    t.append(batch([102], "b"))
    assert os.listdir(os.path.join(t.uri, "_lamina", "freed"))  # the history has freed chunks
    tag_only = set(t.inspect.files(version="old").column("dv_path").to_pylist()) - {None}
    tag_only |= set(t.inspect.files(version="old").column("path").to_pylist()) - set(t.inspect.files().column("path").to_pylist())
    assert len(tag_only) == 2  # grp a's first file and its deletion vector: only the tag holds them
    age_all(t.uri)
    root = t.uri
    latest = t.version
    first_freed = min(t.log.freed_ranges())[0]
    orphans = [
        plant(root, f"data/{wid()}-{uuid.uuid4().hex[:12]}.parquet"),  # an append that never committed
        plant(root, f"data/grp=b/{wid()}-{uuid.uuid4().hex[:12]}.parquet"),
        plant(root, f"data/_dv/{wid()}-{uuid.uuid4().hex[:12]}.dv"),  # a row-level commit that lost
        plant(root, f"_lamina/manifests/{uuid.uuid4().hex}.leaf.parquet"),
        plant(root, f"_lamina/manifests/{uuid.uuid4().hex}.root.parquet"),
        # a manifest the SQL catalog staged for a version that is published (or lost) by now
        plant(root, f"_lamina/versions/pending/{latest:020d}-{uuid.uuid4().hex}.json", data=b"{}"),
        plant(root, "data/stray/notes.bin"),
        # a tombstone in a freed chunk: expiry wrote the chunk's record, then its delete of
        # the chunk's tombstones failed (the fault test met it)
        plant(root, version_path(first_freed), data=Tombstone(first_freed, None, "expired", 0).to_json()),
    ]
    stale = wid()  # a crashed job: its marker is past the marker TTL (7 days), so its files go
    inflight().register_write(t.io, stale)
    set_age(os.path.join(root, "_lamina", "writes", f"{stale}.json"), 8)
    orphans.append(plant(root, f"data/spark-{stale}/part-00000.parquet"))
    running = wid()  # a job in flight, files written days ago, not committed yet
    inflight().register_write(t.io, running)
    kept = {
        "young": [plant(root, f"data/{wid()}-{uuid.uuid4().hex[:12]}.parquet", days=0.5)],
        "in_flight": [plant(root, f"data/spark-{running}/part-00000.parquet"),
                      plant(root, f"data/{running}-{uuid.uuid4().hex[:12]}.parquet"),
                      plant(root, f"data/_dv/{running}-{uuid.uuid4().hex[:12]}.dv")],
    }
    return t, sorted(orphans), kept


def test_orphans_are_exactly_the_unreferenced_old_files_and_a_dry_run_deletes_none(world):
    t, orphans, kept = world
    before = table_files(t.uri)
    versions, tags = reads(t)
    needed = referenced(t)
    assert not needed & set(orphans)  # the planted orphans really are unreferenced
    dry = t.maintenance.remove_orphans(dry_run=True)  # default: older than 3 days
    assert table_files(t.uri) == before
    assert sorted(dry.orphans) == orphans
    assert dry.deleted_bytes == sum(len(before[p]) for p in orphans)
    assert (dry.kept_young, dry.kept_in_flight) == (len(kept["young"]), len(kept["in_flight"]))
    rep = t.maintenance.remove_orphans()
    assert sorted(rep.orphans) == sorted(dry.orphans) and rep.deleted_bytes == dry.deleted_bytes
    after = table_files(t.uri)
    assert set(before) - set(after) == set(orphans)  # deleted: the orphans, nothing else
    assert set(after) - set(before) == set()
    assert needed <= set(after)  # every referenced file -- the tag's old ones too -- stays
    for p in kept["young"] + kept["in_flight"]:
        assert p in after
    t = lamina.open_table(t.uri)
    assert reads(t) == (versions, tags)
    report = fsck(t)
    assert report.ok and sorted(report.unreferenced) == sorted(kept["young"] + kept["in_flight"]), report
    assert t.maintenance.remove_orphans().orphans == []  # nothing left to do


def test_the_files_of_a_finished_write_go_once_its_marker_is_removed(world):
    t, orphans, kept = world
    t.maintenance.remove_orphans()
    running = kept["in_flight"][0].split("/")[1][len("spark-"):]
    inflight().finish_write(t.io, running)
    rep = t.maintenance.remove_orphans()
    assert sorted(rep.orphans) == sorted(kept["in_flight"]) and rep.kept_in_flight == 0
    for p in kept["in_flight"]:
        assert not os.path.exists(os.path.join(t.uri, p))


def test_a_short_age_reaches_young_files_only_when_allowed(world):
    t, orphans, kept = world
    before = table_files(t.uri)
    with pytest.raises(InvalidArgument, match="allow_short_age"):
        t.maintenance.remove_orphans(timedelta(hours=1))
    assert table_files(t.uri) == before
    rep = t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert sorted(rep.orphans) == sorted(orphans + kept["young"])
    assert rep.kept_in_flight == len(kept["in_flight"])  # in flight is kept whatever the age


def test_the_minimum_age_is_one_day_to_the_millisecond(tmp_path, monkeypatch):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(batch([1]))
    frozen = time.time()
    monkeypatch.setattr(time, "time", lambda: frozen)  # the cutoff and the check see one instant
    orphan = plant(t.uri, f"data/{wid()}-{uuid.uuid4().hex[:12]}.parquet", days=2)
    before = table_files(t.uri)
    day_ago = int(frozen * 1000) - 86_400_000
    for older_than in (timedelta(days=1) - timedelta(milliseconds=1), day_ago + 1,
                       datetime.fromtimestamp((day_ago + 1) / 1000, tz=timezone.utc)):
        with pytest.raises(InvalidArgument, match="shorter than the minimum age"):
            t.maintenance.remove_orphans(older_than, dry_run=True)
        assert table_files(t.uri) == before
    for older_than in (timedelta(days=1), day_ago):
        assert t.maintenance.remove_orphans(older_than, dry_run=True).orphans == [orphan]
    assert t.maintenance.remove_orphans(timedelta(days=1)).orphans == [orphan]
    assert not os.path.exists(os.path.join(t.uri, orphan)) and ids_of(t.to_arrow()) == [1]


@pytest.mark.parametrize("older_than", [timedelta(days=-1), float("nan"), "last week", [3]])
def test_bad_older_than_is_refused_and_changes_nothing(world, older_than):
    t, orphans, kept = world
    before = table_files(t.uri)
    with pytest.raises(InvalidArgument):
        t.maintenance.remove_orphans(older_than, allow_short_age=True)
    assert table_files(t.uri) == before


def test_orphans_on_an_object_store_location(tmp_path):
    """memory:// goes through the object-store listing: its objects' times are now, so only a
    forced cutoff at now reaches them; referenced files and metadata stay."""
    uri = f"memory://orphans-{uuid.uuid4().hex[:12]}/t"
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch([1, 2]))
    t.overwrite(batch([3]))
    t.tags.create("first", 1)
    stray = f"data/{wid()}-{uuid.uuid4().hex[:12]}.parquet"
    t.io.put(stray, b"not committed")
    flush_hints()
    assert t.maintenance.remove_orphans().orphans == [] and t.maintenance.remove_orphans().kept_young == 1
    before = {o.path for o in t.io.walk()}
    rep = t.maintenance.remove_orphans(datetime.now(timezone.utc) + timedelta(seconds=5), allow_short_age=True)
    assert rep.orphans == [stray]
    assert {o.path for o in t.io.walk()} == before - {stray}
    t = lamina.open_table(uri)
    assert ids_of(t.to_arrow()) == [3] and ids_of(t.scan(version="first").to_arrow()) == [1, 2]
    assert fsck(t).ok
