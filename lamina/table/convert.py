"""Turning what users pass into what operations take: data as Arrow, a new table's schema,
app transactions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lamina.errors import InvalidArgument, SchemaMismatch


def to_arrow(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    table = _if_pandas(data, lambda df: pa.Table.from_pandas(df, preserve_index=False))
    if table is not None:
        return table
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    raise SchemaMismatch(
        f"cannot write {type(data).__name__}: pass a pyarrow Table, RecordBatch, RecordBatchReader or pandas DataFrame"
    )


def schema_of(source: Any) -> pa.Schema:
    """A new table's schema: ``source`` if it is a pyarrow Schema, else the schema of data (a
    pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame, or an object with an
    Arrow C schema or stream, such as a Polars DataFrame). Data gives its schema only: its rows
    are not read (a reader's or stream's are left unread)."""
    if isinstance(source, pa.Schema):
        return source
    if isinstance(source, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return source.schema
    schema = _if_pandas(source, lambda df: pa.Schema.from_pandas(df, preserve_index=False))
    if schema is not None:
        return schema
    if hasattr(source, "__arrow_c_schema__"):
        return pa.schema(source)
    if hasattr(source, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(source).schema
    raise SchemaMismatch(
        f"a table's schema is a pyarrow.Schema, or data to take it from (a pyarrow Table, RecordBatch, "
        f"RecordBatchReader or pandas DataFrame), not {type(source).__name__}"
    )


def _if_pandas(data: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(data)`` if ``data`` is a pandas DataFrame (a column Arrow cannot convert:
    SchemaMismatch naming it), else None."""
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(data, pd.DataFrame):
        return None
    try:
        return convert(data)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise _pandas_mismatch(data, e) from None


def _pandas_mismatch(df: Any, error: Exception) -> SchemaMismatch:
    """SchemaMismatch naming the DataFrame columns Arrow could not convert, and why (the
    usual cause: an object column holding values of several Python types)."""
    problems = []
    for name in df.columns:
        col = df[name]
        try:
            pa.array(col, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            kinds = sorted({type(v).__name__ for v in col.dropna()})
            problems.append(
                f"{name!r} holds {', '.join(kinds)} values" if len(kinds) > 1 else f"{name!r} ({', '.join(kinds)})"
            )
    where = "; ".join(problems) if problems else str(error)
    return SchemaMismatch(
        f"the DataFrame cannot be converted to Arrow: column {where}. A column must hold one type: "
        "convert it first (e.g. df[col].astype(str) or pd.to_numeric(df[col])). Nothing was written."
    )


def app_transactions(app_transaction: tuple[str, int] | None) -> dict[str, int] | None:
    if app_transaction is None:
        return None
    try:
        app, seq = app_transaction
    except (TypeError, ValueError):
        raise InvalidArgument(f"app_transaction must be (app_id, sequence), got {app_transaction!r}") from None
    if not isinstance(app, str) or not app or isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise InvalidArgument(f"app_transaction must be (non-empty str, int >= 0), got {app_transaction!r}")
    return {app: seq}
