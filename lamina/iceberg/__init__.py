"""The Iceberg view: Iceberg v3 table metadata for every retained version of a Lamina table,
so that Iceberg readers (pyiceberg, DuckDB, Trino, Spark, Snowflake...) read it as it is.
See docs/iceberg.md. The view is derived state, written after each commit lands
(``lamina.table`` runs it as a commit hook when the table property ``iceberg.enabled`` is
``true``; in the background unless ``iceberg.sync-mode`` is ``sync``: ``flush`` waits for
it); Lamina's version log stays the truth and its commit point the only commit point.
"""

from lamina.iceberg.metadata_files import HINT_PATH, Head, metadata_path, read_head
from lamina.iceberg.snapshots import snapshot_id_of
from lamina.iceberg.view import SyncResult, is_enabled, sync
from lamina.iceberg.writer import flush

__all__ = [
    "HINT_PATH",
    "Head",
    "SyncResult",
    "flush",
    "is_enabled",
    "metadata_path",
    "read_head",
    "snapshot_id_of",
    "sync",
]
