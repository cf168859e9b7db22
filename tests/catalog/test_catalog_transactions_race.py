"""Catalog transactions under racing processes, crashes and dropped PostgreSQL sessions, on
real SQLite and a real PostgreSQL server.

The model (tests/support/workers.py): tables ``left`` and ``right`` hold the keys 0..KEYS-1
once between them, and each move of a key is one catalog transaction that reads where the key
is through the transaction, deletes it from that table, appends it to the other and appends a
row to ``ledger``. So in every catalog state a key is in ``right`` iff the ledger holds an odd
number of moves of it, and every ledger row's transaction is in ``lamina_transactions``. Half
of the movers run serializable transactions (a concurrent move of the key changes the rows
their read saw), half snapshot ones (a concurrent move deletes the row their delete matches):
either way the second move of a key fails instead of landing it twice.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import time
from datetime import timedelta

import pytest

import lamina
import lamina.commit.committer as committer
from lamina.errors import CatalogTableNotFound, LaminaError
from lamina.maintenance import fsck

from support import workers

procs = pytest.mark.xdist_group("procs")

TABLES = ("ns.left", "ns.right", "ns.ledger")
LEFT, RIGHT, LEDGER = TABLES
KEYS = 8
MOVERS, MOVES, ATTEMPTS = 4, 5, 30  # per move: fresh transactions after conflicts
READERS = 2
ISOLATION = ("serializable", "snapshot")  # of the even and the odd movers


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_uri(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/wh/catalog.db"
    return request.getfixturevalue("pg_uri")


def _new_catalog(open_catalog, uri: str):
    """The three tables, every key in ``left``."""
    cat = open_catalog(uri)
    cat.create_namespace("ns")
    cat.create_table(LEFT, workers.move_rows([]).schema).append(workers.move_rows(range(KEYS)))
    cat.create_table(RIGHT, workers.move_rows([]).schema)
    cat.create_table(LEDGER, workers.ledger_rows("", 0, 0, 0, "").schema)
    return cat


def _committed_ids(cat) -> dict[str, dict]:
    """lamina_transactions as the catalog holds it: id -> the versions it recorded."""
    import json

    with cat._db.tx(write=False) as q:
        return {r[0]: json.loads(r[1]) for r in q("SELECT id, tables_json FROM lamina_transactions").fetchall()}


def _check_state(k: dict[str, list], ledger_k: list, where: str) -> None:
    """One catalog state against the model: every key once, in ``right`` iff it moved an odd
    number of times."""
    held = sorted(k[LEFT] + k[RIGHT])
    assert held == list(range(KEYS)), f"{where}: keys {held} (lost or duplicated)"
    moves = collections.Counter(ledger_k)
    assert sorted(k[RIGHT]) == sorted(x for x in range(KEYS) if moves[x] % 2), f"{where}: right {k[RIGHT]} vs ledger {moves}"


def _read_all(reader) -> tuple[dict[str, list], list, list]:
    """Each table's keys and the ledger's keys and transaction ids, through ``reader(ident)``."""
    t = {i: reader(i) for i in TABLES}
    return ({i: t[i].column("k").to_pylist() for i in (LEFT, RIGHT)}, t[LEDGER].column("k").to_pylist(),
            t[LEDGER].column("tx").to_pylist())


def _check_tables_whole(cat) -> None:
    """Path readers see the catalog's versions, and fsck finds nothing missing or damaged."""
    for info in cat.tables("ns"):
        t = cat.load_table(info.identifier)
        assert lamina.open_table(info.location, allow_list=False).version == info.version == t.version
        report = fsck(t)
        assert report.ok, (info.identifier, report.missing, report.errors)


