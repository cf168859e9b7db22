"""Catalog transactions of issue 18: the latency of a transaction appending to 2 and to 10 tables
against one single-table append on the same catalog, and 8 processes racing two-table
transactions, on a SQLite and a PostgreSQL catalog, in one run (the case `catalog_tx`;
--only sqlite or postgres).

1. **Latency**: per catalog, 11 empty tables (id int64, category string, value double, ts
   timestamp[us]): `b.single` and `b.t0`..`b.t9`. Each round times, in an order rotating per
   round, one call of each: the single-table append `cat.load_table("b.single").append(batch)`;
   the 2-table transaction `with cat.transaction() as tx: tx.table("b.t0").append(batch);
   tx.table("b.t1").append(batch)`; the same on `b.t0`..`b.t9`. The same batch of 100 rows
   everywhere, so both sides write one Parquet data file per table they append to (the data file,
   its manifest and the version are all inside the timed call, on both sides). A few untimed
   rounds first. Figures: p10 / p50 / p90 over the rounds; targets (issue 18): p50 of the 2-table
   transaction <= 1.5x and of the 10-table one <= 3x the single append's p50, ratios from this run.
   Then every table's row count is checked (rounds x batch rows), and a breakdown of where a
   10-table transaction's time goes is taken in an untimed pass (timers around its steps).
2. **Racing transactions**: per catalog, 4 fresh tables; 8 processes each load the catalog, wait
   at a start barrier (tests/support/workers.py), then run 50 transactions each appending a batch
   tagged (writer, seq) to 2 of the 4 tables (a fixed random pair per transaction), with a retry
   budget no race exhausts (appends never conflict: a moved row is re-applied). *failed*: the
   transaction raised; *lost*: acknowledged, but its rows are missing from a table it appended to
   (read back through `cat.snapshot()`), or its id not in `lamina_transactions`
   (`cat.transaction_committed(id)`); *torn*: rows in one of its tables but not the other;
   *duplicated*: a batch present more than once, or a table version acknowledged twice.
   commits/s = acknowledged transactions / wall time (first writer released -> last done).
3. **The bank** (issue 52): per catalog and per number of writer processes (1, 4, 8), 2 fresh
   tables of 8 accounts (acct, bal); each writer waits at the start barrier, then makes 25
   transfers, each one account of one table paying a random amount into an account of the other
   (`update(where="acct = 3", set={"bal": "bal - 5"})` and `... "bal + 5"`): as one catalog
   transaction (default isolation, serializable: an update of a table that moved is planned
   again on its newest version; default CommitOptions), and, on fresh tables, as the same two
   updates as two single-table commits (`cat.load_table(t).update(...)`, not atomic). A
   transfer is never retried by hand: *failed* = raised (its error counted). transfers/s =
   acknowledged transfers / wall time. The final balances are checked to equal the initial
   ones plus exactly the legs that were acknowledged. Target (issue 52): at most 1% of the
   transfers fail with 4 writers, catalog transactions.

PostgreSQL: a server started here (tests/support/pgserver.py: initdb + pg_ctl on 127.0.0.1,
fsync off, as the catalog tests and bench/maintenance_bench.py use). SQLite: a file catalog
in a temp dir (WAL, synchronous=FULL: every commit is an fsync).
"""

from __future__ import annotations

import collections
import functools
import json
import random
import threading
import time
from dataclasses import dataclass

import numpy as np

from common import (
    SCHEMA, Workspace, err_text, flush_lamina_hints, fmt_s, fmt_x, log_error, make_batch, now, p50, rotated,
    say, start_barrier, worker_cmd,
)
from registry import Run, case, postgres
from report import Report, Section, Target, verdict


SECTION_TITLE = "Catalog transactions (issue 18)"
CATALOGS = ["sqlite", "postgres"]
CATALOG_LABEL = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
PG_DB = "lamina_tx_bench"
WIDE = 10  # tables of the wide transaction
TARGETS = {2: 1.5, WIDE: 3.0}  # tables -> max ratio of p50s to the single append's
RACE_TABLES = 4
RACE_PICK = 2
# Appends never conflict: a race only moves rows, and each move costs one re-apply. The budget
# is there so that no interleaving of 8 writers on 4 tables can exhaust it.
RACE_ATTEMPTS = 10_000
RACE_SECONDS = 600.0
BANK_WRITERS = [1, 4, 8]
BANK_TABLES = 2
BANK_ACCOUNTS, BANK_BALANCE = 8, 1_000
BANK_MODES = {"transaction": "catalog transaction", "single": "2 single-table commits"}
BANK_TARGET_WRITERS, BANK_MAX_FAILED = 4, 0.01  # issue 52: failure rate with 4 writers, catalog transactions


