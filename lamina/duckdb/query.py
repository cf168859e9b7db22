"""``sql``: one DuckDB query over the Lamina tables it names (a binding, a quoted location, a
catalog name), with time travel clauses; each reference becomes a view (``lamina.duckdb.views``)
of the files its single-table WHERE conjuncts can match."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.parsers.duckdb import DuckDBParser

import lamina
from lamina.catalog.base import Catalog
from lamina.data.scan import Scan
from lamina.duckdb.pruning import pruning_predicate
from lamina.duckdb.views import view_cache
from lamina.errors import InvalidArgument, InvalidIdentifier, InvalidUri, NamespaceNotFound, NotFound, TableNotFound
from lamina.expr import conjuncts
from lamina.table.table import Table

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection, DuckDBPyRelation

__all__ = ["error_text", "sql"]


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
        view = view_cache.view_of(con, pruned, joins)
        alias = node.alias_or_name
        node.replace(exp.Table(this=exp.to_identifier(view), alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return con.sql(tree.sql("duckdb"))
