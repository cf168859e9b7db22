"""Spark in catalog transactions: files written by Spark tasks, queued into one
catalog transaction on the driver (``lamina.spark.write(df, tx.table(ident))``), committed
with the other tables' changes or deleted with them; and Spark reads pinned by a catalog
snapshot (``lamina.spark.read(spark, ident, snapshot=snap)``). Results are checked against
DuckDB over the input rows."""

from __future__ import annotations

import os

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import CatalogTransactionConflict, InvalidArgument
from lamina.spark import delete as spark_delete
from lamina.spark import merge as spark_merge
from lamina.spark import read as spark_read
from lamina.spark import write as spark_write

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("cat", pa.string()), pa.field("amt", pa.float64())])
DDL = "id bigint, cat string, amt double"


def rows(lo: int, hi: int, cat: str = "c") -> pa.Table:
    ids = pa.array(range(lo, hi), pa.int64())
    return pa.table({"id": ids, "cat": [cat] * (hi - lo), "amt": pc.multiply(ids.cast(pa.float64()), 0.5)}, schema=SCHEMA)


def sdf(spark, t: pa.Table):
    return spark.createDataFrame(t.to_pandas(), schema=DDL)


def oracle(sql: str, **tables: pa.Table) -> list[tuple]:
    """The rows of ``sql`` by DuckDB over the Arrow tables named in it, sorted."""
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return sorted(con.execute(sql).fetchall())


def as_rows(t: pa.Table) -> list[tuple]:
    return sorted(zip(*[t.column(n).to_pylist() for n in SCHEMA.names]))


def data_files(root: str) -> set[str]:
    out = set()
    for d, _, names in os.walk(os.path.join(root, "data")):
        out.update(os.path.relpath(os.path.join(d, n), root) for n in names)
    return out


def markers(root: str) -> list[str]:
    d = os.path.join(root, "_lamina", "writes")
    return os.listdir(d) if os.path.isdir(d) else []


@pytest.fixture
def cat(tmp_path):
    c = lamina.load_catalog(f"sqlite:///{tmp_path}/wh/catalog.db")
    c.create_namespace("shop")
    a = c.create_table("shop.orders", SCHEMA)
    a.append(rows(0, 50))
    b = c.create_table("shop.daily", SCHEMA, partition_by=["cat"])
    b.append(pa.concat_tables([rows(0, 5, "x"), rows(5, 10, "y")]))
    yield c
    c.close()


def test_a_two_table_spark_write_commits_both_tables_at_once(spark, cat):
    a0, b0 = cat.load_table("shop.orders").to_arrow(), cat.load_table("shop.daily").to_arrow()
    new_a, new_b = rows(50, 80), rows(100, 104, "x")
    with cat.transaction() as tx:
        assert spark_write(sdf(spark, new_a), tx.table("shop.orders"), mode="append") is None  # queued
        assert spark_write(sdf(spark, new_b), tx.table("shop.daily"), mode="overwrite", where="cat = 'x'") is None
        # nothing is visible before the commit, through the catalog or in Spark
        assert cat.snapshot().versions == {"shop.daily": 1, "shop.orders": 1}
        assert spark_read(spark, "shop.orders", catalog=cat).count() == 50
    assert tx.state == "committed" and tx.versions == {"shop.orders": 2, "shop.daily": 2}
    assert cat.transaction_committed(tx.id)
    a, b = cat.load_table("shop.orders"), cat.load_table("shop.daily")
    assert a.metadata.timestamp_ms == b.metadata.timestamp_ms  # one commit: snapshot(at=) sees both or neither
    assert as_rows(a.to_arrow()) == oracle("SELECT * FROM a0 UNION ALL SELECT * FROM new_a", a0=a0, new_a=new_a)
    assert as_rows(b.to_arrow()) == oracle("SELECT * FROM b0 WHERE cat <> 'x' UNION ALL SELECT * FROM new_b", b0=b0, new_b=new_b)
    assert markers(a.uri) == markers(b.uri) == []  # the writes ended with the transaction


def test_an_exception_in_the_block_commits_neither_table_and_deletes_the_spark_files(spark, cat):
    a, b = cat.load_table("shop.orders"), cat.load_table("shop.daily")
    files_a, files_b = data_files(a.uri), data_files(b.uri)
    with pytest.raises(RuntimeError, match="the job failed"):
        with cat.transaction() as tx:
            spark_write(sdf(spark, rows(50, 80)), tx.table("shop.orders"))
            spark_write(sdf(spark, rows(100, 104, "x")), tx.table("shop.daily"), mode="overwrite", where="cat = 'x'")
            assert data_files(a.uri) > files_a and data_files(b.uri) > files_b  # Spark wrote them
            raise RuntimeError("the job failed")
    assert tx.state == "aborted" and not cat.transaction_committed(tx.id)
    assert cat.snapshot().versions == {"shop.daily": 1, "shop.orders": 1}
    assert data_files(a.uri) == files_a and data_files(b.uri) == files_b
    assert markers(a.uri) == markers(b.uri) == []


