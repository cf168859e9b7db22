"""The user API over one table: Table, Transaction, Scan, and the engine write session."""

from lamina.data.scan import FileScanTask, Scan, ScanPlan
from lamina.table.engine import WriteSession
from lamina.table.table import Table, create_table, open_table
from lamina.table.transaction import Transaction

__all__ = ["FileScanTask", "Scan", "ScanPlan", "Table", "Transaction", "WriteSession", "create_table", "open_table"]
