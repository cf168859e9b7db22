"""Multi-table catalog transactions and catalog snapshots on real SQLite and a real
PostgreSQL server (lamina.catalog.transaction).

Every kind of change in one transaction, checked against DuckDB running the same
statements on the same input; all-or-nothing under exceptions and under every kind of
concurrent change (a clash, an append, a drop, offline, a create); bad input refused
with a typed error and nothing changed; snapshots that pin versions, ``at=`` that is
all-or-nothing for a transaction, and committed-but-unpublished versions completed by
readers; maintenance at each step of the commit never deleting what the staged versions
reference.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.catalog.coordinator import SqlCoordinator
from lamina.commit import Change, CommitOptions, Operation, flush_hints, removed_of
from lamina.commit import committer
from lamina.errors import (
    CatalogError,
    CatalogTableAlreadyExists,
    CatalogTableNotFound,
    CatalogTransactionConflict,
    CommitConflict,
    CommitRetriesExhausted,
    InvalidArgument,
    InvalidIdentifier,
    NamespaceNotFound,
    StorageError,
    TableOffline,
    TransactionsUnsupported,
)
from lamina.maintenance import fsck
from lamina.spec.layout import PENDING_DIR

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
SQL_TYPES = {pa.int64(): "BIGINT", pa.string(): "VARCHAR"}


def rows(ids, v="x", schema=SCHEMA) -> pa.Table:
    ids = list(ids)
    cols = {"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.string())}
    for f in schema:
        if f.name not in cols:  # an added column: its value is the id times ten
            cols[f.name] = pa.array([i * 10 for i in ids], f.type)
    return pa.table(cols, schema=schema)


def as_rows(t: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)


class Oracle:
    """DuckDB tables that go through the same statements as the Lamina tables."""

    def __init__(self) -> None:
        self.db = duckdb.connect()

    def create(self, ident: str, data: pa.Table) -> None:
        cols = ", ".join(f"{f.name} {SQL_TYPES[f.type]}" for f in data.schema)
        self.db.execute(f"CREATE TABLE {self.name(ident)} ({cols})")
        self.insert(ident, data)

    def insert(self, ident: str, data: pa.Table) -> None:
        self.db.register("incoming", data)
        self.db.execute(f"INSERT INTO {self.name(ident)} SELECT * FROM incoming")
        self.db.unregister("incoming")

    def run(self, sql: str, **sources: pa.Table) -> None:
        for k, v in sources.items():
            self.db.register(k, v)
        self.db.execute(sql)

    def rows(self, ident: str) -> list[tuple]:
        return sorted(self.db.execute(f"SELECT * FROM {self.name(ident)}").fetchall(), key=repr)

    def tables(self) -> set[str]:
        return {r[0].replace("__", ".") for r in self.db.execute("SELECT table_name FROM duckdb_tables()").fetchall()}

    @staticmethod
    def name(ident: str) -> str:
        return ident.replace(".", "__")


class World:
    """A SQL catalog with namespace ``ns``, a DuckDB oracle, and what a test needs to tell
    that nothing changed: the catalog's rows and every file under the warehouse."""

    def __init__(self, uri: str, wh: str) -> None:
        self.uri = uri
        self.wh = wh
        self.cat = lamina.load_catalog(uri)
        self.cat.create_namespace("ns")
        self.oracle = Oracle()
        self._others: list = []

    def other(self):
        """The same catalog opened again: another process's view (closed with the world)."""
        cat = lamina.load_catalog(self.uri)
        self._others.append(cat)
        return cat

    def close(self) -> None:
        for cat in [self.cat, *self._others]:
            cat.close()
        self.oracle.db.close()

    def make(self, ident: str, ids=range(10), v: str = "x"):
        t = self.cat.create_table(ident, SCHEMA)
        data = rows(ids, v)
        t.append(data)
        self.oracle.create(ident, data)
        return t

    def location(self, ident: str) -> str:
        return self.cat.table_info(ident).location

    def files(self) -> set[str]:
        flush_hints()
        out = set()
        for d, _, fs in os.walk(self.wh):
            out.update(os.path.relpath(os.path.join(d, f), self.wh) for f in fs if not f.startswith("catalog.db"))
        return out

    def data_files(self, ident: str) -> set[str]:
        """The data files under ``ident``'s location (a refused commit may leave manifests,
        unreferenced, for orphan cleanup, as a single-table commit that lost does)."""
        prefix = os.path.relpath(self.location(ident), self.wh) + "/data/"
        return {f for f in self.files() if f.startswith(prefix)}

    def state(self) -> tuple:
        tables = [(i.identifier, i.uuid, i.version, i.location, i.online, i.schema_json) for i in self.cat.tables()]
        return tables, self.files()

    def check(self, *idents: str) -> None:
        """Each table (default: every table) reads exactly what the oracle holds, through the
        catalog and by path (its newest version is published)."""
        idents = idents or tuple(self.oracle.tables())
        assert {i.identifier for i in self.cat.tables()} >= set(idents)
        for ident in idents:
            want = self.oracle.rows(ident)
            t = self.cat.load_table(ident)
            assert as_rows(t.scan().to_arrow()) == want, ident
            assert lamina.open_table(t.uri).version == t.version, f"{ident}: its version is not published"
            assert not os.listdir(os.path.join(t.uri, PENDING_DIR)), f"{ident}: staged versions left behind"


@pytest.fixture
def world(catalog_uri, tmp_path):
    w = World(catalog_uri, str(tmp_path / "wh"))
    yield w
    w.close()


@pytest.fixture
def step_hook(monkeypatch):
    """``step_hook(fn)``: call ``fn(name)`` at each step of a commit (lamina.commit.committer.step)."""
    def install(fn):
        monkeypatch.setattr(committer, "_step_hook", fn)
    return install


