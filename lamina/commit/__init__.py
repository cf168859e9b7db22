"""Where versions are made: the version log, tags, coordinators, and the committer that
applies operations to the latest version (``Base``), publishes, and rebases on conflict."""

from lamina.commit.base import REMOVED_SCHEMA, Base, Change, Operation, removed_of
from lamina.commit.committer import CommitOptions, Committer
from lamina.commit.coordinator import CommitCoordinator, ObjectStoreCoordinator
from lamina.commit.log import VersionLog, flush_hints
from lamina.commit.result import CommitResult
from lamina.commit.tags import TagStore

__all__ = [
    "REMOVED_SCHEMA",
    "Base",
    "Change",
    "CommitOptions",
    "CommitResult",
    "Committer",
    "Operation",
    "CommitCoordinator",
    "ObjectStoreCoordinator",
    "TagStore",
    "VersionLog",
    "flush_hints",
    "removed_of",
]
