"""Which tables a SQL statement names are Lamina tables, and where they are.

A statement names a Lamina table in one of three ways, tried in this order:

- by location, as Delta does with ``delta.`/path```: ``lamina.`s3://bucket/orders``` or
  ``lamina.`/data/orders``` (a backquoted name in the namespace ``lamina`` that holds a ``/``);
- by identifier in a Lamina catalog: the catalog the call is given (``catalog=``: a Catalog or
  a catalog URI), else the session's ``spark.lamina.catalog`` (a catalog URI; its password in
  ``spark.lamina.catalog.password``, which Spark redacts): ``shop.orders`` if the catalog has
  that table, ``lamina.shop.orders`` always (``lamina`` then names the catalog);
- by a name in Spark's session catalog registered ``USING lamina`` (``CREATE TABLE orders
  USING lamina LOCATION '...'``; lamina.spark.registered): the location its recorded schema
  carries.

Anything else is not a Lamina table: Spark's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lamina
from lamina.errors import InvalidArgument, InvalidIdentifier
from lamina.spark._target import TableRef
from lamina.spark.datasource_options import storage_options
from lamina.spark.registered import registered_options

LAMINA = "lamina"
CATALOG_CONF = "spark.lamina.catalog"
CATALOG_PASSWORD_CONF = "spark.lamina.catalog.password"


@dataclass
class LaminaName:
    """A Lamina table a statement names: where it is, and the Spark catalog name it is
    registered under (None: not registered in Spark's catalog)."""

    ref: TableRef
    text: str  # as the statement wrote it, for messages
    spark_name: str | None = None
    registered: dict[str, str] | None = None  # the options Spark's catalog recorded for it

    def open(self) -> lamina.Table:
        return self.ref.open()


def is_path(name: str) -> bool:
    """A table name that is a location (``/data/t``, ``s3://bucket/t``, ``./t``), not an identifier."""
    return "/" in name or "\\" in name


def quote(part: str) -> str:
    return f"`{part.replace('`', '``')}`"


class Names:
    """Resolves the names of one statement (see the module docstring)."""

    def __init__(self, spark: Any, catalog: Any = None, storage_options: Mapping[str, Any] | None = None) -> None:
        self.spark = spark
        self.storage = dict(storage_options) if storage_options else None
        self._catalog_arg = catalog
        self._catalog: Any = None

    @property
    def catalog(self) -> Any:
        """The Lamina catalog names are looked up in: the one given, else the session's; None if neither."""
        if self._catalog is None:
            given = self._catalog_arg
            if given is None:
                uri = self.spark.conf.get(CATALOG_CONF, None)
                if uri:
                    password = self.spark.conf.get(CATALOG_PASSWORD_CONF, None) or None
                    given = lamina.load_catalog(uri, password=password, storage_options=self.storage)
            elif isinstance(given, str):
                given = lamina.load_catalog(given, storage_options=self.storage)
            self._catalog = given
        return self._catalog

    def location(self, path: str, text: str) -> LaminaName:
        return LaminaName(TableRef.of(path, storage_options=self.storage), text)

    def resolve(self, parts: list[str], text: str) -> LaminaName | None:
        """The Lamina table the name ``parts`` (``[catalog, ]namespace, name`` as written) names, or None."""
        if len(parts) == 2 and parts[0].lower() == LAMINA and is_path(parts[1]):
            return self.location(parts[1], text)
        if len(parts) == 3 and parts[0].lower() == LAMINA:
            return self.in_catalog(".".join(parts[1:]), text, required=True)
        if len(parts) == 2:
            found = self.in_catalog(".".join(parts), text, required=False)
            if found is not None:
                return found
        return self.registered(parts, text)

    def in_catalog(self, ident: str, text: str, *, required: bool) -> LaminaName | None:
        """The Lamina catalog's table ``ident``; None if there is no catalog or (unless ``required``) no such table."""
        cat = self.catalog
        if cat is None:
            if required:
                raise InvalidArgument(
                    f"{text} names a table of a Lamina catalog, but none is configured: pass catalog= to "
                    f"lamina.spark.sql, or set {CATALOG_CONF} to the catalog's URI"
                )
            return None
        try:
            exists = cat.table_exists(ident)
        except InvalidIdentifier:
            exists = False
        if not exists and not required:
            return None
        return LaminaName(TableRef.of(ident, catalog=cat, storage_options=self.storage), text)

    def new_in_catalog(self, ident: str, text: str) -> LaminaName:
        """A table of the Lamina catalog, which need not exist yet (CREATE TABLE)."""
        return LaminaName(TableRef.of(ident, catalog=self.catalog, storage_options=self.storage), text)

    def spark_table(self, parts: list[str]) -> tuple[str, Any] | None:
        """(quoted name, schema) of a table (not a view) Spark's catalog has under ``parts``, or None."""
        name = ".".join(quote(p) for p in parts)
        try:
            if not self.spark.catalog.tableExists(name):
                return None
            info = self.spark.catalog.getTable(name)
        except Exception:  # a name Spark's parser refuses, or a catalog Spark does not know: not Spark's table
            return None
        if info.isTemporary or (info.tableType or "").upper() == "VIEW":
            return None
        return name, self.spark.table(name).schema

    def registered(self, parts: list[str], text: str) -> LaminaName | None:
        """The Lamina table registered in Spark's catalog under ``parts``, or None."""
        found = self.spark_table(parts)
        if found is None:
            return None
        name, schema = found
        recorded = registered_options(schema)
        if recorded is None:
            return None
        ref = TableRef.from_options(
            recorded["path"],
            {**storage_options(recorded), **(self.storage or {})},
            recorded.get("catalog"),
            None,
            recorded.get("branch"),
        )
        return LaminaName(ref, text, name, recorded)