def test_a_rejected_spark_write_leaves_the_transaction_to_abort(spark, cat):
    """A row outside the overwrite's predicate fails the Spark write itself: its files are
    deleted at once, and the transaction (aborted by the exception) commits nothing."""
    a, b = cat.load_table("shop.orders"), cat.load_table("shop.daily")
    files_b = data_files(b.uri)
    with pytest.raises(InvalidArgument, match="not matching the overwrite predicate"):
        with cat.transaction() as tx:
            spark_write(sdf(spark, rows(50, 60)), tx.table("shop.orders"))
            spark_write(sdf(spark, rows(100, 104, "y")), tx.table("shop.daily"), mode="overwrite", where="cat = 'x'")
    assert cat.snapshot().versions == {"shop.daily": 1, "shop.orders": 1}
    assert data_files(b.uri) == files_b and a.refresh().version == 1


def test_spark_reads_at_a_catalog_snapshot_equal_the_snapshots_arrow_reads(spark, cat):
    snap = cat.snapshot()
    with cat.transaction() as tx:
        spark_write(sdf(spark, rows(50, 60)), tx.table("shop.orders"))
        tx.table("shop.daily").delete(where="cat = 'y'")
    later = cat.snapshot()
    assert later.versions != snap.versions
    for s in (snap, later):
        for ident in ("shop.orders", "shop.daily"):
            got = spark_read(spark, ident, snapshot=s).toArrow()
            assert as_rows(got) == as_rows(s.to_arrow(ident))
            # the data source reads the same version, fed from the snapshot
            via_source = (spark.read.format("lamina").option("catalog", cat.reopen_uri()[0])
                          .option("versionAsOf", s.version_of(ident)).load(ident).toArrow())
            assert as_rows(via_source) == as_rows(got)
        filtered = spark_read(spark, "shop.orders", snapshot=s, where="id >= 45", columns=["id"]).toArrow()
        assert sorted(filtered.column("id").to_pylist()) == [i for i in range(60) if i >= 45 and i < 50 + 10 * (s is later)]
    with pytest.raises(InvalidArgument, match="snapshot pins"):
        spark_read(spark, "shop.orders", snapshot=snap, version=1)


def test_a_concurrent_append_during_the_spark_write_is_re_applied(spark, cat):
    with cat.transaction() as tx:
        spark_write(sdf(spark, rows(50, 80)), tx.table("shop.orders"))
        spark_write(sdf(spark, rows(100, 104, "x")), tx.table("shop.daily"), mode="overwrite", where="cat = 'x'")
        cat.load_table("shop.orders").append(rows(200, 210))  # another writer commits meanwhile
    assert tx.versions == {"shop.orders": 3, "shop.daily": 2}
    got = cat.load_table("shop.orders").to_arrow()
    assert as_rows(got) == oracle("SELECT * FROM x UNION ALL SELECT * FROM y UNION ALL SELECT * FROM z",
                                  x=rows(0, 50), y=rows(50, 80), z=rows(200, 210))


