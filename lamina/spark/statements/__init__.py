"""``lamina.spark.sql(spark, text)``: Spark SQL statements on Lamina tables, as Delta users write them.

    from lamina.spark import sql
    sql(spark, "CREATE TABLE shop.orders (id BIGINT NOT NULL, ts TIMESTAMP, amount DOUBLE) USING lamina "
               "PARTITIONED BY (days(ts)) TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
    sql(spark, "INSERT INTO shop.orders SELECT * FROM staging")
    sql(spark, "MERGE INTO shop.orders t USING changes s ON t.id = s.id "
               "WHEN MATCHED AND s.op = 'D' THEN DELETE WHEN MATCHED THEN UPDATE SET * "
               "WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE AND t.ts < '2026-01-01' THEN DELETE").show()
    sql(spark, "SELECT count(*) FROM shop.orders VERSION AS OF 3")
    sql(spark, "CALL lamina.system.rewrite_data_files(table => 'shop.orders')")

Spark 4.3 itself runs ``CREATE TABLE t USING lamina LOCATION '...'`` (registering an existing
table in its session catalog), ``SELECT`` from and ``INSERT INTO`` / ``INSERT OVERWRITE`` such a
table (lamina.spark.registered). The rest a Python data source cannot get from Spark, so this
function parses the statement (sqlglot's Spark dialect) and, where it names a Lamina table
(lamina.spark.statements.names: ``lamina.`<location>```, a Lamina catalog's ``ns.table``, or a Spark
table ``USING lamina``), runs it with Lamina:

- DDL: ``CREATE TABLE ... USING lamina`` (columns or AS SELECT, PARTITIONED BY transforms,
  TBLPROPERTIES, LOCATION), ``ALTER TABLE`` columns, properties, tags and branches
  (lamina.spark.statements.ddl);
- DML: ``INSERT INTO / OVERWRITE / REPLACE WHERE``, ``UPDATE``, ``DELETE``, ``MERGE INTO`` with
  Delta's clauses and result rows (lamina.spark.statements.dml); ``TRUNCATE TABLE`` (one version
  with no files, as Delta's);
- queries: time travel (``VERSION AS OF`` a version, tag or branch; ``TIMESTAMP AS OF``) and
  tables Spark cannot name, ``DESCRIBE HISTORY``, ``SHOW TAGS`` / ``SHOW BRANCHES``
  (lamina.spark.statements.queries);
- ``CALL lamina.system.<procedure>(...)``: Iceberg's procedures (lamina.spark.statements.procedures).

A statement that names no Lamina table (or only tables Spark reads itself, as it reads them)
goes to ``spark.sql`` unchanged, and so does what Spark or sqlglot cannot parse (Spark's error
is then the one raised). A Lamina statement returns a DataFrame, as Delta's do: the rows of a
query, Delta's counts for DML (``num_affected_rows``, ...), Iceberg's result of a procedure, an
empty DataFrame for DDL. A clause Lamina does not carry out is refused with
``UnsupportedStatement`` naming it (``.clause``), before anything is committed.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import sqlglot
from sqlglot import exp

from lamina.spark.statements import ddl, dml, procedures, queries
from lamina.spark.statements.names import LaminaName
from lamina.spark.statements.statement import Statement, refuse, text_of

__all__ = ["sql"]

_log = logging.getLogger("sqlglot")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """sqlglot warns when it keeps a statement it does not know as a command (SHOW TAGS, CALL):
    expected here, so not printed."""
    level = _log.level
    _log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        _log.setLevel(level)


def parse(text: str) -> exp.Expression | None:
    """One statement's tree (sqlglot's Spark dialect), or None if sqlglot cannot parse it as one."""
    with _quiet():
        try:
            trees = [t for t in sqlglot.parse(text, read="spark") if t is not None]
        except Exception:  # sqlglot's ParseError or TokenError: Spark's parser has its say
            return None
    return cast(exp.Expression, trees[0]) if len(trees) == 1 else None  # sqlglot's statement nodes


def sql(spark: Any, text: str, *, catalog: Any = None, storage_options: Mapping[str, Any] | None = None) -> Any:
    """Run one SQL statement; a DataFrame (see the module docstring). ``catalog``: the Lamina
    catalog (a Catalog or a catalog URI) identifiers are looked up in (default: the session's
    ``spark.lamina.catalog``); ``storage_options``: object-store options for tables named by
    location (``endpoint``, ``region``, credentials)."""
    st = Statement(spark, catalog, storage_options)
    try:
        out = run(st, text)
        return spark.sql(text) if out is None else out
    finally:
        st.close()


def _target(st: Statement, table: exp.Expression) -> Any:
    """The Lamina table a statement writes (its ``this``), or None."""
    if isinstance(table, exp.Schema):
        table = table.this
    if not isinstance(table, exp.Table):
        return None
    return st.names.resolve(queries.table_parts(table), text_of(table))


def run(st: Statement, text: str) -> Any:
    """The statement's result, or None where Spark runs ``text`` as it is."""
    called = procedures.parse_call(text)
    if called is not None:
        parts, args = called
        if [p.lower() for p in parts[:-1]] == list(procedures.SYSTEM):
            return procedures.call(st, parts, args)
        return None
    delta = re.match(r"\s*(OPTIMIZE|VACUUM|RESTORE|REORG)\s+(.*)$", text, re.IGNORECASE | re.DOTALL)
    if delta is not None:  # (sqlglot parses none of them as a statement)
        return _delta_command(st, delta.group(1).upper(), delta.group(2))
    shown = queries.parse_show(text)
    if shown is not None:
        name = queries.one_table(st, shown[1])
        return None if name is None else queries.show_refs(st, shown[0], name)
    body, limit = queries.split_history_limit(text)
    node = parse(body if limit is not None else text)
    if node is None:
        return None
    if isinstance(node, exp.Describe) and str(node.args.get("style", "")).upper() == "HISTORY":
        name = _target(st, node.this)
        return None if name is None else queries.describe_history(st, name, limit)
    if limit is not None:
        node = parse(text)
        if node is None:
            return None
    if isinstance(node, exp.Create) and ddl.uses_lamina(node):
        return ddl.create(st, node)
    if isinstance(node, exp.Create) and str(node.args.get("kind", "")).upper() == "VIEW":
        return _view(st, node)
    writes: dict[type[exp.Expression], Callable[[Statement, Any, LaminaName], Any]] = {
        exp.Insert: dml.insert,
        exp.Update: dml.update,
        exp.Delete: dml.delete,
        exp.Merge: dml.merge,
    }
    for cls, run_dml in writes.items():
        if isinstance(node, cls):
            name = _target(st, node.this)
            if name is not None:
                return run_dml(st, node, name)
            return _reads(st, node)
    if isinstance(node, exp.Alter):
        name = _target(st, node.this)
        if name is None:
            return None
        actions = node.args.get("actions") or []
        if any(isinstance(a, exp.AlterRename) for a in actions):
            return _rename(st, name, node)
        return ddl.alter(st, name, actions)
    if isinstance(node, exp.Command) and str(node.this).upper() == "ALTER":
        split = ddl.split_alter_command(str(node.expression))
        if split is None:
            return None
        name = queries.one_table(st, split[0])
        return None if name is None else ddl.alter(st, name, command=split[1])
    if isinstance(node, exp.TruncateTable) and not node.args.get("is_database"):
        return _truncate(st, node)
    if isinstance(node, (exp.Query, exp.Describe)):
        return _reads(st, node)
    unread = [n for _, n in queries.lamina_tables(st, node) if n.spark_name is None]
    if unread:
        raise refuse(
            _keywords(text), f"lamina.spark.sql does not run this statement on Lamina tables ({unread[0].text})"
        )
    return None