@procs
def test_movers_and_snapshot_readers(catalog_uri, tmp_path, open_catalog):
    cat = _new_catalog(open_catalog, catalog_uri)
    pulses = [str(tmp_path / f"pulse-{r}") for r in range(READERS)]
    for p in pulses:
        os.mkfifo(p)
    specs = [
        {"mode": "catalog_move", "catalog": catalog_uri, "tables": TABLES, "writer": w, "seed": w, "n": MOVES,
         "attempts": ATTEMPTS, "keys": list(range(KEYS)), "pulse": pulses, "isolation_level": ISOLATION[w % 2]}
        for w in range(MOVERS)
    ] + [
        {"mode": "catalog_read", "catalog": catalog_uri, "pulse": p, "max_snapshots": MOVERS * MOVES * ATTEMPTS + 1,
         "columns": {LEFT: ["k"], RIGHT: ["k"], LEDGER: ["k", "tx"]}}
        for p in pulses
    ]
    results = workers.spawn_workers(specs, str(tmp_path), timeout=150)
    acked = [m for r in results[:MOVERS] for m in r["acked"]]
    ids = [tx for tx, *_ in acked]
    assert len(set(ids)) == len(ids) and acked

    # Every acknowledged transaction is recorded, and nothing else is.
    committed = _committed_ids(cat)
    assert set(committed) == set(ids)
    assert all(cat.transaction_committed(tx) for tx in ids)

    # Each snapshot is one state of the model; a reader's snapshots never go back.
    for r in results[MOVERS:]:
        snaps = r["snapshots"]
        for n, s in enumerate(snaps):
            k = {t: s["read"][t]["k"] for t in TABLES}
            _check_state(k, k[LEDGER], f"snapshot {n} {s['versions']}")
            tx = s["read"][LEDGER]["tx"]
            assert set(tx) <= set(ids) and len(set(tx)) == len(tx)
        for a, b in zip(snaps, snaps[1:]):
            assert all(b["versions"][t] >= a["versions"][t] for t in TABLES), (a["versions"], b["versions"])
        # Its last snapshot was taken after every mover finished: every move is in it.
        assert sorted(snaps[-1]["read"][LEDGER]["tx"]) == sorted(ids), "the snapshot after the race misses acknowledged moves"

    # The final state, through the catalog and by path.
    k, ledger_k, ledger_tx = _read_all(lambda i: cat.load_table(i).scan().to_arrow())
    _check_state(k, ledger_k, "final")
    assert sorted(ledger_tx) == sorted(ids)
    assert sorted(ledger_k) == sorted(m[1] for m in acked)
    _check_tables_whole(cat)

    # Each transaction's effect is in the versions it recorded, and not in the ones before:
    # the ledger gains exactly that transaction's row at its recorded version, and the key
    # leaves its source table there.
    tables = {i: cat.load_table(i) for i in TABLES}
    ledger_at = {v: set(tables[LEDGER].scan(version=v).to_arrow().column("tx").to_pylist())
                 for v in range(tables[LEDGER].version + 1)}
    for tx, key, src, dst in acked:
        rec = committed[tx]
        assert set(rec) == {src, dst, LEDGER}
        v = rec[LEDGER]
        assert ledger_at[v] - ledger_at[v - 1] == {tx}
        for ident, before, after in ((src, 1, 0), (dst, 0, 1)):
            vs = tables[ident].scan(version=rec[ident] - 1, where=f"k = {key}").to_arrow().num_rows
            assert (vs, tables[ident].scan(version=rec[ident], where=f"k = {key}").to_arrow().num_rows) == (before, after)


STEPS = [("staged", False), ("before-sql-commit", False), ("sql-committed", True), ("published", True)]


@procs
@pytest.mark.parametrize("at,committed", STEPS, ids=[s for s, _ in STEPS])
def test_sigkill_at_each_commit_step(catalog_uri, tmp_path, at, committed, open_catalog):
    cat = _new_catalog(open_catalog, catalog_uri)
    before = {i: cat.table_info(i).version for i in TABLES}
    marker = tmp_path / "marker"
    proc = workers.run_crash_worker({
        "mode": "catalog_crash", "catalog": catalog_uri, "tables": TABLES, "k": 3, "create": "ns.created",
        "at": at, "marker": str(marker),
    })
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    tx_id = marker.read_text()

    # Orphan cleanup by path, before any catalog reader completed a publish: it must spare
    # what the staged versions reference. (The table created has no version a path reader
    # can open until then.)
    for i in TABLES:
        lamina.open_table(cat.table_info(i).location).maintenance.remove_orphans(older_than=timedelta(0), allow_short_age=True)

    cat = open_catalog(catalog_uri)  # reopened
    assert cat.transaction_committed(tx_id) is committed
    assert set(_committed_ids(cat)) == ({tx_id} if committed else set())
    want_k = {LEFT: [k for k in range(KEYS) if k != 3], RIGHT: [3]} if committed else {LEFT: list(range(KEYS)), RIGHT: []}
    want_tx = [tx_id] if committed else []
    want_versions = {i: v + committed for i, v in before.items()}

    # All or nothing for catalog readers: a snapshot, and each table loaded.
    snap = cat.snapshot()
    assert {i: snap.version_of(i) for i in TABLES} == want_versions
    for reader in (snap.to_arrow, lambda i: cat.load_table(i).scan().to_arrow()):
        k, ledger_k, ledger_tx = _read_all(reader)
        assert {i: sorted(v) for i, v in k.items()} == want_k and ledger_tx == want_tx
        _check_state(k, ledger_k, at)
    if committed:
        assert snap.version_of("ns.created") == 1
        assert cat.load_table("ns.created").scan().to_arrow().column("k").to_pylist() == [3]
    else:
        assert not cat.table_exists("ns.created")
        with pytest.raises(CatalogTableNotFound):
            snap.entry("ns.created")

    # The loads published every version: path readers see them; nothing is missing.
    _check_tables_whole(cat)
    # A staged copy of a published version is garbage (the kill can land between another
    # member's final put and its unlink of the staged copy, since members publish in
    # parallel); orphan cleanup removes it, and nothing committed is lost by that.
    for info in cat.tables("ns"):
        lamina.open_table(info.location).maintenance.remove_orphans(older_than=timedelta(0), allow_short_age=True)
    _check_tables_whole(cat)
    for info in cat.tables("ns"):
        assert not [p for p in os.listdir(os.path.join(info.location, "_lamina", "versions", "pending"))
                    if int(p.split("-")[0]) <= info.version], f"{info.identifier}: a committed version still staged"

    # Expiry and orphan cleanup through the catalog, then every table still reads exactly.
    for info in cat.tables("ns"):
        t = cat.load_table(info.identifier)
        t.maintenance.expire_versions(older_than=int(time.time() * 1000) + 1, retain_last=1)
        t.maintenance.remove_orphans(older_than=timedelta(0), allow_short_age=True)
    k, ledger_k, ledger_tx = _read_all(lambda i: lamina.open_table(cat.table_info(i).location).scan().to_arrow())
    assert {i: sorted(v) for i, v in k.items()} == want_k and ledger_tx == want_tx
    _check_tables_whole(cat)


