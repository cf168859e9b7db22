"""Catalogs: many tables by ``namespace.name``.

    cat = lamina.load_catalog("sqlite:///warehouse/catalog.db")   # embedded default
    cat = lamina.load_catalog("postgresql://lamina@db:5432/lamina?warehouse=s3://bucket/wh")
    cat = lamina.load_catalog("/data/warehouse")                   # directories only, no database

See docs/catalog.md.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from lamina.catalog.base import Catalog, CatalogTable, TableInfo, check_name, parse_identifier
from lamina.catalog.coordinator import CatalogVersionLog, SqlCoordinator
from lamina.catalog.directory import DirectoryCatalog, warehouse_path
from lamina.catalog.sql import SqlCatalog, open_postgres, open_sqlite, redact, sqlite_path
from lamina.errors import InvalidCatalogUri

DEFAULT_CATALOG = "sqlite:///warehouse/catalog.db"


def load_catalog(
    uri: str = DEFAULT_CATALOG,
    *,
    warehouse: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    password: str | None = None,
) -> Catalog:
    """A catalog by URI.

    - ``sqlite:///rel/path.db``, ``sqlite:////abs/path.db``: embedded SQLite; tables default
      to ``<directory of the db>/<ns>/<name>`` (or ``?warehouse=...`` / ``warehouse=``).
    - ``postgresql://user[:password]@host:port/db?warehouse=...``: PostgreSQL (psycopg 3).
    - a local path or ``file:///path``: the directory catalog.

    ``password`` (PostgreSQL): used when the URI carries none, so it need not be in the URI.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidCatalogUri(f"catalog URI must be a non-empty string, got {uri!r}")
    for what, text in (("catalog URI", uri), ("warehouse", warehouse)):
        if text is not None and "\x00" in text:
            raise InvalidCatalogUri(f"{what} {redact(text)!r} contains a NUL character ('\\x00'); remove it")
    scheme = _scheme(uri)
    if scheme == "sqlite":
        return open_sqlite(uri, warehouse, storage_options)
    if scheme in ("postgresql", "postgres"):
        return open_postgres(uri, warehouse, storage_options, password)
    if scheme in ("", "file"):
        return DirectoryCatalog(uri)
    raise InvalidCatalogUri(
        f"unknown catalog scheme {scheme!r} in {redact(uri)!r}: use sqlite:///path.db, "
        "postgresql://user@host:port/db or a warehouse directory path"
    )


def _scheme(uri: str) -> str:
    return urllib.parse.urlsplit(uri).scheme.lower()


def local_catalog_path(uri: str) -> str | None:
    """Where on this machine the catalog ``uri`` names lives, absolute: the embedded SQLite
    catalog's database file, the directory catalog's warehouse; None for a server's catalog
    (PostgreSQL). ``load_catalog`` creates a local one that is not there: a caller that only
    means to read one checks this path first."""
    scheme = _scheme(uri)
    if scheme == "sqlite":
        return sqlite_path(uri)
    if scheme in ("", "file"):
        return warehouse_path(uri)
    return None


__all__ = [
    "Catalog",
    "CatalogTable",
    "CatalogVersionLog",
    "DEFAULT_CATALOG",
    "DirectoryCatalog",
    "SqlCatalog",
    "SqlCoordinator",
    "TableInfo",
    "check_name",
    "load_catalog",
    "local_catalog_path",
    "parse_identifier",
]