def once_at(step_name: str, action):
    """A step hook running ``action()`` the first time the commit reaches ``step_name``; it
    records every step seen (``hook.seen``)."""
    def hook(name: str) -> None:
        hook.seen.append(name)
        if name == step_name and not hook.fired:
            hook.fired = True
            action()
    hook.seen, hook.fired = [], False
    return hook


class RemoveFiles(Operation):
    """Remove exactly these files: conflicts with a concurrent commit that removed one."""

    def __init__(self, entries):
        self.entries = entries

    def apply(self, base):
        return Change("delete-files", base.empty(), removed_of(self.entries))


# --- every kind of change ----------------------------------------------------------------------


def test_every_kind_of_change_commits_across_tables_at_once(world):
    cat, oracle = world.cat, world.oracle
    for name in "abcdexy":
        world.make(f"ns.{name}")
    before = {i.identifier: i.version for i in cat.tables()}
    x_loc, y_loc = world.location("ns.x"), world.location("ns.y")
    x_rows = oracle.rows("ns.x")
    # a Parquet file put under d's data/ by another tool, registered by add_files
    d_loc = world.location("ns.d")
    external = rows(range(200, 205), "ext")
    os.makedirs(os.path.join(d_loc, "data"), exist_ok=True)
    pq.write_table(external, os.path.join(d_loc, "data", "external-1.parquet"))
    added = pa.table({"path": ["data/external-1.parquet"],
                      "size": [os.path.getsize(os.path.join(d_loc, "data", "external-1.parquet"))],
                      "record_count": [5]})
    merge_src = rows([3, 4, 50], "m")
    wide = SCHEMA.append(pa.field("w", pa.int64()))

    with cat.transaction() as tx:
        a = tx.table("ns.a")
        a.append(rows(range(100, 105), "new"))
        a.delete("id IN (0, 2, 101)")  # also a row the transaction appended
        b = tx.table("ns.b")
        b.overwrite(rows([0, 1], "o"), where="id < 3")
        b.update("id = 4", {"v": "'u'"})
        tx.table("ns.c").merge(merge_src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
        d = tx.table("ns.d")
        d.add_files(added)
        d.create_tag("eod")
        e = tx.table("ns.e")
        e.update_schema().add_column("w", pa.int64()).commit()
        e.append(rows([20, 21], "w", wide))
        new = tx.create_table("ns.new", SCHEMA, properties={"owner": "etl"})
        new.append(rows(range(3), "n"))
        tx.drop_table("ns.x")
        tx.drop_table("ns.y", purge=True)
        assert tx.table("ns.a") is a  # one TableChanges per table
        # Nothing is visible to a catalog reader before the block ends.
        reader = world.other()
        assert {i.identifier: i.version for i in reader.tables()} == before
        assert not reader.transaction_committed(tx.id)
        assert tx.state == "open"

    oracle.run("INSERT INTO ns__a SELECT * FROM a_new; DELETE FROM ns__a WHERE id IN (0, 2, 101)",
               a_new=rows(range(100, 105), "new"))
    oracle.run("DELETE FROM ns__b WHERE id < 3; INSERT INTO ns__b VALUES (0, 'o'), (1, 'o'); "
               "UPDATE ns__b SET v = 'u' WHERE id = 4")
    oracle.run("MERGE INTO ns__c USING src ON ns__c.id = src.id WHEN MATCHED THEN UPDATE SET v = src.v "
               "WHEN NOT MATCHED THEN INSERT VALUES (src.id, src.v)", src=merge_src)
    oracle.insert("ns.d", external)
    oracle.run("ALTER TABLE ns__e ADD COLUMN w BIGINT")
    oracle.insert("ns.e", rows([20, 21], "w", wide))
    oracle.create("ns.new", rows(range(3), "n"))
    oracle.run("DROP TABLE ns__x; DROP TABLE ns__y")

    assert tx.state == "committed"
    assert tx.versions == {"ns.a": 2, "ns.b": 2, "ns.c": 2, "ns.d": 2, "ns.e": 2, "ns.new": 1}
    assert {i.identifier for i in cat.tables()} == oracle.tables()
    world.check()
    for ident in "abcde":
        assert cat.table_info(f"ns.{ident}").version == before[f"ns.{ident}"] + 1  # one version each
    # One timestamp for every version of the transaction (what makes snapshot(at=) atomic).
    assert len({cat.load_table(i).metadata.timestamp_ms for i in tx.versions}) == 1
    assert cat.transaction_committed(tx.id) and world.other().transaction_committed(tx.id)
    assert not cat.transaction_committed("0" * 32)
    d_table = cat.load_table("ns.d")
    assert d_table.tags.get("eod").tagged_version == 2
    assert as_rows(lamina.open_table(d_loc, version="eod").scan().to_arrow()) == oracle.rows("ns.d")
    new_table = cat.load_table("ns.new")
    assert new_table.metadata.properties.get("owner") == "etl"
    assert new_table.log.list_versions() == [0, 1]
    # Dropped without purge: its files stay, and registering them back reads its last rows.
    assert not os.path.exists(y_loc)
    assert as_rows(cat.register_table("ns.x_again", x_loc).scan().to_arrow()) == x_rows
    for ident in tx.versions:
        assert fsck(lamina.open_table(world.location(ident))).ok


def test_a_transaction_of_metadata_only_changes(world):
    """A tag alone commits no version; a create with no rows makes an empty table."""
    world.make("ns.a")
    with world.cat.transaction() as tx:
        tx.table("ns.a").create_tag("t1")
        tx.create_table("ns.empty", SCHEMA)
    assert tx.versions == {"ns.a": None, "ns.empty": 0}
    assert world.cat.load_table("ns.a").tags.get("t1").tagged_version == 1
    empty = world.cat.load_table("ns.empty")
    assert empty.version == 0 and empty.scan().to_arrow().num_rows == 0
    world.check("ns.a")


# --- all or nothing ---------------------------------------------------------------------------


def test_an_exception_in_the_block_commits_nothing_and_deletes_its_files(world):
    world.make("ns.a")
    world.make("ns.b")
    before = world.state()
    with pytest.raises(RuntimeError, match="boom"):
        with world.cat.transaction() as tx:
            tx.table("ns.a").append(rows(range(100, 110)))
            tx.table("ns.b").update("id < 5", {"v": "'u'"}, mode="copy-on-write")
            tx.create_table("ns.new", SCHEMA).append(rows([1]))
            assert world.files() > before[1]  # each call wrote its files at once
            raise RuntimeError("boom")
    assert tx.state == "aborted"
    assert world.state() == before
    assert not world.cat.transaction_committed(tx.id)
    world.check()
    with pytest.raises(InvalidArgument, match="aborted"):
        tx.table("ns.a")


@pytest.mark.parametrize("clash", ["files", "schema"])
def test_a_clash_on_one_table_commits_nothing_to_any(world, clash):
    world.make("ns.a")
    b = world.make("ns.b")
    b_files = b.inspect.files().column("path").to_pylist()
    a_files = world.data_files("ns.a")
    tx = world.cat.transaction()
    tx.table("ns.a").append(rows(range(100, 110)))
    if clash == "files":  # remove b's file, which a concurrent overwrite removes first
        tx.table("ns.b").add_operation(RemoveFiles(b.scan().plan().entries))
        world.other().load_table("ns.b").overwrite(rows([7], "c"))
        world.oracle.run("DELETE FROM ns__b; INSERT INTO ns__b VALUES (7, 'c')")
    else:  # delete by a column a concurrent schema change drops
        tx.table("ns.b").delete("v = 'x'")
        world.other().load_table("ns.b").update_schema().drop_column("v").commit()
        world.oracle.run("ALTER TABLE ns__b DROP COLUMN v")
    after_concurrent = world.state()
    with pytest.raises(CatalogTransactionConflict) as e:
        tx.commit()
    assert isinstance(e.value, CommitConflict) and isinstance(e.value, CatalogError)
    assert e.value.table == "ns.b" and "ns.b" in str(e.value)
    assert sorted(e.value.files) == (sorted(b_files) if clash == "files" else [])
    assert tx.state == "aborted"
    assert world.state()[0] == after_concurrent[0]  # no table moved
    # the data file the transaction appended to a is gone again
    assert world.data_files("ns.a") == a_files
    assert not world.cat.transaction_committed(tx.id)
    world.check()


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
@pytest.mark.parametrize("mine", ["delete", "update"])
@pytest.mark.parametrize("theirs", ["delete", "update"])
@pytest.mark.parametrize("same_row", [True, False])
def test_a_row_deleted_or_rewritten_concurrently(tmp_path, isolation, mine, theirs, same_row):
    """A delete or update of the transaction selecting a row that a concurrent commit deleted
    or rewrote. Serializable (the default): it is planned again on the newest version, so it
    applies after the concurrent change, to that row as the concurrent commit left it (an update
    of a row deleted meanwhile updates nothing), and the whole transaction commits. Snapshot:
    it fails, with nothing committed to any table (the first committer wins, as in Delta Lake
    and DuckLake). Another row of the same file never clashes: the transaction commits, its
    change applied after the concurrent one."""
    uri = f"sqlite:///{tmp_path}/c.db"
    cat, other = lamina.load_catalog(uri), lamina.load_catalog(uri)
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.a", SCHEMA).append(rows(range(4), "a"))  # one file
        cat.create_table("ns.b", SCHEMA)

        def change(t, op, row, who):
            if op == "delete":
                t.delete(f"id = {row}")
            else:
                t.update(f"id = {row}", {"v": f"v || '-{who}'"})  # reads the row's value

        expected_a = {0: "a", 1: "a", 2: "a", 3: "a"}

        def expect(op, row, who):
            if op == "delete":
                expected_a.pop(row, None)
            elif row in expected_a:
                expected_a[row] += f"-{who}"

        tx = cat.transaction(isolation_level=isolation)
        change(tx.table("ns.a"), mine, 1, "mine")
        tx.table("ns.b").append(rows([9], "b"))
        theirs_row = 1 if same_row else 2
        change(other.load_table("ns.a"), theirs, theirs_row, "theirs")
        expect(theirs, theirs_row, "theirs")
        if same_row and isolation == "snapshot":
            with pytest.raises(CatalogTransactionConflict, match=f"its {mine} matches rows that a concurrent commit"):
                tx.commit()
            assert tx.state == "aborted" and not cat.transaction_committed(tx.id)
            assert cat.load_table("ns.b").scan().to_arrow().num_rows == 0  # nothing of it in the other table
        else:
            tx.commit()
            assert tx.state == "committed" and cat.transaction_committed(tx.id)
            expect(mine, 1, "mine")
            assert cat.load_table("ns.b").scan().to_arrow().column("id").to_pylist() == [9]
        got = cat.load_table("ns.a").scan().to_arrow()
        assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) == expected_a
    finally:
        cat.close()
        other.close()


