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

from lamina.data.deletes import DV, read_bitmaps
from lamina.data.scan import Scan
from lamina.io import FileIO
from lamina.manifest.entries import conform, manifest_schema_of
from lamina.manifest.files import read_manifests
from lamina.manifest.tree import load_root
from lamina.spec import content as C
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID, LAST_UPDATED, LINEAGE_COLUMNS, ROW_ID
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

ENTRY_COLUMNS = (
    "content", "status", "path", "size", "record_count", "added_version", "partition_path",
    "dv_path", "dv_offset", "dv_length", "dv_cardinality", FIRST_ROW_ID, DATA_VERSION,
)


def _entry_schema(vm: VersionManifest) -> pa.Schema:
    ms = manifest_schema_of(vm)
    return pa.schema([ms.field(c) for c in ENTRY_COLUMNS if c in ms.names])


def _live_data(t: pa.Table) -> pa.Table:
    keep = pc.and_(pc.equal(t.column("content"), C.DATA), pc.not_equal(t.column("status"), C.REMOVED))
    return t.filter(keep)


def changed_entries(io: FileIO, older: VersionManifest, newer: VersionManifest) -> tuple[pa.Table, pa.Table]:
    """(entries live in ``older`` but not in ``newer``, entries live in ``newer`` but not in
    ``older``), keyed by file and deletion vector; only manifests that differ are read."""
    schema = _entry_schema(newer)
    roots = [load_root(io, vm.root_manifest, manifest_schema_of(vm)) for vm in (older, newer)]
    leaves = [set(r.filter(pc.equal(r.column("content"), C.LEAF)).column("path").to_pylist()) for r in roots]
    sides = []
    for root, mine, theirs in ((roots[0], leaves[0], leaves[1]), (roots[1], leaves[1], leaves[0])):
        own = sorted(mine - theirs)
        parts = [conform(_live_data(root), schema)]
        parts += [_live_data(conform(t, schema)) for t in read_manifests(io, own, list(schema.names))]
        sides.append(pa.concat_tables(parts))
    keys = [_keys(s) for s in sides]
    gone = sides[0].filter(pc.invert(pc.is_in(keys[0], value_set=keys[1])))
    new = sides[1].filter(pc.invert(pc.is_in(keys[1], value_set=keys[0])))
    return gone, new


def _keys(entries: pa.Table) -> pa.Array:
    """A file's identity in one version: its path and its deletion vector's place."""
    dv = pc.binary_join_element_wise(
        pc.fill_null(entries.column("dv_path"), ""), pc.fill_null(pc.cast(entries.column("dv_offset"), pa.string()), ""), "@")
    key = pc.binary_join_element_wise(entries.column("path"), dv, "\x00")
    return key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key


def _dv(e: dict[str, Any]) -> DV | None:
    return None if e["dv_path"] is None else DV(e["dv_path"], e["dv_offset"], e["dv_length"], e["dv_cardinality"])


def change_schema(reader: Scan) -> pa.Schema:
    """The schema of ``version_changes``: the reader's columns, then the change columns."""
    return pa.schema([*reader.arrow_schema_of(reader.output_columns), *CHANGE_FIELDS])


def version_changes(io: FileIO, older: VersionManifest, newer: VersionManifest, reader: Scan) -> pa.Table:
    """The row changes ``newer`` made to ``older`` (its parent). ``reader``, a scan of the
    range's newest version (whose schema the rows follow), gives the columns and the row
    filter; the filter applies after rows are paired, so an update whose other image it
    does not select is never mistaken for a delete or an insert."""
    out_schema = change_schema(reader)
    if newer.operation in NO_DATA_CHANGE:
        return out_schema.empty_table()
    columns = list(reader.output_columns)
    filt = reader.row_filter
    cols = list(dict.fromkeys([*reader.with_predicate_columns(columns), *LINEAGE_COLUMNS]))
    gone_e, new_e = changed_entries(io, older, newer)
    gone_paths = set(gone_e.column("path").to_pylist())
    both = gone_paths & set(new_e.column("path").to_pylist())
    gone_parts, new_parts = [], []
    if both:
        in_both = pa.array(sorted(both))
        g = gone_e.filter(pc.is_in(gone_e.column("path"), value_set=in_both))
        n = new_e.filter(pc.is_in(new_e.column("path"), value_set=in_both))
        gone_e = gone_e.filter(pc.invert(pc.is_in(gone_e.column("path"), value_set=in_both)))
        new_e = new_e.filter(pc.invert(pc.is_in(new_e.column("path"), value_set=in_both)))
        lost, back = _dv_changes(io, reader, g, n, cols)
        gone_parts.append(lost)
        new_parts.append(back)
    if gone_e.num_rows:
        gone_parts += list(reader.read_files(gone_e, cols, files_per_task=16))
    if new_e.num_rows:
        new_parts += list(reader.read_files(new_e, cols, files_per_task=16))
    schema = reader.arrow_schema_of(tuple(cols))
    gone = pa.concat_tables(gone_parts) if gone_parts else schema.empty_table()
    new = pa.concat_tables(new_parts) if new_parts else schema.empty_table()
    gone_type, new_type = _pair(gone, new)
    out = []
    stamp = {COMMIT_VERSION: pa.scalar(newer.version, pa.int64()),
             COMMIT_TIMESTAMP: pa.scalar(newer.timestamp_ms, pa.timestamp("ms", tz="UTC"))}
    for rows, types in ((gone, gone_type), (new, new_type)):
        t = rows.append_column(CHANGE_FIELDS[0], types).filter(pc.is_valid(types))
        if filt is not None and t.num_rows:
            t = t.filter(filt)
        t = t.select([*columns, CHANGE_TYPE])
        for f in CHANGE_FIELDS[1:]:
            t = t.append_column(f, pa.repeat(stamp[f.name], t.num_rows))
        out.append(t)
    return pa.concat_tables(out).cast(out_schema)


