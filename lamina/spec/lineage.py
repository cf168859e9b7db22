"""Row lineage (Iceberg v3 semantics): every row has a stable id and the version that last
wrote it, at no per-row cost for appends.

A table with lineage (writer feature ``row-lineage``) keeps ``next_row_id`` in its version
manifest, and each data file's entry records ``first_row_id`` and ``data_version``. The row
at physical position ``p`` of a file has

- ``_row_id = coalesce(file column _row_id[p], first_row_id + p)``
- ``_last_updated_version = coalesce(file column _last_updated_version[p], data_version)``

Appends store nothing per row: both columns are absent and every row inherits. A file that
rewrites existing rows (update, merge, copy-on-write, compaction) stores the two columns
after the schema's: a copied row keeps both values, an updated row keeps its ``_row_id`` and
leaves ``_last_updated_version`` null (so it reads the new file's ``data_version``), an
inserted row leaves both null. The committer assigns ``first_row_id`` (from the base's
``next_row_id``, one id per physical row) and ``data_version`` (the new version) to every
added entry that lacks them, at each commit attempt; writers never assign ids themselves, so
a rebase cannot hand out an id twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import CorruptMetadata

ROW_ID = "_row_id"
LAST_UPDATED = "_last_updated_version"
LINEAGE_COLUMNS: tuple[str, ...] = (ROW_ID, LAST_UPDATED)
LINEAGE_FIELDS: tuple[pa.Field, ...] = (pa.field(ROW_ID, pa.int64()), pa.field(LAST_UPDATED, pa.int64()))

# Writer feature: a writer must assign row ids to what it adds and carry them through rewrites.
# Readers need nothing: the extra file columns are never among a schema's columns. (The table
# property ``row-lineage.enabled`` turns it on at creation.)
ROW_LINEAGE = "row-lineage"

# Manifest entry columns of tables with lineage (lamina.spec.content).
FIRST_ROW_ID = "first_row_id"
DATA_VERSION = "data_version"
ENTRY_FIELDS: tuple[pa.Field, ...] = (pa.field(FIRST_ROW_ID, pa.int64()), pa.field(DATA_VERSION, pa.int64()))


def has_lineage(vm: Any) -> bool:
    """Whether the version (a ``VersionManifest``) keeps row lineage."""
    return ROW_LINEAGE in vm.writer_features


def counter_of(vm: Any) -> int | None:
    """The version's ``next_row_id`` (None on a table without lineage). A version that keeps
    lineage without a valid counter is corrupt: counting again from 0 would give a second
    row an id a live row has."""
    n = vm.next_row_id
    if has_lineage(vm) and (n is None or n < 0):
        raise CorruptMetadata(
            f"version {vm.version} keeps row lineage but its next_row_id is {n!r}; nothing was committed. "
            "Restore the version manifest from a backup, or roll back to a version whose manifest is intact"
        )
    return n


def no_row_ids(path: str, version: int) -> CorruptMetadata:
    """The error for a live data file of a table with lineage whose entry lacks ``first_row_id``."""
    return CorruptMetadata(
        f"data file {path} of version {version} has no first_row_id although the table keeps row lineage: "
        "its rows have no ids (its manifest entry is corrupt). "
        "Roll back to a version whose manifests are intact, or restore the manifest from a backup"
    )


def check_row_ids(entries: pa.Table, version: int) -> None:
    """Refuse live entries of a table with lineage that lack ``first_row_id`` (``no_row_ids``):
    re-listing one (a new deletion vector) would have the committer number its rows afresh."""
    if FIRST_ROW_ID not in entries.column_names or not entries.column(FIRST_ROW_ID).null_count:
        return
    raise no_row_ids(entries.filter(pc.is_null(entries.column(FIRST_ROW_ID))).column("path")[0].as_py(), version)


def split_lineage(rows: pa.Table, fill: bool = False) -> tuple[pa.Table, pa.Table | None]:
    """``rows`` without their lineage columns, and those columns (None when absent, unless
    ``fill``: then nulls, as for rows new to the table)."""
    schema = rows.schema  # looked up in C++: column_names would build a list of every name, twice
    present = [c for c in LINEAGE_COLUMNS if schema.get_all_field_indices(c)]
    if not present and not fill:
        return rows, None
    lineage = pa.table(
        {
            f.name: (rows.column(f.name).cast(f.type) if f.name in present else pa.nulls(rows.num_rows, f.type))
            for f in LINEAGE_FIELDS
        }
    )
    return rows.drop_columns(present), lineage


def conform_keeping_lineage(schema: Any, rows: pa.Table, cast: str | None = None) -> pa.Table:
    """``rows`` conformed to ``schema`` (a ``lamina.spec.schema.Schema``; ``cast`` as for
    ``Schema.conform``), their lineage columns, if any, kept after the schema's."""
    data, lineage = split_lineage(rows)
    return with_lineage(schema.conform(data, cast), lineage)


def with_lineage(rows: pa.Table, lineage: pa.Table | None) -> pa.Table:
    """``rows`` with the lineage columns of ``lineage`` appended (as ``split_lineage`` gave them)."""
    if lineage is None:
        return rows
    for f in LINEAGE_FIELDS:
        rows = rows.append_column(f, lineage.column(f.name))
    return rows