def test_a_replanned_update_reuses_what_a_concurrent_commit_left_alone(world, step_hook):
    """A row-level change planned again because its table moved reads and writes again only
    what the newer version changed: here a concurrent append of another file, so the update's
    new row and deletion vector, written on the first attempt, are the ones committed."""
    a = world.make("ns.a", range(4))
    world.make("ns.b")
    data_dir = os.path.join(a.uri, "data")
    before = set(os.listdir(data_dir))
    written = []

    def concurrent():
        written.extend(set(os.listdir(data_dir)) - before)  # the first attempt's files
        world.other().load_table("ns.a").append(rows([100], "c"))
        world.oracle.run("INSERT INTO ns__a VALUES (100, 'c')")

    step_hook(once_at("before-sql-commit", concurrent))
    with world.cat.transaction() as tx:
        tx.table("ns.a").update("id = 1", {"v": "v || '-u'"})
        tx.table("ns.b").append(rows([7]))
    assert tx.attempts == 2
    world.oracle.run("UPDATE ns__a SET v = v || '-u' WHERE id = 1; INSERT INTO ns__b VALUES (7, 'x')")
    world.check()
    after = set(os.listdir(data_dir)) - before
    assert len(written) == 2 and len(after) == 3  # the new row and the DV, then the concurrent append's file
    assert set(written) <= after and fsck(world.cat.load_table("ns.a")).ok