@dataclass
class Config:
    rows: int = 100
    rounds: int = 60
    warm: int = 5
    breakdown: int = 20  # 10-table transactions timed step by step (untimed for the targets)
    writers: int = 8
    txs: int = 50  # per writer
    race_rows: int = 10
    bank_writers: tuple[int, ...] = tuple(BANK_WRITERS)
    transfers: int = 25  # per bank writer


def quantile(xs: list[float], q: float) -> float | None:
    return float(np.quantile(xs, q)) if xs else None


# =========================================================================== catalogs
class Catalogs:
    """A fresh catalog per name (the PostgreSQL server started on first use, stopped at close)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.pg = None
        self.pg_start_s: float | None = None
        self.dbs = 0

    def new(self, name: str) -> str:
        """The URI of a new, empty catalog (its warehouse in the workspace)."""
        if name == "sqlite":
            return f"sqlite:///{self.ws.new('cat-sqlite')}/cat.db"
        if self.pg is None:
            from support.pgserver import PgServer

            t0 = now()
            self.pg = PgServer().start()
            self.pg_start_s = now() - t0
        self.dbs += 1
        return self.pg.create_database(f"{PG_DB}_{self.dbs}") + f"?warehouse={self.ws.new('cat-pg-wh')}"

    def close(self) -> None:
        if self.pg is not None:
            try:
                self.pg.stop()
            except Exception as e:  # noqa: BLE001
                log_error("catalog_tx/postgres/stop", e)
            self.pg = None


# =========================================================================== 1. latency
def single_append(cat, batch) -> None:
    cat.load_table("b.single").append(batch)


def tx_append(cat, idents: list[str], batch) -> None:
    with cat.transaction() as tx:
        for ident in idents:
            tx.table(ident).append(batch)


def bench_latency(cat_uri: str, cfg: Config) -> dict:
    import lamina

    cat = lamina.load_catalog(cat_uri)
    cat.create_namespace("b")
    wide = [f"b.t{i}" for i in range(WIDE)]
    for ident in ["b.single", *wide]:
        cat.create_table(ident, SCHEMA)
    batch = make_batch(0, cfg.rows)
    cases = {
        "single": lambda: single_append(cat, batch),
        2: lambda: tx_append(cat, wide[:2], batch),
        WIDE: lambda: tx_append(cat, wide, batch),
    }
    for _ in range(cfg.warm):
        for fn in cases.values():
            fn()
    lat: dict = {k: [] for k in cases}
    for rnd in range(cfg.rounds):
        for k in rotated(list(cases), rnd):
            t0 = now()
            cases[k]()
            lat[k].append(now() - t0)
    breakdown = step_breakdown(cat, cases, cfg)
    # Every call landed once: rows per table = calls x batch rows (single, t0, t1: every case).
    flush_lamina_hints()
    calls = cfg.warm + cfg.rounds + cfg.breakdown
    expected = {"b.single": calls, **{t: calls * (2 if t in wide[:2] else 1) for t in wide}}
    snap = cat.snapshot()
    rows = {t: snap.to_arrow(t, columns=["id"]).num_rows for t in expected}
    bad = {t: (rows[t], n * cfg.rows) for t, n in expected.items() if rows[t] != n * cfg.rows}
    if bad:
        raise RuntimeError(f"row counts (got, expected) differ: {bad}")
    return {"lat": {str(k): v for k, v in lat.items()}, "rows_checked": rows, "versions": snap.versions,
            "breakdown": breakdown}


# Where a call's time goes: timers around the steps of the single append and of the catalog
# transaction (lamina/catalog/transaction.py). A step that runs on several threads at once is
# summed over them, so steps can add up to more than the wall time.
STEPS = [
    ("lamina.catalog.sql", "SqlCatalog", "load_table", "load the table (catalog row + version)"),
    ("lamina.table.transaction", "Transaction", "append", "append call: conform + write the data file"),
    ("lamina.commit.committer", "Committer", "_prepare", "apply to the base: manifest written (per table)"),
    ("lamina.catalog.transaction", "CatalogTransaction", "_stage", "stage every version (pending puts)"),
    ("lamina.catalog.transaction", "CatalogTransaction", "_sql_commit", "the SQL transaction (commit point)"),
    ("lamina.catalog.transaction", "CatalogTransaction", "_finish", "publish final versions, hints"),
    ("lamina.catalog.coordinator", "SqlCoordinator", "publish", "single append: stage + row swap + publish"),
    ("lamina.catalog.sql", "SqlCatalog", "_swap", "single append: the row swap (commit point)"),
]


def step_breakdown(cat, cases: dict, cfg: Config) -> dict:
    """Per case (single, WIDE): wall p50 and the mean seconds per call of each step in STEPS."""
    import importlib

    acc: dict = collections.defaultdict(float)
    lock = threading.Lock()
    saved = []
    for mod, owner, attr, _what in STEPS:
        cls = getattr(importlib.import_module(mod), owner)
        f = cls.__dict__.get(attr)
        if f is None:
            continue
        saved.append((cls, attr, f))

        def timed(*a, _f=f, _key=f"{owner}.{attr}", **k):
            t0 = now()
            try:
                return _f(*a, **k)
            finally:
                with lock:
                    acc[_key] += now() - t0

        setattr(cls, attr, functools.wraps(f)(timed))
    out = {}
    try:
        for which in cases:  # every case (row counts stay exact); the 2-table one is not reported
            acc.clear()
            wall = []
            for _ in range(cfg.breakdown):
                t0 = now()
                cases[which]()
                wall.append(now() - t0)
            out[str(which)] = {"wall_p50": p50(wall), "steps": {k: v / cfg.breakdown for k, v in acc.items()}}
    finally:
        for cls, attr, f in saved:
            setattr(cls, attr, f)
    return out


# =========================================================================== 2. racing transactions
def race_pairs(writer: int, n: int) -> list[list[int]]:
    """The tables (indices) each transaction of ``writer`` appends to: a fixed random pair."""
    rng = random.Random(1000 + writer)
    return [sorted(rng.sample(range(RACE_TABLES), RACE_PICK)) for _ in range(n)]


def worker_race(argv) -> None:
    """One racing process: load the catalog, READY, wait for GO, run its transactions, print JSON."""
    from support import workers

    import lamina
    from lamina.commit import CommitOptions

    spec = json.loads(argv[0])
    cat = lamina.load_catalog(spec["catalog"])
    w, rows, tables = spec["writer"], spec["rows"], spec["tables"]
    options = CommitOptions(max_attempts=RACE_ATTEMPTS, max_seconds=RACE_SECONDS)
    pairs = race_pairs(w, spec["n"])
    batches = [workers.batch(w, seq, rows) for seq in range(spec["n"])]
    t_go = start_barrier()
    acked, failed = [], []
    for seq, pair in enumerate(pairs):
        t0 = now()
        tx = cat.transaction(commit_options=options)
        try:
            with tx:
                for k in pair:
                    tx.table(tables[k]).append(batches[seq])
            acked.append({"seq": seq, "id": tx.id, "versions": tx.versions, "s": now() - t0})
        except Exception as e:  # noqa: BLE001  (counted: a typed error is a failure, not a loss)
            failed.append({"seq": seq, "id": tx.id, "error": err_text(e), "s": now() - t0})
    print(json.dumps({"t_go": t_go, "t_done": time.time(), "acked": acked, "failed": failed}), flush=True)


def bench_race(ws: Workspace, cat_uri: str, cfg: Config, label: str) -> dict:
    from support import workers

    import lamina

    cat = lamina.load_catalog(cat_uri)
    cat.create_namespace("r")
    tables = [f"r.t{i}" for i in range(RACE_TABLES)]
    for t in tables:
        cat.create_table(t, workers.schema())
    specs = [{"catalog": cat_uri, "tables": tables, "writer": w, "n": cfg.txs, "rows": cfg.race_rows}
             for w in range(cfg.writers)]
    say(f"{label}: {cfg.writers} processes x {cfg.txs} two-table transactions on {RACE_TABLES} tables")
    results = workers.spawn_workers(
        specs, ws.new(f"logs-{label}"), timeout=900, cmd=lambda spec: worker_cmd("catalog_tx_bench:worker_race", json.dumps(spec)),
    )
    r = {
        "wall_s": max(x["t_done"] for x in results) - min(x["t_go"] for x in results),
        "go_spread_s": max(x["t_go"] for x in results) - min(x["t_go"] for x in results),
        "latency": [a["s"] for x in results for a in x["acked"]],
    }
    flush_lamina_hints()
    r["verify"] = verify_race(lamina.load_catalog(cat_uri), tables, results, cfg)
    return r


def verify_race(cat, tables: list[str], results: list[dict], cfg: Config) -> dict:
    """Read every table back at one catalog snapshot and hold it against the writers' ledgers."""
    snap = cat.snapshot()
    counts = {}
    for t in tables:
        g = snap.to_arrow(t, columns=["writer", "seq"]).group_by(["writer", "seq"]).aggregate([([], "count_all")])
        d = g.to_pydict()
        counts[t] = {(w, s): c for w, s, c in zip(d["writer"], d["seq"], d["count_all"])}
    pairs = {w: race_pairs(w, cfg.txs) for w in range(len(results))}
    lost = torn = dup = landed_failed = not_in_ledger = 0
    claimed: dict = collections.defaultdict(collections.Counter)  # table -> version -> acknowledgements
    for w, res in enumerate(results):
        for a in res["acked"]:
            key, mine = (w, a["seq"]), [tables[k] for k in pairs[w][a["seq"]]]
            present = [counts[t].get(key, 0) for t in mine]
            lost += any(c < cfg.race_rows for c in present)
            torn += 0 < sum(c > 0 for c in present) < len(present)
            not_in_ledger += not cat.transaction_committed(a["id"])
            for t, v in a["versions"].items():
                claimed[t][v] += 1
        for f in res["failed"]:
            key, mine = (w, f["seq"]), [tables[k] for k in pairs[w][f["seq"]]]
            present = [counts[t].get(key, 0) for t in mine]
            landed_failed += all(c > 0 for c in present)
            torn += 0 < sum(c > 0 for c in present) < len(present)
    dup += sum(1 for t in tables for c in counts[t].values() if c > cfg.race_rows)
    dup += sum(1 for t in claimed for n in claimed[t].values() if n > 1)
    sent = {(w, s) for w in range(len(results)) for s in range(cfg.txs)}
    unexplained = sum(1 for t in tables for key in counts[t] if key not in sent)
    acked = sum(len(x["acked"]) for x in results)
    per_table = {t: sum(1 for w, res in enumerate(results) for a in res["acked"] if t in a["versions"]) for t in tables}
    versions_ok = all(snap.version_of(t) == per_table[t] for t in tables)  # one version per acknowledged tx
    return {
        "acked": acked, "failed": sum(len(x["failed"]) for x in results), "lost": lost, "torn": torn,
        "duplicated": dup, "failed_but_landed": landed_failed, "not_in_ledger": not_in_ledger,
        "unexplained": unexplained, "versions": snap.versions, "versions_ok": versions_ok,
        "rows": {t: sum(counts[t].values()) for t in tables},
        "errors": sorted({f["error"] for x in results for f in x["failed"]})[:3],
    }


