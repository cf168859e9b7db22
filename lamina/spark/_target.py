"""The table a Spark entry point reads or writes: a location, or a table of a catalog.

Every ``lamina.spark`` function takes a *target*:

- a location (``"warehouse/orders"``, ``"s3://bucket/orders"``): opened by path, commits
  by put-if-absent;
- a ``lamina.Table`` already open, e.g. ``catalog.load_table("shop.orders")``: commits go
  through that table's coordinator (the catalog's compare-and-swap for SQL catalogs);
- an identifier (``"shop.orders"``) with ``catalog=`` (a Catalog or a catalog URI): the same,
  and a write to a table the catalog does not have yet creates it there.

A catalog-managed table refuses writers that opened it by path (writer feature
``catalog-commits``), so a pipeline on a catalog must name the table through it.

``TableRef`` pickles without its open catalog and table, but with what reopens the
catalog (its URI and password): Spark runs a Python data source's driver-side commit
in a Python worker process, which must commit through the same catalog.
``format("lamina")`` takes the same target as options: ``path`` (a location, or an
identifier when ``catalog`` is set), ``catalog`` (a catalog URI), ``catalog.password``
(Spark redacts option keys containing "password" in its plans and UI).

Every entry point also takes a *branch* (``branch=`` / option ``branch``): the target is
then that branch's handle (``Table.branch``), so reads see the branch's versions and
writes commit to the branch's own log, never to main (a catalog's table: put-if-absent in
the branch's log, the catalog row tracks main). An unknown branch is BranchNotFound before
anything is written; a table that does not exist has no branch to write to (TableNotFound).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

import lamina
from lamina.errors import CatalogTableAlreadyExists, InvalidArgument, SchemaMismatch, TableAlreadyExists, TableNotFound
from lamina.io import FileIO
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema


def _catalog(catalog: Any) -> Any:
    if catalog is None or not isinstance(catalog, str):
        return catalog
    return lamina.load_catalog(catalog)


def _reopen(catalog: Any) -> tuple[str | None, str | None]:
    return catalog.reopen_uri() if catalog is not None else (None, None)


@dataclass
class TableRef:
    location: str
    storage_options: dict[str, Any] | None = None
    identifier: str | None = None  # "ns.name" when the table is (to be) named by a catalog
    catalog_uri: str | None = None  # reopens the catalog in another process (no password)
    catalog_password: str | None = field(default=None, repr=False)
    catalog: Any = field(default=None, repr=False)
    table: Any = field(
        default=None, repr=False
    )  # an open lamina.Table (the branch's handle), if one was given or opened
    branch: str | None = None  # the branch read or written; None: main

    @classmethod
    def of(
        cls,
        target: Any,
        *,
        catalog: Any = None,
        storage_options: Mapping[str, Any] | None = None,
        branch: str | None = None,
    ) -> TableRef:
        storage = dict(storage_options) if storage_options else None
        if branch == MAIN_BRANCH:
            branch = None
        if isinstance(target, lamina.Table):
            if catalog is not None:
                raise InvalidArgument("pass either an open Table or catalog= with an identifier, not both")
            if target.branch_name != MAIN_BRANCH:  # a branch's handle names its branch
                if branch not in (None, target.branch_name):
                    raise InvalidArgument(
                        f"the table given is a handle on branch {target.branch_name!r}, but branch={branch!r} was "
                        "asked for: pass the main table with branch=, or the branch's handle alone"
                    )
                branch = target.branch_name
            elif branch is not None:
                target = target.branch(branch)  # BranchNotFound now, before anything is written
            cat = getattr(target, "catalog", None)
            storage = storage or (dict(target.io.options) or None)
            return cls(target.uri, storage, getattr(target, "identifier", None), *_reopen(cat), cat, target, branch)
        if not isinstance(target, str) or not target.strip():
            raise InvalidArgument(
                f"a Lamina table is a location, an identifier with catalog=, or a Table; got {target!r}"
            )
        cat = _catalog(catalog)
        if cat is None:
            return cls(target, storage, branch=branch)
        try:
            table = cat.load_table(target)
        except TableNotFound:
            return cls(cat.default_location(target), storage, target, *_reopen(cat), cat, branch=branch)
        return cls(
            table.uri,
            storage,
            table.identifier,
            *_reopen(cat),
            cat,
            table if branch is None else table.branch(branch),
            branch,
        )

    @classmethod
    def from_options(
        cls,
        path: str,
        storage: Mapping[str, Any],
        catalog_uri: str | None,
        password: str | None,
        branch: str | None = None,
    ) -> TableRef:
        """The target of ``format("lamina")`` options (see the module docstring)."""
        if catalog_uri is None:
            return cls.of(path, storage_options=storage, branch=branch)
        cat = lamina.load_catalog(catalog_uri, password=password, storage_options=dict(storage) or None)
        return cls.of(path, catalog=cat, storage_options=storage, branch=branch)

    @property
    def storage(self) -> dict[str, Any]:
        """The storage options the table is reached with: the catalog's, then the target's own."""
        return {**(getattr(self.catalog, "storage_options", None) or {}), **(self.storage_options or {})}

    def data_source_options(self) -> dict[str, str]:
        """This target as ``format("lamina")`` options."""
        opts = {k: str(v) for k, v in self.storage.items()}
        if self.branch is not None:
            opts["branch"] = self.branch
        if self.catalog_uri is None:
            return {**opts, "path": self.location}
        opts.update(path=str(self.identifier), catalog=self.catalog_uri)
        if self.catalog_password:
            opts["catalog.password"] = self.catalog_password
        return opts

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "catalog": None, "table": None}

    @property
    def name(self) -> str:
        return self.identifier or self.location

    @property
    def io(self) -> FileIO:
        return self.table.io if self.table is not None else FileIO(self.location, self.storage or None)

    def _catalog(self) -> Any:
        if self.catalog is None and self.catalog_uri is not None:  # unpickled in another process
            self.catalog = lamina.load_catalog(
                self.catalog_uri, password=self.catalog_password, storage_options=self.storage_options
            )
        return self.catalog

    def open(self) -> lamina.Table:
        """The table (the branch's handle, with ``branch``) at its latest version; TableNotFound
        if it does not exist, BranchNotFound if it has no such branch."""
        if self.table is None:
            self._catalog()
            if self.catalog is not None:
                table = self.catalog.load_table(self.identifier)
            else:
                table = lamina.open_table(self.location, storage_options=self.storage_options)
            self.table = table if self.branch is None else table.branch(self.branch)
        else:
            self.table.refresh()
        return self.table

    def open_or_none(self) -> lamina.Table | None:
        """The table, or None if it does not exist yet (a write creates it). A branch is
        never created by a write: writing one of a missing table is TableNotFound."""
        opened = self.table is not None
        try:
            return self.open()
        except TableNotFound:
            if self.branch is not None and not opened:
                raise TableNotFound(
                    f"no table {self.name}, so no branch {self.branch!r} to write to: create the table, then the "
                    "branch (t.branches.create); nothing was written"
                ) from None
            return None

    def create(
        self,
        schema: Schema,
        spec: PartitionSpec,
        partition_by: Any,
        properties: Mapping[str, Any] | None,
        *,
        exclusive: bool = False,
    ) -> lamina.Table:
        """Create the table (through the catalog when there is one), or open it if a concurrent
        writer created it first with the same schema and partitioning (``exclusive``: raise
        TableAlreadyExists instead)."""
        plain = pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema.arrow])
        try:
            if self._catalog() is not None:
                self.table = self.catalog.create_table(
                    self.identifier, plain, partition_by=partition_by, properties=properties, location=self.location
                )
            else:
                self.table = lamina.create_table(
                    self.location,
                    plain,
                    partition_by=partition_by,
                    properties=properties,
                    storage_options=self.storage_options,
                )
        except (TableAlreadyExists, CatalogTableAlreadyExists):
            if exclusive:
                raise
            self.table = None
            self.open()
        table = self.table
        if (
            table.metadata.schema.to_json()["fields"] != schema.to_json()["fields"]
            or table.partition_spec.fields != spec.fields
        ):
            raise SchemaMismatch(
                f"table {self.name} was created concurrently with another schema or partitioning; nothing was committed"
            )
        return table
