"""``df.write.format("lamina")`` and ``df.writeStream.format("lamina")`` as Spark users write them:
every save mode, Spark's own ``partitionBy``, ``saveAsTable`` into a Lamina catalog, and a
streaming sink's configuration checked by ``start()``.

Spark 4.3 plans a batch write to a Python data source (``pyspark.sql.datasource``) as a data
source V2 table that reports no partitioning and takes no save mode but append and overwrite
(the Python writer is told only ``overwrite``), so on its own Spark

- refuses ``ErrorIfExists`` (the default) and ``Ignore`` (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``);
- compares ``partitionBy(...)`` with the table's partitioning, which the data source cannot report,
  and refuses it ("do not match the existing table's");
- sends ``saveAsTable`` to its own session catalog.

And a streaming sink is made by the query's first micro-batch, so a bad option fails the query
then, in its own thread, not ``start()``; the sink is not told the stream's ``partitionBy``.

``lamina.spark.register(spark)`` therefore wraps pyspark's ``DataFrameWriter`` and
``DataStreamWriter`` (classic pyspark, not Spark Connect): each records what it is told (format,
mode, partitionBy, options: ``WriterState``) as it passes it on, and a write whose format is
``lamina`` is decided here, on the driver, before Spark plans it. Any other format is untouched.

- **Batch** (``save``; ``saveAsTable`` with option ``catalog``: the name is the catalog's
  identifier): the write is planned as the data source plans it (``WriteTarget.prepare``: every
  option, the DataFrame against the table, Spark's partition columns against the table's
  partitioning), so its errors are Lamina's typed errors, raised before a task runs;
  ErrorIfExists on an existing table is ``TableAlreadyExists``, Ignore on one writes nothing
  (no Spark job). Spark then runs the write as an append (an overwrite for Overwrite) with the
  save mode and the partition columns as options (``SAVE_MODE_OPTION``,
  ``PARTITION_COLUMNS_OPTION``): the data source creates the table, partitioned, or (for
  ErrorIfExists and Ignore) fails or does nothing if another writer created it meanwhile.
- **Streaming** (``start``): the sink is planned once (``LaminaStreamWriter``) with the stream's
  schema and options before Spark starts the query, so its errors are raised by ``start()``;
  Spark's partition columns reach the sink as an option (Spark 4.3 passes a Python sink
  none of its ``partitionBy``), and so does the checkpoint of a query Spark checkpoints under
  the session's ``spark.sql.streaming.checkpointLocation`` by its name (the sink is handed
  neither: it needs the checkpoint to read the query's id).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lamina.errors import InvalidArgument

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql._typing import OptionalPrimitiveType
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from lamina.io import FileIO
    from lamina.spark.datasource_writer import WriteTarget

log = logging.getLogger(__name__)

_STATE = "_lamina_writer_state"
_INSTALLED = "_lamina_writer_hooks"
_lock = threading.Lock()
# The pyspark methods wrapped, as they were: (class name, method) -> function.
_ORIGINAL: dict[tuple[str, str], Callable[..., Any]] = {}
# Spark's names of its save modes (SaveMode.valueOf, case-insensitively), as Lamina's.
_SAVE_MODES = {
    "overwrite": "overwrite",
    "append": "append",
    "ignore": "ignore",
    "error": "errorifexists",
    "errorifexists": "errorifexists",
    "default": "errorifexists",
}


@dataclass
class WriterState:
    """What a pyspark writer was told, as Spark keeps it (options case-insensitively: a later
    key replaces one that differs only in case)."""

    df: DataFrame | None = None  # the DataFrame written (recorded by the writer's __init__)
    source: str | None = None
    mode: str | None = None  # batch: the save mode as given; streaming: the output mode
    partition_by: list[str] | None = None
    options: dict[str, str] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)  # bucketBy, sortBy, clusterBy

    @property
    def is_lamina(self) -> bool:
        return self.source is not None and self.source.lower() == "lamina"

    def set_option(self, key: str, value: OptionalPrimitiveType) -> None:
        put_option(self.options, key, value)

    def with_path(self, path: str | None) -> dict[str, str]:
        """The options with ``path`` (given to ``save``/``start``), refused if given twice (as Spark does)."""
        opts = dict(self.options)
        if path is not None:
            if any(k.lower() == "path" for k in opts):
                raise InvalidArgument("the table is given twice: as option('path') and to save()/start(); give it once")
            opts["path"] = path
        return opts


def put_option(options: dict[str, str], key: str, value: OptionalPrimitiveType) -> None:
    """Set ``key`` in ``options`` as Spark does: as text (None: removed), replacing a key that
    differs only in case."""
    from pyspark.sql.utils import to_str

    for k in [k for k in options if k.lower() == key.lower()]:
        del options[k]
    v = to_str(value)
    if v is not None:
        options[key] = v


def state_of(writer: DataFrameWriter | DataStreamWriter) -> WriterState:
    """The recorded state of a pyspark ``DataFrameWriter`` or ``DataStreamWriter``."""
    st = writer.__dict__.get(_STATE)
    if st is None:
        st = writer.__dict__[_STATE] = WriterState()
    return st


def save_mode(mode: str | None) -> str:
    """Spark's save mode name (None: the default, ErrorIfExists) as Lamina's."""
    return _SAVE_MODES[(mode or "default").lower()]


# -- batch ----------------------------------------------------------------------------------


def save_lamina(st: WriterState, path: str | None) -> None:
    """Write the DataFrame of a writer in state ``st`` to the Lamina table ``path`` (or option ``path``) as Spark's
    save mode ``st.mode`` says, partitioned by ``st.partition_by`` (see the module docstring)."""
    from lamina.spark.datasource_options import PARTITION_COLUMNS_OPTION, SAVE_MODE_OPTION
    from lamina.spark.datasource_writer import WriteTarget

    if st.unsupported:
        raise InvalidArgument(
            f"format('lamina') does not take {', '.join(st.unsupported)}: partition by bucket(N, column) "
            "(partitionBy('bucket(16, id)')), order files with the table property write.sort-order"
        )
    df = st.df
    assert df is not None  # recorded by the writer's __init__
    opts = st.with_path(path)
    mode = save_mode(st.mode)
    if st.partition_by is not None:
        opts[PARTITION_COLUMNS_OPTION] = json.dumps(st.partition_by)
    opts[SAVE_MODE_OPTION] = mode
    overwrite = mode == "overwrite"
    target = WriteTarget.prepare(opts, df.schema, overwrite)  # typed errors now, before Spark plans
    if target.skip:
        log.info("mode('ignore'): table %s exists; nothing written", target.ref.name)
        return None
    if native_store(df.sparkSession, target.ref.io, opts, "written"):
        return _save_natively(df, target, opts)
    planned = df.write.format("lamina").mode("overwrite" if overwrite else "append").options(**opts)
    _ORIGINAL[("DataFrameWriter", "save")](planned)
    return None


def native_store(spark: SparkSession, io: FileIO, options: Mapping[str, str], what: str) -> bool:
    """Whether ``format("lamina")`` takes Spark's own Parquet reader and writer for the table at
    ``io``: a table on an object store that S3A reaches (``lamina.spark.s3a.native_root``),
    unless the options ask for the Python data source (``PYTHON_SOURCE_OPTION``). Local
    tables stay with the data source (``lamina.spark.read`` / ``write`` are their native path)."""
    from lamina.spark.datasource_options import PYTHON_SOURCE_OPTION, _bool_opt
    from lamina.spark.s3a import native_root

    if io.is_local or _bool_opt(options, PYTHON_SOURCE_OPTION):
        return False
    return native_root(spark, io, what) is not None


def _save_natively(df: DataFrame, target: WriteTarget, opts: Mapping[str, str]) -> None:
    """The write ``target`` (planned by ``WriteTarget.prepare``) by Spark's native writer, one
    version committed on the driver (``lamina.spark.write.write_ref``)."""
    from lamina.errors import TableAlreadyExists
    from lamina.spark.datasource_options import _bool_opt, partition_by_opt
    from lamina.spark.write import write_ref

    app = None
    if target.app_id is not None:
        assert target.app_seq is not None  # txnAppId and txnVersion go together (WriteTarget.prepare)
        app = (target.app_id, target.app_seq)
    try:
        write_ref(
            df,
            target.ref,
            target.mode,
            partition_by=partition_by_opt(opts),
            where=target.where,
            app_transaction=app,
            schema_mode="merge" if _bool_opt(opts, "mergeSchema") else None,
            exclusive=target.save_mode in ("errorifexists", "ignore"),
        )
    except TableAlreadyExists:
        if target.save_mode != "ignore":
            raise
        log.info("mode('ignore'): %s was created by another writer meanwhile; nothing written", target.ref.name)
    return None


def _applied(
    writer: DataFrameWriter,
    format: str | None,
    mode: str | None,
    partitionBy: str | list[str] | None,
    options: dict[str, OptionalPrimitiveType],
) -> WriterState:
    """The state of a ``DataFrameWriter`` once the arguments of ``save``/``saveAsTable`` are
    applied to it, as pyspark's own methods apply them."""
    writer.mode(mode).options(**options)
    if partitionBy is not None:
        writer.partitionBy(partitionBy)
    if format is not None:
        writer.format(format)
    return state_of(writer)


