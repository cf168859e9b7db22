"""The user API over one table: Table, Scan, operations."""

from lamina.table.scan import FileScanTask, Scan, ScanPlan
from lamina.table.table import Table, create_table, open_table

__all__ = ["FileScanTask", "Scan", "ScanPlan", "Table", "create_table", "open_table"]
