"""A model test of catalog transactions and snapshots (SQLite).

Random sequences of multi-table transactions (appends, deletes and updates over several
tables, creates, drops, some aborted by an exception, some with another writer's commit
landing on one of their tables meanwhile, which fails them when both delete or update one
row), single-table commits and catalog snapshots,
against a plain dict per table. Every snapshot reads back exactly the model's state at the
moment it was taken, then and at the end; the catalog always reads the model's current
state; an aborted transaction changes nothing.
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


def content(t: pa.Table) -> dict[int, str]:
    return dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))


@st.composite
def append_op(draw, model: Model, step: int):
    return ("append", model.new_ids(draw(st.integers(1, 3))), f"a{step}")


@st.composite
def table_op(draw, model: Model, step: int):
    kind = draw(st.sampled_from(["append", "append", "delete", "update"]))
    if kind == "append":
        return draw(append_op(model, step))
    lo = draw(st.integers(0, model.next_id + 1))
    hi = lo + draw(st.integers(1, 4))
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
        for name in ("ns.t0", "ns.t1"):
            cat.create_table(name, SCHEMA)
            model.tables[name] = {}
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
                changed = data.draw(st.lists(st.sampled_from(existing), unique=True, max_size=3)) if existing else []
                ops = {i: data.draw(st.lists(table_op(model, step), min_size=1, max_size=2)) for i in changed}
                new = None
                if data.draw(st.booleans()) or not changed:
                    created += 1
                    new = (f"ns.n{created}", data.draw(st.lists(append_op(model, step), max_size=1)))
                droppable = [i for i in existing if i not in changed]
                drop = data.draw(st.sampled_from(droppable)) if droppable and data.draw(st.booleans()) else None
                purge = data.draw(st.booleans())
                concurrent = data.draw(st.sampled_from(changed)) if changed and data.draw(st.booleans()) else None
                concurrent_op = data.draw(table_op(model, step)) if concurrent else None
                abort = data.draw(st.booleans())
                # A delete or update of the transaction that selects, in the table as the
                # transaction loaded it, a row the concurrent commit deleted or rewrote fails
                # the transaction (as in Delta Lake: the second delete of a row fails).
                clash = concurrent is not None and not abort and any(
                    selected(model.tables[concurrent], op) & selected(model.tables[concurrent], concurrent_op)
                    for op in ops[concurrent])
                tx = cat.transaction()
                try:
                    with tx:
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