# --- isolation levels ---------------------------------------------------------------------------


def test_an_unknown_isolation_level_is_refused(world):
    world.make("ns.a")
    before = world.state()
    for bad in ("SERIALIZABLE", "read-committed", "WriteSerializable", "", None, 1):
        with pytest.raises(InvalidArgument, match="isolation_level must be one of"):
            world.cat.transaction(isolation_level=bad)
    for level in ("serializable", "snapshot"):
        with world.cat.transaction(isolation_level=level) as tx:
            tx.table("ns.a").append(rows([100 + len(level)]))
        assert tx.isolation_level == level
    assert world.cat.transaction().isolation_level == "serializable"
    assert world.state()[0] != before[0]


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_a_move_of_a_row_moved_concurrently_fails(world, step_hook, isolation):
    """Read where a row is through the transaction, delete it there, append it to the other
    table: when a concurrent transaction moved that row first, the move fails (serializable:
    the rows its read saw changed; snapshot: the row its delete matches was deleted), so the
    row never lands twice, and nothing of the move is committed."""
    world.make("ns.a", range(4))
    world.make("ns.b", [])

    def move(tx, key):
        found = tx.table("ns.a").to_arrow(where=f"id = {key}")
        tx.table("ns.a").delete(f"id = {key}")
        tx.table("ns.b").append(found)

    def concurrent():
        with world.cat.transaction() as rival:
            move(rival, 3)

    tx = world.cat.transaction(isolation_level=isolation)
    move(tx, 3)
    step_hook(once_at("before-sql-commit", concurrent))
    what = "its read" if isolation == "serializable" else "its delete matches rows"
    with pytest.raises(CatalogTransactionConflict, match=what) as e:
        tx.commit()
    assert e.value.table == "ns.a" and tx.state == "aborted" and not tx.catalog.transaction_committed(tx.id)
    world.oracle.run("DELETE FROM ns__a WHERE id = 3; INSERT INTO ns__b VALUES (3, 'x')")
    world.check()


# What a concurrent commit does to ns.a, of which a transaction read the rows `id = 3` (and
# wrote ns.b only), and whether a serializable transaction then fails.
READ_CLASHES = {
    "update-another-row": (lambda t: t.update("id = 5", {"v": "'c'"}), "UPDATE ns__a SET v = 'c' WHERE id = 5", False),
    "append-another-row": (lambda t: t.append(rows([100], "c")), "INSERT INTO ns__a VALUES (100, 'c')", False),
    "delete-nothing": (lambda t: t.delete("id = 3 AND v = 'none'"), None, False),
    "update-the-row": (lambda t: t.update("id = 3", {"v": "'c'"}), "UPDATE ns__a SET v = 'c' WHERE id = 3", True),
    "delete-the-row": (lambda t: t.delete("id = 3"), "DELETE FROM ns__a WHERE id = 3", True),
    "append-a-matching-row": (lambda t: t.append(rows([3], "c")), "INSERT INTO ns__a VALUES (3, 'c')", True),
    "add-a-column": (lambda t: t.update_schema().add_column("w", pa.string()).commit(),
                     "ALTER TABLE ns__a ADD COLUMN w VARCHAR", False),
    "drop-a-column-it-returned": (lambda t: t.update_schema().drop_column("v").commit(),
                                  "ALTER TABLE ns__a DROP COLUMN v", True),
    # conservative: a file rewritten counts as its rows rewritten
    "compact": (lambda t: (t.append(rows([200])).version, t.maintenance.compact()), "INSERT INTO ns__a VALUES (200, 'x')", True),
}


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
@pytest.mark.parametrize("when", ["before-commit", "at-sql-commit"])
@pytest.mark.parametrize("case", sorted(READ_CLASHES))
def test_a_read_through_the_transaction_fails_it_only_when_its_rows_changed(world, step_hook, isolation, when, case):
    """Serializable: a read through the transaction (of a table it does not change) is checked
    at the commit: a concurrent commit that changed rows the read saw, or added rows it would
    see, fails the transaction, with nothing committed; one that changed other rows does not
    (at the commit point the read table must still be at the version checked: a commit that
    lands after the check, ``at-sql-commit``, makes it check again). Snapshot: reads are not
    checked, the transaction commits."""
    action, sql, clashes = READ_CLASHES[case]
    world.make("ns.a", range(8))
    world.make("ns.b", [])

    def concurrent():
        action(world.other().load_table("ns.a"))
        if sql:
            world.oracle.run(sql)

    tx = world.cat.transaction(isolation_level=isolation)
    seen = tx.table("ns.a").to_arrow(where="id = 3")
    assert as_rows(seen) == [(3, "x")]
    tx.table("ns.b").append(seen)
    if when == "before-commit":
        concurrent()
    else:
        step_hook(once_at("before-sql-commit", concurrent))
    if clashes and isolation == "serializable":
        with pytest.raises(CatalogTransactionConflict, match="its read") as e:
            tx.commit()
        assert e.value.table == "ns.a" and (bool(e.value.files) or case.startswith("drop"))
        assert tx.state == "aborted" and not world.cat.transaction_committed(tx.id)
    else:
        tx.commit()
        assert tx.versions == {"ns.a": None, "ns.b": 2}
        # ns.a moved under it (a commit that changed nothing makes no version): checked again
        moved = sql is not None
        assert tx.attempts == (2 if moved and when == "at-sql-commit" and isolation == "serializable" else 1)
        world.oracle.run("INSERT INTO ns__b VALUES (3, 'x')")
    world.check()


