"""The directory catalog: a warehouse directory on local disk, no database.

Namespaces are directories, ``<warehouse>/<ns>/<name>`` is a table (a directory
holding ``_lamina/versions/``), and listing walks the directories. Its tables are
ordinary path tables (commit point: put-if-absent), so anything that can open
a path can use them. The online flag is a marker file outside the table,
``<warehouse>/<ns>/.lamina-offline/<name>`` (a dot name can never be a table
name, and orphan cleanup of the table never sees it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from lamina.catalog.base import Catalog, CatalogTable, TableInfo, check_name, parse_identifier
from lamina.commit import VersionLog, flush_hints
from lamina.data.inflight import live_write_ids
from lamina.errors import (
    CatalogError,
    CatalogTableAlreadyExists,
    CatalogTableNotFound,
    InvalidCatalogUri,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    TableAlreadyExists,
    TableInUse,
)
from lamina.iceberg import flush as iceberg_flush
from lamina.io import FileIO
from lamina.io.fileio import check_local_directory, make_local_directory
from lamina.spec.layout import VERSIONS_DIR, version_path
from lamina.table.table import create_table, open_table

OFFLINE_DIR = ".lamina-offline"


def warehouse_path(warehouse: str) -> str:
    """The absolute local directory a directory catalog's URI (a path or ``file://``) names."""
    if "://" in warehouse and not warehouse.startswith("file://"):
        raise InvalidCatalogUri(
            f"{warehouse!r}: the directory catalog needs a local warehouse path; "
            "use a SQL catalog (sqlite:// or postgresql://) with ?warehouse=s3://... for object stores"
        )
    path = warehouse[len("file://") :] if warehouse.startswith("file://") else warehouse
    return os.path.abspath(os.path.expanduser(path))


