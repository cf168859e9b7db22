"""The SQL commit coordinator: a compare-and-swap of the table's catalog row is the commit point.

For catalog-managed tables (and stores without conditional writes) a commit of
version ``v`` is:

1. put the version manifest under a unique staging name,
   ``_lamina/versions/pending/<v>-<commit id>.json`` (nothing reads it yet);
2. **the commit point**: ``UPDATE lamina_tables SET version=v, ... WHERE id=? AND
   version=v-1 AND online=1`` (one row changed = won; none = lost, or offline);
3. publish: put-if-absent of the same bytes at the final name
   ``_lamina/versions/<20 digits>.json`` (identical content already there is fine);
4. the hint (the committer writes it, as for every coordinator).

A writer that dies between 2 and 3 leaves the row one version ahead of the
files. Whoever next reads the row (a writer losing its swap, a table loaded
through the catalog, ``refresh``) completes the publish by copying the staged
manifest to its final name: so a path-only reader never sees an uncommitted
version (only swapped versions are ever published) and misses a committed one
only until the next catalog reader or writer comes along. Invariant: when the
row says ``v``, every version below ``v`` is already published, because a swap
from ``v-1`` needs a base ``v-1`` that was loaded from its final file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from lamina.commit.committer import step
from lamina.commit.coordinator import CommitCoordinator
from lamina.commit.log import VersionLog
from lamina.errors import AlreadyExists, CorruptMetadata, NotFound, StorageError, TableOffline
from lamina.spec.layout import pending_path, version_path
from lamina.spec.version import VersionManifest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Row:
    """The commit-relevant part of a table's catalog row."""

    version: int
    manifest_path: str
    pending_path: str | None
    commit_id: str | None
    online: bool


class RowStore(Protocol):
    """What the coordinator needs from a SQL catalog (implemented by SqlCatalog)."""

    def _swap(self, table_id: str, expected: int, vm: VersionManifest, pending: str) -> Row | None:
        """The compare-and-swap. None if it changed the row, else the row as it is (raises
        CatalogTableNotFound if the row is gone, StorageError if the outcome is unknown)."""

    def _row(self, table_id: str) -> Row: ...

    def _insert_table(self, table_id: str, ident: str, location: str, vm: VersionManifest, staged: str) -> None:
        """Insert the row of a new table at version 0 (CatalogTableAlreadyExists if taken)."""


