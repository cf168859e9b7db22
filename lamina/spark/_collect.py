"""A Spark DataFrame on the driver as Arrow, for a source small enough to merge there.

``spark.read.parquet(path)`` is how a staged change usually arrives, and collecting it
through Spark costs a job (a few hundred ms even for 100,000 rows, most of a small merge).
When the DataFrame is exactly such a scan (its analyzed plan is the file relation itself:
no filter, projection, sample, cache or partition columns) its rows are the rows of its
files, so pyarrow reads those files directly: tens of ms. Anything else, or anything this
module cannot prove reads alike (a type Spark would read otherwise, files whose schemas
differ, files Spark 2 wrote with its legacy calendar, a non-local file), is collected by
Spark as before. A merge names its keys: those columns are read first, the others behind
them on a thread once a merge needs them (``SourceRead``), so an upsert matches keys while
the rest is read; the files are read into memory once (``StagedFiles``), and where they are
what the table stores, a merge makes them its data files without reading the rest at all
(``lamina.data.copy``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from lamina.data.copy import StagedFile, StagedFiles
from lamina.errors import InvalidArgument
from lamina.operations.rowlevel.source import OnDemand, SourceRead


def collect_arrow(df: Any, max_rows: int, keys: Sequence[str] = ()) -> tuple[pa.Table | SourceRead | None, str]:
    """``(rows, how)``: ``df``'s rows as Arrow (Spark's types), or None when it has more than
    ``max_rows``; ``how`` says which way it came ("parquet files" or "spark").

    With ``keys`` (column names), rows read from the files come as a ``SourceRead``: those
    columns read now, the others on a background thread, so a merge matches keys meanwhile."""
    direct = _bare_parquet_files(df)
    if direct is not None:
        read = _read_alike(df, direct, max_rows, keys)
        if read is not None:
            return (None if read is _TOO_MANY else read), "parquet files"
    rows = df.limit(max_rows + 1).toArrow()
    return (None if rows.num_rows > max_rows else rows), "spark"


_TOO_MANY: Any = object()
# More files than this (a footer each) are left to Spark's parallel read.
MAX_FILES = 256
_PARQUET_FORMAT = "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat"


def _bare_parquet_files(df: Any) -> list[str] | None:
    """The local paths of the files ``df`` scans when its plan is one Parquet file relation
    without partition columns (its output is then every row of every file),
    else None. Not through Spark Connect (no JVM plan to inspect)."""
    try:
        # The analyzed plan with cached data substituted, not the optimized one: the optimizer
        # is costly to call, and a bare scan is bare before it runs. (A projection of every
        # column in order, ``select("*")``, is the one wrapper allowed: it changes no row.)
        # (Each JVM call is a round trip through py4j, slower while the JVM compiles what the
        # source's read ran: as few as will tell.)
        plan = df._jdf.queryExecution().withCachedData()
        node = plan.nodeName()
        if node == "Project" and plan.output().equals(plan.child().output()):
            plan = plan.child()
            node = plan.nodeName()
        if node != "LogicalRelation":
            return None
        rel = plan.relation()
        # (only a HadoopFsRelation has a file format: any other relation fails here, and Spark collects it)
        if rel.fileFormat().getClass().getName() != _PARQUET_FORMAT or rel.partitionSchema().length() != 0:
            return None
        # the relation's own file list: what ``df.inputFiles()`` returns for it, without the
        # optimizer run that call starts (a few ms)
        uris = list(rel.location().inputFiles())
    except Exception:
        return None
    paths = []
    for uri in uris:
        u = urlparse(uri)
        if u.scheme not in ("file", "") or u.netloc not in ("", "localhost"):
            return None
        paths.append(unquote(u.path))
    return paths


def _read_alike(df: Any, paths: list[str], max_rows: int, keys: Sequence[str] = ()) -> pa.Table | SourceRead | None:
    """The files' rows when pyarrow reads them as Spark would (same column names and types,
    one schema for all files, no legacy-calendar file), _TOO_MANY above ``max_rows``, else
    None (left to Spark). With ``keys``: a ``SourceRead`` (see ``collect_arrow``) of the files
    read into memory (``StagedFiles``: a merge may make them data files as they are)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if not paths or len(paths) > MAX_FILES:
        return None
    try:
        if sum(pq.read_metadata(p).num_rows for p in paths) > max_rows:  # (before reading any file)
            return _TOO_MANY
        staged = StagedFiles([StagedFile.read(p) for p in paths])
        schema = staged.files[0].schema
        if any(not f.schema.equals(schema) or _legacy_calendar(f.metadata.metadata or {}) for f in staged.files):
            return None
        have = from_arrow_schema(schema)
    except Exception:
        return None
    want = df.schema
    if [(f.name, f.dataType.simpleString()) for f in have] != [(f.name, f.dataType.simpleString()) for f in want]:
        return None
    others = [n for n in schema.names if n not in keys]
    try:
        if not keys or not others or any(k not in schema.names for k in keys):
            return staged.read(schema.names)
        # (each column read once: the keys now, the others behind them, when needed)
        key_rows = staged.read(list(keys))
    except Exception:
        return None
    return SourceRead(
        schema, key_rows, OnDemand(lambda: _with_others(staged, key_rows, others, schema, paths)), staged=staged
    )


def _with_others(
    staged: StagedFiles, key_rows: pa.Table, others: list[str], schema: pa.Schema, paths: list[str]
) -> pa.Table:
    """Every column of the source: ``key_rows`` beside its ``others``, read now, in ``schema``'s order."""
    try:
        rest = staged.read(others)
    except Exception as e:
        raise InvalidArgument(
            f"merge: the source's Parquet files ({len(paths)}, e.g. {paths[0]}) could not be read: {e}. "
            "Nothing was committed."
        ) from e
    cols = {n: key_rows.column(n) for n in key_rows.column_names}
    cols.update({n: rest.column(n) for n in others})
    return pa.Table.from_arrays([cols[n] for n in schema.names], schema=schema)


def _legacy_calendar(kv: dict) -> bool:
    """Whether Spark would rebase (or refuse) the file's dates and timestamps: written by
    Spark before 3.0, or flagged as written in the legacy hybrid calendar."""
    version = kv.get(b"org.apache.spark.version", b"").decode("utf-8", "replace")
    return (
        b"org.apache.spark.legacyDateTime" in kv or b"org.apache.spark.legacyINT96" in kv or version[:2] in ("1.", "2.")
    )
