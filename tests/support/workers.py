"""Subprocess workers for the race, crash and S3 tests (run as a script, never imported by workers).

Usage: ``python tests/support/workers.py '<json spec>'``. The spec names a ``mode`` and its
parameters. Race workers print ``READY`` once the table is open, then wait for a
line on stdin (a start barrier, so every writer really races), then run and
print one JSON result line. Crash workers kill themselves with SIGKILL at the
chosen point of a commit after writing a marker file.

The parent side (``spawn_workers`` / ``run_crash_worker``) is imported by the tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = ["manifests-written", "before-publish", "published", "hinted"]
# The SQL coordinator adds "swapped": after the catalog row's compare-and-swap, before the
# version manifest is published under its final name.


# --- data shared by workers and tests -------------------------------------------------


def batch(writer: int, seq: int, rows: int, k_base: int | None = None, k_in: int | None = None) -> Any:
    """``rows`` rows tagged (writer, seq, i), with k = k_base + i, except k = k_in for the last row if given."""
    import pyarrow as pa

    ks = [(k_base if k_base is not None else 0) + i for i in range(rows)]
    if k_in is not None:
        ks[-1] = k_in
    return pa.table(
        {
            "writer": pa.array([writer] * rows, pa.int32()),
            "seq": pa.array([seq] * rows, pa.int32()),
            "i": pa.array(list(range(rows)), pa.int32()),
            "k": pa.array(ks, pa.int64()),
        }
    )


def schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("writer", pa.int32()),
            pa.field("seq", pa.int32()),
            pa.field("i", pa.int32()),
            pa.field("k", pa.int64()),
        ]
    )


# --- worker side ---------------------------------------------------------------------------


def _barrier() -> None:
    print("READY", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "GO":
        sys.exit(f"no GO from the parent (got {line!r})")


def _open(spec: dict[str, Any]) -> Any:
    """The table by path, or through a catalog when the spec names one (``catalog``, ``identifier``);
    a handle on branch ``branch`` if the spec names one."""
    import lamina

    if spec.get("catalog"):
        t = lamina.load_catalog(spec["catalog"]).load_table(spec["identifier"])
    else:
        t = lamina.open_table(spec["uri"], storage_options=spec.get("storage_options"))
    return t.branch(spec["branch"]) if spec.get("branch") else t


def _stopped(spec: dict[str, Any]) -> bool:
    """Whether every file ``until`` names exists: the workers of the race that create them
    are done (a worker that keeps going until then, at most its bounded number of steps,
    overlaps all of their work)."""
    until = spec.get("until") or []
    return bool(until) and all(os.path.exists(p) for p in until)


def _race_append(spec: dict[str, Any]) -> dict[str, Any]:
    import pyarrow.compute as pc

    import lamina

    t = _open(spec)
    w, rows = spec["writer"], spec["rows"]
    outside_step = spec.get("outside_step")  # overwrite race: k outside the predicate, plus one row inside
    _barrier()
    acked = []
    for seq in range(spec["n"]):
        if _stopped(spec):
            break
        if outside_step is None:
            data = batch(w, seq, rows)
        else:
            data = batch(w, seq, rows, k_base=seq * outside_step, k_in=spec["k_in_base"] + seq)
        v = t.append(data).version
        acked.append([seq, v])
        if spec.get("read_back"):
            # Read-your-writes at the version just committed, then at the latest version:
            # every acknowledged row outside the overwrite range is still there, once.
            got = t.scan(where=f"seq = {seq}", version=v).to_arrow()
            if got.filter(pc.equal(got.column("writer"), w)).num_rows != rows:
                sys.exit(f"append {seq} committed as version {v} but does not read back")
            latest = t.refresh().scan(where=f"k < {spec['k_in_base']}").to_arrow()
            seen = sorted(zip(latest.column("seq").to_pylist(), latest.column("i").to_pylist()))
            if seen != [(s, i) for s in range(seq + 1) for i in range(rows - 1)]:
                sys.exit(f"after append {seq}: acknowledged rows outside the range changed at version {t.version}")
    return {"acked": acked}


def _race_overwrite(spec: dict[str, Any]) -> dict[str, Any]:
    import lamina

    t = lamina.open_table(spec["uri"], storage_options=spec.get("storage_options"))
    w, rows = spec["writer"], spec["rows"]
    _barrier()
    acked = []
    for seq in range(spec["n"]):
        data = batch(w, seq, rows, k_base=spec["k_in_base"] + 100 * seq)
        v = t.overwrite(data, where=spec["where"]).version
        acked.append([seq, v])
    return {"acked": acked}


def _race_delete(spec: dict[str, Any]) -> dict[str, Any]:
    """Delete ``k IN (step's keys)`` once per step (until ``until`` exists, if given); several
    deleters share the same files."""
    import lamina

    t = lamina.open_table(spec["uri"], storage_options=spec.get("storage_options"))
    _barrier()
    acked = []
    for seq, keys in enumerate(spec["steps"]):
        if _stopped(spec):
            break
        v = t.delete(f"k IN ({', '.join(str(k) for k in keys)})", mode=spec.get("delete_mode")).version
        acked.append([seq, v])
    return {"acked": acked}


def _race_update(spec: dict[str, Any]) -> dict[str, Any]:
    """Set ``seq`` of the row ``where`` selects to its step's marker, once per step
    (``steps``: ``[where, marker]``), in ``delete_mode``; reports ``[step, version]``."""
    t = _open(spec)
    _barrier()
    acked = []
    for step, (where, marker) in enumerate(spec["steps"]):
        acked.append([step, t.update(where, set={"seq": str(marker)}, mode=spec.get("delete_mode")).version])
    return {"acked": acked}


def _race_append_compact(spec: dict[str, Any]) -> dict[str, Any]:
    """``n`` appends of ``batch(writer, seq, rows)``, compacting this writer's files after
    every ``every``-th, and the whole table after the last; reports the appends as
    ``[seq, version]`` and the compactions' versions (None: nothing to compact)."""
    t = _open(spec)
    w = spec["writer"]
    _barrier()
    acked, compacted = [], []
    for seq in range(spec["n"]):
        acked.append([seq, t.append(batch(w, seq, spec["rows"])).version])
        if (seq + 1) % spec["every"] == 0:
            compacted.append(t.maintenance.compact(where=f"writer = {w}").version)
    compacted.append(t.maintenance.compact().version)
    return {"acked": acked, "compacted": compacted}


def _race_publish(spec: dict[str, Any]) -> dict[str, Any]:
    """Write-audit-publish ``len(steps)`` times on main: make branch ``<prefix>-<seq>`` from
    main's latest, append ``batch(writer, seq, rows)`` to it, delete the rows ``where`` selects
    (each step's ``[where]`` or ``[]``), publish it into main and delete it. Reports
    ``[seq, version, how]`` per step: how the publish landed (its summary's ``publish``), or
    version None and how ``["conflict", files]`` if it was refused as a PublishConflict.
    Creates the file ``done`` names when it is done (``until`` of the workers it races)."""
    from lamina.errors import PublishConflict

    t = _open(spec)
    w = spec["writer"]
    _barrier()
    out = []
    for seq, where in enumerate(spec["steps"]):
        name = f"{spec['prefix']}-{seq}"
        b = t.branches.create(name)
        b.append(batch(w, seq, spec["rows"]))
        for clause in where:
            b.delete(clause)
        try:
            v = t.branches.publish(name).version
            out.append([seq, v, t.log.load(v).summary["publish"]])
        except PublishConflict as e:
            out.append([seq, None, ["conflict", e.files]])
        t.branches.delete(name)
    with open(spec["done"], "w"):
        pass
    return {"acked": out}


def _race_expiring_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """``n`` appends of ``batch(writer, seq, rows)``, each followed by an expiry of every
    version but the newest with no reader grace (what a tag racing it must survive).
    Creates the file ``done`` names when it is done."""
    from datetime import timedelta

    t = _open(spec)
    w = spec["writer"]
    _barrier()
    acked = []
    for seq in range(spec["n"]):
        acked.append([seq, t.append(batch(w, seq, spec["rows"])).version])
        t.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    with open(spec["done"], "w"):
        pass
    return {"acked": acked}


def _race_names(spec: dict[str, Any]) -> dict[str, Any]:
    """Up to ``n`` tags (``kind`` "tag", of the latest version, read before an audit) or branches (``kind``
    "branch") named ``<prefix><i>``, until ``until``: each acknowledged [name, version],
    or refused [name, the error's class name] (an expired version, a name taken)."""
    from lamina.errors import BranchAlreadyExists, TagAlreadyExists, VersionNotFound

    t = _open(spec)
    _barrier()
    acked, refused = [], []
    for i in range(spec["n"]):
        if _stopped(spec):
            break
        name = f"{spec['prefix']}{i}"
        try:
            if spec["kind"] == "tag":
                # create_tag's steps with a read of the version between (an audit before
                # the tag): the window a slow store opens between reading the latest
                # version and the tag's write, in which others commit and expire
                vm = t.log.latest()
                t.scan(version=vm.version).to_arrow()
                acked.append([name, t.tag_store.create(name, vm, latest=vm).tagged_version])
            else:
                acked.append([name, t.branches.create(name).version])
        except (BranchAlreadyExists, TagAlreadyExists, VersionNotFound) as e:
            refused.append([name, type(e).__name__])
    return {"acked": acked, "refused": refused}


def _die(marker: str, what: str) -> None:
    with open(marker, "w") as f:
        f.write(what)
        f.flush()
        os.fsync(f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


def _crash(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one write and SIGKILL this process at ``spec['at']``."""
    import lamina
    import lamina.commit.committer as committer
    import lamina.data.writer as writer

    at, marker = spec["at"], spec["marker"]
    t = _open(spec)
    if at == "write-data":
        orig = writer._write_one

        def torn_write(io, path, data, compression, futures=None, *args, **kwargs):  # noqa: ANN001
            # Write the file (synchronously), leave it torn (half of it), die before any
            # manifest exists.
            size, footer = orig(io, path, data, compression, None, *args, **kwargs)
            local = io.local_path(path)
            with open(local, "r+b") as f:
                f.truncate(max(1, size // 2))
            _die(marker, f"write-data {path}")
            return size, footer  # pragma: no cover

        writer._write_one = torn_write
    else:

        def hook(step: str) -> None:
            if step == at:
                _die(marker, step)

        committer._step_hook = hook
    data = batch(spec["writer"], spec["seq"], spec["rows"], k_base=spec.get("k_base", 0))
    if spec.get("op") == "overwrite":
        t.overwrite(data, where=spec["where"])
    else:
        t.append(data)
    return {"error": f"not killed at {at}"}


def _stop_before_publish(spec: dict[str, Any]) -> dict[str, Any]:
    """Append once, stopping this process (SIGSTOP) right before its first version put: the
    parent commits and runs maintenance meanwhile, then continues it with SIGCONT."""
    import lamina.commit.committer as committer

    t = _open(spec)
    base = t.version

    def hook(step: str) -> None:
        if step == "before-publish" and committer._step_hook is hook:
            committer._step_hook = None  # only the first attempt
            os.kill(os.getpid(), signal.SIGSTOP)

    committer._step_hook = hook
    v = t.append(batch(spec["writer"], spec["seq"], spec["rows"])).version
    return {"version": v, "base": base}


def _schema_race(spec: dict[str, Any]) -> dict[str, Any]:
    """One schema-evolution step (``action``) racing others: schema changes, appends of
    ``batch`` rows in the schema the table had when opened (``append``: ``n`` of them, each
    acknowledged), a delete, or an append with ``schema_mode="merge"`` bringing column
    ``column``. Reports the versions acknowledged, or the error's type and text."""
    import pyarrow as pa

    from lamina.errors import LaminaError

    t = _open(spec)
    action, column = spec["action"], spec.get("column")
    types = {"int8": pa.int8(), "string": pa.string(), "int64": pa.int64()}
    _barrier()
    acked = []
    try:
        if action == "append":
            for seq in range(spec["n"]):
                acked.append([seq, t.append(batch(spec["writer"], seq, spec["rows"])).version])
        elif action == "add_column":
            acked.append(t.update_schema().add_column(column, types[spec["type"]]).commit().version)
        elif action == "rename_column":
            acked.append(t.update_schema().rename_column(column, spec["new_name"]).commit().version)
        elif action == "drop_column":
            acked.append(t.update_schema().drop_column(column).commit().version)
        elif action == "delete":
            acked.append(t.delete(spec["where"]).version)
        elif action == "append_merge":
            data = batch(spec["writer"], 0, spec["rows"])
            data = data.append_column(column, pa.array([f"{spec['writer']}-{i}" for i in range(spec["rows"])]))
            acked.append(t.append(data, schema_mode="merge").version)
        else:
            raise ValueError(action)
    except LaminaError as e:
        return {"acked": acked, "error": type(e).__name__, "message": str(e)}
    return {"acked": acked}


def _race_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Partition spec changes, each ``[[method, *args], ...]`` on ``update_spec()``; with
    ``plan_first`` the first change is planned before the start barrier (on the version
    opened), so changes of several such workers race on one base."""
    from lamina.errors import CommitConflict

    t = _open(spec)
    steps = spec["steps"]

    def build(calls: list[list[Any]]) -> Any:
        u = t.update_spec()
        for method, *args in calls:
            getattr(u, method)(*args)
        return u

    first = build(steps[0]) if spec.get("plan_first") else None
    _barrier()
    out = []
    for i, calls in enumerate(steps):
        u = first if i == 0 and first is not None else build(calls)
        try:
            out.append(u.commit().version)
        except CommitConflict as e:
            out.append(f"conflict: {e}")
    return {"versions": out}


# --- catalog transactions: rows moved between tables, snapshot readers, crashes ---------------
# Tables ``left`` and ``right`` hold the keys 0..n-1 once between them (``move_rows``), and
# ``ledger`` one row per move (``ledger_rows``): a key is in ``right`` iff it moved an odd
# number of times. Each move is one catalog transaction over the three tables.


def move_rows(keys: Any) -> Any:
    import pyarrow as pa

    return pa.table({"k": pa.array(list(keys), pa.int64())})


def ledger_rows(tx_id: str, mover: int, seq: int, k: int, src: str) -> Any:
    import pyarrow as pa

    return pa.table({
        "tx": pa.array([tx_id]), "mover": pa.array([mover], pa.int32()), "seq": pa.array([seq], pa.int32()),
        "k": pa.array([k], pa.int64()), "src": pa.array([src]),
    })


def queue_move(tx: Any, k: int, src: str, dst: str, ledger: str, mover: int, seq: int) -> None:
    """Queue the move of key ``k`` from table ``src`` to ``dst`` (and its ledger row) on ``tx``."""
    tx.table(src).delete(f"k = {k}")
    tx.table(dst).append(move_rows([k]))
    tx.table(ledger).append(ledger_rows(tx.id, mover, seq, k, src))


def _catalog_move(spec: dict[str, Any]) -> dict[str, Any]:
    """``n`` moves of a random key (``keys``, shared with the other movers) between the tables
    ``left`` and ``right``, one catalog transaction each (``isolation_level``, if given); a
    transaction refused by a conflict is replaced by a fresh one (at most ``attempts`` per move).
    The key's table is read through the transaction (the versions its changes apply to): under
    serializable isolation that read is what makes a concurrent move of the key a conflict, under
    snapshot isolation the delete of a row another transaction deleted first. After each commit
    it writes a byte to every FIFO of ``pulse`` (the readers'), closed at its end. Reports the
    acknowledged moves as ``[tx id, k, src, dst]`` and the number of fresh starts."""
    import random

    import lamina
    from lamina.errors import CatalogTransactionConflict, CommitRetriesExhausted

    cat = lamina.load_catalog(spec["catalog"])
    left, right, ledger = spec["tables"]
    rng = random.Random(spec["seed"])
    options = {"isolation_level": spec["isolation_level"]} if spec.get("isolation_level") else {}
    pulses = [open(p, "wb", buffering=0) for p in spec["pulse"]]  # blocks until each reader opened its end
    _barrier()
    acked, restarts = [], 0
    for seq in range(spec["n"]):
        for _ in range(spec["attempts"]):
            k = rng.choice(spec["keys"])
            tx = cat.transaction(**options)
            held = [tx.table(t).to_arrow(where=f"k = {k}").num_rows for t in (left, right)]
            if max(held) > 1:
                sys.exit(f"key {k} is duplicated: held {held} times by {left}, {right}")
            if sorted(held) != [0, 1]:
                # Each table is loaded when first named: a move between the two loads shows the
                # key in neither or both. Not one catalog state: start over.
                tx.abort()
                restarts += 1
                continue
            src, dst = (left, right) if held[0] else (right, left)
            queue_move(tx, k, src, dst, ledger, spec["writer"], seq)
            try:
                tx.commit()
            except (CatalogTransactionConflict, CommitRetriesExhausted):
                restarts += 1
                continue
            finally:
                for f in pulses:
                    f.write(b".")
            acked.append([tx.id, k, src, dst])
            break
    for f in pulses:
        f.close()
    return {"acked": acked, "restarts": restarts}


def _catalog_read(spec: dict[str, Any]) -> dict[str, Any]:
    """Catalog snapshots, each table of ``columns`` (table -> its columns to read) read at the
    snapshot's versions: one each time writers committed (paced by the FIFO ``pulse``, no
    polling), and a last one once every writer closed it (or died); at most ``max_snapshots``.
    Reports per snapshot its versions and each table's columns (``read``)."""
    import lamina

    cat = lamina.load_catalog(spec["catalog"])
    pulse = os.open(spec["pulse"], os.O_RDONLY)  # blocks until a writer opened its end
    _barrier()
    out = []
    for _ in range(spec["max_snapshots"]):
        last = not os.read(pulse, 4096)  # end of file: every writer is done, this snapshot sees all
        snap = cat.snapshot()
        read = {t: snap.to_arrow(t, columns=cols) for t, cols in spec["columns"].items()}
        out.append({"versions": snap.versions, "read": {t: t_.to_pydict() for t, t_ in read.items()}})
        if last:
            break
    return {"snapshots": out}


def _catalog_crash(spec: dict[str, Any]) -> dict[str, Any]:
    """One catalog transaction -- the move of key ``k`` from ``left`` to ``right`` with its
    ledger row, and table ``create`` created with ``k`` in it -- SIGKILLed at commit step
    ``at`` (after writing the transaction's id to ``marker``)."""
    import threading

    import lamina
    import lamina.commit.committer as committer

    cat = lamina.load_catalog(spec["catalog"])
    left, right, ledger = spec["tables"]
    tx = cat.transaction()
    queue_move(tx, spec["k"], left, right, ledger, 0, 0)
    tx.create_table(spec["create"], move_rows([]).schema).append(move_rows([spec["k"]]))

    dying = threading.Lock()  # "published" comes from one thread per table: die once

    def hook(step: str) -> None:
        if step == spec["at"]:
            with dying:
                _die(spec["marker"], tx.id)

    committer._step_hook = hook
    tx.commit()
    return {"error": f"not killed at {spec['at']}"}


# --- catalog transactions: a bank -----------------------------------------------------------
# Tables of accounts (``bank_rows``: acct, bal); each transfer is one catalog transaction over
# every table (``transfer_legs``): an amount taken from one account of one table and paid into
# an account of each other table, as updates whose ``set`` reads the balance (``bal - 7``), so
# the money in all tables together never changes.


def bank_rows(accounts: int, balance: int) -> Any:
    import pyarrow as pa

    return pa.table({"acct": pa.array(range(accounts), pa.int64()), "bal": pa.array([balance] * accounts, pa.int64())})


def transfer_legs(rng: Any, tables: list[str], accounts: int) -> list[list[Any]]:
    """``[table, acct, delta]`` per table: one account of a random table pays what one account
    of each other table receives (random amounts)."""
    payer = rng.randrange(len(tables))
    legs = [[t, rng.randrange(accounts), rng.randint(1, 100)] for i, t in enumerate(tables) if i != payer]
    legs.insert(payer, [tables[payer], rng.randrange(accounts), -sum(d for _, _, d in legs)])
    return legs


def leg_update(acct: int, delta: int) -> tuple[str, dict[str, str]]:
    """The update (where, set) that pays ``delta`` into account ``acct`` (takes it if negative)."""
    return f"acct = {acct}", {"bal": f"bal {'+' if delta > 0 else '-'} {abs(delta)}"}


def queue_transfer(tx: Any, legs: list[list[Any]]) -> None:
    """Queue a transfer's legs on catalog transaction ``tx``."""
    for table, acct, delta in legs:
        tx.table(table).update(*leg_update(acct, delta))


def _catalog_bank(spec: dict[str, Any]) -> dict[str, Any]:
    """``n`` transfers between the tables ``tables`` (``accounts`` each), one catalog
    transaction each (``isolation_level``, if given), never retried by hand: a transfer that
    raises a Lamina error is counted failed (any other error ends the worker). Each is written to
    the JSON-lines file ``journal`` before its commit (``intent``, with the transaction's id and
    legs) and after it (``acked``, or ``failed`` with the error's class), so a writer killed
    mid-run leaves the id of the transfer whose outcome it never learnt. With ``pause_at``
    ([step, n]) it stops the n-th time a commit reaches that step and prints ``paused``: the
    parent's cue to SIGKILL it there. After each transfer it writes a byte to every FIFO of
    ``pulse`` (the readers'). Reports the journal's counts."""
    import random
    import threading

    import lamina
    import lamina.commit.committer as committer
    from lamina.errors import LaminaError

    cat = lamina.load_catalog(spec["catalog"])
    rng = random.Random(spec["seed"])
    options = {"isolation_level": spec["isolation_level"]} if spec.get("isolation_level") else {}
    pulses = [open(p, "wb", buffering=0) for p in spec["pulse"]]  # blocks until each reader opened its end
    journal = open(spec["journal"], "w", buffering=1)  # a line reaches the file as it is written
    if spec.get("pause_at"):
        at, times = spec["pause_at"]
        seen = []

        def hook(name: str) -> None:
            if name == at:
                seen.append(name)
                if len(seen) == times:
                    print("paused", flush=True)
                    threading.Event().wait()  # until the kill (every commit thread stops here)

        committer._step_hook = hook
    _barrier()
    counts = {"acked": 0, "failed": 0}
    for seq in range(spec["n"]):
        legs = transfer_legs(rng, spec["tables"], spec["accounts"])
        tx = cat.transaction(**options)
        queue_transfer(tx, legs)
        journal.write(json.dumps({"intent": tx.id, "seq": seq, "legs": legs}) + "\n")
        try:
            tx.commit()
        except LaminaError as e:
            journal.write(json.dumps({"failed": tx.id, "error": type(e).__name__, "message": str(e)[:500]}) + "\n")
            counts["failed"] += 1
        else:
            journal.write(json.dumps({"acked": tx.id, "attempts": tx.attempts}) + "\n")
            counts["acked"] += 1
        for f in pulses:
            f.write(b".")
    for f in pulses:
        f.close()
    return counts


def read_journal(path: str) -> list[dict[str, Any]]:
    """A bank writer's transfers, in order: ``{"id", "legs", "outcome"}`` with the outcome
    ``acked``, ``failed`` (and ``error``, ``message``) or None (never learnt: the writer died)."""
    out: dict[str, dict[str, Any]] = {}
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # (a line cut short by the kill)
            rec = json.loads(line)
            if "intent" in rec:
                out[rec["intent"]] = {"id": rec["intent"], "legs": rec["legs"], "outcome": None}
            elif "acked" in rec:
                out[rec["acked"]].update(outcome="acked", attempts=rec["attempts"])
            else:
                out[rec["failed"]].update(outcome="failed", error=rec["error"], message=rec["message"])
    return list(out.values())


MODES = {
    "race_spec": _race_spec,
    "schema_race": _schema_race,
    "race_append": _race_append, "race_overwrite": _race_overwrite, "race_delete": _race_delete, "crash": _crash,
    "race_update": _race_update, "race_append_compact": _race_append_compact,
    "stop_before_publish": _stop_before_publish, "race_publish": _race_publish,
    "race_expiring_writer": _race_expiring_writer, "race_names": _race_names,
    "catalog_move": _catalog_move, "catalog_read": _catalog_read, "catalog_crash": _catalog_crash,
    "catalog_bank": _catalog_bank,
}


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = MODES[spec["mode"]](spec)
    print(json.dumps(result), flush=True)


# --- parent side -----------------------------------------------------------------------------


def _env() -> dict[str, str]:
    """Workers import the same lamina as the test process, whatever the cwd."""
    import lamina

    root = os.path.dirname(os.path.dirname(os.path.abspath(lamina.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _cmd(spec: dict[str, Any]) -> list[str]:
    return [sys.executable, os.path.join(HERE, "workers.py"), json.dumps(spec)]


def spawn_workers(
    specs: list[dict[str, Any]], logdir: str, timeout: float = 120.0, cmd: Any = None,
    kill: tuple[int, str, int] | None = None,
) -> list[dict[str, Any] | None]:
    """Start one process per spec, release them together, return their JSON results.

    ``cmd(spec)`` is the worker's command line (default: this script); the worker
    prints READY, waits for GO on stdin, and ends with one JSON line. ``kill``: (worker,
    line, n): that worker is SIGKILLed as soon as it has printed ``line`` ``n`` times (its
    result is None; AssertionError if it ends first). Raises AssertionError (with the
    worker's stderr) if any other worker fails, or if they are not done within ``timeout``
    seconds of the start.
    """
    import select
    import time

    cmd = cmd or _cmd
    env = _env()
    procs, errs = [], []
    try:
        for n, spec in enumerate(specs):
            err = open(os.path.join(logdir, f"worker-{n}.stderr"), "w+")
            errs.append(err)
            procs.append(
                subprocess.Popen(
                    cmd(spec), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, text=True
                )
            )
        for n, p in enumerate(procs):  # start barrier: every worker has opened the table
            line = p.stdout.readline()  # type: ignore[union-attr]
            if line.strip() != "READY":
                raise AssertionError(f"worker {n} did not start: {line!r}\n{_stderr(errs[n])}")
        deadline = time.monotonic() + timeout
        for p in procs:
            p.stdin.write("GO\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]  # communicate() closes it
        if kill is not None:
            victim, cue, times = kill
            fd, seen, buf = procs[victim].stdout.fileno(), 0, b""  # type: ignore[union-attr]  # (nothing buffered after READY)
            while seen < times:
                if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    raise AssertionError(f"worker {victim} did not print {cue!r} {times} times in {timeout} s")
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"worker {victim} ended before it printed {cue!r} {times} times:\n{_stderr(errs[victim])}")
                buf += chunk
                *lines, buf = buf.split(b"\n")
                seen += sum(1 for x in lines if x.decode() == cue)
            procs[victim].kill()
            procs[victim].wait(timeout=10)
        results: list[dict[str, Any] | None] = []
        for n, p in enumerate(procs):
            if kill is not None and n == kill[0]:
                results.append(None)
                continue
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if p.returncode != 0:
                raise AssertionError(f"worker {n} exited with {p.returncode}:\n{_stderr(errs[n])}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            for pipe in (p.stdin, p.stdout):  # a killed worker's: communicate() never closed them
                if pipe is not None and not pipe.closed:
                    pipe.close()
        for e in errs:
            e.close()


def _stderr(f: Any) -> str:
    f.flush()
    f.seek(0)
    return f.read()[-5000:]


def run_crash_worker(spec: dict[str, Any], timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run a crash worker (mode ``crash`` unless the spec names another) to its end."""
    return subprocess.run(_cmd({"mode": "crash", **spec}), capture_output=True, text=True, env=_env(), timeout=timeout)


if __name__ == "__main__":
    main()
