"""The ``lamina`` command: the typer app, its global options, and its commands in the order
``lamina --help`` lists them. The commands live by concern:

- ``inspect``: info, history, schema, files, fsck, system;
- ``changes``: the change data feed;
- ``maintenance``: rollback, expire, remove-orphans (vacuum), compact;
- ``explorer``: ui; ``iceberg``: serve-iceberg and the ``iceberg`` group;
- ``sql``, ``convert``;
- ``refs``: the ``tag`` and ``branch`` groups; ``properties``; ``catalog``.

The commands that read or write one line of versions take ``--branch NAME`` (default: main):
version numbers given with it are that branch's.
"""

from __future__ import annotations

import typer

import lamina
from lamina.catalog import DEFAULT_CATALOG
from lamina.cli._catalogs import set_root
from lamina.cli.catalog import catalog_app
from lamina.cli.changes import changes
from lamina.cli.convert import convert
from lamina.cli.explorer import ui
from lamina.cli.iceberg import iceberg_app, serve_iceberg
from lamina.cli.inspect import files, fsck, history, info, schema, system
from lamina.cli.maintenance import compact, expire, remove_orphans, rollback
from lamina.cli.properties import properties_app
from lamina.cli.refs import branch_app, tag_app
from lamina.cli.sql import sql

app = typer.Typer(help="Inspect and maintain Lamina tables.", no_args_is_help=True, add_completion=False)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"lamina {lamina.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    catalog: str = typer.Option(
        DEFAULT_CATALOG,
        "--catalog",
        "-c",
        envvar="LAMINA_CATALOG",
        help="catalog for tables named ns.name (a location is opened directly)",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="print Lamina's version and exit",
    ),
) -> None:
    set_root(ctx, catalog)


app.command()(info)
app.command()(history)
app.command()(schema)
app.command()(files)
app.command()(changes)
app.command()(fsck)
app.command()(rollback)
app.command()(expire)
app.command("remove-orphans")(remove_orphans)
app.command("vacuum", help="Alias of remove-orphans.")(remove_orphans)
app.command()(compact)
app.command()(system)
app.command()(ui)
app.command("serve-iceberg")(serve_iceberg)
app.command()(sql)
app.command()(convert)

app.add_typer(tag_app, name="tag")
app.add_typer(branch_app, name="branch")
app.add_typer(properties_app, name="properties")
app.add_typer(catalog_app, name="catalog")
app.add_typer(iceberg_app, name="iceberg")


if __name__ == "__main__":  # pragma: no cover
    app()
