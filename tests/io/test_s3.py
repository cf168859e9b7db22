"""Lamina on S3: round trip, put-if-absent, hints, racing writers, row-level changes and maintenance.

A moto server on localhost by default; LAMINA_S3_BACKEND=radosgw runs the same
tests against a real Ceph radosgw (opt-in; see tests/support/s3server.py)."""

from __future__ import annotations

import collections
import json
import uuid

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.commit.log import HINT_EVERY
from lamina.errors import AlreadyExists, NotFound, TableAlreadyExists, VersionNotFound
from lamina.io import FileIO
from lamina.maintenance import fsck
from lamina.spec.layout import HINT_PATH, version_path

from support import BUCKET, workers
from support.s3proxy import S3Proxy

pytestmark = pytest.mark.xdist_group("s3")

ROWS = 5


def test_s3_fileio_constructs():
    """Opening an s3:// location builds its store (no request is made)."""
    io = FileIO(f"s3://{BUCKET}/x", {"endpoint": "http://127.0.0.1:9", "access_key_id": "k",
                                     "secret_access_key": "s", "region": "us-east-1"})
    assert io.lists_in_order


@pytest.fixture
def opts(s3):
    return s3.storage_options


@pytest.fixture
def uri():
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


def _rows(t: pa.Table) -> collections.Counter:
    d = t.select(["writer", "seq", "i"]).to_pydict()
    return collections.Counter(zip(d["writer"], d["seq"], d["i"]))


def _batch_rows(writer: int, seq: int) -> collections.Counter:
    return collections.Counter((writer, seq, i) for i in range(ROWS))


def _three_versions(uri: str, opts: dict) -> lamina.Table:
    t = lamina.create_table(uri, workers.schema(), storage_options=opts)
    for seq in range(3):
        assert t.append(workers.batch(0, seq, ROWS)).version == seq + 1
    flush_hints()  # hints are written in the background
    return t


def test_round_trip(s3, opts):
    uri = f"s3://{BUCKET}/t1"
    t = lamina.create_table(uri, workers.schema(), storage_options=opts)
    assert t.version == 0
    stamps = {0: t.metadata.timestamp_ms}
    for seq in range(3):
        assert t.append(workers.batch(0, seq, ROWS)).version == seq + 1
        stamps[t.version] = t.metadata.timestamp_ms

    t = lamina.open_table(uri, storage_options=opts)
    assert t.version == 3
    assert _rows(t.scan().to_arrow()) == sum((_batch_rows(0, s) for s in range(3)), collections.Counter())
    assert t.scan(where="seq = 1", columns=["seq", "i"]).to_arrow().num_rows == ROWS
    for v in range(4):
        want = sum((_batch_rows(0, s) for s in range(v)), collections.Counter())
        assert _rows(t.scan(version=v).to_arrow()) == want
        assert _rows(lamina.open_table(uri, version=v, storage_options=opts).scan().to_arrow()) == want
        assert lamina.open_table(uri, timestamp=stamps[v], storage_options=opts).version == v
    assert [h["version"] for h in t.history()] == [3, 2, 1, 0]
    assert t.log.list_versions() == [0, 1, 2, 3]

    # Objects really are in the bucket, under the table prefix.
    keys = {o["Key"] for o in s3.client().list_objects_v2(Bucket=BUCKET, Prefix="t1/")["Contents"]}
    assert f"t1/{version_path(3)}" in keys and f"t1/{HINT_PATH}" in keys
    assert sum(k.startswith("t1/data/") for k in keys) == 3

    report = fsck(t)
    assert report.ok and not report.missing and not report.unreferenced, report

    with pytest.raises(TableAlreadyExists):
        lamina.create_table(uri, workers.schema(), storage_options=opts)


def test_put_if_absent_refuses_existing_key(s3, opts, uri):
    io = FileIO(uri, opts)
    io.put_if_absent("slot.json", b"first")
    with pytest.raises(AlreadyExists):
        io.put_if_absent("slot.json", b"second")
    assert io.get("slot.json") == b"first"
    body = s3.client().get_object(Bucket=BUCKET, Key=f"{uri.split('/', 3)[3]}/slot.json")["Body"].read()
    assert body == b"first"
    # A version slot taken by one commit is refused to the next.
    t = lamina.create_table(uri + "/tbl", workers.schema(), storage_options=opts)
    with pytest.raises(AlreadyExists):
        t.io.put_if_absent(version_path(0), b"{}")
    assert lamina.open_table(uri + "/tbl", storage_options=opts).uuid == t.uuid
    with pytest.raises(NotFound):
        io.get("missing.json")


