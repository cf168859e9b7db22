"""Root manifests carried by their version manifests (feature ``inline-root-manifests``,
docs/format.md "Manifest tree", Inline root manifests): what new tables write, roots too large
to carry, readers and writers without the feature, damage, and maintenance on such tables.
Rows read back are checked against DuckDB reading the table's data files directly (the oracle
knows nothing of manifests)."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import CorruptMetadata
from lamina.io import FileIO
from lamina.maintenance import fsck
from lamina.manifest.files import clear_cache, read_manifest
from lamina.spec import content as C
from lamina.spec.features import ARROW_ROOT_MANIFESTS, INLINE_ROOT_MANIFESTS
from lamina.spec.layout import MANIFESTS_DIR, is_inline_root, version_path
from support.features import check_required_by_readers_and_writers

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def batch(start: int, n: int = 3) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "name": [f"n{i}" for i in range(start, start + n)]}, schema=SCHEMA)


def make(tmp_path, appends: int = 6, **props: str) -> lamina.Table:
    # inline-max-files 2: the appends also flush leaves, so roots reference leaves as well as files
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"manifest.inline-max-files": "2", **props})
    for i in range(appends):
        t.append(batch(10 * i))
    return t


def manifest_files(t: lamina.Table) -> list[str]:
    return sorted(os.listdir(os.path.join(t.io.uri, MANIFESTS_DIR)))


def oracle_ids(t: lamina.Table, live: list[str] | None = None) -> list[int]:
    """Every id in the table's data files (or in ``live`` of them), read by DuckDB."""
    names = live if live is not None else ["data/" + n for n in os.listdir(os.path.join(t.io.uri, "data")) if n.endswith(".parquet")]
    files = sorted(os.path.join(t.io.uri, p) for p in names)
    return sorted(r[0] for r in duckdb.execute("select id from read_parquet(?)", [files]).fetchall()) if files else []


def fresh(uri: str, version: int | None = None) -> lamina.Table:
    clear_cache()  # read the roots from the version manifests, not the writer's cached copies
    return lamina.open_table(uri, version=version)


def ids(t: lamina.Table) -> list[int]:
    return sorted(t.to_arrow().column("id").to_pylist())


def expected(appends: int) -> list[int]:
    return sorted(i for k in range(appends) for i in range(10 * k, 10 * k + 3))


def test_a_new_table_carries_its_roots_in_its_version_manifests(tmp_path):
    t = make(tmp_path)
    vm = t.metadata
    assert {ARROW_ROOT_MANIFESTS, INLINE_ROOT_MANIFESTS} <= set(vm.reader_features) & set(vm.writer_features)
    assert is_inline_root(vm.root_manifest)
    carried = pa.ipc.open_stream(pa.py_buffer(vm.root_inline))  # an Arrow IPC stream
    assert carried.schema.metadata[b"lamina.manifest_kind"] == b"root" and carried.read_all().num_rows
    assert all(name.endswith(".leaf.arrow") for name in manifest_files(t)) and manifest_files(t)  # no root file; small leaves
    stored = json.loads(t.io.get(version_path(vm.version)))
    assert stored["root_manifest"] == vm.root_manifest and stored["root_inline"]
    clear_cache()
    root = read_manifest(t.io, vm.root_manifest, inline=vm.root_inline)
    assert pc.sum(pc.equal(root.column("content"), C.LEAF)).as_py() >= 1  # leaves stay files
    assert ids(fresh(t.io.uri)) == oracle_ids(t) == expected(6)
    for v in range(1, t.version + 1):  # time travel reads every version's carried root
        assert ids(fresh(t.io.uri, v)) == expected(v)


def test_a_root_larger_than_the_limit_is_a_file_and_versions_mix_both(tmp_path):
    one = lamina.create_table(str(tmp_path / "one"), SCHEMA)
    one.append(batch(0))
    limit = len(one.metadata.root_inline) + 300  # a root of one entry fits; one of several does not
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={
        "manifest.inline-max-files": "12", "manifest.root-inline-max-bytes": str(limit)})
    kinds = []
    for i in range(10):
        t.append(batch(10 * i))
        kinds.append(is_inline_root(t.metadata.root_manifest))
        if not kinds[-1]:
            assert t.metadata.root_inline is None and t.metadata.root_manifest.endswith(".root.arrow")
    assert kinds[0] and not kinds[-1], kinds
    assert any(n.endswith(".root.arrow") for n in manifest_files(t))
    for v in range(1, t.version + 1):
        assert ids(fresh(t.io.uri, v)) == expected(v)
    assert ids(fresh(t.io.uri)) == oracle_ids(t)


