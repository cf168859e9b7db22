"""Spark-distributed compaction: the bin-packed groups are rewritten by Spark tasks.

The driver plans exactly as ``Table.compact`` does (``lamina.operations.compaction``:
small and deletion-vector-carrying files, bin-packed per partition) and commits one
version replacing inputs with outputs; each group is one Spark task, which opens the
table by location at the planned version, reads its inputs with Lamina's reader
(deleted rows dropped), sorts if the table has a sort order, and writes the output
files under the table with the compaction's write id. Only entries (a few hundred
bytes a file) travel back to the driver.

Concurrency and safety are the Arrow compaction's: appends never conflict; a group
whose inputs a concurrent delete changed is recomputed (as another Spark job of just
those groups) carrying the new deletes. An in-flight marker covers the job, so orphan
cleanup never deletes outputs that are about to be committed. Works on every store
the tasks can reach (local paths, ``s3://``), since tasks use Lamina's FileIO.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import pyarrow as pa

import lamina
from lamina.errors import CommitStateUnknown
from lamina.operations import compaction
from lamina.operations.compaction import DEFAULT_TARGET, CompactFiles, CompactionResult
from lamina.spark._target import TableRef
from lamina.spec.version import VersionManifest
from lamina.data.inflight import files_of_writes, inflight, new_write_id


def _group_task(location: str, storage: Mapping[str, Any] | None, version: int, target: int, sort_by: list[str],
                write_id: str) -> Callable[[pa.Table], pa.Table]:
    """What one Spark task runs: rewrite one group's input files as output files; their entries."""

    def run(group: pa.Table) -> pa.Table:
        table = lamina.open_table(location, storage_options=storage)
        base = table.log.load(version)
        op = CompactFiles(table, None, target, 0, sort_by, write_id)
        return op._rewrite(base, group)

    return run


def spark_rewriter(spark: Any) -> Callable[[CompactFiles, VersionManifest, list[pa.Table]], Iterable[pa.Table]]:
    """``CompactFiles.rewrite_groups`` running each group as one Spark task (in group order)."""

    def rewrite(op: CompactFiles, base: VersionManifest, groups: list[pa.Table]) -> list[pa.Table]:
        if not groups:
            return []
        io = op.table.io
        task = _group_task(io.uri, io.options or None, base.version, op.target, op.sort_by, op.write_id)
        rdd = spark.sparkContext.parallelize(groups, len(groups))
        rdd.setName(f"lamina compact {io.uri} v{base.version}: {len(groups)} groups")
        return rdd.map(task).collect()

    return rewrite


def compact(
    spark: Any,
    target: Any,
    *,
    target_file_size: int = DEFAULT_TARGET,
    min_file_size: int | None = None,
    where: Any = None,
    sort_by: list[str] | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    catalog: Any = None,
    commit_options: Any = None,
) -> CompactionResult:
    """Compact a table with Spark: one version replacing small files (and files with deletion
    vectors) by ~``target_file_size`` files, written by Spark tasks. Same arguments and result
    as ``Table.compact``; ``target`` is a location, an open Table, or an identifier with
    ``catalog=`` (see ``lamina.spark._target``)."""
    table = TableRef.of(target, catalog=catalog, storage_options=storage_options).open()
    table._check_writable()  # an offline table refuses maintenance before a task runs
    write_id = new_write_id()
    with inflight(table.io, write_id):
        try:
            return compaction.compact(
                table, target_file_size=target_file_size, min_file_size=min_file_size, where=where, sort_by=sort_by,
                commit_options=commit_options, rewrite_groups=spark_rewriter(spark), write_id=write_id,
            )
        except CommitStateUnknown:
            raise  # the version may reference the outputs: keep them
        except BaseException:
            _remove_outputs(table, write_id)  # nothing was committed
            raise


def _remove_outputs(table: lamina.Table, write_id: str) -> None:
    """Delete what the tasks of an uncommitted compaction wrote (their names carry the write id)."""
    table.io.delete_many(files_of_writes(table.io, [write_id]))
