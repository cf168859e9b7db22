"""Lamina table versions as DuckDB views: ``register`` (one version, pruned by a ``where``),
``register_catalog`` (every table of a catalog), and the SELECT a view is made of
(``_view_body``: DuckDB's Parquet reader over the planned files, deletes dropped inside its
scan or anti-joined, else a pyarrow Dataset). ``sql`` reuses views through ``view_cache``."""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

import lamina
from lamina.catalog.base import Catalog
from lamina.data.export import LiveFiles
from lamina.data.scan import Scan
from lamina.duckdb import deltalog, extensions
from lamina.duckdb.pruning import pruning_predicate, where_conjuncts, where_text
from lamina.duckdb.quoting import identifier, string
from lamina.duckdb.s3 import s3_ready
from lamina.spec.lineage import LINEAGE_COLUMNS
from lamina.table.table import Table

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection, DuckDBPyRelation

__all__ = ["register", "register_catalog", "register_scan", "view_cache"]

_names = itertools.count()


def register(
    con: DuckDBPyConnection,
    table: Table | str,
    name: str,
    *,
    version: int | str | None = None,
    timestamp: _dt.datetime | str | int | None = None,
    where: str | None = None,
    columns: list[str] | None = None,
    quoted: bool = False,
) -> DuckDBPyRelation:
    """Make a version of ``table`` (a Table, or a table location) the view ``name`` of the
    DuckDB connection ``con``; returns the view as a relation.

    ``where`` (DuckDB SQL, e.g. ``"day >= DATE '2026-01-01'"``): the view holds only the rows
    it selects, and Lamina skips the files that cannot hold one. ``columns``: the view's
    columns (default: all). ``version``/``timestamp`` as for ``Table.scan`` (a branch's name:
    its latest)."""
    t = lamina.open_table(table) if isinstance(table, str) else table
    parts: list[str] = []
    text = None
    if where is not None:
        text = where_text(where)
        parts = where_conjuncts(text)
    vm_scan = t.scan(columns=columns, version=version, timestamp=timestamp)
    scan = Scan(vm_scan.io, vm_scan.vm, pruning_predicate(parts, vm_scan.schema), columns, log=vm_scan.log)
    # A second Lamina view on a connection: queries joining them are likely (``_view_body``).
    joins = _registered.get(con, 0) > 0
    _registered[con] = _registered.get(con, 0) + 1
    return register_scan(con, scan, name if quoted else identifier(name), where=text, joins=joins)


# How many views ``register`` made per connection.
_registered: weakref.WeakKeyDictionary[DuckDBPyConnection, int] = weakref.WeakKeyDictionary()


def register_scan(
    con: DuckDBPyConnection, scan: Scan, name: str, where: str | None = None, joins: bool = False
) -> DuckDBPyRelation:
    """The view ``name`` (quoted SQL) over ``scan``'s planned files (its predicate has pruned them; DuckDB
    filters rows by ``where``, DuckDB SQL, when given). ``joins``: queries are expected to join
    the view (``_view_body``)."""
    tail = f" WHERE {where}" if where else ""
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM ({_view_body(con, scan, joins).sql}){tail}")
    return con.sql(f"FROM {name}")


@dataclass(frozen=True)
class _Body:
    sql: str
    log: str | None = None  # the Delta log it reads (lamina.duckdb.deltalog), if any
    # Deletes anti-joined only because no join was expected: a query that joins should get a
    # ``delta_scan`` body instead.
    upgradable: bool = False