def test_open_with_stale_hint(opts, uri):
    t = _three_versions(uri, opts)
    stale = json.loads(t.io.get(HINT_PATH))
    assert stale["version"] == 0  # on S3 a commit rewrites the hint every HINT_EVERY-th version
    stale["version"] = stale["ordinal"] = 1
    stale["manifest_path"] = version_path(1)
    t.io.put(HINT_PATH, json.dumps(stale).encode())
    for allow_list in (True, False):
        t2 = lamina.open_table(uri, storage_options=opts, allow_list=allow_list)
        assert t2.version == 3, f"allow_list={allow_list}"
        assert t2.scan().to_arrow().num_rows == 3 * ROWS
    assert lamina.open_table(uri, storage_options=opts).append(workers.batch(1, 0, ROWS)).version == 4


def test_open_with_hint_deleted(opts, uri):
    t = _three_versions(uri, opts)
    t.io.delete(HINT_PATH)
    assert not t.io.exists(HINT_PATH)
    for allow_list in (True, False):
        t2 = lamina.open_table(uri, storage_options=opts, allow_list=allow_list)
        assert t2.version == 3, f"allow_list={allow_list}"
        assert t2.scan().to_arrow().num_rows == 3 * ROWS
    t3 = lamina.open_table(uri, storage_options=opts)
    for seq in range(HINT_EVERY - 3):
        assert t3.append(workers.batch(1, seq, ROWS)).version == 4 + seq
    flush_hints()
    assert json.loads(t.io.get(HINT_PATH))["version"] == HINT_EVERY  # written again at the next multiple


@pytest.fixture
def proxy(s3):
    p = S3Proxy(s3.endpoint)
    yield p
    p.stop()


def _kinds(log: list) -> collections.Counter:
    """Requests by S3 call: a GET with ``list-type`` is a LIST."""
    return collections.Counter("LIST" if m == "GET" and "list-type=" in p else m for m, p, _ in log)


def test_open_latest_is_two_requests_whatever_the_number_of_versions(opts, uri, proxy):
    """A LIST of the version slots (newest first) and a GET of the newest: no hint read, no
    probe, at 2 versions as at 25."""
    t = lamina.create_table(uri, workers.schema(), storage_options=opts)
    via = proxy.storage_options(opts)
    for n in (2, 25):
        while t.version < n:
            t.append(workers.batch(0, t.version, ROWS))
        flush_hints()
        proxy.log.clear()
        opened = lamina.open_table(uri, storage_options=via)
        assert opened.version == n
        assert _kinds(proxy.log) == {"LIST": 1, "GET": 1}, proxy.log


@pytest.mark.parametrize("root_format, puts", [("inline", 2), ("arrow", 3)])
@pytest.mark.parametrize("retention_ms", [None, 0])
def test_an_append_on_s3_costs_two_or_three_puts_and_the_hint_every_tenth(opts, uri, proxy, retention_ms, root_format, puts):
    """Data file and version PUTs, the version manifest carrying the root manifest (a table
    with roots as files: a third PUT, the root's). The base's root is this process's own last
    write: not read again. The hint PUT only at every HINT_EVERY-th version. The slot records
    of the new version's chunk are looked up (one LIST) only when the slot retention is too
    short to rule its freeing out (0: freed at once)."""
    props = {"manifest.root-format": root_format}
    if retention_ms is not None:
        props["expire.slot-retention-ms"] = str(retention_ms)
    lamina.create_table(uri, workers.schema(), storage_options=opts, properties=props)
    t = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    per_version = {}
    for seq in range(HINT_EVERY + 1):
        proxy.log.clear()
        v = t.append(workers.batch(0, seq, ROWS)).version
        flush_hints()
        per_version[v] = _kinds(proxy.log)
    freed_checks = 0 if retention_ms is None else 1
    for v, kinds in per_version.items():
        want = {"PUT": puts + 1 if v % HINT_EVERY == 0 else puts, **({"LIST": freed_checks} if freed_checks else {})}
        assert kinds == want, (v, kinds)
    assert lamina.open_table(uri, storage_options=opts).scan().to_arrow().num_rows == (HINT_EVERY + 1) * ROWS