def test_write_skew_is_refused_under_serializable_and_allowed_under_snapshot(world, step_hook):
    """Two transactions each read the row of the other's table and write their own (on-call
    doctors): serially, the second would see the first's change. The one that commits second
    fails under serializable; under snapshot isolation both commit (the anomaly it allows)."""
    for name in ("ns.a", "ns.b"):
        world.make(name, [1], "on")

    def leave(tx, mine, theirs):
        if tx.table(theirs).to_arrow(where="id = 1 AND v = 'on'").num_rows:  # the other one stays on call
            tx.table(mine).update("id = 1", {"v": "'off'"})

    for isolation, both in (("serializable", False), ("snapshot", True)):
        for name in ("ns.a", "ns.b"):
            world.cat.load_table(name).update("id = 1", {"v": "'on'"})
        first = world.cat.transaction(isolation_level=isolation)
        leave(first, "ns.a", "ns.b")

        def second():
            with world.cat.transaction(isolation_level=isolation) as tx:
                leave(tx, "ns.b", "ns.a")

        step_hook(once_at("before-sql-commit", second))
        if both:
            first.commit()
        else:
            with pytest.raises(CatalogTransactionConflict, match="its read"):
                first.commit()
        state = {n: world.cat.load_table(n).to_arrow().column("v").to_pylist() for n in ("ns.a", "ns.b")}
        assert state == {"ns.a": ["off" if both else "on"], "ns.b": ["off"]}, isolation


def test_a_read_after_a_change_to_its_table_is_refused(world):
    world.make("ns.a")
    with world.cat.transaction() as tx:
        assert tx.table("ns.a").to_arrow(where="id < 3").num_rows == 3
        tx.table("ns.a").append(rows([100]))
        with pytest.raises(InvalidArgument, match="before changing it"):
            tx.table("ns.a").scan()
        with pytest.raises(lamina.errors.LaminaError):
            tx.table("ns.a").to_arrow(where="nope = 1")  # refused all the same; the transaction goes on
        assert tx.state == "open"
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x')")
    world.check()


def test_a_concurrent_append_is_reapplied_and_commits(world, step_hook):
    """Appends never clash: a row that moved under the SQL commit makes the transaction
    re-apply that table's changes on its newest version, in serial order after it."""
    world.make("ns.a")
    world.make("ns.b")
    hook = once_at("before-sql-commit", lambda: world.other().load_table("ns.b").append(rows([1, 2, 300], "c")))
    step_hook(hook)
    with world.cat.transaction() as tx:
        tx.table("ns.a").append(rows([100]))
        tx.table("ns.b").delete("id < 5")
    assert hook.seen.count("before-sql-commit") == 2  # refused once, re-applied, committed
    world.oracle.run("INSERT INTO ns__b VALUES (1, 'c'), (2, 'c'), (300, 'c'); DELETE FROM ns__b WHERE id < 5")
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x')")
    assert tx.versions == {"ns.a": 2, "ns.b": 3}
    world.check()


def _drop(world):
    world.other().drop_table("ns.b")
    world.oracle.run("DROP TABLE ns__b")


def _offline(world):
    world.other().set_online("ns.b", False)


def _create(world, location=None):
    ident = "ns.new" if location is None else "ns.rival"
    world.other().create_table(ident, SCHEMA, location=location).append(rows([5], "rival"))
    world.oracle.create(ident, rows([5], "rival"))


CONCURRENT = {
    # what happens during the commit, what the transaction does to ns.b, the error
    "drop-changed": (_drop, "change", CatalogTableNotFound),
    "drop-dropped": (_drop, "drop", CatalogTableNotFound),
    "offline": (_offline, "change", TableOffline),
    "create-name": (_create, "create", CatalogTableAlreadyExists),
    "create-location": (lambda w: _create(w, w.wh + "/ns/shared"), "create-at", CatalogTableAlreadyExists),
}


@pytest.mark.parametrize("case", sorted(CONCURRENT))
def test_a_concurrent_change_refuses_the_whole_transaction(world, step_hook, case):
    """The SQL transaction itself refuses (the hook acts after every check made before it)."""
    action, what, error = CONCURRENT[case]
    world.make("ns.a")
    world.make("ns.b")
    a_files = world.data_files("ns.a")
    step_hook(once_at("before-sql-commit", lambda: action(world)))
    with pytest.raises(error, match="nothing was committed"):
        with world.cat.transaction() as tx:
            tx.table("ns.a").append(rows([100]))
            if what == "change":
                tx.table("ns.b").append(rows([100]))
            elif what == "drop":
                tx.drop_table("ns.b", purge=True)
            elif what == "create":
                tx.create_table("ns.new", SCHEMA).append(rows([1]))
            else:
                tx.create_table("ns.new", SCHEMA, location=world.wh + "/ns/shared").append(rows([1]))
    assert tx.state == "aborted" and not world.cat.transaction_committed(tx.id)
    assert world.data_files("ns.a") == a_files
    assert world.cat.table_info("ns.a").version == 1
    if case == "offline":
        assert not world.cat.is_online("ns.b") and world.cat.table_info("ns.b").version == 1
        world.cat.set_online("ns.b", True)
    world.check()  # every table the concurrent change left, and only what it wrote
    assert set(world.oracle.tables()) == {i.identifier for i in world.cat.tables()}


def test_an_offline_table_is_refused_before_anything_is_written(world):
    world.make("ns.a")
    world.make("ns.b")
    world.cat.set_online("ns.b", False)
    before = world.state()
    with pytest.raises(TableOffline):
        with world.cat.transaction() as tx:
            tx.table("ns.a").append(rows([100]))
            tx.table("ns.b")
    assert world.state() == before