def _save(
    self: DataFrameWriter,
    path: str | None = None,
    format: str | None = None,
    mode: str | None = None,
    partitionBy: str | list[str] | None = None,
    **options: OptionalPrimitiveType,
) -> None:
    st = _applied(self, format, mode, partitionBy, options)
    if not st.is_lamina:
        return _ORIGINAL[("DataFrameWriter", "save")](self, path)
    return save_lamina(st, path)


def _save_as_table(
    self: DataFrameWriter,
    name: str,
    format: str | None = None,
    mode: str | None = None,
    partitionBy: str | list[str] | None = None,
    **options: OptionalPrimitiveType,
) -> None:
    st = _applied(self, format, mode, partitionBy, options)
    if not st.is_lamina:
        return _ORIGINAL[("DataFrameWriter", "saveAsTable")](self, name)
    has = {k.lower() for k in st.options}
    if "catalog" not in has:
        if "path" not in has:
            raise InvalidArgument(
                f"saveAsTable({name!r}) with format('lamina') names a table of a Lamina catalog: add "
                "option('catalog', <catalog URI>) (e.g. 'sqlite:///warehouse/catalog.db'), or save(<location>)"
            )
        return _ORIGINAL[("DataFrameWriter", "saveAsTable")](self, name)  # Spark's session catalog, as Spark does it
    if "path" in has:
        raise InvalidArgument(
            f"saveAsTable({name!r}) into a Lamina catalog places the table itself: drop option('path')"
        )
    return save_lamina(st, name)


