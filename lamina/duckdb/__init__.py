"""DuckDB reads Lamina tables: ``register`` makes one version a view, ``sql`` runs a query over
tables named in it (catalog names, paths, time travel), ``register_catalog`` names them all.

A view reads the version's planned data files with DuckDB's own Parquet reader (its
projection and filter pushdown, its threads). Deleted rows are dropped exactly, inside
DuckDB's scan where its delta extension loads (``lamina.duckdb.deltalog``: the plan is that
of the plain files), else by an anti-join of ``file_row_number`` with the deleted positions.
``s3://`` tables are read by DuckDB's httpfs (``lamina.duckdb.extensions``). Lamina prunes files before DuckDB sees them: by the
``where`` given to ``register``, and in ``sql`` by the conjuncts of each query's WHERE that
name only one table. Pruning uses Lamina's statistics and Lamina's predicate semantics, so
only predicates on columns where both agree are used (``_PRUNABLE``); the rows are always
filtered by DuckDB. Tables DuckDB cannot read by itself (object stores without DuckDB's
httpfs, evolved schemas, row lineage columns) are handed over as a pyarrow Dataset
(``lamina.data.export``). See docs/engines.md.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import itertools
import json
import logging
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.parsers.duckdb import DuckDBParser

import lamina
from lamina.catalog.base import Catalog
from lamina.data.export import LiveFiles
from lamina.data.scan import Scan
from lamina.duckdb import deltalog, extensions
from lamina.errors import (
    InvalidArgument,
    InvalidIdentifier,
    InvalidPredicate,
    InvalidUri,
    NamespaceNotFound,
    NotFound,
    TableNotFound,
)
from lamina.expr import AlwaysTrue, And, Expr, Not, Or, Predicate, and_, conjuncts, parse_predicate, referenced_columns
from lamina.expr.terms import Call, Literal, walk
from lamina.io.fileio import FileIO, s3_settings
from lamina.spec.lineage import LINEAGE_COLUMNS
from lamina.spec.schema import Schema
from lamina.table.table import Table

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection, DuckDBPyRelation

__all__ = ["register", "register_catalog", "register_scan", "sql", "pruning_predicate", "error_text"]

_names = itertools.count()
_secrets: weakref.WeakKeyDictionary[DuckDBPyConnection, set[str]] = weakref.WeakKeyDictionary()


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _is_prunable(t: pa.DataType) -> bool:
    """Types whose comparisons DuckDB and Lamina evaluate alike. Not floats (Lamina compares a
    float32 column with a literal exactly, DuckDB rounds the literal to FLOAT); zoned
    timestamps only against literals with an offset (``_zoned_literals``)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)
        or pa.types.is_timestamp(t)
    )


def _leaves(e: Expr) -> list[Expr]:
    if isinstance(e, (And, Or)):
        return _leaves(e.left) + _leaves(e.right)
    if isinstance(e, Not):
        return _leaves(e.child)
    return [e]


def _zoned_literals(e: Expr, schema: Schema) -> bool:
    """Whether every literal compared with a zoned timestamp column names its offset: DuckDB
    reads a literal without one in the session's time zone, Lamina as UTC."""
    for leaf in _leaves(e):
        name = getattr(leaf, "name", None)
        if name is None or getattr(schema.field(name).type, "tz", None) is None:
            continue
        values = getattr(leaf, "values", None) or ([leaf.value] if hasattr(leaf, "value") else [])
        if not all(isinstance(v, _dt.datetime) and v.tzinfo is not None for v in values):
            return False
    return True


# Functions of expressions whose values DuckDB computes as Lamina does (its SQL and Spark's
# agree on them), so that Lamina's bounds for them hold for DuckDB's rows. Not: casts to
# integers (DuckDB rounds, Spark truncates), ``x[i]`` (from 1 in DuckDB), DIV and ``//``,
# DECIMAL ``/``, substring from 0 or before, current_date and current_timestamp (DuckDB's
# session time zone), LIKE with a backslash (no default escape in DuckDB), lower/upper.
_DUCKDB_ALIKE = {
    "=",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "and",
    "or",
    "not",
    "in",
    "not_in",
    "is_null",
    "is_not_null",
    "not_distinct",
    "distinct",
    "+",
    "-",
    "*",
    "neg",
    "abs",
    "like",
    "not_like",
    "starts_with",
    "ends_with",
    "contains",
    "coalesce",
    "case",
    "date_trunc",
    "year",
    "month",
    "day",
    "hour",
    "quarter",
    "dayofyear",
    "length",
    "concat",
    "trim",
}