def test_retries_exhausted_commit_nothing(world, step_hook):
    world.make("ns.a")
    world.make("ns.b")

    def concurrent():
        world.other().load_table("ns.b").append(rows([300], "c"))
        world.oracle.run("INSERT INTO ns__b VALUES (300, 'c')")

    step_hook(once_at("before-sql-commit", concurrent))
    tx = world.cat.transaction(commit_options=CommitOptions(max_attempts=1))
    tx.table("ns.a").append(rows([100]))
    tx.table("ns.b").append(rows([100]))
    with pytest.raises(CommitRetriesExhausted, match="ns.b"):
        tx.commit()
    assert tx.state == "aborted" and not world.cat.transaction_committed(tx.id)
    assert world.cat.table_info("ns.a").version == 1 and world.cat.table_info("ns.b").version == 2
    world.check()


# --- bad input --------------------------------------------------------------------------------


def test_a_directory_catalog_refuses_transactions_and_snapshots(tmp_path):
    cat = lamina.load_catalog(str(tmp_path / "wh"))
    cat.create_namespace("ns")
    cat.create_table("ns.a", SCHEMA).append(rows([1]))
    flush_hints()
    listing = sorted(os.walk(tmp_path / "wh"))
    with pytest.raises(TransactionsUnsupported, match="sqlite://"):
        cat.transaction()
    with pytest.raises(TransactionsUnsupported, match="SQL catalog"):
        cat.snapshot()
    with pytest.raises(TransactionsUnsupported):
        cat.snapshot(at=0)
    assert isinstance(TransactionsUnsupported("x"), CatalogError)
    assert sorted(os.walk(tmp_path / "wh")) == listing


HOSTILE = ["ns.a; DROP TABLE lamina_tables", "ns.a'--", "../etc.passwd", "ns.a.b", "ns", "", ".a", "ns.",
           "ns.-a", "ns.a b", "ns.a\x00", ("ns", "a/b"), ("ns", ""), ("ns", "a", "b"), 42, None, "ns." + "a" * 129]


def _refuse_in_open_tx(tx, world):
    """Every call a transaction refuses while it stays open."""
    return {
        "changed-then-dropped": (lambda: tx.drop_table("ns.a"), InvalidArgument),
        "dropped-then-changed": (lambda: tx.table("ns.b"), InvalidArgument),
        "table-commit": (lambda: tx.table("ns.a").commit(), InvalidArgument),
        "table-abort": (lambda: tx.table("ns.a").abort(), InvalidArgument),
        "unknown-table": (lambda: tx.table("ns.nope"), CatalogTableNotFound),
        "unknown-drop": (lambda: tx.drop_table("ns.nope"), CatalogTableNotFound),
        "create-existing": (lambda: tx.create_table("ns.c", SCHEMA), CatalogTableAlreadyExists),
        "create-member": (lambda: tx.create_table("ns.a", SCHEMA), InvalidArgument),
        "create-twice": (lambda: tx.create_table("ns.new", SCHEMA), InvalidArgument),
        "create-at-a-table": (lambda: tx.create_table("ns.z", SCHEMA, location=world.location("ns.c")),
                              CatalogTableAlreadyExists),
        "create-at-a-member": (lambda: tx.create_table("ns.z", SCHEMA, location=world.location("ns.a")), InvalidArgument),
        "create-no-namespace": (lambda: tx.create_table("nope.z", SCHEMA), NamespaceNotFound),
        "create-bad-partition": (lambda: tx.create_table("ns.z", SCHEMA, partition_by="nope"), lamina.errors.LaminaError),
    }


def test_bad_calls_are_refused_and_the_transaction_goes_on(world):
    for name in "abc":
        world.make(f"ns.{name}")
    before = world.state()
    with world.cat.transaction() as tx:
        tx.table("ns.a").append(rows([100]))
        tx.drop_table("ns.b")
        tx.create_table("ns.new", SCHEMA)
        for case, (call, error) in _refuse_in_open_tx(tx, world).items():
            with pytest.raises(error):
                call()
            assert tx.state == "open", case
        for bad in HOSTILE:
            for call in (tx.table, tx.drop_table, lambda i: tx.create_table(i, SCHEMA)):
                with pytest.raises(InvalidIdentifier):
                    call(bad)
        assert world.state()[0] == before[0]  # nothing visible yet
    assert tx.versions == {"ns.a": 2, "ns.new": 0}
    assert {i.identifier for i in world.cat.tables()} == {"ns.a", "ns.c", "ns.new"}
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x'); DROP TABLE ns__b")
    world.check()


@pytest.mark.parametrize("how", ["commit", "with-block", "touched-only"])
def test_an_empty_transaction_is_refused(world, how):
    world.make("ns.a")
    before = world.state()
    with pytest.raises(InvalidArgument, match="no changes"):
        if how == "commit":
            world.cat.transaction().commit()
        else:
            with world.cat.transaction() as tx:
                if how == "touched-only":
                    tx.table("ns.a")
    assert world.state() == before


def test_a_finished_transaction_refuses_every_call(world):
    world.make("ns.a")
    world.make("ns.b")
    tx = world.cat.transaction()
    changes = tx.table("ns.a")
    changes.append(rows([100]))
    assert tx.commit() == {"ns.a": 2}
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x')")
    after = world.state()
    for call in (tx.commit, tx.abort, lambda: tx.table("ns.b"), lambda: tx.drop_table("ns.b"),
                 lambda: tx.create_table("ns.c", SCHEMA), lambda: changes.append(rows([1])),
                 lambda: changes.delete("id = 1"), changes.commit):
        with pytest.raises(InvalidArgument):
            call()
    with pytest.raises(InvalidArgument, match="aborted"):
        aborted = world.cat.transaction()
        aborted.table("ns.b").append(rows([1]))
        aborted.abort()
        aborted.commit()
    assert world.state() == after
    world.check()


