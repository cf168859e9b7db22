"""``spark.read.format("lamina").load(...)`` of a table on an object store, by Spark's own reader.

A Python data source's rows cross into Spark from Python workers: whole rows (Spark hands a
Python source no column pruning), encoded by Lamina's reader. Where Spark's own Parquet
reader reaches the table (S3 with Hadoop's S3A connector: ``lamina.spark.s3a``), a batch
read of ``format("lamina")`` is ``lamina.spark.read`` instead: Lamina plans on the driver
(the same version, ``where`` pruning, deletion vectors, row lineage columns) and Spark reads
the planned files over ``s3a://``, with its column pruning, row-group filtering and codegen.

``lamina.spark.register`` wraps pyspark's (classic) ``DataFrameReader`` for this: it records
what it is told (format, options, a schema) as it passes it on, and a ``load`` whose format is
``lamina`` is decided here. Everything else goes to the data source as before: local tables
(``lamina.spark.read`` is their native path), the change feed (``readChangeFeed``), a read
given a schema (refused by the data source), several paths, Spark Connect, a store S3A does
not reach (the log says why), and a read with option ``__lamina_python_source=true``. Errors
of the native read are Lamina's typed errors, raised by ``load()`` itself.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql._typing import OptionalPrimitiveType
    from pyspark.sql.readwriter import DataFrameReader
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

_STATE = "_lamina_reader_state"
_INSTALLED = "_lamina_reader_hooks"
_lock = threading.Lock()
_ORIGINAL_LOAD: list[Callable[..., Any]] = []


@dataclass
class ReaderState:
    """What a pyspark ``DataFrameReader`` was told (options case-insensitively, as Spark keeps them)."""

    source: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    has_schema: bool = False

    def set_option(self, key: str, value: OptionalPrimitiveType) -> None:
        from lamina.spark.dataframe_writer import put_option

        put_option(self.options, key, value)


def reader_state(reader: DataFrameReader) -> ReaderState:
    st = reader.__dict__.get(_STATE)
    if st is None:
        st = reader.__dict__[_STATE] = ReaderState()
    return st


def native_load(spark: SparkSession, options: dict[str, str]) -> DataFrame | None:
    """The DataFrame of a ``format("lamina")`` read with ``options`` by Spark's own reader,
    or None where the data source reads it (see the module docstring)."""
    from lamina.spark.changes import reads_changes
    from lamina.spark.dataframe_writer import native_store
    from lamina.spark.datasource_options import _opt, _ref, _time_travel, columns_opt
    from lamina.spark.read import read

    if reads_changes(options):
        return None
    ref = _ref(options)
    if not native_store(spark, ref.io, options, "read"):
        return None
    if _opt(options, "numPartitions") is not None:
        log.debug("format('lamina') on %s: numPartitions does not apply to Spark's own reader", ref.name)
    return read(spark, ref.open(), where=_opt(options, "where"), columns=columns_opt(options), **_time_travel(options))


def _load(
    self: DataFrameReader,
    path: str | list[str] | None = None,
    format: str | None = None,
    schema: StructType | str | None = None,
    **options: OptionalPrimitiveType,
) -> DataFrame:
    original = _ORIGINAL_LOAD[0]
    if format is not None:
        self.format(format)
    if schema is not None:
        self.schema(schema)
    self.options(**options)
    st = reader_state(self)
    if (
        st.source is None
        or st.source.lower() != "lamina"
        or st.has_schema
        or not (path is None or isinstance(path, str))
    ):
        return original(self, path)
    opts = dict(st.options)
    if path is not None:
        opts = {k: v for k, v in opts.items() if k.lower() != "path"}
        opts["path"] = path
    df = native_load(self._spark, opts)
    return df if df is not None else original(self, path)


def _set_options(st: ReaderState, **options: OptionalPrimitiveType) -> None:
    for k, v in options.items():
        st.set_option(k, v)


_RECORDERS: dict[str, Callable[..., None]] = {
    "format": lambda st, source: setattr(st, "source", source),
    "schema": lambda st, schema: setattr(st, "has_schema", True),
    "option": lambda st, key, value: st.set_option(key, value),
    "options": _set_options,
}


def install() -> None:
    """Wrap pyspark's (classic) DataFrameReader, once per process."""
    from pyspark.sql.readwriter import DataFrameReader

    from lamina.spark.dataframe_writer import _recording

    with _lock:
        if DataFrameReader.__dict__.get(_INSTALLED):
            return
        for name, record in _RECORDERS.items():
            setattr(DataFrameReader, name, _recording(getattr(DataFrameReader, name), record, reader_state))
        _ORIGINAL_LOAD.append(DataFrameReader.load)
        # setattr: replacing a method is the hook's purpose, which a plain assignment tells the
        # type checker is a mistake.
        setattr(DataFrameReader, "load", functools.wraps(DataFrameReader.load)(_load))  # noqa: B010
        setattr(DataFrameReader, _INSTALLED, True)
