"""System tables ($snapshots, $tags, $branches, $files, $manifests, $schemas) as Spark DataFrames."""

from __future__ import annotations

from typing import Any, Mapping

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
    system table (see ``Table.system_table``) as a DataFrame; metadata is small, so it is
    built on the driver. ``branch``: of that branch (its versions, its files)."""
    table = TableRef.of(target, catalog=catalog, storage_options=storage_options, branch=branch).open()
    return spark.createDataFrame(table.system_table(name, version=version, tag=tag))
