"""Table properties that change (issue 44, point 7): ``update_properties`` commits one version
through the one commit path (alone, in a transaction, in a catalog transaction); writes after
it use the new settings; what the format fixes at creation is refused with the reason; two
concurrent updates both land (a blind write of its keys, re-applied on the newer base);
``Table.properties`` is read-only."""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import committer, flush_hints
from lamina.errors import CommitConflict, InvalidArgument, PropertyCannotChange, SchemaMismatch, UnsupportedFeature
from lamina.maintenance import fsck
from lamina.spec import features
from lamina.spec.lineage import ROW_LINEAGE
from lamina.spec.properties import TableProperties as P

SCHEMA = pa.schema([("id", pa.int64()), ("grp", pa.string()), ("score", pa.float64())])


@pytest.fixture(autouse=True)
def _hints():
    yield
    flush_hints()


def rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "grp": [f"g{i % 3}" for i in ids], "score": [i * 0.5 for i in ids]}, schema=SCHEMA)


def codecs(t: lamina.Table, version: int | None = None) -> dict[str, str]:
    """Each live data file's codec, read from its Parquet footer (every column chunk's)."""
    out = {}
    for path in t.inspect.files(version=version).column("path").to_pylist():
        md = pq.read_metadata(os.path.join(t.uri, path))
        found = {md.row_group(g).column(c).compression for g in range(md.num_row_groups) for c in range(md.num_columns)}
        assert len(found) == 1, found
        out[path] = found.pop()
    return out


def unchanged(t: lamina.Table, version: int, properties: dict) -> None:
    """Nothing was committed: the latest version and its properties are as they were."""
    latest = lamina.open_table(t.uri)
    assert latest.version == version
    assert dict(latest.properties) == properties


# -- one version, metadata only, and what it changes --------------------------------------------


def test_an_update_is_one_version_and_older_versions_keep_their_properties(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"owner": "ana", "team": "ops"})
    t.append(rows(range(10)))
    v = t.update_properties(set={"owner": "bo", "write.parquet.compression": "ZSTD"}, remove=["team"]).version
    assert v == 2 and t.version == 2
    assert dict(t.properties) == {"owner": "bo", "write.parquet.compression": "ZSTD"}
    (h,) = t.history(limit=1)
    assert h["operation"] == "update-properties"
    assert h["summary"]["properties-set"] == "owner, write.parquet.compression"
    assert h["summary"]["properties-removed"] == "team"
    assert (h["summary"]["added-files"], h["summary"]["removed-files"], h["summary"]["total-records"]) == (0, 0, 10)
    reopened = lamina.open_table(t.uri)
    assert dict(reopened.properties) == dict(t.properties)
    assert dict(lamina.open_table(t.uri, version=1).properties) == {"owner": "ana", "team": "ops"}
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == list(range(10))
    assert fsck(t).ok


