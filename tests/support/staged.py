"""Staged Parquet sources for the copy tests: tables written as Parquet files and read as
lamina.spark's collect reads a ``spark.read.parquet(dir)`` source (``StagedFiles``)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from lamina.data.copy import StagedFile, StagedFiles


def staged_files(directory, *tables: pa.Table, **write) -> StagedFiles:
    """``tables`` written to ``directory`` as ``part-<i>.parquet`` (pyarrow's ``write_table``
    options ``write``), staged in that order."""
    os.makedirs(directory, exist_ok=True)
    files = []
    for i, t in enumerate(tables):
        path = os.path.join(str(directory), f"part-{i}.parquet")
        pq.write_table(t, path, **write)
        files.append(StagedFile.read(path))
    return StagedFiles(files)