def _alike_in_duckdb(e: Expr) -> bool:
    """Whether every expression leaf of ``e`` (unbound) calls only ``_DUCKDB_ALIKE`` functions,
    as DuckDB means them."""
    for leaf in _leaves(e):
        if not isinstance(leaf, Predicate):
            continue
        for node in walk(leaf.term):
            if not isinstance(node, Call):
                continue
            if node.fn not in _DUCKDB_ALIKE:
                return False
            if node.fn in ("like", "not_like") and any(
                isinstance(a, Literal) and "\\" in str(a.value) for a in node.args
            ):
                return False
    return True


def pruning_predicate(conjuncts: list[str], schema: Schema) -> Expr:
    """The conjuncts (SQL text) Lamina can prune files by, ANDed: those it parses, on columns
    of ``schema`` of types both engines compare alike, calling functions both compute alike.
    The rest are left to DuckDB."""
    kept: list[Expr] = []
    for text in conjuncts:
        try:
            e = parse_predicate(text)
        except InvalidPredicate:
            continue
        cols = referenced_columns(e)
        if (
            cols
            and all(c in schema.names and _is_prunable(schema.field(c).type) for c in cols)
            and _zoned_literals(e, schema)
            and _alike_in_duckdb(e)
            and not _zoned_terms(e, schema)
        ):
            kept.append(e)
    return and_(*kept) if kept else AlwaysTrue()


def _zoned_terms(e: Expr, schema: Schema) -> bool:
    """Whether an expression leaf of ``e`` reads a zoned timestamp column (DuckDB's functions
    of those read its session's time zone)."""
    return any(
        isinstance(leaf, Predicate)
        and any(getattr(schema.field(c).type, "tz", None) is not None for c in referenced_columns(leaf))
        for leaf in _leaves(e)
    )


def _where_text(where: str) -> str:
    """``where`` as one DuckDB boolean expression (refusing statements or query clauses)."""
    try:
        stmt = sqlglot.parse_one(f"SELECT 1 WHERE {where}", read="duckdb")
    except Exception as e:  # sqlglot's ParseError / TokenError: bad input
        raise InvalidPredicate(f"could not parse where {where!r}: {e}") from None
    if not isinstance(stmt, exp.Select) or [k for k, v in stmt.args.items() if v and k not in ("expressions", "where")]:
        raise InvalidPredicate(f"where {where!r} must be one boolean expression")
    return stmt.args["where"].this.sql("duckdb")


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
        text = _where_text(where)
        condition = sqlglot.parse_one(text, read="duckdb")
        assert isinstance(condition, exp.Expression)  # (every node sqlglot builds is one: Expr is its trait)
        parts = [c.sql("duckdb") for c in conjuncts(condition)]
    vm_scan = t.scan(columns=columns, version=version, timestamp=timestamp)
    scan = Scan(vm_scan.io, vm_scan.vm, pruning_predicate(parts, vm_scan.schema), columns, log=vm_scan.log)
    # A second Lamina view on a connection: queries joining them are likely (``_view_body``).
    joins = _registered.get(con, 0) > 0
    _registered[con] = _registered.get(con, 0) + 1
    return register_scan(con, scan, name if quoted else _ident(name), where=text, joins=joins)


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
    names = ", ".join(_ident(c) for c in scan.output_columns)
    if sources is None or not (io.is_local or _s3_ready(con, io)):
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
        return _Body(f"SELECT * FROM {_ident(empty)}")
    everything = frozenset(p for p, _ in sources)
    upgradable = False
    if live.has_deletes and all(h == everything for h in held) and all(p == c for p, c in sources) and io.is_local:
        if extensions.is_loaded(con, "delta") or (joins and extensions.load(con, "delta")):
            root = deltalog.log_of(live, scan.arrow_schema_of(scan.output_columns))
            if root is not None:
                return _Body(f"SELECT {names} FROM delta_scan({_string(root)})", root)
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
            (_ident(c) if p == c else f"{_ident(p)} AS {_ident(c)}")
            if p in have
            else f"CAST(NULL AS {types[c]}) AS {_ident(c)}"
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
            f"ANTI JOIN {_ident(dels)} AS d ON d.file_index = r.file_index AND d.pos = r.file_row_number"
        )
    return _Body(" UNION ALL ".join(selects), upgradable=upgradable)