# -- streaming --------------------------------------------------------------------------------


def check_stream(st: WriterState, path: str | None) -> None:
    """Plan the streaming sink now, as its first micro-batch will (``LaminaStreamWriter``): a bad
    option, neither a checkpoint nor ``appId``, a table that is needed and missing, a stream that does not fit
    the table or its partitioning raise here. Nothing is written."""
    from lamina.spark.datasource_options import PARTITION_COLUMNS_OPTION
    from lamina.spark.datasource_writer import LaminaStreamWriter

    assert st.df is not None  # recorded by the writer's __init__
    opts = st.with_path(path)
    if st.partition_by is not None:
        opts[PARTITION_COLUMNS_OPTION] = json.dumps(st.partition_by)
    LaminaStreamWriter(opts, st.df.schema, overwrite=(st.mode or "append").lower() == "complete")


def _start(
    self: DataStreamWriter,
    path: str | None = None,
    format: str | None = None,
    outputMode: str | None = None,
    partitionBy: str | list[str] | None = None,
    queryName: str | None = None,
    **options: OptionalPrimitiveType,
) -> StreamingQuery:
    self.options(**options)  # as pyspark's start applies them
    if outputMode is not None:
        self.outputMode(outputMode)
    if partitionBy is not None:
        self.partitionBy(partitionBy)
    if format is not None:
        self.format(format)
    if queryName is not None:
        self.queryName(queryName)
    st = state_of(self)
    if st.is_lamina:
        from lamina.spark.checkpoint import named_checkpoint
        from lamina.spark.datasource_options import CHECKPOINT_OPTION, PARTITION_COLUMNS_OPTION

        if not any(k.lower() == "checkpointlocation" for k in st.options):  # the session's root and the query's name
            name = next((v for k, v in st.options.items() if k.lower() == "queryname"), None)
            assert st.df is not None  # recorded by the writer's __init__
            checkpoint = named_checkpoint(st.df.sparkSession, name)
            if checkpoint is not None:
                self.option(CHECKPOINT_OPTION, checkpoint)
        check_stream(st, path)
        if st.partition_by is not None:  # (Spark hands a Python sink none of its partitionBy)
            self.option(PARTITION_COLUMNS_OPTION, json.dumps(st.partition_by))
    return _ORIGINAL[("DataStreamWriter", "start")](self, path)


