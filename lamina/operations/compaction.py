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
from typing import Any, Callable, ClassVar, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import Operation, Base, Change, removed_of
from lamina.data.deletes import file_keys
from lamina.data.writer import SHORT_LIVED_POOL
from lamina.errors import InvalidArgument
from lamina.expr import Expr
from lamina.spec.schema import Schema

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
class CompactFiles(Operation):
    where: Expr | None
    target: int
    min_size: int
    sort_by: list[str]
    write_id: str
    progress: Callable[[str, int, int], None] | None = None
    # Runs the rewrites of several groups: (op, base, groups) -> output entries per group, in
    # order. Default: this process's thread pool; lamina.spark.compact runs them as Spark tasks.
    rewrite_groups: Callable[["CompactFiles", Base, list[pa.Table]], Iterable[pa.Table]] | None = None
    _outputs: dict[tuple, pa.Table] = field(default_factory=dict)  # group identity -> output entries
    last: dict[str, int] = field(default_factory=dict)
    skip_if_noop: ClassVar[bool] = True
    refresh_base: ClassVar[bool] = True

    def rewrite(self, base: Base, group: pa.Table) -> pa.Table:
        """The entries of the files one group is rewritten into (not yet stamped)."""
        files = base.scan().read_files(group, base.schema.names, memory_pool=SHORT_LIVED_POOL)
        # rows per output file from the inputs' bytes per (live) row, so outputs land near the target
        live = max(1, int(pc.sum(group.column("record_count")).as_py() or 0))
        per_row = max(1.0, float(pc.sum(group.column("size")).as_py()) / live)
        max_rows = max(1, int(self.target / per_row))
        if not self.sort_by and (base.partition_spec is None or base.partition_spec.is_unpartitioned):
            # Each row group is encoded as soon as its rows are read, while later files
            # are still being read.
            return base.write_stream(files, self.write_id, max_rows, SHORT_LIVED_POOL)
        rows = pa.concat_tables(list(files)).combine_chunks()  # one chunk: cheaper to sort, encode, and for stats
        if self.sort_by and rows.num_rows:
            rows = rows.sort_by([(c, "ascending") for c in self.sort_by])
        return base.write(rows, self.write_id, max_rows=max_rows)

    def apply(self, base: Base) -> Change:
        entries = base.entries(self.where)
        groups = plan_groups(entries, self.target, self.min_size)
        keys = [tuple(file_keys(entries.take(pa.array(g)))) for g in groups]
        todo = [i for i, k in enumerate(keys) if k not in self._outputs]
        done = 0
        step = self.progress or (lambda *_: None)
        step("compact", 0, len(todo))
        run = self.rewrite_groups or (lambda op, base, gs: _pool.map(lambda g: op.rewrite(base, g), gs))
        for i, out in zip(todo, run(self, base, [entries.take(pa.array(groups[i])) for i in todo])):
            self._outputs[keys[i]] = out
            done += 1
            step("compact", done, len(todo))
        if not groups:
            return Change("compact", base.empty(), removed_of(entries.slice(0, 0)))
        inputs = entries.take(pa.array(np.concatenate(groups)))
        outputs = pa.concat_tables([base.stamp(self._outputs[k]) for k in keys])
        self.last = {
            "groups": len(groups), "input_files": inputs.num_rows, "output_files": outputs.num_rows,
            "bytes_read": int(pc.sum(inputs.column("size")).as_py() or 0),
            "rows_written": int(pc.sum(outputs.column("record_count")).as_py() or 0),
        }
        summary = {"compacted-files": inputs.num_rows, "output-files": outputs.num_rows, "groups": len(groups)}
        return Change("compact", outputs, removed_of(inputs), summary=summary)


def sort_columns(schema: Schema, sort_by: list[str] | str | None, default: str) -> list[str]:
    """The columns compaction sorts by: ``sort_by``, else the table's ``write.sort-order``."""
    sort = sort_by if sort_by is not None else default
    cols = [c.strip() for c in (sort.split(",") if isinstance(sort, str) else sort) if c.strip()]
    for c in cols:
        schema.field(c)  # SchemaMismatch naming the columns
    return cols


def check_target(target_file_size: Any) -> int:
    if isinstance(target_file_size, bool) or not isinstance(target_file_size, int) or target_file_size < 1:
        raise InvalidArgument(f"target_file_size must be a positive number of bytes, not {target_file_size!r}")
    return target_file_size


@dataclass
class RewriteManifests(Operation):
    """Rewrite every leaf manifest: entries unchanged (same added_version), re-grouped by partition."""

    operation: str = "rewrite-manifests"
    refresh_base: ClassVar[bool] = True

    def apply(self, base: Base) -> Change:
        entries = base.entries()
        return Change(self.operation, entries, removed_of(entries), summary={"rewritten-files": entries.num_rows})