def test_a_tag_of_the_newest_version_on_s3_is_three_requests(opts, uri, proxy):
    """A fresh handle's version is the newest if the slot above it is empty (one HEAD), so the
    default tag (the latest) costs that HEAD, the tag's PUT, and one HEAD showing no version
    came after it (so no expiry removed it and no branch took the name); the handle's version
    given explicitly (what Lance's ``tags.create(name, ds.version)`` does) saves the first
    HEAD. A stale handle reads the latest (LIST + GET); with a version after the tagged one,
    the full checks (the branch's HEAD, the version's GET and the LIST of its chunk's slot
    records: an expired version's file stays in its slot a while) run."""
    t = lamina.create_table(uri, workers.schema(), storage_options=opts)
    t.append(workers.batch(0, 0, ROWS))
    flush_hints()
    h = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    proxy.log.clear()
    assert h.tags.create("fast").tagged_version == 1
    assert _kinds(proxy.log) == {"PUT": 1, "HEAD": 2}, proxy.log
    proxy.log.clear()
    assert h.tags.create("given", h.version).tagged_version == 1
    assert _kinds(proxy.log) == {"PUT": 1, "HEAD": 1}, proxy.log
    read = h.log.latest()
    t.append(workers.batch(0, 1, ROWS))
    flush_hints()
    proxy.log.clear()
    h.tag_store.create("slow", read, latest=read)
    assert _kinds(proxy.log) == {"PUT": 1, "HEAD": 2, "GET": 1, "LIST": 1}, proxy.log
    proxy.log.clear()
    assert h.tags.create("stale").tagged_version == 2  # the table's latest, not the handle's 1
    assert _kinds(proxy.log) == {"HEAD": 2, "LIST": 1, "GET": 1, "PUT": 1}, proxy.log
    assert {x.name: x.tagged_version for x in t.tags.list()} == {"fast": 1, "given": 1, "stale": 2, "slow": 1}