# -- recording ---------------------------------------------------------------------------------


def _columns(cols: tuple) -> list[str]:
    return list(cols[0]) if len(cols) == 1 and isinstance(cols[0], (list, tuple)) else list(cols)


def _set_mode(st: WriterState, mode: str | None) -> None:
    if mode is not None:
        st.mode = mode


def _set_options(st: WriterState, **options: OptionalPrimitiveType) -> None:
    for k, v in options.items():
        st.set_option(k, v)


def _not_a_source(st: WriterState, *_: Any) -> None:
    st.source = None  # foreach / foreachBatch: the query's sink is the function


_RECORDERS: dict[str, dict[str, Callable[..., None]]] = {
    "common": {
        "__init__": lambda st, df: setattr(st, "df", df),
        "format": lambda st, source: setattr(st, "source", source),
        "partitionBy": lambda st, *cols: setattr(st, "partition_by", _columns(cols)),
        "option": lambda st, key, value: st.set_option(key, value),
        "options": _set_options,
    },
    "DataFrameWriter": {
        "mode": _set_mode,
        "bucketBy": lambda st, *a, **k: st.unsupported.append("bucketBy"),
        "sortBy": lambda st, *a, **k: st.unsupported.append("sortBy"),
        "clusterBy": lambda st, *a, **k: st.unsupported.append("clusterBy"),
    },
    "DataStreamWriter": {
        "outputMode": _set_mode,
        "queryName": lambda st, name: st.set_option("queryName", name),
        "foreach": _not_a_source,
        "foreachBatch": _not_a_source,
    },
}


def _recording(
    original: Callable[..., Any], record: Callable[..., None], state: Callable[[Any], Any] | None = None
) -> Callable[..., Any]:
    """``original`` (a pyspark writer or reader method returning it, or its ``__init__``),
    recording its arguments into its state (``state``, default the writer's ``state_of``) once it
    accepted them."""
    get = state or state_of

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        record(get(self), *args, **kwargs)
        return out

    return method


def install() -> None:
    """Wrap pyspark's (classic) DataFrameWriter and DataStreamWriter, once per process."""
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    wrapped: list[tuple[type, dict[str, Callable[..., Any]]]] = [
        (DataFrameWriter, {"save": _save, "saveAsTable": _save_as_table}),
        (DataStreamWriter, {"start": _start}),
    ]
    with _lock:
        for cls, actions in wrapped:
            if cls.__dict__.get(_INSTALLED):
                continue
            for name, record in {**_RECORDERS["common"], **_RECORDERS[cls.__name__]}.items():
                setattr(cls, name, _recording(getattr(cls, name), record))
            for name, fn in actions.items():
                _ORIGINAL[(cls.__name__, name)] = getattr(cls, name)
                setattr(cls, name, functools.wraps(getattr(cls, name))(fn))
            setattr(cls, _INSTALLED, True)