# =========================================================================== 3. the bank
def worker_bank(argv) -> None:
    """One bank writer: load the catalog, READY, wait for GO, make its transfers (``mode``
    transaction or single), print JSON: per transfer its seconds, the legs acknowledged, the
    commit attempts (transactions) and the error's class, if any."""
    from support import workers

    import lamina
    from lamina.errors import LaminaError

    spec = json.loads(argv[0])
    cat = lamina.load_catalog(spec["catalog"])
    rng = random.Random(spec["seed"])
    transfers = [workers.transfer_legs(rng, spec["tables"], spec["accounts"]) for _ in range(spec["n"])]
    t_go = start_barrier()
    out = []
    for legs in transfers:
        t0, done, attempts, error = now(), [], None, None
        try:
            if spec["mode"] == "transaction":
                tx = cat.transaction()
                workers.queue_transfer(tx, legs)
                tx.commit()
                done, attempts = legs, tx.attempts
            else:
                for leg in legs:
                    table, acct, delta = leg
                    cat.load_table(table).update(*workers.leg_update(acct, delta))
                    done.append(leg)
        except LaminaError as e:
            error = type(e).__name__
        out.append({"s": now() - t0, "legs": done, "whole": len(done) == len(legs), "attempts": attempts, "error": error})
    print(json.dumps({"t_go": t_go, "t_done": time.time(), "transfers": out}), flush=True)


