"""Planning a scan: the manifest tree pruned to the data files that may hold matching rows.

``plan_files`` prunes by the leaf summaries first, then by each file's statistics, and returns
a ``ScanPlan``: the planned entries as one Arrow table, viewed as a sequence of
``FileScanTask`` (materialised as Python objects only when iterated). Planning reads manifests
only, never a data file; reading the planned files is ``lamina.data.scan.read``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.expr import AlwaysTrue, Expr, may_match, referenced_columns
from lamina.io import FileIO
from lamina.manifest.entries import manifest_schema_of
from lamina.manifest.tree import live_data_entries
from lamina.spec import content as C
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID
from lamina.spec.partition import fields_by_id
from lamina.spec.version import VersionManifest

PLAN_COLUMNS = (
    "content",
    "status",
    "path",
    "size",
    "record_count",
    "added_version",
    "partition_path",
    "dv_path",
    "dv_offset",
    "dv_length",
    "dv_cardinality",
)


@dataclass(frozen=True)
class FileScanTask:
    path: str  # relative to the table root
    uri: str  # absolute location, for engines
    size: int
    record_count: int
    partition_path: str | None
    added_version: int
    dv_path: str | None = None
    dv_offset: int | None = None
    dv_length: int | None = None
    dv_cardinality: int | None = None  # rows deleted; record_count is what is left


class ScanPlan(Sequence[FileScanTask]):
    """The planned files: an Arrow table of entries, viewed as a sequence of tasks."""

    def __init__(self, entries: pa.Table, io: Any) -> None:
        self.entries = entries
        self._io = io

    def __len__(self) -> int:
        return self.entries.num_rows

    def __repr__(self) -> str:
        return f"ScanPlan(files={len(self)}, records={self.record_count})"

    def _task(self, row: dict[str, Any]) -> FileScanTask:
        return FileScanTask(
            path=row["path"],
            uri=self._io.full_uri(row["path"]),
            size=row["size"],
            record_count=row["record_count"],
            partition_path=row["partition_path"],
            added_version=row["added_version"],
            dv_path=row["dv_path"],
            dv_offset=row["dv_offset"],
            dv_length=row["dv_length"],
            dv_cardinality=row["dv_cardinality"],
        )

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._task(r) for r in self.entries.slice(*_slice_bounds(i, len(self))).to_pylist()]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._task(self.entries.slice(i, 1).to_pylist()[0])

    def __iter__(self) -> Iterator[FileScanTask]:
        cols = [
            "path",
            "size",
            "record_count",
            "partition_path",
            "added_version",
            "dv_path",
            "dv_offset",
            "dv_length",
            "dv_cardinality",
        ]
        for batch in self.entries.select(cols).to_batches(max_chunksize=4096):
            for r in batch.to_pylist():
                yield self._task(r)

    @property
    def record_count(self) -> int:
        return pc.sum(self.entries.column("record_count")).as_py() or 0

    @property
    def paths(self) -> list[str]:
        return self.entries.column("path").to_pylist()


def _slice_bounds(s: slice, n: int) -> tuple[int, int]:
    start, stop, step = s.indices(n)
    if step != 1:
        raise ValueError("ScanPlan slices take no step")
    return start, max(0, stop - start)


def plan_files(
    io: FileIO, vm: VersionManifest, predicate: Expr, *, lineage: bool = False, all_columns: bool = False
) -> ScanPlan:
    """The files of version ``vm`` that may hold rows ``predicate`` (bound to its schema)
    selects: leaf summaries first, then file stats.

    ``lineage``: with the entry columns row lineage is numbered from; ``all_columns``: every
    entry column (a row-level change re-lists entries whole)."""
    mschema = manifest_schema_of(vm)
    prune = None
    if not isinstance(predicate, AlwaysTrue):
        schema, specs = vm.schema, vm.all_partition_specs
        prune = lambda t: may_match(predicate, t, schema, specs)  # noqa: E731
    cols = None if all_columns else manifest_columns(mschema, vm, predicate, lineage)
    return ScanPlan(live_data_entries(io, vm.root_manifest, mschema, prune, cols, inline=vm.root_inline), io)


def manifest_columns(mschema: pa.Schema, vm: VersionManifest, predicate: Expr, lineage: bool) -> list[str]:
    """The entry columns a file scan task needs, plus the statistics the predicate can use.

    Bookkeeping columns (file_count, removed_version, spec_id, max_added_version)
    are not read: at a million files each is much decoding. (spec_id is, on a
    table with several partition specs whose fields the predicate can use: a file is
    never pruned by a field of a spec other than its own.)
    """
    schema, specs = vm.schema, vm.all_partition_specs
    wanted = set(PLAN_COLUMNS)
    if lineage:
        wanted |= {FIRST_ROW_ID, DATA_VERSION}
    refs = referenced_columns(predicate)
    fids = {schema.field_id(n) for n in refs}
    for fid in fids:
        wanted |= {C.min_col(fid), C.max_col(fid), C.nulls_col(fid)}
    for pf in fields_by_id(specs).values():
        if pf.source_id in fids:
            wanted |= {C.pmin_col(pf.field_id), C.pmax_col(pf.field_id)}
            if len(specs) > 1:
                wanted.add("spec_id")
    return [n for n in mschema.names if n in wanted]
