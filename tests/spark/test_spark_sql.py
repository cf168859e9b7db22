"""Spark SQL on Lamina tables (issue 46): what Spark 4.3 runs itself on a table registered
``USING lamina``, and every statement ``lamina.spark.sql`` runs, against Delta's documented
semantics (results, counts, errors) and Iceberg's procedures. MERGE INTO is also checked
against DuckDB's on random statements (test_spark_sql_merge_model.py)."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException

import lamina
from lamina.errors import InvalidArgument, SchemaMismatch, TableAlreadyExists, UnsupportedStatement
from lamina.spark import sql
from lamina.spark.statements.expressions import lamina_predicate

pytestmark = pytest.mark.xdist_group("spark")

UTC = dt.timezone.utc
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("v", pa.string()), ("amount", pa.float64())])
D = dt.date(2026, 1, 1)


def rows(ids, v="a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "day": [D + dt.timedelta(days=i % 3) for i in ids],
                     "v": [v] * len(ids), "amount": [float(i) for i in ids]}, schema=SCHEMA)


def table(tmp_path, name="t", *batches, **props) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / name), SCHEMA, partition_by=["day"], properties=props or None)
    for b in batches:
        t.append(b)
    return t


def one(df) -> dict:
    got = [r.asDict() for r in df.collect()]
    assert len(got) == 1, got
    return got[0]


def content(t: lamina.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in t.refresh().to_arrow().to_pylist())


def path(t: lamina.Table) -> str:
    return f"lamina.`{t.uri}`"


# -- what Spark runs itself -------------------------------------------------------------------------


def test_a_spark_catalog_table_using_lamina_is_read_and_written_by_spark(spark, tmp_path):
    """Before lamina.spark.registered, Spark handed the reader and writer of such a table no
    options: every SELECT failed ("remove .schema(...)"), and so did every INSERT."""
    t = table(tmp_path, "t", rows(range(4)))
    spark.sql(f"CREATE TABLE reg_orders USING lamina LOCATION '{t.uri}'")
    try:
        assert sorted(tuple(r) for r in spark.sql("SELECT * FROM reg_orders").collect()) == content(t)
        spark.sql("INSERT INTO reg_orders VALUES (10, DATE'2026-01-02', 'x', 1.5)")  # Spark's own INSERT: one version
        assert t.refresh().version == 2 and (10, D + dt.timedelta(days=1), "x", 1.5) in content(t)
        spark.sql("INSERT OVERWRITE reg_orders SELECT id + 100, day, v, amount FROM reg_orders WHERE id < 2")
        assert [r[0] for r in content(t)] == [100, 101]
        t.update_schema().add_column("note", pa.string()).commit()  # Spark's catalog still has the old columns
        assert spark.table("reg_orders").columns == ["id", "day", "v", "amount"]
        assert spark.sql("SELECT count(*) AS n FROM reg_orders").first().n == 2
        t.update_schema().rename_column("v", "label").commit()
        with pytest.raises(AnalysisException, match="register it again"):
            spark.sql("SELECT * FROM reg_orders").collect()
        spark.sql(f"CREATE OR REPLACE TABLE reg_orders USING lamina LOCATION '{t.uri}'")
        assert spark.table("reg_orders").columns == ["id", "day", "label", "amount", "note"]
        # A table declared with its columns gives Lamina no location: refused, saying how to register.
        spark.sql(f"CREATE TABLE reg_cols (id BIGINT) USING lamina LOCATION '{t.uri}'")
        with pytest.raises(AnalysisException, match="without columns"):
            spark.sql("SELECT * FROM reg_cols").collect()
    finally:
        spark.sql("DROP TABLE IF EXISTS reg_orders")
        spark.sql("DROP TABLE IF EXISTS reg_cols")
    assert t.refresh().version == 5 and os.path.isdir(t.uri)  # DROP TABLE removes Spark's registration only


# -- CREATE TABLE -----------------------------------------------------------------------------------


def test_create_table_partitioned_with_properties_and_as_select(spark, tmp_path):
    loc = tmp_path / "orders"
    out = sql(spark, f"""CREATE TABLE lamina.`{loc}` (id BIGINT NOT NULL, ts TIMESTAMP, name STRING, price DECIMAL(10, 2))
                         USING lamina PARTITIONED BY (days(ts), bucket(4, id), truncate(2, name))
                         TBLPROPERTIES ('write.delete.mode' = 'copy-on-write', 'owner.team' = 'shop')""")
    assert out.columns == [] and out.count() == 0  # DDL returns no rows, as Spark's
    t = lamina.open_table(str(loc))
    assert t.schema == pa.schema([pa.field("id", pa.int64(), False), ("ts", pa.timestamp("us", "UTC")),
                                  ("name", pa.string()), ("price", pa.decimal128(10, 2))])
    assert [(f.transform, t.metadata.schema.name_of(f.source_id)) for f in t.partition_spec.fields] == \
        [("day", "ts"), ("bucket[4]", "id"), ("truncate[2]", "name")]
    assert t.properties["write.delete.mode"] == "copy-on-write" and t.properties["owner.team"] == "shop"
    assert t.version == 0
    sql(spark, f"CREATE TABLE IF NOT EXISTS lamina.`{loc}` (x INT) USING lamina")  # exists: nothing happens
    assert t.refresh().version == 0 and t.schema.names == ["id", "ts", "name", "price"]
    with pytest.raises(TableAlreadyExists):
        sql(spark, f"CREATE TABLE lamina.`{loc}` (x INT) USING lamina")
    # AS SELECT into a Spark catalog name: created at LOCATION, registered, so Spark reads it itself.
    try:
        sql(spark, f"CREATE TABLE ctas_days USING lamina PARTITIONED BY (d) LOCATION '{tmp_path / 'ctas'}' "
                   "AS SELECT id, CAST(id % 2 AS INT) AS d FROM range(6)")
        made = lamina.open_table(str(tmp_path / "ctas"))
        assert made.version == 1 and [f.transform for f in made.partition_spec.fields] == ["identity"]
        assert sorted(r.id for r in spark.sql("SELECT id FROM ctas_days").collect()) == list(range(6))
        assert one(sql(spark, "INSERT INTO ctas_days VALUES (6, 0)")) == {"num_affected_rows": 1, "num_inserted_rows": 1}
        assert spark.table("ctas_days").count() == 7
    finally:
        spark.sql("DROP TABLE IF EXISTS ctas_days")


# -- INSERT -----------------------------------------------------------------------------------------


def test_insert_by_position_name_columns_overwrite_and_replace_where(spark, tmp_path):
    t = table(tmp_path, "t", rows(range(3)))
    p = path(t)
    # By position, numbers cast to the column's type as Spark's store assignment does (1 is an INT, 2.5 a DECIMAL).
    assert one(sql(spark, f"INSERT INTO {p} VALUES (10, DATE '2026-01-02', 'b', 2.5), (11, DATE '2026-01-03', 'b', 3)")) == \
        {"num_affected_rows": 2, "num_inserted_rows": 2}
    assert one(sql(spark, f"INSERT INTO {p} (v, id) VALUES ('c', 20)")) == {"num_affected_rows": 1, "num_inserted_rows": 1}
    sql(spark, f"INSERT INTO {p} BY NAME SELECT 'd' AS v, 30L AS id, DATE '2026-01-01' AS day, 0.0 AS amount")
    got = {r[0]: r for r in content(t)}
    assert got[10] == (10, D + dt.timedelta(days=1), "b", 2.5) and got[20] == (20, None, "c", None) and got[30][2] == "d"
    with pytest.raises(InvalidArgument, match="has 2 columns but the table takes 4"):
        sql(spark, f"INSERT INTO {p} VALUES (1, 'x')")
    version = t.refresh().version
    # Delta's REPLACE WHERE: the rows matching the predicate are replaced; a new row outside it
    # fails the statement and nothing is committed.
    sql(spark, f"INSERT INTO {p} REPLACE WHERE day = '2026-01-02' VALUES (40, DATE '2026-01-02', 'r', 4.0)")
    assert sorted(r[0] for r in content(t) if r[1] == D + dt.timedelta(days=1)) == [40]
    assert t.version == version + 1
    with pytest.raises(InvalidArgument, match="not matching the overwrite predicate"):
        sql(spark, f"INSERT INTO {p} REPLACE WHERE day = '2026-01-02' VALUES (41, DATE '2026-01-03', 'r', 4.0)")
    assert t.refresh().version == version + 1
    assert one(sql(spark, f"INSERT OVERWRITE {p} SELECT id * 2, day, v, amount FROM {p} WHERE id < 3")) == \
        {"num_affected_rows": 2, "num_inserted_rows": 2}  # ids 0 and 2 (1 was replaced above)
    assert [r[0] for r in content(t)] == [0, 4]


# -- UPDATE / DELETE --------------------------------------------------------------------------------


def test_update_and_delete_count_rows_as_delta(spark, tmp_path):
    t = table(tmp_path, "t", rows(range(6)), rows(range(6, 9), v=None))
    p = path(t)
    assert one(sql(spark, f"UPDATE {p} SET amount = amount * 10, v = upper(v) WHERE id < 2")) == {"num_affected_rows": 2}
    assert one(sql(spark, f"UPDATE {p} o SET o.v = 'n' WHERE o.v = NULL")) == {"num_affected_rows": 0}  # NULL never equals
    assert one(sql(spark, f"UPDATE {p} SET v = coalesce(v, 'none') WHERE v IS NULL")) == {"num_affected_rows": 3}
    got = {r[0]: r for r in content(t)}
    assert got[0][2:] == ("A", 0.0) and got[1][2:] == ("A", 10.0) and got[2][2:] == ("a", 2.0) and got[7][2] == "none"
    # A WHERE Lamina evaluates exactly prunes files by their statistics (of day 2026-01-01, amount above 2).
    cond = "day = '2026-01-01' AND amount > 2"
    candidates, files = len(t.refresh().plan(where=cond)), len(t.plan())
    assert one(sql(spark, f"DELETE FROM {p} WHERE {cond}")) == {"num_affected_rows": 2}  # ids 3, 6
    assert t.refresh().metadata.summary["files-scanned"] == candidates < files
    assert one(sql(spark, f"DELETE FROM {p} WHERE length(v) > 1 OR id % 4 = 1")) == {"num_affected_rows": 4}  # 7, 8, 1, 5
    assert [r[0] for r in content(t)] == [0, 2, 4]
    assert one(sql(spark, f"DELETE FROM {p}")) == {"num_affected_rows": 3}
    assert content(t) == []


def test_where_reads_timestamps_in_the_session_time_zone(spark, tmp_path):
    """Spark reads '2026-01-01 00:00:00' compared with a TIMESTAMP in the session time zone; the
    Lamina predicate that prunes the files must select the same rows."""
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])
    t = lamina.create_table(str(tmp_path / "ts"), schema, partition_by=["hour(ts)"])
    t0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
    t.append(pa.table({"id": list(range(12)), "ts": [t0 + dt.timedelta(hours=h) for h in range(12)]}, schema=schema))
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")  # UTC+05:30
    try:
        cond = "ts < '2026-01-01 10:00:00'"  # 04:30 UTC: ids 0..4
        import sqlglot

        node = sqlglot.parse_one(f"SELECT 1 WHERE {cond}", read="spark").args["where"].this
        assert lamina_predicate(node, t.metadata.schema, "Asia/Kolkata") is not None  # Lamina prunes by it
        expected = spark.read.format("lamina").load(t.uri).where(cond).count()
        assert expected == 5
        assert one(sql(spark, f"DELETE FROM {path(t)} WHERE {cond}")) == {"num_affected_rows": 5}
        assert t.refresh().metadata.summary["files-scanned"] == 5
        assert [r[0] for r in content(t)] == list(range(5, 12))
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


# -- MERGE ------------------------------------------------------------------------------------------


def test_merge_clauses_counts_and_errors_as_delta(spark, tmp_path):
    t = table(tmp_path, "t", rows(range(5)))
    p = path(t)
    spark.createDataFrame([(1, "u", 5.0), (2, "d", 0.0), (3, "u", -1.0), (9, "i", 9.0), (10, "x", 1.0)],
                          "key long, op string, amount double").createOrReplaceTempView("merge_changes")
    out = sql(spark, f"""MERGE INTO {p} AS t USING merge_changes AS s ON t.id = s.key
        WHEN MATCHED AND s.op = 'd' THEN DELETE
        WHEN MATCHED AND s.amount > 0 THEN UPDATE SET t.amount = t.amount + s.amount, v = 'up'
        WHEN NOT MATCHED AND s.op = 'i' THEN INSERT (id, day, v, amount) VALUES (s.key, DATE '2026-01-05', 'new', s.amount)
        WHEN NOT MATCHED BY SOURCE AND t.id = 0 THEN UPDATE SET v = 'stale'
        WHEN NOT MATCHED BY SOURCE THEN DELETE""")
    assert out.columns == ["num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows"]
    # matched: 1 updated, 2 deleted, 3 taken by no clause (stays); not matched: 9 inserted, 10 by none;
    # not matched by source: 0 updated, 4 deleted.
    assert one(out) == {"num_affected_rows": 5, "num_updated_rows": 2, "num_deleted_rows": 2, "num_inserted_rows": 1}
    assert content(t) == [(0, D, "stale", 0.0), (1, D + dt.timedelta(days=1), "up", 6.0), (3, D, "a", 3.0),
                          (9, dt.date(2026, 1, 5), "new", 9.0)]
    version = t.version
    spark.createDataFrame([(3, "a"), (3, "b")], "id long, v string").createOrReplaceTempView("merge_dupes")
    with pytest.raises(InvalidArgument, match="more than one source row"):  # Delta refuses it too; nothing committed
        sql(spark, f"MERGE INTO {p} t USING merge_dupes s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v")
    with pytest.raises(InvalidArgument, match="only the\\s+last may omit"):
        sql(spark, f"MERGE INTO {p} t USING merge_dupes s ON t.id = s.id WHEN MATCHED THEN DELETE "
                   "WHEN MATCHED AND s.v = 'a' THEN UPDATE SET v = s.v")
    with pytest.raises(UnsupportedStatement) as e:
        sql(spark, f"MERGE INTO {p} t USING merge_dupes s ON t.id = s.id AND t.amount > 1 WHEN MATCHED THEN DELETE")
    assert e.value.clause == "ON t.amount > 1"
    with pytest.raises(InvalidArgument, match="ambiguous"):
        sql(spark, f"MERGE INTO {p} t USING merge_dupes s ON t.id = s.id WHEN MATCHED AND v = 'a' THEN DELETE")
    with pytest.raises(SchemaMismatch):  # UPDATE SET * needs every table column in the source
        sql(spark, f"MERGE INTO {p} t USING merge_dupes s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *")
    assert t.refresh().version == version
    # A subquery source, whole rows (the driver's Arrow merge): Delta's upsert.
    out = sql(spark, f"MERGE INTO {p} t USING (SELECT id + 1 AS id, day, 'ups' AS v, amount FROM {p}) s ON t.id = s.id "
                     "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert one(out) == {"num_affected_rows": 4, "num_updated_rows": 1, "num_deleted_rows": 0, "num_inserted_rows": 3}
    assert [r[0] for r in content(t)] == [0, 1, 2, 3, 4, 9, 10] and [r[2] for r in content(t)][1] == "ups"


# -- ALTER TABLE ------------------------------------------------------------------------------------


def test_alter_table_columns_and_a_registered_table_sees_them(spark, tmp_path):
    t = table(tmp_path, "t", rows(range(2)))
    spark.sql(f"CREATE TABLE alter_orders USING lamina LOCATION '{t.uri}'")
    try:
        sql(spark, "ALTER TABLE alter_orders ADD COLUMNS (note STRING COMMENT 'free text' AFTER v, qty INT)")
        sql(spark, "ALTER TABLE alter_orders ADD COLUMN flag BOOLEAN NOT NULL DEFAULT true FIRST")
        sql(spark, "ALTER TABLE alter_orders RENAME COLUMN note TO remark")
        sql(spark, "ALTER TABLE alter_orders ALTER COLUMN qty TYPE BIGINT")
        sql(spark, "ALTER TABLE alter_orders ALTER COLUMN flag DROP NOT NULL")
        sql(spark, "ALTER TABLE alter_orders DROP COLUMN IF EXISTS nothing_there")
        sql(spark, "ALTER TABLE alter_orders DROP COLUMNS (amount)")
        t.refresh()
        assert t.schema == pa.schema([("flag", pa.bool_()), ("id", pa.int64()), ("day", pa.date32()), ("v", pa.string()),
                                      ("remark", pa.string()), ("qty", pa.int64())])
        assert t.metadata.schema.arrow.field("remark").metadata[b"lamina.doc"] == b"free text"
        # Spark's catalog was registered again: Spark reads the new columns itself, old rows with the default.
        assert [tuple(r) for r in spark.sql("SELECT flag, id, remark, qty FROM alter_orders ORDER BY id").collect()] == \
            [(True, 0, None, None), (True, 1, None, None)]
        version = t.version
        with pytest.raises(SchemaMismatch):  # narrowing is not a widening: refused, nothing committed
            sql(spark, "ALTER TABLE alter_orders ALTER COLUMN qty TYPE INT")
        with pytest.raises(UnsupportedStatement):
            sql(spark, "ALTER TABLE alter_orders ALTER COLUMN qty SET NOT NULL")
        assert t.refresh().version == version
    finally:
        spark.sql("DROP TABLE IF EXISTS alter_orders")


def test_set_and_unset_table_properties(spark, tmp_path):
    t = table(tmp_path, "t", **{"owner.team": "shop"})
    p = path(t)
    sql(spark, f"ALTER TABLE {p} SET TBLPROPERTIES ('write.delete.mode' = 'copy-on-write', 'owner.on-call' = 'ana')")
    assert t.refresh().properties["write.delete.mode"] == "copy-on-write" and t.properties["owner.on-call"] == "ana"
    version = t.version
    sql(spark, f"ALTER TABLE {p} UNSET TBLPROPERTIES ('owner.team', 'owner.on-call')")
    assert "owner.team" not in t.refresh().properties and t.version == version + 1
    with pytest.raises(InvalidArgument):  # Delta: unsetting a property the table does not have fails without IF EXISTS
        sql(spark, f"ALTER TABLE {p} UNSET TBLPROPERTIES ('owner.team')")
    sql(spark, f"ALTER TABLE {p} UNSET TBLPROPERTIES IF EXISTS ('owner.team')")
    assert t.refresh().version == version + 1


# -- time travel, history, tags, branches -----------------------------------------------------------


def test_time_travel_history_tags_and_branches(spark, tmp_path):
    t = table(tmp_path, "t", rows(range(3)), rows(range(3, 5)))          # versions 1, 2
    p = path(t)
    sql(spark, f"ALTER TABLE {p} CREATE TAG first_two AS OF VERSION 1")
    sql(spark, f"ALTER TABLE {p} CREATE BRANCH audit")
    t.branch("audit").append(rows([100]))
    sql(spark, f"DELETE FROM {p} WHERE id = 0")                           # main's latest (after the one enabling branches)
    count = lambda q: sql(spark, q).count()  # noqa: E731
    assert count(f"SELECT * FROM {p} VERSION AS OF 1") == 3
    assert count(f"SELECT * FROM {p} VERSION AS OF 'first_two'") == 3   # a tag
    assert count(f"SELECT * FROM {p} VERSION AS OF 'audit'") == 6       # a branch: its head
    assert count(f"SELECT * FROM {p}") == 4
    v2_at = t.log.load(2).timestamp_ms
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:  # a timestamp string is read in the session time zone, as Delta reads it
        local = dt.datetime.fromtimestamp(v2_at / 1000, UTC).astimezone(__import__("zoneinfo").ZoneInfo("America/New_York"))
        assert count(f"SELECT * FROM {p} TIMESTAMP AS OF '{local.replace(tzinfo=None).isoformat(sep=' ')}'") == 5
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    joined = sql(spark, f"SELECT count(*) AS n FROM {p} VERSION AS OF 1 a JOIN {p} b ON a.id = b.id").first().n
    assert joined == 2  # ids 1, 2: both versions in one query
    described = sql(spark, f"DESCRIBE {p}")  # Spark's DESCRIBE of the table Lamina reads
    assert [r.col_name for r in described.collect()][:len(t.schema.names)] == t.schema.names
    hist = sql(spark, f"DESCRIBE HISTORY {p}")
    assert hist.columns == ["version", "timestamp", "operation", "readVersion", "operationMetrics", "commitId", "branch"]
    latest = t.refresh().version
    got = [(r.version, r.operation) for r in hist.collect()]
    assert [v for v, _ in got] == list(range(latest, -1, -1))
    assert got[0][1] == "delete" and [op for _, op in got[-3:]] == ["append", "append", "create"]
    assert sql(spark, f"DESCRIBE HISTORY {p} LIMIT 1").first().operationMetrics["deleted-rows"] == "1"
    assert [r.tag_name for r in sql(spark, f"SHOW TAGS {p}").collect()] == ["first_two"]
    audit = t.branch("audit").version
    assert [(r.name, r.head_version) for r in sql(spark, f"SHOW BRANCHES IN {p}").collect()] == [("main", latest), ("audit", audit)]
    sql(spark, f"ALTER TABLE {p} DROP TAG first_two")
    sql(spark, f"ALTER TABLE {p} DROP TAG IF EXISTS first_two")
    assert t.tags.list() == []


# -- procedures -------------------------------------------------------------------------------------


def test_iceberg_procedures(spark, tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"expire.reader-grace-ms": "0"})
    for i in range(4):
        t.append(rows([i]))
    loc = t.uri
    out = sql(spark, f"CALL lamina.system.rewrite_data_files(table => '{loc}', options => map('min-file-size-bytes', '1000000'))")
    assert out.columns == ["rewritten_data_files_count", "added_data_files_count", "rewritten_bytes_count", "failed_data_files_count"]
    r = one(out)
    assert (r["rewritten_data_files_count"], r["added_data_files_count"]) == (4, 1) and r["rewritten_bytes_count"] > 0
    assert t.refresh().metadata.operation == "compact" and len(t.plan()) == 1
    r = one(sql(spark, f"CALL lamina.system.rollback_to_snapshot('{loc}', 2)"))
    assert r == {"previous_snapshot_id": 5, "current_snapshot_id": 6} and [x[0] for x in content(t)] == [0, 1]
    assert one(sql(spark, f"CALL lamina.system.create_tag(table => '{loc}', tag => 'two', version => 2)")) == \
        {"tag_name": "two", "tagged_version": 2}
    r = one(sql(spark, f"CALL lamina.system.expire_snapshots(table => '{loc}', older_than => current_timestamp(), retain_last => 1)"))
    assert r["expired_versions_count"] >= 5 and r["deleted_data_files_count"] == 3  # ids 2, 3 and the compacted file
    assert sql(spark, f"SELECT * FROM lamina.`{loc}` VERSION AS OF 'two'").count() == 2
    stray = os.path.join(loc, "data", "stray.parquet")
    with open(stray, "wb") as f:
        f.write(b"not referenced")
    orphans = sql(spark, f"CALL lamina.system.remove_orphan_files(table => '{loc}', older_than => current_timestamp() + "
                         "INTERVAL 1 MINUTE, dry_run => true, allow_short_age => true)")
    assert "data/stray.parquet" in [r.orphan_file_location for r in orphans.collect()] and os.path.exists(stray)
    r = one(sql(spark, f"CALL lamina.system.create_branch('{loc}', 'dev')"))
    base = t.refresh().version  # (main's latest: making the first branch enables branches in a version)
    assert r == {"branch_name": "dev", "base_version": base}
    t.branch("dev").append(rows([50]))
    r = one(sql(spark, f"CALL lamina.system.fast_forward('{loc}', 'main', 'dev')"))
    assert r == {"branch_updated": "main", "previous_ref": base, "updated_ref": base + 1} and 50 in [x[0] for x in content(t)]
    t.append(rows([60]))
    with pytest.raises(InvalidArgument, match="cannot fast-forward"):  # main moved since dev was made from it
        sql(spark, f"CALL lamina.system.fast_forward('{loc}', 'main', 'dev')")
    sql(spark, f"CALL lamina.system.drop_branch('{loc}', 'dev')")
    sql(spark, f"CALL lamina.system.drop_tag('{loc}', 'two')")
    assert t.branches.list() == [] and t.tags.list() == []
    with pytest.raises(UnsupportedStatement, match="no such Lamina procedure"):
        sql(spark, f"CALL lamina.system.migrate('{loc}')")


# -- names ------------------------------------------------------------------------------------------


def test_catalog_identifiers_given_or_configured(spark, tmp_path):
    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/wh/catalog.db")
    cat.create_namespace("shop")
    sql(spark, "CREATE TABLE shop.items (id BIGINT, name STRING) USING lamina", catalog=cat)
    assert cat.table_exists("shop.items")
    sql(spark, "INSERT INTO shop.items VALUES (1, 'pen'), (2, 'ink')", catalog=cat)
    spark.conf.set("spark.lamina.catalog", f"sqlite:///{tmp_path}/wh/catalog.db")
    try:  # the session's catalog: shop.items, and lamina.shop.items, name the catalog's table
        assert sorted(r.name for r in sql(spark, "SELECT name FROM shop.items").collect()) == ["ink", "pen"]
        sql(spark, "UPDATE lamina.shop.items SET name = 'ball pen' WHERE id = 1")
        assert sql(spark, "SELECT name FROM shop.items VERSION AS OF 1 WHERE id = 1").first().name == "pen"
        assert sql(spark, "SELECT name FROM shop.items WHERE id = 1").first().name == "ball pen"
        assert [r.col_name for r in sql(spark, "DESCRIBE shop.items").collect()][:2] == ["id", "name"]
    finally:
        spark.conf.unset("spark.lamina.catalog")
    assert cat.table_info("shop.items").version == 2  # every commit went through the catalog


def test_statements_naming_no_lamina_table_are_sparks(spark, tmp_path):
    t = table(tmp_path, "t", rows(range(2)))
    assert sql(spark, "SELECT 1 AS x").first().x == 1
    spark.range(3).write.parquet(str(tmp_path / "pq"))
    assert sql(spark, f"SELECT count(*) AS n FROM parquet.`{tmp_path / 'pq'}`").first().n == 3
    with pytest.raises(AnalysisException):  # Spark's own error, not Lamina's
        sql(spark, "SELECT * FROM no_such_table_anywhere")
    # A Lamina table read by another format's statement: its reference is read by Lamina.
    sql(spark, f"CREATE TEMPORARY VIEW from_lamina AS SELECT id FROM {path(t)} VERSION AS OF 1")
    assert spark.table("from_lamina").count() == 2


def test_unsupported_clauses_are_refused_naming_them(spark, tmp_path):
    t = table(tmp_path, "t", rows(range(2)))
    p = path(t)
    cases = {
        f"INSERT OVERWRITE {p} PARTITION (day = '2026-01-01') SELECT id, v, amount FROM {p}": "PARTITION (...)",
        f"UPDATE {p} SET id = 1 WHERE id IN (SELECT id FROM {p})": f"WHERE id IN (SELECT id FROM {p})",
        f"CREATE TABLE lamina.`{tmp_path / 'n'}` (a INT DEFAULT 1) USING lamina": "a DEFAULT",
        f"CREATE OR REPLACE TABLE {p} (a INT) USING lamina": "CREATE OR REPLACE TABLE",
        f"UPDATE {p} SET id = 1 FROM {p} x": "UPDATE ... FROM",
        f"DELETE FROM {p} VERSION AS OF 1 WHERE id = 1": f"{p} VERSION AS OF 1",
        f"TRUNCATE TABLE {p}, {p}": "TRUNCATE TABLE",
        f"RESTORE TABLE {p} TO VERSION AS OF 0": "RESTORE",  # Delta's: the message names the procedure
        f"ALTER TABLE {p} ALTER COLUMN v SET DEFAULT 'x'": None,
    }
    for text, clause in cases.items():
        with pytest.raises(Exception) as e:
            sql(spark, text)
        if clause is not None:
            assert isinstance(e.value, UnsupportedStatement) and e.value.clause == clause, (text, e.value)
    assert t.refresh().version == 1 and not os.path.exists(tmp_path / "n")


def test_truncate_table_removes_every_row_and_keeps_history(spark, tmp_path):
    """Delta's TRUNCATE TABLE: one version with no rows; the versions before it stay readable."""
    t = table(tmp_path, "t", rows(range(5)))
    before = content(t)
    sql(spark, f"TRUNCATE TABLE {path(t)}")
    assert t.refresh().version == 2 and content(t) == []
    assert t.to_arrow().schema == SCHEMA
    assert sorted(tuple(r.values()) for r in t.at(1).to_arrow().to_pylist()) == before
    assert sql(spark, f"SELECT count(*) AS n FROM {path(t)} VERSION AS OF 1").first().n == 5
    with pytest.raises(Exception, match="VERSION"):  # neither sqlglot nor Spark parses it: Spark's error
        sql(spark, f"TRUNCATE TABLE {path(t)} VERSION AS OF 1")
    assert t.refresh().version == 2


def test_set_not_null_is_refused_with_or_without_nulls_and_commits_nothing(spark, tmp_path):
    """Lamina's schema update cannot make an optional column required, so SET NOT NULL is
    refused, naming the clause, on a column without nulls too; the table is unchanged."""
    t = table(tmp_path, "t", rows(range(3)))
    before = content(t)
    for col in ("v", "id"):  # neither holds a null
        with pytest.raises(UnsupportedStatement) as e:
            sql(spark, f"ALTER TABLE {path(t)} ALTER COLUMN {col} SET NOT NULL")
        assert e.value.clause == f"ALTER COLUMN {col} SET NOT NULL" and "cannot make" in str(e.value)
    assert t.refresh().version == 1 and content(t) == before
    assert all(f.nullable for f in t.schema)
