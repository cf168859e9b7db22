"""Polars reads Lamina tables lazily: ``scan(table)`` is a ``LazyFrame``.

The frame is a Polars *dataset scan* (the protocol Polars' own ``scan_delta`` and
``scan_iceberg`` use): when a query runs, Polars hands Lamina the columns it needs, the row
limit and its filter (as pyarrow expression code); Lamina plans the version with that filter
(partition and statistics pruning over the manifest tree) and returns Polars' native
``scan_parquet`` over the files left, with each file's deleted rows given as a selection
vector, so Polars' reader drops them while it reads. Polars still applies the whole filter.
Tables Polars cannot read by name (evolved schemas, ``memory://``) are scanned through a
pyarrow Dataset (``lamina.data.export``). See docs/engines.md.
"""

from __future__ import annotations

import ast
import datetime as _dt
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import lamina
from lamina.data.export import LiveFiles, readable_by_name
from lamina.data.scan import Scan
from lamina.expr import AlwaysTrue, And, Compare, Expr, In, IsNull, Not, NotNull, Or, Predicate, bind
from lamina.expr.terms import Call, Column, Literal
from lamina.io import FileIO
from lamina.io.s3 import s3_settings
from lamina.spec.schema import Schema
from lamina.table.table import Table

if TYPE_CHECKING:
    import polars as pl
    import pyarrow.dataset as ds

__all__ = ["scan", "predicate_of"]

_OPS = {ast.Eq: "=", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


class _Untranslatable(Exception):
    pass


def _field(node: ast.AST) -> str:
    """The column of ``pa.compute.field('name')``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "field"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and not node.keywords
    ):
        return node.args[0].value
    raise _Untranslatable


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and node.value is not None:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
    ):
        return -node.operand.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if len(args) == len(node.args):
            return _converted(node.func.id, args)
    raise _Untranslatable


_PER_SECOND = {"ns": 10**9, "us": 10**6, "ms": 10**3}


def _converted(fn: str, args: Sequence[object]) -> Any:
    """The value of ``to_py_date(days)`` or ``to_py_datetime(value, unit[, zone])``: how Polars'
    pyarrow predicate code writes a date or datetime literal."""
    if fn == "to_py_date" and len(args) == 1 and isinstance(args[0], int):
        return _dt.date(1970, 1, 1) + _dt.timedelta(days=args[0])
    if fn == "to_py_datetime" and len(args) in (2, 3):
        value, unit, zone = args[0], args[1], args[2] if len(args) == 3 else None
        if (
            isinstance(value, int)
            and isinstance(unit, str)
            and unit in _PER_SECOND
            and (zone is None or isinstance(zone, str))
        ):
            if value % (_PER_SECOND[unit] // 10**6 or 1):
                raise _Untranslatable  # (nanoseconds a Python datetime cannot hold)
            return pa.scalar(value, pa.timestamp(unit, zone)).as_py()
    raise _Untranslatable


def _translate(node: ast.AST, partial: bool) -> Expr:
    """``node`` as a Lamina predicate that every row it selects satisfies. ``partial``: an AND
    may drop a side it cannot translate (a weaker predicate still prunes correctly); not
    under OR or NOT, where weakening would be wrong."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        sides = []
        for side in (node.left, node.right):
            try:
                sides.append(_translate(side, partial))
            except _Untranslatable:
                if not partial:
                    raise
        if not sides:
            raise _Untranslatable
        return sides[0] if len(sides) == 1 else And(*sides)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return Or(_translate(node.left, False), _translate(node.right, False))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        inner = _translate(node.operand, False)
        return NotNull(inner.name) if isinstance(inner, IsNull) else Not(inner)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPS:
        return Compare(_OPS[type(node.ops[0])], _field(node.left), _literal(node.comparators[0]))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "starts_with"
        and len(node.args) == 1
        and len(node.keywords) == 1
        and node.keywords[0].arg == "pattern"
        and isinstance(node.keywords[0].value, ast.Constant)
        and isinstance(node.keywords[0].value.value, str)
    ):
        # pa.compute.starts_with(pa.compute.field('s'), pattern='a'): Polars' str.starts_with
        return Predicate(Call("starts_with", (Column((_field(node.args[0]),)), Literal(node.keywords[0].value.value))))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method, target = node.func.attr, node.func.value
        if method == "isin" and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
            return In(_field(target), tuple(_literal(v) for v in node.args[0].elts))
        if method == "is_null" and not node.args:
            return IsNull(_field(target))
        if method == "is_valid" and not node.args:
            return NotNull(_field(target))
    raise _Untranslatable


