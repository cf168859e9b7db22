"""The SQL commit coordinator on real SQLite and a real PostgreSQL server.

Racing writers in separate processes, a writer SIGKILLed between the row's
compare-and-swap and the publish of its version file, lost answers after the
swap, exhausted retries, and the online flag checked inside the swap.
"""

from __future__ import annotations

import collections
import os
import signal

import pyarrow as pa
import pytest

import lamina
from lamina.spec.layout import PENDING_DIR
from lamina.catalog.sql import SqlCatalog
from lamina.commit import CommitOptions, flush_hints
from lamina.errors import CatalogManaged, CommitRetriesExhausted, StorageError, TableOffline
from lamina.maintenance import fsck
from lamina.table.table import Table

from support import workers

procs = pytest.mark.xdist_group("procs")

WRITERS = 8
APPENDS = 50
ROWS = 3


def _rows(t: pa.Table) -> collections.Counter:
    d = t.select(["writer", "seq", "i"]).to_pydict()
    return collections.Counter(zip(d["writer"], d["seq"], d["i"]))


def _new_table(open_catalog, uri: str):
    cat = open_catalog(uri)
    cat.create_namespace("ns")
    return cat, cat.create_table("ns.t", workers.schema())


@procs
def test_racing_writers_lose_and_duplicate_nothing(catalog_uri, tmp_path, open_catalog):
    cat, t = _new_table(open_catalog, catalog_uri)
    specs = [
        {"mode": "race_append", "catalog": catalog_uri, "identifier": "ns.t", "writer": w, "n": APPENDS, "rows": ROWS}
        for w in range(WRITERS)
    ]
    results = workers.spawn_workers(specs, str(tmp_path), timeout=240)

    version_of = {}
    for w, r in enumerate(results):
        assert [s for s, _ in r["acked"]] == list(range(APPENDS)), f"writer {w} did not ack every append"
        vs = [v for _, v in r["acked"]]
        assert vs == sorted(vs)
        version_of.update({(w, s): v for s, v in r["acked"]})
    final = WRITERS * APPENDS
    assert sorted(version_of.values()) == list(range(1, final + 1)), "a version was lost or claimed twice"

    info = cat.table_info("ns.t")
    assert info.version == final
    for t2 in (cat.load_table("ns.t"), lamina.open_table(info.location, table_uuid=info.uuid)):
        assert t2.version == final
        rows = _rows(t2.scan().to_arrow())
        expected = collections.Counter((w, s, i) for (w, s) in version_of for i in range(ROWS))
        assert rows == expected, f"lost {list((expected - rows).items())[:5]} extra {list((rows - expected).items())[:5]}"
    assert t2.log.list_versions() == list(range(final + 1))
    ids = {t2.log.load(v).commit_id for v in range(final + 1)}
    assert len(ids) == final + 1
    for v in (1, final // 2, final):
        vm = t2.log.load(v)
        assert vm.parent_version == v - 1 and vm.summary["total-records"] == v * ROWS
    report = fsck(t2)
    assert report.ok and not report.missing, (report.missing, report.errors)
    # Losers leave manifests only; their staged version manifests were cleaned up.
    assert all(p.startswith("_lamina/manifests/") for p in report.unreferenced), report.unreferenced
    assert not os.listdir(os.path.join(info.location, PENDING_DIR))


CRASH_POINTS = [("before-publish", False), ("swapped", True), ("published", True)]


@procs
@pytest.mark.parametrize("at,committed", CRASH_POINTS, ids=[c for c, _ in CRASH_POINTS])
def test_sigkill_between_swap_and_publish(catalog_uri, tmp_path, at, committed, open_catalog):
    cat, t = _new_table(open_catalog, catalog_uri)
    t.append(workers.batch(0, 0, ROWS))
    t.append(workers.batch(0, 1, ROWS))
    flush_hints()
    stale_writer = cat.load_table("ns.t")  # loaded before the crash: its base is version 2
    loc = t.uri
    proc = workers.run_crash_worker(
        {"catalog": catalog_uri, "identifier": "ns.t", "uri": loc, "at": at, "marker": str(tmp_path / "m"),
         "writer": 1, "seq": 0, "rows": ROWS}
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    latest = 3 if committed else 2
    assert open_catalog(catalog_uri).table_info("ns.t").version == latest
    if at == "swapped":
        # The swap is the commit point, but the version file is not published yet: a path
        # reader still sees version 2 (stale, never torn or uncommitted) ...
        assert lamina.open_table(loc).version == 2
        assert os.listdir(os.path.join(loc, PENDING_DIR))
    # ... until the next writer completes the publish while losing its swap, and rebases.
    assert stale_writer.append(workers.batch(2, 0, ROWS)).version == latest + 1
    for allow_list in (True, False):
        assert lamina.open_table(loc, allow_list=allow_list).version == latest + 1
    want = collections.Counter((0, s, i) for s in range(2) for i in range(ROWS))
    if committed:
        want.update((1, 0, i) for i in range(ROWS))
    want.update((2, 0, i) for i in range(ROWS))
    assert _rows(lamina.open_table(loc).scan().to_arrow()) == want
    if committed:
        assert _rows(lamina.open_table(loc, version=3).scan().to_arrow())[(1, 0, 0)] == 1
    report = fsck(lamina.open_table(loc))
    assert report.ok and not report.missing


@procs
@pytest.mark.parametrize("via", ["load", "refresh"])
def test_next_reader_completes_a_crashed_publish(catalog_uri, tmp_path, via, open_catalog):
    cat, t = _new_table(open_catalog, catalog_uri)
    t.append(workers.batch(0, 0, ROWS))
    proc = workers.run_crash_worker(
        {"catalog": catalog_uri, "identifier": "ns.t", "uri": t.uri, "at": "swapped", "marker": str(tmp_path / "m"),
         "writer": 1, "seq": 0, "rows": ROWS}
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert lamina.open_table(t.uri).version == 1
    t2 = open_catalog(catalog_uri).load_table("ns.t") if via == "load" else t.refresh()
    assert t2.version == 2
    # Published under its final name: path readers see it now too.
    assert lamina.open_table(t.uri, allow_list=False).version == 2
    assert t2.scan().to_arrow().num_rows == 2 * ROWS
    assert not os.listdir(os.path.join(t.uri, PENDING_DIR))


class _LostAnswer(SqlCatalog):
    """The swap is applied in the database, then the answer is lost (as a dropped connection)."""

    lose = 1

    def _swap(self, *args, **kwargs):  # type: ignore[override]
        row = super()._swap(*args, **kwargs)
        if self.lose:
            self.lose -= 1
            raise StorageError("connection lost after sending the UPDATE")
        return row


def test_lost_answer_after_swap_commits_exactly_once(catalog_uri, open_catalog):
    cat, t = _new_table(open_catalog, catalog_uri)
    cat.__class__ = _LostAnswer
    assert t.append(workers.batch(0, 0, ROWS)).version == 1  # resolved by commit id, not re-applied
    assert cat.lose == 0
    t2 = open_catalog(catalog_uri).load_table("ns.t")
    assert t2.version == 1 and t2.scan().to_arrow().num_rows == ROWS
    assert lamina.open_table(t.uri).version == 1


def test_retries_exhausted_raise_and_commit_nothing(catalog_uri, open_catalog):
    cat, t = _new_table(open_catalog, catalog_uri)
    other = cat.load_table("ns.t")
    other.append(workers.batch(1, 0, ROWS))
    with pytest.raises(CommitRetriesExhausted):
        t.append(workers.batch(0, 0, ROWS), commit_options=CommitOptions(max_attempts=1))
    assert cat.table_info("ns.t").version == 1
    assert _rows(cat.load_table("ns.t").scan().to_arrow()) == collections.Counter((1, 0, i) for i in range(ROWS))
    assert not os.listdir(os.path.join(t.uri, PENDING_DIR))
    # Bounded by time too: a zero time budget gives up after the first lost race.
    with pytest.raises(CommitRetriesExhausted):
        t.append(workers.batch(0, 1, ROWS), commit_options=CommitOptions(max_seconds=0.0))


def test_offline_checked_in_the_swap(catalog_uri, open_catalog):
    """A table taken offline after a writer's own check still refuses that commit at the swap."""
    cat, t = _new_table(open_catalog, catalog_uri)
    t.append(workers.batch(0, 0, ROWS))
    open_catalog(catalog_uri).set_online("ns.t", False)
    with pytest.raises(TableOffline):
        Table.append(t, workers.batch(0, 1, ROWS))  # the unguarded method: only the swap can refuse
    assert cat.table_info("ns.t").version == 1
    assert lamina.open_table(t.uri).version == 1
    assert not os.listdir(os.path.join(t.uri, PENDING_DIR))
    assert t.scan().to_arrow().num_rows == ROWS  # still readable


def test_path_writer_refused_nothing_committed(catalog_uri, open_catalog):
    cat, t = _new_table(open_catalog, catalog_uri)
    t.append(workers.batch(0, 0, ROWS))
    p = lamina.open_table(t.uri)
    with pytest.raises(CatalogManaged, match="load_catalog"):
        p.append(workers.batch(9, 0, ROWS))
    assert cat.table_info("ns.t").version == 1
    assert lamina.open_table(t.uri).version == 1
    assert t.append(workers.batch(0, 1, ROWS)).version == 2


def test_postgres_connection_killed_mid_session(pg_uri, open_catalog):
    """A real dropped connection (the server ends the session): the next call reconnects and the
    commit lands exactly once."""
    import psycopg

    cat, t = _new_table(open_catalog, pg_uri)
    t.append(workers.batch(0, 0, ROWS))
    admin_uri = pg_uri.split("?")[0]
    for expected in (2, 3):
        pid = cat._db._conn.info.backend_pid
        with psycopg.connect(admin_uri, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert t.append(workers.batch(0, expected - 1, ROWS)).version == expected
    assert cat.table_info("ns.t").version == 3
    assert lamina.open_table(t.uri).scan().to_arrow().num_rows == 3 * ROWS
