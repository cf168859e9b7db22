"""Overwrite: replace the rows matching a predicate (or all rows) with new data files."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import Base, Change, Operation, removed_of
from lamina.commit.checks import require_columns_unchanged, require_live
from lamina.data.deletes import dvs_of_plan, file_keys
from lamina.data.scan import Scan
from lamina.expr import AlwaysTrue, Expr, filter_rows, to_arrow_filter, to_sql
from lamina.spec.lineage import LINEAGE_COLUMNS, has_lineage, lineages_of

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-overwrite")

# A candidate file with no row matching the predicate stays as it is.
UNTOUCHED = object()


@dataclass
class Overwrite(Operation):
    """Replace the rows matching ``predicate`` (all rows if AlwaysTrue) with new files.

    Re-evaluated against every base: the overwrite takes effect after whatever
    committed before it, as if it had run last, so a concurrent append into the
    overwritten range is replaced too (serializable order), never half-kept.
    Files only partly matching are rewritten without the matching rows.
    """

    conflict_checks = (require_live, require_columns_unchanged)

    predicate: Expr
    entries: pa.Table
    write_id: str  # names the files written for rewritten remainders
    readds: bool = False  # ``entries`` are files given by the user (add_files): see AppendFiles
    # path -> UNTOUCHED | entries of the rewritten remainder | None (every row matched); kept
    # across retries so a rebase only reads files it has not seen.
    _rewrites: dict[tuple, Any] = field(default_factory=dict)
    operation: str = "overwrite"
    # the predicate's columns as planned, checked against each base's schema (see PlannedColumns)
    planned: Any = None

    def apply(self, base: Base) -> Change:
        if self.planned is not None:
            require_columns_unchanged(self.planned.columns, self.planned.whole_rows, base.schema, self.operation)
        scan = base.scan(self.predicate)
        candidates = scan.plan(all_columns=has_lineage(base.metadata)).entries
        added = [base.stamp(self.entries)] if self.entries.num_rows else []
        if isinstance(self.predicate, AlwaysTrue):
            removed = candidates
        else:
            filt = to_arrow_filter(self.predicate)
            paths = candidates.column("path").to_pylist()
            dvs = dvs_of_plan(candidates)
            keys = file_keys(candidates)
            unseen = [i for i, k in enumerate(keys) if k not in self._rewrites]
            lineages = lineages_of(candidates)
            carry = has_lineage(base.metadata)
            outs = _pool.map(
                lambda i: self._rewrite_file(base, scan, paths[i], filt, dvs[i], carry, lineages[i]), unseen
            )
            for i, outcome in zip(unseen, outs):
                self._rewrites[keys[i]] = outcome
            touched = [self._rewrites[k] is not UNTOUCHED for k in keys]
            removed = candidates.filter(pa.array(touched, pa.bool_())) if paths else candidates
            for k, t in zip(keys, touched):
                remainder = self._rewrites[k]
                if t and remainder is not None:
                    added.append(base.stamp(remainder))
        adds = pa.concat_tables(added) if added else base.empty()
        return Change(
            self.operation,
            adds,
            removed_of(removed),
            summary={"predicate": str(self.predicate)},
            readds=self.readds and self.entries.num_rows > 0,
        )

    def _rewrite_file(
        self,
        base: Base,
        scan: Scan,
        path: str,
        filt: Any,
        dv: Any = None,
        carry: bool = False,
        lineage: Any = None,
    ) -> Any:
        """UNTOUCHED if no row matches, None if all do, else the entries of the rewritten remainder
        (live rows only: a row a deletion vector removed stays removed; with ``carry``, rows kept
        keep their lineage, the file's ``lineage``)."""
        names = [*scan.schema.names, *LINEAGE_COLUMNS] if carry else scan.schema.names
        rows = scan.read_file(path, names, None, dv, lineage=lineage)
        numbered = rows.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
        matched = filter_rows(numbered, filt, to_sql(self.predicate)).column("__row")
        if len(matched) == 0:
            return UNTOUCHED
        if len(matched) == rows.num_rows:
            return None
        # SQL semantics: a row stays unless the predicate is TRUE for it (false or null stay).
        return base.write(rows.filter(pc.invert(pc.is_in(numbered.column("__row"), value_set=matched))), self.write_id)
