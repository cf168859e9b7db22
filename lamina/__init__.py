"""Lamina: an open table format for data lakes.

import lamina
t = lamina.create_table("/tmp/events", schema, partition_by=["day(ts)"])
t.append(batch)
lamina.open_table("/tmp/events").scan(where="id >= 10").to_arrow()
"""

from lamina.catalog import load_catalog  # after lamina.table: catalogs build on tables
from lamina.commit import CommitOptions, CommitResult
from lamina.convert import convert  # tables of other formats adopted in place
from lamina.spec.properties import TableProperties, WriterProperties
from lamina.table import FileScanTask, Scan, Table, create_table, open_table

__version__ = "0.1.0"
__all__ = [
    "convert",
    "CommitOptions",
    "CommitResult",
    "FileScanTask",
    "Scan",
    "Table",
    "TableProperties",
    "WriterProperties",
    "create_table",
    "load_catalog",
    "open_table",
    "__version__",
]
