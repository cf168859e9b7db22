"""Row-level changes: delete, update and merge, as one operation re-applied to each base.

``RowDelta.apply(base)`` plans the files that may hold affected rows (pruned by
a predicate, e.g. the merge keys' bounds), and for each one computes the row
positions to delete and the rows to write instead. Per-file outcomes are
cached by the file's identity in that base (path + its DV), so a rebase only
reads files a concurrent commit changed; new data files and DVs are written
once per outcome and reused. Concurrent appends never fail a row-level change
(it applies to the newest base, serializably, like ``Overwrite``), and two
changes to one data file never lose each other's deletes: the loser re-reads
the winner's DV and merges into it.

Modes (property ``write.delete.mode`` or per call): ``merge-on-read`` writes a
deletion vector next to the data file (default); ``copy-on-write`` rewrites
the file without the deleted rows.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lamina.commit import Operation, Base, Change, removed_of
from lamina.errors import CommitConflict, InvalidArgument, SchemaMismatch
from lamina.expr import AlwaysTrue, Expr, and_, col, or_, referenced_columns, to_arrow_filter
from lamina.expr.values import as_column, as_mask, qualified_columns
from lamina.manifest.entries import conform, fill_constant
from lamina.data.copy import StagedFiles
from lamina.data.inflight import new_write_id
from lamina.data.parquet_footer import FooterError
from lamina.data.deletes import (
    DV, bitmap_of, dvs_of_plan, file_key, non_decreasing, positions_array, read_bitmaps, read_bitmaps_of, strictly_increasing,
    unique_sorted, write_dv_file,
)
from lamina.spec.properties import DELETE_MODES, TableProperties
from lamina.operations.schema import PlannedColumns
from lamina.spec.lineage import DATA_VERSION, FIRST_ROW_ID, LINEAGE_COLUMNS, LINEAGE_FIELDS, ROW_ID, check_row_ids, no_row_ids, conform_keeping_lineage, has_lineage, lineage_of
from lamina.spec.dv import keep_mask
from lamina.spec.layout import DATA_DIR
from lamina.spec.schema import Schema
from lamina.spec.write_types import check_cast_mode, fit, mismatch, store
from lamina.spec.sort import UNORDERED_TYPES, sortable

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-rowlevel")
# Reads a merge source's other columns while its keys are matched (pyarrow decodes on its own threads).
_source_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lamina-source-read")

MODES = DELETE_MODES
POS = "__lamina_pos"  # physical row position within its data file
FILE = "__lamina_file"  # which of the files read together a row comes from
KEY = "__lamina_key"  # merge: the join key columns, KEY0, KEY1, ... (see join_key)


class OnDemand:
    """A computation started on ``_source_pool`` the first time its future is asked for (by any thread), once."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn, self._future, self._lock = fn, None, threading.Lock()

    def __call__(self) -> Future:
        with self._lock:
            if self._future is None:
                self._future = _source_pool.submit(self._fn)
            return self._future


@dataclass(frozen=True)
class SourceRead:
    """A merge source still being read: its columns (``schema``) and its key columns
    (``keys``, every row) at hand, the whole of it from ``rows`` (a future of a table of
    ``schema``'s columns, the same rows in the same order, or an ``OnDemand`` read of them
    started when first needed: ``start``), then passed through ``then``.
    A merge that takes its new rows from its source (``MergeBuilder._whole_source``) needs
    only the keys to match, so matching overlaps the read of the other columns (what
    ``lamina.spark.merge`` does with a source staged as Parquet files); any other merge
    waits for the rows. A failed read fails the merge: nothing is committed.

    ``staged``: the Parquet files whose rows these are, in memory: where they are what the
    table stores, they become its data files as they are (``lamina.data.copy``) and the rows
    are never read."""

    schema: pa.Schema
    keys: pa.Table
    rows: Future | OnDemand
    then: Callable[[pa.Table], pa.Table] | None = None
    staged: StagedFiles | None = None

    @property
    def num_rows(self) -> int:
        return self.keys.num_rows

    def start(self) -> Future:
        """The read of the rows, started if it was not."""
        return self.rows if isinstance(self.rows, Future) else self.rows()

    def table(self) -> pa.Table:
        rows = self.start().result()
        return rows if self.then is None else self.then(rows)

    def map(self, fn: Callable[[pa.Table], pa.Table]) -> SourceRead:
        """This source with ``fn`` applied to its rows once read (``schema`` and ``keys`` as they are)."""
        first = self.then
        return replace(self, then=fn if first is None else (lambda t: fn(first(t))))


def rows_of(source: pa.Table | SourceRead) -> pa.Table:
    """A source's rows: the table, or the read's once done."""
    return source.table() if isinstance(source, SourceRead) else source


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidArgument(f"write mode must be one of {MODES}, not {mode!r}")
    return mode


def row_mode(mode: str | None, properties: Mapping[str, str]) -> str:
    """The row-level write mode: ``mode``, else the table's ``write.delete.mode``."""
    return check_mode(mode or TableProperties.WRITE_DELETE_MODE.get(properties))


@dataclass
class FileOutcome:
    """What a row-level change does to one data file (as it is in one base)."""

    delete: np.ndarray  # physical positions newly deleted (sorted, unique)
    new_rows: pa.Table | None = None  # rows written in their place (update / merge)
    matched_source: np.ndarray | None = None  # merge: source row indices matched in this file
    # merge that writes its source's rows (RowDelta.whole_source), on a table with row lineage: the
    # matched target rows' ids, in matched_source's order (the rows written in their place keep them)
    matched_ids: np.ndarray | None = None
    # batch form (many files evaluated at once): the file of each delete / matched source row;
    # new_rows then carry a FILE column
    delete_file: np.ndarray | None = None
    matched_file: np.ndarray | None = None
    # filled lazily, reused by retries on the same base entry:
    remainder_entries: pa.Table | None = None  # copy-on-write
    dv: DV | None = None


# (live rows of many files, with POS and FILE columns) -> one FileOutcome in batch form
FileFn = Callable[[pa.Table], FileOutcome]


def _file_order(files: np.ndarray, n: int) -> tuple[np.ndarray | None, np.ndarray]:
    """(row indices ordered by file, stable; where each file 0..n-1 starts in them, and the end).
    Rows already in file order (read file by file, matched in the files' order) are not
    sorted: their order is None, the rows as they are."""
    if non_decreasing(files):
        return None, np.searchsorted(files, np.arange(n + 1))
    order = np.argsort(files, kind="stable")
    return order, np.searchsorted(files[order], np.arange(n + 1))


def _by_file(files: np.ndarray, n: int) -> list[np.ndarray | slice]:
    """Row indices per file 0..n-1 (stable): slices where the rows are in file order (an index
    into a NumPy array by a slice is a view, by an array of indices a copy)."""
    order, bounds = _file_order(files, n)
    if order is None:
        return [slice(int(bounds[k]), int(bounds[k + 1])) for k in range(n)]
    return [order[bounds[k] : bounds[k + 1]] for k in range(n)]


def _with_row_ids(base: Base, physical: pa.Table, t: pa.Table, fidx: np.ndarray, pos: np.ndarray,
                  stored: dict[int, pa.ChunkedArray]) -> pa.Table:
    """``t`` (rows at physical positions ``pos`` of files ``fidx`` of ``physical``, ordered by
    file) with their ``_row_id``: ``first_row_id + position``, or the id the file stores
    (lamina.spec.lineage; ``stored``: the kept rows' stored ids, by file index, for the files
    that store ids). Only those rows' ids are computed."""
    files, first = unique_sorted(fidx, return_index=True)
    bounds = np.append(first, len(fidx))
    entries = physical.take(pa.array(files))
    starts = entries.column(FIRST_ROW_ID)
    if starts.null_count:
        paths = entries.column("path").to_pylist()
        raise no_row_ids(paths[starts.to_pylist().index(None)], base.metadata.version)
    ids = np.repeat(starts.to_numpy(), np.diff(bounds)) + pos
    for k, f in enumerate(files.tolist()):
        kept = stored.get(f)
        if kept is not None:  # (files that rewrote rows: few)
            at = slice(bounds[k], bounds[k + 1])
            ids[at] = np.where(pc.is_valid(kept).to_numpy(zero_copy_only=False),
                               pc.fill_null(kept, 0).to_numpy(zero_copy_only=False), ids[at])
    return t.append_column(ROW_ID, pa.array(ids))


def split_outcome(o: FileOutcome, n: int) -> list[FileOutcome]:
    """A batch outcome over files 0..n-1 as one outcome per file."""
    empty = np.zeros(0, dtype=np.int64)
    dels = _by_file(o.delete_file, n) if o.delete_file is not None and len(o.delete) else [empty] * n
    if o.new_rows is not None and o.new_rows.num_rows:
        files = o.new_rows.column(FILE).to_numpy()
        rows = o.new_rows.drop_columns([FILE])
        order, bounds = _file_order(files, n)
        if order is not None:  # (rows made file by file, one clause's, are in order: slices, no copy)
            rows = rows.take(pa.array(order))  # one take, then a slice per file
        news = [rows.slice(bounds[k], bounds[k + 1] - bounds[k]) for k in range(n)]
    else:
        news = [None] * n
    ids: list[np.ndarray | None] = [None] * n
    if o.matched_source is not None and len(o.matched_source):
        by_file = _by_file(o.matched_file, n)
        mats = [o.matched_source[ix] for ix in by_file]
        if o.matched_ids is not None:
            ids = [o.matched_ids[ix] for ix in by_file]
    else:
        mats = [empty if o.matched_source is not None else None] * n
    deletes = [o.delete[d] for d in dels] if o.delete_file is not None and len(o.delete) else dels
    return [
        FileOutcome(d if len(d) else empty, news[k] if news[k] is not None and news[k].num_rows else None, mats[k],
                    matched_ids=ids[k])
        for k, d in enumerate(deletes)
    ]


