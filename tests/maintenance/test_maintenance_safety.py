"""Maintenance never deletes what a version needs, and refuses tables it cannot read:

- a version a SQL catalog committed but whose writer died before publishing it;
- damaged version files, never mistaken for tombstones by their size (12.3);
- a latest version that needs a writer feature this Lamina does not know (12.4);
- orphan cleanup's minimum age, whatever type ``older_than`` has (12.5).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import CorruptMetadata, InvalidArgument, UnsupportedFeature
from lamina.maintenance import fsck
from lamina.spec.layout import PENDING_DIR, version_path

from support import workers

NOW = timedelta(0)
ROWS = 3


def on_disk(root: str) -> dict[str, tuple[int, bytes]]:
    """Every file under ``root`` with its size and contents: what "nothing changed" compares."""
    flush_hints()  # the hint is written in the background after each commit
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (os.path.getsize(p), fh.read())
    return out


def age(root: str, days: float = 10) -> None:
    """Make every file under ``root`` look ``days`` old (orphan cleanup goes by age)."""
    t = time.time() - days * 86400
    for d, _, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(d, f), (t, t))


# -- 12.2: a staged catalog commit survives maintenance by path and through old handles ------


@pytest.mark.xdist_group("procs")
@pytest.mark.parametrize("how", ["orphans-by-path", "orphans-old-handle", "expire-by-path", "expire-old-handle"])
def test_maintenance_keeps_a_version_committed_but_not_yet_published(tmp_path, how):
    uri = f"sqlite:///{tmp_path}/wh/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", workers.schema(), properties={"manifest.inline-max-files": "1"})
    for s in range(3):
        t.append(workers.batch(0, s, ROWS))
    old_handle = cat.load_table("ns.t")
    flush_hints()
    proc = workers.run_crash_worker(
        {"catalog": uri, "identifier": "ns.t", "uri": t.uri, "at": "swapped", "marker": str(tmp_path / "m"),
         "writer": 1, "seq": 0, "rows": ROWS}
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert os.listdir(os.path.join(t.uri, PENDING_DIR))  # version 4 committed (row swapped), not published
    age(t.uri)  # every file, the staged version's own manifests included, is old enough to be an orphan
    target = lamina.open_table(t.uri) if how.endswith("by-path") else old_handle
    if how.startswith("orphans"):
        target.maintenance.remove_orphans(NOW, allow_short_age=True)
    else:
        target.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    t2 = lamina.load_catalog(uri).load_table("ns.t")  # publishes version 4
    assert t2.version == 4
    got = t2.to_arrow()
    assert got.num_rows == 4 * ROWS and sorted(set(got.column("writer").to_pylist())) == [0, 1]
    report = fsck(lamina.open_table(t.uri))
    assert report.ok, (report.missing, report.errors)


# -- 12.3: damaged version files fail closed -------------------------------------------------


@pytest.mark.parametrize("keep", [0, 1, 13, 100, 160, 300])
def test_a_truncated_version_file_is_damage_not_a_tombstone(tmp_path, keep):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema(), properties={"manifest.inline-max-files": "1"})
    for s in range(3):
        t.append(workers.batch(0, s, ROWS))
    flush_hints()
    path = os.path.join(uri, version_path(1))
    with open(path, "r+b") as f:
        f.truncate(keep)
    age(uri)
    before = on_disk(uri)
    t = lamina.open_table(uri)
    report = fsck(t)
    assert not report.ok and any("version 1" in e or version_path(1) in e for e in report.errors), report.errors
    assert version_path(1) not in report.unreferenced
    with pytest.raises(CorruptMetadata):
        t.history()
    with pytest.raises(CorruptMetadata):
        t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert on_disk(uri) == before  # nothing deleted, nothing rewritten
    assert t.to_arrow().num_rows == 3 * ROWS  # the latest version still reads
    # Expiry needs nothing of an expired version but what the versions after it say of it
    # (their block lists): the damaged one expires like the others, its file set aside.
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert rep.expired_versions == [0, 1, 2]
    assert [h["version"] for h in t.history()] == [3] and t.to_arrow().num_rows == 3 * ROWS
    assert fsck(lamina.open_table(uri)).ok


def test_a_damaged_tombstone_is_reported_and_blocks_cleanup(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    for s in range(3):
        t.append(workers.batch(0, s, ROWS))
    t.rollback(0, destructive=True)  # versions 1..3 become tombstones
    with open(os.path.join(uri, version_path(1)), "r+b") as f:
        f.truncate(20)  # '{"tombstone":true,"v'
    before = on_disk(uri)
    report = fsck(lamina.open_table(uri))
    assert not report.ok and any("damaged tombstone" in e for e in report.errors)
    with pytest.raises(CorruptMetadata, match="damaged tombstone"):
        lamina.open_table(uri).maintenance.remove_orphans(NOW, allow_short_age=True)
    assert on_disk(uri) == before


# -- 12.4: unknown writer features stop every operation that writes or deletes ----------------


def test_maintenance_refuses_a_table_needing_an_unknown_writer_feature(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    for s in range(3):
        t.append(workers.batch(0, s, ROWS))
    t.tags.create("keep")
    # A newer Lamina commits version 4 with a feature of its own and a file only it references.
    vm = t.log.latest()
    future = vm.next(version=vm.version + 1, parent_version=vm.version, timestamp_ms=vm.timestamp_ms + 1,
                     commit_id=uuid.uuid4().hex, writer_features=vm.writer_features + ("future-feature",))
    t.io.put_if_absent(version_path(future.version), future.to_json())
    os.makedirs(os.path.join(uri, "data", "future"))
    with open(os.path.join(uri, "data", "future", "sidecar.bin"), "wb") as f:
        f.write(b"only the future feature knows this file")
    age(uri)
    flush_hints()
    before = on_disk(uri)
    t = lamina.open_table(uri)
    attempts = {
        "remove_orphans": lambda: t.maintenance.remove_orphans(NOW, allow_short_age=True),
        "expire_versions": lambda: t.maintenance.expire_versions(retain_last=1, reader_grace=NOW),
        "create_tag": lambda: t.tags.create("new"),
        "delete_tag": lambda: t.tags.delete("keep"),
        "replace_tag": lambda: t.tags.replace("keep", 1),
        "rename_tag": lambda: t.tags.rename("keep", "kept"),
        "append": lambda: t.append(workers.batch(1, 0, ROWS)),
        "compact": lambda: t.maintenance.compact(),
        "rollback": lambda: t.rollback(1),
    }
    for name, attempt in attempts.items():
        with pytest.raises(UnsupportedFeature, match="future-feature"):
            attempt()
        assert on_disk(uri) == before, f"{name} changed the table"
    assert t.to_arrow().num_rows == 3 * ROWS  # reading is fine: it is a writer feature


# -- 12.5: the minimum orphan age whatever the type of older_than ----------------------------


def _now_forms():
    now = datetime.now(timezone.utc)
    return {
        "timedelta": timedelta(hours=1),
        "datetime": now,
        "naive-datetime": now.replace(tzinfo=None),
        "iso-string": now.isoformat(),
        "epoch-ms": int(now.timestamp() * 1000),
        "epoch-ms-float": now.timestamp() * 1000.0,
        "future": now + timedelta(days=1),
    }


@pytest.mark.parametrize("form", sorted(_now_forms()))
def test_orphan_minimum_age_holds_for_every_form_of_older_than(tmp_path, form):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, ROWS))
    in_flight = os.path.join(uri, "data", "0123456789abcdef-000000000000.parquet")
    with open(in_flight, "wb") as f:
        f.write(b"a file a running writer has not committed yet")
    before = on_disk(uri)
    with pytest.raises(InvalidArgument, match="allow_short_age"):
        t.maintenance.remove_orphans(_now_forms()[form])
    assert on_disk(uri) == before
    report = t.maintenance.remove_orphans(_now_forms()[form], allow_short_age=True)  # forced
    if form == "timedelta":  # an hour ago: the file is younger, so it stays even so
        assert report.orphans == [] and report.kept_young == 1
    else:  # the cutoff is now (or later): it goes
        assert report.orphans == ["data/0123456789abcdef-000000000000.parquet"]
        assert not os.path.exists(in_flight)


def test_orphan_cutoff_older_than_the_minimum_needs_no_force(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    old = datetime.now(timezone.utc) - timedelta(days=2)
    for older_than in (old, old.isoformat(), int(old.timestamp() * 1000), timedelta(days=2)):
        assert t.maintenance.remove_orphans(older_than).orphans == []


# -- a file registered again after an earlier version removed it ----------------------------


def test_expiry_keeps_a_file_add_files_registered_again(tmp_path):
    """add_files of a file an older version removed gives it a second lifetime interval; expiry,
    which reasons about one interval per file, must not free it under the live table."""
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, workers.schema())
    t.append(workers.batch(0, 0, ROWS))  # version 1: file A
    first = t.inspect.files().to_pylist()[0]
    t.overwrite(workers.batch(0, 1, ROWS))  # version 2 removes A
    t.add_files(pa.table({"path": [first["path"]], "size": [first["size"]],
                          "record_count": [first["record_count"]]}))  # version 3: A again
    assert t.to_arrow().num_rows == 2 * ROWS
    t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    t.maintenance.remove_orphans(NOW, allow_short_age=True)
    assert os.path.exists(os.path.join(uri, first["path"]))
    assert sorted(lamina.open_table(uri).to_arrow().column("seq").to_pylist()) == [0] * ROWS + [1] * ROWS
    assert fsck(lamina.open_table(uri)).ok
