"""``spark.read.format("lamina")`` / ``df.write.format("lamina")``: Lamina as a PySpark Python data source.

Reads plan on the driver side with Lamina's planner, pinned to the version
resolved at ``load()``, prune by the ``where`` option, and yield Arrow batches
from balanced partitions of files; Spark evaluates the filters of each query
(see ``LaminaReader`` for why none are pushed). Writes run Lamina's data-file
writer on the executors and commit one version on the driver side from the
tasks' commit messages, through an engine write session
(``lamina.table.WriteSession``); a failed job commits nothing and removes
what it wrote. Streaming writes commit each micro-batch exactly once (the query's id,
or the ``appId`` option, and the batch id recorded in the version).

This module is the source Spark registers; its reader is ``lamina.spark.datasource_reader``,
its writers ``lamina.spark.datasource_writer``, its options ``lamina.spark.datasource_options``
(the change feed's reader: ``lamina.spark.changes``; the stream's: ``lamina.spark.stream_source``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from lamina.errors import InvalidArgument
from lamina.spark._types import spark_schema
from lamina.spark.datasource_options import _STORAGE_KEYS, _opt, _ref, _time_travel, columns_opt
from lamina.spark.datasource_reader import LaminaReader
from lamina.spark.datasource_writer import LaminaStreamWriter, LaminaWriter
from lamina.spark.read import resolve_scan
from lamina.spark.registered import (
    check_registered_schema,
    is_registration,
    not_registered,
    registered_options,
    registration,
    with_registration,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class LaminaDataSource(DataSource):
    """The ``lamina`` format. Options: path (a location, or ``ns.name`` with catalog), catalog (a
    catalog URI; commits go through it), catalog.password, branch (read or write that branch:
    versionAsOf/timestampAsOf are then the branch's), versionAsOf, timestampAsOf, tag, where
    (a Lamina predicate the DataFrame is restricted to: prunes files), columns (the columns to
    read, row lineage columns included), numPartitions, readChangeFeed with startingVersion /
    endingVersion / startingTimestamp / endingTimestamp (the change feed; lamina.spark.changes),
    streaming reads (maxFilesPerTrigger, skipChangeCommits; lamina.spark.stream_source),
    partitionBy (a new table's partitioning, as Spark's own partitionBy(...); an existing
    table's must match), replaceWhere (overwrite), txnAppId/txnVersion (idempotent batch
    writes), appId (streaming writes: overrides the query's id), and object-store options (endpoint, region, …). Save
    modes other than append and overwrite, Spark's partitionBy and saveAsTable reach it through
    lamina.spark.dataframe_writer (installed by ``register``)."""

    # The version read (the change feed's last one): set by schema(), pickled with the instance
    # (Spark asks not to override __init__).
    version: int | None = None
    # A change feed read's start (its range is (change_start, version]); None: not resolved.
    change_start: int | None = None

    @classmethod
    def name(cls) -> str:
        return "lamina"

    def schema(self) -> StructType:
        """The schema of the version to read, resolved now (at ``load()``) and kept on this
        instance, which Spark pickles into every reader of the DataFrame: all its queries read
        that version, with that schema. An invalid ``where``, ``columns`` or change range fails here."""
        from lamina.spark.changes import changes_spark_schema, feed_of, reads_changes

        table = _ref(self.options).open()
        columns = columns_opt(self.options)
        if reads_changes(self.options):
            if any(_time_travel(self.options).values()):
                raise InvalidArgument(
                    "versionAsOf, timestampAsOf and tag do not apply to readChangeFeed: "
                    "give the range with startingVersion/endingVersion (or the timestamps)"
                )
            feed = feed_of(table, self.options)
            if feed is not None:
                self.change_start, self.version = feed.start_version, feed.end_version
                return changes_spark_schema(feed.reader)
            scan = table.scan(where=_opt(self.options, "where"), columns=columns)  # a stream's: no range yet
            self.version = scan.version
            return changes_spark_schema(scan)
        scan = resolve_scan(table, where=_opt(self.options, "where"), columns=columns, **_time_travel(self.options))
        self.version = scan.version
        schema = spark_schema(scan.arrow_schema_of(scan.output_columns))
        if is_registration(self.options):  # CREATE TABLE ... USING lamina: Spark's catalog records this schema
            return with_registration(schema, registration(self.options, _STORAGE_KEYS))
        return schema

    def _registered(self, schema: StructType, what: str) -> dict[str, str]:
        """The options of a read or write of a table registered in Spark's catalog, which Spark
        gives only its recorded schema (lamina.spark.registered), with those of the query."""
        recorded = registered_options(schema)
        if recorded is None:
            raise not_registered(what)
        return {**recorded, **{k.lower(): v for k, v in self.options.items()}}

    def _registered_read(self, schema: StructType) -> tuple[dict[str, str], int]:
        """A registered table's read options and version: its latest, in the columns Spark recorded."""
        options = self._registered(schema, "reads")
        table = _ref(options).open()
        scan = resolve_scan(table, where=_opt(options, "where"), **_time_travel(options))
        current = spark_schema(scan.arrow_schema_of(scan.output_columns))
        options["columns"] = json.dumps(check_registered_schema(schema, current, table.uri))
        return options, scan.version

    def reader(self, schema: StructType) -> DataSourceReader:
        from lamina.spark.changes import LaminaChangesReader, reads_changes

        if self.version is None:  # Spark calls schema() unless it has one: a read given one, or a catalog table's
            options, version = self._registered_read(schema)
            return LaminaReader(options, schema, version)
        if reads_changes(self.options):
            if self.change_start is None:
                raise InvalidArgument(
                    "readChangeFeed needs option startingVersion or startingTimestamp: the first version whose "
                    "changes to read (inclusive, as in Delta); endingVersion/endingTimestamp (default: the latest)"
                )
            return LaminaChangesReader(self.options, schema, self.change_start, self.version)
        return LaminaReader(self.options, schema, self.version)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from lamina.spark.stream_source import LaminaStreamReader

        if self.version is None:  # spark.readStream.table(name) of a catalog table's
            options, version = self._registered_read(schema)
            return LaminaStreamReader(options, schema, version)
        return LaminaStreamReader(self.options, schema, self.version)

    def _write_options(self, schema: StructType) -> Mapping[str, str]:
        """A write's options: its own, or (INSERT INTO a Spark catalog table, which Spark hands
        no path) the registered table's."""
        return self.options if _opt(self.options, "path") is not None else self._registered(schema, "writes")

    def writer(self, schema: StructType, overwrite: bool) -> LaminaWriter:
        return LaminaWriter(self._write_options(schema), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> LaminaStreamWriter:
        return LaminaStreamWriter(self._write_options(schema), schema, overwrite)


def register(spark: SparkSession) -> None:
    """Make ``format("lamina")`` available in ``spark``: the data source, the save modes,
    ``partitionBy``, ``saveAsTable`` and ``start()`` checks Spark does not give a Python data
    source (lamina.spark.dataframe_writer), and Spark's own reader and writer for tables on
    object stores S3A reaches (lamina.spark.dataframe_reader, dataframe_writer.native_store)."""
    from lamina.spark import dataframe_reader, dataframe_writer

    spark.dataSource.register(LaminaDataSource)
    dataframe_writer.install()
    dataframe_reader.install()
