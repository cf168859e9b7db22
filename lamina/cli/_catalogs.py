"""Which catalog a command opens (its own ``--catalog``, else ``lamina --catalog``, both also
from LAMINA_CATALOG, else the embedded default), and refusing one that is not there.

Opening an embedded SQLite or directory catalog creates it; only `lamina catalog create`
means to. Every other command that opens a catalog checks first that its database file (or
warehouse directory) exists, and fails with CatalogNotFound, saying where it looked, where
the URI came from and how to create or name one, instead of leaving an empty catalog behind.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from lamina.catalog import DEFAULT_CATALOG, Catalog, load_catalog, local_catalog_path
from lamina.errors import CatalogNotFound

# Where an option's value came from (the names of click's ParameterSource), in words.
_SOURCES = {"COMMANDLINE": "given with --catalog", "ENVIRONMENT": "from LAMINA_CATALOG"}
_DEFAULT_SOURCE = "the default catalog"

# `lamina --catalog`: set by the command's callback, before any subcommand runs.
_root = {"uri": DEFAULT_CATALOG, "source": _DEFAULT_SOURCE}


def _source_of(ctx: Any) -> str:
    """Where the ``catalog`` option of the command running in ``ctx`` (a typer.Context) came from."""
    source = ctx.get_parameter_source("catalog") if ctx is not None else None
    return _SOURCES.get(getattr(source, "name", ""), _DEFAULT_SOURCE)


def set_root(ctx: Any, uri: str) -> None:
    """`lamina --catalog URI` (the root callback's option, ``ctx`` its context)."""
    _root.update(uri=uri, source=_source_of(ctx))


def chosen(ctx: Any = None, option: str | None = None) -> tuple[str, str]:
    """(URI, where it came from) of the catalog a command opens: ``option``, its own --catalog
    (``ctx``: its context), if given, else `lamina --catalog`'s."""
    if option is not None:
        return option, _source_of(ctx)
    return _root["uri"], _root["source"]


def missing(uri: str, source: str) -> CatalogNotFound | None:
    """The error a command that reads ``uri`` raises when that catalog is not there (None when it is,
    or when a server holds it)."""
    path = local_catalog_path(uri)
    if path is None or os.path.exists(path):
        return None
    return CatalogNotFound(f"no catalog at {uri} ({source}): {path} does not exist; {how_to_create(uri)}")


def how_to_create(uri: str) -> str:
    """The commands that make the catalog ``uri``, or name another."""
    named = "" if uri == DEFAULT_CATALOG else f" --catalog {shlex.quote(uri)}"
    return (
        f"create it with `lamina catalog create NAMESPACE{named}`, or name an existing catalog with --catalog URI "
        "or LAMINA_CATALOG"
    )


def open_catalog(ctx: Any, option: str | None = None, *, create: bool = False) -> Catalog:
    """The catalog a command works on (``chosen``); CatalogNotFound if it is not there, unless ``create``."""
    uri, source = chosen(ctx, option)
    error = None if create else missing(uri, source)
    if error is not None:
        raise error
    return load_catalog(uri)