def test_a_limit_of_zero_writes_every_root_as_a_file(tmp_path):
    t = make(tmp_path, **{"manifest.root-inline-max-bytes": "0"})
    assert t.metadata.root_manifest.endswith(".root.arrow") and t.metadata.root_inline is None
    assert ids(fresh(t.io.uri)) == oracle_ids(t) == expected(6)


def test_a_reader_or_writer_without_the_feature_refuses_the_table(tmp_path, monkeypatch):
    check_required_by_readers_and_writers(make(tmp_path, appends=2), INLINE_ROOT_MANIFESTS, lambda t: t.append(batch(100)), monkeypatch)


def _edit_latest(t: lamina.Table, edit) -> None:
    path = os.path.join(t.io.uri, version_path(t.version))
    with open(path, "rb") as f:
        j = json.loads(f.read())
    edit(j)
    with open(path, "wb") as f:
        f.write(json.dumps(j).encode())
    clear_cache()


@pytest.mark.parametrize("damage", ["truncated", "not-base64", "name-without-bytes", "bytes-without-name"])
def test_a_damaged_carried_root_is_reported_as_corrupt(tmp_path, damage):
    t = make(tmp_path, appends=3)

    def edit(j):
        if damage == "truncated":
            j["root_inline"] = j["root_inline"][:40]
        elif damage == "not-base64":
            j["root_inline"] = "!!" + j["root_inline"][2:]
        elif damage == "name-without-bytes":
            del j["root_inline"]
        else:
            j["root_manifest"] = j["root_manifest"].replace(".root.inline", ".root.arrow")

    _edit_latest(t, edit)
    with pytest.raises(CorruptMetadata, match="corrupt or truncated|disagree"):
        lamina.open_table(t.io.uri, version=t.version).to_arrow()


def test_a_carried_root_is_never_read_as_a_missing_file(tmp_path):
    """A caller that passes a carried root's name without its bytes gets an error, never an
    empty root (which would drop every file of the version)."""
    t = make(tmp_path, appends=2)
    clear_cache()
    with pytest.raises(CorruptMetadata, match="carried by its version manifest"):
        read_manifest(t.io, t.metadata.root_manifest)


def test_maintenance_on_a_table_with_carried_roots(tmp_path):
    """Deletes, compaction, a tag, expiry and orphan cleanup: what is left reads back exactly
    what the live files hold, fsck finds nothing missing or unreferenced, and the tag of an
    expired version still reads through the root its tag file carries."""
    t = make(tmp_path, appends=8)
    t.tags.create("early")
    tagged = ids(t)
    t.delete("id < 20")
    t.maintenance.compact()
    t.append(batch(500))
    report = t.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    assert report.deleted_version_files > 0
    assert all(not is_inline_root(p) for p in report.deleted_manifests)
    t.maintenance.remove_orphans(older_than=timedelta(0), allow_short_age=True)
    t = fresh(t.io.uri)
    live = t.inspect.files().column("path").to_pylist()
    assert ids(t) == oracle_ids(t, live) == sorted(set(expected(8)) - set(range(20)) | {500, 501, 502})
    clear_cache()
    assert ids(lamina.open_table(t.io.uri, version="early")) == tagged
    r = fsck(t)
    assert r.ok and not r.missing and not r.unreferenced, (r.errors, r.missing, r.unreferenced)
    m = t.inspect.manifests()
    roots = m.filter(pc.equal(m.column("kind"), "root"))
    assert roots.column("path").to_pylist() == [t.metadata.root_manifest]
    assert roots.column("size").to_pylist() == [len(t.metadata.root_inline)]


def test_a_published_branch_keeps_its_carried_root(tmp_path):
    t = make(tmp_path, appends=2)
    dev = t.branches.create("dev")
    dev.append(batch(300))
    t.branches.publish("dev")  # a fast-forward: main takes the branch's version as it is
    t = fresh(t.io.uri)
    assert is_inline_root(t.metadata.root_manifest) and t.metadata.root_inline is not None
    assert ids(t) == oracle_ids(t) == sorted(expected(2) + [300, 301, 302])


def test_the_changes_feed_reads_carried_roots(tmp_path):
    t = make(tmp_path, appends=3)
    clear_cache()
    added = lamina.open_table(t.io.uri).changes(2, 3).to_arrow()
    assert sorted(added.column("id").to_pylist()) == [20, 21, 22]


def test_a_version_manifest_with_a_carried_root_round_trips(tmp_path):
    t = make(tmp_path, appends=2)
    vm = t.metadata
    from lamina.spec.version import VersionManifest

    again = VersionManifest.from_json(vm.to_json(), "x")
    assert again == vm and again.root_inline == vm.root_inline
    assert FileIO(t.io.uri).get(version_path(vm.version)) == vm.to_json()
