"""Table maintenance: consistency checks (fsck); compaction, expiry and GC come later."""

from lamina.maintenance.fsck import FsckReport, fsck

__all__ = ["FsckReport", "fsck"]