def _move_once(cat, k: int, tries: int = 3) -> list:
    """A caller that retries the move of ``k`` only when the commit raised; returns the errors."""
    errors = []
    for _ in range(tries):
        tx = cat.transaction()
        workers.queue_move(tx, k, LEFT, RIGHT, LEDGER, 0, 0)
        try:
            tx.commit()
            return errors
        except LaminaError as e:
            errors.append(e)
    raise AssertionError(f"the move did not commit in {tries} tries: {errors}")


def _after_one_move(open_catalog, uri: str, before: dict[str, int]) -> None:
    """Exactly one move of key 3 is in the catalog, once, whatever the dropped session did."""
    fresh = open_catalog(uri)
    assert {i: fresh.table_info(i).version for i in TABLES} == {i: v + 1 for i, v in before.items()}
    committed = _committed_ids(fresh)
    assert len(committed) == 1
    k, ledger_k, ledger_tx = _read_all(lambda i: fresh.load_table(i).scan().to_arrow())
    assert sorted(k[RIGHT]) == [3] and ledger_tx == list(committed)
    _check_state(k, ledger_k, "after the dropped session")
    _check_tables_whole(fresh)


def _terminate(admin_uri: str, pid: int) -> None:
    """End a PostgreSQL session from another connection, and wait until it is gone."""
    import psycopg

    with psycopg.connect(admin_uri, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]


def test_postgres_session_terminated_between_swaps_and_commit(pg_uri, monkeypatch, open_catalog):
    """The session ends after the rows were swapped, before the transaction is recorded and
    committed: the server rolls it back, the writer finds it absent and commits it again."""
    cat = _new_catalog(open_catalog, pg_uri)
    before = {i: cat.table_info(i).version for i in TABLES}
    killed = []

    def hook(step: str) -> None:
        if step == "sql-swapped" and not killed:
            killed.append(cat._db._conn.info.backend_pid)
            _terminate(pg_uri.split("?")[0], killed[0])

    monkeypatch.setattr(committer, "_step_hook", hook)
    assert _move_once(cat, 3) == []  # resolved inside the commit: the caller saw no error
    assert killed
    _after_one_move(open_catalog, pg_uri, before)


WHEN = ["while-committing", "commit-sent", "answer-lost"]


@pytest.mark.parametrize("when", WHEN)
def test_postgres_session_lost_during_commit(pg_uri, when, open_catalog):
    """The session is lost during the SQL COMMIT: a deferred trigger on lamina_transactions (run
    by COMMIT, before its commit record) sends a notice, and the writer's notice handler ends its
    own session. ``while-committing``: pg_terminate_backend while the trigger waits on a lock the
    test holds, so the session dies before the commit record (not committed);
    ``commit-sent``: pg_terminate_backend as the COMMIT goes on, landing before or after the
    commit record; ``answer-lost``: the writer's end of the connection is shut, so the server
    commits but the answer never arrives. Either way the writer resolves the outcome, and a
    caller retrying only on a raised error commits the move once."""
    import psycopg

    admin_uri = pg_uri.split("?")[0]
    cat = _new_catalog(open_catalog, pg_uri)
    before = {i: cat.table_info(i).version for i in TABLES}
    wait = "PERFORM pg_advisory_xact_lock_shared(18018);" if when == "while-committing" else ""
    with cat._db.tx() as q:
        q(f"""CREATE FUNCTION at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN RAISE NOTICE 'committing'; {wait} RETURN NULL; END $$""")
        q("CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON lamina_transactions "
          "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION at_commit()")
    with psycopg.connect(admin_uri, autocommit=True) as lock_holder:
        lock_holder.execute("SELECT pg_advisory_lock(18018)")
        lost = []

        def on_notice(diag) -> None:
            if diag.message_primary != "committing" or lost:
                return
            lost.append(conn.info.backend_pid)
            if when == "while-committing":
                _terminate(admin_uri, lost[0])
                lock_holder.execute("SELECT pg_advisory_unlock(18018)")
            elif when == "commit-sent":
                lock_holder.execute("SELECT pg_terminate_backend(%s)", (lost[0],))
            else:
                with socket.socket(fileno=os.dup(conn.pgconn.socket)) as s:
                    s.shutdown(socket.SHUT_RDWR)

        conn = cat._db._connect()
        conn.add_notice_handler(on_notice)
        _move_once(cat, 3)
        assert lost
    _after_one_move(open_catalog, pg_uri, before)
