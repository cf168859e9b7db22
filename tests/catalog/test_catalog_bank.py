"""The bank: money moved between accounts of two, and of three, tables by catalog
transactions from racing writer processes, one of them SIGKILLed in the middle of a commit,
while readers take catalog snapshots; on real SQLite and a real PostgreSQL server.

Each transfer (tests/support/workers.py, ``_catalog_bank``) is one catalog transaction of
updates whose ``set`` reads the balance: one account of one table pays an amount, an account
of each other table receives its part. It is never retried by hand: the transaction itself
re-plans an update on the newest version of a table that moved (its predicate and ``set``
evaluated on the new rows). So:

- every snapshot holds every account once, and the same total;
- the final balances are the initial ones plus exactly the transfers that committed: every
  acknowledged one, none that failed, and the killed writer's transfer in flight wholly or
  not at all, as ``catalog.transaction_committed(id)`` says (the writer journals the id
  before committing); nothing else is in ``lamina_transactions``;
- every failure is a typed Lamina error, and with 4 writers at most 1% of the transfers fail.
"""

from __future__ import annotations

import collections
import os

import pytest

import lamina
from lamina.maintenance import fsck

from support import workers

pytestmark = pytest.mark.xdist_group("procs")

ACCOUNTS, BALANCE = 8, 1_000
# tables -> (writers, transfers per writer, where the victim is killed: the n-th time a commit
# of it reaches that step, and whether that transfer committed). After its 4th commit point,
# while it publishes (committed: other writers' loads complete the publish); or as its 4th
# attempt has staged its versions (not committed: staged files left behind).
CASES = {2: (4, 10, ("published", 7), True), 3: (3, 6, ("staged", 4), False)}
VICTIM = 0
MAX_FAILED = 0.01  # of the transfers whose outcome the writers learnt
DEADLINE_S = 120


def _balances(read: dict) -> dict[int, int]:
    return dict(zip(read["acct"], read["bal"]))


@pytest.mark.parametrize("n_tables", sorted(CASES))
def test_transfers_keep_every_snapshot_whole_and_land_exactly_once(catalog_uri, tmp_path, n_tables, open_catalog):
    writers, transfers, kill_at, kill_committed = CASES[n_tables]
    cat = open_catalog(catalog_uri)
    cat.create_namespace("bank")
    tables = [f"bank.t{i}" for i in range(n_tables)]
    for t in tables:
        cat.create_table(t, workers.bank_rows(0, 0).schema).append(workers.bank_rows(ACCOUNTS, BALANCE))
    total = n_tables * ACCOUNTS * BALANCE
    pulse = str(tmp_path / "pulse")
    os.mkfifo(pulse)
    journals = [str(tmp_path / f"journal-{w}.jsonl") for w in range(writers)]
    specs = [
        {"mode": "catalog_bank", "catalog": catalog_uri, "tables": tables, "accounts": ACCOUNTS, "writer": w,
         "seed": 52 * 100 + w, "n": transfers, "pulse": [pulse], "journal": journals[w], "pause_at": kill_at if w == VICTIM else None}
        for w in range(writers)
    ] + [{"mode": "catalog_read", "catalog": catalog_uri, "pulse": pulse, "max_snapshots": writers * transfers + 1,
          "columns": {t: ["acct", "bal"] for t in tables}}]
    results = workers.spawn_workers(specs, str(tmp_path), timeout=DEADLINE_S, kill=(VICTIM, "paused", 1))
    assert results[VICTIM] is None  # killed
    done = [workers.read_journal(j) for j in journals]
    assert len(done[VICTIM]) < transfers and all(len(d) == transfers for w, d in enumerate(done) if w != VICTIM)

    # What committed, by the catalog's record of transactions: every acknowledged transfer, no
    # failed one; the killed writer's unknown one either way. Nothing else.
    committed = {x["id"]: cat.transaction_committed(x["id"]) for d in done for x in d}
    unknown = [x for d in done for x in d if x["outcome"] is None]
    assert unknown == [done[VICTIM][-1]]  # the victim's last transfer
    assert committed[unknown[0]["id"]] is kill_committed
    assert all(committed[x["id"]] for d in done for x in d if x["outcome"] == "acked")
    failed = [x for d in done for x in d if x["outcome"] == "failed"]
    assert all(not committed[x["id"]] or x["error"] == "CommitStateUnknown" for x in failed), failed
    with cat._db.tx(write=False) as q:
        recorded = {r[0] for r in q("SELECT id FROM lamina_transactions").fetchall()}
    assert recorded == {i for i, c in committed.items() if c}

    # Every failure is a typed Lamina error (the worker ends on any other), and rare.
    learnt = sum(1 for d in done for x in d if x["outcome"] is not None)
    errors = collections.Counter(x["error"] for x in failed)
    assert len(failed) <= MAX_FAILED * learnt, f"{len(failed)} of {learnt} transfers failed: {errors} {failed[:2]}"
    assert all(hasattr(lamina.errors, e) and issubclass(getattr(lamina.errors, e), lamina.errors.LaminaError)
               for e in errors)
    # The writers raced: transfers were re-planned on versions that moved under them.
    assert any(x.get("attempts", 1) > 1 for d in done for x in d)

    # Every snapshot: each account once, the same total; a reader's snapshots never go back.
    snaps = results[-1]["snapshots"]
    assert len(snaps) > 1
    for n, s in enumerate(snaps):
        held = {t: _balances(s["read"][t]) for t in tables}
        assert all(sorted(s["read"][t]["acct"]) == list(range(ACCOUNTS)) for t in tables), (n, s)
        assert sum(sum(b.values()) for b in held.values()) == total, (n, s["versions"], held)
    for a, b in zip(snaps, snaps[1:]):
        assert all(b["versions"][t] >= a["versions"][t] for t in tables)

    # The final balances: the initial ones plus exactly the transfers that committed.
    want = {t: {a: BALANCE for a in range(ACCOUNTS)} for t in tables}
    for d in done:
        for x in d:
            if committed[x["id"]]:
                for t, acct, delta in x["legs"]:
                    want[t][acct] += delta
    fresh = open_catalog(catalog_uri)
    snap = fresh.snapshot()
    for t in tables:
        assert _balances(fresh.load_table(t).scan().to_arrow().to_pydict()) == want[t], t
        assert _balances(snap.to_arrow(t).to_pydict()) == want[t], t
    assert {t: _balances(snaps[-1]["read"][t]) for t in tables} == want  # the reader's last snapshot, after the race
    for t in tables:  # loads published every version; nothing missing or damaged
        table = fresh.load_table(t)
        assert lamina.open_table(table.uri, allow_list=False).version == table.version
        report = fsck(table)
        assert report.ok, (t, report.missing, report.errors)
