"""The merge builder users call: ``table.merge(source, on=...)``, its ``when_*`` clauses
(Delta's semantics), and the ``RowDelta`` it makes of them (``execute``).

``MergeClauses`` holds the clause API and the key checks the Arrow builder (``MergeBuilder``)
and Spark's (``lamina.spark.rowlevel``) share; the builder turns the clauses into the
per-file function that matches target rows to source rows (through ``rowlevel.keys``) and
into the rows to insert. Row-level machinery the merge shares with delete and update lives
in ``rowlevel.delta`` and ``rowlevel.outcome``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import CommitOptions
from lamina.commit.result import CommitResult
from lamina.data.deletes import unique_sorted
from lamina.data.inflight import new_write_id
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.expr import AlwaysTrue, Expr, and_
from lamina.expr.values import as_column, as_mask, at_clock, qualified_columns, statement_clock, values_at_clock
from lamina.operations.rowlevel.delete_update import check_assignments
from lamina.operations.rowlevel.delta import RowDelta, check_mode
from lamina.operations.rowlevel.keys import KEY, _consecutive, join_key, key_membership, key_range, unique_key_index
from lamina.operations.rowlevel.outcome import FILE, POS, FileFn, FileOutcome, _keep_row_ids
from lamina.operations.rowlevel.source import SourceRead
from lamina.operations.schema import PlannedColumns
from lamina.spec.lineage import ROW_ID
from lamina.spec.schema import Schema
from lamina.spec.sort import UNORDERED_TYPES, sortable
from lamina.spec.write_types import check_cast_mode, fit, mismatch, store


@dataclass
class _Clause:
    kind: str  # "update" | "delete" | "insert"
    condition: Any = None
    values: dict[str, Any] | None = None  # None: every column from the source ("*_all")


def _clause_rows(
    cl: _Clause,
    sel: pa.Table,
    tschema: pa.Schema,
    what: str,
    unset: Callable[[pa.Field], pa.Array | pa.ChunkedArray],
    cast: str | None = None,
) -> pa.Table:
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


def _target_column(rows: pa.Table, f: pa.Field) -> pa.ChunkedArray:
    """The values of a column a merge update does not set: the target rows' own."""
    return rows.column(f"target.{f.name}")


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


@dataclass(frozen=True, kw_only=True)
class MergeResult(CommitResult):
    """A merge's ``CommitResult`` and the rows it changed (as Delta's merge metrics)."""

    rows_updated: int
    rows_deleted: int
    rows_inserted: int
    files_scanned: int
    files_touched: int

    @classmethod
    def counted(cls, commit: CommitResult, stats: Mapping[str, int]) -> MergeResult:
        """``commit``'s result with the counts of a merge's ``RowDelta.last_stats``."""
        updated = stats.get("rows_updated", 0)
        return cls(
            version=commit.version,
            operation=commit.operation,
            metrics=commit.metrics,
            rows_updated=updated,
            rows_deleted=stats.get("rows_deleted", 0) - updated,
            rows_inserted=stats.get("inserted", 0),
            files_scanned=stats.get("files_scanned", 0),
            files_touched=stats.get("files_touched", 0),
        )


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