def test_snapshot_bad_input(world):
    world.make("ns.a")
    snap = world.cat.snapshot()
    for call in (snap.load_table, snap.version_of, snap.entry, snap.to_arrow, snap.scan):
        with pytest.raises(CatalogTableNotFound, match="ns.nope"):
            call("ns.nope")
        for bad in HOSTILE:
            with pytest.raises(InvalidIdentifier):
                call(bad)
    for bad in ("yesterday", float("nan"), [1], "2026-13-01"):
        with pytest.raises(InvalidArgument):
            world.cat.snapshot(at=bad)
    assert world.cat.snapshot(at=0).versions == {}  # before any table existed
    world.check()


# --- snapshots --------------------------------------------------------------------------------


def test_a_snapshot_pins_every_table_while_commits_go_on(world):
    for name in "abc":
        world.make(f"ns.{name}")
    pinned = {i: world.oracle.rows(i) for i in ("ns.a", "ns.b", "ns.c")}
    snap = world.cat.snapshot()
    assert snap.versions == {"ns.a": 1, "ns.b": 1, "ns.c": 1}
    with world.cat.transaction() as tx:
        tx.table("ns.a").append(rows([100]))
        tx.table("ns.b").delete("id < 5")
        tx.create_table("ns.new", SCHEMA).append(rows([1]))
    world.cat.load_table("ns.c").overwrite(rows([7]))
    world.cat.drop_table("ns.c")  # without purge: the snapshot can still read it
    for k in range(2):  # and again after more commits
        world.cat.load_table("ns.a").append(rows([500 + k]))
        for ident, want in pinned.items():
            t = snap.load_table(ident)
            assert t.version == 1 and as_rows(t.scan().to_arrow()) == want
            assert as_rows(snap.to_arrow(ident)) == want
        assert as_rows(snap.to_arrow("ns.a", where="id < 3", columns=["id", "v"])) == [(i, "x") for i in range(3)]
        assert snap.scan("ns.b", columns=["id"]).to_arrow().column_names == ["id"]
        with pytest.raises(CatalogTableNotFound):
            snap.load_table("ns.new")  # created after the snapshot
    now = world.cat.snapshot()
    assert now.versions == {"ns.a": 4, "ns.b": 2, "ns.new": 1}
    assert as_rows(now.to_arrow("ns.a")) == sorted(pinned["ns.a"] + [(100, "x"), (500, "x"), (501, "x")], key=repr)


def test_snapshot_at_a_time_sees_all_of_a_transaction_or_none(world):
    for name in "ab":
        world.make(f"ns.{name}")
    world.make("ns.gone")
    before = {i: world.oracle.rows(i) for i in ("ns.a", "ns.b")}
    with world.cat.transaction() as tx:
        tx.table("ns.a").append(rows([100]))
        tx.table("ns.b").delete("id < 5")
        tx.create_table("ns.new", SCHEMA).append(rows([1, 2]))
    stamp = world.cat.load_table("ns.a").metadata.timestamp_ms
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x'); DELETE FROM ns__b WHERE id < 5")
    world.oracle.create("ns.new", rows([1, 2]))
    world.cat.load_table("ns.a").append(rows([200]))  # a later commit, not seen at stamp
    world.cat.drop_table("ns.gone")
    for at in (stamp - 1, datetime.fromtimestamp((stamp - 1) / 1000, timezone.utc)):
        snap = world.cat.snapshot(at=at)
        assert snap.versions == {"ns.a": 1, "ns.b": 1}, "a part of the transaction is seen before its time"
        for ident, want in before.items():
            assert as_rows(snap.to_arrow(ident)) == want
    for at in (stamp, datetime.fromtimestamp(stamp / 1000, timezone.utc).isoformat()):
        snap = world.cat.snapshot(at=at)
        assert snap.versions == {"ns.a": 2, "ns.b": 2, "ns.new": 1}
        for ident in snap.versions:
            assert as_rows(snap.to_arrow(ident)) == world.oracle.rows(ident)
    assert snap.at_ms == stamp


def _unpublished(monkeypatch):
    """Make every publish under a final name fail (as a store failing after the SQL commit):
    the versions stay staged, the rows point at them. Returns a function that undoes it."""
    real = SqlCoordinator._publish_final

    def fail(self, *args, **kwargs):
        raise StorageError("the store went away")

    monkeypatch.setattr(SqlCoordinator, "_publish_final", fail)
    return lambda: monkeypatch.setattr(SqlCoordinator, "_publish_final", real)


@pytest.mark.parametrize("reader", ["snapshot", "snapshot-at", "load_table"])
def test_a_committed_but_unpublished_transaction_is_completed_by_readers(world, monkeypatch, reader):
    world.make("ns.a")
    world.make("ns.b")
    restore = _unpublished(monkeypatch)
    with world.cat.transaction() as tx:
        tx.table("ns.a").append(rows([100]))
        tx.table("ns.b").delete("id < 5")
        tx.create_table("ns.new", SCHEMA).append(rows([1, 2]))
    restore()
    assert tx.state == "committed" and world.cat.transaction_committed(tx.id)
    locations = {i: world.location(i) for i in tx.versions}
    for ident, loc in locations.items():  # a path reader sees the old versions, or no table yet
        assert os.listdir(os.path.join(loc, PENDING_DIR)), ident
    assert lamina.open_table(locations["ns.a"]).version == 1
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x'); DELETE FROM ns__b WHERE id < 5")
    world.oracle.create("ns.new", rows([1, 2]))
    other = world.other()  # a fresh process: nothing cached
    if reader == "load_table":
        got = {i: other.load_table(i) for i in tx.versions}
    else:
        snap = other.snapshot() if reader == "snapshot" else other.snapshot(at=datetime.now(timezone.utc))
        assert snap.versions == {"ns.a": 2, "ns.b": 2, "ns.new": 1}
        got = {i: snap.load_table(i) for i in tx.versions}
    for ident, t in got.items():
        assert as_rows(t.scan().to_arrow()) == world.oracle.rows(ident), ident
    world.check()  # published under the final names, nothing staged left