def test_parallel_appends_on_s3(tmp_path, opts, uri):
    writers, appends = 4, 10
    lamina.create_table(uri, workers.schema(), storage_options=opts)
    specs = [
        {"mode": "race_append", "uri": uri, "writer": w, "n": appends, "rows": ROWS, "storage_options": opts}
        for w in range(writers)
    ]
    results = workers.spawn_workers(specs, str(tmp_path))
    version_of = {(w, seq): v for w, r in enumerate(results) for seq, v in r["acked"]}
    assert len(version_of) == writers * appends
    versions = list(version_of.values())
    assert len(set(versions)) == len(versions), "a version was claimed by two appends"
    assert set(versions) == set(range(1, writers * appends + 1))

    t = lamina.open_table(uri, storage_options=opts)
    final = writers * appends
    assert t.version == final
    assert t.log.list_versions() == list(range(final + 1))
    rows = _rows(t.scan().to_arrow())
    expected = collections.Counter((w, s, i) for (w, s) in version_of for i in range(ROWS))
    assert rows == expected, f"lost: {list((expected - rows).items())[:10]} extra: {list((rows - expected).items())[:10]}"
    append_at = {v: key for key, v in version_of.items()}
    for v in (1, final // 2, final):
        want = collections.Counter((*append_at[u], i) for u in range(1, v + 1) for i in range(ROWS))
        assert _rows(t.scan(version=v).to_arrow()) == want
        assert t.log.load(v).summary["total-records"] == v * ROWS
    assert len({t.log.load(v).commit_id for v in range(final + 1)}) == final + 1
    report = fsck(t)
    assert report.ok and not report.missing, report


def test_row_level_compaction_and_expiry_on_s3(opts, uri):
    t = lamina.create_table(uri, workers.schema(), storage_options=opts, properties={"version.slot-chunk-size": 2, "expire.slot-retention-ms": 0})
    for seq in range(6):
        t.append(workers.batch(1, seq, ROWS))
    t.delete("seq = 2 OR (seq = 3 AND i < 2)")  # a whole file goes, another gets a DV
    t.tags.create("before-compaction")
    r = t.maintenance.compact(target_file_size=1 << 20)
    assert r.input_files == 5 and r.output_files == 1
    want = collections.Counter((1, s, i) for s in range(6) for i in range(ROWS) if s != 2 and not (s == 3 and i < 2))
    assert _rows(t.to_arrow()) == want and _rows(t.scan(version="before-compaction").to_arrow()) == want
    from datetime import timedelta

    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    assert rep.expired_versions and rep.kept_for_tags >= 1
    assert _rows(lamina.open_table(uri, storage_options=opts).to_arrow()) == want
    assert _rows(t.scan(version="before-compaction").to_arrow()) == want
    assert fsck(t).ok


def _lineage_history(t: lamina.Table) -> None:
    """Appends, an update with DVs, a copy-on-write merge (update, insert, delete), a delete,
    compaction, an added column and a rollback: every kind of change row."""
    for seq in range(3):
        t.append(workers.batch(1, seq, ROWS))
    t.update(where="seq = 0 AND i = 1", set={"k": "100"}, mode="merge-on-read")
    source = pa.table({"writer": pa.array([1, 1, 2], pa.int32()), "seq": pa.array([1, 2, 9], pa.int32()),
                       "i": pa.array([0, 3, 0], pa.int32()), "k": pa.array([-1, 200, 300], pa.int64()),
                       "op": ["D", "U", "U"]})
    t.merge(source, on=["writer", "seq", "i"], mode="copy-on-write").when_matched_delete(condition="source.op = 'D'") \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    t.delete("seq = 2 AND i = 4")
    t.maintenance.compact()
    t.update_schema().add_column("note", pa.string()).commit()
    t.update(where="k = 300", set={"note": "'late'"})
    t.rollback(t.version - 3)


def test_change_feed_on_s3_is_the_local_one(tmp_path, opts, uri):
    """The same history on S3 and on local disk: the same row ids and the same changes."""
    tables = [lamina.create_table(str(tmp_path / "t"), workers.schema()),
              lamina.create_table(uri, workers.schema(), storage_options=opts)]
    for t in tables:
        _lineage_history(t)
    cols = ["writer", "seq", "i", "k", "note", "_row_id", "_last_updated_version"]
    local, remote = ([tuple(r.values()) for r in t.changes(0, columns=cols).to_arrow().drop_columns(["_commit_timestamp"]).to_pylist()]
                     for t in tables)
    assert sorted(local, key=repr) == sorted(remote, key=repr)
    assert {r[-2] for r in local} == {"insert", "delete", "update_preimage", "update_postimage"}
    for v in range(tables[0].version + 1):
        scans = [sorted(map(tuple, (r.values() for r in t.scan(version=v, columns=["writer", "seq", "i", "k", "_row_id"]).to_arrow().to_pylist())))
                 for t in tables]
        assert scans[0] == scans[1], f"version {v}"
    reopened = lamina.open_table(uri, storage_options=opts)
    assert reopened.changes(3, columns=cols).count() == tables[0].changes(3).count() > 0


def test_expiry_on_s3_writes_one_record_and_sizes_deletions_by_listing(s3, opts, uri, proxy):
    """Expiring 21 versions: one range record (no write per version), a few GETs (the versions
    the decisions need: not one per expired version), the freed bytes from listings of the
    deleted files' directories (no HEAD per file), and the report's bytes equal what the bucket
    lost (an oracle outside Lamina: the server's own listing)."""
    from datetime import timedelta

    t = lamina.create_table(uri, workers.schema(), storage_options=opts)
    for seq in range(20):
        t.append(workers.batch(0, seq, ROWS))
    t.maintenance.compact(min_file_size=1 << 30)  # the data files of versions 1..20 are garbage once they expire
    flush_hints()
    prefix = uri.split("/", 3)[3] + "/"

    def stored() -> dict[str, int]:
        pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}

    before = stored()
    proxy.log.clear()
    h = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    report = h.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    kinds = _kinds(proxy.log)
    assert len(report.expired_versions) == 21
    assert kinds["HEAD"] == 0, kinds
    assert kinds["PUT"] == 1, kinds  # one range record, nothing else written
    # the latest (open, then re-read), the boundary version, the first expired one and the
    # roots of the compaction (which removed files) and of its parent
    assert kinds["GET"] <= 8, (kinds, proxy.log)
    gone = {k: v for k, v in before.items() if k not in stored()}
    data_and_manifests = {k: v for k, v in gone.items() if "/_lamina/versions/" not in k}
    assert len(data_and_manifests) == len(report.deleted_files) + len(report.deleted_manifests)
    assert report.deleted_bytes == sum(data_and_manifests.values())
    assert lamina.open_table(uri, storage_options=opts).scan().to_arrow().num_rows == 20 * ROWS


