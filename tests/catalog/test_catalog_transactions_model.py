"""A model test of catalog transactions and snapshots (SQLite).

Random sequences of multi-table transactions (reads through the transaction, then appends,
deletes and updates over several tables, creates, drops; some aborted by an exception, some
with another writer's commit landing meanwhile on a table they change or read), single-table
commits and catalog snapshots, against a plain dict per table. Both isolation levels:

- serializable: the transaction's deletes and updates apply after the concurrent commit (on
  its rows); it fails only if the concurrent commit deleted, rewrote or added rows one of its
  reads could see (a range of ids), and the transaction commits something;
- snapshot: its reads are never checked; it fails when one of its deletes or updates selects,
  in the table as it loaded it, a row the concurrent commit deleted or rewrote.

Every read through a transaction returns the model's rows at its start; every snapshot
reads back exactly the model's state at the moment it was taken, then and at the end; the
catalog always reads the model's current state; a failed or aborted transaction changes
nothing.
"""

from __future__ import annotations

import copy
import tempfile

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.errors import CatalogTableNotFound, CatalogTransactionConflict, TableNotFound, VersionNotFound

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


class Aborted(Exception):
    pass


class Model:
    """Each table's rows (id -> v), and the next unused id."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, str]] = {}
        self.next_id = 0

    def new_ids(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    @staticmethod
    def apply(rows: dict[int, str], op: tuple) -> None:
        kind = op[0]
        if kind == "append":
            rows.update((i, op[2]) for i in op[1])
        elif kind == "delete":
            for i in [i for i in rows if op[1] <= i < op[2]]:
                del rows[i]
        else:  # update
            for i in rows:
                if op[1] <= i < op[2]:
                    rows[i] = op[3]


def run(target, op: tuple) -> None:
    """Apply ``op`` to a table or a table's changes in a transaction (the same methods)."""
    kind = op[0]
    if kind == "append":
        target.append(pa.table({"id": pa.array(op[1], pa.int64()), "v": [op[2]] * len(op[1])}, schema=SCHEMA))
    elif kind == "delete":
        target.delete(f"id >= {op[1]} AND id < {op[2]}")
    else:
        target.update(f"id >= {op[1]} AND id < {op[2]}", {"v": f"'{op[3]}'"})


def selected(rows: dict[int, str], op: tuple) -> set[int]:
    """The rows a delete or an update selects (none for an append)."""
    return {i for i in rows if op[1] <= i < op[2]} if op[0] != "append" else set()


def touched(rows: dict[int, str], op: tuple) -> set[int]:
    """The ids whose rows ``op`` deletes, rewrites or adds."""
    return set(op[1]) if op[0] == "append" else selected(rows, op)


def changes_something(rows: dict[int, str], ops: list[tuple]) -> bool:
    """Whether ``ops`` applied in order to ``rows`` add, delete or rewrite a row."""
    rows = dict(rows)
    for op in ops:
        if touched(rows, op):
            return True
        Model.apply(rows, op)
    return False


def content(t: pa.Table) -> dict[int, str]:
    return dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))


@st.composite
def append_op(draw, model: Model, step: int):
    return ("append", model.new_ids(draw(st.integers(1, 3))), f"a{step}")


@st.composite
def id_range(draw, model: Model):
    lo = draw(st.integers(0, model.next_id + 1))
    return lo, lo + draw(st.integers(1, 4))


