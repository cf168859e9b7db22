"""``lamina convert``: a Parquet directory, Delta or Iceberg table adopted in place."""

from __future__ import annotations

import typer

import lamina
from lamina.cli._output import console
from lamina.cli._output import fail as _fail
from lamina.errors import LaminaError


def convert(
    source: str = typer.Argument(
        ..., help="a Parquet directory, a Delta table's directory, an Iceberg metadata file or table directory"
    ),
    location: str | None = typer.Argument(
        None, help="the Lamina table's location (default for a Parquet directory: the directory itself)"
    ),
    format: str | None = typer.Option(None, "--format", help="parquet, delta or iceberg (default: detected)"),
    tags: bool = typer.Option(False, "--tags", help="an Iceberg table's tags become Lamina tags"),
    iceberg_catalog: str | None = typer.Option(
        None,
        "--iceberg-catalog",
        help="a pyiceberg catalog name (~/.pyiceberg.yaml): SOURCE is then a table identifier",
    ),
):
    """Adopt an existing table in place: its files become the Lamina table's first version,
    never copied, rewritten or deleted (docs/convert.md)."""
    try:
        src: object = source
        if iceberg_catalog is not None:
            from pyiceberg.catalog import load_catalog as load_iceberg_catalog

            src = load_iceberg_catalog(iceberg_catalog).load_table(source)
        t = lamina.convert(src, location, format=format, tags=tags)
    except LaminaError as e:
        _fail(e)
    files = t.scan().plan()
    console.print(
        f"converted {source} into the Lamina table at {t.uri}: version {t.version}, "
        f"{len(files)} files, {files.record_count} rows"
    )