class SqlCoordinator(CommitCoordinator):
    log: CatalogVersionLog

    def __init__(self, store: RowStore, table_id: str, log_: CatalogVersionLog, identifier: str) -> None:
        self.store = store
        self.table_id = table_id
        self.log = log_
        self.identifier = identifier
        self.io = log_.io

    # -- the commit ----------------------------------------------------------------------

    def create(self, vm: VersionManifest) -> None:
        """Version 0: staged, the catalog row inserted (the commit point), then published."""
        data = vm.to_json()
        staged = pending_path(0, vm.commit_id)
        self.io.put_new(staged, data)
        try:
            self.store._insert_table(self.table_id, self.identifier, self.io.uri, vm, staged)
        except BaseException:
            self._drop(staged)
            raise
        step("swapped")
        self._publish_final(0, data, vm.commit_id, staged)

    def publish(self, vm: VersionManifest) -> None:
        data = vm.to_json()
        staged = pending_path(vm.version, vm.commit_id)
        # The name is ours alone (version + commit id), and a retry of the same attempt
        # after an unknown outcome writes the same bytes again, which put_new accepts.
        self.io.put_new(staged, data)
        for _ in range(3):
            row = self.store._swap(self.table_id, vm.version - 1, vm, staged)
            if row is None:
                step("swapped")
                self._publish_final(vm.version, data, vm.commit_id, staged)
                return
            if row.version == vm.version and row.commit_id == vm.commit_id:
                # An earlier attempt of this very commit landed (its answer was lost): finish it.
                self._publish_final(vm.version, data, vm.commit_id, staged)
                return
            if not row.online:
                self._drop(staged)
                raise TableOffline(
                    f"table {self.identifier} ({self.io.uri}) went offline: version {vm.version} was not committed; "
                    "the table can be read but not written until it is set online again"
                )
            if row.version == vm.version - 1:
                continue  # raced a flag flip between the swap and our read of the row: swap again
            if row.version < vm.version - 1:
                raise CorruptMetadata(
                    f"table {self.identifier}: the catalog row is at version {row.version} but version "
                    f"{vm.version - 1} exists at {self.io.uri}: it was committed without the catalog"
                )
            # Lost the race. Make the winner visible to the committer's read-back of the slot.
            self.complete(row)
            self._drop(staged)
            raise AlreadyExists(f"version {vm.version} of {self.identifier} was committed by another writer")
        raise StorageError(f"the catalog row of {self.identifier} kept changing while committing version {vm.version}")

    def _publish_final(self, version: int, data: bytes, commit_id: str, staged: str | None) -> None:
        try:
            self.io.put_if_absent(version_path(version), data)
        except AlreadyExists:
            # Someone completed it first (same bytes), or a path writer put a version behind
            # the catalog's back: tell those apart by commit id.
            there = self.log.try_load(version)
            if there is None or there.commit_id != commit_id:
                raise CorruptMetadata(
                    f"table {self.identifier}: version {version} at {self.io.uri} is not the one the catalog "
                    f"committed ({commit_id}); the table was written without its catalog"
                ) from None
        if staged is not None:
            self._drop(staged)

    def _drop(self, path: str) -> None:
        try:
            self.io.delete_many([path])  # a plain unlink on local disk
        except StorageError as e:  # a leftover staged file is harmless
            log.debug("could not delete %s: %s", path, e)

    # -- recovery ------------------------------------------------------------------------

    def complete(self, row: Row) -> None:
        """Make sure the row's version is published under its final name (recovery)."""
        if self.log.exists(row.version):
            return
        if row.version == 1 and row.commit_id and not self.log.exists(0):
            # A table created by a catalog transaction together with its first changes: its
            # version 0 was staged under the same commit id, and is published first.
            self._complete_staged(0, pending_path(0, row.commit_id), row.commit_id)
        if not row.pending_path:
            raise CorruptMetadata(
                f"table {self.identifier}: version {row.version} is in the catalog but not at {self.io.uri}"
            )
        self._complete_staged(row.version, row.pending_path, row.commit_id)

    def _complete_staged(self, version: int, staged: str, commit_id: str | None) -> None:
        try:
            data = self.io.get(staged)
        except NotFound:
            if self.log.exists(version):  # its writer published and cleaned up meanwhile
                return
            raise CorruptMetadata(
                f"table {self.identifier}: the catalog says version {version} is staged at "
                f"{staged}, but neither it nor the final version file exists at {self.io.uri}"
            ) from None
        vm = VersionManifest.from_json(data, staged)
        if vm.version != version or (commit_id and vm.commit_id != commit_id):
            raise CorruptMetadata(f"table {self.identifier}: {staged} is not version {version}")
        log.info(
            "completing the publish of version %d of %s (its writer stopped after the swap)", version, self.identifier
        )
        self._publish_final(version, data, vm.commit_id, staged)

    def latest_version(self) -> int:
        """The committed version per the catalog row (authoritative), published if it was not yet."""
        row = self.store._row(self.table_id)
        self.complete(row)
        return row.version


class CatalogVersionLog(VersionLog):
    """A version log whose latest version comes from the catalog row: one query and one GET,
    no probing, and every load completes a pending publish first."""

    coordinator: SqlCoordinator | None = None
    # A table a catalog transaction is creating: its version 0 until the transaction commits
    # (the changes queued on it are checked against it; lamina.catalog.transaction).
    unborn: VersionManifest | None = None

    def latest(self) -> VersionManifest:
        if self.unborn is not None:
            return self.unborn
        if self.coordinator is None:
            return super().latest()
        return self.load(self.coordinator.latest_version())

    def newest_from(self, known: int) -> VersionManifest:
        if self.coordinator is None:
            return super().newest_from(known)
        return self.latest()

    def is_newest(self, version: int) -> bool:
        # The row, not the files: a committed version may not be published yet.
        if self.coordinator is None:
            return super().is_newest(version)
        return self.coordinator.latest_version() == version
