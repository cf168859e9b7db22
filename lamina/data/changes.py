"""Row changes between two consecutive versions, from what their manifests and deletion
vectors record (the change data feed's engine; ``lamina.table.changes`` ranges over versions).

Only what differs is read. The two versions' root manifests are compared first: a leaf
manifest both list is the same file with the same entries, so only the leaves one of them
lacks, and inline entries, are read. Entries are keyed by (file, deletion vector): an
entry of the older version missing from the newer one is a file removed, or one whose DV
changed, and vice versa. From those files only rows that changed are taken:

- a file removed: its rows live in the older version are gone;
- a file added: its rows live in the newer version are new;
- a file whose DV changed: the positions the new DV adds are gone, those it drops (a
  rollback) are new.

Gone and new rows are paired by ``_row_id`` (lamina.spec.lineage): a row id on both sides
with a different ``_last_updated_version`` is an update (pre- and post-image), with the same
one it is the same row moved (compaction, copy-on-write) and is no change; the rest are
deletes and inserts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.data.deletes import dvs_of_plan, file_key_array, positions_array, read_bitmaps, unique_sorted
from lamina.data.scan import Scan
from lamina.data.scan.plan import PLAN_COLUMNS
from lamina.io import FileIO
from lamina.manifest.entries import conform, manifest_schema_of
from lamina.manifest.files import read_manifests
from lamina.manifest.tree import load_root
from lamina.spec import content as C
from lamina.spec.layout import DATA_DIR
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID, LAST_UPDATED, LINEAGE_COLUMNS, ROW_ID, physical_rows
from lamina.spec.version import VersionManifest

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
INSERT, DELETE, PREIMAGE, POSTIMAGE = "insert", "delete", "update_preimage", "update_postimage"
CHANGE_TYPES = (INSERT, DELETE, PREIMAGE, POSTIMAGE)
CHANGE_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(COMMIT_VERSION, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms", tz="UTC")),
)
# Operations that move rows without changing them: no change rows, nothing read.
NO_DATA_CHANGE = frozenset({"compact", "rewrite-manifests", "enable-row-lineage"})

# The plan's entry columns, and the row lineage ones the change rows are numbered by.
ENTRY_COLUMNS = (*PLAN_COLUMNS, FIRST_ROW_ID, DATA_VERSION)


def _entry_schema(vm: VersionManifest) -> pa.Schema:
    ms = manifest_schema_of(vm)
    return pa.schema([ms.field(c) for c in ENTRY_COLUMNS if c in ms.names])


def _live_data(t: pa.Table) -> pa.Table:
    keep = pc.and_(pc.equal(t.column("content"), C.DATA), pc.not_equal(t.column("status"), C.REMOVED))
    return t.filter(keep)


def changed_entries(
    io: FileIO,
    older: VersionManifest,
    newer: VersionManifest,
    full: bool = False,
) -> tuple[pa.Table, pa.Table]:
    """(entries live in ``older`` but not in ``newer``, entries live in ``newer`` but not in
    ``older``), keyed by file and deletion vector; only manifests that differ are read.
    ``full``: every manifest column of ``newer`` (statistics too), not only the entry's own."""
    schema = manifest_schema_of(newer) if full else _entry_schema(newer)
    roots = [load_root(io, vm.root_manifest, manifest_schema_of(vm), vm.root_inline) for vm in (older, newer)]
    leaves = [set(r.filter(pc.equal(r.column("content"), C.LEAF)).column("path").to_pylist()) for r in roots]
    sides = []
    for root, mine, theirs in ((roots[0], leaves[0], leaves[1]), (roots[1], leaves[1], leaves[0])):
        own = sorted(mine - theirs)
        parts = [conform(_live_data(root), schema)]
        parts += [_live_data(conform(t, schema)) for t in read_manifests(io, own, list(schema.names))]
        sides.append(pa.concat_tables(parts))
    keys = [file_key_array(s) for s in sides]
    gone = sides[0].filter(pc.invert(pc.is_in(keys[0], value_set=keys[1])))
    new = sides[1].filter(pc.invert(pc.is_in(keys[1], value_set=keys[0])))
    return gone, new


def change_schema(reader: Scan) -> pa.Schema:
    """The schema of ``version_changes``: the reader's columns, then the change columns."""
    return pa.schema([*reader.arrow_schema_of(reader.output_columns), *CHANGE_FIELDS])


