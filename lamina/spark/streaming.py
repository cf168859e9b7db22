"""Exactly-once streaming writes through ``foreachBatch``: appends and merges (the upsert pattern).

Each micro-batch's version records ``{application id: batch id}``, and a batch whose id is not
above the one recorded for the application is skipped: a query restarted from its checkpoint
replays the batch it had not checkpointed as done, and that batch, if its version landed
before the crash, is not applied twice. The application id is the streaming query's id (Spark
keeps it in the checkpoint, so it is the same across restarts: lamina.spark.checkpoint), as
Delta's idempotent writes take it; ``app_id`` overrides it (two writers of one query into one
table need their own). ``writeStream.format("lamina")`` does the same for appends through the
Python data source.

- ``foreach_batch_writer(target)``: each batch appended (``lamina.spark.write(...,
  app_transaction=(app id, batch id))``).
- ``foreach_batch_merge(target, on, clauses)``: each batch merged (``lamina.spark.merge``, the
  clauses added by ``clauses(builder)``), its version recording the batch: the merge and the
  record are one transaction (``Table.transaction()``: the merge, then
  ``RecordAppTransaction``), so the version either holds both or does not exist. A concurrent
  change to the files the merge touched recomputes it (up to ``max_attempts``); a concurrent
  commit of the same batch (a second run of the query) makes this one a no-op.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lamina.commit import CommitResult
from lamina.errors import InvalidArgument, TransactionAlreadyCommitted
from lamina.operations import MergeResult, RecordAppTransaction, StaleRowDelta
from lamina.spark._target import TableRef
from lamina.spark.checkpoint import running_query_id

log = logging.getLogger(__name__)


def _app_id(app_id: str | None, batch_df: Any) -> str:
    """The id batches are recorded under: ``app_id``, else the running query's (see the module docstring)."""
    if app_id is not None:
        return app_id
    qid = running_query_id(batch_df)
    if not qid:
        raise InvalidArgument(
            "not called from a streaming query's foreachBatch: pass app_id=, an id stable across "
            "restarts of the query that feeds it"
        )
    return qid


def _check_app_id(app_id: str | None) -> None:
    if app_id is not None and (not isinstance(app_id, str) or not app_id):
        raise InvalidArgument(
            "app_id must be a non-empty string, stable across restarts of the query (or None: the query's id)"
        )


def foreach_batch_writer(
    uri: Any,
    app_id: str | None = None,
    *,
    partition_by: str | Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    schema_mode: str | None = None,
    branch: str | None = None,
    catalog: Any = None,
) -> Callable[[Any, int], CommitResult | None]:
    """A ``foreachBatch`` function appending each micro-batch to ``uri`` (a target, as
    ``lamina.spark.write`` takes it) exactly once. ``app_id``: see the module docstring.
    ``schema_mode="merge"``: a batch with new (or wider) columns evolves the table in the
    version that appends it (see ``write``). ``branch``: append to that branch."""
    _check_app_id(app_id)

    def write_batch(batch_df: Any, batch_id: int) -> CommitResult | None:
        from lamina.spark.write import write

        return write(
            batch_df,
            uri,
            "append",
            partition_by=partition_by,
            storage_options=storage_options,
            app_transaction=(_app_id(app_id, batch_df), int(batch_id)),
            schema_mode=schema_mode,
            branch=branch,
            catalog=catalog,
        )

    return write_batch


def foreach_batch_merge(
    target: Any,
    on: str | Sequence[str],
    clauses: Callable[[Any], Any],
    *,
    app_id: str | None = None,
    mode: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    catalog: Any = None,
    branch: str | None = None,
    max_attempts: int = 5,
) -> Callable[[Any, int], MergeResult | None]:
    """A ``foreachBatch`` function merging each micro-batch into ``target`` on key(s) ``on``, exactly
    once across restarts of the query (see the module docstring)::

        stream.writeStream.foreachBatch(foreach_batch_merge(
            "warehouse/orders", on="id",
            clauses=lambda m: m.when_matched_update_all().when_not_matched_insert_all(),
        )).option("checkpointLocation", "chk/orders").start()

    ``clauses(builder)`` adds the merge's clauses to a ``lamina.spark.SparkMergeBuilder`` (any of
    them, with Spark SQL conditions). Returns the merge's result, or None for a batch already
    committed (nothing done)."""
    _check_app_id(app_id)
    if max_attempts < 1:
        raise InvalidArgument(f"max_attempts must be at least 1, got {max_attempts}")
    ref = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch)

    def merge_batch(batch_df: Any, batch_id: int) -> MergeResult | None:
        from lamina.spark.merge_into import merge

        app, seq = _app_id(app_id, batch_df), int(batch_id)
        for attempt in range(max_attempts):
            table = ref.open()
            done = table.metadata.app_transactions.get(app)
            if done is not None and done >= seq:
                log.info("batch %d of %s is in %s already (version records %d): skipped", seq, app, table.uri, done)
                return None
            try:
                with table.transaction() as tx:  # commits when the block ends, aborts on an exception
                    builder = merge(tx, batch_df, on, mode=mode)
                    clauses(builder)
                    result = builder.execute()
                    tx.add_operation(RecordAppTransaction(app, seq))
            except TransactionAlreadyCommitted:  # the same batch landed meanwhile (another run of the query)
                log.info("batch %d of %s was committed to %s meanwhile: skipped", seq, app, table.uri)
                return None
            except StaleRowDelta:  # a concurrent change to the files it merged into: again, on the newest version
                if attempt == max_attempts - 1:
                    raise
                continue
            assert tx.result is not None  # the block committed it
            return dataclasses.replace(
                result, version=tx.result.version, operation=tx.result.operation, metrics=tx.result.metrics
            )
        raise AssertionError("unreachable")

    return merge_batch