def test_a_concurrent_rewrite_of_a_file_the_spark_overwrite_replaces_is_re_applied(spark, cat):
    """An overwrite by predicate is re-evaluated on the newest version (as if it ran last): the
    file a concurrent delete rewrote is replaced all the same."""
    with cat.transaction() as tx:
        spark_write(sdf(spark, rows(100, 104, "x")), tx.table("shop.daily"), mode="overwrite", where="cat = 'x'")
        cat.load_table("shop.daily").delete(where="id = 3", mode="copy-on-write")  # rewrites the 'x' file
    assert tx.versions == {"shop.daily": 3}
    assert as_rows(cat.load_table("shop.daily").to_arrow()) == as_rows(pa.concat_tables([rows(5, 10, "y"), rows(100, 104, "x")]))


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_a_concurrent_delete_in_a_file_the_spark_delete_changes_conflicts(spark, cat, isolation):
    """A Spark delete or merge queued in a catalog transaction holds the row positions Spark
    found in the version the transaction loaded: it cannot be planned again at the commit (the
    Spark job is over), so a concurrent rewrite of a file it changes fails the transaction at
    either isolation level (run it again in a new transaction)."""
    a, b = cat.load_table("shop.orders"), cat.load_table("shop.daily")
    files_a = data_files(a.uri)
    x_file = [p for p in b.inspect.files().column("path").to_pylist() if "cat=x" in p]
    with pytest.raises(CatalogTransactionConflict) as err:
        with cat.transaction(isolation_level=isolation) as tx:
            spark_write(sdf(spark, rows(50, 80)), tx.table("shop.orders"))
            spark_delete(spark, tx.table("shop.daily"), "id < 2")  # positions in the 'x' file
            cat.load_table("shop.daily").delete(where="id = 3", mode="copy-on-write")  # rewrites that file
    assert err.value.table == "shop.daily" and x_file and set(x_file) <= set(err.value.files)
    assert tx.state == "aborted" and not cat.transaction_committed(tx.id)
    assert cat.table_info("shop.orders").version == 1 and cat.table_info("shop.daily").version == 2
    assert data_files(a.uri) == files_a and markers(a.uri) == []  # the Spark files of the other table went too
    assert as_rows(b.refresh().to_arrow()) == as_rows(pa.concat_tables([rows(0, 3, "x"), rows(4, 5, "x"), rows(5, 10, "y")]))


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_a_spark_delete_is_re_applied_after_a_concurrent_delete_in_another_file(spark, cat, isolation):
    """The files the Spark delete changes are as it found them: its positions are re-applied on
    the newest version (after the concurrent delete in the 'y' file), at either level."""
    b0 = cat.load_table("shop.daily").to_arrow()
    with cat.transaction(isolation_level=isolation) as tx:
        spark_write(sdf(spark, rows(50, 60)), tx.table("shop.orders"))
        spark_delete(spark, tx.table("shop.daily"), "id < 2")  # positions in the 'x' file
        cat.load_table("shop.daily").delete(where="id = 7")  # a deletion vector on the 'y' file
    assert tx.versions == {"shop.orders": 2, "shop.daily": 3}
    assert as_rows(cat.load_table("shop.daily").to_arrow()) == oracle("SELECT * FROM b0 WHERE id >= 2 AND id <> 7", b0=b0)
    assert as_rows(cat.load_table("shop.orders").to_arrow()) == as_rows(rows(0, 60))


def test_spark_merge_and_delete_in_a_catalog_transaction(spark, cat):
    a0, b0 = cat.load_table("shop.orders").to_arrow(), cat.load_table("shop.daily").to_arrow()
    src = pa.concat_tables([rows(40, 45, "u"), rows(60, 63, "new")])
    with cat.transaction() as tx:
        res = (spark_merge(tx.table("shop.orders"), sdf(spark, src), on="id")
               .when_matched_update({"cat": "source.cat"}).when_not_matched_insert_all().execute())
        assert (res.version, res.rows_updated, res.rows_inserted) == (None, 5, 3)
        assert spark_delete(spark, tx.table("shop.daily"), "id < 7") is None
        with pytest.raises(InvalidArgument, match="first change"):
            spark_delete(spark, tx.table("shop.orders"), "id < 3")  # would not see the merge's rows
    assert tx.versions == {"shop.orders": 2, "shop.daily": 2}
    want_a = oracle("SELECT a0.id, coalesce(src.cat, a0.cat), a0.amt FROM a0 LEFT JOIN src USING (id) "
                    "UNION ALL SELECT * FROM src WHERE id NOT IN (SELECT id FROM a0)", a0=a0, src=src)
    assert as_rows(cat.load_table("shop.orders").to_arrow()) == want_a
    assert as_rows(cat.load_table("shop.daily").to_arrow()) == oracle("SELECT * FROM b0 WHERE id >= 7", b0=b0)


def test_spark_writes_a_table_the_transaction_creates(spark, cat):
    with cat.transaction() as tx:
        new = tx.create_table("shop.totals", SCHEMA, partition_by=["cat"])
        spark_write(sdf(spark, rows(0, 20, "t")), new)
        spark_write(sdf(spark, rows(50, 55)), tx.table("shop.orders"))
    assert tx.versions == {"shop.totals": 1, "shop.orders": 2}
    assert as_rows(cat.load_table("shop.totals").to_arrow()) == as_rows(rows(0, 20, "t"))
    with pytest.raises(InvalidArgument, match="tx.create_table"):
        with cat.transaction() as tx2:
            spark_write(sdf(spark, rows(0, 1)), tx2.table("shop.orders"), partition_by=["cat"])


def test_spark_write_into_a_single_table_transaction(spark, cat):
    t = cat.load_table("shop.orders")
    with t.transaction() as tx:
        spark_write(sdf(spark, rows(50, 60)), tx)
        tx.delete(where="id < 10")
    assert tx.version == 2
    assert as_rows(t.refresh().to_arrow()) == as_rows(rows(10, 60))