def version_changes(io: FileIO, older: VersionManifest, newer: VersionManifest, reader: Scan) -> pa.Table:
    """The row changes ``newer`` made to ``older`` (its parent). ``reader``, a scan of the
    range's newest version (whose schema the rows follow), gives the columns and the row
    filter; the filter applies after rows are paired, so an update whose other image it
    does not select is never mistaken for a delete or an insert.

    In three passes, so a rewrite that moves many rows and changes few costs little: the
    candidate rows' positions (from entries and DVs), their ``_row_id`` and
    ``_last_updated_version`` (free for files that store no lineage column: first id plus
    position), pairing on those alone, and only then the columns asked for, read from the
    files that hold a changed row."""
    out_schema = change_schema(reader)
    if newer.operation in NO_DATA_CHANGE:
        return out_schema.empty_table()
    # On an object store, a file holding a change is got once for both passes that read it
    # (its row ids, then its columns), not twice.
    with reader.io.keeping_gets(DATA_DIR):
        return _version_changes(io, older, newer, reader, out_schema)


def _version_changes(
    io: FileIO, older: VersionManifest, newer: VersionManifest, reader: Scan, out_schema: pa.Schema
) -> pa.Table:
    columns = list(reader.output_columns)
    gone_e, new_e = changed_entries(io, older, newer)
    files, gone_pos, new_pos = _candidates(io, gone_e, new_e)
    if not files.num_rows:
        return out_schema.empty_table()
    # Pass 1: the lineage of every candidate row.
    lineage = list(reader.read_files(files, list(LINEAGE_COLUMNS), files_per_task=16))
    sides = [_side(lineage, gone_pos, 0), _side(lineage, new_pos, 1)]
    # Pass 2: pairing by row id, on those narrow columns.
    kinds = _pair(sides[0], sides[1])
    rows = pa.concat_tables([s.append_column("kind", k) for s, k in zip(sides, kinds)])
    rows = rows.filter(pc.is_valid(rows.column("kind")))
    if not rows.num_rows:
        return out_schema.empty_table()
    # Pass 3: the columns asked for (and the predicate's), from the files holding a change.
    data_cols = [c for c in reader.with_predicate_columns(columns) if c not in LINEAGE_COLUMNS]
    rows = rows.take(pc.sort_indices(rows, [("file", "ascending"), ("pos", "ascending")]))
    if data_cols:
        rows = _with_data(reader, files, rows, data_cols)
    t = rows.rename_columns([CHANGE_TYPE if c == "kind" else c for c in rows.column_names])
    t = t.take(pc.sort_indices(t, [("side", "ascending")]))  # gone rows first, stable
    if reader.row_filter is not None:
        t = t.filter(reader.row_filter)
    t = t.select([*columns, CHANGE_TYPE])
    stamp = {
        COMMIT_VERSION: pa.scalar(newer.version, pa.int64()),
        COMMIT_TIMESTAMP: pa.scalar(newer.timestamp_ms, pa.timestamp("ms", tz="UTC")),
    }
    for f in CHANGE_FIELDS[1:]:
        t = t.append_column(f, pa.repeat(stamp[f.name], t.num_rows))
    return t.cast(out_schema)


def _candidates(io: FileIO, gone_e: pa.Table, new_e: pa.Table) -> tuple[pa.Table, list[np.ndarray], list[np.ndarray]]:
    """The files rows may have changed in (their entries, deletion vectors cleared: rows are
    read by physical position), and per file the positions of rows gone and rows new: a
    removed file's live rows are gone, an added file's are new; where a file's DV changed,
    the positions the new DV adds are gone and those it drops are new."""
    new_paths = new_e.column("path")
    in_new = pc.is_in(gone_e.column("path"), value_set=new_paths)
    changed_dv = gone_e.filter(in_new)
    removed = gone_e.filter(pc.invert(in_new))
    added = new_e.filter(pc.invert(pc.is_in(new_paths, value_set=gone_e.column("path"))))
    replaced = new_e.take(pc.index_in(changed_dv.column("path"), value_set=new_paths))
    groups = [changed_dv, removed, added]
    entries = pa.concat_tables(groups)
    dvs = dvs_of_plan(entries) + dvs_of_plan(replaced)
    maps = iter(read_bitmaps(io, [d for d in dvs if d is not None]))
    deleted = [_positions(next(maps)) if d is not None else _positions(None) for d in dvs]
    physical = physical_rows(entries).tolist()
    n_dv, n_rm = changed_dv.num_rows, removed.num_rows
    gone_pos, new_pos = [], []
    empty = np.zeros(0, dtype=np.int64)
    for k, rows in enumerate(physical):
        if k < n_dv:  # the DV changed: (parent's DV, this version's)
            old, now = deleted[k], deleted[entries.num_rows + k]
            gone_pos.append(np.setdiff1d(now, old, assume_unique=True))
            new_pos.append(np.setdiff1d(old, now, assume_unique=True))
        elif k < n_dv + n_rm:
            gone_pos.append(np.setdiff1d(np.arange(rows, dtype=np.int64), deleted[k], assume_unique=True))
            new_pos.append(empty)
        else:
            gone_pos.append(empty)
            new_pos.append(np.setdiff1d(np.arange(rows, dtype=np.int64), deleted[k], assume_unique=True))
    files = entries.set_column(
        entries.schema.get_field_index("dv_path"), "dv_path", pa.nulls(entries.num_rows, pa.string())
    )
    return files, gone_pos, new_pos


