"""The id of a Spark streaming query, which a Lamina sink uses as its application id.

Spark writes ``<checkpoint>/metadata`` (``{"id": "<uuid>"}``) when a query first starts and
reads it back on every restart from that checkpoint, so the id is the query's for as long as
its checkpoint lives (``StreamingQuery.id``; each run has another ``runId``). Spark 4.3 hands a
Python streaming sink the ``checkpointLocation`` option, not the id: the sink reads the file
(``query_id``), once the query has started (the file exists from then on). Within
``foreachBatch`` Spark sets the id as the job's local property ``sql.streaming.queryId``
(``running_query_id``).

Delta does the same: its sink records the query id with the batch id in the version it
commits, and a batch at or below the recorded id is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lamina.errors import InvalidArgument
from lamina.io import FileIO

METADATA = "metadata"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
# Spark's session-wide checkpoint root (a named query checkpoints in <root>/<query name>).
CHECKPOINT_ROOT_CONF = "spark.sql.streaming.checkpointLocation"
# Stores Lamina reads (obstore's), by the schemes Hadoop gives them.
_SCHEMES = {
    "s3a": "s3",
    "s3n": "s3",
    "s3": "s3",
    "gs": "gs",
    "abfs": "az",
    "abfss": "az",
    "az": "az",
    "file": "file",
    "memory": "memory",
}


def location_of(checkpoint: str) -> str:
    """A checkpoint location as Lamina's storage names it: local paths and ``file:`` URIs as
    paths, ``s3a://`` as ``s3://``; InvalidArgument for a file system Lamina cannot read (HDFS)."""
    if "://" not in checkpoint and not checkpoint.startswith("file:"):
        return checkpoint
    scheme, _, rest = checkpoint.partition(":")
    store = _SCHEMES.get(scheme.lower())
    if store is None:
        raise InvalidArgument(
            f"the checkpoint {checkpoint!r} is on {scheme}://, which Lamina cannot read to find the query's id: "
            "give the sink option('appId', <an id stable across restarts of the query>)"
        )
    if store == "file":
        return "/" + rest.lstrip("/")
    return f"{store}:{rest}"


def query_id(checkpoint: str, storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The id of the query checkpointed at ``checkpoint``; None if Spark has not written it (yet)."""
    data = FileIO(location_of(checkpoint), storage_options or None).get_optional(METADATA)
    if data is None:
        return None
    try:
        qid = json.loads(data)["id"]
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument(
            f"{checkpoint}/{METADATA} is not a Spark streaming checkpoint's metadata: {data[:200]!r}"
        ) from None
    if not isinstance(qid, str) or not qid:
        raise InvalidArgument(f"{checkpoint}/{METADATA} holds no query id: {data[:200]!r}")
    return qid


def named_checkpoint(spark: Any, query_name: str | None) -> str | None:
    """Where Spark checkpoints a query given no ``checkpointLocation``: ``<root>/<query name>`` under
    the session's checkpoint root, if both are set (otherwise Spark uses a new directory per run)."""
    root = spark.conf.get(CHECKPOINT_ROOT_CONF, None)
    if not root or not query_name:
        return None
    return f"{root.rstrip('/')}/{query_name}"


def running_query_id(df: Any) -> str | None:
    """The id of the streaming query a ``foreachBatch`` function was called for (its batch
    DataFrame ``df``); None outside one."""
    return df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
