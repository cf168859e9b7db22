"""The row-level operation: ``RowDelta`` (delete, update and merge, re-applied to each base)
and ``PositionDelta`` (a change whose positions and new files an engine computed).

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

from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lamina.commit import Base, Change, Operation, removed_of
from lamina.commit.checks import require_columns_unchanged, require_live, require_same_candidates
from lamina.data.copy import StagedFiles
from lamina.data.deletes import (
    DV,
    FileKey,
    bitmap_of,
    dvs_of_plan,
    file_key,
    positions_array,
    read_bitmaps,
    read_bitmaps_of,
    unique_sorted,
    write_dv_file,
)
from lamina.errors import CommitConflict, FooterError, InvalidArgument
from lamina.expr import AlwaysTrue, Expr, filter_rows, referenced_columns, to_arrow_filter, to_sql
from lamina.io import FileIO
from lamina.manifest.entries import conform, fill_constant
from lamina.operations.rowlevel.outcome import FILE, POS, FileFn, FileOutcome, _by_file, split_outcome
from lamina.operations.rowlevel.source import SourceRead, rows_of
from lamina.operations.schema import PlannedColumns
from lamina.spec.dv import keep_mask
from lamina.spec.layout import DATA_DIR
from lamina.spec.lineage import (
    DATA_VERSION,
    FIRST_ROW_ID,
    LINEAGE_COLUMNS,
    LINEAGE_FIELDS,
    ROW_ID,
    check_row_ids,
    conform_keeping_lineage,
    has_lineage,
    lineage_of,
    no_row_ids,
)
from lamina.spec.properties import DELETE_MODES, TableProperties

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-rowlevel")
_CUTS_AHEAD = 8  # files whose rows _live_rows cuts on _pool at once, ahead of the one it gathers

MODES = DELETE_MODES


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidArgument(f"write mode must be one of {MODES}, not {mode!r}")
    return mode


def row_mode(mode: str | None, properties: Mapping[str, str]) -> str:
    """The row-level write mode: ``mode``, else the table's ``write.delete.mode``."""
    return check_mode(mode or TableProperties.WRITE_DELETE_MODE.get(properties))


def _with_row_ids(
    base: Base, physical: pa.Table, t: pa.Table, fidx: np.ndarray, pos: np.ndarray, stored: dict[int, pa.ChunkedArray]
) -> pa.Table:
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
            ids[at] = np.where(
                pc.is_valid(kept).to_numpy(zero_copy_only=False),
                pc.fill_null(kept, 0).to_numpy(zero_copy_only=False),
                ids[at],
            )
    return t.append_column(ROW_ID, pa.array(ids))