def _dv_changes(io: FileIO, reader: Scan, old: pa.Table, new: pa.Table, cols: list[str]) -> tuple[pa.Table, pa.Table]:
    """Files whose deletion vector changed between the versions (``old``/``new``: their entries
    in each, one per file): the rows the new DV deletes, and those it no longer deletes."""
    new = new.take(pc.index_in(old.column("path"), value_set=new.column("path")))
    olds, news = old.to_pylist(), new.to_pylist()
    maps = read_bitmaps(io, [d for d in (_dv(e) for e in olds + news) if d is not None])
    it = iter(maps)
    old_bm = [next(it) if e["dv_path"] is not None else None for e in olds]
    new_bm = [next(it) if e["dv_path"] is not None else None for e in news]
    # Every physical row of each file (no DV applied), then the positions that changed.
    physical = old.set_column(old.schema.get_field_index("dv_path"), "dv_path", pa.nulls(old.num_rows, pa.string()))
    lost, back = [], []
    for t, ob, nb in zip(reader.read_files(physical, cols, files_per_task=16), old_bm, new_bm):
        o = _positions(ob)
        n = _positions(nb)
        lost.append(t.take(pa.array(np.setdiff1d(n, o, assume_unique=True))))
        back.append(t.take(pa.array(np.setdiff1d(o, n, assume_unique=True))))
    return pa.concat_tables(lost), pa.concat_tables(back)


def _positions(bm: Any) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if bm is None else np.frombuffer(bm.to_array(), dtype=np.uint32).astype(np.int64)


def _pair(gone: pa.Table, new: pa.Table) -> tuple[pa.Array, pa.Array]:
    """The change type of each gone and each new row (null: a row moved, not changed)."""
    g_id, n_id = gone.column(ROW_ID), new.column(ROW_ID)
    g_in = pc.is_in(g_id, value_set=n_id).combine_chunks() if gone.num_rows else pa.array([], pa.bool_())
    if not gone.num_rows or not new.num_rows or not pc.any(g_in).as_py():
        return (pa.repeat(pa.scalar(DELETE), gone.num_rows).cast(pa.string()),
                pa.repeat(pa.scalar(INSERT), new.num_rows).cast(pa.string()))
    pairs = pa.table({ROW_ID: g_id, "g": gone.column(LAST_UPDATED)}).join(
        pa.table({ROW_ID: n_id, "n": new.column(LAST_UPDATED)}), keys=ROW_ID, join_type="inner")
    moved = pc.equal(pairs.column("g"), pairs.column("n"))
    moved_ids = pairs.column(ROW_ID).filter(moved)
    updated_ids = pairs.column(ROW_ID).filter(pc.invert(moved))

    def types(ids: Any, plain: str, image: str) -> pa.Array:
        t = pc.if_else(pc.is_in(ids, value_set=updated_ids), pa.scalar(image), pa.scalar(plain))
        t = pc.if_else(pc.is_in(ids, value_set=moved_ids), pa.scalar(None, pa.string()), t)
        return t.combine_chunks() if isinstance(t, pa.ChunkedArray) else t

    return types(g_id, DELETE, PREIMAGE), types(n_id, INSERT, POSTIMAGE)
