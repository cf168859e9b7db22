"""Scans of one version: plan (prune the manifest tree to file scan tasks), then read rows.

- ``scan``: ``Scan``, the façade (what ``Table.scan`` returns): checks, answers, expiry;
- ``plan``: planning, ``plan_files`` to a ``ScanPlan`` of ``FileScanTask``;
- ``read``: ``ArrowRead``, the Arrow read paths of data files (plain, exact, with lineage);
- ``positions``: ``DictionaryPositions``, rows a predicate selects by position (deletes).
"""

from lamina.data.scan.plan import FileScanTask, ScanPlan
from lamina.data.scan.scan import Scan, VersionKeeper

__all__ = ["FileScanTask", "Scan", "ScanPlan", "VersionKeeper"]
