"""The ``lamina`` data source's options: their names, how each is read, the table they name.

Options arrive lower-cased from Spark; the names below are matched case-insensitively.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypedDict

from lamina.errors import InvalidArgument
from lamina.io.fileio import S3_OPTION_ENV
from lamina.spark._target import TableRef
from lamina.spec.partition import split_top_level as split_entries

_STORAGE_KEYS = set(S3_OPTION_ENV) | {"timeout", "max_retries"}


def _opt(options: Mapping[str, str], name: str) -> str | None:
    v = options.get(name.lower())
    if v is None:
        v = options.get(name)
    return None if v is None or str(v).strip() == "" else str(v)


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """The object-store options among the data source options (``endpoint``, ``s3.region``, …)."""
    out = {}
    for k, v in options.items():
        key = k.lower()
        if key.startswith("s3."):
            key = key[3:]
        if key in _STORAGE_KEYS:
            out[key] = str(v)
    return out


def _path(options: Mapping[str, str]) -> str:
    uri = _opt(options, "path")
    if uri is None:
        raise InvalidArgument("the lamina data source needs a path: .load(uri), .save(uri) or option('path', uri)")
    return uri


def _int_opt(options: Mapping[str, str], name: str) -> int | None:
    v = _opt(options, name)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        raise InvalidArgument(f"option {name} must be an integer, got {v!r}") from None


def _bool_opt(options: Mapping[str, str], name: str) -> bool:
    v = _opt(options, name)
    if v is None:
        return False
    if v.lower() not in ("true", "false"):
        raise InvalidArgument(f"option {name} must be true or false, got {v!r}")
    return v.lower() == "true"


def timestamp_opt(options: Mapping[str, str], name: str) -> str | int | None:
    """A time option: ISO 8601 text, or epoch milliseconds (digits)."""
    ts = _opt(options, name)
    return int(ts) if ts is not None and ts.isdigit() else ts


def _json_strings(text: str) -> list[str] | None:
    """``text`` as a JSON array of strings; None if it is not one."""
    try:
        out = json.loads(text)
    except ValueError:
        return None
    return out if isinstance(out, list) and all(isinstance(n, str) for n in out) else None


def columns_opt(options: Mapping[str, str]) -> list[str] | None:
    """The ``columns`` option: the columns to read (table columns, ``_row_id``,
    ``_last_updated_version``), comma-separated or a JSON array of names; None: every column."""
    v = _opt(options, "columns")
    if v is None:
        return None
    if v.lstrip().startswith("["):
        names = _json_strings(v)
        if names is None:
            raise InvalidArgument(
                f"option columns must be a JSON array of column names or names separated by commas, got {v!r}"
            )
    else:
        names = [n.strip() for n in v.split(",")]
    if not names or any(not n for n in names):
        raise InvalidArgument(f"option columns names an empty column: {v!r}")
    return names


# Spark's own partitionBy(...) columns as a JSON array, under Spark's name for them
# (DataSourceUtils.PARTITIONING_COLUMNS_KEY): Spark 4.3 hands a Python data source none of
# them, batch or streaming; lamina.spark.dataframe_writer does.
PARTITION_COLUMNS_OPTION = "__partition_columns"
# Spark's save mode of a batch write, which Spark does not hand a Python data source (it
# refuses errorifexists and ignore): set by lamina.spark.dataframe_writer.
SAVE_MODE_OPTION = "__lamina_save_mode"
SAVE_MODES = ("errorifexists", "ignore", "append", "overwrite")
# A streaming query's checkpoint when Spark hands the sink none (the session's checkpoint root and
# the query's name): set by lamina.spark.dataframe_writer.
CHECKPOINT_OPTION = "__lamina_checkpoint"
# "true": read or write a table on an object store through this Python data source even where
# Spark's own Parquet reader and writer reach it (lamina.spark.dataframe_writer.native_store):
# what the benchmarks compare, and the fallback's tests use.
PYTHON_SOURCE_OPTION = "__lamina_python_source"


def partition_by_opt(options: Mapping[str, str]) -> list[str] | None:
    """The write's partitioning entries: Spark's ``partitionBy("month", "day(ts)")`` or the
    ``partitionBy`` option (``"day(ts), bucket(16, id)"``); each entry a column (identity) or a
    transform, as ``partition_by=`` takes them. None: not given."""
    text = _opt(options, "partitionBy")
    entries = None if text is None else [e.strip() for e in split_entries(text)]
    given = _opt(options, PARTITION_COLUMNS_OPTION)
    if given is None:
        return entries
    cols = _json_strings(given)
    if cols is None:
        raise InvalidArgument(
            f"option {PARTITION_COLUMNS_OPTION} must be a JSON array of partitionBy entries, got {given!r}"
        )
    cols = [c.strip() for c in cols]
    if entries is not None and entries != cols:
        raise InvalidArgument(
            f"partitionBy{tuple(cols)} and option partitionBy {text!r} differ: give the partitioning once"
        )
    return cols


def save_mode_opt(options: Mapping[str, str], overwrite: bool) -> str:
    """The write's save mode: the one lamina.spark.dataframe_writer passes, else what Spark's
    ``overwrite`` flag says (append or overwrite)."""
    mode = _opt(options, SAVE_MODE_OPTION)
    if mode is None:
        return "overwrite" if overwrite else "append"
    mode = mode.lower()
    if mode not in SAVE_MODES or (mode == "overwrite") != overwrite:
        raise InvalidArgument(f"option {SAVE_MODE_OPTION} {mode!r} does not fit a write with overwrite={overwrite}")
    return mode


class TimeTravel(TypedDict):
    """The version a read's options select, as ``resolve_scan`` and ``lamina.spark.read`` take it."""

    version: str | None
    timestamp: str | int | None
    tag: str | None


def _time_travel(options: Mapping[str, str]) -> TimeTravel:
    return {
        "version": _opt(options, "versionAsOf"),  # a non-numeric value names a tag
        "timestamp": timestamp_opt(options, "timestampAsOf"),
        "tag": _opt(options, "tag"),
    }


def _ref(options: Mapping[str, str]) -> TableRef:
    """The table the options name: ``path`` is a location, or an identifier when ``catalog`` is
    set; ``branch``: that branch of it (reads and writes are the branch's)."""
    return TableRef.from_options(
        _path(options),
        storage_options(options),
        _opt(options, "catalog"),
        _opt(options, "catalog.password"),
        _opt(options, "branch"),
    )
