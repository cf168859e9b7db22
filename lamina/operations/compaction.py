"""Compaction: replace many small files (and their deletion vectors) with few
large ones, in one version.

Planning bin-packs, per partition, the files smaller than ``min_file_size``
(default 3/4 of the target) plus every file carrying a deletion vector, into
groups of about ``target_file_size`` bytes. Files written under an older partition
spec are always rewritten, into the current spec: they are grouped by what the
manifest tells of their partition in the current spec (the values of the fields
their own spec shares with it). Each group is read (deleted rows dropped), sorted
by ``sort_by`` or else the table's sort order (``Table.update_sort_order``, or the
older property ``write.sort-order``), and written as new files laid out by the
current spec; the commit removes the inputs and adds the outputs.
There is no limit on inputs per commit. ``where`` and the sort order are resolved
against the version the commit loads (the latest), which is the only load.

Concurrency: the operation is re-applied to each base. Appends never conflict
(their files are simply not inputs). A group whose inputs a concurrent commit
changed is recomputed from the inputs as they now are, carrying new deletes
into its output (a deleted row never comes back); a group whose input was
removed altogether is dropped from this compaction. Nothing is ever lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import Base, Change, CommitResult, Operation, removed_of
from lamina.commit.checks import require_live
from lamina.data.deletes import file_keys
from lamina.data.writer import SHORT_LIVED_POOL
from lamina.errors import CorruptMetadata, InvalidArgument
from lamina.expr import Expr, bind
from lamina.spec import content as C
from lamina.spec.lineage import LINEAGE_COLUMNS, has_lineage
from lamina.spec.partition import PartitionSpec, specs_with_field
from lamina.spec.sort import effective_sort_keys, sortable_field
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-compact")
DEFAULT_TARGET = 128 * 1024 * 1024
# Groups of input files of at most this size on average are read on one reader thread.
SMALL_INPUT_BYTES = 8 << 20


@dataclass(frozen=True, kw_only=True)
class CompactionResult(CommitResult):
    """A compaction's ``CommitResult`` and what it rewrote."""

    files_before: int
    files_after: int
    input_files: int
    output_files: int
    groups: int
    bytes_read: int
    rows_written: int


def _wrong_spec(entries: pa.Table, spec: PartitionSpec | None, specs: tuple[PartitionSpec, ...]) -> np.ndarray:
    """Which entries were written under a spec that lays out files otherwise than ``spec``
    (a spec differing only in field names lays them out alike); CorruptMetadata for a spec
    id the table does not have."""
    n = entries.num_rows
    if spec is None or len(specs) < 2 or "spec_id" not in entries.column_names:
        return np.zeros(n, dtype=bool)
    ids = entries.column("spec_id")
    unknown = pc.invert(pc.is_in(ids, value_set=pa.array([s.spec_id for s in specs], pa.int32())))
    if pc.any(unknown).as_py():
        bad = pc.unique(ids.filter(unknown)).to_pylist()
        raise CorruptMetadata(f"data files name partition spec ids {bad} the table does not have; run `lamina fsck`")
    alike = [s.spec_id for s in specs if s.layout == spec.layout]
    return pc.invert(pc.is_in(ids, value_set=pa.array(alike, pa.int32()))).to_numpy(zero_copy_only=False)


def _partition_keys(entries: pa.Table, spec: PartitionSpec, specs: tuple[PartitionSpec, ...]) -> np.ndarray:
    """A key per entry, equal for files that hold rows of one partition of the current
    ``spec`` as far as the manifest tells: each field's value where the file's own spec has
    the field (null included), "unknown" where it does not. (Two keys that collide only put
    more files in one group: the rewrite splits its rows by partition anyway.)"""
    n = entries.num_rows
    parts: list[pa.Array] = []
    for pf in spec.fields:
        value = entries.column(C.pmin_col(pf.field_id))
        value = value.cast(pa.binary()) if pa.types.is_binary(value.type) else value.cast(pa.string()).cast(pa.binary())
        has = pc.is_in(entries.column("spec_id"), value_set=pa.array(specs_with_field(specs, pf.field_id), pa.int32()))
        known = pc.if_else(pc.is_null(value), pa.scalar(b"\x00null"), value)
        parts.append(pc.if_else(has, known, pa.scalar(b"\x00?")))
    if not parts:
        return np.zeros(n, dtype=object)
    key = pc.binary_join_element_wise(*parts, b"\x00/") if len(parts) > 1 else parts[0]
    return (key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key).to_numpy(zero_copy_only=False)


