"""Commit coordinators: what makes a version manifest the next version, atomically.

The default is the object store's put-if-absent on the version's name. A SQL
compare-and-swap coordinator (catalog issue) implements the same interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from lamina.commit.log import remember
from lamina.errors import CatalogManaged
from lamina.io import FileIO
from lamina.spec.features import CATALOG_COMMITS
from lamina.spec.layout import MAIN_LOG, LogLayout
from lamina.spec.version import VersionManifest


class CommitCoordinator(ABC):
    @abstractmethod
    def publish(self, vm: VersionManifest) -> None:
        """Make ``vm`` version ``vm.version``.

        Raises AlreadyExists if another commit holds that version, any other
        StorageError if the outcome is unknown (the caller resolves it by commit id).
        """

    @abstractmethod
    def create(self, vm: VersionManifest) -> None:
        """Make ``vm`` version 0 of a new table; errors as for ``publish``."""

    def check_commit(self, base: VersionManifest) -> None:  # noqa: B027 (a default: most accept every commit)
        """Raise if no commit on ``base`` may go through this coordinator at all: the committer
        asks before it writes a manifest, so a refused commit leaves nothing behind."""


class ObjectStoreCoordinator(CommitCoordinator):
    """Put-if-absent of ``_lamina/versions/<name>.json``: the commit point is one conditional write."""

    def __init__(self, io: FileIO, layout: LogLayout = MAIN_LOG) -> None:
        self.io = io
        self.layout = layout  # whose slots: main's, or a branch's (lamina.commit.branches)

    def create(self, vm: VersionManifest) -> None:
        # put_new: a retry after a lost answer finds our own version 0 (same bytes) and succeeds
        self.io.put_new(self.layout.version_path(0), vm.to_json())

    def check_commit(self, base: VersionManifest) -> None:
        if CATALOG_COMMITS in base.writer_features and self.layout == MAIN_LOG:
            # (A branch's log is the table's own, by path: the catalog row tracks main.)
            raise CatalogManaged(
                f"table {self.io.uri} is managed by a SQL catalog (writer feature {CATALOG_COMMITS!r}): "
                "its commits go through the catalog row, so write to it via lamina.load_catalog(uri).load_table(name). "
                "Nothing was committed; reading it (and writing its branches) by path works."
            )

    def publish(self, vm: VersionManifest) -> None:
        self.check_commit(vm)
        data = vm.to_json()
        self.io.put_if_absent(self.layout.version_path(vm.version), data)
        remember(data, vm)
