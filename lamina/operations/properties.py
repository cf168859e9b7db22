"""Table property changes: ``UpdateProperties``, one version, metadata only.

    t.update_properties(set={"write.parquet.compression": "zstd"}, remove=["owner"])

``UpdateProperties.of`` checks the change against the version the table object holds, and
refuses it with nothing committed: a value a registered property's parser refuses, a key in
one of Lamina's namespaces that is no property of it (the rule ``create_table`` applies,
``check_properties``; removed keys too), a key both set and removed, a column statistics
mode for no column, a ``write.sort-order`` naming no sortable
column or on a table whose sort order ``update_sort_order`` set (it supersedes the
property), and a change the format does not allow (``check_property_change``:
``PropertyCannotChange``, saying why). Removing a key the table does not set, or setting
what it has, changes nothing (Iceberg's rule): when nothing changes, on the latest version,
no version is committed. Writes after the version (in a transaction: the calls after this
one) use the new settings; files already written keep theirs. A table object writes with
the properties of the version it holds, as with its schema: one opened before the change
writes with the old ones until its next commit or ``refresh()`` moves it on.

Conflicts: none of its own. As Iceberg's ``UpdateProperties`` does, a retry re-applies the
keys it sets and removes to the newest version, keeping every other key as that version has
it: two concurrent updates both land, and where both set one key, the one committed later
wins, as if it had run after the other (neither reads what it writes, so that order is
serializable). The checks that depend on the base run again on each one; one that no longer
passes there (a concurrent schema change dropped a column it names, a concurrent update
raised ``expire.slot-retention-ms`` above the value it sets) fails the commit with
CommitConflict, nothing committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from lamina.commit.base import REMOVED_SCHEMA, Base, Change, Operation
from lamina.commit.checks import require_properties_valid
from lamina.errors import InvalidArgument
from lamina.spec.properties import TableProperties, check_properties, check_property_change, check_property_keys
from lamina.spec.sort import sortable_field
from lamina.spec.stats import check_column_modes
from lamina.spec.version import VersionManifest

NOTHING = "Nothing was committed."


@dataclass
class UpdateProperties(Operation):
    """Set ``updates`` and remove ``removals`` in the table's properties."""

    conflict_checks = (require_properties_valid,)

    updates: dict[str, str]
    removals: tuple[str, ...]
    skip_if_noop: ClassVar[bool] = True  # setting what the table has already: no version
    refresh_base: ClassVar[bool] = True  # whether it changes anything is judged on the latest version

    @classmethod
    def of(
        cls, metadata: VersionManifest, set: Mapping[str, object] | None = None, remove: Iterable[str] | str = ()
    ) -> UpdateProperties:
        """The update ``set`` / ``remove`` ask for, checked against ``metadata`` (see the module)."""
        if set is not None and not isinstance(set, Mapping):
            raise InvalidArgument(f"set= takes a mapping of property keys to values, not {type(set).__name__}")
        removals = (remove,) if isinstance(remove, str) else tuple(remove)
        none = [k for k, v in (set or {}).items() if v is None]
        if none:
            raise InvalidArgument(f"properties {none} are set to None: give each a value, or remove= it. {NOTHING}")
        updates = {str(k): str(v) for k, v in (set or {}).items()}
        removals = tuple(dict.fromkeys(str(k) for k in removals))
        if not updates and not removals:
            raise InvalidArgument("update_properties needs set= or remove=: the update names no property")
        both = sorted(k for k in removals if k in updates)
        if both:
            raise InvalidArgument(f"properties {both} are both set and removed: give each once. {NOTHING}")
        check_properties(updates, NOTHING)
        check_property_keys(removals, NOTHING)
        op = cls(updates, removals)
        op._check(metadata, op._applied(metadata.properties))
        return op

    def _applied(self, properties: Mapping[str, str]) -> dict[str, str]:
        new = {k: v for k, v in properties.items() if k not in self.removals}
        new.update(self.updates)
        return new

    def _check(self, metadata: VersionManifest, new: Mapping[str, str]) -> None:
        """What ``new`` must satisfy on ``metadata`` (the version it would follow)."""
        check_property_change(metadata.properties, new)
        # Only what this update sets: a key set earlier stays as its own update left it.
        check_column_modes(self.updates, metadata.schema, NOTHING)
        order = TableProperties.WRITE_SORT_ORDER
        if order.key in self.updates:
            if metadata.sort_order is not None:
                raise InvalidArgument(
                    f"the table's sort order was set by update_sort_order, which supersedes {order.key}: change it "
                    f"with table.update_sort_order(). {NOTHING}"
                )
            for column in order.parse(self.updates[order.key]):
                sortable_field(metadata.schema, column)

    def apply(self, base: Base) -> Change:
        old = base.properties
        new = self._applied(old)
        if new == old:
            return Change("update-properties", base.empty(), REMOVED_SCHEMA.empty_table())
        with require_properties_valid(base.metadata):
            self._check(base.metadata, new)
        summary: dict[str, str] = {}
        changed = sorted(k for k, v in self.updates.items() if old.get(k) != v)
        if changed:
            summary["properties-set"] = ", ".join(changed)
        gone = sorted(k for k in self.removals if k in old)
        if gone:
            summary["properties-removed"] = ", ".join(gone)
        return Change("update-properties", base.empty(), REMOVED_SCHEMA.empty_table(), summary, properties=new)
