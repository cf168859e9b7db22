"""`lamina sql QUERY`: one query on DuckDB over Lamina tables (``lamina.duckdb.sql``), printed
as a table, as JSON Lines or CSV, or written to a CSV or Parquet file."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import typer

from lamina.catalog import local_catalog_path
from lamina.cli._catalogs import chosen, how_to_create, missing
from lamina.cli._output import (
    CSV_FLAG,
    JSON_FLAG,
    TABLE,
    OutputFormat,
    at_most,
    console,
    fail,
    file_format,
    limit_option,
    output_format,
    print_table,
    write_file,
    write_rows,
)
from lamina.cli.catalog import _CATALOG
from lamina.errors import CatalogTableNotFound, InvalidArgument, LaminaError

# Rows printed in a table unless --limit says otherwise (as DuckDB's own shell).
TABLE_ROWS = 40

_CSV_HINT = "select other columns, or print them as JSON (--output json) or write Parquet (--output FILE.parquet)"


class _MissingCatalog:
    """A local catalog that is not there (opening it would create it): it holds no table, and
    a name looked up in it says where the catalog was looked for and how to create one."""

    def __init__(self, uri: str, source: str) -> None:
        self.uri = (
            f"{uri} (which does not exist: {local_catalog_path(uri)} is not there, {source}; {how_to_create(uri)})"
        )

    def tables(self) -> list:
        return []

    def load_table(self, name: str):
        raise CatalogTableNotFound(f"no table {name} in catalog {self.uri}")


def _bindings(specs: Iterable[str]) -> dict[str, str]:
    """``--table NAME=LOCATION`` options as {NAME: LOCATION}."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, location = spec.partition("=")
        name, location = name.strip(), location.strip()
        if not sep or not name or not location:
            raise InvalidArgument(f"--table {spec!r}: give NAME=LOCATION, e.g. --table events=warehouse/sales/events")
        if name in out:
            raise InvalidArgument(f"--table names {name!r} twice: give each name one location")
        out[name] = location
    return out


def _distinct_names(schema: pa.Schema) -> None:
    """Refuse a result with two columns of one name (``SELECT *`` of a join) for JSON, CSV and
    Parquet, where one would hide the other; a table shows both."""
    twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
    if twice:
        raise InvalidArgument(
            f"the result has more than one column named {', '.join(twice)}: name them apart "
            "with AS (e.g. SELECT a.id AS a_id, b.id AS b_id) to print or write them for programs"
        )


def _head_and_count(reader: pa.RecordBatchReader, limit: int) -> tuple[pa.Table, int]:
    """The first ``limit`` rows of ``reader``, and how many rows it has in all (the rest are
    counted as they stream by, not kept)."""
    head, total = [], 0
    for b in reader:
        if total < limit:
            head.append(b.slice(0, limit - total))
        total += b.num_rows
    return pa.Table.from_batches(head, reader.schema), total


def sql(
    ctx: typer.Context,
    query: str = typer.Argument(..., help="one query in DuckDB SQL; '-' reads it from stdin"),
    tables: list[str] | None = typer.Option(
        None, "--table", "-t", metavar="NAME=LOCATION", help="the table at LOCATION is NAME in the query; repeatable"
    ),
    catalog: str | None = _CATALOG,
    output: str | None = typer.Option(
        None,
        "--output",
        "-o",
        metavar="FORMAT|FILE",
        help="table, json or csv, as every listing prints (json: JSON "
        "Lines), or a FILE to write every row to: CSV or Parquet by its extension (.csv, .parquet)",
    ),
    as_json: bool = JSON_FLAG,
    as_csv: bool = CSV_FLAG,
    limit: int | None = limit_option(TABLE_ROWS),
):
    """Run a SQL query (DuckDB) over Lamina tables; it only reads.

    Name a table as ns.table (or its bare name) of the catalog, by its location in double quotes (FROM "warehouse/sales/events"), or by a name given with --table.

    Time travel: FROM t AT (VERSION => 3), AT (TAG => 'nightly'), AT (TIMESTAMP => '2026-01-01 10:00') (UTC unless it names its offset), or FOR VERSION AS OF 3. A branch's latest version: FROM t AT (BRANCH => 'audit').
    """  # one line per paragraph: typer keeps a docstring's line breaks
    named = output is not None and output.lower() in {f.value for f in OutputFormat}
    try:
        fmt = output_format(output.lower() if output is not None and named else TABLE, as_json, as_csv)
        if output is not None and not named and fmt != TABLE:
            raise InvalidArgument("pass one of --json, --csv or --output: each says what to print")
    except LaminaError as e:
        fail(e)
    if named:
        output = None
    if output is not None and limit is not None:
        fail(
            InvalidArgument(
                "--output writes every row and --limit only limits the rows printed: put a LIMIT in the query"
            )
        )
    try:
        import duckdb

        from lamina.duckdb import error_text
        from lamina.duckdb import sql as run_sql
    except ImportError:
        fail(InvalidArgument("lamina sql runs on DuckDB, which is not installed: pip install 'lamina[duckdb]'"))
    uri, source = chosen(ctx, catalog)
    try:
        if output is not None:
            file_format(output)  # before the query runs
        text = sys.stdin.read() if query == "-" else query
        # a missing catalog stands in for the Catalog run_sql is given: it answers the lookups
        cat: Any = uri if missing(uri, source) is None else _MissingCatalog(uri, source)
        reader = run_sql(text, catalog=cat, tables=_bindings(tables or [])).to_arrow_reader()
        if output is not None or fmt != TABLE:
            _distinct_names(reader.schema)
        if output is not None:
            rows = write_file(reader, reader.schema, output, _CSV_HINT)
            console.print(f"wrote {rows} row{'' if rows == 1 else 's'} to {output}")
        elif fmt != TABLE:
            write_rows(at_most(reader, limit), reader.schema, fmt, _CSV_HINT)
        else:
            _print_rows(reader, limit or TABLE_ROWS)
    except LaminaError as e:
        fail(e)
    except duckdb.Error as e:
        fail(InvalidArgument(error_text(e)))


def _print_rows(reader: pa.RecordBatchReader, limit: int) -> None:
    rows, total = _head_and_count(reader, limit)
    print_table(
        rows, "", short_times=(), null="NULL", hint="select fewer columns; --output json, csv or FILE holds every one"
    )
    if total > limit:
        console.print(f"{total} rows, the first {limit} shown (--limit N prints more; --output FILE writes them all)")
    else:
        console.print(f"{total} row{'' if total == 1 else 's'}")
