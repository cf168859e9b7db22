"""Optimistic concurrency: version log, coordinators, conflict rules, retry/rebase."""

from lamina.commit.committer import Change, CommitOptions, Committer, Operation
from lamina.commit.coordinator import CommitCoordinator, ObjectStoreCoordinator
from lamina.commit.log import VersionLog, flush_hints

__all__ = ["Change", "CommitOptions", "Committer", "Operation", "CommitCoordinator", "ObjectStoreCoordinator", "VersionLog", "flush_hints"]
