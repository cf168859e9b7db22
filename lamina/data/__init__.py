"""The data files of one version: scans (plan, read), the writer, deletion vectors, and
the markers of writes in flight."""

from lamina.data.scan import FileScanTask, Scan, ScanPlan

__all__ = ["FileScanTask", "Scan", "ScanPlan"]