@dataclass
class RowDelta(Operation):
    operation: str
    prune: Expr  # files that may hold affected rows
    read_columns: list[str]  # columns file_fn needs
    file_fn: FileFn
    mode: str
    write_id: str
    # merge: rows to insert given the source rows matched nowhere (None = no inserts)
    inserts: Callable[[np.ndarray], pa.Table | None] | None = None
    # (rows read, columns read_columns) -> positions (ascending) of the rows file_fn may affect
    # (a superset: the rows it rules out are not evaluated); None = every row
    prefilter: Callable[[pa.Table], np.ndarray] | None = None
    # file_fn for rows already known to be selected by ``where`` (read at the positions
    # _selected_positions found): what it does to them, without evaluating ``where`` again
    selected_fn: FileFn | None = None
    _outcomes: dict[tuple, FileOutcome] = field(default_factory=dict)
    # the entries of the data files the last attempt wrote (rows written in place of deleted
    # ones, and inserted ones), by the touched files' keys and the matched source rows
    _written: dict[tuple, Future | None] = field(default_factory=dict)
    last_stats: dict[str, int] = field(default_factory=dict)
    # the columns it was planned on, checked against each base's schema (see PlannedColumns)
    planned: PlannedColumns | None = None
    # a delete's or an update's predicate (file_fn deletes or rewrites the rows it selects),
    # whose rows may then be found before the rest is read (see _selected_positions)
    where: Expr | None = None
    # merge: the source's rows, when they are the rows it writes (see MergeBuilder._whole_source):
    # file_fn then only matches, and the rows are taken from here (a source still being read,
    # SourceRead: once read, by the write); None: file_fn makes the rows
    whole_source: pa.Table | SourceRead | None = None
    # how ``whole_source``'s columns are stored (lamina.spec.write_types: None, or "safe")
    cast: str | None = None
    _whole: tuple[tuple, Future] | None = None  # (what its write depends on in a base, the write)
    _outcomes_lineage: bool | None = None  # whether the base _outcomes were made on had row lineage
    skip_if_noop: ClassVar[bool] = True  # a change that matched no row commits no version
    refresh_base: ClassVar[bool] = True  # it reads the base's files: start from the latest

    # -- per file -----------------------------------------------------------------------

    def _live_rows(self, base: Base, entries: pa.Table, selected: list[np.ndarray] | None = None,
                   columns: list[str] | None = None) -> pa.Table:
        """Live rows of the files ``entries`` (in order), with their physical positions (POS)
        and the file's index in ``entries`` (FILE); with a ``prefilter``, only the rows it keeps;
        with ``selected`` (positions per file, ascending), only the rows at those positions.
        ``columns``: read those instead of ``read_columns``, without row lineage.

        The files are read whole (``Scan.read_files``: runs of files per task on the read
        threads), then rows deleted by existing DVs (and rows the prefilter rules out) are
        dropped with one mask per file: DV positions are physical row numbers, so the DVs must
        not be applied by the reader. Positions and file indices are kept for the kept rows only."""
        physical = entries.set_column(entries.schema.get_field_index("dv_path"), "dv_path",
                                      pa.nulls(entries.num_rows, pa.string()))
        # Row lineage rides along where rows are written in place of these (they keep their ids);
        # with a prefilter, only the ids (an update's _last_updated_version is null) of the few
        # rows it keeps, afterwards.
        writes = self.operation != "delete" and has_lineage(base.metadata) and columns is None
        lineage_after = writes and (self.prefilter is not None or selected is not None)
        cols = [*self.read_columns, *LINEAGE_COLUMNS] if writes and not lineage_after else (columns or self.read_columns)
        # Each file's rows are cut to the kept ones as it arrives, while the read threads go
        # on with the next files: only those rows are concatenated, never all the files' rows.
        old_dvs = read_bitmaps_of(base.io, dvs_of_plan(entries))
        parts, positions, files = [], [], []
        stored: dict[int, pa.ChunkedArray] = {}  # with lineage_after: the kept rows' stored ids, by file
        reads = base.scan().read_files(physical, cols, files_per_task=16, stored_row_ids=lineage_after)
        for k, read in enumerate(reads):
            table, ids = read if lineage_after else (read, None)
            # The prefilter's kept rows come as positions (a merge keeps a few rows of each
            # file: taking them costs less than a mask over every row, made, scanned and
            # applied); the DVs' as a mask.
            at = self.prefilter(table) if self.prefilter is not None else (selected[k] if selected is not None else None)
            keep = None
            if k in old_dvs:
                live = keep_mask(old_dvs[k], table.num_rows)
                if at is None:
                    keep = live
                else:
                    at = at[live[at]]
            if keep is not None:
                at = np.flatnonzero(keep)
                table = table.filter(pa.array(keep))
            elif at is not None:
                table = table.take(pa.array(at))
            else:
                at = np.arange(table.num_rows, dtype=np.int64)
            if ids is not None and len(at):
                stored[k] = ids.take(pa.array(at))
            parts.append(table)
            positions.append(at)
            files.append(np.full(len(at), k, dtype=np.int32))
        t = pa.concat_tables(parts)
        pos = np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)
        fidx = np.concatenate(files) if files else np.zeros(0, dtype=np.int32)
        if lineage_after:
            t = _with_row_ids(base, physical, t, fidx, pos, stored)
        return t.append_column(POS, pa.array(pos)).append_column(FILE, pa.array(fidx))

    def _outcomes_for(self, base: Base, cands: pa.Table, rows: list[dict[str, Any]]) -> list[FileOutcome]:
        """Per-file outcomes; files not seen before are read together and evaluated in one batch."""
        keys = [file_key(e) for e in rows]
        new = [i for i, k in enumerate(keys) if k not in self._outcomes]
        if new:
            entries = cands.take(pa.array(new, pa.int64()))
            positions = self._selected_positions(base, entries)  # (ascending, each once)
            if positions is not None and self.operation == "delete":
                outs = [FileOutcome(p) for p in positions]
            elif positions is not None:
                # Only the files holding a selected row are read, and of those only the selected
                # rows are kept: file_fn then evaluates its predicate on those rows alone.
                outs = [FileOutcome(np.zeros(0, dtype=np.int64)) for _ in new]
                hit = [k for k, p in enumerate(positions) if len(p)]
                if hit:
                    rows = self._live_rows(base, entries.take(pa.array(hit, pa.int64())), [positions[k] for k in hit])
                    for k, o in zip(hit, split_outcome(self.selected_fn(rows), len(hit))):
                        outs[k] = o
            else:
                outs = split_outcome(self.file_fn(self._live_rows(base, entries)), len(new))
            for o in outs:
                o.delete = unique_sorted(o.delete.astype(np.int64, copy=False))
            for i, o in zip(new, outs):
                self._outcomes[keys[i]] = o
        return [self._outcomes[k] for k in keys]

    def _selected_positions(self, base: Base, entries: pa.Table) -> list[np.ndarray] | None:
        """The positions (per file of ``entries``, ascending, live) of the rows a delete's or an
        update's ``where`` selects, found before any other column is read: by dictionary
        (``_positions_by_dictionary``), or, for an update, from its predicate's columns alone,
        so that only the files holding a selected row are read whole, and of those only the
        selected rows kept (an update of a few rows of a large table reads a column of it, not
        all of it). None where ``file_fn`` goes over every live row instead (a delete reads
        its predicate's columns only already; a merge; an update of every row)."""
        if not self._finds_rows_first:
            return None
        positions = self._positions_by_dictionary(base, entries)
        if positions is not None or self.operation == "delete":
            return positions
        cols = sorted(referenced_columns(self.where)) or [base.schema.names[0]]
        rows = self._live_rows(base, entries, columns=cols)
        hit = rows.filter(to_arrow_filter(self.where)).select([POS, FILE])
        pos, files = hit.column(POS).to_numpy(), hit.column(FILE).to_numpy()
        return [pos[ix] for ix in _by_file(files, entries.num_rows)]

    @property
    def _finds_rows_first(self) -> bool:
        """Whether ``_selected_positions`` looks for the rows before reading the rest: a delete
        (by dictionary), an update that has a ``selected_fn`` for them; with a predicate."""
        return (self.where is not None and not isinstance(self.where, AlwaysTrue)
                and (self.operation == "delete" or self.selected_fn is not None))

    @property
    def _reads_twice(self) -> bool:
        """Whether a touched file is read twice: copy-on-write (the rows it matches, then the
        file to rewrite), or an update whose selected rows are found first (``_selected_positions``)."""
        return self.mode == "copy-on-write" or (self.operation != "delete" and self._finds_rows_first)

    def _positions_by_dictionary(self, base: Base, entries: pa.Table) -> list[np.ndarray] | None:
        """For a predicate on one string or binary column: the positions it selects in each
        file of ``entries``, from the predicate evaluated on the column's dictionaries
        (``Scan.matching_positions``: that one column read, as codes), less the rows the file's
        DV already deletes. None for any other predicate."""
        scan = base.scan(self.where)
        if scan.dictionary_column is None:
            return None
        positions = scan.matching_positions(entries)
        for k, bm in read_bitmaps_of(base.io, dvs_of_plan(entries)).items():
            positions[k] = positions[k][~np.isin(positions[k], positions_array(bm))]
        return positions

    def rows_changed_since(self, read: Base, base: Base, *, added: bool = False) -> list[str]:
        """The data files holding rows this change matches at ``read`` whose rows a later commit
        (by ``base``) deleted or rewrote: the file is gone, or its deletion vector now covers
        one of those rows. Rows of a file only other rows of which were deleted are intact.
        ``added``: also the files added since ``read`` that hold rows it matches at ``base``
        (rows appended, or rewritten by an update, that it would now see; files its predicate's
        statistics rule out are not read). A column the change reads that ``base`` no longer
        has is a CommitConflict, as in apply."""
        if self.planned is not None:
            self.planned.check(base.schema, self.operation)
        cands = read.entries(self.prune)
        rows = _entry_rows(cands)
        outcomes = self._outcomes_for(read, cands, rows) if rows else []
        touched = [(e, o) for e, o in zip(rows, outcomes) if len(o.delete)]
        if not touched and not added:
            return []
        now_cands = base.entries(self.prune)
        now_rows = _entry_rows(now_cands)
        now = {e["path"]: e for e in now_rows}
        changed = [(e, now.get(e["path"])) for e, _ in touched]
        redeleted = [(e, n) for e, n in changed if n is not None and n["dv_path"] is not None and file_key(n) != file_key(e)]
        bitmaps = dict(zip(
            [e["path"] for e, _ in redeleted],
            read_bitmaps(base.io, [DV(n["dv_path"], n["dv_offset"], n["dv_length"], n["dv_cardinality"]) for _, n in redeleted]),
        )) if redeleted else {}
        clash = []
        for (e, o), (_, n) in zip(touched, changed):
            if n is None or (e["path"] in bitmaps and bitmaps[e["path"]].intersect(bitmap_of(o.delete))):
                clash.append(e["path"])
        if added:
            before = {e["path"] for e in rows}
            new = [i for i, e in enumerate(now_rows) if e["path"] not in before]
            if new:
                outs = self._outcomes_for(base, now_cands.take(pa.array(new, pa.int64())), [now_rows[i] for i in new])
                clash += [now_rows[i]["path"] for i, o in zip(new, outs) if len(o.delete)]
        return clash

    # -- apply ----------------------------------------------------------------------------

    def apply(self, base: Base) -> Change:
        # A change that reads a touched file twice (``_reads_twice``) gets it once from an object store.
        if not self._reads_twice:
            return self._apply(base)
        with base.io.keeping_gets(DATA_DIR):
            return self._apply(base)

    def _apply(self, base: Base) -> Change:
        if self.planned is not None:
            self.planned.check(base.schema, self.operation)
        mschema = base.manifest_schema
        lineage = has_lineage(base.metadata)
        if self._outcomes_lineage not in (None, lineage):
            self._outcomes.clear()  # lineage turned on since: rows written in place of others keep their ids
        self._outcomes_lineage = lineage
        # A merge whose new rows are its source's, on a table without row lineage: written from
        # the start, while the base's files are read and matched, not after. (With lineage the
        # updated rows keep the ids of the rows they replace, known once matched.)
        early = self.whole_source is not None and not lineage
        if self.whole_source is not None:
            self._prepare_source(base)
        if not early:
            self._discard_whole(base.io)
        whole_write = self._write_whole(base) if early else None
        try:
            cands = base.entries(self.prune)
            rows = _entry_rows(cands)
            outcomes = self._outcomes_for(base, cands, rows) if rows else []
        except CommitConflict:
            raise  # (a retry reuses the write)
        except BaseException:
            self._discard_whole(base.io)  # bad input (a source key matched twice): nothing is left behind
            raise
        touched = [i for i, o in enumerate(outcomes) if len(o.delete)]
        if self.whole_source is not None:
            written, updated = self._source_written(base, outcomes, whole_write)
        else:
            written, updated = self._rows_written(base, outcomes, rows, touched)
        added: list[pa.Table] = []
        new_dvs: list[tuple[int, BitMap]] = []
        replaced: list[tuple[int, DV]] = []  # (candidate index, its new DV)
        rewrite: list[tuple[int, BitMap, int]] = []  # copy-on-write: (index, deleted rows, physical rows)
        deleted_rows = 0
        # the DVs the touched files have: read together (one range read per DV file)
        cand_dvs = dvs_of_plan(cands)
        old_dvs = read_bitmaps_of(base.io, {i: cand_dvs[i] for i in touched})
        for i in touched:
            o, e = outcomes[i], rows[i]
            deleted_rows += len(o.delete)
            physical = e["record_count"] + (e["dv_cardinality"] or 0)
            merged = bitmap_of(o.delete)
            if i in old_dvs:
                merged |= old_dvs[i]
            if len(merged) >= physical:
                continue  # every row deleted: the file leaves the live set
            if self.mode == "copy-on-write":
                if o.remainder_entries is None:
                    rewrite.append((i, merged, physical))
            elif o.dv is not None:
                replaced.append((i, o.dv))
            else:
                new_dvs.append((i, merged))
        # Files it re-lists (a new DV) or rewrites keep their rows' ids: they must have them.
        kept = [i for i, _, _ in rewrite] + [i for i, _ in new_dvs] + [i for i, _ in replaced]
        check_row_ids(cands.take(pa.array(kept, pa.int64())), base.metadata.version)
        if rewrite:
            scan = base.scan()
            # copy-on-write: the rows kept are copies, lineage and all
            names = [*base.schema.names, *LINEAGE_COLUMNS] if has_lineage(base.metadata) else base.schema.names

            def remainder(job: tuple[int, BitMap, int]) -> pa.Table:
                i, merged, physical = job
                keep = np.ones(physical, dtype=bool)
                keep[np.frombuffer(merged.to_array(), dtype=np.uint32)] = False
                whole = scan.read_file(rows[i]["path"], names, None, lineage=lineage_of(rows[i]))
                return base.write(whole.filter(pa.array(keep)), self.write_id)

            for (i, _, _), entries in zip(rewrite, _pool.map(remainder, rewrite)):
                outcomes[i].remainder_entries = entries
        if self.mode == "copy-on-write":
            added += [base.stamp(outcomes[i].remainder_entries) for i in touched if outcomes[i].remainder_entries is not None]
        if written is not None:
            try:
                added.append(base.stamp(written.result()))
            except BaseException:
                self._written, self._whole = {}, None  # a retry writes them anew
                raise
        if new_dvs:
            locs = write_dv_file(base.io, self.write_id, [bm for _, bm in new_dvs])
            for (i, _), loc in zip(new_dvs, locs):
                outcomes[i].dv = loc
                replaced.append((i, loc))
        if replaced:
            added.append(_replacements(cands, replaced))
        inserted = self.last_stats.get("inserted", 0) if self.inserts is not None else 0
        removed = cands.take(pa.array(touched, pa.int64())) if touched else cands.slice(0, 0)
        self.last_stats.update(files_touched=len(touched), rows_deleted=deleted_rows, files_scanned=len(rows), rows_updated=updated)
        adds = pa.concat_tables([conform(a, mschema) for a in added]) if added else mschema.empty_table()
        new_files = sum(a.num_rows for a in added) - (len(replaced) if replaced else 0)
        summary = {
            "deleted-rows": deleted_rows, "files-scanned": len(rows), "mode": self.mode,
            # a file that only got a new DV is neither added nor removed for the reader
            "dv-updated-files": len(replaced), "added-files": new_files,
            "removed-files": len(touched) - len(replaced),
            "added-records": updated + inserted, "removed-records": deleted_rows,
        }
        if self.inserts is not None:
            summary["inserted-rows"] = inserted
        return Change(self.operation, adds, removed_of(removed), summary=summary)

    def _rows_written(self, base: Base, outcomes: list[FileOutcome], rows: list[dict[str, Any]],
                      touched: list[int]) -> tuple[Future | None, int]:
        """(the write of the new rows made from ``outcomes``, how many of them are updated rows).

        New rows first: a row that does not fit the schema fails before any DV is written.
        The rows written in place of all touched files' and the rows inserted go to data
        files together (not a file per touched file, nor one for each kind), reused by a
        retry that touches the same files and matches the same source rows alike. They are
        encoded on pool threads (pyarrow releases the GIL) while the DVs are made and
        written, and joined before the change is returned."""
        with_rows = [i for i in touched if outcomes[i].new_rows is not None and outcomes[i].new_rows.num_rows]
        key: tuple = tuple(file_key(rows[i]) for i in with_rows)
        rows_in = None
        if self.inserts is not None:
            m = unique_sorted(_matched(outcomes)[1])
            key += (m.tobytes(),)
            if key not in self._written:
                rows_in = self.inserts(m)
                self.last_stats["inserted"] = 0 if rows_in is None else rows_in.num_rows
        if key not in self._written:
            parts = [conform_keeping_lineage(base.schema, pa.concat_tables([outcomes[i].new_rows for i in with_rows]))] if with_rows else []
            if rows_in is not None and rows_in.num_rows:
                parts.append(base.schema.conform(rows_in))  # (no lineage columns: inserted rows get new ids)
            new_rows = pa.concat_tables(parts, promote_options="default") if parts else None
            self._written = {key: _pool.submit(self._write_new_rows, base, new_rows) if new_rows is not None else None}
        return self._written[key], sum(outcomes[i].new_rows.num_rows for i in touched if outcomes[i].new_rows is not None)

    def _write_whole(self, base: Base) -> Future:
        """``whole_source`` being written for ``base``: started now, or by an earlier attempt onto
        a base that writes alike (same schema, partition spec, sort order and properties)."""
        vm = base.metadata
        alike = (vm.schema, vm.partition_spec, vm.sort_order, vm.properties)
        if self._whole is None or self._whole[0] != alike:
            self._discard_whole(base.io)
            source = self.whole_source
            self._whole = (alike, _pool.submit(self._write_source, base))
        return self._whole[1]

    def _staged_for(self, base: Base) -> StagedFiles | None:
        """The staged Parquet files ``whole_source`` is the rows of, where they may become
        ``base``'s data files as they are (``StagedFiles.copyable``)."""
        staged = getattr(self.whole_source, "staged", None)
        return staged if staged is not None and base.can_copy(staged) else None

    def _prepare_source(self, base: Base) -> None:
        """What writing ``whole_source`` for ``base`` needs, started now, while the base's files
        are read and matched: the staged files' checks where they are copied, else the read
        of the rows of a source being read."""
        staged = self._staged_for(base)
        if staged is not None:
            staged.checked(base.schema, base.stats_policy)
        elif isinstance(self.whole_source, SourceRead):
            self.whole_source.start()

    def _write_source(self, base: Base, m_all: np.ndarray | None = None, m: np.ndarray | None = None,
                      ids: np.ndarray | None = None) -> pa.Table:
        """The entries of the data files holding ``whole_source``'s rows for ``base``: each source
        row once (``m_all`` None: written from the start, without row lineage), or as
        ``_source_written`` says (source row ``m_all[i]`` in place of a target row, with the id
        ``ids[i]`` where the table keeps lineage). Each source row once, from staged files that
        may be copied (``_staged_for``): those files' bytes, its lineage columns appended;
        otherwise the rows, read and encoded (``_source_rows``)."""
        staged = self._staged_for(base)
        if staged is not None and (m_all is None or len(m) == len(m_all)):
            n = self.whole_source.num_rows
            lineage = None
            if has_lineage(base.metadata):
                lineage = pa.Table.from_arrays([_row_ids(n, m_all, ids), pa.nulls(n, pa.int64())], schema=pa.schema(LINEAGE_FIELDS))
            try:
                return base.copy_staged(staged, self.write_id, lineage)
            except FooterError:
                pass  # not a copy after all (nothing was stored): the rows are written
        if m_all is None:
            return self._write_new_rows(base, base.schema.conform(rows_of(self.whole_source), self.cast))
        return self._write_new_rows(base, self._source_rows(base, m_all, m, ids))

    def _source_written(self, base: Base, outcomes: list[FileOutcome], early: Future | None) -> tuple[Future, int]:
        """(the write of the new rows, how many of them are updated rows) for a merge whose new
        rows are its source's (``whole_source``): each source row once for each target row it
        updates, and once if it matched none. Each source row matched at most one target row
        (the rule): that is the source as it is, which ``early`` (written from the start,
        without row lineage) holds; with lineage, the source with the ids of the rows it
        replaces. A row matched by several target rows (a key the table holds more than once)
        is taken once for each, and ``early`` is discarded. The rows are made and written on
        a pool thread while the DVs are."""
        matched, m_all = _matched(outcomes)
        m = unique_sorted(m_all)
        self.last_stats["inserted"] = self.whole_source.num_rows - len(m)
        if early is not None and len(m) == len(m_all):
            return early, len(m_all)
        self._discard_whole(base.io)
        ids = None
        if has_lineage(base.metadata):
            ids = np.concatenate([o.matched_ids for o in matched]) if matched else np.zeros(0, dtype=np.int64)
        key = (m_all.tobytes(), None if ids is None else ids.tobytes())
        if key not in self._written:
            self._written = {key: _pool.submit(self._write_source, base, m_all, m, ids)}
        return self._written[key], len(m_all)

    def _source_rows(self, base: Base, m_all: np.ndarray, m: np.ndarray, ids: np.ndarray | None) -> pa.Table:
        """The rows ``_source_written`` writes, conformed to ``base``'s schema: source row
        ``m_all[i]`` in place of a target row (with its id ``ids[i]``, where the table keeps
        lineage), and every unmatched source row (a new id)."""
        src = rows_of(self.whole_source)
        n = src.num_rows
        if len(m) == len(m_all):  # each source row once: in the source's order, no copy
            rows, at = src, m_all
        else:
            unmatched = np.ones(n, dtype=bool)
            unmatched[m] = False
            rows = src.take(pa.array(np.concatenate([m_all, np.flatnonzero(unmatched)])))
            at = np.arange(len(m_all))  # (the matched rows first)
        if ids is None:
            return base.schema.conform(rows, self.cast)
        # their _last_updated_version is left null: the version that writes them
        return conform_keeping_lineage(base.schema, rows.append_column(ROW_ID, _row_ids(rows.num_rows, at, ids)), self.cast)

    def _discard_whole(self, io: Any) -> None:
        """Drop the write of ``whole_source`` under way, deleting what it wrote (nothing
        references it: best effort, orphan cleanup removes what is left)."""
        if self._whole is None:
            return
        _, write = self._whole
        self._whole = None
        try:
            paths = write.result().column("path").to_pylist()
            io.delete_many(paths)
        except Exception:  # noqa: BLE001 - a failed write left nothing; a failed delete leaves orphans
            pass

    def _write_new_rows(self, base: Base, rows: pa.Table) -> pa.Table:
        """The entries of ``rows`` written as data files: two of them, written at once, from
        twice PARALLEL_WRITE_MIN_ROWS rows on."""
        parts = 2 if rows.num_rows >= 2 * PARALLEL_WRITE_MIN_ROWS else 1
        return base.write(rows, self.write_id, max_rows=-(-rows.num_rows // parts))


# The rows one change writes (updated and inserted) go to two files encoded at once (pyarrow
# releases the GIL while encoding) when there are at least twice this many: a merge of 100,000
# rows then waits for 50,000 rows' encoding, not 90,000 (its updates) while another thread
# encodes 10,000 (its inserts), as when each kind had a file. Fewer rows: one file.
PARALLEL_WRITE_MIN_ROWS = 32_768


# The entry columns a row-level change looks at file by file (its identity, its DV, its rows'
# ids): only these are turned into Python dicts, not the entries' dozens of statistics columns
# (a few milliseconds for 200 files).
_ROW_COLUMNS = ("path", "record_count", "dv_path", "dv_offset", "dv_length", "dv_cardinality", FIRST_ROW_ID, DATA_VERSION)


def _row_ids(n: int, at: np.ndarray, ids: np.ndarray) -> pa.Array:
    """The ``_row_id`` column of ``n`` rows written by a merge: the rows at ``at`` keep the ids
    ``ids`` (of the rows they replace), the others are null (new rows: the committer's ids)."""
    row_ids, known = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    row_ids[at], known[at] = ids, True
    return pa.array(row_ids, mask=~known)


def _matched(outcomes: list[FileOutcome]) -> tuple[list[FileOutcome], np.ndarray]:
    """The outcomes of a merge that matched source rows, and those source rows (each as often
    as it matched, in the outcomes' order)."""
    hits = [o for o in outcomes if o.matched_source is not None and len(o.matched_source)]
    return hits, (np.concatenate([o.matched_source for o in hits]) if hits else np.zeros(0, dtype=np.int64))


def _entry_rows(entries: pa.Table) -> list[dict[str, Any]]:
    """The entries as dicts of ``_ROW_COLUMNS`` (the lineage ones where the table has them)."""
    return entries.select([c for c in _ROW_COLUMNS if c in entries.column_names]).to_pylist()


def _replacements(cands: pa.Table, replaced: list[tuple[int, DV]]) -> pa.Table:
    """The entries of files that get a new DV, all at once. Each keeps its added_version:
    the data file's lifetime goes on (expiry reads a REMOVED entry whose path the same
    version re-lists as a replacement, not a removal)."""
    idx = pa.array([i for i, _ in replaced], pa.int64())
    e = cands.take(idx)
    physical = pc.add(e.column("record_count"), pc.fill_null(e.column("dv_cardinality"), 0))
    card = pa.array([d.cardinality for _, d in replaced], pa.int64())
    cols = {
        "dv_path": pa.array([d.path for _, d in replaced], pa.string()),
        "dv_offset": pa.array([d.offset for _, d in replaced], pa.int64()),
        "dv_length": pa.array([d.length for _, d in replaced], pa.int64()),
        "dv_cardinality": card,
        "record_count": pc.subtract(physical, card),
    }
    for name, arr in cols.items():
        i = e.schema.get_field_index(name)
        e = e.set_column(i, e.schema.field(i), arr)
    return fill_constant(e, status=1, removed_version=None)


def _keep_row_ids(new_rows: pa.Table, old_rows: pa.Table) -> pa.Table:
    """Rows written in place of ``old_rows`` (an update), with their row ids when the table
    keeps lineage; their ``_last_updated_version`` is left null: the version that writes them."""
    if ROW_ID not in old_rows.column_names:
        return new_rows
    return new_rows.append_column(ROW_ID, old_rows.column(ROW_ID))


def file_fn_delete(filt: Any) -> FileFn:
    def fn(rows: pa.Table) -> FileOutcome:
        hit = rows.filter(filt).select([POS, FILE])
        return FileOutcome(hit.column(POS).to_numpy(), delete_file=hit.column(FILE).to_numpy())

    return fn


def delete_rows(schema: Schema, pred: Expr, mode: str) -> RowDelta:
    """The delete of the rows ``pred`` (bound to ``schema``) selects: ``Transaction.delete``'s
    operation, and what a read through a catalog transaction could see (lamina.catalog.transaction:
    its rows, never deleted, checked with ``rows_changed_since``)."""
    names = referenced_columns(pred)
    filt = to_arrow_filter(pred) if not isinstance(pred, AlwaysTrue) else pc.scalar(True)
    return RowDelta(
        "delete", pred, sorted(names) or [schema.names[0]], file_fn_delete(filt), mode, new_write_id(),
        planned=PlannedColumns.of(schema, names), where=pred,
    )


def file_fn_update(filt: Any, assignments: dict[str, Any], schema: pa.Schema, cast: str | None = None) -> FileFn:
    """An update's file_fn: the rows ``filt`` selects, rewritten by ``updated_rows_fn``."""
    rewrite = updated_rows_fn(assignments, schema, cast)
    return lambda rows: rewrite(rows.filter(filt))


def check_assignments(assignments: dict[str, Any], schema: pa.Schema, what: str, cast: str | None = None,
                      rows: pa.Table | None = None) -> None:
    """Refuse now (SchemaMismatch) the ``assignments`` (column -> SQL text or literal) whose
    values' type a column cannot store (``lamina.spec.write_types``), evaluated on no rows of
    ``rows`` (default: the table's columns); callables are checked when they run."""
    empty = (rows if rows is not None else schema.empty_table()).slice(0, 0)
    for name, value in assignments.items():
        if not callable(value):
            as_column(value, empty, schema.field(name).type, f"{what} of {name!r}", name, cast)


def updated_rows_fn(assignments: dict[str, Any], schema: pa.Schema, cast: str | None = None) -> FileFn:
    """For rows an update selects: each deleted, and written anew with ``assignments`` applied
    (SQL assignments: ``lamina.spec.write_types``)."""
    def fn(hit: pa.Table) -> FileOutcome:
        cols = []
        for f in schema:
            if f.name in assignments:
                cols.append(as_column(assignments[f.name], hit, f.type, f"update of column {f.name!r}", f.name, cast))
            else:
                cols.append(hit.column(f.name))
        new = _keep_row_ids(pa.table(cols, schema=schema), hit).append_column(FILE, hit.column(FILE))
        return FileOutcome(hit.column(POS).to_numpy(), new, delete_file=hit.column(FILE).to_numpy())

    return fn


# -- merge ------------------------------------------------------------------------------


@dataclass
class _Clause:
    kind: str  # "update" | "delete" | "insert"
    condition: Any = None
    values: dict[str, Any] | None = None  # None: every column from the source ("*_all")


def _clause_rows(cl: "_Clause", sel: pa.Table, tschema: pa.Schema, what: str, unset: Callable[[pa.Field], Any],
                 cast: str | None = None) -> pa.Table:
    """The rows a merge clause writes: every column from the source (``*_all``: rows written,
    by the rule of ``lamina.spec.write_types``), or the clause's values (SQL assignments) with
    ``unset`` for the columns it does not name."""
    cols = []
    for f in tschema:
        if cl.values is None and f"source.{f.name}" not in sel.column_names:
            cols.append(unset(f))  # (an insert of all columns from a source without one that has a default)
        elif cl.values is None:
            cols.append(store(sel.column(f"source.{f.name}"), f.type, f.name, cast=cast))
        elif f.name in cl.values:
            cols.append(as_column(cl.values[f.name], sel, f.type, f"merge {what} of {f.name!r}", f.name, cast))
        else:
            cols.append(unset(f))
    return pa.table(cols, schema=tschema)


def _default_or_null(defaults: dict[str, pa.Scalar], f: pa.Field, n: int) -> pa.Array:
    """``n`` values of a column a merge insert does not set: its write default, else null."""
    return pa.repeat(defaults[f.name], n) if f.name in defaults else pa.nulls(n, f.type)


def join_key(keys: pa.Array | pa.ChunkedArray, typ: pa.DataType, what: str) -> pa.Array | pa.ChunkedArray:
    """Merge keys as ``typ`` (the type both sides are joined as), in the form in which
    Arrow's hash join matches them as SQL's = does (docs/format.md, Deletion vectors and
    row-level changes): the join hashes and compares bits, so -0.0 would miss 0.0 and a NaN
    would miss NaNs of other bit patterns (Arrow's 0/0 is 0xfff8..., NumPy's nan 0x7ff8...).
    Floats therefore become one zero and one NaN; nulls stay null, and never match."""
    try:
        keys = keys if keys.type.equals(typ) else pc.cast(keys, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SchemaMismatch(f"merge: {what} cannot be compared as {typ} ({e}); cast it to the table's type") from None
    if not pa.types.is_floating(typ):
        return keys
    zero, nan = pa.scalar(0, typ), pa.scalar(float("nan"), typ)
    return pc.if_else(pc.is_nan(keys), nan, pc.if_else(pc.equal(keys, zero), zero, keys))


# A membership test by lookup table covers the source keys' range with one byte per key: up
# to LOOKUP_TABLE_BYTES, or LOOKUP_BYTES_PER_KEY per source key if more.
LOOKUP_TABLE_BYTES = 1 << 24
LOOKUP_BYTES_PER_KEY = 16


def key_membership(
    values: pa.Array | pa.ChunkedArray, positions: bool = False,
) -> Callable[[pa.Array | pa.ChunkedArray], np.ndarray]:
    """A test of which keys may be among ``values`` (a superset; nulls are in no set), as a NumPy
    mask, or with ``positions`` as the positions of those keys (ascending).

    Integer keys (up to 64 bits signed, 32 unsigned) use a lookup table over the range of
    ``values`` when it is small enough (dense keys: ids), else a binary search in the
    sorted values; other types Arrow's hash-based ``is_in``. The first two are several
    times faster than ``is_in`` on millions of keys against 100k values."""
    def wanted(mask: np.ndarray) -> np.ndarray:
        return np.flatnonzero(mask) if positions else mask

    values = values.drop_null()
    typ = values.type
    if not (pa.types.is_signed_integer(typ) or (pa.types.is_unsigned_integer(typ) and typ.bit_width <= 32)):
        return lambda keys: wanted(pc.is_in(keys, value_set=values, skip_nulls=True).to_numpy(zero_copy_only=False))
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    v = values.to_numpy().astype(np.int64)
    if not len(v):
        return lambda keys: wanted(np.zeros(len(keys), dtype=bool))
    lo, hi = int(v.min()), int(v.max())
    span = hi - lo + 1
    ordered = unique_sorted(v)  # also what _members_of_increasing looks up
    if span <= max(LOOKUP_TABLE_BYTES, LOOKUP_BYTES_PER_KEY * len(v)):
        # Made on the first file whose keys do not increase: files of increasing keys (the
        # common case) are looked up by _members_of_increasing, and a table over the range of
        # 100k ids spread over 10M is 10 MB of fresh pages the first merge of a process pays
        # to fault in for nothing.
        tables: list[np.ndarray] = []

        def test(k: np.ndarray) -> np.ndarray:
            if not tables:
                table = np.zeros(span + 1, dtype=bool)  # table[span]: every key outside [lo, hi]
                table[ordered - lo] = True
                tables.append(table)
            # k - lo as unsigned: keys below lo wrap to huge offsets, and all past the end of
            # the range look up table[span]. (Keys some 2**63 apart from lo may wrap into the
            # range: a superset of the members, which the join then sorts out.)
            off = np.subtract(k, lo, dtype=np.int64, casting="unsafe").view(np.uint64)
            return tables[0][np.minimum(off, span, out=off)]
    else:

        def test(k: np.ndarray) -> np.ndarray:
            i = np.searchsorted(ordered, k)
            return ordered[np.minimum(i, len(ordered) - 1)] == k

    def member(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        valid = None
        if keys.null_count:
            valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
            keys = pc.fill_null(keys, lo)
        k = keys.to_numpy().astype(np.int64, copy=False)
        at = _members_of_increasing(k, ordered)
        if at is None:
            out = test(k)
            return wanted(out if valid is None else out & valid)
        if valid is not None:
            at = at[valid[at]]
        if positions:
            return at
        out = np.zeros(len(k), dtype=bool)
        out[at] = True
        return out

    return member


def _members_of_increasing(keys: np.ndarray, ordered: np.ndarray) -> np.ndarray | None:
    """The positions (ascending) of those of ``keys`` that are in ``ordered`` (sorted, unique),
    exactly, when ``keys`` strictly increase (a file of a table sorted or appended by its key:
    the common case for ids) and outnumber the values in their range several times: each
    value in the range is looked up in the keys (a binary search), so the cost is one pass to
    check the order, not a lookup per key. None otherwise (the caller tests key by key)."""
    n = len(keys)
    if n < 64:
        return None
    a, b = np.searchsorted(ordered, [keys[0], keys[-1]], side="left")
    b = b + (b < len(ordered) and ordered[b] == keys[-1])
    sub = ordered[a:b]
    # Consecutive keys (ids): a value's position is its offset from the first key, however
    # many values fall in the range (a change of most of a file's rows: a merge of the newest
    # ids). Otherwise a binary search per value, worth it only for few values.
    consecutive = int(keys[-1]) - int(keys[0]) == n - 1
    if (not consecutive and 8 * len(sub) > n) or not strictly_increasing(keys):
        return None
    at = sub - keys[0] if consecutive else np.searchsorted(keys, sub)
    return at[keys[np.minimum(at, n - 1)] == sub]


def _consecutive(rows: np.ndarray | pa.Array | pa.ChunkedArray) -> int | None:
    """The first of ``rows`` when they are consecutive row numbers (``first, first + 1, ...``),
    else None. A source sorted by key, merged into files laid out by key, matches its rows in
    their own order: the matched rows are then a slice of the source, no take (a copy of every
    column) needed."""
    if not isinstance(rows, np.ndarray) or len(rows) < 2:
        return None
    first = int(rows[0])
    if int(rows[-1]) - first != len(rows) - 1 or not strictly_increasing(rows):
        return None
    return first  # strictly increasing from first to first + n - 1: exactly those


def unique_key_index(values: pa.Array | pa.ChunkedArray) -> Callable[[pa.Array | pa.ChunkedArray], np.ndarray] | None:
    """For integer keys ``values`` (the source's) of which no two non-null ones are equal: a
    function giving, for each of some keys, the index in ``values`` of the equal one, or -1
    (none; a null key matches nothing). None for other types, or if two keys are equal.
    One sort of the source keys (a few ms for 100k, where a hash table of them costs ~15 ms
    to build for the uniqueness count and again for each lookup), then a binary search."""
    typ = values.type
    if not (pa.types.is_signed_integer(typ) or (pa.types.is_unsigned_integer(typ) and typ.bit_width <= 32)):
        return None
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    rows = np.arange(len(values), dtype=np.int64)
    if values.null_count:
        rows = rows[pc.is_valid(values).to_numpy(zero_copy_only=False)]
        values = values.drop_null()
    v = values.to_numpy().astype(np.int64)
    # (no sort for keys already in order, a source sorted by key: see unique_sorted)
    s, first = unique_sorted(v, return_index=True)
    if len(s) != len(v):
        return None  # two equal keys
    rows = rows[first]

    def index(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        if not len(s):
            return np.full(len(keys), -1, dtype=np.int64)
        valid = None
        if keys.null_count:
            valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
            keys = pc.fill_null(keys, 0)
        k = keys.to_numpy().astype(np.int64, copy=False)
        run = _run_of(s, k) if valid is None else None
        if run is not None:
            return rows[run : run + len(k)]  # (a view: the caller only reads it)
        i = np.minimum(np.searchsorted(s, k), len(s) - 1)
        hit = s[i] == k
        if valid is not None:
            hit &= valid
        return np.where(hit, rows[i], -1)

    return index


def _run_of(ordered: np.ndarray, keys: np.ndarray) -> int | None:
    """Where ``keys`` stand in ``ordered`` (sorted, unique) as one run, ``ordered[i:i + len(keys)]``,
    else None. A file's rows that a sorted source matches, in a table laid out by key, are
    such a run: found by one comparison, not a binary search per key."""
    n = len(keys)
    if n < 2:
        return None
    i = int(np.searchsorted(ordered, keys[0]))
    if i + n > len(ordered) or ordered[i + n - 1] != keys[-1] or not np.array_equal(ordered[i : i + n], keys):
        return None
    return i


def key_range(name: str, lo: Any, hi: Any, has_nan: bool) -> Expr:
    """The target rows that source keys of column ``name`` may match, for pruning: keys in
    [lo, hi] (the bounds of the non-NaN source keys; None if there are none), and NaN keys
    if a source key is NaN (NaN matches NaN only, while an ordering would put it above
    ``hi`` and widen the range to everything above ``lo``)."""
    terms = [] if lo is None else [(col(name) >= lo) & (col(name) <= hi)]
    if has_nan:
        terms.append(col(name) == float("nan"))
    return or_(*terms)


def _target_only(value: Any, what: str) -> None:
    """Refuse SQL text of a not-matched-by-source clause that names a ``source.`` column: those
    rows have no source row (Delta refuses it too). Text that does not parse is left to the
    engine that evaluates it (Spark SQL has functions Lamina's evaluator does not know)."""
    if not isinstance(value, str):
        return
    try:
        named = qualified_columns(value, "source")
    except InvalidArgument:
        return
    if named:
        raise InvalidArgument(
            f"{what}: {value!r} names {named}, but a target row that no source row matches has no source "
            "values; a when_not_matched_by_source_* clause sees the target's columns only"
        )


@dataclass
class MergeResult:
    version: int | None
    rows_updated: int
    rows_deleted: int
    rows_inserted: int
    files_scanned: int
    files_touched: int


def _clauses_taking(clauses: list[_Clause], rows: pa.Table, what: str) -> Iterator[tuple[_Clause, pa.Table]]:
    """Each of ``clauses`` that takes rows, with the rows of ``rows`` it takes: those for which it
    is the first clause whose condition holds (a row no clause takes is in none). ``what``
    names the clauses in errors."""
    remaining = np.ones(rows.num_rows, dtype=bool)
    for cl in clauses:
        m = remaining.copy()
        if cl.condition is not None:
            m &= as_mask(cl.condition, rows, f"{what} {cl.kind} condition").to_numpy(zero_copy_only=False)
        remaining &= ~m
        if m.any():  # (every row: the common unconditional clause, no copy)
            yield cl, (rows if m.all() else rows.filter(pa.array(m)))


def _not_matched_by_source(clauses: list[_Clause], rows: pa.Table, matched: Any, tschema: pa.Schema,
                           cast: str | None = None) -> tuple[list[np.ndarray], list[np.ndarray], list[pa.Table]]:
    """What the not-matched-by-source ``clauses`` do to the target ``rows`` (with POS and FILE,
    the columns read) that are not among ``matched`` (their indices in ``rows``): the first
    clause whose condition holds applies. Returns the positions deleted, their files, and the
    rows written in place of the updated ones (with FILE; they keep their row ids)."""
    unmatched = np.ones(rows.num_rows, dtype=bool)
    unmatched[np.asarray(matched if isinstance(matched, np.ndarray) else matched.to_numpy(), dtype=np.int64)] = False
    deletes: list[np.ndarray] = []
    files: list[np.ndarray] = []
    updates: list[pa.Table] = []
    if not unmatched.any():
        return deletes, files, updates
    u = rows.filter(pa.array(unmatched))
    cols = {f"target.{n}": u.column(n) for n in tschema.names if n in u.column_names}
    cols.update({c: u.column(c) for c in (POS, FILE, ROW_ID) if c in u.column_names})
    for cl, sel in _clauses_taking(clauses, pa.table(cols), "merge not matched by source"):
        deletes.append(sel.column(POS).to_numpy())
        files.append(sel.column(FILE).to_numpy())
        if cl.kind == "update":
            new = _clause_rows(cl, sel, tschema, "not matched by source update", lambda f: sel.column(f"target.{f.name}"),
                               cast)
            updates.append(_keep_row_ids(new, sel).append_column(FILE, sel.column(FILE)))
    return deletes, files, updates


class MergeClauses:
    """The clause API and key checks shared by the Arrow and Spark merge builders.

    Delta semantics: matched clauses are tried in order and the first whose
    condition holds applies; a matched target row that no clause takes stays as
    it is; source rows that match no target row go through the not-matched
    clauses, target rows that no source row matches through the not-matched-by-source
    clauses. Subclasses call ``_start`` with the target's schema and the source's columns.
    """

    schema: Schema

    def _start(self, schema: Schema, on: str | Sequence[str], source_columns: Sequence[str]) -> None:
        self.schema = schema
        self.on = [on] if isinstance(on, str) else list(on)
        if not self.on:
            raise InvalidArgument("merge needs at least one key column in on=")
        self._source_columns = list(source_columns)
        for k in self.on:
            schema.field(k)  # SchemaMismatch naming the columns if missing in the target
            if k not in self._source_columns:
                raise SchemaMismatch(f"merge key {k!r} is not a column of the source ({self._source_columns})")
        self.matched: list[_Clause] = []
        self.not_matched: list[_Clause] = []
        self.not_matched_by_source: list[_Clause] = []

    def when_matched_update(self, set: dict[str, Any], condition: Any = None) -> Any:  # noqa: A002
        if not set:
            raise InvalidArgument("when_matched_update needs set={column: value or SQL expression}")
        for c in set:
            self.schema.field(c)
        self.matched.append(_Clause("update", condition, dict(set)))
        return self

    def when_matched_update_all(self, condition: Any = None) -> Any:
        self._need_all_columns("when_matched_update_all")
        self.matched.append(_Clause("update", condition, None))
        return self

    def when_matched_delete(self, condition: Any = None) -> Any:
        self.matched.append(_Clause("delete", condition))
        return self

    def when_not_matched_insert(self, values: dict[str, Any], condition: Any = None) -> Any:
        for c in values:
            self.schema.field(c)
        self.not_matched.append(_Clause("insert", condition, dict(values)))
        return self

    def when_not_matched_insert_all(self, condition: Any = None) -> Any:
        self._need_all_columns("when_not_matched_insert_all", set(self.schema.write_defaults))
        self.not_matched.append(_Clause("insert", condition, None))
        return self

    def when_not_matched_by_source_update(self, set: dict[str, Any], condition: Any = None) -> Any:  # noqa: A002
        """Update the target rows no source row matches (Delta's ``whenNotMatchedBySource``, SQL's
        ``WHEN NOT MATCHED BY SOURCE``): ``set`` and ``condition`` see the target's columns only
        (there is no source row). Such clauses are tried in order, as the matched ones are; a
        target row with a NULL key matches no source row, so it is one of these rows."""
        if not set:
            raise InvalidArgument("when_not_matched_by_source_update needs set={column: value or SQL expression}")
        for c, v in set.items():
            self.schema.field(c)
            _target_only(v, f"when_not_matched_by_source_update of {c!r}")
        _target_only(condition, "when_not_matched_by_source_update condition")
        self.not_matched_by_source.append(_Clause("update", condition, dict(set)))
        return self

    def when_not_matched_by_source_delete(self, condition: Any = None) -> Any:
        """Delete the target rows no source row matches (and that ``condition``, on the target's
        columns, holds for). See ``when_not_matched_by_source_update``."""
        _target_only(condition, "when_not_matched_by_source_delete condition")
        self.not_matched_by_source.append(_Clause("delete", condition))
        return self

    def _check_clauses(self) -> None:
        if not (self.matched or self.not_matched or self.not_matched_by_source):
            raise InvalidArgument(
                "merge needs at least one when_matched_*, when_not_matched_* or when_not_matched_by_source_* clause")

    def _need_all_columns(self, what: str, defaulted: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """``defaulted``: columns the source may lack (an insert stores their write default)."""
        missing = [n for n in self.schema.names if n not in self._source_columns and n not in defaulted]
        if missing:
            raise SchemaMismatch(f"{what} needs every table column in the source; missing {missing}")


class MergeBuilder(MergeClauses):
    """``table.merge(source, on="id").when_matched_update(...).when_not_matched_insert_all().execute()``.

    Expressions see ``source.<col>`` and ``target.<col>`` (bare names mean the
    target's). Only files whose key bounds can hold a source key are read.
    """

    def __init__(
        self, schema: Schema, source: pa.Table | SourceRead, on: str | list[str], mode: str,
        run: Callable[[RowDelta, Any], int | None], *, queued: bool = False, cast: str | None = None,
    ) -> None:
        self._start(schema, on, source.schema.names)
        self.cast = check_cast_mode(cast)  # how the source's columns are stored (lamina.spec.write_types)
        # A source being read (SourceRead): its key columns serve until every column is needed.
        self._read = source if isinstance(source, SourceRead) else None
        self.source = source.keys if self._read is not None else source
        self.mode = check_mode(mode)
        self._run = run  # commits the merge's operation, or (``queued``) adds it to a transaction
        self._queued = queued
        # The type each key is joined as: the table's, or a wider one both sides convert to
        # exactly (float32 and float64 as float64, as a predicate compares them).
        self._key_types = [self._key_type(k) for k in self.on]

    def _key_type(self, k: str) -> pa.DataType:
        mine, theirs = self.schema.arrow.field(k).type, self.source.schema.field(k).type
        if not sortable(mine):  # (the source's key range prunes the target: keys must have an order)
            raise InvalidArgument(
                f"merge key {k!r} has type {mine}: {UNORDERED_TYPES} have no order; merge on other columns")
        if mine.equals(theirs):
            return mine
        try:
            return pa.unify_schemas([pa.schema([(k, mine)]), pa.schema([(k, theirs)])], promote_options="permissive").field(k).type
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise SchemaMismatch(
                f"merge key {k!r} is {mine} in the table but {theirs} in the source, which do not compare; "
                "cast the source's column to the table's type"
            ) from None

    def _keys(self, t: pa.Table, names: Sequence[str], side: str) -> dict[str, Any]:
        return {f"{KEY}{i}": join_key(t.column(n), typ, f"the {side}'s key {k!r} ({t.schema.field(n).type})")
                for i, (k, n, typ) in enumerate(zip(self.on, names, self._key_types))}

    # -- execution ----------------------------------------------------------------------

    def _prune(self) -> Expr:
        """The target files the merge reads: those whose key bounds can hold a source key; every
        file when a not-matched-by-source clause may change any row the source does not match."""
        if self.not_matched_by_source:
            return AlwaysTrue()
        terms = []
        for k in self.on:
            keys = self.source.column(k)
            nan = pc.is_nan(keys) if pa.types.is_floating(keys.type) else None
            has_nan = nan is not None and bool(pc.any(nan).as_py())
            if has_nan:
                keys = keys.filter(pc.invert(nan))  # nulls go too
            mm = pc.min_max(keys)  # skips nulls: they match nothing
            terms.append(key_range(k, mm["min"].as_py(), mm["max"].as_py(), has_nan))
        return and_(*terms)

    def _target_columns(self) -> list[str]:
        """The target columns a merge reads: only the keys, unless a matched clause has a
        condition or sets columns by expressions (those may read any target column, and the
        columns such an update leaves unset keep the target's values); the same for the
        not-matched-by-source clauses."""
        if any(cl.condition is not None or cl.values is not None for cl in [*self.matched, *self.not_matched_by_source]):
            return list(self.schema.arrow.names)
        return [n for n in self.schema.arrow.names if n in self.on]

    def _prefilter(self) -> Callable[[pa.Table], np.ndarray] | None:
        """The positions of the target rows that may match: those whose first key is among the
        source's, so only the few that can match go through the join (see ``key_membership``). Not for
        float keys: a membership test may compare NaN and -0.0 other than the join does
        (see join_key); nor with a not-matched-by-source clause, which changes the rows that match nothing."""
        k, typ = self.on[0], self._key_types[0]
        if pa.types.is_floating(typ) or self.not_matched_by_source:
            return None
        member = key_membership(join_key(self.source.column(k), typ, f"the source's key {k!r}"), positions=True)
        return lambda rows: member(join_key(rows.column(k), typ, f"the table's key {k!r}"))

    def _prefixed_source(self) -> pa.Table:
        s = self.source
        cols = self._keys(s, self.on, "source")
        cols.update({f"source.{n}": s.column(n) for n in s.column_names})
        cols["__src"] = pa.array(np.arange(s.num_rows, dtype=np.int64))
        return pa.table(cols)

    def _whole_source(self, tschema: pa.Schema) -> pa.Table | SourceRead | None:
        """The source's rows in the table's columns when they are exactly the rows the merge
        writes, whatever it matches (``RowDelta.whole_source``): it updates every matched row
        with all of the source's columns and inserts every other source row, without
        conditions, and the source has every column. Each source row is then written once (as
        the update of the one target row it matches, or as an insert): matching only finds the
        rows to delete (see ``RowDelta._source_written``). None otherwise (a not-matched-by-source
        clause writes target rows too)."""
        (upd, *more), (ins, *more_ins) = self.matched or [None], self.not_matched or [None]
        if more or more_ins or upd is None or ins is None or upd.kind != "update" or not self.source.num_rows:
            return None
        if self.not_matched_by_source:
            return None
        if any(cl.condition is not None or cl.values is not None for cl in (upd, ins)):
            return None
        if any(n not in self._source_columns for n in tschema.names):
            return None
        if self._read is not None:
            return self._read.map(lambda t: t.select(tschema.names))
        return self.source.select(tschema.names)

    def _file_fn(self, tschema: pa.Schema, whole: bool = False) -> FileFn:
        """``whole``: the merge writes its source's rows (``_whole_source``): matches only delete
        the target rows, and give the source rows matched (and the target rows' ids)."""
        src = self._prefixed_source()
        keys = [f"{KEY}{i}" for i in range(len(self.on))]

        # One key (not a float: see _prefilter) that no two source rows share: each target row
        # matches at most one source row, found by a lookup rather than a join (integers: a
        # binary search in the sorted source keys; other types: a hash lookup).
        single = len(keys) == 1 and not pa.types.is_floating(self._key_types[0])
        index = unique_key_index(src.column(keys[0])) if single else None
        lookup = index is not None or (
            single and pc.count_distinct(src.column(keys[0])).as_py() == src.num_rows - src.column(keys[0]).null_count)

        def fn(rows: pa.Table) -> FileOutcome:
            left = self._keys(rows, self.on, "table")
            if index is not None:
                at = index(left[keys[0]])
                hit = np.flatnonzero(at >= 0)
                src_rows = at[hit]
                tgt = pa.array(hit)
                # (a merge of the whole source only deletes: the matched keys are not needed)
                pairs = None if whole else pa.table({keys[0]: left[keys[0]].take(tgt), "__src": pa.array(src_rows)})
            elif lookup:
                at = pc.index_in(left[keys[0]], value_set=src.column(keys[0]), skip_nulls=True)
                hit = pc.is_valid(at)
                tgt = pc.indices_nonzero(hit)
                pairs = pa.table({keys[0]: pc.filter(left[keys[0]], hit), "__src": pc.filter(at, hit).cast(pa.int64())})
                src_rows = pairs.column("__src")
            else:
                left["__tgt"] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
                # Arrow's hash join carries no nested (struct, list, map) non-key column: join the
                # keys and row numbers only, then take both sides' columns by row number.
                pairs = pa.table(left).join(src.select([*keys, "__src"]), keys=keys, join_type="inner")
                tgt, src_rows = pairs.column("__tgt"), pairs.column("__src")
            cols = {k: pairs.column(k) for k in keys} if pairs is not None else {}
            cols[POS], cols[FILE] = rows.column(POS).take(tgt), rows.column(FILE).take(tgt)
            if ROW_ID in rows.column_names:
                cols[ROW_ID] = rows.column(ROW_ID).take(tgt)
            if not whole:
                cols.update({f"target.{n}": rows.column(n).take(tgt) for n in tschema.names if n in rows.column_names})
                run = _consecutive(src_rows)
                if run is None and isinstance(src_rows, np.ndarray):
                    src_rows = pa.array(src_rows)
                cols.update({n: (src.column(n).slice(run, len(src_rows)) if run is not None else src.column(n).take(src_rows))
                             for n in src.column_names if n not in keys})
            else:
                cols["__src"] = src_rows
            j = pa.table(cols)
            if not j.num_rows and not self.not_matched_by_source:
                return FileOutcome(np.zeros(0, dtype=np.int64), matched_source=np.zeros(0, dtype=np.int64))
            # (A lookup finds each target row's one source row: no row can match twice.)
            if not lookup and len(unique_sorted(
                    j.column(POS).to_numpy().astype(np.int64) + (j.column(FILE).to_numpy().astype(np.int64) << 32))) != j.num_rows:
                raise InvalidArgument(
                    "merge: a target row matched more than one source row (duplicate keys "
                    f"{self.on} in the source); deduplicate the source. Nothing was committed."
                )
            deletes, files, updates = [], [], []
            for cl, sel in _clauses_taking(self.matched, j, "merge"):
                deletes.append(sel.column(POS).to_numpy())
                files.append(sel.column(FILE).to_numpy())
                if cl.kind == "update" and not whole:
                    rows_ = _clause_rows(cl, sel, tschema, "update", lambda f: sel.column(f"target.{f.name}"), self.cast)
                    updates.append(_keep_row_ids(rows_, sel).append_column(FILE, sel.column(FILE)))
            if self.not_matched_by_source:
                by_source = _not_matched_by_source(self.not_matched_by_source, rows, tgt, tschema, self.cast)
                deletes += by_source[0]
                files += by_source[1]
                updates += by_source[2]
            delete = np.concatenate(deletes) if deletes else np.zeros(0, dtype=np.int64)
            dfile = np.concatenate(files) if files else np.zeros(0, dtype=np.int32)
            new = pa.concat_tables(updates) if updates else None
            return FileOutcome(
                delete, new, matched_source=j.column("__src").to_numpy(), delete_file=dfile,
                matched_file=j.column(FILE).to_numpy(),
                matched_ids=j.column(ROW_ID).to_numpy() if whole and ROW_ID in j.column_names else None,
            )

        return fn

    def _inserts(self, tschema: pa.Schema) -> Callable[[np.ndarray], pa.Table | None]:
        def fn(matched: np.ndarray) -> pa.Table | None:
            if not self.not_matched:
                return None
            defaults = self.schema.write_defaults  # what an insert that does not set a column stores
            keep = np.ones(self.source.num_rows, dtype=bool)
            keep[matched] = False
            src = self._prefixed_source().filter(pa.array(keep))
            out = []
            for cl, sel in _clauses_taking(self.not_matched, src, "merge"):
                out.append(_clause_rows(cl, sel, tschema, "insert", lambda f: _default_or_null(defaults, f, sel.num_rows),
                                        self.cast))
            return pa.concat_tables(out) if out else None

        return fn

    def _check_types(self, tschema: pa.Schema) -> None:
        """Refuse now (SchemaMismatch, nothing read or written) the clauses whose values a table
        column cannot store by type (``lamina.spec.write_types``): the source's columns that
        ``*_all`` clauses write, and the clauses' SQL assignments."""
        clauses = [*self.matched, *self.not_matched, *self.not_matched_by_source]
        if self.cast is None and any(cl.kind != "delete" and cl.values is None for cl in clauses):
            have = self.source.schema if self._read is None else self._read.schema
            refused = [mismatch(f.name, have.field(f.name).type, f.type) for f in tschema
                       if f.name in have.names and fit(have.field(f.name).type, f.type) is None]
            if refused:
                raise SchemaMismatch("merge: " + "; ".join(refused) + "; nothing was written")
        joined = None
        for cl in clauses:
            if cl.values:
                if joined is None:
                    have = self.source.schema if self._read is None else self._read.schema
                    joined = pa.schema([*[pa.field(f"source.{f.name}", f.type) for f in have],
                                        *[pa.field(f"target.{f.name}", f.type) for f in tschema]]).empty_table()
                check_assignments(cl.values, tschema, f"merge {cl.kind}", self.cast, joined)

    def execute(self, *, commit_options: Any = None) -> MergeResult | None:
        self._check_clauses()
        tschema = self.schema.arrow
        self._check_types(tschema)
        whole = self._whole_source(tschema)
        if whole is None and self._read is not None:
            self.source, self._read = self._read.table(), None  # its clauses match with every column
        op = RowDelta(
            "merge", self._prune(), self._target_columns(), self._file_fn(tschema, whole is not None), self.mode,
            new_write_id(), inserts=self._inserts(tschema), prefilter=self._prefilter(), planned=PlannedColumns.of(self.schema),
            whole_source=whole, cast=self.cast,
        )
        version = self._run(op, commit_options)
        if self._queued:
            return None  # committed with its transaction: the counts are not known yet
        s = op.last_stats
        updated = s.get("rows_updated", 0)
        return MergeResult(
            version, updated, s.get("rows_deleted", 0) - updated, s.get("inserted", 0),
            s.get("files_scanned", 0), s.get("files_touched", 0),
        )


# -- changes computed elsewhere (Spark) ---------------------------------------------------


class StaleRowDelta(CommitConflict):
    """A precomputed row-level change met a base where the files it may affect changed
    (a scanned file got another DV or was removed, or a new file may hold affected rows).
    Nothing was committed; the caller recomputes on the newest version."""


@dataclass
class PositionDelta(RowDelta):
    """A row-level change whose per-file delete positions and new data files were computed
    outside Lamina (e.g. by a Spark job) against one base.

    ``positions`` holds, for every candidate file of ``prune`` in that base (by
    ``file_key``), the physical positions to delete (empty: untouched); ``written``
    the entries of data files already written (updated and inserted rows). Applied to
    a base it merges the positions into existing DVs (or rewrites the files in
    copy-on-write mode) exactly as ``RowDelta`` does. If the candidate files of the
    base differ from the ones computed against, it raises ``StaleRowDelta``: never a
    silent loss of another writer's change.
    """

    positions: dict[tuple, np.ndarray] = field(default_factory=dict)
    written: pa.Table | None = None
    counts: dict[str, int] = field(default_factory=dict)  # rows_updated / rows_inserted, for the summary

    def __post_init__(self) -> None:
        for k, pos in self.positions.items():
            self._outcomes[k] = FileOutcome(unique_sorted(np.asarray(pos, dtype=np.int64)))

    def _outcomes_for(self, base: Base, cands: pa.Table, rows: list[dict[str, Any]]) -> list[FileOutcome]:
        keys = [file_key(e) for e in rows]
        if set(keys) != set(self.positions):
            changed = sorted({k[0] for k in set(keys) ^ set(self.positions)})
            raise StaleRowDelta(
                f"{self.operation}: files it may affect changed in version {base.metadata.version} "
                f"({len(changed)} files, e.g. {changed[:3]}); nothing was committed",
                files=changed,
            )
        return [self._outcomes[k] for k in keys]

    def apply(self, base: Base) -> Change:
        change = super().apply(base)
        updated, inserted = self.counts.get("rows_updated", 0), self.counts.get("rows_inserted", 0)
        self.last_stats.update(rows_updated=updated, inserted=inserted)
        if self.written is not None and self.written.num_rows:
            mschema = base.manifest_schema
            change.added = pa.concat_tables([conform(change.added, mschema), base.stamp(self.written)])
            change.summary["added-files"] += self.written.num_rows
        change.summary["added-records"] = updated + inserted
        if self.operation == "merge":
            change.summary["inserted-rows"] = inserted
        return change