@st.composite
def table_op(draw, model: Model, step: int):
    kind = draw(st.sampled_from(["append", "append", "delete", "update"]))
    if kind == "append":
        return draw(append_op(model, step))
    lo, hi = draw(id_range(model))
    return ("delete", lo, hi) if kind == "delete" else ("update", lo, hi, f"u{step}")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_transactions_and_snapshots_follow_the_model(data):
    root = tempfile.mkdtemp(prefix="lamina-txmodel-")
    uri = f"sqlite:///{root}/catalog.db"
    cat, other = lamina.load_catalog(uri), None
    try:
        cat.create_namespace("ns")
        other = lamina.load_catalog(uri)  # another writer's handle
        model = Model()
        for name in ("ns.t0", "ns.t1"):  # with a few rows each, for changes and reads to select
            first = ("append", model.new_ids(4), "a")
            run(cat.create_table(name, SCHEMA), first)
            model.tables[name] = {}
            model.apply(model.tables[name], first)
        snapshots: list[tuple] = []  # (snapshot, the model's tables then)
        purged: set[str] = set()
        created = 0

        for step in range(data.draw(st.integers(3, 9), label="steps")):
            existing = sorted(model.tables)
            kind = data.draw(st.sampled_from(["tx", "tx", "tx", "single", "snapshot"] if existing else ["tx"]))
            if kind == "snapshot":
                snap = cat.snapshot()
                snapshots.append((snap, copy.deepcopy(model.tables)))
            elif kind == "single":
                ident = data.draw(st.sampled_from(existing))
                op = data.draw(table_op(model, step))
                run(cat.load_table(ident), op)
                model.apply(model.tables[ident], op)
            else:
                isolation = data.draw(st.sampled_from(["serializable", "snapshot"]))
                changed = data.draw(st.lists(st.sampled_from(existing), unique=True, max_size=3)) if existing else []
                ops = {i: data.draw(st.lists(table_op(model, step), min_size=1, max_size=2)) for i in changed}
                # reads through the transaction, before its changes: a range of ids of a table
                reads = {i: data.draw(id_range(model)) for i in
                         (data.draw(st.lists(st.sampled_from(existing), unique=True, max_size=2)) if existing else [])}
                new = None
                if data.draw(st.booleans()) or not changed:
                    created += 1
                    new = (f"ns.n{created}", data.draw(st.lists(append_op(model, step), max_size=1)))
                droppable = [i for i in existing if i not in changed and i not in reads]
                drop = data.draw(st.sampled_from(droppable)) if droppable and data.draw(st.booleans()) else None
                purge = data.draw(st.booleans())
                involved = sorted(set(changed) | set(reads))
                concurrent = data.draw(st.sampled_from(involved)) if involved and data.draw(st.booleans()) else None
                concurrent_op = None
                if concurrent is not None:
                    # often on the rows the transaction's reads or changes select, so that they clash
                    ranges = [op[1:3] for op in ops.get(concurrent, []) if op[0] != "append"] + (
                        [reads[concurrent]] if concurrent in reads else [])
                    if ranges and data.draw(st.booleans()):
                        lo, hi = data.draw(st.sampled_from(ranges))
                        concurrent_op = data.draw(st.sampled_from([("delete", lo, hi), ("update", lo, hi, f"c{step}")]))
                    else:
                        concurrent_op = data.draw(table_op(model, step))
                abort = data.draw(st.booleans())
                clash = False
                if concurrent is not None and not abort:
                    before = model.tables[concurrent]
                    if isolation == "snapshot":
                        # A delete or update that selects, in the table as the transaction loaded
                        # it, a row the concurrent commit deleted or rewrote fails it (the second
                        # delete of a row fails, as in Delta Lake and DuckLake).
                        clash = any(selected(before, op) & selected(before, concurrent_op) for op in ops.get(concurrent, []))
                    elif concurrent in reads:
                        # A read that could see a row the concurrent commit deleted, rewrote or
                        # added fails it: at once for a table it changes, else if it commits at all.
                        lo, hi = reads[concurrent]
                        seen = any(lo <= i < hi for i in touched(before, concurrent_op))
                        after = dict(before)
                        Model.apply(after, concurrent_op)
                        commits = new is not None or drop is not None or any(
                            changes_something(after if i == concurrent else model.tables[i], ops[i]) for i in changed)
                        clash = seen and (concurrent in changed or commits)
                tx = cat.transaction(isolation_level=isolation)
                try:
                    with tx:
                        for ident, (lo, hi) in reads.items():
                            got = content(tx.table(ident).to_arrow(where=f"id >= {lo} AND id < {hi}"))
                            assert got == {i: v for i, v in model.tables[ident].items() if lo <= i < hi}, (ident, lo, hi)
                        for ident, table_ops in ops.items():
                            for op in table_ops:
                                run(tx.table(ident), op)
                        if new is not None:
                            changes = tx.create_table(new[0], SCHEMA)
                            for op in new[1]:
                                run(changes, op)
                        if drop is not None:
                            tx.drop_table(drop, purge=purge)
                        if concurrent is not None:  # lands first: the transaction is re-applied after it
                            run(other.load_table(concurrent), concurrent_op)
                            model.apply(model.tables[concurrent], concurrent_op)
                        if abort:
                            before = {i.identifier: i.version for i in cat.tables()}
                            raise Aborted()
                except Aborted:
                    assert tx.state == "aborted" and not cat.transaction_committed(tx.id)
                    assert {i.identifier: i.version for i in cat.tables()} == before
                except CatalogTransactionConflict as e:
                    assert clash, e  # and the checks below: nothing of it landed
                    assert e.table == concurrent
                    assert tx.state == "aborted" and not cat.transaction_committed(tx.id)
                else:
                    assert not clash
                    assert tx.state == "committed"
                    for ident, table_ops in ops.items():
                        for op in table_ops:
                            model.apply(model.tables[ident], op)
                    if new is not None:
                        model.tables[new[0]] = {}
                        for op in new[1]:
                            model.apply(model.tables[new[0]], op)
                    if drop is not None:
                        del model.tables[drop]
                        if purge:
                            purged.add(drop)
            # the catalog reads the model's state, and every snapshot its own
            assert {i.identifier for i in cat.tables()} == set(model.tables)
            for ident, want in model.tables.items():
                assert content(cat.load_table(ident).scan().to_arrow()) == want, (step, ident)
            if snapshots:
                check(*snapshots[-1], purged)
        for snap, tables in snapshots:
            check(snap, tables, purged)
    finally:
        cat.close()
        if other is not None:
            other.close()


def check(snap, tables: dict[str, dict[int, str]], purged: set[str]) -> None:
    assert set(snap.versions) == set(tables)
    for ident, want in tables.items():
        if ident in purged:  # its files are gone: a typed error, never wrong rows
            with pytest.raises((CatalogTableNotFound, TableNotFound, VersionNotFound)):
                snap.to_arrow(ident)
            continue
        assert content(snap.to_arrow(ident)) == want, ident