def predicate_of(pyarrow_predicate: str | None, schema: Schema) -> Expr:
    """The filter Polars pushes into a dataset scan (pyarrow expression code), as a Lamina
    predicate to prune files by: what it cannot read is left out of an AND (Polars applies
    the whole filter to the rows), and anything else is no pruning at all."""
    if not pyarrow_predicate:
        return AlwaysTrue()
    try:
        return bind(_translate(ast.parse(pyarrow_predicate, mode="eval").body, True), schema)
    except (_Untranslatable, SyntaxError, RecursionError, ValueError, TypeError, OverflowError, KeyError):
        return AlwaysTrue()
    except lamina.errors.LaminaError:  # a column or literal the schema refuses: Polars will say
        return AlwaysTrue()


def _polars_schema(arrow: pa.Schema) -> pl.Schema:
    import polars as pl

    frame = pl.from_arrow(arrow.empty_table())
    assert isinstance(frame, pl.DataFrame)  # (a Table converts to a DataFrame; only an Array to a Series)
    return frame.schema


def _storage_options(io: FileIO) -> dict[str, str] | None:
    """What Polars' object-store reader needs to reach an ``s3://`` table, from its options."""
    if io.scheme not in ("s3", "s3a"):
        return None
    out = {}
    for key, value in s3_settings(io.options).items():
        if value is not None:
            out[
                {
                    "endpoint": "aws_endpoint_url",
                    "access_key_id": "aws_access_key_id",
                    "secret_access_key": "aws_secret_access_key",
                    "session_token": "aws_session_token",
                    "region": "aws_region",
                    "allow_http": "aws_allow_http",
                }[key]
            ] = str(value)
    if str(out.get("aws_endpoint_url", "")).startswith("http://"):
        out["aws_allow_http"] = "true"
    return out


class _Dataset:
    """One version of a table, as Polars' dataset-scan protocol asks for it (``schema``,
    ``to_dataset_scan``). The version is fixed when the frame is made."""

    def __init__(self, scan: Scan) -> None:
        self.base = scan

    def schema(self) -> pl.Schema:
        return _polars_schema(self.base.arrow_schema_of(self.base.output_columns))

    def to_dataset_scan(
        self,
        *,
        existing_resolved_version_key: str | None = None,
        limit: int | None = None,
        projection: list[str] | None = None,
        filter_columns: list[str] | None = None,
        statistics_columns: list[str] | None = None,
        pyarrow_predicate: str | None = None,
    ) -> tuple[pl.LazyFrame, str] | None:
        import polars as pl

        base = self.base
        key = str(base.version)
        if existing_resolved_version_key == key:
            return None
        scan = Scan(base.io, base.vm, predicate_of(pyarrow_predicate, base.schema), base.columns, log=base.log)
        io = scan.io
        if not readable_by_name(scan) or not (io.is_local or io.scheme in ("s3", "s3a")):
            return _pyarrow_scan(scan.to_pyarrow_dataset(), limit, projection, pyarrow_predicate), key
        planned = _plans.of(scan)
        live = planned.live
        schema = self.schema()
        if not len(live):
            return pl.scan_parquet([], schema=schema), key
        uris = live.uris

        def keep_masks(requested: pl.DataFrame) -> pl.DataFrame:
            # Polars asks for the files it reads, by the paths it was given (maybe as file://).
            return planned.masks([p.removeprefix("file://") for p in requested.get_column("path").to_list()])

        sizes = live.entries.column("size").to_pylist() if "size" in live.entries.column_names else None
        frame = pl.scan_parquet(
            uris,
            schema=schema,  # (the scan's columns; extra_columns="ignore" leaves the rest unread)
            hive_partitioning=False,  # (a partition's directory name is no column: the files hold every column)
            missing_columns="insert",
            extra_columns="ignore",
            storage_options=_storage_options(io),
            _deletion_files=("delta-deletion-vector", keep_masks) if live.has_deletes else None,
            # (each file's size from its entry, as scan_delta gives its log's: no size look-up per file)
            _source_sizes=sizes if sizes is not None and None not in sizes else None,
        )
        return frame, key