@dataclass
class RowDelta(Operation):
    conflict_checks: ClassVar[tuple[Callable[..., object], ...]] = (require_live, require_columns_unchanged)

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
    _outcomes: dict[FileKey, FileOutcome] = field(default_factory=dict)
    # the entries of the data files the last attempt wrote (rows written in place of deleted
    # ones, and inserted ones), by the touched files' keys and the matched source rows
    _written: dict[tuple[object, ...], Future[pa.Table] | None] = field(default_factory=dict)
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
    # (what its write depends on in a base, the write)
    _whole: tuple[tuple[object, ...], Future[pa.Table]] | None = None
    _outcomes_lineage: bool | None = None  # whether the base _outcomes were made on had row lineage
    skip_if_noop: ClassVar[bool] = True  # a change that matched no row commits no version
    refresh_base: ClassVar[bool] = True  # it reads the base's files: start from the latest

    # -- per file -----------------------------------------------------------------------

    def _live_rows(
        self, base: Base, entries: pa.Table, selected: list[np.ndarray] | None = None, columns: list[str] | None = None
    ) -> pa.Table:
        """Live rows of the files ``entries`` (in order), with their physical positions (POS)
        and the file's index in ``entries`` (FILE); with a ``prefilter``, only the rows it keeps;
        with ``selected`` (positions per file, ascending), only the rows at those positions.
        ``columns``: read those instead of ``read_columns``, without row lineage.

        The files are read whole (``Scan.read_files``: runs of files per task on the read
        threads), then rows deleted by existing DVs (and rows the prefilter rules out) are
        dropped with one mask per file: DV positions are physical row numbers, so the DVs must
        not be applied by the reader. Positions and file indices are kept for the kept rows only."""
        physical = entries.set_column(
            entries.schema.get_field_index("dv_path"), "dv_path", pa.nulls(entries.num_rows, pa.string())
        )
        # Row lineage rides along where rows are written in place of these (they keep their ids);
        # with a prefilter, only the ids (an update's _last_updated_version is null) of the few
        # rows it keeps, afterwards.
        writes = self.operation != "delete" and has_lineage(base.metadata) and columns is None
        lineage_after = writes and (self.prefilter is not None or selected is not None)
        cols = (
            [*self.read_columns, *LINEAGE_COLUMNS] if writes and not lineage_after else (columns or self.read_columns)
        )
        # Each file's rows are cut to the kept ones as it arrives, while the read threads go
        # on with the next files: only those rows are concatenated, never all the files' rows.
        old_dvs = read_bitmaps_of(base.io, dvs_of_plan(entries))
        parts: list[pa.Table] = []
        positions: list[np.ndarray] = []
        files: list[np.ndarray] = []
        stored: dict[int, pa.ChunkedArray] = {}  # with lineage_after: the kept rows' stored ids, by file
        reads = base.scan().read_files(physical, cols, files_per_task=16, stored_row_ids=lineage_after)

        def cut(
            k: int, read: pa.Table | tuple[pa.Table, pa.ChunkedArray | None]
        ) -> tuple[pa.Table, np.ndarray, pa.ChunkedArray | None]:
            # (a file's rows and its stored ids when read with them: lineage_after)
            table, ids = read if isinstance(read, tuple) else (read, None)
            # The prefilter's kept rows come as positions (a merge keeps a few rows of each
            # file: taking them costs less than a mask over every row, made, scanned and
            # applied); the DVs' as a mask.
            at = (
                self.prefilter(table) if self.prefilter is not None else (selected[k] if selected is not None else None)
            )
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
            return table, at, (ids.take(pa.array(at)) if ids is not None and len(at) else None)

        # Each file's rows are cut on the pool's threads as the file arrives (NumPy and Arrow
        # release the interpreter lock), a few files ahead of this thread, which only gathers.
        pending: deque[Future[tuple[pa.Table, np.ndarray, pa.ChunkedArray | None]]] = deque()

        def gather() -> None:
            table, at, ids = pending.popleft().result()
            if ids is not None:
                stored[len(parts)] = ids
            parts.append(table)
            positions.append(at)
            files.append(np.full(len(at), len(files), dtype=np.int32))

        for k, read in enumerate(reads):
            if len(pending) >= _CUTS_AHEAD:
                gather()
            pending.append(_pool.submit(cut, k, read))
        while pending:
            gather()
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
                    assert self.selected_fn is not None  # (an update finds its rows first only with one)
                    rows = self._live_rows(base, entries.take(pa.array(hit, pa.int64())), [positions[k] for k in hit])
                    for k, o in zip(hit, split_outcome(self.selected_fn(rows), len(hit))):
                        outs[k] = o
            else:
                outs = split_outcome(self.file_fn(self._live_rows(base, entries)), len(new))
            for o in outs:
                assert isinstance(o.delete, np.ndarray)  # (positions: a bitmap is an engine's, PositionDelta's)
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
        where = self.where
        assert where is not None  # (_finds_rows_first)
        cols = sorted(referenced_columns(where)) or [base.schema.names[0]]
        rows = self._live_rows(base, entries, columns=cols)
        hit = filter_rows(rows, to_arrow_filter(where), to_sql(where)).select([POS, FILE])
        pos, files = hit.column(POS).to_numpy(), hit.column(FILE).to_numpy()
        return [pos[ix] for ix in _by_file(files, entries.num_rows)]

    @property
    def _finds_rows_first(self) -> bool:
        """Whether ``_selected_positions`` looks for the rows before reading the rest: a delete
        (by dictionary), an update that has a ``selected_fn`` for them; with a predicate."""
        return (
            self.where is not None
            and not isinstance(self.where, AlwaysTrue)
            and (self.operation == "delete" or self.selected_fn is not None)
        )

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
            require_columns_unchanged(self.planned.columns, self.planned.whole_rows, base.schema, self.operation)
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
        redeleted = [
            (e, n) for e, n in changed if n is not None and n["dv_path"] is not None and file_key(n) != file_key(e)
        ]
        bitmaps = (
            dict(
                zip(
                    [e["path"] for e, _ in redeleted],
                    read_bitmaps(
                        base.io,
                        [DV(n["dv_path"], n["dv_offset"], n["dv_length"], n["dv_cardinality"]) for _, n in redeleted],
                    ),
                )
            )
            if redeleted
            else {}
        )
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
            require_columns_unchanged(self.planned.columns, self.planned.whole_rows, base.schema, self.operation)
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
        written: Future[pa.Table] | None
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
            added += [
                base.stamp(outcomes[i].remainder_entries) for i in touched if outcomes[i].remainder_entries is not None
            ]
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
        self.last_stats.update(
            files_touched=len(touched), rows_deleted=deleted_rows, files_scanned=len(rows), rows_updated=updated
        )
        adds = pa.concat_tables([conform(a, mschema) for a in added]) if added else mschema.empty_table()
        new_files = sum(a.num_rows for a in added) - (len(replaced) if replaced else 0)
        summary = {
            "deleted-rows": deleted_rows,
            "files-scanned": len(rows),
            "mode": self.mode,
            # a file that only got a new DV is neither added nor removed for the reader
            "dv-updated-files": len(replaced),
            "added-files": new_files,
            "removed-files": len(touched) - len(replaced),
            "added-records": updated + inserted,
            "removed-records": deleted_rows,
        }
        if self.inserts is not None:
            summary["inserted-rows"] = inserted
        return Change(self.operation, adds, removed_of(removed), summary=summary)

    def _rows_written(
        self, base: Base, outcomes: list[FileOutcome], rows: list[dict[str, Any]], touched: list[int]
    ) -> tuple[Future[pa.Table] | None, int]:
        """(the write of the new rows made from ``outcomes``, how many of them are updated rows).

        New rows first: a row that does not fit the schema fails before any DV is written.
        The rows written in place of all touched files' and the rows inserted go to data
        files together (not a file per touched file, nor one for each kind), reused by a
        retry that touches the same files and matches the same source rows alike. They are
        encoded on pool threads (pyarrow releases the GIL) while the DVs are made and
        written, and joined before the change is returned."""
        with_rows = [i for i in touched if (new := outcomes[i].new_rows) is not None and new.num_rows]
        key: tuple[object, ...] = tuple(file_key(rows[i]) for i in with_rows)
        rows_in = None
        if self.inserts is not None:
            m = unique_sorted(_matched(outcomes)[1])
            key += (m.tobytes(),)
            if key not in self._written:
                rows_in = self.inserts(m)
                self.last_stats["inserted"] = 0 if rows_in is None else rows_in.num_rows
        if key not in self._written:
            parts = (
                [conform_keeping_lineage(base.schema, pa.concat_tables([outcomes[i].new_rows for i in with_rows]))]
                if with_rows
                else []
            )
            if rows_in is not None and rows_in.num_rows:
                parts.append(base.schema.conform(rows_in))  # (no lineage columns: inserted rows get new ids)
            new_rows = pa.concat_tables(parts, promote_options="default") if parts else None
            self._written = {key: _pool.submit(self._write_new_rows, base, new_rows) if new_rows is not None else None}
        return self._written[key], sum(new.num_rows for i in touched if (new := outcomes[i].new_rows) is not None)

    def _write_whole(self, base: Base) -> Future[pa.Table]:
        """``whole_source`` being written for ``base``: started now, or by an earlier attempt onto
        a base that writes alike (same schema, partition spec, sort order and properties)."""
        vm = base.metadata
        alike = (vm.schema, vm.partition_spec, vm.sort_order, vm.properties)
        if self._whole is None or self._whole[0] != alike:
            self._discard_whole(base.io)
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

    def _write_source(
        self, base: Base, matched: tuple[np.ndarray, np.ndarray] | None = None, ids: np.ndarray | None = None
    ) -> pa.Table:
        """The entries of the data files holding ``whole_source``'s rows for ``base``: each source
        row once (``matched`` None: written from the start, without row lineage), or as
        ``_source_written`` says (``matched``: ``(m_all, m)``, source row ``m_all[i]`` in place of
        a target row, with the id ``ids[i]`` where the table keeps lineage; ``m`` those rows, each
        once). Each source row once, from staged files that may be copied (``_staged_for``): those
        files' bytes, its lineage columns appended; otherwise the rows, read and encoded
        (``_source_rows``)."""
        source = self.whole_source
        assert source is not None
        staged = self._staged_for(base)
        if staged is not None and (matched is None or len(matched[1]) == len(matched[0])):
            n = source.num_rows
            lineage = None
            if has_lineage(base.metadata):
                # (with lineage the source is written once matched, with the ids its rows keep)
                assert matched is not None and ids is not None
                lineage = pa.Table.from_arrays(
                    [_row_ids(n, matched[0], ids), pa.nulls(n, pa.int64())], schema=pa.schema(LINEAGE_FIELDS)
                )
            try:
                return base.copy_staged(staged, self.write_id, lineage)
            except FooterError:
                pass  # not a copy after all (nothing was stored): the rows are written
        if matched is None:
            return self._write_new_rows(base, base.schema.conform(rows_of(source), self.cast))
        return self._write_new_rows(base, self._source_rows(base, *matched, ids))

    def _source_written(
        self, base: Base, outcomes: list[FileOutcome], early: Future[pa.Table] | None
    ) -> tuple[Future[pa.Table], int]:
        """(the write of the new rows, how many of them are updated rows) for a merge whose new
        rows are its source's (``whole_source``): each source row once for each target row it
        updates, and once if it matched none. Each source row matched at most one target row
        (the rule): that is the source as it is, which ``early`` (written from the start,
        without row lineage) holds; with lineage, the source with the ids of the rows it
        replaces. A row matched by several target rows (a key the table holds more than once)
        is taken once for each, and ``early`` is discarded. The rows are made and written on
        a pool thread while the DVs are."""
        source = self.whole_source
        assert source is not None
        matched, m_all = _matched(outcomes)
        m = unique_sorted(m_all)
        self.last_stats["inserted"] = source.num_rows - len(m)
        if early is not None and len(m) == len(m_all):
            return early, len(m_all)
        self._discard_whole(base.io)
        ids = None
        if has_lineage(base.metadata):
            ids = np.concatenate([o.matched_ids for o in matched]) if matched else np.zeros(0, dtype=np.int64)
        key = (m_all.tobytes(), None if ids is None else ids.tobytes())
        if key not in self._written:
            self._written = {key: _pool.submit(self._write_source, base, (m_all, m), ids)}
        write = self._written[key]
        assert write is not None  # (only _rows_written, with no rows to write, keeps None)
        return write, len(m_all)

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
        return conform_keeping_lineage(
            base.schema, rows.append_column(ROW_ID, _row_ids(rows.num_rows, at, ids)), self.cast
        )

    def _discard_whole(self, io: FileIO) -> None:
        """Drop the write of ``whole_source`` under way, deleting what it wrote (nothing
        references it: best effort, orphan cleanup removes what is left)."""
        if self._whole is None:
            return
        _, write = self._whole
        self._whole = None
        try:
            paths = write.result().column("path").to_pylist()
            io.delete_many(paths)
        except Exception:
            pass

    def _write_new_rows(self, base: Base, rows: pa.Table) -> pa.Table:
        """The entries of ``rows`` written as data files: two of them, written at once, from
        twice PARALLEL_WRITE_MIN_ROWS rows on."""
        parts = 2 if rows.num_rows >= 2 * PARALLEL_WRITE_MIN_ROWS else 1
        return base.write(rows, self.write_id, max_rows=-(-rows.num_rows // parts))


# The rows one change writes (updated and inserted) go to two files encoded at once (pyarrow
# releases the GIL while encoding) when there are at least twice this many: a merge then waits
# for half of its rows' encoding, not for its larger kind's (say its updates) while another
# thread encodes the smaller, as when each kind had a file. Fewer rows: one file.
PARALLEL_WRITE_MIN_ROWS = 32_768


# The entry columns a row-level change looks at file by file (its identity, its DV, its rows'
# ids): only these are turned into Python dicts, not the entries' dozens of statistics columns.
_ROW_COLUMNS = (
    "path",
    "record_count",
    "dv_path",
    "dv_offset",
    "dv_length",
    "dv_cardinality",
    FIRST_ROW_ID,
    DATA_VERSION,
)


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


@dataclass
class PositionDelta(RowDelta):
    """A row-level change whose per-file delete positions and new data files were computed
    outside Lamina (e.g. by a Spark job) against one base.

    ``positions`` holds, for every candidate file of ``prune`` in that base (by
    ``file_key``), the physical positions to delete (empty: untouched), as an array or a
    bitmap (``BitMap``: what an engine's tasks build, so the positions of millions of rows
    never become a row each on the driver); ``written``
    the entries of data files already written (updated and inserted rows). Applied to
    a base it merges the positions into existing DVs (or rewrites the files in
    copy-on-write mode) exactly as ``RowDelta`` does. If the candidate files of the
    base differ from the ones computed against, it raises ``StaleRowDelta``: never a
    silent loss of another writer's change.
    """

    conflict_checks = (*RowDelta.conflict_checks, require_same_candidates)

    positions: dict[FileKey, np.ndarray | BitMap] = field(default_factory=dict)
    written: pa.Table | None = None
    counts: dict[str, int] = field(default_factory=dict)  # rows_updated / rows_inserted, for the summary

    def __post_init__(self) -> None:
        for k, pos in self.positions.items():
            delete = pos if isinstance(pos, BitMap) else unique_sorted(np.asarray(pos, dtype=np.int64))
            self._outcomes[k] = FileOutcome(delete)

    def _outcomes_for(self, base: Base, cands: pa.Table, rows: list[dict[str, Any]]) -> list[FileOutcome]:
        keys = [file_key(e) for e in rows]
        require_same_candidates(self.operation, base.metadata.version, keys, self.positions)
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