def bench_bank(ws: Workspace, cat_uri: str, writers: int, mode: str, cfg: Config, label: str) -> dict:
    from support import workers

    import lamina

    cat = lamina.load_catalog(cat_uri)
    cat.create_namespace("bank")
    tables = [f"bank.t{i}" for i in range(BANK_TABLES)]
    for t in tables:
        cat.create_table(t, workers.bank_rows(0, 0).schema).append(workers.bank_rows(BANK_ACCOUNTS, BANK_BALANCE))
    specs = [{"catalog": cat_uri, "tables": tables, "accounts": BANK_ACCOUNTS, "writer": w, "seed": 5200 + w,
              "n": cfg.transfers, "mode": mode} for w in range(writers)]
    say(f"{label}: the bank, {writers} writer(s) x {cfg.transfers} transfers as {BANK_MODES[mode]}")
    results = workers.spawn_workers(
        specs, ws.new(f"logs-bank-{label}-{mode}-{writers}"), timeout=900,
        cmd=lambda spec: worker_cmd("catalog_tx_bench:worker_bank", json.dumps(spec)),
    )
    flush_lamina_hints()
    done = [x for r in results for x in r["transfers"]]
    want = {t: {a: BANK_BALANCE for a in range(BANK_ACCOUNTS)} for t in tables}
    for x in done:
        for t, acct, delta in x["legs"]:
            want[t][acct] += delta
    snap = lamina.load_catalog(cat_uri).snapshot()
    got = {t: dict(zip(*snap.to_arrow(t).to_pydict().values())) for t in tables}
    acked = [x for x in done if x["whole"] and x["error"] is None]
    return {
        "wall_s": max(r["t_done"] for r in results) - min(r["t_go"] for r in results),
        "sent": len(done), "acked": len(acked), "failed": len(done) - len(acked),
        "latency": [x["s"] for x in acked], "attempts": [x["attempts"] for x in acked if x["attempts"] is not None],
        "errors": dict(collections.Counter(x["error"] for x in done if x["error"])),
        "exact": got == want, "total": sum(sum(b.values()) for b in got.values()),
        "total_want": BANK_TABLES * BANK_ACCOUNTS * BANK_BALANCE, "versions": snap.versions,
    }