def _dataset_body(con: DuckDBPyConnection, scan: Scan, names: str) -> _Body:
    """A SELECT of ``names`` from a pyarrow Dataset of ``scan``, registered on ``con``."""
    data = f"__lamina_data_{next(_names)}"
    con.register(data, scan.to_pyarrow_dataset())
    return _Body(f"SELECT {names} FROM {_ident(data)}")


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
        con.execute(f"CREATE OR REPLACE VIEW {_ident(name)} AS {body.sql}")
        views[key] = (name, body)
        views.move_to_end(key)
        while len(views) > self.MAX:
            _, (old, _) = views.popitem(last=False)
            con.execute(f"DROP VIEW IF EXISTS {_ident(old)}")
        return name


_views = _ViewCache()


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _s3_ready(con: DuckDBPyConnection, io: FileIO) -> bool:
    """Whether DuckDB reads ``io``'s ``s3://`` files itself: httpfs loads, and a secret scoped
    to the table's location carries its endpoint and keys (``lamina.io.fileio.s3_settings``)."""
    if io.scheme not in ("s3", "s3a") or not extensions.load(con, "httpfs"):
        return False
    cfg = s3_settings(io.options)
    scope = io.full_uri("")
    secret = (
        "lamina_s3_" + hashlib.sha256(json.dumps([scope, sorted(cfg.items())], default=str).encode()).hexdigest()[:16]
    )
    done = _secrets.setdefault(con, set())
    if secret in done:
        return True
    parts = ["TYPE s3", f"SCOPE {_string(scope.replace('s3a://', 's3://', 1))}"]
    endpoint = str(cfg.get("endpoint") or "")
    if endpoint:
        ssl = not endpoint.startswith("http://") and not _is_true(cfg.get("allow_http"))
        parts += [
            f"ENDPOINT {_string(endpoint.split('://', 1)[-1].rstrip('/'))}",
            "URL_STYLE 'path'",
            f"USE_SSL {str(ssl).lower()}",
        ]
    for key, option in (
        ("access_key_id", "KEY_ID"),
        ("secret_access_key", "SECRET"),
        ("session_token", "SESSION_TOKEN"),
        ("region", "REGION"),
    ):
        if cfg.get(key):
            parts.append(f"{option} {_string(str(cfg[key]))}")
    con.execute(f"CREATE OR REPLACE SECRET {secret} ({', '.join(parts)})")
    done.add(secret)
    return True


