"""Exactly-once streaming appends through ``foreachBatch``.

Each micro-batch is written with ``lamina.spark.write(..., app_transaction=(app_id, batch_id))``:
the version records the batch id for ``app_id`` and a batch whose id is not above
the recorded one is skipped, so a restarted query that replays its last batch
never appends it twice. ``writeStream.format("lamina").option("appId", ...)`` does
the same through the Python data source.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from lamina.errors import InvalidArgument


def foreach_batch_writer(
    uri: str,
    app_id: str,
    *,
    partition_by: str | Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    schema_mode: str | None = None,
    branch: str | None = None,
) -> Callable[[Any, int], int | None]:
    """A ``foreachBatch`` function appending each micro-batch to ``uri`` exactly once.

    ``app_id`` must be stable across restarts of the query (e.g. its name); two
    queries writing one table need different ids. ``schema_mode="merge"``: a batch with new
    (or wider) columns evolves the table in the version that appends it (see ``write``).
    ``branch``: append to that branch (see ``write``).
    """
    if not isinstance(app_id, str) or not app_id:
        raise InvalidArgument("foreach_batch_writer needs a non-empty app_id, stable across restarts of the query")

    def write_batch(batch_df: Any, batch_id: int) -> int | None:
        from lamina.spark.write import write

        return write(batch_df, uri, "append", partition_by=partition_by, storage_options=storage_options,
                     app_transaction=(app_id, int(batch_id)), schema_mode=schema_mode, branch=branch)

    return write_batch
