"""Turning row lineage on for a table created without it (lamina.spec.lineage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from lamina.commit import Base, Change, Operation, removed_of
from lamina.commit.checks import require_live
from lamina.errors import SchemaMismatch
from lamina.spec.lineage import ENTRY_FIELDS, ROW_LINEAGE, has_lineage
from lamina.spec.schema import RESERVED_NAMES


@dataclass
class EnableRowLineage(Operation):
    """One version that adds the ``row-lineage`` writer feature and gives every live file row
    ids (the committer assigns ``first_row_id``s, as for any added file). The files are
    re-listed, not rewritten: their rows' ``_last_updated_version`` is the version that
    added them. Nothing to do (no version) on a table that has lineage already."""

    conflict_checks = (require_live,)  # (its files are re-listed: removed and added again)
    skip_if_noop: ClassVar[bool] = True
    refresh_base: ClassVar[bool] = True

    def apply(self, base: Base) -> Change:
        if has_lineage(base.metadata):
            return Change("enable-row-lineage", base.empty(), removed_of(base.empty()))
        # A table created before these names were reserved: its column would hide the metadata one.
        taken = [n for n in base.schema.names if n in RESERVED_NAMES]
        if taken:
            raise SchemaMismatch(
                f"the table has columns named {taken}, which row lineage and the change feed add as metadata "
                f"columns; rename them first (table.update_schema().rename_column({taken[0]!r}, ...)), then enable it"
            )
        entries = base.live_entries()
        relisted = entries.append_column(ENTRY_FIELDS[0], pa.nulls(entries.num_rows, pa.int64()))
        relisted = relisted.append_column(ENTRY_FIELDS[1], entries.column("added_version"))
        # Same files, same rows: counted as neither added nor removed.
        summary = {
            "added-files": 0,
            "removed-files": 0,
            "added-records": 0,
            "removed-records": 0,
            "relisted-files": entries.num_rows,
        }
        return Change(
            "enable-row-lineage", relisted, removed_of(entries), summary=summary, writer_features=(ROW_LINEAGE,)
        )
