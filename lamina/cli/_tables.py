"""What the table commands share: the table a command names (a location, or ``ns.name`` of the
catalog), the ``--branch`` option, the output format, progress bars and the units of listings."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

import lamina
from lamina.catalog import load_catalog
from lamina.cli._catalogs import chosen, missing
from lamina.cli._output import TABLE, OutputFormat, err, human_bytes, output_format, write_table
from lamina.cli._output import fail as _fail
from lamina.errors import CatalogNotFound, LaminaError
from lamina.spec.layout import MAIN_BRANCH
from lamina.timeutil import iso_ms


def _is_identifier(target: str) -> bool:
    """``ns.name`` that is not an existing path: a catalog table."""
    return target.count(".") == 1 and "/" not in target and "\\" not in target and not os.path.exists(target)


# `--branch` of the commands that read or write one branch's versions.
BRANCH = typer.Option(None, "--branch", "-b", help="the branch to work on (default: main); versions are its own")


def open_target(target: str, version: int | None = None, branch: str | None = None):
    """A table by location, or by ``ns.name`` through the catalog (main's commits go through
    its row); ``branch``: a handle on that branch (at its ``version``)."""
    try:
        if not _is_identifier(target):
            table = lamina.open_table(target, version=version if branch is None else None)
        else:
            uri, source = chosen()
            error = missing(uri, source)
            if error is not None:
                raise CatalogNotFound(f"{target!r} is not a table location, and {error}")
            table = load_catalog(uri).load_table(target)
            if version is not None and branch is None:
                table = lamina.open_table(table.uri, version=version)
        if branch is None:
            return table
        handle = table.branch(branch)
        return handle if version is None else handle.at(version)
    except LaminaError as e:
        _fail(e)


def table_title(t: Any) -> str:
    """The table, and the branch if not main, for titles and messages."""
    return t.uri if t.branch_name == MAIN_BRANCH else f"{t.uri} (branch {t.branch_name})"


def progress_bar() -> tuple[Progress, Callable[[str, int, int], None]]:
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    )
    tasks: dict[str, TaskID] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total or 1)
        bar.update(tasks[stage], completed=done, total=total or 1)

    return bar, update


def freed_text(rep: Any, dry_run: bool) -> str:
    """What a deletion freed (a tag's or a branch's)."""
    return (
        f"{'would free' if dry_run else 'freed'} {len(rep.deleted_files)} data files, "
        f"{len(rep.deleted_manifests)} manifests, {human_bytes(rep.deleted_bytes)}"
    )


def timestamp_text(ms: int) -> str:
    return iso_ms(ms, sep=" ")


def format_of(output: OutputFormat, as_json: bool = False, as_csv: bool = False) -> str:
    try:
        return output_format(output, as_json, as_csv)
    except LaminaError as e:
        _fail(e)


def system_listing(uri: str, name: str, output: OutputFormat) -> tuple[lamina.Table, pa.Table] | None:
    """The table and its system table ``name`` for a listing command; None once printed as
    json or csv (machine output: the system table's rows as they are)."""
    fmt = format_of(output)
    t = open_target(uri)
    try:
        rows = t.inspect.table(name)
    except LaminaError as e:
        _fail(e)
    if fmt != TABLE:
        write_table(rows, fmt)
        return None
    return t, rows


# How the metadata listings show in a table: sizes, counts and paths by column name (as
# the system tables, and the commands built on them, name them).
_SIZES = {"size"}
_COUNTS = {
    "record_count",
    "file_count",
    "total_files",
    "total_records",
    "dv_cardinality",
    "head_records",
    "versions",
    "records",
    "rows",
    "deleted rows",
}
_PATHS = {"path", "dv_path", "location"}


def listing_units(tbl: pa.Table) -> dict[str, Any]:
    """``print_table``'s sizes, counts and paths among ``tbl``'s columns ($files' null counts too)."""
    names = set(tbl.column_names)
    return {
        "sizes": names & _SIZES,
        "paths": names & _PATHS,
        "counts": {n for n in names if n in _COUNTS or n.startswith("null_count.")},
    }


def point_in_time(text: str | None) -> str | int | None:
    """A time as given on the command line: digits are epoch milliseconds, else ISO 8601."""
    return int(text) if text is not None and text.strip().isascii() and text.strip().isdigit() else text
