"""Adopting existing tables in place: ``lamina.convert(source, location)``.

A directory of Parquet files, a Delta table or an Iceberg table becomes a Lamina table
without a data file copied or rewritten: its files are the new table's first version, as
external files the table reads and never deletes (docs/convert.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lamina.convert.adopt import Adoptable, adopt
from lamina.errors import InvalidArgument
from lamina.table import Table

FORMATS = ("parquet", "delta", "iceberg")


def detect_format(source: Any) -> str:
    """``iceberg`` for a pyiceberg table, a metadata file or a directory with ``metadata/``;
    ``delta`` for a deltalake table or a directory with ``_delta_log/``; else ``parquet``."""
    kind = type(source).__module__.split(".")[0]
    if kind in ("pyiceberg", "deltalake"):
        return "iceberg" if kind == "pyiceberg" else "delta"
    path = str(source)
    if path.endswith(".metadata.json"):
        return "iceberg"
    local = path[len("file://") :] if path.startswith("file://") else path
    if "://" not in local:
        if os.path.isdir(os.path.join(local, "_delta_log")):
            return "delta"
        if os.path.isdir(os.path.join(local, "metadata")):
            return "iceberg"
    return "parquet"


def read_source(
    source: Any, format: str | None = None, *, storage_options: Mapping[str, Any] | None = None, tags: bool = False
) -> Adoptable:
    """What ``convert`` would adopt from ``source``, read and checked, nothing written."""
    kind = format or detect_format(source)
    if kind not in FORMATS:
        raise InvalidArgument(f"format must be one of {', '.join(FORMATS)}, not {kind!r}")
    if kind == "parquet":
        from lamina.convert.parquet_dir import read_parquet_dir

        return read_parquet_dir(str(source), storage_options)
    if kind == "delta":
        from lamina.convert.delta import read_delta

        return read_delta(source, storage_options)
    from lamina.convert.iceberg import read_iceberg

    return read_iceberg(source, storage_options, tags=tags)


def convert(
    source: Any,
    location: str | None = None,
    *,
    format: str | None = None,
    properties: Mapping[str, Any] | None = None,
    tags: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Table:
    """Make ``source`` a Lamina table at ``location`` without copying a data file.

    ``source``: a directory of Parquet files (Hive-style ``k=v/`` directories are identity
    partitions), a Delta table (its directory, or a ``deltalake.DeltaTable``), an Iceberg
    table (its metadata file, its directory, or a pyiceberg ``Table`` from any catalog).
    ``location``: where the Lamina table's metadata and new files go; by default, for a
    Parquet directory, the directory itself (in place, as Delta's CONVERT TO DELTA). A
    Delta or Iceberg table needs a location of its own: the source's own maintenance
    (VACUUM, remove_orphan_files) would delete the files Lamina writes beside its own.
    ``tags``: an Iceberg table's tags become Lamina tags (they must name its current snapshot).

    The source's files are external files of the new table: read in place, never written or
    deleted by it (expiry, orphan cleanup, a catalog's purge), also once a compaction or
    delete replaced them. Refused with nothing written: what Lamina cannot represent
    (``UnconvertibleTable``, naming it), a location that holds a table.
    """
    kind = format or detect_format(source)
    if location is None:
        if kind != "parquet":
            raise InvalidArgument(
                f"converting a {kind} table needs a location for the Lamina table: in the {kind} table's own "
                "directory its maintenance would delete the files Lamina writes. Nothing was written."
            )
        location = str(source)
    found = read_source(source, kind, storage_options=storage_options, tags=tags)
    return adopt(found, location, properties=properties, storage_options=storage_options)


__all__ = ["Adoptable", "FORMATS", "convert", "detect_format", "read_source"]
