"""Queries over Lamina tables: the table references Spark cannot read itself, time travel,
``DESCRIBE HISTORY`` and ``SHOW TAGS`` / ``SHOW BRANCHES``.

Spark reads a table registered in its catalog ``USING lamina`` itself, at its latest version
(lamina.spark.registered). Every other reference to a Lamina table (by location, by a Lamina
catalog's identifier, or with ``VERSION AS OF`` / ``TIMESTAMP AS OF``, which Spark 4.3 refuses
for Python data sources) is read by ``lamina.spark.read`` (Spark's own Parquet reader over the
planned files) and put in the query as a temporary view, under the reference's alias (or its
name, so ``orders.id`` still resolves). The query is then Spark's: every clause, function and
join as Spark runs it.

``VERSION AS OF`` takes a version number, a tag or a branch name (tags and branches share one
namespace, as in Iceberg); ``TIMESTAMP AS OF`` any expression Spark evaluates to a timestamp
(a string is read in the session time zone, as Delta reads it), the version current then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from lamina.errors import TagNotFound
from lamina.spark.statements.names import LaminaName, is_path
from lamina.spark.statements.statement import Statement, refuse, text_of
from lamina.spec.tag import split_version_or_tag


@dataclass
class TimeTravel:
    """What a reference reads: the latest version, or a version, tag, branch or timestamp."""

    version: int | None = None
    tag: str | None = None
    branch: str | None = None
    timestamp: Any = None

    @property
    def latest(self) -> bool:
        return self.version is None and self.tag is None and self.branch is None and self.timestamp is None


def time_travel(st: Statement, table: exp.Table, name: LaminaName) -> TimeTravel:
    """The ``VERSION AS OF`` / ``TIMESTAMP AS OF`` of a reference to the Lamina table ``name``."""
    v = table.args.get("version")
    if v is None:
        return TimeTravel()
    kind, what = str(v.this).upper(), v.expression
    if str(v.args.get("kind", "AS OF")).upper() != "AS OF":
        raise refuse(text_of(table), f"only VERSION AS OF and TIMESTAMP AS OF are supported, not {v.args.get('kind')}")
    if kind == "TIMESTAMP":
        return TimeTravel(timestamp=st.timestamp(what))
    if not isinstance(what, exp.Literal):
        raise refuse(text_of(table), "VERSION AS OF takes a version number, or a tag or branch name as a string")
    number, ref = split_version_or_tag(what.this)
    if ref is None:
        return TimeTravel(version=number)
    table_ = name.open()
    if ref in table_.tags:
        return TimeTravel(tag=ref)
    if ref in table_.branches:
        return TimeTravel(branch=ref)
    raise TagNotFound(
        f"{name.text} has no tag or branch {ref!r} (VERSION AS OF names a version number, a tag or a branch)"
    )


def read_reference(st: Statement, name: LaminaName, travel: TimeTravel) -> Any:
    """The DataFrame a reference reads (see the module docstring)."""
    from lamina.spark.read import read

    table = name.open()
    if travel.branch is not None:
        return read(st.spark, table, branch=travel.branch)
    return read(st.spark, table, version=travel.version, tag=travel.tag, timestamp=travel.timestamp)


def ctes(node: exp.Expression) -> set[str]:
    """The names of the statement's common table expressions (not tables)."""
    return {c.alias_or_name.lower() for c in node.find_all(exp.CTE)}


def table_parts(table: exp.Table) -> list[str]:
    return [p.name for p in table.parts]


def lamina_tables(st: Statement, node: exp.Expression) -> list[tuple[exp.Table, LaminaName]]:
    """The references to Lamina tables in ``node`` (CTE names left out)."""
    local = ctes(node)
    out = []
    for t in node.find_all(exp.Table):
        parts = table_parts(t)
        if not parts or (len(parts) == 1 and parts[0].lower() in local) or isinstance(t.this, exp.Func):
            continue
        name = st.names.resolve(parts, text_of(t))
        if name is not None:
            out.append((t, name))
    return out


def rewrite(st: Statement, node: exp.Expression) -> exp.Expression:
    """``node`` (a copy) with every Lamina reference Spark cannot read itself replaced by a
    temporary view of what it reads (see the module docstring)."""
    node = node.copy()
    for t, name in lamina_tables(st, node):
        travel = time_travel(st, t, name)
        if travel.latest and name.spark_name is not None:
            continue  # Spark reads a registered table itself
        view = st.view(read_reference(st, name, travel))
        alias = t.args.get("alias")
        if alias is None and isinstance(t.parent, (exp.From, exp.Join)):  # (DESCRIBE t takes no alias)
            last = table_parts(t)[-1]
            alias = None if is_path(last) else exp.TableAlias(this=exp.to_identifier(last, quoted=True))
        t.replace(exp.Table(this=exp.to_identifier(view), alias=alias))
    return node


def query(st: Statement, node: exp.Expression) -> Any:
    """A query (SELECT, VALUES, set operations) as Spark runs it, Lamina references rewritten."""
    return st.spark.sql(text_of(rewrite(st, node)))


# -- DESCRIBE HISTORY, SHOW TAGS / BRANCHES ------------------------------------------------------

HISTORY_COLUMNS = [
    ("version", "bigint"),
    ("timestamp", "timestamp"),
    ("operation", "string"),
    ("readVersion", "bigint"),
    ("operationMetrics", "map<string,string>"),
    ("commitId", "string"),
    ("branch", "string"),
]
_LIMIT = re.compile(r"\s+LIMIT\s+(\d+)\s*;?\s*$", re.IGNORECASE)


def split_history_limit(text: str) -> tuple[str, int | None]:
    """``DESCRIBE HISTORY t LIMIT n`` as (``DESCRIBE HISTORY t``, n): sqlglot does not parse the LIMIT."""
    m = _LIMIT.search(text)
    return (text, None) if m is None else (text[: m.start()], int(m.group(1)))


def describe_history(st: Statement, name: LaminaName, limit: int | None) -> Any:
    """Delta's ``DESCRIBE HISTORY``: the table's versions, newest first (Lamina's operation names;
    ``operationMetrics`` the version's summary)."""
    rows = [
        [
            h["version"],
            h["timestamp"],
            h["operation"],
            h["parent_version"],
            {str(k): str(v) for k, v in h["summary"].items()},
            h["commit_id"],
            h["branch"],
        ]
        for h in name.open().history(limit)
    ]
    return st.result(HISTORY_COLUMNS, rows)


_SHOW = re.compile(r"^\s*SHOW\s+(TAGS|BRANCHES)\s+(?:(?:IN|FROM)\s+)?(.+?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)


def parse_show(text: str) -> tuple[str, str] | None:
    """(``TAGS`` or ``BRANCHES``, the table as written) of ``SHOW TAGS [IN] t``; None for another SHOW."""
    m = _SHOW.match(text)
    return None if m is None else (m.group(1).upper(), m.group(2))


def show_refs(st: Statement, kind: str, name: LaminaName) -> Any:
    """The table's tags (``$tags``) or branches (``$branches``, main first) as a DataFrame."""
    return st.spark.createDataFrame(name.open().inspect.table("tags" if kind == "TAGS" else "branches"))


def one_table(st: Statement, text: str) -> LaminaName | None:
    """The Lamina table a bare table name in ``text`` names (``SHOW TAGS <name>``), or None."""
    import sqlglot

    try:
        t = sqlglot.parse_one(f"SELECT * FROM {text}", read="spark").find(exp.Table)
    except Exception:  # not a table name: not ours
        return None
    return None if t is None else st.names.resolve(table_parts(t), text)
