"""Spark-distributed compaction: the bin-packed groups are rewritten by Spark tasks.

The driver plans exactly as ``t.maintenance.compact`` does (``lamina.operations.compaction``:
small and deletion-vector-carrying files, bin-packed per partition) and commits one
version replacing inputs with outputs; each group is one Spark task, which is given the
planned version's manifest (the table's location and version numbers alone would not do
on a branch, whose numbers are its own log's), reads its inputs with Lamina's reader
(deleted rows dropped), sorts if the table has a sort order, and writes the output
files under the table with the compaction's write id. Only entries (a few hundred
bytes a file) travel back to the driver.

Concurrency and safety are the Arrow compaction's (``t.maintenance.compact`` plans and commits):
appends never conflict; a group whose inputs a concurrent delete changed is recomputed
(as another Spark job of just those groups) carrying the new deletes. The job runs in an
engine write session (``lamina.table.WriteSession``): its in-flight marker keeps
orphan cleanup from deleting outputs that are about to be committed, and a compaction
that fails removes them. Works on every store the tasks can reach (local paths,
``s3://``), since tasks use Lamina's FileIO.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from lamina.commit import Base
from lamina.io import FileIO
from lamina.operations import CompactFiles, CompactionResult
from lamina.operations.compaction import DEFAULT_TARGET
from lamina.spark._target import TableRef
from lamina.spec.version import VersionManifest
from lamina.table import WriteSession


def _group_task(
    location: str,
    storage: Mapping[str, Any] | None,
    base: bytes,
    version: int,
    target: int,
    sort_by: list[Any],
    write_id: str,
) -> Callable[[pa.Table], pa.Table]:
    """What one Spark task runs: rewrite one group's input files (of the version manifest
    ``base``, as JSON) as output files for ``version``; their entries. The task is given the
    manifest rather than reopening the table at its number: a branch's version numbers are
    its own log's (main's version of that number is another version), and within a
    transaction the base is not a committed version at all."""

    def run(group: pa.Table) -> pa.Table:
        op = CompactFiles(None, target, 0, sort_by, write_id)
        vm = VersionManifest.from_json(base, f"the base of compaction {write_id}")
        return op.rewrite(Base(FileIO(location, storage), vm, version), group)

    return run


def spark_rewriter(spark: Any) -> Callable[[CompactFiles, Base, list[pa.Table]], Iterable[pa.Table]]:
    """``CompactFiles.rewrite_groups`` running each group as one Spark task (in group order)."""

    def rewrite(op: CompactFiles, base: Base, groups: list[pa.Table]) -> list[pa.Table]:
        if not groups:
            return []
        io, vm = base.io, base.metadata
        task = _group_task(
            io.uri, io.options or None, vm.to_json(), base.version, op.target, op.sort_keys(base), op.write_id
        )
        rdd = spark.sparkContext.parallelize(groups, len(groups))
        rdd.setName(f"lamina compact {io.uri} v{vm.version}: {len(groups)} groups")
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
    branch: str | None = None,
) -> CompactionResult:
    """Compact a table with Spark: one version replacing small files (and files with deletion
    vectors) by ~``target_file_size`` files, written by Spark tasks. Same arguments and result
    as ``t.maintenance.compact``; ``target`` is a location, an open Table, or an identifier with
    ``catalog=`` (see ``lamina.spark._target``); ``branch``: compact that branch."""
    table = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch).open()
    # The session refuses a table that may not be written (offline, unknown writer feature)
    # before a task runs, and deletes the outputs if the compaction commits nothing.
    with WriteSession(table, commit_options=commit_options) as session:
        return table.maintenance.compact(
            target_file_size=target_file_size,
            min_file_size=min_file_size,
            where=where,
            sort_by=sort_by,
            rewrite_groups=spark_rewriter(spark),
            session=session,
        )
