"""Transactions: several changes as one version, re-applied as a unit, or nothing at all."""

from __future__ import annotations

import os
from concurrent.futures import Future

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.data import writer
from lamina.errors import InvalidArgument, TagAlreadyExists, TransactionAlreadyCommitted

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(ids, v="x"):
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.string())}, schema=SCHEMA)


def content(t) -> list[tuple]:
    got = t.scan().to_arrow().sort_by("id")
    return list(zip(got.column("id").to_pylist(), got.column("v").to_pylist()))


def data_files(t) -> set[str]:
    root = t.io.local_path("data")
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs} if root and os.path.isdir(root) else set()


@pytest.fixture
def table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(range(10)))
    return t


def test_several_changes_make_one_version_with_a_tag(table):
    before = table.version
    with table.transaction() as tx:
        tx.append(rows(range(10, 15), "new"))
        tx.delete("id < 3")
        tx.update("id = 5", {"v": "'five'"})
        tx.create_tag("eod")
    assert tx.version == before + 1 == table.version
    assert lamina.open_table(table.uri).version == before + 1  # one version, not four
    want = [(i, "five" if i == 5 else ("new" if i >= 10 else "x")) for i in range(3, 15)]
    assert content(table) == want
    assert table.tags.get("eod").tagged_version == tx.version
    assert content(lamina.open_table(table.uri, version="eod")) == want
    assert table.history(limit=1)[0]["operation"] == "transaction"
    assert table.history(limit=1)[0]["summary"]["operations"] == "append,delete,update"


def test_each_change_sees_the_ones_before_it(table):
    with table.transaction() as tx:
        tx.append(rows([100, 101]))
        tx.delete("id >= 100 AND id < 101")  # deletes a row appended in this transaction
        tx.update("id = 101", {"v": "'seen'"})
    assert content(table)[-1] == (101, "seen")
    assert 100 not in [i for i, _ in content(table)]
    # the file holding 100 never reached the version: the version's files hold exactly its rows
    assert table.scan().plan().record_count == len(content(table))


class _WriteOnWait(Future):
    """A store write that happens only when someone waits for it: the slowest disk there is."""

    def __init__(self, fn, args):  # noqa: ANN001
        super().__init__()
        self._call = (fn, args)

    def result(self, timeout=None):  # noqa: ANN001
        if not self.done():
            fn, args = self._call
            try:
                self.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001
                self.set_exception(e)
        return super().result(timeout)


class _LatePool:
    def submit(self, fn, *args):  # noqa: ANN001
        return _WriteOnWait(fn, args)


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_a_change_reads_rows_an_earlier_append_is_still_writing(table, monkeypatch, mode):
    """An append's file goes to storage while the transaction goes on; a later change that
    reads it (update, delete, merge) must find it there, however slow the store."""
    monkeypatch.setattr(writer, "_io_pool", _LatePool())
    with table.transaction() as tx:
        tx.append(rows([10, 11]))
        tx.update(where="id = 10", set={"v": "'u'"}, mode=mode)
        tx.delete("id = 11", mode=mode)
    assert content(table)[-1:] == [(10, "u")] and len(content(table)) == 11


def test_an_exception_commits_nothing_and_removes_what_was_written(table):
    before, files = table.version, data_files(table)
    with pytest.raises(RuntimeError, match="boom"):
        with table.transaction() as tx:
            tx.append(rows(range(50, 60)))
            tx.overwrite(rows([1], "o"), where="id = 1")
            assert data_files(table) > files  # written at once...
            raise RuntimeError("boom")
    assert lamina.open_table(table.uri).version == before
    assert content(table) == [(i, "x") for i in range(10)]
    assert data_files(table) == files  # ...and gone: no visible trace
    with pytest.raises(InvalidArgument, match="aborted"):
        tx.append(rows([1]))


def test_a_failing_change_fails_the_whole_transaction(table):
    before = table.version
    with pytest.raises(lamina.errors.SchemaMismatch):
        with table.transaction() as tx:
            tx.append(rows([77]))
            tx.update("id = 1", {"nope": "1"})
    assert lamina.open_table(table.uri).version == before
    assert 77 not in [i for i, _ in content(lamina.open_table(table.uri))]


