"""Rollback: a new version whose content equals an earlier one's."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc

from lamina.commit import Base, Change, Operation, removed_of
from lamina.commit.checks import require_live
from lamina.data.deletes import file_key_array
from lamina.manifest.entries import conform, manifest_schema_of
from lamina.manifest.tree import live_data_entries
from lamina.spec.lineage import check_row_ids, has_lineage
from lamina.spec.version import VersionManifest


@dataclass
class Rollback(Operation):
    """Make the table's content equal ``target``'s, as a new version (history is kept).

    Re-evaluated against every base: whatever committed meanwhile is undone too,
    since the result must equal the target. Files the target had and the base
    does not are re-added (same files, new entries), which the version manifest
    records for expiry (``last_readd_version``).
    """

    conflict_checks = (require_live,)

    target: VersionManifest
    tag: str | None = None

    def apply(self, base: Base) -> Change:
        # (Table.rollback holds the target's files with a guard tag while this runs.)
        target = live_data_entries(
            base.io, self.target.root_manifest, manifest_schema_of(self.target), inline=self.target.root_inline
        )
        want = conform(target, base.manifest_schema)
        have = base.live_entries(["path", "added_version", "dv_path", "dv_offset"])
        # A file is the same only with the same deletion vector: (path, DV) is its identity.
        wkey, hkey = file_key_array(want), file_key_array(have)
        readd = want.filter(pc.invert(pc.is_in(wkey, value_set=hkey)))
        if has_lineage(self.target):  # its files keep their ids (a target before lineage: they get new ones)
            check_row_ids(readd, self.target.version)
        drop = have.filter(pc.invert(pc.is_in(hkey, value_set=wkey)))
        summary = {"rollback-to": self.target.version, "readded-files": readd.num_rows}
        if self.tag is not None:
            summary["rollback-tag"] = self.tag
        return Change(
            "rollback",
            base.stamp(readd),
            removed_of(drop),
            summary=summary,
            readds=readd.num_rows > 0,
        )
