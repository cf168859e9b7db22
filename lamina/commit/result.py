"""What a write returns: one rule for every call that commits a version of a table.

Every write of the Python API (``append``, ``overwrite``, ``delete``, ``update``, ``add_files``,
``rollback``, ``update_properties``, a schema/spec/sort-order update, ``branches.publish``, a
transaction's ``commit``) and of the Spark functions returns a ``CommitResult``: the version it
committed, the operation, and that version's metrics (its summary, as Delta returns operation
metrics). A write that changed nothing (a delete that matched no row) commits nothing: its
result's ``version`` is None. Writes that count more than files and rows return a subclass that
adds those counts (``MergeResult``, ``CompactionResult``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lamina.spec.version import VersionManifest

_NO_METRICS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class CommitResult:
    """The version a write committed (None: nothing committed), its operation and metrics."""

    version: int | None
    operation: str | None = None  # None when nothing was committed
    # The version's summary: added-files, removed-files, added-records, removed-records,
    # total-files, total-records, and what the operation adds (docs/writing.md).
    metrics: Mapping[str, Any] = field(default_factory=lambda: _NO_METRICS, repr=False, compare=False)

    @classmethod
    def of(cls, vm: VersionManifest | None) -> CommitResult:
        """The result of committing ``vm``; None: nothing was committed."""
        if vm is None:
            return cls(None)
        return cls(vm.version, vm.operation, MappingProxyType(dict(vm.summary)))

    @property
    def committed(self) -> bool:
        """Whether a version was committed (False: the write changed nothing)."""
        return self.version is not None

    def _metric(self, key: str) -> int:
        return int(self.metrics.get(key, 0))

    @property
    def files_added(self) -> int:
        return self._metric("added-files")

    @property
    def files_removed(self) -> int:
        return self._metric("removed-files")

    @property
    def rows_added(self) -> int:
        return self._metric("added-records")

    @property
    def rows_removed(self) -> int:
        """Rows the version removed: those of removed files, and rows a row-level change deleted."""
        return self._metric("removed-records")