def test_setting_what_the_table_has_or_removing_what_it_lacks_commits_nothing(tmp_path):
    """Iceberg's rule; judged on the latest version, not on the one a stale handle holds."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"owner": "ana"})
    stale = lamina.open_table(t.uri)
    assert t.update_properties(set={"owner": "ana"}, remove=["team", P.TAG_AUTO_CREATE.key]).version is None
    unchanged(t, 0, {"owner": "ana"})
    t.update_properties(set={"owner": "bo"})
    assert stale.update_properties(set={"owner": "ana"}).version == 2  # "ana" is what the stale handle saw
    assert t.refresh().update_properties(remove=["owner"]).version == 3
    assert stale.update_properties(remove=["owner"]).version is None and stale.version == 3
    unchanged(t, 3, {})


def test_values_are_text_as_create_table_stores_them(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.update_properties(set={P.WRITE_MAX_ROWS_PER_FILE.key: 7, "flag": True})
    assert dict(lamina.open_table(t.uri).properties) == {P.WRITE_MAX_ROWS_PER_FILE.key: "7", "flag": "True"}


def test_properties_set_later_take_effect_for_the_writes_after_them(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["grp"])
    t.append(rows(range(30)))
    before = codecs(t)
    assert set(before.values()) == {"SNAPPY"}
    t.update_properties(set={P.WRITE_PARQUET_COMPRESSION.key: "zstd", P.WRITE_MAX_ROWS_PER_FILE.key: "4"})
    t.append(rows(range(30, 60)))  # 10 rows per partition, at most 4 per file: 3 files each
    after = codecs(t)
    new = {p: c for p, c in after.items() if p not in before}
    assert set(new.values()) == {"ZSTD"} and len(new) == 9
    assert {p: after[p] for p in before} == before  # files already written keep theirs
    counts = t.inspect.files().filter(pc.invert(pc.is_in(t.inspect.files().column("path"), value_set=pa.array(list(before)))))
    assert max(counts.column("record_count").to_pylist()) == 4
    # A compaction after a codec change writes the new codec.
    t.update_properties(set={P.WRITE_PARQUET_COMPRESSION.key: "gzip"}, remove=[P.WRITE_MAX_ROWS_PER_FILE.key])
    t.maintenance.compact(target_file_size=1 << 20)
    assert set(codecs(t).values()) == {"GZIP"}
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(60))


def test_in_a_transaction_the_calls_after_it_use_the_new_settings_and_all_is_one_version(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    with t.transaction() as tx:
        tx.append(rows(range(5)))  # before the update: the table's codec
        tx.update_properties(set={P.WRITE_PARQUET_COMPRESSION.key: "brotli", "stage": "raw"})
        tx.append(rows(range(5, 10)))
    assert t.version == 1
    assert dict(t.properties) == {P.WRITE_PARQUET_COMPRESSION.key: "brotli", "stage": "raw"}
    by_rows = {min(pq.read_table(os.path.join(t.uri, p)).column("id").to_pylist()): c for p, c in codecs(t).items()}
    assert by_rows == {0: "SNAPPY", 5: "BROTLI"}


def test_a_transaction_left_by_an_exception_changes_no_property(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(RuntimeError):
        with t.transaction() as tx:
            tx.update_properties(set={"owner": "x"})
            raise RuntimeError("stop")
    unchanged(t, 0, {})


def test_a_catalog_transaction_changes_two_tables_properties_together(tmp_path):
    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/wh/catalog.db")
    cat.create_namespace("ns")
    a, b = cat.create_table("ns.a", SCHEMA), cat.create_table("ns.b", SCHEMA)
    with cat.transaction() as tx:
        tx.table("ns.a").update_properties(set={P.WRITE_PARQUET_COMPRESSION.key: "zstd"})
        tx.table("ns.a").append(rows(range(3)))
        tx.table("ns.b").update_properties(set={"owner": "ops"})
    assert dict(cat.load_table("ns.a").properties) == {P.WRITE_PARQUET_COMPRESSION.key: "zstd"}
    assert dict(cat.load_table("ns.b").properties) == {"owner": "ops"}
    assert set(codecs(cat.load_table("ns.a")).values()) == {"ZSTD"}
    with pytest.raises(RuntimeError):
        with cat.transaction() as tx:
            tx.table("ns.a").update_properties(set={"owner": "x"})
            tx.table("ns.b").update_properties(remove=["owner"])
            raise RuntimeError("stop")
    assert dict(cat.load_table("ns.b").properties) == {"owner": "ops"}
    assert "owner" not in cat.load_table("ns.a").properties
    assert a.refresh().version == 1 and b.refresh().version == 1


# -- read-only ---------------------------------------------------------------------------------


def test_the_properties_mapping_is_read_only(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"owner": "ana"})
    props = t.properties
    with pytest.raises(TypeError):
        props["owner"] = "bo"  # type: ignore[index]
    with pytest.raises(TypeError):
        del props["owner"]  # type: ignore[attr-defined]
    assert not hasattr(props, "update") and not hasattr(props, "pop")
    assert dict(lamina.open_table(t.uri).properties) == {"owner": "ana"}


# -- refused, with nothing committed --------------------------------------------------------------

REFUSED = [
    # what the format fixes at creation
    ({"set": {P.VERSION_SLOT_CHUNK_SIZE.key: "10"}}, PropertyCannotChange, "version.slot-chunk-size cannot change.*record covers"),
    ({"set": {P.MANIFEST_ROOT_FORMAT.key: "parquet"}}, PropertyCannotChange, "manifest.root-format cannot change.*features"),
    ({"set": {P.MANIFEST_LEAF_FORMAT.key: "parquet"}}, PropertyCannotChange, "manifest.leaf-format cannot change.*features"),
    ({"set": {P.ROW_LINEAGE_ENABLED.key: "false"}}, PropertyCannotChange, "row-lineage.enabled cannot change.*enable_row_lineage"),
    ({"set": {P.EXPIRE_SLOT_RETENTION_MS.key: "1000"}}, PropertyCannotChange, "can only be raised.*commit guarantee"),
    ({"remove": [P.EXPIRE_SLOT_RETENTION_MS.key]}, PropertyCannotChange, "can only be raised"),  # back to 1 day from 2
    # what create_table refuses
    ({"set": {"write.parquet.compresion": "zstd"}}, InvalidArgument, "did you mean 'write.parquet.compression'"),
    ({"set": {P.WRITE_PARQUET_COMPRESSION.key: "lzma"}}, InvalidArgument, "write.parquet.compression='lzma'"),
    ({"set": {P.WRITE_MAX_ROWS_PER_FILE.key: "0"}}, InvalidArgument, "an integer >= 1"),
    ({"set": {"write.metadata.metrics.column.nope": "full"}}, InvalidArgument, "names no top-level column"),
    # what an update alone can get wrong
    ({"set": {"owner": "x"}, "remove": ["owner"]}, InvalidArgument, "both set and removed"),
    ({"remove": ["write.parquet.codec"]}, InvalidArgument, "'write.parquet.codec' is no Lamina table property"),
    ({"set": {"owner": None}}, InvalidArgument, "set to None"),
    ({}, InvalidArgument, "names no property"),
    ({"set": ["owner", "x"]}, InvalidArgument, "takes a mapping"),
    ({"set": {P.WRITE_SORT_ORDER.key: "nope"}}, SchemaMismatch, "no column 'nope'"),
]


@pytest.mark.parametrize("kwargs, error, message", REFUSED)
def test_refused_updates_say_why_and_commit_nothing(tmp_path, kwargs, error, message):
    props = {"owner": "ana", P.EXPIRE_SLOT_RETENTION_MS.key: str(2 * 86_400_000)}
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=props)
    with pytest.raises(error, match=message):
        t.update_properties(**kwargs)
    with pytest.raises(error, match=message):
        with t.transaction() as tx:
            tx.update_properties(**kwargs)
    unchanged(t, 0, props)


def test_fixed_properties_may_be_given_the_meaning_they_have(tmp_path):
    """Only a change of meaning is refused: setting the value a fixed property has already (or
    its default, when unset) is no change."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={P.VERSION_SLOT_CHUNK_SIZE.key: "500"})
    assert t.update_properties(set={P.VERSION_SLOT_CHUNK_SIZE.key: "500"}).version is None
    v = t.update_properties(set={P.MANIFEST_ROOT_FORMAT.key: "INLINE", P.EXPIRE_SLOT_RETENTION_MS.key: str(3 * 86_400_000)}).version
    assert v == 1 and lamina.open_table(t.uri).properties[P.EXPIRE_SLOT_RETENTION_MS.key] == str(3 * 86_400_000)
    with pytest.raises(PropertyCannotChange):
        t.update_properties(remove=[P.VERSION_SLOT_CHUNK_SIZE.key])  # back to 1000