def _view_body(con: DuckDBPyConnection, scan: Scan, joins: bool = False) -> _Body:
    """A SELECT of ``scan``'s rows on ``con``; what it needs (file lists, deleted positions, a
    Delta log, an S3 secret) is made on ``con`` now. Chosen by what DuckDB can read itself:

    - every file holds the columns by their names: ``read_parquet`` of the files, local or
      ``s3://`` (httpfs); files with deletion vectors through ``delta_scan`` of a Delta log
      of the version (``lamina.duckdb.deltalog``: deletes applied inside DuckDB's Parquet
      scan, so the plan is that of the plain files), or anti-joined on ``file_row_number``
      with their deleted positions: without the delta extension, for an object store, and
      where no join is expected (``joins`` false) and the connection has not loaded the
      extension yet — loading it checks the signature of its whole file (tens of MB), per
      connection, which costs more than a one-table query; with no join to reorder, the
      anti-join's plan is the plain files' plan plus the join;
    - otherwise a pyarrow Dataset of the scan (renamed nested fields, defaults, row
      lineage; object stores DuckDB cannot reach)."""
    sources = _column_sources(scan)
    io = scan.io
    names = ", ".join(identifier(c) for c in scan.output_columns)
    if sources is None or not (io.is_local or s3_ready(con, io)):
        return _dataset_body(con, scan, names)
    live = LiveFiles.of(scan, statistics=True)
    held = _columns_held(live, sources)
    if held is None:
        return _dataset_body(con, scan, names)
    # Lamina's files never change once written, so DuckDB's footer cache is safe for them.
    con.execute("SET parquet_metadata_cache = true")
    if not len(live):
        empty = f"__lamina_empty_{next(_names)}"
        con.register(empty, scan.arrow_schema_of(scan.output_columns).empty_table())
        return _Body(f"SELECT * FROM {identifier(empty)}")
    everything = frozenset(p for p, _ in sources)
    upgradable = False
    if live.has_deletes and all(h == everything for h in held) and all(p == c for p, c in sources) and io.is_local:
        if extensions.is_loaded(con, "delta") or (joins and extensions.load(con, "delta")):
            root = deltalog.log_of(live, scan.arrow_schema_of(scan.output_columns))
            if root is not None:
                return _Body(f"SELECT {names} FROM delta_scan({string(root)})", root)
        else:
            upgradable = not joins and deltalog.delta_schema(scan.arrow_schema_of(scan.output_columns)) is not None
    # Files are read in groups that hold the same columns (a file written before a column
    # was added lacks it: NULL there) and alike have or lack deletes; each group is one
    # read_parquet by name, without union_by_name (which reads every footer at each bind).
    groups: dict[tuple[frozenset, bool], list[int]] = {}
    for i, (have, dv) in enumerate(zip(held, live.dvs)):
        groups.setdefault((have, dv is not None), []).append(i)
    types = _duckdb_types(con, scan) if any(len(have) < len(sources) for have, _ in groups) else {}
    selects = []
    for (have, with_dv), idx in groups.items():
        cols = ", ".join(
            (identifier(c) if p == c else f"{identifier(p)} AS {identifier(c)}")
            if p in have
            else f"CAST(NULL AS {types[c]}) AS {identifier(c)}"
            for p, c in sources
        )
        var = f"lamina_files_{next(_names)}"
        con.execute(f"SET VARIABLE {var} = ?", [[live.uris[i] for i in idx]])
        # No hive partitioning: a partition's directory name (k=__NULL__) is no column.
        files = (
            f"read_parquet(getvariable('{var}'), hive_partitioning=false{', file_row_number=true' if with_dv else ''})"
        )
        if not with_dv:
            selects.append(f"SELECT {cols} FROM {files}")
            continue
        dels = f"__lamina_deleted_{next(_names)}"
        con.register(dels, live.deleted_table(idx))
        # file_index: the file's place in the list read_parquet was given.
        selects.append(
            f"SELECT {cols} FROM {files} AS r "
            f"ANTI JOIN {identifier(dels)} AS d ON d.file_index = r.file_index AND d.pos = r.file_row_number"
        )
    return _Body(" UNION ALL ".join(selects), upgradable=upgradable)


def _dataset_body(con: DuckDBPyConnection, scan: Scan, names: str) -> _Body:
    """A SELECT of ``names`` from a pyarrow Dataset of ``scan``, registered on ``con``."""
    data = f"__lamina_data_{next(_names)}"
    con.register(data, scan.to_pyarrow_dataset())
    return _Body(f"SELECT {names} FROM {identifier(data)}")


