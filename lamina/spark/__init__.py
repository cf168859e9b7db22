"""Lamina tables from PySpark.

    from lamina.spark import spark_session, read, write
    spark = spark_session()                      # or your own session + lamina.spark.register(spark)
    write(df, "warehouse/orders", partition_by=["day(ts)"])          # native Parquet writer, one version
    read(spark, "warehouse/orders", where="amount > 100").count()    # native Parquet reader over planned files
    spark.read.format("lamina").option("versionAsOf", 3).load("warehouse/orders")
    df.write.format("lamina").mode("append").save("s3://bucket/orders")  # native over s3a:// with S3A, else the Python data source
    system_table(spark, "warehouse/orders", "$snapshots").show()     # also $tags, $branches, $files, $manifests
    merge("warehouse/orders", changes_df, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    delete(spark, "warehouse/orders", "status = 'cancelled'")        # deletion vectors, one version
    update(spark, "warehouse/orders", "status = 'open'", set={"amount": "amount * 1.1"})  # Delta's update
    compact(spark, "warehouse/orders", target_file_size=128 << 20)   # groups rewritten by Spark tasks
    read(spark, "warehouse/orders", columns=["order_id", "_row_id", "_last_updated_version"])   # row lineage
    read_changes(spark, "warehouse/orders", 3, 7)                    # changes of versions 4..7 (Table.changes)
    spark.read.format("lamina").option("readChangeFeed", "true").option("startingVersion", 4).load("warehouse/orders")
    spark.readStream.format("lamina").load("warehouse/orders")       # new versions as micro-batches
    write(df, "warehouse/orders", branch="audit")                    # every entry point takes branch= (option "branch")
    read(spark, "warehouse/orders", branch="audit", version=5)       # the branch's version 5

    # Tables of a catalog: pass the Table, or the identifier and the catalog; commits go through it.
    cat = lamina.load_catalog("sqlite:///warehouse/catalog.db")
    write(df, "shop.orders", catalog=cat, partition_by=["day(ts)"])  # creates it in the catalog
    read(spark, cat.load_table("shop.orders")).count()
    df.write.format("lamina").option("catalog", "sqlite:///warehouse/catalog.db").mode("append").save("shop.orders")
    with cat.transaction() as tx:                                    # several tables, one catalog commit
        write(day_df, tx.table("shop.orders")); write(summary_df, tx.table("shop.daily"))
    read(spark, "shop.daily", snapshot=cat.snapshot())               # every table at one catalog state

    # SQL statements as for Delta (lamina.spark.statements): DDL, DML, time travel, procedures.
    sql(spark, "MERGE INTO shop.orders t USING changes s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
               "WHEN NOT MATCHED THEN INSERT *", catalog=cat).show()      # num_affected_rows, num_updated_rows, ...
    sql(spark, "SELECT * FROM lamina.`warehouse/orders` VERSION AS OF 3")
    sql(spark, "CALL lamina.system.rewrite_data_files(table => 'shop.orders')", catalog=cat)

See docs/spark.md.
"""

from lamina.spark._types import arrow_schema
from lamina.spark.changes import read_changes
from lamina.spark.compact import compact
from lamina.spark.datasource import LaminaDataSource, register
from lamina.spark.delete_update import delete, update
from lamina.spark.merge_into import SparkMergeBuilder, merge
from lamina.spark.read import read
from lamina.spark.session import spark_session
from lamina.spark.statements import sql
from lamina.spark.streaming import foreach_batch_merge, foreach_batch_writer
from lamina.spark.system import system_table
from lamina.spark.write import write

__all__ = [
    "LaminaDataSource",
    "SparkMergeBuilder",
    "arrow_schema",
    "compact",
    "delete",
    "foreach_batch_merge",
    "foreach_batch_writer",
    "merge",
    "read",
    "read_changes",
    "register",
    "spark_session",
    "sql",
    "system_table",
    "update",
    "write",
]