def plan_groups(
    entries: pa.Table,
    target: int,
    min_size: int,
    spec: PartitionSpec | None = None,
    specs: tuple[PartitionSpec, ...] = (),
) -> list[np.ndarray]:
    """Indices of ``entries`` per group: small or DV-carrying files, and every file written
    under a partition spec other than the current ``spec`` (of the table's ``specs``),
    bin-packed per partition of the current spec."""
    size = entries.column("size").to_numpy()
    has_dv = pc.is_valid(entries.column("dv_path")).to_numpy(zero_copy_only=False)
    wrong = _wrong_spec(entries, spec, specs)
    cand = np.nonzero((size < min_size) | has_dv | wrong)[0]
    if not len(cand):
        return []
    if wrong.any():
        parts = pa.array(_partition_keys(entries.take(pa.array(cand)), spec, specs))  # type: ignore[arg-type]
    else:
        parts = entries.column("partition_path").take(pa.array(cand)).fill_null("")
    # Per partition (in key order), files by size (ties in entry order), cut into bins by
    # cumulative size: a group closes whenever it reaches the target (first-fit). All in
    # one sort and a few array passes: a table may have 100,000s of small files.
    enc = pc.dictionary_encode(parts.combine_chunks() if isinstance(parts, pa.ChunkedArray) else parts)
    rank = np.argsort(np.argsort(enc.dictionary.to_numpy(zero_copy_only=False), kind="stable"))
    part = rank[enc.indices.to_numpy()]
    order = np.lexsort((size[cand], part))  # stable: equal sizes keep entry order
    idx, part = cand[order], part[order]
    cum = np.cumsum(size[idx])
    first = np.r_[True, part[1:] != part[:-1]]  # the first file of each partition
    before = (cum - size[idx])[first]  # bytes before each partition's first file
    cum -= np.repeat(before, np.diff(np.r_[np.nonzero(first)[0], len(idx)]))
    bins = (cum - 1) // max(1, target)
    starts = np.nonzero(first | np.r_[True, bins[1:] != bins[:-1]])[0]
    counts = np.diff(np.r_[starts, len(idx)])
    flagged = np.add.reduceat((has_dv | wrong)[idx].astype(np.int64), starts) > 0
    return [g for g, keep in zip(np.split(idx, starts[1:]), (counts > 1) | flagged) if keep]