# Delta's maintenance commands, which sqlglot keeps as commands: the procedure to call instead.
_DELTA_COMMANDS = {
    "OPTIMIZE": "rewrite_data_files",
    "VACUUM": "remove_orphan_files",
    "RESTORE": "rollback_to_snapshot",
    "REORG": "rewrite_data_files",
}


def _delta_command(st: Statement, keyword: str, rest: str) -> Any:
    """Delta's ``OPTIMIZE t`` / ``VACUUM t`` / ``RESTORE TABLE t ...`` on a Lamina table: refused,
    naming the procedure that does it; on any other table Spark's."""
    m = re.match(rf"\s*(?:TABLE\s+)?({ddl.TABLE_NAME})", rest, re.IGNORECASE)
    name = None if m is None else queries.one_table(st, m.group(1))
    if name is None:
        return None
    raise refuse(keyword, f"Delta's command; on a Lamina table CALL lamina.system.{_DELTA_COMMANDS[keyword]}(...)")


def _keywords(text: str) -> str:
    """The statement's leading keywords (``TRUNCATE TABLE``, ``DROP TABLE IF EXISTS``), to name it."""
    words = []
    for w in text.split()[:4]:
        if not w.isalpha():
            break
        words.append(w.upper())
    return " ".join(words)


def _view(st: Statement, node: exp.Create) -> Any:
    """``CREATE [OR REPLACE] TEMPORARY VIEW v AS query`` over Lamina tables Spark cannot read: the
    view holds the query's DataFrame (Lamina's reads in its plan). A permanent view would have Spark
    analyze its text again later, where those tables are not: refused."""
    q = node.args.get("expression")
    if q is None or not any(
        n.spark_name is None or t.args.get("version") is not None for t, n in queries.lamina_tables(st, q)
    ):
        return None
    props = node.args.get("properties")
    temporary = props is not None and any(isinstance(p, exp.TemporaryProperty) for p in props.expressions)
    if not temporary or isinstance(node.this, exp.Schema):
        raise refuse(
            "CREATE VIEW",
            "a view over Lamina tables Spark cannot name (a location, a Lamina catalog's table, "
            "time travel) must be a TEMPORARY VIEW without a column list",
        )
    name = queries.table_parts(node.this)
    if len(name) != 1:
        raise refuse("CREATE TEMPORARY VIEW", "a temporary view's name has one part")
    df = queries.query(st, q)
    if node.args.get("replace"):
        df.createOrReplaceTempView(name[0])
    elif node.args.get("exists") and st.spark.catalog.tableExists(name[0]):
        pass
    else:
        df.createTempView(name[0])
    return st.empty()