class DirectoryCatalog(Catalog):
    def __init__(self, warehouse: str) -> None:
        self.warehouse = warehouse_path(warehouse)
        self.uri = self.warehouse
        check_local_directory(
            self.warehouse,
            "warehouse",
            "the warehouse is the directory holding one directory per namespace",
            InvalidCatalogUri,
        )
        make_local_directory(self.warehouse, "warehouse")

    def __repr__(self) -> str:
        return f"lamina.DirectoryCatalog({self.warehouse!r})"

    def _ns_dir(self, ns: str) -> str:
        return os.path.join(self.warehouse, check_name(ns, "namespace"))

    def _table_dir(self, ns: str, name: str) -> str:
        return os.path.join(self.warehouse, ns, name)

    def _require_namespace(self, ns: str) -> None:
        if not os.path.isdir(self._ns_dir(ns)):
            raise NamespaceNotFound(
                f"no namespace {ns!r} in {self.warehouse}; create it first (catalog.create_namespace)"
            )

    @staticmethod
    def _is_table(path: str) -> bool:
        return os.path.isdir(os.path.join(path, VERSIONS_DIR))

    # -- namespaces
    def create_namespace(self, namespace: str) -> None:
        try:
            os.mkdir(self._ns_dir(namespace))
        except FileExistsError:
            raise NamespaceAlreadyExists(f"namespace {namespace!r} already exists in {self.warehouse}") from None

    def list_namespaces(self) -> list[str]:
        return sorted(
            n
            for n in os.listdir(self.warehouse)
            if os.path.isdir(os.path.join(self.warehouse, n))
            and not n.startswith(".")
            and _valid(n)
            and not self._is_table(os.path.join(self.warehouse, n))
        )

    def namespace_exists(self, namespace: str) -> bool:
        return os.path.isdir(self._ns_dir(namespace))

    def drop_namespace(self, namespace: str) -> None:
        d = self._ns_dir(namespace)
        if not os.path.isdir(d):
            raise NamespaceNotFound(f"no namespace {namespace!r} in {self.warehouse}")
        names = self.list_tables(namespace)
        if names:
            raise NamespaceNotEmpty(f"namespace {namespace!r} holds {len(names)} table(s); drop or rename them first")
        others = [n for n in os.listdir(d) if n != OFFLINE_DIR]
        if others:
            raise NamespaceNotEmpty(f"namespace directory {d} is not empty ({others[:3]}); nothing was dropped")
        shutil.rmtree(os.path.join(d, OFFLINE_DIR), ignore_errors=True)
        os.rmdir(d)

    # -- tables
    def _offline_marker(self, ns: str, name: str) -> str:
        return os.path.join(self.warehouse, ns, OFFLINE_DIR, name)

    def _locate(self, identifier: Any) -> tuple[str, str, str]:
        ns, name = parse_identifier(identifier)
        path = self._table_dir(ns, name)
        if not self._is_table(path):
            self._require_namespace(ns)
            raise CatalogTableNotFound(f"no table {ns}.{name} in {self.warehouse}")
        return ns, name, path

    def table_info(self, identifier: Any) -> TableInfo:
        ns, name, path = self._locate(identifier)
        vm = VersionLog(FileIO(path)).latest()
        return TableInfo(
            namespace=ns,
            name=name,
            uuid=vm.table_uuid,
            location=path,
            schema_json=json.dumps(vm.schema.to_json()),
            online=not os.path.exists(self._offline_marker(ns, name)),
            version=vm.version,
            manifest_path=version_path(vm.version),
        )

    def tables(self, namespace: str | None = None) -> list[TableInfo]:
        if namespace is not None:
            self._require_namespace(namespace)
        out = []
        for ns in [namespace] if namespace is not None else self.list_namespaces():
            d = self._ns_dir(ns)
            for n in sorted(os.listdir(d)):
                if _valid(n) and self._is_table(os.path.join(d, n)):
                    out.append(self.table_info((ns, n)))
        return out

    def table_exists(self, identifier: Any) -> bool:
        ns, name = parse_identifier(identifier)
        return self._is_table(self._table_dir(ns, name))

    def default_location(self, identifier: Any) -> str:
        return self._table_dir(*parse_identifier(identifier))

    def create_table(
        self,
        identifier: Any,
        schema: pa.Schema,
        partition_by: str | Iterable[str] | None = None,
        properties: Mapping[str, Any] | None = None,
        location: str | None = None,
    ) -> CatalogTable:
        ns, name = parse_identifier(identifier)
        path = self._table_dir(ns, name)
        if location is not None and os.path.abspath(location) != path:
            raise CatalogError(f"the directory catalog keeps table {ns}.{name} at {path}; location= cannot differ")
        self._require_namespace(ns)
        try:
            create_table(path, schema, partition_by, properties, identifier=f"{ns}.{name}")
        except TableAlreadyExists:
            raise CatalogTableAlreadyExists(f"table {ns}.{name} already exists in {self.warehouse}") from None
        return self.load_table((ns, name))

    def load_table(self, identifier: Any) -> CatalogTable:
        ns, name, path = self._locate(identifier)
        t = open_table(path)
        t.log.table_identifier = f"{ns}.{name}"
        table = CatalogTable(t.io, t.log, t.metadata)
        marker = self._offline_marker(ns, name)
        return table._bind_catalog(self, f"{ns}.{name}", lambda: not os.path.exists(marker))

    def is_online(self, identifier: Any) -> bool:
        ns, name, _ = self._locate(identifier)
        return not os.path.exists(self._offline_marker(ns, name))

    def set_online(self, identifier: Any, online: bool) -> None:
        ns, name, _ = self._locate(identifier)
        marker = self._offline_marker(ns, name)
        if online:
            try:
                os.remove(marker)
            except FileNotFoundError:
                pass
        else:
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            open(marker, "w").close()

    def rename_table(self, old: Any, new: Any) -> None:
        ons, oname, src = self._locate(old)
        nns, nname = parse_identifier(new)
        self._require_namespace(nns)
        dst = self._table_dir(nns, nname)
        if os.path.exists(dst):
            raise CatalogTableAlreadyExists(f"cannot rename {ons}.{oname} to {nns}.{nname}: that name is taken")
        # The location is the name here, so a rename moves the directory (atomic on one
        # file system): path readers of the old location must reopen the new one.
        iceberg_flush(FileIO(src).uri)  # a queued update of the Iceberg view would recreate the old one
        os.rename(src, dst)
        marker = self._offline_marker(ons, oname)
        if os.path.exists(marker):
            self.set_online((nns, nname), False)
            os.remove(marker)

    def drop_table(self, identifier: Any, purge: bool = False, *, force: bool = False) -> None:
        ns, name, path = self._locate(identifier)
        if not purge:
            raise CatalogError(
                "the directory catalog is its directories: dropping a table without purge would leave it listed; "
                "pass purge=True to delete it"
            )
        if not force and live_write_ids(FileIO(path)):
            raise TableInUse(f"table {ns}.{name} has writes in flight; nothing was dropped (force=True overrides)")
        flush_hints()  # a queued version hint would land after the purge and recreate the directory
        iceberg_flush(FileIO(path).uri)  # and so would a queued update of the Iceberg view
        shutil.rmtree(path)
        try:
            os.remove(self._offline_marker(ns, name))
        except FileNotFoundError:
            pass


def _valid(name: str) -> bool:
    try:
        check_name(name)
        return True
    except CatalogError:
        return False
