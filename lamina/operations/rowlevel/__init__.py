"""Row-level changes: delete, update and merge, as one operation re-applied to each base.

The package is split by concern:

- ``delta``: the operation, ``RowDelta`` (files planned, per-file outcomes cached by the
  file's identity, DVs or copy-on-write, the rows written), and ``PositionDelta``, a change
  whose positions and written files an engine computed;
- ``outcome``: what a change does to one data file (``FileOutcome``) and ``split_outcome``;
- ``delete_update``: delete and update by a predicate (their operations and per-file functions);
- ``merge``: the user-facing merge builder (``MergeBuilder``, ``MergeClauses``, ``MergeResult``);
- ``keys``: merge keys joined and looked up (pure functions of arrays);
- ``source``: a merge source still being read (``SourceRead``, ``OnDemand``).

The names users and engines build on are importable from here.
"""

from lamina.operations.rowlevel.delta import PositionDelta, RowDelta
from lamina.operations.rowlevel.merge import MergeBuilder, MergeClauses, MergeResult
from lamina.operations.rowlevel.source import OnDemand, SourceRead

__all__ = ["MergeBuilder", "MergeClauses", "MergeResult", "OnDemand", "PositionDelta", "RowDelta", "SourceRead"]