# =========================================================================== report
def latency_section(cfg: Config, res: dict, names: list[str]) -> tuple[Section, list[Target]]:
    sec = Section(
        key="latency",
        title=f"Transaction latency: 2 and {WIDE} tables vs one single-table append ({cfg.rows}-row batches)",
        what=(
            f"Per catalog, {cfg.rounds} rounds after {cfg.warm} untimed ones; each round times one call of each case, "
            "in an order rotating per round. **single append**: `cat.load_table(\"b.single\").append(batch)`; "
            "**N-table transaction**: `with cat.transaction() as tx:` + `tx.table(ident).append(batch)` for each of "
            f"`b.t0`..`b.t{{N-1}}`. The same {cfg.rows}-row batch (id int64, category string, value double, "
            "ts timestamp[us]) in every append: each side writes one Parquet data file, one manifest and one "
            "version per table, all inside the timed call. Ratio = the transaction's p50 / the single append's p50 "
            "on the same catalog, this run."
        ),
        columns=["catalog", "call", "p10", "p50", "p90", "ratio (p50) / single append", "target"],
    )
    verdicts = []
    for name in names:
        r = res.get(name, {})
        label = CATALOG_LABEL[name]
        if "error" in r:
            sec.error_row(label, r["error"])
            verdicts += [Target(f"{n}-table transaction p50 ≤ {TARGETS[n]}× one single-table append, {label}", False,
                                "error") for n in TARGETS]
            continue
        lat = r["lat"]
        base = p50(lat["single"])
        for which, call in (("single", "single-table append"), *((str(n), f"{n}-table transaction") for n in TARGETS)):
            xs = lat[which]
            ratio = p50(xs) / base if which != "single" else None
            target = "–"
            if which != "single":
                limit = TARGETS[int(which)]
                ok = ratio <= limit
                target = f"≤ {limit}×: {verdict(ok)}"
                verdicts.append(Target(f"{which}-table transaction p50 ≤ {limit}× one single-table append, {label}", ok,
                                       f"{ratio:.2f}×"))
            sec.rows.append([label, call, fmt_s(quantile(xs, 0.1)), fmt_s(p50(xs)), fmt_s(quantile(xs, 0.9)),
                             "–" if ratio is None else fmt_x(ratio), target])
        extra = (p50(lat[str(WIDE)]) - p50(lat["2"])) / (WIDE - 2)
        sec.notes.append(
            f"{label}: each table beyond the second adds {fmt_s(extra)} to a transaction's p50, {extra / base:.2f}× a "
            f"whole single-table append (the {WIDE}-table target needs ≤ {(TARGETS[WIDE] - TARGETS[2]) / (WIDE - 2):.2f}× "
            "with the 2-table one met): per table, a transaction does what an append does (load the table, encode "
            "the data file, write its manifest, stage and publish its version) except the row swap, which it does "
            "once for all tables.")
        sec.notes.append(f"{label}: every table's rows checked after the run (calls × {cfg.rows} rows): "
                         f"{sum(r['rows_checked'].values()):,} rows in {len(r['rows_checked'])} tables, as expected.")
    return sec, verdicts


