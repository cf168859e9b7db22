"""System tables ($snapshots, $tags, $branches, $files, $manifests, $schemas) as Spark DataFrames."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lamina.errors import InvalidArgument
from lamina.spark._target import TableRef


def system_table(
    spark: Any,
    target: Any,
    name: str,
    *,
    version: int | str | None = None,
    tag: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    catalog: Any = None,
    branch: str | None = None,
) -> Any:
    """``lamina.spark.system_table(spark, "warehouse/orders", "$snapshots")``: the Arrow
    system table (see ``Table.inspect``) as a DataFrame; metadata is small, so it is
    built on the driver. ``branch``: of that branch (its versions, its files)."""
    if version is not None and tag is not None:
        raise InvalidArgument("pass version or tag, not both")
    table = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch).open()
    return spark.createDataFrame(table.inspect.table(name, version=version if tag is None else tag))
