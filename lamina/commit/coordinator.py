"""Commit coordinators: what makes a version manifest the next version, atomically.

The default is the object store's put-if-absent on the version's name. A SQL
compare-and-swap coordinator (catalog issue) implements the same interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from lamina.io import FileIO
from lamina.spec.layout import version_path
from lamina.spec.version import VersionManifest


class CommitCoordinator(ABC):
    @abstractmethod
    def publish(self, vm: VersionManifest) -> None:
        """Make ``vm`` version ``vm.version``.

        Raises AlreadyExists if another commit holds that version, any other
        StorageError if the outcome is unknown (the caller resolves it by commit id).
        """


class ObjectStoreCoordinator(CommitCoordinator):
    """Put-if-absent of ``_lamina/versions/<name>.json``: the commit point is one conditional write."""

    def __init__(self, io: FileIO) -> None:
        self.io = io

    def publish(self, vm: VersionManifest) -> None:
        self.io.put_if_absent(version_path(vm.version), vm.to_json())
