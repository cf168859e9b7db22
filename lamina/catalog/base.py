"""What every catalog offers: namespaces, tables by ``namespace.name``, an online flag.

A catalog maps names to table locations. The SQL catalogs (SQLite, PostgreSQL)
also own each table's commit point (a row compare-and-swap, see
``lamina.catalog.coordinator``); the directory catalog is only a naming
convention over a warehouse directory, its tables commit by put-if-absent.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lamina.errors import InvalidIdentifier, TableOffline, TransactionsUnsupported
from lamina.table.table import Table

# Names become directory names and SQL parameters: letters, digits, '_' and '-' only,
# not starting with '-' (it would read as a CLI option), bounded so paths stay short.
MAX_NAME_LEN = 128
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


def check_name(name: Any, what: str = "name") -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LEN or not _NAME.fullmatch(name):
        raise InvalidIdentifier(
            f"invalid {what} {name!r}: use 1-{MAX_NAME_LEN} letters, digits, '_' or '-' (not starting with '-')"
        )
    return name


def parse_identifier(identifier: Any) -> tuple[str, str]:
    """``"ns.name"`` or ``("ns", "name")`` -> validated (namespace, name)."""
    if isinstance(identifier, (tuple, list)) and len(identifier) == 2:
        ns, name = identifier
    elif isinstance(identifier, str) and identifier.count(".") == 1:
        ns, name = identifier.split(".")
    else:
        raise InvalidIdentifier(f"invalid table identifier {identifier!r}: use 'namespace.name'")
    return check_name(ns, "namespace"), check_name(name, "table name")


@dataclass(frozen=True)
class TableInfo:
    """One catalog entry (what `lamina catalog list` shows)."""

    namespace: str
    name: str
    uuid: str
    location: str
    schema_json: str = field(repr=False)
    online: bool
    version: int
    manifest_path: str

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def schema(self) -> dict[str, Any]:
        return json.loads(self.schema_json)


class Catalog(ABC):
    """Namespaces and tables by name. ``lamina.load_catalog(uri)`` returns one."""

    uri: str  # as given, password redacted

    # -- namespaces
    @abstractmethod
    def create_namespace(self, namespace: str) -> None: ...

    @abstractmethod
    def list_namespaces(self) -> list[str]: ...

    @abstractmethod
    def drop_namespace(self, namespace: str) -> None:
        """Drop an empty namespace (NamespaceNotEmpty if it holds tables)."""

    def namespace_exists(self, namespace: str) -> bool:
        return check_name(namespace, "namespace") in self.list_namespaces()

    # -- tables
    @abstractmethod
    def create_table(
        self,
        identifier: Any,
        schema: pa.Schema,
        partition_by: str | Iterable[str] | None = None,
        properties: Mapping[str, Any] | None = None,
        location: str | None = None,
    ) -> CatalogTable: ...

    @abstractmethod
    def load_table(self, identifier: Any) -> CatalogTable: ...

    @abstractmethod
    def default_location(self, identifier: Any) -> str:
        """Where ``create_table`` puts ``identifier`` when given no location."""

    @abstractmethod
    def table_info(self, identifier: Any) -> TableInfo: ...

    @abstractmethod
    def tables(self, namespace: str | None = None) -> list[TableInfo]:
        """Entries of one namespace (or all), sorted by identifier."""

    def list_tables(self, namespace: str) -> list[str]:
        """Identifiers (``ns.name``) of the tables in ``namespace``."""
        return [t.identifier for t in self.tables(check_name(namespace, "namespace"))]

    @abstractmethod
    def table_exists(self, identifier: Any) -> bool: ...

    @abstractmethod
    def drop_table(self, identifier: Any, purge: bool = False, *, force: bool = False) -> None:
        """Remove the entry; ``purge`` also deletes the table's files (refused while writes are
        in flight unless ``force``)."""

    @abstractmethod
    def rename_table(self, old: Any, new: Any) -> None:
        """Rename (also across namespaces); the location does not move. Refuses an existing target."""

    @abstractmethod
    def set_online(self, identifier: Any, online: bool) -> None: ...

    @abstractmethod
    def is_online(self, identifier: Any) -> bool: ...

    def transaction(self, *, commit_options: Any = None, isolation_level: str = "serializable") -> Any:
        """Several tables' changes committed at once (SQL catalogs; see lamina.catalog.transaction)."""
        raise TransactionsUnsupported(
            f"catalog {self.uri} cannot commit several tables atomically: it has no multi-row compare-and-swap "
            "(each table commits by put-if-absent on its own files). Use a SQL catalog: "
            "lamina.load_catalog('sqlite:///warehouse/catalog.db') or a postgresql:// one. Nothing was changed."
        )

    def snapshot(self, at: Any = None) -> Any:
        """Every table at one catalog state (SQL catalogs; see lamina.catalog.transaction)."""
        raise TransactionsUnsupported(
            f"catalog {self.uri} cannot pin several tables at one state: it records no catalog-wide state. "
            "Use a SQL catalog (sqlite:// or postgresql://), or read each table at a version or tag."
        )

    def reopen_uri(self) -> tuple[str, str | None]:
        """(URI without the password, password or None): enough for another process to
        ``load_catalog`` this same catalog (Spark's Python workers commit through it)."""
        return self.uri, None

    def close(self) -> None:  # noqa: B027 (a default: most catalogs hold nothing to close)
        pass

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class CatalogTable(Table):
    """A Table loaded through a catalog: knows its identifier and honours the online flag.

    Every method marked ``@writes`` (lamina.table.guards: Table's and its namespaces') checks
    ``check_online`` before anything is written; the SQL coordinator also checks the flag in its swap, so a table taken
    offline mid-write still refuses that commit."""

    catalog: Catalog
    identifier: str

    def _bind_catalog(self, catalog: Catalog, identifier: str, online_check: Callable[[], bool]) -> CatalogTable:
        self.catalog = catalog
        self.identifier = identifier
        self._online_check = online_check
        return self

    def check_online(self, online: bool | None = None) -> None:  # overrides Table's no-op
        if not (self._online_check() if online is None else online):
            raise TableOffline(
                f"table {self.identifier} ({self.uri}) is offline: it can be read but not written or maintained; "
                f"bring it back with catalog.set_online({self.identifier!r}, True) or `lamina catalog online {self.identifier}`"
            )

    def iceberg_synced(self, metadata_location: str) -> None:  # overrides Table's no-op
        """The table's Iceberg view has a new newest metadata file: the catalog's Iceberg names
        point at it (SQL catalogs: lamina.catalog.iceberg_names)."""
        publish = getattr(self.catalog, "publish_iceberg_name", None)
        if publish is not None:
            publish(self.identifier, metadata_location)

    def __repr__(self) -> str:
        return f"lamina.CatalogTable({self.identifier!r}, {self.uri!r}, version={self.version})"