def _reads(st: Statement, node: exp.Expression) -> Any:
    """A statement that only reads Lamina tables: Spark's, with the references Spark cannot read
    rewritten (lamina.spark.statements.queries); None if there are none (Spark runs the text as it is)."""
    rewritten = queries.rewrite(st, node)
    return None if rewritten == node else st.spark.sql(text_of(rewritten))


def _truncate(st: Statement, node: exp.TruncateTable) -> Any:
    """Delta's ``TRUNCATE TABLE t``: one version that removes every data file (the old versions
    stay readable). Several tables, or a PARTITION clause, are refused before anything is committed."""
    tables = node.expressions
    names = [_target(st, t) for t in tables]
    if all(n is None for n in names):
        return None
    if len(tables) != 1 or node.args.get("partition") is not None:
        raise refuse(
            "TRUNCATE TABLE", "truncate one Lamina table, without a PARTITION clause (DELETE FROM t WHERE ...)"
        )
    if tables[0].args.get("version") is not None:
        raise refuse(text_of(tables[0]), "TRUNCATE changes the latest version: drop VERSION/TIMESTAMP AS OF")
    table = names[0].open()
    table.overwrite(table.metadata.schema.arrow.empty_table())
    return st.empty()


def _rename(st: Statement, name: Any, node: exp.Alter) -> Any:
    """``ALTER TABLE ... RENAME TO``: Spark renames its registration; a Lamina catalog renames its table."""
    if name.spark_name is not None:
        return None
    new = next(a for a in node.args["actions"] if isinstance(a, exp.AlterRename)).this
    if name.ref.catalog is None:
        raise refuse("ALTER TABLE ... RENAME TO", f"{name.text} is named by its location, which a rename does not move")
    parts = queries.table_parts(new)
    name.ref.catalog.rename_table(
        name.ref.identifier,
        ".".join(parts[-2:]) if len(parts) > 1 else f"{name.ref.identifier.rsplit('.', 1)[0]}.{parts[0]}",
    )
    return st.empty()