class _Planned:
    """One scan's planned files and, once asked, each requested file set's selection vectors."""

    def __init__(self, live: LiveFiles) -> None:
        self.live = live
        self.index = {u: i for i, u in enumerate(live.uris)}
        self._masks: OrderedDict[tuple[int, ...], pl.DataFrame] = OrderedDict()
        self._lock = threading.Lock()

    def masks(self, uris: list[str]) -> pl.DataFrame:
        import polars as pl

        idx = tuple(self.index[u] for u in uris)
        with self._lock:
            hit = self._masks.get(idx)
        if hit is None:
            hit = pl.DataFrame({"selection_vector": pl.from_arrow(self.live.keep_masks(list(idx)))})
            with self._lock:
                self._masks[idx] = hit
                while len(self._masks) > 4:
                    self._masks.popitem(last=False)
        return hit


class _Plans:
    """The plans of the versions Polars queried lately, by the table, the version (its commit
    id) and the pruning predicate: a version never changes, so a query that names it again
    (each table reference of a SQL query, a notebook re-running a cell) skips the manifests
    and the DV reads. At most ``MAX``, the least recently used dropped."""

    MAX = 32

    def __init__(self) -> None:
        self.plans: OrderedDict[tuple, _Planned] = OrderedDict()
        self.lock = threading.Lock()

    def of(self, scan: Scan) -> _Planned:
        key = (scan.io.uri, scan.vm.commit_id, scan.version, repr(scan.predicate), tuple(scan.columns or ()))
        with self.lock:
            hit = self.plans.get(key)
            if hit is not None:
                self.plans.move_to_end(key)
                return hit
        planned = _Planned(LiveFiles.of(scan))
        with self.lock:
            self.plans[key] = planned
            while len(self.plans) > self.MAX:
                self.plans.popitem(last=False)
        return planned


_plans = _Plans()


def _pyarrow_scan(
    dataset: ds.Dataset, limit: int | None, projection: list[str] | None, pyarrow_predicate: str | None
) -> pl.LazyFrame:
    """A Polars scan of a pyarrow Dataset inside a dataset scan, as Polars' own scan_delta
    builds one: the pushed-down filter is pyarrow expression code, evaluated the way Polars does."""
    import polars.io.pyarrow_dataset.anonymous_scan as anonymous
    from polars import LazyFrame
    from polars._utils.convert import to_py_date, to_py_datetime, to_py_time, to_py_timedelta
    from polars.datatypes import Date, Datetime, Duration

    predicate = None
    if pyarrow_predicate is not None:
        names = {
            "pa": pa,
            "Date": Date,
            "Datetime": Datetime,
            "Duration": Duration,
            "to_py_date": to_py_date,
            "to_py_datetime": to_py_datetime,
            "to_py_time": to_py_time,
            "to_py_timedelta": to_py_timedelta,
        }
        predicate = eval(pyarrow_predicate, names)
    read = partial(
        anonymous._scan_pyarrow_dataset_impl, dataset, n_rows=limit, predicate=predicate, with_columns=projection
    )
    return LazyFrame._scan_python_function(dataset.schema, read, pyarrow=True, is_pure=True)


def scan(
    table: Table | str,
    *,
    version: int | str | None = None,
    timestamp: _dt.datetime | str | int | None = None,
    columns: list[str] | None = None,
) -> pl.LazyFrame:
    """A version of ``table`` (a Table, or a table location) as a Polars ``LazyFrame``; the
    latest unless ``version`` or ``timestamp`` (as for ``Table.scan``: a version number, a tag
    or branch name) says otherwise."""
    from polars._plr import PyLazyFrame
    from polars._utils.wrap import wrap_ldf

    t = lamina.open_table(table) if isinstance(table, str) else table
    return wrap_ldf(
        PyLazyFrame.new_from_dataset_object(_Dataset(t.scan(columns=columns, version=version, timestamp=timestamp)))
    )