class _ViewCache:
    """Per connection, the views ``sql`` made, by what they read: the table, the version (its
    commit id: a branch's version numbers are its own) and the predicate that pruned its files.
    A query naming a version a view was made for reuses it (no plan, no DV read, no binding of
    a new view); a new version gets its own, and so does a joining query where the view
    anti-joins its deletes (``_Body.upgradable``). At most ``MAX`` per connection, the least
    recently used dropped."""

    MAX = 128

    def __init__(self) -> None:
        self.by_con: weakref.WeakKeyDictionary[DuckDBPyConnection, OrderedDict[tuple, tuple[str, _Body]]] = (
            weakref.WeakKeyDictionary()
        )

    def view_of(self, con: DuckDBPyConnection, scan: Scan, joins: bool = False) -> str:
        views = self.by_con.setdefault(con, OrderedDict())
        key = (scan.io.uri, scan.vm.commit_id, scan.version, repr(scan.predicate), tuple(scan.columns or ()))
        hit = views.get(key)
        if (
            hit is not None
            and (hit[1].log is None or os.path.isdir(hit[1].log))
            and not (hit[1].upgradable and (joins or extensions.is_loaded(con, "delta")))
        ):
            views.move_to_end(key)
            return hit[0]
        name = hit[0] if hit is not None else f"__lamina_view_{next(_names)}"
        body = _view_body(con, scan, joins)
        con.execute(f"CREATE OR REPLACE VIEW {identifier(name)} AS {body.sql}")
        views[key] = (name, body)
        views.move_to_end(key)
        while len(views) > self.MAX:
            _, (old, _) = views.popitem(last=False)
            con.execute(f"DROP VIEW IF EXISTS {identifier(old)}")
        return name


# The views ``sql`` made, per connection.
view_cache = _ViewCache()


def _column_sources(scan: Scan) -> list[tuple[str, str]] | None:
    """(name in the files, column) of each of the scan's columns: its name, or its physical
    name where the schema renamed a top-level column. None when only Lamina's reader can map
    the files: a renamed nested field, a column with an initial default (a file that lacks
    it reads the default, not NULL), row lineage columns."""
    schema = scan.schema
    if any(c in LINEAGE_COLUMNS for c in scan.output_columns) or schema.initial_defaults:
        return None
    physical = schema.physical_arrow
    out = []
    for c in scan.output_columns:
        f = physical.field(schema.arrow.get_field_index(c))
        if not f.type.equals(schema.arrow.field(c).type):
            return None
        out.append((f.name, c))
    return out


def _columns_held(live: LiveFiles, sources: list[tuple[str, str]]) -> list[frozenset] | None:
    """Per file, which of the physical names ``sources`` reads it holds. A file whose entry
    records every column's statistics holds them all (Lamina's writer records each column it
    writes); any other file (written before a column was added, or added by add_files
    without statistics) is asked: its Parquet footer's column names (None for such a file
    on an object store)."""
    everything = frozenset(p for p, _ in sources)
    out = []
    for i, held in enumerate(live.files_holding([c for _, c in sources])):
        if held:
            out.append(everything)
        elif not live.scan.io.is_local:
            return None  # (no footer read from an object store here: the Dataset maps such files)
        else:
            names = set(pq.read_schema(live.scan.io.local_path(live.paths[i])).names)
            out.append(frozenset(p for p in everything if p in names))
    return out


def _duckdb_types(con: DuckDBPyConnection, scan: Scan) -> dict[str, str]:
    """The DuckDB SQL type of each of the scan's columns (for a NULL of a file that lacks it)."""
    empty = scan.arrow_schema_of(scan.output_columns).empty_table()
    return {c: str(t) for c, t in zip(scan.output_columns, con.from_arrow(empty).types)}


def register_catalog(con: DuckDBPyConnection, catalog: Catalog | str) -> list[str]:
    """Every table of ``catalog`` (an open catalog or its URI) as a view of its latest version,
    named ``namespace.table`` (a DuckDB schema per namespace); returns the names."""
    opened = isinstance(catalog, str)
    cat = lamina.load_catalog(catalog) if isinstance(catalog, str) else catalog
    names = []
    try:
        for info in cat.tables():
            namespace, _, tname = info.identifier.rpartition(".")
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {identifier(namespace)}")
            # (a catalog's tables are there to be joined: its first one too is read as a later register's)
            _registered[con] = _registered.get(con, 0) + 1
            register(con, cat.load_table(info.identifier), f"{identifier(namespace)}.{identifier(tname)}", quoted=True)
            names.append(info.identifier)
    finally:
        if opened:  # a catalog opened from its URI here is this call's to close (its connection)
            cat.close()
    return names