def test_write_sort_order_is_refused_where_update_sort_order_set_the_order(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.update_properties(set={P.WRITE_SORT_ORDER.key: "score"})  # no sort order yet: the property is it
    t.append(rows([3, 1, 2]))
    (path,) = t.inspect.files().column("path").to_pylist()
    assert pq.read_table(os.path.join(t.uri, path)).column("score").to_pylist() == [0.5, 1.0, 1.5]
    t.update_sort_order().asc("id").commit()  # supersedes (and drops) the property
    with pytest.raises(InvalidArgument, match="update_sort_order"):
        t.update_properties(set={P.WRITE_SORT_ORDER.key: "grp"})
    unchanged(t, 3, {})


def test_a_writer_without_a_feature_the_table_needs_changes_no_property(tmp_path, monkeypatch):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    monkeypatch.setattr(features, "KNOWN_WRITER_FEATURES", features.KNOWN_WRITER_FEATURES - {ROW_LINEAGE})
    with pytest.raises(UnsupportedFeature, match=ROW_LINEAGE):
        t.update_properties(set={"owner": "x"})
    monkeypatch.undo()
    unchanged(t, 0, {})


# -- concurrency: both land; where both set one key, the later commit wins ----------------------


def test_two_stale_updates_of_different_keys_both_land(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"keep": "1"})
    a, b = lamina.open_table(t.uri), lamina.open_table(t.uri)
    assert a.update_properties(set={"x": "a"}).version == 1
    b.append(rows(range(3)))  # b is stale: its append rebases onto version 1
    assert b.update_properties(set={"y": "b"}, remove=["keep"]).version == 3
    assert dict(lamina.open_table(t.uri).properties) == {"x": "a", "y": "b"}
    assert sorted(lamina.open_table(t.uri).to_arrow().column("id").to_pylist()) == [0, 1, 2]


