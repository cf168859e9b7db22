"""Consistent reads of several tables of a SQL catalog: ``catalog.snapshot()`` pins every
table at one catalog state (``snapshot(at=...)``: as of a time), so a reader of several tables
sees each catalog transaction (``lamina.catalog.transaction``) wholly or not at all.

    snap = catalog.snapshot()                  # every table at one catalog state
    snap.to_arrow("shop.orders"); snap.to_arrow("shop.daily")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.catalog.base import CatalogTable, parse_identifier
from lamina.errors import CatalogTableNotFound, TableNotFound, VersionNotFound
from lamina.io import FileIO

if TYPE_CHECKING:
    from lamina.catalog.sql import SqlCatalog
    from lamina.data.scan import Scan

__all__ = ["CatalogSnapshot", "SnapshotEntry"]


@dataclass(frozen=True)
class SnapshotEntry:
    """One table of a catalog snapshot: where it is and the version the snapshot pins."""

    identifier: str
    uuid: str
    location: str
    version: int


class CatalogSnapshot:
    """Every table of a catalog at one catalog state (``catalog.snapshot()``): a reader of
    several tables sees each catalog transaction wholly or not at all."""

    def __init__(
        self, catalog: SqlCatalog, entries: Mapping[str, SnapshotEntry], taken_ms: int, at_ms: int | None = None
    ) -> None:
        self.catalog = catalog
        self.entries = dict(entries)
        self.taken_ms = taken_ms
        self.at_ms = at_ms  # the time it was asked for (snapshot(at=...)), else None

    @property
    def versions(self) -> dict[str, int]:
        """Each table's pinned version, by identifier."""
        return {k: e.version for k, e in self.entries.items()}

    def entry(self, identifier: Any) -> SnapshotEntry:
        ns, name = parse_identifier(identifier)
        ident = f"{ns}.{name}"
        try:
            return self.entries[ident]
        except KeyError:
            raise CatalogTableNotFound(
                f"table {ident} is not in this snapshot of {self.catalog.uri} (created after it, or no such table)"
            ) from None

    def version_of(self, identifier: Any) -> int:
        return self.entry(identifier).version

    def load_table(self, identifier: Any) -> CatalogTable:
        """The table at the snapshot's version (reads see that version; a write from it
        commits on the newest version, as from any table object)."""
        e = self.entry(identifier)
        coord = self.catalog._coordinator(e.uuid, e.identifier, FileIO(e.location, self.catalog.storage_options))
        log_ = coord.log
        try:
            vm = log_.load(e.version)
        except (VersionNotFound, TableNotFound):
            coord.complete(self.catalog._row(e.uuid))  # committed, its publish not done yet
            vm = log_.load(e.version)
        table = CatalogTable(log_.io, log_, vm, coord)
        return table._bind_catalog(self.catalog, e.identifier, lambda: self.catalog._online_by_id(e.uuid, e.identifier))

    def scan(self, identifier: Any, **kwargs: Any) -> Scan:
        return self.load_table(identifier).scan(**kwargs)

    def to_arrow(self, identifier: Any, **kwargs: Any) -> pa.Table:
        return self.scan(identifier, **kwargs).to_arrow()

    def __repr__(self) -> str:
        return f"lamina.CatalogSnapshot({self.catalog.uri!r}, {self.versions})"