# --- maintenance during a commit -------------------------------------------------------------


def _maintain(world, ident: str) -> None:
    """Expire every old version and remove every file nothing references, as aggressively as
    the options allow: by path (no catalog) and through a catalog of another process."""
    loc = world.location(ident)
    future = datetime.now(timezone.utc) + timedelta(minutes=1)
    tables = [world.other().load_table(ident)]
    try:
        tables.append(lamina.open_table(loc))
    except lamina.errors.TableNotFound:  # a table being created has no published version yet
        pass
    for t in tables:
        t.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
        t.maintenance.remove_orphans(older_than=future, allow_short_age=True)


@pytest.mark.parametrize("at", ["staged", "before-sql-commit", "sql-committed", "published"])
def test_maintenance_at_each_step_keeps_what_staged_versions_reference(world, step_hook, at):
    world.make("ns.a")
    t = world.cat.load_table("ns.a")
    t.append(rows([10, 11]))
    t.delete("id < 3")  # older versions for expiry to take
    world.oracle.run("INSERT INTO ns__a VALUES (10, 'x'), (11, 'x'); DELETE FROM ns__a WHERE id < 3")
    world.make("ns.b")

    def maintain():
        for ident in ("ns.a", "ns.b"):
            _maintain(world, ident)

    hook = once_at(at, maintain)
    step_hook(hook)
    with world.cat.transaction() as tx:
        tx.table("ns.a").append(rows([100, 101]))
        tx.table("ns.a").delete("id = 5")
        tx.table("ns.b").update("id = 4", {"v": "'u'"}, mode="copy-on-write")
    assert hook.fired
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x'), (101, 'x'); DELETE FROM ns__a WHERE id = 5")
    world.oracle.run("UPDATE ns__b SET v = 'u' WHERE id = 4")
    world.check()
    for ident in ("ns.a", "ns.b"):
        report = fsck(lamina.open_table(world.location(ident)))
        assert report.ok and not report.missing, (ident, report.missing, report.errors)


def test_maintenance_keeps_what_a_crashed_writers_staged_versions_reference(world, monkeypatch):
    """The transaction committed and stopped before publishing (its rows point at staged
    manifests): path maintenance must keep their files until a reader publishes them."""
    world.make("ns.a")
    world.cat.load_table("ns.a").delete("id < 3")
    world.oracle.run("DELETE FROM ns__a WHERE id < 3")
    world.make("ns.b")
    restore = _unpublished(monkeypatch)
    with world.cat.transaction() as tx:
        tx.table("ns.a").append(rows([100, 101]))
        tx.table("ns.b").overwrite(rows([1], "o"), where="id < 5")
    restore()
    world.oracle.run("INSERT INTO ns__a VALUES (100, 'x'), (101, 'x')")
    world.oracle.run("DELETE FROM ns__b WHERE id < 5; INSERT INTO ns__b VALUES (1, 'o')")
    future = datetime.now(timezone.utc) + timedelta(minutes=1)
    for ident in ("ns.a", "ns.b"):
        by_path = lamina.open_table(world.location(ident))
        assert by_path.version == world.cat.table_info(ident).version - 1  # not published
        by_path.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
        by_path.maintenance.remove_orphans(older_than=future, allow_short_age=True)
    world.check()


def test_create_at_a_location_whose_first_versions_were_expired_is_refused(world):
    """A location holds a table whatever versions are left: the check is not of version 0."""
    c = world.make("ns.c")
    c.append(rows([100]))
    c.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    assert c.log.list_versions() == [2]
    before = world.state()
    with pytest.raises(CatalogTableAlreadyExists, match="already holds a Lamina table"):
        with world.cat.transaction() as tx:
            tx.create_table("ns.z", SCHEMA, location=world.location("ns.c")).append(rows([1]))
    assert world.state() == before
    world.oracle.run("INSERT INTO ns__c VALUES (100, 'x')")
    world.check()


class Interrupt(BaseException):
    """As KeyboardInterrupt: not an Exception."""


@pytest.mark.parametrize("at", ["before-sql-commit", "sql-committed", "published"])
def test_an_interrupt_during_the_commit_keeps_all_or_nothing(world, step_hook, at):
    """Before the commit point it aborts (files deleted); after it, nothing may be deleted:
    the rows point at the staged versions, which the next reader publishes."""
    world.make("ns.a")
    world.make("ns.b")
    before, a_files = world.state(), world.data_files("ns.a")

    def interrupt():
        raise Interrupt()

    step_hook(once_at(at, interrupt))
    with pytest.raises(Interrupt):
        with world.cat.transaction() as tx:
            tx.table("ns.a").append(rows([100]))
            tx.table("ns.b").update("id < 5", {"v": "'u'"}, mode="copy-on-write")
            tx.create_table("ns.new", SCHEMA).append(rows([1]))
    step_hook(None)
    if at == "before-sql-commit":
        assert tx.state == "aborted" and not world.cat.transaction_committed(tx.id)
        assert world.state()[0] == before[0], "a table moved"
        assert world.data_files("ns.a") == a_files  # what the calls wrote is gone
    else:
        assert tx.state == "committed" and world.cat.transaction_committed(tx.id)
        world.oracle.run("INSERT INTO ns__a VALUES (100, 'x'); UPDATE ns__b SET v = 'u' WHERE id < 5")
        world.oracle.create("ns.new", rows([1]))
    world.check()  # (completes the publish of each version the interrupt left staged)