def test_a_merge_on_s3_gets_each_file_it_reads_once(opts, uri, proxy):
    """A merge into a table with row lineage reads its candidate files' keys and learns from
    the same GET whether a file stores row ids (a file an update wrote does): no data file is
    got twice, and the updated rows keep their ids, stored or numbered."""
    t = lamina.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.string())]), storage_options=opts)
    for f in range(3):
        t.append(pa.table({"id": pa.array(range(f * 100, f * 100 + 100), pa.int64()), "v": ["a"] * 100}))
    t.update("id >= 150 AND id < 160", {"v": "'u'"})  # a file storing the ids of rows 150..159
    ids_before = dict(zip(*t.scan(columns=["id", "_row_id"]).to_arrow().to_pydict().values()))
    src = pa.table({"id": pa.array([10, 20, 150, 155, 1000], pa.int64()), "v": ["m"] * 5})
    t = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    proxy.log.clear()
    res = t.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert (res.rows_updated, res.rows_inserted) == (4, 1)
    data_gets = collections.Counter(p.split("?")[0] for m, p, _ in proxy.log if m == "GET" and "/data/" in p)
    assert data_gets and set(data_gets.values()) == {1}, data_gets
    after = dict(zip(*lamina.open_table(uri, storage_options=opts).scan(columns=["id", "_row_id", "v"])
                     .to_arrow().select(["id", "_row_id"]).to_pydict().values()))
    assert {k: after[k] for k in (10, 20, 150, 155)} == {k: ids_before[k] for k in (10, 20, 150, 155)}
    assert after[1000] not in ids_before.values()


def test_history_on_s3_lists_slot_records_once_per_chunk(opts, uri, proxy):
    """history() gets each version's slot and lists its chunk's slot records once, not once
    per version (a LIST costs about 12 GETs on S3): the same LISTs at 4 versions as at 16."""
    t = lamina.create_table(uri, workers.schema(), storage_options=opts)
    lists = {}
    for n in (4, 16):
        while t.version < n:
            t.append(workers.batch(0, t.version, ROWS))
        flush_hints()
        h = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
        proxy.log.clear()
        assert [r["version"] for r in h.history()] == list(range(n, -1, -1))
        kinds = _kinds(proxy.log)
        assert kinds["GET"] == n + 1, kinds  # each version's slot, once
        lists[n] = kinds["LIST"]
    assert lists[4] == lists[16] <= 3, lists


def test_a_change_feed_on_s3_gets_each_file_of_a_version_once(opts, uri, proxy):
    """A version's changes read its candidate files' row ids, then the columns of those
    holding a change: on S3 from one GET of each file, not one per pass."""
    t = lamina.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.string())]), storage_options=opts)
    for f in range(2):
        t.append(pa.table({"id": pa.array(range(f * 100, f * 100 + 100), pa.int64()), "v": ["a"] * 100}))
    t.update("id >= 150 AND id < 160", {"v": "'u'"})
    t.delete("id < 5")
    flush_hints()
    h = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    for start in (2, 3):  # the update's changes, then the delete's
        proxy.log.clear()
        rows = h.changes(start_version=start, end_version=start + 1).to_arrow()
        assert rows.num_rows == (20 if start == 2 else 5)
        data_gets = collections.Counter(p.split("?")[0] for m, p, _ in proxy.log if m == "GET" and "/data/" in p)
        assert data_gets and set(data_gets.values()) == {1}, data_gets
    assert h.io._kept is None  # nothing kept once the version's changes are read


