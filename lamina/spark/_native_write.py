"""Spark's native Parquet writer, with only the files of committed task attempts handed back.

Spark's ``df.write.parquet`` commits through Hadoop's FileOutputCommitter: each task attempt
writes under ``_temporary/`` and committing renames its files into place, twice (task, then
job). A rename is a metadata operation on local disk and HDFS, but on S3 it is a copy of every
byte, not atomic. The S3A committers that avoid it (magic, staging) need Spark's
``spark-hadoop-cloud`` module for Parquet, which PySpark does not ship.

So Lamina writes as Spark's own exactly-once file sink does (structured streaming's
``FileStreamSink``, run here for one batch): **write, then register**.

1. Each task attempt writes its files directly where they stay, under the write's directory
   (``data/spark-<write id>/``, partition directories below it), each named with a random UUID
   (``part-<task>-<uuid>.c000.<codec>.parquet``), so no two attempts ever write one object. An
   object store makes each file visible whole, at its close, or not at all.
2. A task attempt that commits (Spark's output commit coordinator lets exactly one attempt of
   each task commit, speculative copies included) reports its files to the driver; one that
   fails or loses the race deletes its files (``ManifestFileCommitProtocol.abortTask``).
3. The job commit writes the committed tasks' files, and only those, into one manifest
   (``_spark_metadata/0``: path and size of each file), read here.
4. The caller registers exactly those files in ONE Lamina commit (``WriteSession``); anything
   else under the write's directory (files of an attempt that died without cleaning up: a lost
   executor, a killed task; Hadoop's ``.crc`` side files; the manifest itself) is deleted
   before the commit and never referenced. A job that fails commits nothing, and the write
   session deletes the directory.

No file is copied or renamed, on any store. A version references whole files only, each
exactly once: the manifest lists each committed file once, Lamina commits it once, and a
failed or retried attempt's files are never in it. (A zombie attempt that writes after the
cleanup, on an executor Spark already gave up, leaves an unreferenced file for orphan cleanup.)
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from lamina.errors import CorruptMetadata
from lamina.io import FileIO

log = logging.getLogger(__name__)

MANIFEST_DIR = "_spark_metadata"
_SINK = "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink"
_PARQUET = "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat"


def write_committed(
    df: Any,
    io: FileIO,
    root_uri: str,
    out_dir: str,
    partition_by: Sequence[str],
    options: Mapping[str, str],
    metrics: str | None = None,
) -> tuple[list[str], list[int], dict[str, Any]]:
    """Write ``df`` with Spark's native Parquet writer under ``out_dir`` (table-relative) of the
    table at ``io`` (``root_uri``: its root as Spark reaches it), partitioned by the columns
    ``partition_by`` (Hive-style directories), with the writer ``options`` (``compression``,
    ``maxRecordsPerFile``, ``parquet.*``). Returns the committed files' table-relative paths and
    sizes (sorted by path) and, with ``metrics`` (the name of an ``observe`` on ``df``), the
    values it observed while writing."""
    spark = df.sparkSession
    jvm = spark._jvm
    utils = jvm.org.apache.spark.api.python.PythonUtils
    sink = getattr(jvm, _SINK)(  # py4j resolves the class by its dotted name
        spark._jsparkSession,
        f"{root_uri}/{out_dir}",
        getattr(jvm, _PARQUET)(),
        utils.toSeq(jvm.java.util.ArrayList(list(partition_by))),
        utils.toScalaMap(dict(options)),
    )
    sink.addBatch(0, df._jdf)
    observed: dict[str, Any] = {}
    if metrics is not None:
        row = df._jdf.queryExecution().observedMetrics().get(metrics)
        if row.isDefined():
            r = row.get()
            names = list(r.schema().fieldNames())
            observed = {n: r.get(i) for i, n in enumerate(names)}
    paths, sizes = _committed_files(io, root_uri, out_dir)
    # The manifest through Hadoop's file system, which also removes what it made for it (a
    # directory, or on S3 the directory's marker object, which Lamina's FileIO does not list).
    manifest = jvm.org.apache.hadoop.fs.Path(f"{root_uri}/{out_dir}/{MANIFEST_DIR}")
    manifest.getFileSystem(spark._jsparkSession.sparkContext().hadoopConfiguration()).delete(manifest, True)
    _remove_the_rest(io, out_dir, set(paths))
    return paths, sizes, observed


def _committed_files(io: FileIO, root_uri: str, out_dir: str) -> tuple[list[str], list[int]]:
    """The files the job's manifest lists, as table-relative paths, and their sizes."""
    text = io.get(f"{out_dir}/{MANIFEST_DIR}/0").decode("utf-8")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "v1":
        raise CorruptMetadata(f"{out_dir}/{MANIFEST_DIR}/0: not a file sink manifest (version {lines[:1]})")
    root = urllib.parse.unquote(urllib.parse.urlparse(root_uri).path).rstrip("/") + "/"
    out: dict[str, int] = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        status = json.loads(line)
        if status.get("action", "add") != "add" or status.get("isDir"):
            continue
        path = urllib.parse.unquote(urllib.parse.urlparse(status["path"]).path)
        if not path.startswith(root):
            raise CorruptMetadata(f"Spark reported a file outside the table: {status['path']} (root {root_uri})")
        out[path[len(root) :]] = int(status["size"])
    paths = sorted(out)
    return paths, [out[p] for p in paths]


def _remove_the_rest(io: FileIO, out_dir: str, keep: set[str]) -> None:
    """Delete what lies under ``out_dir`` besides ``keep``: side files (Hadoop's ``.crc``) and
    files of attempts that did not commit and could not clean up after themselves."""
    doomed = sorted(o.path for o in io.walk(out_dir) if o.path not in keep)
    if doomed:
        log.debug("removing %d files under %s that no committed task attempt wrote", len(doomed), out_dir)
        io.delete_many(doomed)
