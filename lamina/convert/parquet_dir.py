"""A directory of Parquet files as an ``Adoptable``: one listing, one footer read per file.

Hive-style directories (``k=v/``) are identity partitions on ``k``. Files whose names start
with ``_`` or ``.`` (``_SUCCESS``, ``.crc``), and directories named so, are not data, as
Spark and Hive have it. Statistics and row counts come from the footers; the schema is
the files' schemas unified (a column some files lack reads null there).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.convert.adopt import Adoptable
from lamina.data.footer_stats import footers_of, partition_values, stats_columns
from lamina.errors import InvalidArgument, SchemaMismatch, UnconvertibleTable
from lamina.io import FileIO
from lamina.spec.partition import parse_partition_by
from lamina.spec.schema import Schema

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _is_data(path: str) -> bool:
    return path.endswith(".parquet") and not any(part.startswith(("_", ".")) for part in path.split("/"))


def _hive_keys(path: str) -> list[tuple[str, str | None]]:
    """The ``k=v`` directories of ``path``, in order, values unescaped (null for Hive's default)."""
    out = []
    for part in path.split("/")[:-1]:
        if "=" in part:
            k, _, v = part.partition("=")
            v = urllib.parse.unquote(v)
            out.append((urllib.parse.unquote(k), None if v == HIVE_NULL else v))
    return out


def read_parquet_dir(root: str, storage_options: Mapping[str, Any] | None = None) -> Adoptable:
    io = FileIO(root, storage_options)
    listed = sorted((o for o in io.walk() if _is_data(o.path)), key=lambda o: o.path)
    if not listed:
        raise InvalidArgument(f"no Parquet files under {root}; nothing was written")
    keys = {tuple(k for k, _ in _hive_keys(o.path)) for o in listed}
    if len(keys) > 1:
        raise InvalidArgument(
            f"the files under {root} are partitioned by different directory keys ({sorted(keys)}): a table "
            "has one layout; nothing was written"
        )
    partition_keys = list(next(iter(keys)))
    rel, sizes = [o.path for o in listed], [o.size for o in listed]
    footers = footers_of(io, rel, sizes)
    try:
        arrow = pa.unify_schemas(
            [md.schema.to_arrow_schema().remove_metadata() for md in footers], promote_options="default"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaMismatch(
            f"the files under {root} have schemas that do not unify: {e}; nothing was written"
        ) from None
    missing = [k for k in partition_keys if k not in arrow.names]
    if missing:
        raise UnconvertibleTable(
            f"the files under {root} do not store the partition column(s) {missing} (their values are only in "
            "the directory names); Lamina reads every column from its files, so adopting them would lose the "
            "values. Nothing was written.",
            feature="hive-partition-values-in-directory-names",
        )
    schema = Schema.from_arrow(arrow)
    spec = parse_partition_by(partition_keys, schema) if partition_keys else parse_partition_by(None, schema)
    files = pa.table(
        {
            "path": pa.array([io.full_uri(p) for p in rel], pa.string()),
            "size": pa.array(sizes, pa.int64()),
            "record_count": pa.array([md.num_rows for md in footers], pa.int64()),
            **stats_columns(footers, schema, list(schema.arrow), float_bounds=False),
        }
    )
    if partition_keys:
        values = partition_values(files, _no_first_values(root), schema, spec)
        _check_directories(rel, values, partition_keys, root)
        for name in values.column_names:
            files = files.append_column(f"partition.{name}", values.column(name))
        files = files.append_column("partition_path", pa.array(["/".join(p.split("/")[:-1]) for p in rel], pa.string()))
    return Adoptable("parquet", root, schema, spec, files)


def _no_first_values(root: str) -> Any:
    def refuse(indices: list[int], physical: str, t: pa.DataType) -> list[Any]:
        raise UnconvertibleTable(
            f"files under {root} have no statistics for partition column {physical!r} (values over 4 KiB?)",
            feature="partition-column-without-statistics",
        )

    return refuse


def _check_directories(rel: list[str], values: pa.Table, keys: list[str], root: str) -> None:
    """Refuse a file whose rows are not the partition its directory names."""
    for j, k in enumerate(keys):
        col = values.column(k)
        stored = pc.cast(col, pa.string()).to_pylist() if not pa.types.is_binary(col.type) else col.to_pylist()
        for path, got in zip(rel, stored):
            want = _hive_keys(path)[j][1]
            if want is not None and got is not None and str(got) != want and not _same_value(got, want, col.type):
                raise InvalidArgument(f"{root}/{path} is under {k}={want} but holds {k} = {got}; nothing was written")
            if (want is None) != (got is None):
                raise InvalidArgument(f"{root}/{path} is under {k}={want} but holds {k} = {got}; nothing was written")


def _same_value(got: Any, want: str, t: pa.DataType) -> bool:
    try:
        return pa.scalar(want).cast(t).as_py() == pa.scalar(got).cast(t).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
