"""``lamina properties set|unset|list``: table properties, each change one version."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import typer

from lamina.cli._output import OUTPUT, TABLE, OutputFormat, console, print_table, write_table
from lamina.cli._output import fail as _fail
from lamina.cli._tables import BRANCH as _BRANCH
from lamina.cli._tables import format_of as _format
from lamina.cli._tables import open_target as _open
from lamina.cli._tables import table_title as _of
from lamina.errors import LaminaError

properties_app = typer.Typer(
    help="List, set and unset table properties (each change is one version).", no_args_is_help=True
)


def _assignments(items: list[str]) -> dict[str, str]:
    """``key=value`` arguments as a mapping (the value may hold '=')."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise typer.BadParameter(f"{item!r} is not key=value, e.g. write.parquet.compression=zstd")
        if key.strip() in out:
            raise typer.BadParameter(f"{key.strip()!r} is given twice; give each property once")
        out[key.strip()] = value
    return out


def _update_properties(uri: str, branch: str | None, **change: Any) -> None:
    """Commit ``t.update_properties(**change)`` and say what it did."""
    t = _open(uri, branch=branch)
    try:
        v = t.update_properties(**change)
    except LaminaError as e:
        _fail(e)
    if v.version is None:
        console.print(f"nothing to change: {_of(t)} has every property so already")
        return
    s = t.metadata.summary
    done = [
        f"{what} {s[key]}" for what, key in (("set", "properties-set"), ("removed", "properties-removed")) if s.get(key)
    ]
    console.print(f"version {v.version}: {'; '.join(done)}")


@properties_app.command("set")
def properties_set(
    uri: str,
    assignments: list[str] = typer.Argument(..., help="key=value, one or more"),
    branch: str | None = _BRANCH,
):
    """Set table properties in one version (writes after it use them); refused, with nothing committed, for the ones fixed when the table was created."""  # one line: typer keeps a docstring's line breaks
    _update_properties(uri, branch, set=_assignments(assignments))


@properties_app.command("unset")
def properties_unset(
    uri: str,
    keys: list[str] = typer.Argument(..., help="property keys, one or more"),
    branch: str | None = _BRANCH,
):
    """Remove table properties in one version (each then reads its default)."""
    _update_properties(uri, branch, remove=keys)


@properties_app.command("list")
def properties_list(uri: str, output: OutputFormat = OUTPUT, branch: str | None = _BRANCH):
    """List the properties the table sets, by key; json and csv print one row per property."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    props = sorted(t.properties.items())
    rows = pa.table(
        {"key": pa.array([k for k, _ in props], pa.string()), "value": pa.array([v for _, v in props], pa.string())}
    )
    if fmt != TABLE:
        write_table(rows, fmt)
        return
    print_table(
        rows, f"properties of {_of(t)} (version {t.version})", hint="unset ones read their defaults (docs/format.md)"
    )
