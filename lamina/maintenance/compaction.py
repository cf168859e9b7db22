"""Compaction (seed 002): replace many small files (and their deletion vectors) with few
large ones, in one version.

Planning bin-packs, per partition, the files smaller than ``min_file_size``
(default 3/4 of the target) plus every file carrying a deletion vector, into
groups of about ``target_file_size`` bytes. Each group is read (deleted rows
dropped), optionally sorted (property ``write.sort-order``, e.g. ``"ts, id"``),
and written as new files; the commit removes the inputs and adds the outputs.
There is no limit on inputs per commit.

Concurrency: the operation is re-applied to each base. Appends never conflict
(their files are simply not inputs). A group whose inputs a concurrent commit
changed is recomputed from the inputs as they now are, carrying new deletes
into its output (a deleted row never comes back); a group whose input was
removed altogether is dropped from this compaction. Nothing is ever lost.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import Change
from lamina.errors import InvalidArgument
from lamina.expr import Expr
from lamina.spec.version import VersionManifest
from lamina.table.deletes import file_keys
from lamina.table.inflight import new_write_id
from lamina.table.operations import ProbedApply, _removed, _stamp
from lamina.table.writer import SHORT_LIVED_POOL

if TYPE_CHECKING:
    from lamina.table.table import Table

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-compact")
DEFAULT_TARGET = 128 * 1024 * 1024


@dataclass
class CompactionResult:
    version: int | None
    files_before: int
    files_after: int
    input_files: int
    output_files: int
    groups: int
    bytes_read: int
    rows_written: int


def plan_groups(entries: pa.Table, target: int, min_size: int) -> list[np.ndarray]:
    """Indices of ``entries`` per group: small or DV-carrying files, bin-packed per partition."""
    size = entries.column("size").to_numpy()
    has_dv = pc.is_valid(entries.column("dv_path")).to_numpy(zero_copy_only=False)
    cand = np.nonzero((size < min_size) | has_dv)[0]
    if not len(cand):
        return []
    parts = entries.column("partition_path").take(pa.array(cand)).fill_null("").to_numpy(zero_copy_only=False)
    groups: list[np.ndarray] = []
    for part in np.unique(parts):
        idx = cand[parts == part]
        idx = idx[np.argsort(size[idx], kind="stable")]
        # first-fit by cumulative size: cut whenever a group reaches the target
        cum = np.cumsum(size[idx])
        bins = (cum - 1) // max(1, target)
        for b in np.unique(bins):
            g = idx[bins == b]
            if len(g) > 1 or has_dv[g].any():
                groups.append(g)
    return groups


@dataclass
class CompactFiles(ProbedApply):
    table: "Table"
    where: Expr | None
    target: int
    min_size: int
    sort_by: list[str]
    write_id: str
    progress: Callable[[str, int, int], None] | None = None
    # Runs the rewrites of several groups: (op, base, groups) -> output entries per group, in
    # order. Default: this process's thread pool; lamina.spark.compact runs them as Spark tasks.
    rewrite_groups: Callable[["CompactFiles", VersionManifest, list[pa.Table]], Iterable[pa.Table]] | None = None
    _outputs: dict[tuple, pa.Table] = field(default_factory=dict)  # group identity -> output entries
    last: dict[str, int] = field(default_factory=dict)

    def _rewrite(self, base: VersionManifest, group: pa.Table) -> pa.Table:
        files = self.table._scan_at(base, None).read_files(group, base.schema.names, memory_pool=SHORT_LIVED_POOL)
        # rows per output file from the inputs' bytes per (live) row, so outputs land near the target
        live = max(1, int(pc.sum(group.column("record_count")).as_py() or 0))
        per_row = max(1.0, float(pc.sum(group.column("size")).as_py()) / live)
        max_rows = max(1, int(self.target / per_row))
        if not self.sort_by and (base.partition_spec is None or base.partition_spec.is_unpartitioned):
            # Each row group is encoded as soon as its rows are read, while later files
            # are still being read.
            return self.table._entries(self.table._write_stream(files, self.write_id, max_rows, SHORT_LIVED_POOL))
        rows = pa.concat_tables(list(files)).combine_chunks()  # one chunk: cheaper to sort, encode, and for stats
        if self.sort_by and rows.num_rows:
            rows = rows.sort_by([(c, "ascending") for c in self.sort_by])
        return self.table._entries(self.table._write(rows, self.write_id, max_rows=max_rows))

    def _apply(self, base: VersionManifest) -> Change:
        entries = self.table._scan_at(base, self.where).plan(all_columns=True).entries
        groups = plan_groups(entries, self.target, self.min_size)
        keys = [tuple(file_keys(entries.take(pa.array(g)))) for g in groups]
        todo = [i for i, k in enumerate(keys) if k not in self._outputs]
        done = 0
        step = self.progress or (lambda *_: None)
        step("compact", 0, len(todo))
        run = self.rewrite_groups or (lambda op, base, gs: _pool.map(lambda g: op._rewrite(base, g), gs))
        for i, out in zip(todo, run(self, base, [entries.take(pa.array(groups[i])) for i in todo])):
            self._outputs[keys[i]] = out
            done += 1
            step("compact", done, len(todo))
        if not groups:
            return Change("compact", self.table._mschema_of(base).empty_table(), _removed(entries.slice(0, 0)))
        inputs = entries.take(pa.array(np.concatenate(groups)))
        outputs = pa.concat_tables([_stamp(self._outputs[k], self.table, base) for k in keys])
        self.last = {
            "groups": len(groups), "input_files": inputs.num_rows, "output_files": outputs.num_rows,
            "bytes_read": int(pc.sum(inputs.column("size")).as_py() or 0),
            "rows_written": int(pc.sum(outputs.column("record_count")).as_py() or 0),
        }
        summary = {"compacted-files": inputs.num_rows, "output-files": outputs.num_rows, "groups": len(groups)}
        return Change("compact", outputs, _removed(inputs), summary=summary)


def compact(
    table: "Table",
    *,
    target_file_size: int = DEFAULT_TARGET,
    min_file_size: int | None = None,
    where: Any = None,
    sort_by: list[str] | str | None = None,
    commit_options: Any = None,
    progress: Callable[[str, int, int], None] | None = None,
    rewrite_groups: Callable[[CompactFiles, VersionManifest, list[pa.Table]], Iterable[pa.Table]] | None = None,
    write_id: str | None = None,
) -> CompactionResult:
    """See ``Table.compact``; ``rewrite_groups`` and ``write_id`` let an engine (Spark) do the rewriting."""
    from lamina.expr import bind, to_expr

    if not isinstance(target_file_size, int) or target_file_size < 1:
        raise InvalidArgument(f"target_file_size must be a positive number of bytes, not {target_file_size!r}")
    table.refresh()
    vm = table.metadata
    sort = sort_by if sort_by is not None else vm.properties.get("write.sort-order", "")
    sort_cols = [c.strip() for c in (sort.split(",") if isinstance(sort, str) else sort) if c.strip()]
    for c in sort_cols:
        vm.schema.field(c)
    before = int(vm.summary.get("total-files", 0))
    op = CompactFiles(
        table, bind(to_expr(where), vm.schema) if where is not None else None, target_file_size,
        min_file_size if min_file_size is not None else target_file_size * 3 // 4, sort_cols, write_id or new_write_id(),
        progress, rewrite_groups,
    )
    version = table._commit_unless_noop(op, commit_options)
    if version is None:
        return CompactionResult(None, before, before, 0, 0, 0, 0, 0)
    last = op.last
    return CompactionResult(
        version, before, int(table.metadata.summary.get("total-files", 0)), last["input_files"], last["output_files"],
        last["groups"], last["bytes_read"], last["rows_written"],
    )


@dataclass
class RewriteManifests:
    """Rewrite every leaf manifest: entries unchanged (same added_version), re-grouped by partition."""

    table: "Table"

    def apply(self, base: VersionManifest) -> Change:
        entries = self.table._scan_at(base, None).plan(all_columns=True).entries
        return Change("rewrite-manifests", entries, _removed(entries), summary={"rewritten-files": entries.num_rows})
