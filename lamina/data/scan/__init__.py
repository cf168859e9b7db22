"""Scans of one version: plan (prune the manifest tree to file scan tasks), then read rows.

- ``scan``: ``Scan``, the façade (what ``Table.scan`` returns): checks, answers, expiry;
- ``plan``: planning, ``plan_files`` to a ``ScanPlan`` of ``FileScanTask``;
- ``file_read``: ``FileRead``, the Arrow read paths of one data file (plain, exact, with lineage);
- ``read``: ``ArrowRead``, those and the reads of many files at once (runs on the read threads);
- ``positions``: ``DictionaryPositions``, rows a predicate selects by position (deletes).
"""

from lamina.data.scan.plan import FileScanTask, ScanPlan
from lamina.data.scan.scan import Scan, VersionKeeper

__all__ = ["FileScanTask", "Scan", "ScanPlan", "VersionKeeper"]
