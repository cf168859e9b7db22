"""What one SQL statement's run shares: the session, the names it resolves, the temporary
views it registers for Lamina tables, and its result as a DataFrame."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlglot import exp

from lamina.errors import UnsupportedStatement
from lamina.spark.statements.names import Names

# Delta's result columns for its DML statements (all bigint).
AFFECTED = "num_affected_rows"
UPDATED, DELETED, INSERTED = "num_updated_rows", "num_deleted_rows", "num_inserted_rows"
DIALECT = "spark"


def refuse(clause: str, why: str) -> UnsupportedStatement:
    """The error for a clause Lamina does not carry out: nothing was committed."""
    return UnsupportedStatement(f"{clause}: {why}. Nothing was committed", clause)


def text_of(node: exp.Expression) -> str:
    """A node as Spark SQL."""
    return node.sql(dialect=DIALECT)


class Statement:
    """The run of one statement. Views it registers are dropped by ``close()`` (a DataFrame
    made from them stays valid: Spark has analyzed it by then)."""

    def __init__(self, spark: Any, catalog: Any = None, storage_options: Mapping[str, Any] | None = None) -> None:
        self.spark = spark
        self.names = Names(spark, catalog, storage_options)
        self._views: list[str] = []

    def view(self, df: Any) -> str:
        """Register ``df`` as a temporary view of this statement; its name."""
        name = f"__lamina_{uuid.uuid4().hex[:12]}"
        df.createOrReplaceTempView(name)
        self._views.append(name)
        return name

    def close(self) -> None:
        for name in self._views:
            self.spark.catalog.dropTempView(name)
        self._views.clear()

    @property
    def time_zone(self) -> str:
        return self.spark.conf.get("spark.sql.session.timeZone")

    def timestamp(self, node: exp.Expression) -> dt.datetime:
        """A timestamp expression (``'2026-01-05 10:00'``, ``current_timestamp() - INTERVAL 1 DAY``)
        as Spark evaluates it (strings in the session time zone): a UTC instant."""
        micros = self.spark.sql(f"SELECT unix_micros(CAST(({text_of(node)}) AS TIMESTAMP)) AS us").first()["us"]
        if micros is None:
            raise refuse(text_of(node), "the timestamp is NULL")
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(micros))

    def empty(self) -> Any:
        """What Spark returns for DDL: no rows, no columns."""
        from pyspark.sql.types import StructType

        return self.spark.createDataFrame([], StructType([]))

    def result(self, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]) -> Any:
        """A result DataFrame of ``rows`` under ``columns`` ((name, Spark DDL type) pairs)."""
        from pyspark.sql.types import StructType

        schema = StructType.fromDDL(", ".join(f"`{n}` {t}" for n, t in columns))
        return self.spark.createDataFrame([tuple(r) for r in rows], schema)

    def counts(self, affected: int, **others: int) -> Any:
        """Delta's one-row result of a DML statement: ``num_affected_rows``, then ``others`` in order."""
        cols = [(AFFECTED, "bigint"), *[(k, "bigint") for k in others]]
        return self.result(cols, [[int(affected), *[int(v) for v in others.values()]]])
