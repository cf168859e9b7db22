"""`lamina catalog ...`: namespaces and tables of a catalog (default: the embedded SQLite one).

A NAME without a dot is a namespace, ``ns.table`` a table.
"""

from __future__ import annotations

import pyarrow as pa
import typer
from rich.text import Text

from lamina.catalog import DEFAULT_CATALOG
from lamina.cli._catalogs import chosen, missing, open_catalog
from lamina.cli._output import OUTPUT, TABLE, OutputFormat, console, output_format, print_table, write_table
from lamina.cli._output import fail as _fail
from lamina.errors import LaminaError

catalog_app = typer.Typer(
    help=f"List, create, rename, drop tables and namespaces; take tables offline/online (default catalog {DEFAULT_CATALOG}).",
    no_args_is_help=True,
)

_CATALOG = typer.Option(
    None,
    "--catalog",
    "-c",
    envvar="LAMINA_CATALOG",
    show_default=DEFAULT_CATALOG,
    help="catalog URI: sqlite:///path.db, postgresql://user@host:port/db?warehouse=..., or a warehouse directory "
    "(default: `lamina --catalog`, else the embedded default)",
)

# Column types accepted by --schema (name:type,...).
_TYPES = {
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "int32": pa.int32(),
    "int": pa.int32(),
    "int64": pa.int64(),
    "long": pa.int64(),
    "bigint": pa.int64(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}


def _schema(text: str) -> pa.Schema:
    fields = []
    for part in text.split(","):
        name, _, typ = part.strip().partition(":")
        if not name or typ.strip().lower() not in _TYPES:
            raise typer.BadParameter(
                f"{part.strip()!r}: use name:type with type one of {', '.join(sorted(_TYPES))}", param_hint="--schema"
            )
        fields.append(pa.field(name.strip(), _TYPES[typ.strip().lower()]))
    return pa.schema(fields)


def _catalog(ctx: typer.Context, uri: str | None, create: bool = False):
    """The catalog the command works on (``--catalog``, else `lamina --catalog`); one that is not
    there fails the command (CatalogNotFound) unless it is to be ``create``d."""
    try:
        return open_catalog(ctx, uri, create=create)
    except LaminaError as e:
        _fail(e)


@catalog_app.command("list")
def list_(
    ctx: typer.Context,
    namespace: str | None = typer.Argument(None, help="only this namespace"),
    catalog: str | None = _CATALOG,
    output: OutputFormat = OUTPUT,
):
    """Namespaces and tables with their version, online flag, uuid and location; json and csv print a row per table."""
    cat = _catalog(ctx, catalog)
    try:
        fmt = output_format(output)
        namespaces = [namespace] if namespace else cat.list_namespaces()
        infos = cat.tables(namespace)
    except LaminaError as e:
        _fail(e)
    listed = pa.table(
        {
            "table": pa.array([i.identifier for i in infos], pa.string()),
            "version": pa.array([i.version for i in infos], pa.int64()),
            "online": pa.array([i.online for i in infos], pa.bool_()),
            "uuid": pa.array([i.uuid for i in infos], pa.string()),
            "location": pa.array([i.location for i in infos], pa.string()),
        }
    )
    if fmt != TABLE:
        write_table(listed, fmt)
        return
    shown = listed.set_column(2, "online", pa.array(["yes" if i.online else "offline" for i in infos], pa.string()))
    print_table(shown, f"{cat.uri}: {len(namespaces)} namespace(s), {len(infos)} table(s)", paths=["location"])
    empty = sorted(set(namespaces) - {i.namespace for i in infos})
    if empty:
        console.print(f"empty namespaces: {', '.join(empty)}")


@catalog_app.command("create")
def create(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="namespace, or namespace.table"),
    schema: str | None = typer.Option(
        None, "--schema", "-s", help="table columns, e.g. 'id:int64,day:date,name:string'"
    ),
    partition_by: list[str] | None = typer.Option(None, "--partition-by", "-p", help="e.g. 'day(ts)', repeatable"),
    location: str | None = typer.Option(None, "--location", help="default: <warehouse>/<namespace>/<table>"),
    catalog: str | None = _CATALOG,
):
    """Create a namespace (and the catalog, if it is not there yet), or a table (needs --schema)."""
    namespace = "." not in name  # a namespace makes the catalog if need be; a table needs its namespace there
    try:
        new = namespace and missing(*chosen(ctx, catalog)) is not None
    except LaminaError as e:
        _fail(e)
    cat = _catalog(ctx, catalog, create=namespace)
    try:
        if namespace:
            cat.create_namespace(name)
            console.print(
                Text.assemble("created namespace ", (name, "bold"), f" in a new catalog {cat.uri}" if new else "")
            )
            return
        if not schema:
            raise typer.BadParameter("creating a table needs --schema 'col:type,...'", param_hint="--schema")
        t = cat.create_table(name, _schema(schema), partition_by=partition_by or None, location=location)
    except LaminaError as e:
        _fail(e)
    console.print(f"created table [bold]{name}[/bold] (uuid {t.uuid}) at {t.uri}")


@catalog_app.command("rename")
def rename(ctx: typer.Context, old: str, new: str, catalog: str | None = _CATALOG):
    """Rename a table (its location and path readers are unaffected); refuses an existing target."""
    cat = _catalog(ctx, catalog)
    try:
        cat.rename_table(old, new)
    except LaminaError as e:
        _fail(e)
    console.print(f"renamed {old} to [bold]{new}[/bold]")


@catalog_app.command("drop")
def drop(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="namespace (must be empty), or namespace.table"),
    purge: bool = typer.Option(False, "--purge", help="also delete the table's files"),
    force: bool = typer.Option(False, "--force", help="purge even with writes in flight"),
    catalog: str | None = _CATALOG,
):
    """Drop an empty namespace, or a table (its files stay unless --purge)."""
    cat = _catalog(ctx, catalog)
    try:
        if "." not in name:
            cat.drop_namespace(name)
        else:
            cat.drop_table(name, purge=purge, force=force)
    except LaminaError as e:
        _fail(e)
    console.print(f"dropped {name}{' and its files' if purge else ''}")


def _set_online(ctx: typer.Context, name: str, online: bool, catalog: str | None) -> None:
    cat = _catalog(ctx, catalog)
    try:
        cat.set_online(name, online)
    except LaminaError as e:
        _fail(e)
    console.print(f"{name} is {'online' if online else 'offline (readable, refuses writes and maintenance)'}")


@catalog_app.command("online")
def online(ctx: typer.Context, name: str, catalog: str | None = _CATALOG):
    """Allow writes and maintenance again."""
    _set_online(ctx, name, True, catalog)


@catalog_app.command("offline")
def offline(ctx: typer.Context, name: str, catalog: str | None = _CATALOG):
    """Refuse writes and maintenance (reads keep working)."""
    _set_online(ctx, name, False, catalog)