def test_a_transaction_is_reapplied_as_a_unit_on_the_newest_version(table):
    other = lamina.open_table(table.uri)
    tx = table.transaction()
    tx.append(rows([200]))
    tx.delete("id < 5")
    other.append(rows([1, 2, 300]))  # lands first: the transaction's base is stale
    other.delete("id = 9")
    v = tx.commit().version
    assert v == other.version + 1
    # serial order: other's commits, then the whole transaction (its delete takes other's 1 and 2 too)
    assert [i for i, _ in content(lamina.open_table(table.uri))] == [5, 6, 7, 8, 200, 300]


def test_a_transaction_that_changes_nothing_commits_nothing(table):
    before = table.version
    with table.transaction() as tx:
        tx.delete("id > 1000")
    assert tx.version is None and lamina.open_table(table.uri).version == before
    with pytest.raises(InvalidArgument, match="no changes"):
        table.transaction().commit()


def test_tags_are_checked_before_anything_is_committed(table):
    table.tags.create("taken")
    before = table.version
    tx = table.transaction().append(rows([42]))
    with pytest.raises(TagAlreadyExists):
        tx.create_tag("taken")
    tx.abort()
    assert lamina.open_table(table.uri).version == before


def test_app_transactions_in_a_transaction_stay_idempotent(table):
    with table.transaction() as tx:
        tx.append(rows([500]), app_transaction=("job", 1))
        tx.delete("id = 0")
    with pytest.raises(TransactionAlreadyCommitted):
        table.transaction().append(rows([500]), app_transaction=("job", 1))
    assert [i for i, _ in content(table)].count(500) == 1


def test_merge_in_a_transaction(table):
    src = rows([1, 2, 99], "m")
    with table.transaction() as tx:
        assert tx.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute() is None
        tx.delete("id = 2")
    got = dict(content(table))
    assert got[1] == "m" and 2 not in got and got[99] == "m" and got[3] == "x"


# -- a model: random changes grouped into transactions, against a plain Python dict ----------

change = st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(0, 40), min_size=1, max_size=6, unique=True)),
    st.tuples(st.just("delete"), st.integers(0, 40), st.integers(0, 12)),
    st.tuples(st.just("update"), st.integers(0, 40), st.integers(0, 12)),
    st.tuples(st.just("overwrite"), st.integers(0, 40), st.integers(0, 12)),
)


@settings(max_examples=int(os.environ.get("LAMINA_TX_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.lists(change, min_size=1, max_size=4), min_size=1, max_size=4), st.booleans())
def test_transactions_match_a_model(tmp_path_factory, transactions, fail_last):
    t = lamina.create_table(str(tmp_path_factory.mktemp("m") / "t"), SCHEMA)
    model: dict[int, str] = {}
    versions = 0
    for n, changes in enumerate(transactions):
        failing = fail_last and n == len(transactions) - 1
        staged = dict(model)
        tx = t.transaction()
        for k, c in enumerate(changes):
            tag = f"t{n}.{k}"
            if c[0] == "append":
                new = [i for i in c[1] if i not in staged]  # ids stay unique: the model is a dict
                tx.append(rows(new, tag))
                staged.update({i: tag for i in new})
            else:
                lo, hi = c[1], c[1] + c[2]
                where = f"id >= {lo} AND id < {hi}"
                hit = [i for i in staged if lo <= i < hi]
                if c[0] == "delete":
                    tx.delete(where)
                    for i in hit:
                        del staged[i]
                elif c[0] == "update":
                    tx.update(where, {"v": f"'{tag}'"})
                    staged.update({i: tag for i in hit})
                else:
                    new = [i for i in range(lo, hi, 3)]
                    tx.overwrite(rows(new, tag), where=where)
                    for i in hit:
                        del staged[i]
                    staged.update({i: tag for i in new})
        if failing:
            tx.abort()
        else:
            before = t.version
            v = tx.commit().version
            if v is not None:
                versions += 1
                assert v == before + 1
            model = staged
        assert sorted(model.items()) == content(lamina.open_table(t.uri))
    assert lamina.open_table(t.uri).version == versions