def test_a_change_range_on_s3_lists_slot_records_once(opts, uri, proxy):
    """A change range given by version numbers gets its versions' slots and lists their chunk's
    slot records once for all of them, its ends included (a micro-batch of a change stream is
    such a range): one LIST whether the range holds one version or five, or runs to the latest."""
    t = lamina.create_table(uri, workers.schema(), storage_options=opts)
    while t.version < 7:
        t.append(workers.batch(0, t.version, ROWS))
    flush_hints()
    h = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    for start, end in ((5, 6), (1, 6), (1, None)):
        proxy.log.clear()
        feed = h.changes(start_version=start, end_version=end)
        assert (feed.start_version, feed.versions) == (start, list(range(start + 1, (end or 7) + 1)))
        kinds = _kinds(proxy.log)
        slot_gets = [p for m, p, _ in proxy.log if m == "GET" and "list-type=" not in p and "/versions/" in p]
        assert kinds["LIST"] == (1 if end is not None else 2), proxy.log  # (to the latest: the versions' LIST too)
        assert len(slot_gets) == len(set(slot_gets)) == (end or 7) - start + 1, proxy.log
    proxy.log.clear()
    with pytest.raises(VersionNotFound):  # an end past the latest: found missing first, not after a GET per version
        h.changes(start_version=1, end_version=1000)
    assert _kinds(proxy.log)["GET"] <= 3, proxy.log


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
@pytest.mark.parametrize("where", ["id IN (7, 107, 207)", "v = 'b'"])
@pytest.mark.parametrize("op", ["delete", "update"])
def test_a_row_level_change_on_s3_gets_each_file_once(opts, uri, proxy, mode, where, op):
    """A delete or an update reads the rows its predicate matches (on a string column: its
    dictionary codes first, then the selected rows of the files holding some); copy-on-write
    and an update then read the touched files again to rewrite them: on S3 from the same GET."""
    t = lamina.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.string())]), storage_options=opts)
    for f in range(3):
        t.append(pa.table({"id": pa.array(range(f * 100, f * 100 + 100), pa.int64()),
                           "v": ["b" if i % 100 == 7 else "a" for i in range(f * 100, f * 100 + 100)]}))
    h = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    proxy.log.clear()
    if op == "delete":
        h.delete(where, mode=mode)
    else:
        h.update(where, {"v": "'c'"}, mode=mode)
    data_gets = collections.Counter(p.split("?")[0] for m, p, _ in proxy.log if m == "GET" and "/data/" in p)
    assert len(data_gets) == 3 and set(data_gets.values()) == {1}, data_gets
    after = lamina.open_table(uri, storage_options=opts).scan().to_arrow()
    assert after.num_rows == (297 if op == "delete" else 300)
    assert sorted(after.filter(pa.compute.not_equal(after.column("v"), "a")).column("id").to_pylist()) == (
        [] if op == "delete" else [7, 107, 207])


@pytest.mark.parametrize("where, sort_by", [(None, None), ("k >= 0", "k")])
def test_a_compaction_on_s3_loads_the_table_once(opts, uri, proxy, where, sort_by):
    """A compaction binds its filter and sort order at the version its commit loads, the
    latest, and loads nothing before it: through a handle behind the latest (another writer
    appended since), the latest version is got once, and its files are what is compacted."""
    lamina.create_table(uri, workers.schema(), storage_options=opts)
    writer = lamina.open_table(uri, storage_options=opts)
    for seq in range(4):
        writer.append(workers.batch(0, seq, ROWS))
    t = lamina.open_table(uri, storage_options=proxy.storage_options(opts))
    latest = writer.append(workers.batch(1, 0, ROWS)).version  # t is now a version behind
    flush_hints()
    proxy.log.clear()
    r = t.maintenance.compact(target_file_size=1 << 20, where=where, sort_by=sort_by)
    gets = [p for m, p, _ in proxy.log if m == "GET" and p.split("?")[0].endswith(version_path(latest))]
    assert len(gets) == 1, proxy.log
    assert (r.version, r.files_before, r.input_files, r.output_files) == (latest + 1, 5, 5, 1)
    assert t.version == latest + 1 and t.scan().to_arrow().num_rows == 5 * ROWS
    if sort_by:
        ks = t.scan(columns=["k"]).to_arrow().column("k").to_pylist()
        assert ks == sorted(ks)