@dataclass
class CompactFiles(Operation):
    conflict_checks = (require_live,)  # re-planned on each base: a file compacted or deleted meanwhile conflicts

    # Both resolved against each base the compaction is applied to (the latest version): a
    # compaction does not load the table first to bind them, only the commit does.
    where: Expr | None  # (unbound) which files to consider
    target: int
    min_size: int
    # lamina.spec.sort.sort_rows keys, or column names (``sort_columns``); None: the table's
    # sort order (effective_sort_keys)
    sort_by: list[Any] | str | None
    write_id: str
    progress: Callable[[str, int, int], None] | None = None
    # Runs the rewrites of several groups: (op, base, groups) -> output entries per group, in
    # order. Default: this process's thread pool; lamina.spark.compact runs them as Spark tasks.
    rewrite_groups: Callable[[CompactFiles, Base, list[pa.Table]], Iterable[pa.Table]] | None = None
    _outputs: dict[tuple, pa.Table] = field(default_factory=dict)  # group identity -> output entries
    last: dict[str, int] = field(default_factory=dict)
    skip_if_noop: ClassVar[bool] = True
    refresh_base: ClassVar[bool] = True

    def sort_keys(self, base: Base) -> list[Any]:
        """What the outputs are sorted by at ``base`` (``sort_columns`` of ``sort_by``)."""
        return sort_columns(base.metadata, self.sort_by)

    def rewrite(self, base: Base, group: pa.Table) -> pa.Table:
        """The entries of the files one group is rewritten into (not yet stamped)."""
        # Rows keep their lineage: compaction changes where rows live, not what they are.
        names = [*base.schema.names, *LINEAGE_COLUMNS] if has_lineage(base.metadata) else base.schema.names
        # Small inputs are read on one thread while this one encodes (see read_files), into
        # Arrow's allocator: reading many small files into the system allocator costs more.
        small = int(pc.sum(group.column("size")).as_py() or 0) <= SMALL_INPUT_BYTES * group.num_rows
        files = base.scan().read_files(group, names, per_run=True, single_reader=small)
        # rows per output file from the inputs' bytes per (live) row, so outputs land near the target
        live = max(1, int(pc.sum(group.column("record_count")).as_py() or 0))
        per_row = max(1.0, float(pc.sum(group.column("size")).as_py()) / live)
        max_rows = max(1, int(self.target / per_row))
        sort_by = self.sort_keys(base)
        if not sort_by and (base.partition_spec is None or base.partition_spec.is_unpartitioned):
            # Each row group is encoded as soon as its rows are read, while later files
            # are still being read.
            return base.write_stream(files, self.write_id, max_rows, SHORT_LIVED_POOL)
        rows = pa.concat_tables(list(files)).combine_chunks()  # one chunk: cheaper to sort, encode, and for stats
        return base.write(rows, self.write_id, max_rows=max_rows, sort_by=sort_by)

    def apply(self, base: Base) -> Change:
        self.sort_keys(base)  # an unknown sort column fails before any file is read
        self.last = {"files_before": int(base.metadata.summary.get("total-files", 0))}
        entries = base.entries(bind(self.where, base.schema) if self.where is not None else None)
        groups = plan_groups(
            entries, self.target, self.min_size, base.partition_spec, base.metadata.all_partition_specs
        )
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
        self.last |= {
            "groups": len(groups),
            "input_files": inputs.num_rows,
            "output_files": outputs.num_rows,
            "bytes_read": int(pc.sum(inputs.column("size")).as_py() or 0),
            "rows_written": int(pc.sum(outputs.column("record_count")).as_py() or 0),
        }
        summary = {"compacted-files": inputs.num_rows, "output-files": outputs.num_rows, "groups": len(groups)}
        return Change("compact", outputs, removed_of(inputs), summary=summary)


def sort_columns(vm: VersionManifest, sort_by: list[Any] | str | None) -> list[Any]:
    """What compaction sorts by (``lamina.spec.sort.sort_rows`` keys): the columns
    ``sort_by`` names (ascending; or keys as this returns them), else the table's sort order."""
    if sort_by is None:
        return effective_sort_keys(vm)
    keys = [
        c.strip() if isinstance(c, str) else c for c in (sort_by.split(",") if isinstance(sort_by, str) else sort_by)
    ]
    keys = [k for k in keys if k]
    for k in keys:
        sortable_field(vm.schema, k if isinstance(k, str) else k[0])
    return keys


def check_target(target_file_size: Any) -> int:
    if isinstance(target_file_size, bool) or not isinstance(target_file_size, int) or target_file_size < 1:
        raise InvalidArgument(f"target_file_size must be a positive number of bytes, not {target_file_size!r}")
    return target_file_size


@dataclass
class RewriteManifests(Operation):
    """Rewrite every leaf manifest: entries unchanged (same added_version), re-grouped by partition."""

    conflict_checks = (require_live,)

    operation: str = "rewrite-manifests"
    refresh_base: ClassVar[bool] = True

    def apply(self, base: Base) -> Change:
        entries = base.entries()
        return Change(self.operation, entries, removed_of(entries), summary={"rewritten-files": entries.num_rows})
