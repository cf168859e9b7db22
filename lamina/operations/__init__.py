"""Every change to a table, as an operation object: data plus what it needs from the base.

An operation's ``apply(base)`` (``base``: a ``lamina.commit.Base``) returns the
``Change`` it makes to that version; the committer calls it once per attempt,
on the latest version, so a retry re-applies it with the same conflict rules.
Operations never see a ``Table``: a transaction, an engine's write session and
a retry all apply them the same way.
"""

from lamina.errors import StaleRowDelta  # (where it is defined: lamina.errors, with every public error)
from lamina.operations.append import (
    AppendFiles,
    RecordAppTransaction,
    check_added_files,
    check_added_paths,
    check_not_in_table,
)
from lamina.operations.compaction import CompactFiles, CompactionResult, RewriteManifests
from lamina.operations.overwrite import Overwrite
from lamina.operations.rollback import Rollback
from lamina.operations.rowlevel.delta import PositionDelta, RowDelta
from lamina.operations.rowlevel.merge import MergeBuilder, MergeResult

__all__ = [
    "AppendFiles",
    "CompactFiles",
    "CompactionResult",
    "MergeBuilder",
    "MergeResult",
    "Overwrite",
    "PositionDelta",
    "RecordAppTransaction",
    "RewriteManifests",
    "Rollback",
    "RowDelta",
    "StaleRowDelta",
    "check_added_files",
    "check_added_paths",
    "check_not_in_table",
]