def _side(lineage: list[pa.Table], positions: list[np.ndarray], side: int) -> pa.Table:
    """The candidate rows of one side: file index, position, row id and last-updated version."""
    counts = [len(p) for p in positions]
    n = sum(counts)
    if not n:
        return pa.table(
            {
                "side": pa.array([], pa.int8()),
                "file": pa.array([], pa.int32()),
                "pos": pa.array([], pa.int64()),
                ROW_ID: pa.array([], pa.int64()),
                LAST_UPDATED: pa.array([], pa.int64()),
            }
        )
    taken = [t.take(pa.array(p)) for t, p in zip(lineage, positions) if len(p)]
    both = pa.concat_tables(taken)
    return pa.table(
        {
            "side": pa.repeat(pa.scalar(side, pa.int8()), n),
            "file": pa.array(np.repeat(np.arange(len(positions), dtype=np.int32), counts)),
            "pos": pa.array(np.concatenate([p for p in positions if len(p)])),
            ROW_ID: both.column(ROW_ID),
            LAST_UPDATED: both.column(LAST_UPDATED),
        }
    )


def _with_data(reader: Scan, files: pa.Table, rows: pa.Table, data_cols: list[str]) -> pa.Table:
    """``rows`` (sorted by file and position) with ``data_cols`` read from their files."""
    file = rows.column("file").to_numpy()
    wanted = unique_sorted(file)
    starts = np.searchsorted(file, wanted)
    ends = np.r_[starts[1:], len(file)]
    pos = rows.column("pos").to_numpy()
    parts = []
    for t, a, b in zip(reader.read_files(files.take(pa.array(wanted)), data_cols, files_per_task=16), starts, ends):
        parts.append(t.take(pa.array(pos[a:b])))
    data = pa.concat_tables(parts)
    for name, col in zip(data.column_names, data.columns):
        rows = rows.append_column(data.schema.field(name), col)
    return rows


def _ints(col: Any) -> np.ndarray:
    """An int64 column as NumPy, nulls (ids not assigned) as -1, which matches nothing."""
    return pc.fill_null(col, -1).to_numpy() if col.null_count else col.to_numpy()


def _positions(bm: Any) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if bm is None else positions_array(bm).astype(np.int64)


def _pair(gone: pa.Table, new: pa.Table) -> tuple[pa.Array, pa.Array]:
    """The change type of each gone and each new row, by row id: a row id on both sides is an
    update if its last-updated version differs, else a row that moved (null: no change)."""
    g_type = np.full(gone.num_rows, 1, dtype=np.int8)  # 1 delete / insert, 2 image, 0 moved
    n_type = np.full(new.num_rows, 1, dtype=np.int8)
    if gone.num_rows and new.num_rows:
        # Row ids are unique on each side: match by sorting one side (ids of a file come in
        # runs, which a stable sort merges fast) and searching it, not a hash join.
        g_id, n_id = _ints(gone.column(ROW_ID)), _ints(new.column(ROW_ID))
        order = np.argsort(n_id, kind="stable")
        sorted_ids = n_id[order]
        at = np.minimum(np.searchsorted(sorted_ids, g_id), len(sorted_ids) - 1)
        hit = (sorted_ids[at] == g_id) & (g_id >= 0)
        g = np.nonzero(hit)[0]
        n = order[at[hit]]
        if len(g):
            moved = _ints(gone.column(LAST_UPDATED))[g] == _ints(new.column(LAST_UPDATED))[n]
            code = np.where(moved, 0, 2).astype(np.int8)
            g_type[g] = code
            n_type[n] = code
    names = [
        pa.array([None, DELETE, PREIMAGE], pa.string()),
        pa.array([None, INSERT, POSTIMAGE], pa.string()),
    ]
    return names[0].take(pa.array(g_type)), names[1].take(pa.array(n_type))