def test_where_both_set_one_key_the_later_commit_wins(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    a, b = lamina.open_table(t.uri), lamina.open_table(t.uri)
    a.update_properties(set={P.WRITE_PARQUET_COMPRESSION.key: "zstd", "by": "a"})
    b.update_properties(set={P.WRITE_PARQUET_COMPRESSION.key: "gzip"})  # applied on version 1
    latest = lamina.open_table(t.uri)
    assert dict(latest.properties) == {P.WRITE_PARQUET_COMPRESSION.key: "gzip", "by": "a"}
    assert [h["operation"] for h in latest.history()] == ["update-properties", "update-properties", "create"]


def test_a_stale_update_is_checked_again_on_the_newer_base(tmp_path):
    """A concurrent change that makes the update wrong fails its commit, nothing committed:
    a column its statistics mode names was dropped; the retention it lowers to was raised."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    stale = lamina.open_table(t.uri)
    t.update_schema().drop_column("score").commit()
    with pytest.raises(CommitConflict, match="concurrent change.*score"):
        stale.update_properties(set={"write.metadata.metrics.column.score": "full"})
    retention = P.EXPIRE_SLOT_RETENTION_MS.key
    stale = lamina.open_table(t.uri)
    t.update_properties(set={retention: str(4 * 86_400_000)})
    with pytest.raises(CommitConflict, match="can only be raised"):
        stale.update_properties(set={retention: str(2 * 86_400_000)})  # a raise at its base, a lowering now
    unchanged(t, 2, {retention: str(4 * 86_400_000)})


def test_racing_threads_each_setting_their_own_key_all_land(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    n = 6
    handles = [lamina.open_table(t.uri) for _ in range(n)]
    start = threading.Barrier(n)
    versions: dict[int, int | None] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait(timeout=30)
            versions[i] = handles[i].update_properties(set={f"k{i}": str(i), "last": str(i)}).version
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors and sorted(versions.values()) == list(range(1, n + 1))
    latest = lamina.open_table(t.uri)
    last_writer = next(i for i, v in versions.items() if v == n)
    assert dict(latest.properties) == {**{f"k{i}": str(i) for i in range(n)}, "last": str(last_writer)}


# -- against a model: any sequence of updates from two handles, one of them stale ----------------

KEYS = ["a", "b", "c", P.WRITE_PARQUET_COMPRESSION.key, P.WRITE_MAX_ROWS_PER_FILE.key]
VALUES = {"a": st.sampled_from(["1", "2"]), "b": st.sampled_from(["x", "y"]), "c": st.just("z"),
          P.WRITE_PARQUET_COMPRESSION.key: st.sampled_from(["zstd", "snappy", "gzip"]),
          P.WRITE_MAX_ROWS_PER_FILE.key: st.sampled_from(["5", "1000"])}


@st.composite
def update(draw):
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    removed = draw(st.lists(st.sampled_from(keys), max_size=2, unique=True))
    who, writer = draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1]))
    return who, {k: draw(VALUES[k]) for k in keys if k not in removed}, removed, writer


@settings(max_examples=25, deadline=None)
@given(st.lists(update(), min_size=1, max_size=6))
def test_updates_from_two_handles_match_a_model_applied_in_commit_order(tmp_path_factory, updates):
    """Each update is re-applied to the latest version (the model: applied in commit order);
    a handle writes with the properties of the version it holds, which each of its commits
    moves to the latest."""
    t = lamina.create_table(str(tmp_path_factory.mktemp("t") / "t"), SCHEMA)
    handles = [lamina.open_table(t.uri), lamina.open_table(t.uri)]  # never refreshed: each goes stale
    model: dict[str, str] = {}
    seen: list[dict[str, str]] = [{}, {}]  # the properties of the version each handle holds
    version = 0
    for who, sets, removes, writer in updates:
        expected = {**{k: v for k, v in model.items() if k not in removes}, **sets}
        v = handles[who].update_properties(set=sets, remove=removes).version
        if expected == model:
            assert v is None
        else:
            version += 1
            assert v == version
            assert dict(lamina.open_table(t.uri, version=v).properties) == expected
        model = seen[who] = expected
        assert dict(handles[who].properties) == model
        handles[writer].append(rows([version]))  # writes go on between the updates, from either handle
        version += 1
        files = t.inspect.files(version=version)
        (newest,) = files.filter(pc.equal(files.column("added_version"), version)).column("path").to_pylist()
        codec = pq.read_metadata(os.path.join(t.uri, newest)).row_group(0).column(0).compression
        assert codec == seen[writer].get(P.WRITE_PARQUET_COMPRESSION.key, "snappy").upper()
        seen[writer] = model
    assert dict(lamina.open_table(t.uri).properties) == model


# -- the commit guarantee, for an update that raises the slot retention ---------------------------


def test_a_delayed_update_raising_the_slot_retention_is_confirmed_by_the_retention_it_was_made_on(tmp_path, monkeypatch):
    """A writer skips looking up its slot's record only while the retention it commits on
    rules a free out. An update raising the retention is made on a base whose (lower)
    retention is what an expiry freeing its slot meanwhile went by: its delayed put, landing
    in that freed slot, must be found out and rebased, not acknowledged and lost."""
    retention = P.EXPIRE_SLOT_RETENTION_MS.key
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={retention: "0", P.VERSION_SLOT_CHUNK_SIZE.key: "1"})
    t.append(rows([0]))
    other = lamina.open_table(t.uri)
    meanwhile = []

    def hook(step: str) -> None:
        if step == "before-publish" and not meanwhile:  # the put is delayed: others commit and expire
            meanwhile.append(None)  # (their own commits pass through here too)
            meanwhile.append(other.append(rows([1])).version)
            meanwhile.append(other.append(rows([2])).version)
            other.maintenance.expire_versions(older_than=timedelta(0), retain_last=1, reader_grace=timedelta(0))
            assert not lamina.open_table(t.uri).log.is_live(2)  # the slot the put goes to was freed

    monkeypatch.setattr(committer, "_step_hook", hook)
    v = t.update_properties(set={retention: str(86_400_000)}).version
    monkeypatch.setattr(committer, "_step_hook", None)
    assert meanwhile == [None, 2, 3] and v == 4
    latest = lamina.open_table(t.uri)
    assert latest.version == 4 and latest.properties[retention] == str(86_400_000)
    assert sorted(latest.to_arrow().column("id").to_pylist()) == [0, 1, 2]