def breakdown_notes(res: dict, names: list[str]) -> list[str]:
    """Where the time of a single append and of a 10-table transaction goes, per catalog."""
    what = {f"{owner}.{attr}": text for _m, owner, attr, text in STEPS}
    notes = []
    for name in names:
        b = res.get(name, {}).get("breakdown")
        if not b:
            continue
        parts = []
        for which, label in (("single", "single append"), (str(WIDE), f"{WIDE}-table transaction")):
            steps = b[which]["steps"]
            items = ", ".join(f"{what[k]} {fmt_s(v)}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1]) if v)
            parts.append(f"{label} (p50 {fmt_s(b[which]['wall_p50'])} with the timers): {items}")
        notes.append(f"Where the time goes, {CATALOG_LABEL[name]} (mean per call, steps on parallel threads summed): "
                     + "; ".join(parts) + ".")
    return notes


def race_section(cfg: Config, res: dict, names: list[str]) -> tuple[Section, list[Target]]:
    total = cfg.writers * cfg.txs
    sec = Section(
        key="race",
        title=f"{cfg.writers} processes × {cfg.txs} two-table transactions on {RACE_TABLES} tables",
        what=(
            f"Per catalog, {RACE_TABLES} fresh tables (writer, seq, i, k); {cfg.writers} processes each load the "
            f"catalog, wait at a start barrier, then run {cfg.txs} transactions one after the other, each appending "
            f"{cfg.race_rows} rows tagged (writer, seq) to {RACE_PICK} of the {RACE_TABLES} tables (a fixed random "
            f"pair per transaction), `CommitOptions(max_attempts={RACE_ATTEMPTS:,}, max_seconds={RACE_SECONDS:.0f})`. "
            "Read back at one `cat.snapshot()`: **lost** = acknowledged but rows missing from one of its tables, or "
            "its id not in `lamina_transactions`; **torn** = rows in one of its tables only; **duplicated** = a batch "
            "present twice or a table version acknowledged twice; **failed** = raised. commits/s = acknowledged / "
            "wall time (first writer released → last done); latency = one transaction, retries included."
        ),
        columns=["catalog", "acknowledged", "failed", "lost", "torn", "duplicated", "wall time", "commits/s",
                 "latency p50 / p90 / max", "final tables", "target"],
    )
    verdicts = []
    for name in names:
        r = res.get(name, {})
        label = CATALOG_LABEL[name]
        if "error" in r:
            sec.error_row(label, r["error"])
            verdicts.append(Target(f"0 lost and 0 failed, {label}", False, "error"))
            continue
        v = r["verify"]
        ok = v["lost"] == 0 and v["failed"] == 0 and v["torn"] == 0 and v["duplicated"] == 0
        rate = v["acked"] / r["wall_s"]
        verdicts.append(Target(f"0 lost and 0 failed, {label}", ok, f"{v['acked']}/{total} acknowledged, {v['lost']} "
                               f"lost, {v['failed']} failed; {rate:.1f} commits/s"))
        lat = r["latency"]
        final = (", ".join(f"{t} v{n}" for t, n in sorted(v["versions"].items()))
                 + ("; one version per acknowledged transaction" if v["versions_ok"] else "; VERSION COUNT MISMATCH"))
        sec.rows.append([
            label, f"{v['acked']} / {total}", str(v["failed"]), str(v["lost"]), str(v["torn"]), str(v["duplicated"]),
            fmt_s(r["wall_s"]), f"{rate:.1f}",
            f"{fmt_s(p50(lat))} / {fmt_s(quantile(lat, 0.9))} / {fmt_s(max(lat) if lat else None)}", final,
            f"0 lost, 0 failed: {verdict(ok)}",
        ])
        if v["errors"]:
            sec.notes.append(f"{label}: failed transactions raised: {'; '.join(v['errors'])}.")
        if v["failed_but_landed"] or v["unexplained"] or v["not_in_ledger"]:
            sec.notes.append(f"{label}: {v['failed_but_landed']} failed but landed, {v['unexplained']} batches no "
                             f"writer sent, {v['not_in_ledger']} acknowledged ids missing from lamina_transactions.")
        sec.notes.append(f"{label}: rows per table {v['rows']}; start spread after the barrier {fmt_s(r['go_spread_s'])}.")
    return sec, verdicts


def bank_section(cfg: Config, res: dict, names: list[str]) -> tuple[Section, list[Target]]:
    from lamina.commit import CommitOptions

    sec = Section(
        key="bank",
        title=f"The bank: {cfg.transfers} transfers per writer between accounts of {BANK_TABLES} tables, "
              f"{' / '.join(map(str, cfg.bank_writers))} writers",
        what=(
            f"Per catalog and number of writer processes, {BANK_TABLES} fresh tables of {BANK_ACCOUNTS} accounts "
            f"(acct int64, bal int64, {BANK_BALANCE:,} each). After a start barrier each writer makes "
            f"{cfg.transfers} transfers, one after the other: an account of one table (at random) pays a random "
            "amount (1-100) into an account of the other, `update(where=\"acct = 3\", set={\"bal\": \"bal - 5\"})` "
            "and `... \"bal + 5\"`. **catalog transaction**: both updates in `with cat.transaction() as tx:` "
            "(default isolation, serializable: the update of a table that moved is planned again on its newest "
            "version; default `CommitOptions`); **2 single-table commits**: the same two updates as "
            "`cat.load_table(t).update(...)` each (not atomic), on fresh tables. A transfer is never retried by hand: "
            "**failed** = raised. transfers/s = acknowledged transfers / wall time (first writer released → last "
            "done); latency = one transfer, retries included; attempts = commit attempts of a catalog transaction "
            "(1: no table moved under it). **balances**: the final balances equal the initial ones plus exactly the "
            "legs acknowledged."
        ),
        columns=["catalog", "writers", "transfer as", "acknowledged", "failed", "transfers/s", "latency p50 / p90",
                 "attempts p50 / max", "balances", "target"],
    )
    verdicts = []
    for name in names:
        label = CATALOG_LABEL[name]
        for writers in cfg.bank_writers:
            for mode, how in BANK_MODES.items():
                r = res.get(name, {}).get(f"{mode}-{writers}", {})
                targeted = mode == "transaction" and writers == BANK_TARGET_WRITERS
                what = f"≤ {BANK_MAX_FAILED:.0%} of the transfers fail with {writers} writers, catalog transactions, {label}"
                if "error" in r or not r:
                    sec.error_row(label, r.get("error", "not run"))
                    if targeted:
                        verdicts.append(Target(what, False, "error"))
                    continue
                rate = r["failed"] / r["sent"] if r["sent"] else 0.0
                ok = r["failed"] <= BANK_MAX_FAILED * r["sent"]
                target = "–"
                if targeted:
                    target = f"≤ {BANK_MAX_FAILED:.0%} failed: {verdict(ok)}"
                    verdicts.append(Target(what, ok, f"{r['failed']}/{r['sent']} failed, {rate:.1%}; "
                                           f"{r['acked'] / r['wall_s']:.1f} transfers/s"))
                att = r["attempts"]
                sec.rows.append([
                    label, str(writers), how, f"{r['acked']} / {r['sent']}", f"{r['failed']} ({rate:.1%})",
                    f"{r['acked'] / r['wall_s']:.1f}", f"{fmt_s(p50(r['latency']))} / {fmt_s(quantile(r['latency'], 0.9))}",
                    f"{p50(att):.0f} / {max(att)}" if att else "–",
                    "exact" if r["exact"] else f"MISMATCH (total {r['total']:,} of {r['total_want']:,})", target,
                ])
                if r["errors"]:
                    sec.notes.append(f"{label}, {writers} writers, {how}: failures raised {r['errors']}.")
        runs = res.get(name, {})
        ratios = [f"{w} writer{'s' if w > 1 else ''} {fmt_x(tx['acked'] / tx['wall_s'] / (one['acked'] / one['wall_s']))}"
                  for w in cfg.bank_writers
                  for tx, one in [(runs.get(f"transaction-{w}", {}), runs.get(f"single-{w}", {}))]
                  if tx.get("acked") and one.get("acked")]
        attempts = [a for w in cfg.bank_writers for a in runs.get(f"transaction-{w}", {}).get("attempts", [])]
        if ratios:
            sec.notes.append(f"{label}: transfers/s as catalog transactions ÷ as 2 single-table commits: "
                             f"{', '.join(ratios)}.")
        if attempts:
            bound = CommitOptions()
            sec.notes.append(
                f"{label}: the most commit attempts a transfer took: {max(attempts)} (mean {np.mean(attempts):.1f}), "
                f"within the default bound of {bound.max_attempts} attempts / {bound.max_seconds:.0f} s "
                f"(backoff: full jitter from {bound.backoff_min_ms:g} ms, doubling, at most {bound.backoff_max_ms:g} ms).")
    return sec, verdicts


@case("catalog_tx", heavy=True, title=SECTION_TITLE, sizes=Config,
      quick=dict(rounds=5, warm=1, breakdown=2, writers=2, txs=4, bank_writers=(1, BANK_TARGET_WRITERS), transfers=2),
      tiny=dict(rounds=3, writers=2, txs=3), only={"catalogs": tuple(CATALOGS)},
      needs=(postgres(),), versions=("lamina", "pyarrow"))
def catalog_tx(run: Run) -> Report:
    """Catalog transactions on SQLite and PostgreSQL: latency, racing writers, the bank."""
    cfg, ws, names = run.sizes, run.ws, run.only("catalogs")
    cats = Catalogs(ws)
    raw: dict = {"latency": {}, "race": {}, "bank": {}}
    try:
        for name in names:
            label = CATALOG_LABEL[name]
            for part, bench in (("latency", lambda: bench_latency(cats.new(name), cfg)),
                                ("race", lambda: bench_race(ws, cats.new(name), cfg, name))):
                try:
                    raw[part][name] = bench()
                    if part == "latency":
                        lat = raw[part][name]["lat"]
                        say(f"{label} latency p50: " + ", ".join(f"{k} {fmt_s(p50(v))}" for k, v in lat.items()))
                    else:
                        v = raw[part][name]["verify"]
                        say(f"{label} race: {v['acked']} acked, {v['failed']} failed, {v['lost']} lost, "
                            f"{v['acked'] / raw[part][name]['wall_s']:.1f} commits/s")
                except Exception as e:  # noqa: BLE001
                    log_error(f"catalog_tx/{part}/{name}", e)
                    raw[part][name] = {"error": err_text(e)}
                    say(f"{label} {part}: {raw[part][name]['error']}")
            raw["bank"][name] = {}
            for writers in cfg.bank_writers:
                for mode in BANK_MODES:
                    key = f"{mode}-{writers}"
                    try:
                        r = raw["bank"][name][key] = bench_bank(ws, cats.new(name), writers, mode, cfg, name)
                        say(f"{label} bank, {writers} writers, {BANK_MODES[mode]}: {r['acked']}/{r['sent']} acked, "
                            f"{r['acked'] / r['wall_s']:.1f} transfers/s, balances {'exact' if r['exact'] else 'WRONG'}")
                    except Exception as e:  # noqa: BLE001
                        log_error(f"catalog_tx/bank/{name}/{key}", e)
                        raw["bank"][name][key] = {"error": err_text(e)}
                        say(f"{label} bank {key}: {raw['bank'][name][key]['error']}")
    finally:
        cats.close()
    lsec, lv = latency_section(cfg, raw["latency"], names)
    lsec.notes += breakdown_notes(raw["latency"], names)
    rsec, rv = race_section(cfg, raw["race"], names)
    bsec, bv = bank_section(cfg, raw["bank"], names)
    facts = []
    if cats.pg_start_s is not None:
        facts.append(f"PostgreSQL server (tests/support/pgserver.py, fsync off) started in {fmt_s(cats.pg_start_s)}, "
                     "untimed; SQLite catalog: a file in a temp dir (WAL, synchronous=FULL).")
    return Report(title=SECTION_TITLE, facts=facts, targets=lv + rv + bv, sections=[lsec, rsec, bsec], raw=raw)