def _is_true(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


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
    cat = lamina.load_catalog(catalog) if isinstance(catalog, str) else catalog
    names = []
    for info in cat.tables():
        namespace, _, tname = info.identifier.rpartition(".")
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {_ident(namespace)}")
        # (a catalog's tables are there to be joined: its first one too is read as a later register's)
        _registered[con] = _registered.get(con, 0) + 1
        register(con, cat.load_table(info.identifier), f"{_ident(namespace)}.{_ident(tname)}", quoted=True)
        names.append(info.identifier)
    return names


# -- sql: a query over Lamina tables named in it ---------------------------------------------


class _Dialect(DuckDB):
    """DuckDB's SQL, with ``AT (TAG => 'name')`` and ``AT (BRANCH => 'name')`` beside
    ``AT (VERSION => ...)`` and ``AT (TIMESTAMP => ...)``."""

    class Parser(DuckDBParser):
        HISTORICAL_DATA_KIND = DuckDBParser.HISTORICAL_DATA_KIND | {"TAG", "BRANCH"}


def error_text(e: Exception) -> str:
    """A DuckDB error as one line, without the ``LINE n:`` excerpt (of the query DuckDB ran,
    which ``sql`` rewrote: not the text the user wrote)."""
    return " ".join(str(e).split("\n\nLINE ")[0].split())


def _parse(query: str, con: DuckDBPyConnection) -> exp.Query | exp.Values:
    """The one query ``query`` holds; InvalidArgument for a syntax error or any other statement."""
    import duckdb

    quiet = logging.getLogger("sqlglot")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # not its warning that a statement it cannot read is kept as text: refused below
    try:
        statements = [s for s in sqlglot.parse(query, read=_Dialect) if s is not None]
    except sqlglot.errors.SqlglotError as e:
        try:  # DuckDB's parser names the error the way DuckDB users know it
            con.extract_statements(query)
        except duckdb.Error as d:
            raise InvalidArgument(f"could not parse the query: {error_text(d)}") from None
        where = (e.errors or [{}])[0] if isinstance(e, sqlglot.errors.ParseError) else {}
        at = f" (line {where['line']}, column {where['col']})" if where.get("line") else ""
        raise InvalidArgument(f"could not parse the query{at}: {where.get('description') or e}") from None
    finally:
        quiet.setLevel(level)
    if len(statements) != 1:
        raise InvalidArgument(f"pass one query, not {len(statements)} statements")
    stmt = statements[0]
    if not isinstance(stmt, (exp.Query, exp.Values)):
        kind = stmt.name if isinstance(stmt, exp.Command) else stmt.key
        raise InvalidArgument(
            f"{kind.upper()} is not a query: lamina sql runs one SELECT (or WITH ..., FROM ..., VALUES) and only reads"
        )
    return stmt


def _travel(node: exp.Table) -> dict[str, Any]:
    """The ``scan`` arguments of ``t AT (VERSION => 3)``, ``AT (TIMESTAMP => ...)``,
    ``AT (TAG => 'x')``, ``AT (BRANCH => 'x')`` (its latest), ``FOR VERSION AS OF 3`` /
    ``'tag'``, ``FOR TIMESTAMP AS OF ...``; and removes the clause. A timestamp is ISO 8601
    (UTC unless it names its offset) or epoch ms."""
    when = node.args.get("when") or node.args.get("version")
    if when is None:
        return {}
    kind = str(when.args.get("kind") if isinstance(when, exp.HistoricalData) else when.this).upper()
    value = when.expression
    node.set("when", None)
    node.set("version", None)
    literal = value.this if isinstance(value, exp.Cast) else value
    if not isinstance(literal, exp.Literal):
        raise InvalidArgument(
            f"time travel needs a literal version, tag, branch or timestamp, not {value.sql('duckdb')}"
        )
    if kind == "VERSION":
        if literal.is_string:
            return {"version": literal.this}
        if not literal.is_int:
            raise InvalidArgument(f"version {literal.this} is not a version number: give a whole number or a tag name")
        return {"version": int(literal.this)}
    if kind == "TIMESTAMP":
        return {"timestamp": int(literal.this) if literal.is_int else literal.this}
    if kind in ("TAG", "BRANCH"):
        return {kind.lower(): literal.this}
    raise InvalidArgument(f"unknown time travel {kind}: use VERSION, TIMESTAMP, TAG or BRANCH")


def _resolve(
    node: exp.Table,
    tables: Mapping[str, Table | str],
    catalog: Callable[[], Catalog | None],
    con: DuckDBPyConnection,
) -> Table | None:
    """The Lamina table ``node`` names: in ``tables`` (by name), a quoted location (with a
    ``/``, or an existing directory; unless it is a file DuckDB reads, 'data/x.parquet'), or
    in the catalog (``namespace.table``, or a bare name of one of its tables)."""
    parts = [p.name for p in (node.args.get("catalog"), node.args.get("db"), node.this) if p is not None]
    name = ".".join(parts)
    if name in tables:
        v = tables[name]
        return lamina.open_table(v) if isinstance(v, str) else v
    if len(parts) == 1 and node.this.quoted and ("/" in name or "://" in name or os.path.isdir(name)):
        try:
            return lamina.open_table(name)
        except (TableNotFound, InvalidUri):  # no table there; a file is InvalidUri
            if _known_to_duckdb(con, node):
                return None
            raise
    cat = catalog() if len(parts) <= 2 else None
    if cat is not None:
        try:
            if len(parts) > 1:
                return cat.load_table(name)
            matches = [i.identifier for i in cat.tables() if i.identifier.rpartition(".")[2] == name]
            if len(matches) == 1:
                return cat.load_table(matches[0])
        except (NotFound, TableNotFound, NamespaceNotFound, InvalidIdentifier):
            pass  # not a catalog table: maybe one of DuckDB's
    return None


def _known_to_duckdb(con: DuckDBPyConnection, node: exp.Table) -> bool:
    """Whether DuckDB binds ``node`` (a table or view of ``con``, a system view, a file path)."""
    import duckdb

    bare = exp.Table(**{k: node.args.get(k) for k in ("this", "db", "catalog")})
    try:
        con.sql(f"FROM {bare.sql('duckdb')} LIMIT 0")
    except duckdb.CatalogException:
        return False
    except duckdb.Error:
        return True  # bound as something; the query reports its error
    return True


def _single_source(select: exp.Select) -> bool:
    sources = [select.args.get("from_") or select.args.get("from")] + list(select.args.get("joins") or [])
    return len([s for s in sources if s is not None]) == 1


def _pushable_conjuncts(node: exp.Table) -> list[str]:
    """WHERE conjuncts of the SELECT reading ``node`` that name only its columns, with the
    qualifiers taken off; none when an outer join could make NULLs of its rows (a filter on
    them before the join would then change which rows are NULL-extended)."""
    select = node.parent.parent if isinstance(node.parent, (exp.From, exp.Join)) else None
    if not isinstance(select, exp.Select) or select.args.get("where") is None:
        return []
    for j in select.args.get("joins") or []:
        if j.args.get("side") or (j.args.get("kind") or "").upper() not in ("", "INNER", "CROSS"):
            return []
    alias = node.alias_or_name
    single = _single_source(select)
    out = []
    for c in conjuncts(select.args["where"].this):
        if c.find(exp.Subquery, exp.Select):
            continue
        columns = list(c.find_all(exp.Column))
        if not columns or not all(col.table == alias or (single and not col.table) for col in columns):
            continue
        c = c.copy()
        for col in c.find_all(exp.Column):
            col.set("table", None)
        out.append(c.sql("duckdb"))
    return out


def sql(
    query: str,
    *,
    con: DuckDBPyConnection | None = None,
    catalog: Catalog | str | None = None,
    tables: Mapping[str, Table | str] | None = None,
) -> DuckDBPyRelation:
    """Run ``query`` (DuckDB SQL) over the Lamina tables it names; returns a DuckDB relation.

    A table is named by a key of ``tables``, by its location in double quotes (``FROM
    "warehouse/events"``), or as ``namespace.table`` (or a bare name, if unique) of
    ``catalog`` (loaded only if a name needs it); names of ``con``'s own tables pass through.
    Time travel: ``FROM events AT (VERSION => 3)``, ``AT (TIMESTAMP => '2026-01-01 10:00')``
    (UTC unless it names its offset), ``AT (TAG => 'nightly')``, ``AT (BRANCH => 'etl')`` (the
    branch's latest), or ``FOR VERSION AS OF 3`` /
    ``FOR TIMESTAMP AS OF ...``. Each reference reads only the files its SELECT's WHERE can
    match (single-table conjuncts). Raises InvalidArgument for a syntax error or a statement
    that is not a query, TableNotFound for a name that is no table, VersionNotFound /
    TagNotFound / BranchNotFound for a version or branch that does not exist; DuckDB's errors (duckdb.Error) pass through."""
    import duckdb

    con = con if con is not None else duckdb.connect()

    @functools.cache
    def cat() -> Catalog | None:
        return lamina.load_catalog(catalog) if isinstance(catalog, str) else catalog

    tree = _parse(query, con)
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    # A query reading more than one relation joins (or semi-joins, through a subquery): its
    # views with deletes should be planned as their plain files are (``_view_body``).
    joins = len(list(tree.find_all(exp.Table))) > 1 or tree.find(exp.Join) is not None
    for node in list(tree.find_all(exp.Table)):
        if (
            not node.name
            or not isinstance(node.this, exp.Identifier)
            or (node.name in ctes and not node.args.get("db"))
        ):
            continue  # a table function, or a CTE
        table = _resolve(node, tables or {}, cat, con)
        if table is None:
            if not _known_to_duckdb(con, node):
                known = cat()
                where = f" in catalog {known.uri}" if known is not None else ""
                raise TableNotFound(
                    f"no table {exp.table_name(node)}{where}: name a catalog table as "
                    'namespace.table, a table by its location in double quotes (FROM "path/to/table"), or bind a '
                    "name to a location (lamina sql --table NAME=LOCATION, or tables= in Python)"
                )
            continue
        travel = _travel(node)
        if "branch" in travel:  # AT (BRANCH => 'x'): that branch's latest (BranchNotFound if none)
            table = table.branch(travel.pop("branch"))
        scan = table.scan(version=travel.get("version", travel.get("tag")), timestamp=travel.get("timestamp"))
        pruned = Scan(scan.io, scan.vm, pruning_predicate(_pushable_conjuncts(node), scan.schema), log=scan.log)
        view = _views.view_of(con, pruned, joins)
        alias = node.alias_or_name
        node.replace(exp.Table(this=exp.to_identifier(view), alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return con.sql(tree.sql("duckdb"))
