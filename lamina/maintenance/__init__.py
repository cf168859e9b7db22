"""Table maintenance that makes no version: expiry, orphan cleanup, reachability, fsck, and
where a table's space goes (the storage report).

These work on a table's storage and version log directly (never on a ``Table``), so the
table layer above calls them and nothing here calls back up."""

from lamina.maintenance.fsck import FsckReport, fsck

__all__ = ["FsckReport", "fsck"]
