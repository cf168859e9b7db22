"""fsck (lamina.maintenance.fsck): a healthy table is clean, and each kind of damage is
reported, naming the damaged path, without fsck changing anything.

The healthy table has every kind of file fsck must account for: inline and leaf
manifests, deletion vectors, partitions, a tag holding files no version holds, expired
versions (tombstones), freed slot chunks (records), an in-flight write marker. Damage is
done the way a bad disk, a careless ``rm`` or a half-copied backup does it, and the
manifest cache is cleared, as a fresh process would read the table.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import CorruptMetadata
from lamina.maintenance import fsck
from lamina.manifest.files import clear_cache
from lamina.spec.layout import is_inline_root, version_path
from support.files import referenced, table_files

pytestmark = pytest.mark.slow  # a damaged table per kind of damage, each checked whole

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.string())])
NOW = timedelta(0)


def inflight():
    """The in-flight write markers (lamina.data.inflight)."""
    from lamina.data import inflight as module

    return module


def batch(ids, grp: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "grp": [grp] * len(ids)}, schema=SCHEMA)


def latest_refs(t: lamina.Table) -> dict[str, list[str]]:
    """What the latest version references, from the public system tables."""
    files = t.inspect.files()
    manifests = t.inspect.manifests()
    kind = manifests.column("kind").to_pylist()
    paths = manifests.column("path").to_pylist()
    return {
        "data": files.column("path").to_pylist(),
        "dv": sorted({p for p in files.column("dv_path").to_pylist() if p is not None}),
        "root": [p for p, k in zip(paths, kind) if k == "root"],
        "leaf": [p for p, k in zip(paths, kind) if k == "leaf"],
    }


def build(tmp_path, root_format: str) -> lamina.Table:
    props = {"manifest.inline-max-files": "2", "manifest.leaf-target-files": "3",
             "version.slot-chunk-size": "4", "expire.slot-retention-ms": "0", "manifest.root-format": root_format}
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["grp"], properties=props)
    for k in range(4):
        t.append(batch(range(10 * k, 10 * k + 5), "ab"[k % 2]))
    t.tags.create("before-delete")
    t.delete("id IN (1, 11, 21)")  # deletion vectors
    t.overwrite(batch([100], "b"), where="grp = 'b'")  # the tag alone holds b's old files now
    t.append(batch([101], "c"))
    t.append(batch([102], "c"))
    t.maintenance.expire_versions(retain_last=3, reader_grace=NOW)  # 0..5 expire: records 0-3 and 4-5, slots freed
    kept = t.version
    t.append(batch([103], "c"))
    t.append(batch([104], "c"))
    t.rollback(kept, destructive=True)  # the two appends' slots hold tombstones
    inflight().register_write(t.io, "0123456789abcdef")
    flush_hints()
    refs = latest_refs(t)
    assert refs["data"] and refs["dv"] and refs["root"] and refs["leaf"]  # every kind is there
    assert [(r.first, r.last) for r in t.log.slot_records()] == [(0, 3), (4, 5)]
    _first_slot(t, tombstone=True)  # ... and tombstones
    return t


@pytest.fixture
def table(tmp_path):
    # Root manifests as files, so their damage can be done to them (roots carried by version
    # manifests: test_a_table_with_carried_roots_is_clean_and_a_damaged_one_reported).
    yield build(tmp_path, "arrow")
    clear_cache()


def fresh(t: lamina.Table) -> lamina.Table:
    """The table as a new process sees it: no cached manifests."""
    clear_cache()
    return lamina.open_table(t.uri)


def test_a_healthy_table_is_clean(table):
    report = fsck(fresh(table))
    assert report.ok and report.missing == [] and report.errors == [] and report.unreferenced == [], report
    refs = latest_refs(table)
    assert report.version == table.version
    assert report.checked_files == sum(len(v) for v in refs.values())


def test_a_table_with_carried_roots_is_clean_and_a_damaged_one_reported(tmp_path):
    t = build(tmp_path, "inline")
    assert is_inline_root(t.metadata.root_manifest)
    report = fsck(fresh(t))
    assert report.ok and not (report.missing or report.errors or report.unreferenced), report
    refs = latest_refs(t)
    assert report.checked_files == sum(len(v) for v in refs.values()) - 1  # the root is no file
    path = os.path.join(t.uri, version_path(t.version))
    with open(path, "rb") as f:
        j = json.loads(f.read())
    j["root_inline"] = j["root_inline"][:60]  # its bytes cut short
    with open(path, "wb") as f:
        f.write(json.dumps(j).encode())
    report = fsck(fresh(t))
    assert not report.ok and any("corrupt or truncated" in e for e in report.errors), report
    clear_cache()


def test_unreferenced_files_are_listed_but_are_not_damage(table):
    strays = sorted(["data/0000000000000000-000000000000.parquet", "data/grp=b/left-behind.parquet",
                     "_lamina/manifests/00000000000000000000000000000000.leaf.parquet"])
    for p in strays:
        table.io.put(p, b"a crashed writer's leftovers")
    report = fsck(fresh(table))
    assert report.ok and report.unreferenced == strays and report.missing == [], report


def _remove(t, path):
    os.remove(os.path.join(t.uri, path))


def _overwrite(data: bytes):
    def damage(t, path):
        with open(os.path.join(t.uri, path), "wb") as f:
            f.write(data)

    return damage


def _truncate(t, path):
    with open(os.path.join(t.uri, path), "r+b") as f:
        f.truncate(os.path.getsize(f.name) // 2)


def _other_version(t, path):
    """The slot holds a (valid) manifest of another version: a half-restored backup."""
    _overwrite(t.io.get(version_path(t.version)))(t, path)


def _tombstone_of_another_version(t, path):
    stone = json.loads(t.io.get(path))
    stone["version"] -= 1
    _overwrite(json.dumps(stone, separators=(",", ":")).encode())(t, path)


def _first_slot(t, tombstone: bool) -> str:
    for v in range(t.version):
        p = version_path(v)
        if t.io.exists(p) and json.loads(t.io.get(p)).get("tombstone", False) == tombstone:
            return p
    raise AssertionError("no such slot")


# (what is damaged, how to find its path, how it is damaged)
DAMAGE = {
    "data file deleted": (lambda t: latest_refs(t)["data"][0], _remove),
    "deletion vector deleted": (lambda t: latest_refs(t)["dv"][0], _remove),
    "leaf manifest deleted": (lambda t: latest_refs(t)["leaf"][0], _remove),
    "root manifest deleted": (lambda t: latest_refs(t)["root"][0], _remove),
    "leaf manifest overwritten": (lambda t: latest_refs(t)["leaf"][0], _overwrite(b"PAR1 not a manifest PAR1")),
    "root manifest truncated": (lambda t: latest_refs(t)["root"][0], _truncate),
    "older version truncated": (lambda t: _first_slot(t, tombstone=False), _truncate),
    "older version holds another version": (lambda t: _first_slot(t, tombstone=False), _other_version),
    "tombstone damaged": (lambda t: _first_slot(t, tombstone=True), _overwrite(b'{"tombstone":tru')),
    "tombstone of another version": (lambda t: _first_slot(t, tombstone=True), _tombstone_of_another_version),
    "slot record damaged": (lambda t: t.log.slot_records()[0].path, _overwrite(b'{"first_version": 0}')),
    "tag damaged": (lambda t: "_lamina/tags/before-delete.json", _truncate),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_each_kind_of_damage_is_reported_naming_the_path(table, case):
    locate, damage = DAMAGE[case]
    path = locate(table)
    live = {p for paths in latest_refs(table).values() for p in paths}
    held = referenced(table)  # by any version or tag, before the damage
    damage(table, path)
    before = table_files(table.uri)
    report = fsck(fresh(table))
    assert not report.ok, report
    named = [m for m in report.missing if m == path] + [e for e in report.errors if path in e]
    assert named, f"{case}: {path} is named in neither missing nor errors: {report}"
    # "unreferenced" is what cleanup may delete: never the damaged file, nor what the latest
    # version references (fsck's contract: damage is an error, never "unreferenced")
    assert path not in report.unreferenced
    assert not live & set(report.unreferenced), f"live files listed as unreferenced: {sorted(live & set(report.unreferenced))}"
    assert not held & set(report.unreferenced), f"files a version or tag holds listed as unreferenced: {sorted(held & set(report.unreferenced))}"
    assert table_files(table.uri) == before  # fsck only reads


def test_damage_to_the_latest_version_is_a_clear_error(table):
    """The latest version's file is what fsck starts from: damaged, fsck cannot run, and
    says so with a typed error naming the file (the CLI exits non-zero with it)."""
    t = fresh(table)
    path = version_path(t.version)
    _truncate(t, path)
    before = table_files(t.uri)
    try:
        report = fsck(t)
    except CorruptMetadata as e:
        assert path in str(e)
    else:
        assert not report.ok and any(path in e for e in report.errors), report
    assert table_files(t.uri) == before