def physical_rows(entries: pa.Table) -> np.ndarray:
    """Rows each data file of ``entries`` holds: its live rows plus those its DV deletes."""
    rows = entries.column("record_count").to_numpy()
    dv = entries.column("dv_cardinality")
    return rows if dv.null_count == len(dv) else rows + pc.fill_null(dv, pa.scalar(0, pa.int64())).to_numpy()


def assign_row_ids(entries: pa.Table, next_row_id: int, version: int) -> tuple[pa.Table, int]:
    """``entries`` (added data-file entries) with ``first_row_id`` and ``data_version`` set
    where null: ids handed out in entry order, one per physical row (live rows plus those
    a deletion vector already deletes); and the table's next row id after them. (On every
    commit: when every entry is new, as for each append, no per-entry kernel runs, and each
    column is replaced by one set_column, cheaper than rebuilding a wide manifest table.)"""
    n = entries.num_rows
    if not n or FIRST_ROW_ID not in entries.column_names:
        return entries, next_row_id
    first = entries.column(FIRST_ROW_ID)
    if first.null_count < n:
        # Files that keep their ids (re-added, or re-listed with a new DV): the counter
        # stays past them. Only files from another branch's log (a rollback to a tag made
        # there) can hold ids at or past this log's counter, which must not hand them out again.
        top = pc.max(pc.add(first, pa.array(physical_rows(entries), pa.int64()))).as_py()
        next_row_id = max(next_row_id, top if top is not None else 0)
    if first.null_count:
        rows = physical_rows(entries)
        some = first.null_count < n  # files that have ids keep them (a new DV re-lists a file)
        if some:
            missing = pc.is_null(first).to_numpy(zero_copy_only=False)
            rows = np.where(missing, rows, 0)
        ids: Any = pa.array(np.cumsum(rows) - rows + next_row_id)
        if some:
            ids = pc.if_else(pa.array(missing), ids, first)
        i = entries.schema.get_field_index(FIRST_ROW_ID)
        entries = entries.set_column(i, entries.schema.field(i), ids)
        next_row_id += int(rows.sum())
    dver = entries.column(DATA_VERSION)
    if dver.null_count:
        i = entries.schema.get_field_index(DATA_VERSION)
        filled = (
            pa.repeat(pa.scalar(version, pa.int64()), n)
            if dver.null_count == n
            else pc.fill_null(dver, pa.scalar(version, pa.int64()))
        )
        entries = entries.set_column(i, entries.schema.field(i), filled)
    return entries, next_row_id


def lineage_of(entry: dict[str, Any]) -> tuple[Any, Any] | None:
    """(first_row_id, data_version) of a data file's entry (a dict); None without lineage."""
    first = entry.get(FIRST_ROW_ID)
    return None if first is None else (first, entry[DATA_VERSION])


def lineages_of(entries: pa.Table) -> list[tuple[Any, Any] | None]:
    """``lineage_of`` each entry of ``entries``; Nones without lineage."""
    if FIRST_ROW_ID not in entries.column_names:
        return [None] * entries.num_rows
    return [
        None if f is None else (f, d)
        for f, d in zip(entries.column(FIRST_ROW_ID).to_pylist(), entries.column(DATA_VERSION).to_pylist())
    ]


def row_lineage(first_row_id: int, data_version: int, n: int, stored: pa.Table | None) -> tuple[pa.Array, pa.Array]:
    """The ``_row_id`` and ``_last_updated_version`` of a file's ``n`` physical rows, from its
    entry and the lineage columns it stores (``stored``, or None)."""
    ids = pa.array(np.arange(first_row_id, first_row_id + n, dtype=np.int64))
    versions = pa.repeat(pa.scalar(data_version, pa.int64()), n)
    if stored is None:
        return ids, versions
    return (
        pc.coalesce(stored.column(ROW_ID), ids).combine_chunks(),
        pc.coalesce(stored.column(LAST_UPDATED), versions).combine_chunks(),
    )


def lineage_problems(entries: pa.Table, next_row_id: int | None) -> list[str]:
    """What is wrong with the row lineage of a version's live ``entries`` (path, record_count,
    dv_cardinality, first_row_id) given its ``next_row_id``: a file without ids, id ranges
    (one id per physical row from ``first_row_id``) that overlap or reach the counter."""
    problems = []
    if next_row_id is None or next_row_id < 0:
        problems.append(f"next_row_id is {next_row_id!r}: a table with row lineage needs its counter")
    if not entries.num_rows:
        return problems
    first = entries.column(FIRST_ROW_ID)
    if first.null_count:
        missing = entries.filter(pc.is_null(first)).column("path").to_pylist()
        problems.append(f"{len(missing)} data file(s) have no first_row_id, e.g. {missing[:3]}")
        entries = entries.filter(pc.is_valid(entries.column(FIRST_ROW_ID)))
        if not entries.num_rows:
            return problems
    physical = physical_rows(entries)
    starts = entries.column(FIRST_ROW_ID).to_numpy()
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], starts[order] + physical[order]
    overlap = np.nonzero(starts[1:] < ends[:-1])[0]
    if len(overlap):
        paths = entries.column("path").take(pa.array(order[overlap[:1] + 1])).to_pylist()
        problems.append(f"{len(overlap)} data file(s) have row ids another live file has, e.g. {paths}")
    if next_row_id is not None and next_row_id >= 0 and int(ends.max()) > next_row_id:
        problems.append(f"data files hold row ids up to {int(ends.max()) - 1}, at or beyond next_row_id {next_row_id}")
    return problems
