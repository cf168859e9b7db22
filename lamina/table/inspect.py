"""``t.inspect``: a table's system tables as Arrow tables (as pyiceberg's ``tbl.inspect``).

The same tables the CLI (``lamina system``), SQL (``"uri$files"``) and Spark
(``lamina.spark.system_table``) show, built by ``lamina.table.system``. On a branch's handle
``snapshots`` lists that branch's versions, ``files`` and ``manifests`` describe its
version; ``tags``, ``branches`` and ``schemas`` are table-wide. The versions themselves as
rows for programs are ``t.history()``, as Delta's ``dt.history()`` and pyiceberg's
``tbl.history()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.table import system

if TYPE_CHECKING:
    from lamina.table.table import Table


class Inspect:
    """The system tables of ``table``, each a method returning a ``pyarrow.Table``."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def snapshots(self) -> pa.Table:
        """``$snapshots``: every retained version of this branch, oldest first."""
        return system.snapshots(self._table)

    def tags(self) -> pa.Table:
        """``$tags``: every tag, with the version it names."""
        return system.tags(self._table)

    def branches(self) -> pa.Table:
        """``$branches``: main, then every branch by name: where each was made from, its latest
        version, its retention."""
        return system.branches(self._table)

    def schemas(self) -> pa.Table:
        """``$schemas``: every schema the retained versions have, oldest first."""
        return system.schemas(self._table)

    def files(self, version: int | str | None = None, *, timestamp: Any = None) -> pa.Table:
        """``$files``: the live data files of a version (default: this object's) with their
        statistics. ``version``/``timestamp`` as for ``scan``."""
        return self.table("files", version=version, timestamp=timestamp)

    def manifests(self, version: int | str | None = None, *, timestamp: Any = None) -> pa.Table:
        """``$manifests``: the root manifest of a version (default: this object's) and the
        leaves it references. ``version``/``timestamp`` as for ``scan``."""
        return self.table("manifests", version=version, timestamp=timestamp)

    def table(self, name: str, *, version: int | str | None = None, timestamp: Any = None) -> pa.Table:
        """The system table ``name`` (``"$files"`` or ``"files"``: the form the CLI and SQL take);
        ``version``/``timestamp`` pick the version of ``$files`` and ``$manifests``, and a
        branch's name as ``version`` reads that branch (its versions for ``$snapshots``)."""
        source, vm = self._table._at(version, timestamp)
        return system.system_table(source, name, vm)

    def __repr__(self) -> str:
        return f"lamina.Inspect({self._table.uri!r})"