def _not_matched_by_source(
    clauses: list[_Clause],
    rows: pa.Table,
    matched: np.ndarray | pa.Array | pa.ChunkedArray,
    tschema: pa.Schema,
    cast: str | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], list[pa.Table]]:
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
            new = _clause_rows(
                cl,
                sel,
                tschema,
                "not matched by source update",
                partial(_target_column, sel),
                cast,
            )
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
        self._now = statement_clock()  # current_date / current_timestamp in the clauses: once per merge

    def when_matched_update(self, set: dict[str, Any], condition: Any = None) -> Self:
        if not set:
            raise InvalidArgument("when_matched_update needs set={column: value or SQL expression}")
        for c in set:
            self.schema.field(c)
        self.matched.append(_Clause("update", at_clock(condition, self._now), values_at_clock(set, self._now)))
        return self

    def when_matched_update_all(self, condition: Any = None) -> Self:
        self._need_all_columns("when_matched_update_all")
        self.matched.append(_Clause("update", at_clock(condition, self._now), None))
        return self

    def when_matched_delete(self, condition: Any = None) -> Self:
        self.matched.append(_Clause("delete", at_clock(condition, self._now)))
        return self

    def when_not_matched_insert(self, values: dict[str, Any], condition: Any = None) -> Self:
        for c in values:
            self.schema.field(c)
        self.not_matched.append(_Clause("insert", at_clock(condition, self._now), values_at_clock(values, self._now)))
        return self

    def when_not_matched_insert_all(self, condition: Any = None) -> Self:
        self._need_all_columns("when_not_matched_insert_all", set(self.schema.write_defaults))
        self.not_matched.append(_Clause("insert", at_clock(condition, self._now), None))
        return self

    def when_not_matched_by_source_update(self, set: dict[str, Any], condition: Any = None) -> Self:
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
        self.not_matched_by_source.append(
            _Clause("update", at_clock(condition, self._now), values_at_clock(dict(set), self._now))
        )
        return self

    def when_not_matched_by_source_delete(self, condition: Any = None) -> Self:
        """Delete the target rows no source row matches (and that ``condition``, on the target's
        columns, holds for). See ``when_not_matched_by_source_update``."""
        _target_only(condition, "when_not_matched_by_source_delete condition")
        self.not_matched_by_source.append(_Clause("delete", at_clock(condition, self._now)))
        return self

    def _check_clauses(self) -> None:
        if not (self.matched or self.not_matched or self.not_matched_by_source):
            raise InvalidArgument(
                "merge needs at least one when_matched_*, when_not_matched_* or when_not_matched_by_source_* clause"
            )

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
        self,
        schema: Schema,
        source: pa.Table | SourceRead,
        on: str | Sequence[str],
        mode: str,
        run: Callable[[RowDelta, CommitOptions | None], CommitResult | None],
        *,
        queued: bool = False,
        cast: str | None = None,
    ) -> None:
        self._start(schema, on, source.schema.names)
        self.cast = check_cast_mode(cast)  # how the source's columns are stored (lamina.spec.write_types)
        # A source being read (SourceRead): its key columns serve until every column is needed.
        self._read = source if isinstance(source, SourceRead) else None
        self.source: pa.Table = source.keys if isinstance(source, SourceRead) else source
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
                f"merge key {k!r} has type {mine}: {UNORDERED_TYPES} have no order; merge on other columns"
            )
        if mine.equals(theirs):
            return mine
        try:
            return (
                pa.unify_schemas([pa.schema([(k, mine)]), pa.schema([(k, theirs)])], promote_options="permissive")
                .field(k)
                .type
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise SchemaMismatch(
                f"merge key {k!r} is {mine} in the table but {theirs} in the source, which do not compare; "
                "cast the source's column to the table's type"
            ) from None

    def _keys(self, t: pa.Table, names: Sequence[str], side: str) -> dict[str, pa.Array | pa.ChunkedArray]:
        return {
            f"{KEY}{i}": join_key(t.column(n), typ, f"the {side}'s key {k!r} ({t.schema.field(n).type})")
            for i, (k, n, typ) in enumerate(zip(self.on, names, self._key_types))
        }

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
        if any(
            cl.condition is not None or cl.values is not None for cl in [*self.matched, *self.not_matched_by_source]
        ):
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
        if len(self.matched) != 1 or len(self.not_matched) != 1:
            return None
        upd, ins = self.matched[0], self.not_matched[0]
        if upd.kind != "update" or not self.source.num_rows:
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
            single and pc.count_distinct(src.column(keys[0])).as_py() == src.num_rows - src.column(keys[0]).null_count
        )

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
                cols.update(
                    {
                        n: (
                            src.column(n).slice(run, len(src_rows)) if run is not None else src.column(n).take(src_rows)
                        )
                        for n in src.column_names
                        if n not in keys
                    }
                )
            else:
                cols["__src"] = src_rows
            j = pa.table(cols)
            if not j.num_rows and not self.not_matched_by_source:
                return FileOutcome(np.zeros(0, dtype=np.int64), matched_source=np.zeros(0, dtype=np.int64))
            # (A lookup finds each target row's one source row: no row can match twice.)
            if (
                not lookup
                and len(
                    unique_sorted(
                        j.column(POS).to_numpy().astype(np.int64) + (j.column(FILE).to_numpy().astype(np.int64) << 32)
                    )
                )
                != j.num_rows
            ):
                raise InvalidArgument(
                    "merge: a target row matched more than one source row (duplicate keys "
                    f"{self.on} in the source); deduplicate the source. Nothing was committed."
                )
            deletes, files, updates = [], [], []
            for cl, sel in _clauses_taking(self.matched, j, "merge"):
                deletes.append(sel.column(POS).to_numpy())
                files.append(sel.column(FILE).to_numpy())
                if cl.kind == "update" and not whole:
                    rows_ = _clause_rows(cl, sel, tschema, "update", partial(_target_column, sel), self.cast)
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
                delete,
                new,
                matched_source=j.column("__src").to_numpy(),
                delete_file=dfile,
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
                out.append(
                    _clause_rows(
                        cl,
                        sel,
                        tschema,
                        "insert",
                        partial(_default_or_null, defaults, n=sel.num_rows),
                        self.cast,
                    )
                )
            return pa.concat_tables(out) if out else None

        return fn

    def _check_types(self, tschema: pa.Schema) -> None:
        """Refuse now (SchemaMismatch, nothing read or written) the clauses whose values a table
        column cannot store by type (``lamina.spec.write_types``): the source's columns that
        ``*_all`` clauses write, and the clauses' SQL assignments."""
        clauses = [*self.matched, *self.not_matched, *self.not_matched_by_source]
        if self.cast is None and any(cl.kind != "delete" and cl.values is None for cl in clauses):
            have = self.source.schema if self._read is None else self._read.schema
            refused = [
                mismatch(f.name, have.field(f.name).type, f.type)
                for f in tschema
                if f.name in have.names and fit(have.field(f.name).type, f.type) is None
            ]
            if refused:
                raise SchemaMismatch("merge: " + "; ".join(refused) + "; nothing was written")
        joined = None
        for cl in clauses:
            if cl.values:
                if joined is None:
                    have = self.source.schema if self._read is None else self._read.schema
                    joined = pa.schema(
                        [
                            *[pa.field(f"source.{f.name}", f.type) for f in have],
                            *[pa.field(f"target.{f.name}", f.type) for f in tschema],
                        ]
                    ).empty_table()
                check_assignments(cl.values, tschema, f"merge {cl.kind}", self.cast, joined)

    def execute(self, *, commit_options: CommitOptions | None = None) -> MergeResult | None:
        self._check_clauses()
        tschema = self.schema.arrow
        self._check_types(tschema)
        whole = self._whole_source(tschema)
        if whole is None and self._read is not None:
            self.source, self._read = self._read.table(), None  # its clauses match with every column
        op = RowDelta(
            "merge",
            self._prune(),
            self._target_columns(),
            self._file_fn(tschema, whole is not None),
            self.mode,
            new_write_id(),
            inserts=self._inserts(tschema),
            prefilter=self._prefilter(),
            planned=PlannedColumns.of(self.schema),
            whole_source=whole,
            cast=self.cast,
        )
        commit = self._run(op, commit_options)
        if commit is None:  # queued: committed with its transaction, the counts not known yet
            return None
        return MergeResult.counted(commit, op.last_stats)
