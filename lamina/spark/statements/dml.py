"""``INSERT``, ``UPDATE``, ``DELETE`` and ``MERGE INTO`` on Lamina tables, with Delta's semantics
and result rows.

Each is one Lamina version made by the Spark entry point that does the same from Python
(``lamina.spark.write``, ``update``, ``delete``, ``merge``), so it has that function's
guarantees (one version, nothing committed on any error, a concurrent change recomputed).

- ``INSERT INTO t [(cols)] | BY NAME query`` appends, ``INSERT OVERWRITE t query`` replaces every
  row, ``INSERT INTO t REPLACE WHERE pred query`` (Delta) replaces the rows matching ``pred``
  (every new row must match it). Rows align to the table's columns by position, as in Spark
  (by the listed columns, or by name with ``BY NAME``); numbers are cast to the column's
  numeric type. Result: ``num_affected_rows``, ``num_inserted_rows``.
- ``UPDATE t SET c = expr, ... [WHERE pred]``: ``num_affected_rows``.
- ``DELETE FROM t [WHERE pred]``: ``num_affected_rows``.
- ``MERGE INTO t USING s ON t.k = s.k [AND ...] WHEN ...``: every clause Delta takes (several
  ``WHEN MATCHED [AND c] THEN UPDATE SET ... | UPDATE SET * | DELETE``, ``WHEN NOT MATCHED [BY
  TARGET] [AND c] THEN INSERT (cols) VALUES (...) | INSERT *``, ``WHEN NOT MATCHED BY SOURCE [AND c]
  THEN UPDATE SET ... | DELETE``), tried in order, only the last of each kind without a
  condition (Spark's rule). Result: ``num_affected_rows``, ``num_updated_rows``,
  ``num_deleted_rows``, ``num_inserted_rows``. The ON condition must be equalities of a target
  column and a source column (Lamina merges on keys); other conditions are refused, naming them.

WHERE clauses that are exactly a Lamina predicate (lamina.spark.statements.expressions) prune files by
their statistics; any other WHERE is evaluated by Spark over every file.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from lamina.errors import InvalidArgument
from lamina.expr import conjuncts
from lamina.spark.statements.expressions import SOURCE, TARGET, Scope, Side, lamina_predicate
from lamina.spark.statements.names import LaminaName, is_path
from lamina.spark.statements.queries import query, table_parts
from lamina.spark.statements.statement import DELETED, INSERTED, UPDATED, Statement, refuse, text_of


def _no_time_travel(table: exp.Table) -> None:
    if table.args.get("version") is not None:
        raise refuse(
            text_of(table), "a statement that changes a table changes its latest version: drop VERSION/TIMESTAMP AS OF"
        )


def _target_side(table: exp.Table, columns: list[str]) -> Side:
    """The target row: qualified by its alias, and by its name (as Spark resolves ``orders.id``)."""
    aliases = {table.alias.lower()} if table.alias else set()
    last = table_parts(table)[-1]
    if not is_path(last):
        aliases.add(last.lower())
    return Side(TARGET, aliases, columns)


def _numeric(t: Any) -> bool:
    from pyspark.sql import types as T

    return isinstance(t, T.NumericType)


# -- INSERT ---------------------------------------------------------------------------------------


def insert(st: Statement, node: exp.Insert, name: LaminaName) -> Any:
    from pyspark.sql import functions as F

    from lamina.spark._types import spark_schema
    from lamina.spark.write import write

    target = node.this
    listed = None
    if isinstance(target, exp.Schema):
        listed, target = [c.name for c in target.expressions], target.this
    _no_time_travel(target)
    for flag, clause in (
        ("ignore", "INSERT IGNORE"),
        ("exists", "IF NOT EXISTS"),
        ("stored", "STORED AS"),
        ("source", "INSERT ... SOURCE"),
        ("conflict", "ON CONFLICT"),
        ("returning", "RETURNING"),
        ("alternative", "INSERT OR ..."),
        ("using", "INSERT ... USING"),
    ):
        if node.args.get(flag):
            raise refuse(clause, "not supported on Lamina tables")
    if target.args.get("partition") is not None:
        raise refuse(
            "PARTITION (...)",
            "Lamina tables take no static partition clause: write the partition column's "
            "values in the rows, and replace a partition with INSERT INTO t REPLACE WHERE <predicate> SELECT ...",
        )
    table = name.open()
    schema = table.metadata.schema
    replace_where = node.args.get("where")
    overwrite = bool(node.args.get("overwrite"))
    if replace_where is not None and overwrite:
        raise refuse("INSERT OVERWRITE ... REPLACE WHERE", "use INSERT INTO t REPLACE WHERE <predicate> SELECT ...")
    where = None
    if replace_where is not None:
        scope = Scope(_target_side(target, schema.names), prefix=False)
        where = lamina_predicate(scope.qualify(replace_where, (TARGET,), "REPLACE WHERE"), schema, st.time_zone)
        if where is None:
            raise refuse(
                f"REPLACE WHERE {text_of(replace_where)}",
                "the predicate must compare columns with literals "
                "(=, <, IN, BETWEEN, IS NULL, AND, OR, NOT): it says which rows the new ones replace",
            )
    df = query(st, with_ctes(node, node.expression))
    names = schema.names
    if listed is not None:
        cols = [
            Scope(_target_side(target, names)).target_column(exp.column(c, quoted=True), "INSERT INTO") for c in listed
        ]
    elif node.args.get("by_name"):
        cols = [next((n for n in names if n.lower() == c.lower()), c) for c in df.columns]
    else:
        cols = names
    if len(cols) != len(df.columns):
        raise InvalidArgument(
            f"INSERT INTO {name.text}: the query has {len(df.columns)} columns but the table takes {len(cols)} "
            f"({', '.join(cols)}); list the columns written, e.g. INSERT INTO t (a, b) SELECT ..."
        )
    want = {f.name: f.dataType for f in spark_schema(schema.arrow).fields}
    out = []
    for src, col in zip(df.columns, cols):
        c = F.col(f"`{src.replace('`', '``')}`")
        have = df.schema[src].dataType
        if col in want and have != want[col] and _numeric(have) and _numeric(want[col]):
            c = c.cast(want[col])  # Spark's store assignment of numbers (ANSI: an overflow fails)
        out.append(c.alias(col))
    mode = "overwrite" if overwrite or where is not None else "append"
    written = write(df.select(*out), table, mode, where=where)
    added = 0 if written is None else written.rows_added
    return st.counts(added, **{INSERTED: added})


# -- UPDATE / DELETE ------------------------------------------------------------------------------


def _refuse_extra(node: exp.Expression, keys: dict[str, str]) -> None:
    for k, clause in keys.items():
        if node.args.get(k):
            raise refuse(clause, "not supported by Delta's statement, nor by Lamina's")


def _where(st: Statement, scope: Scope, node: exp.Expression, schema: Any) -> tuple[Any, Any]:
    """(Lamina predicate, or None; the Spark Column evaluating it) of a WHERE node (None: every row)."""
    from pyspark.sql import functions as F

    where = node.args.get("where")
    cond = None if where is None else scope.qualify(where.this, (TARGET,), "WHERE")
    pred = lamina_predicate(cond, schema, st.time_zone)
    return pred, (None if cond is None else F.expr(text_of(cond)))


def update(st: Statement, node: exp.Update, name: LaminaName) -> Any:
    from lamina.spark.delete_update import update as spark_update

    target = node.this
    _no_time_travel(target)
    _refuse_extra(
        node,
        {
            "from_": "UPDATE ... FROM",
            "order": "UPDATE ... ORDER BY",
            "limit": "UPDATE ... LIMIT",
            "returning": "RETURNING",
            "with_": "WITH ... UPDATE",
            "options": "UPDATE ... OPTION",
        },
    )
    table = name.open()
    schema = table.metadata.schema
    scope = Scope(_target_side(target, schema.names), prefix=False)
    assignments = {}
    for eq in node.expressions:
        if not isinstance(eq, exp.EQ):
            raise refuse(f"SET {text_of(eq)}", "expected column = expression")
        col = scope.target_column(eq.this, "SET")
        assignments[col] = text_of(scope.qualify(eq.expression, (TARGET,), f"SET {col}"))
    pred, column = _where(st, scope, node, schema)
    result = spark_update(st.spark, table, pred if pred is not None else column, set=assignments)
    return st.counts(0 if result is None else result.rows_added)


def delete(st: Statement, node: exp.Delete, name: LaminaName) -> Any:
    from lamina.spark.delete_update import delete as spark_delete

    target = node.this
    _no_time_travel(target)
    _refuse_extra(
        node,
        {
            "using": "DELETE ... USING",
            "returning": "RETURNING",
            "limit": "DELETE ... LIMIT",
            "order": "DELETE ... ORDER BY",
            "with_": "WITH ... DELETE",
            "tables": "DELETE t1, t2",
            "cluster": "DELETE ... CLUSTER",
        },
    )
    table = name.open()
    schema = table.metadata.schema
    pred, column = _where(st, Scope(_target_side(target, schema.names), prefix=False), node, schema)
    result = spark_delete(st.spark, table, pred if pred is not None else column)
    return st.counts(0 if result is None else int(result.metrics.get("deleted-rows", 0)))


# -- MERGE ----------------------------------------------------------------------------------------


def with_ctes(statement: exp.Expression, q: exp.Expression) -> exp.Expression:
    """The query ``q`` of ``statement`` with the statement's ``WITH`` (``WITH s AS (...) INSERT INTO
    t SELECT * FROM s``), which sqlglot keeps on the statement."""
    ctes = statement.args.get("with_")
    if ctes is None:
        return q
    q = q.copy()
    if not isinstance(q, exp.Query):
        q = exp.select("*").from_(exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier("v"))))
    q.set("with_", ctes)
    return q


def _source(st: Statement, node: exp.Merge) -> tuple[Any, set[str]]:
    """The merge's source rows and the names that qualify its columns."""
    using = node.args["using"]
    if isinstance(using, exp.Subquery):
        if not using.alias:
            raise InvalidArgument(
                "MERGE ... USING (subquery): give the subquery an alias, e.g. USING (SELECT ...) AS s"
            )
        return query(st, with_ctes(node, using.this)), {using.alias.lower()}
    if isinstance(using, exp.Table):
        alias = using.alias
        bare = using.copy()
        bare.set("alias", None)
        last = table_parts(using)[-1]
        names = {alias.lower()} if alias else ({last.lower()} if not is_path(last) else set())
        return query(st, with_ctes(node, exp.select("*").from_(bare))), names
    raise refuse(f"USING {text_of(using)}", "the source is a table or an aliased subquery")


def _keys(scope: Scope, on: exp.Expression) -> list[tuple[str, str]]:
    """The (target column, source column) pairs the ON condition equates."""
    pairs = []
    for part in conjuncts(on):
        sides = None
        if isinstance(part, exp.EQ) and isinstance(part.this, exp.Column) and isinstance(part.expression, exp.Column):
            a, b = scope.side_of(part.this), scope.side_of(part.expression)
            if (
                a is not None
                and b is not None
                and {a[0].role, b[0].role} == {TARGET, SOURCE}
                and len(a[1]) == len(b[1]) == 1
            ):
                sides = (a, b) if a[0].role == TARGET else (b, a)
        if sides is None:
            raise refuse(
                f"ON {text_of(part)}",
                "a Lamina merge matches rows on keys: the ON condition must be equalities "
                "of a target column and a source column joined by AND (move other conditions into the WHEN "
                "clauses' AND conditions)",
            )
        pairs.append((sides[0][1][0], sides[1][1][0]))
    return pairs


def merge(st: Statement, node: exp.Merge, name: LaminaName) -> Any:
    from pyspark.sql import functions as F

    from lamina.spark.merge_into import merge as spark_merge

    target = node.this
    _no_time_travel(target)
    if node.args.get("using_cond") or node.args.get("returning"):
        raise refuse(text_of(node)[:60], "MERGE ... USING (columns) and RETURNING are not supported")
    table = name.open()
    columns = table.metadata.schema.names
    source, source_names = _source(st, node)
    tside = _target_side(target, columns)
    if source_names & tside.aliases:
        raise InvalidArgument(f"MERGE INTO {name.text}: the target and the source need different aliases")
    scope = Scope(tside, Side(SOURCE, source_names, list(source.columns)))
    on = []
    for tcol, scol in _keys(scope, node.args["on"]):
        if tcol != scol:
            if tcol in source.columns:
                raise refuse(
                    f"ON ... = {scol}",
                    f"the source has a column {tcol!r} of its own besides the key {scol!r} "
                    f"matched to the target's {tcol!r}: rename one of them in the source",
                )
            source = source.withColumn(tcol, F.col(f"`{scol.replace('`', '``')}`"))
        on.append(tcol)
    builder = spark_merge(table, source, on=on)
    kinds: dict[str, list[Any]] = {"matched": [], "not matched": [], "not matched by source": []}
    for when in node.args["whens"].expressions:
        kind = (
            "matched"
            if when.args.get("matched")
            else ("not matched by source" if when.args.get("source") else "not matched")
        )
        kinds[kind].append(when)
    for kind, whens in kinds.items():
        for w in whens[:-1]:
            if w.args.get("condition") is None:
                raise InvalidArgument(
                    f"MERGE INTO {name.text}: when there are several WHEN {kind.upper()} clauses, only the "
                    "last may omit its condition (as Spark and Delta require)"
                )
    for when in node.args["whens"].expressions:
        _clause(builder, scope, when)
    res = builder.execute()
    changed = res.rows_updated + res.rows_deleted + res.rows_inserted
    return st.counts(changed, **{UPDATED: res.rows_updated, DELETED: res.rows_deleted, INSERTED: res.rows_inserted})


def _clause(builder: Any, scope: Scope, when: exp.When) -> None:
    """Add one WHEN clause to the Spark merge builder, its expressions over ``source.``/``target.``."""
    matched, by_source = bool(when.args.get("matched")), bool(when.args.get("source"))
    what = "WHEN MATCHED" if matched else ("WHEN NOT MATCHED BY SOURCE" if by_source else "WHEN NOT MATCHED")
    sides = (TARGET, SOURCE) if matched else ((TARGET,) if by_source else (SOURCE,))
    cond = when.args.get("condition")
    condition = None if cond is None else text_of(scope.qualify(cond, sides, f"{what} AND"))
    then = when.args.get("then")
    if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        if not (matched or by_source):
            raise InvalidArgument(f"{what} THEN DELETE: a source row that matched nothing has no target row to delete")
        (builder.when_matched_delete if matched else builder.when_not_matched_by_source_delete)(condition=condition)
        return
    if isinstance(then, exp.Update):
        if not (matched or by_source):
            raise InvalidArgument(
                f"{what} THEN UPDATE: a source row that matched nothing has no target row; use INSERT"
            )
        if len(then.expressions) == 1 and isinstance(then.expressions[0], exp.Star):
            if by_source:
                raise InvalidArgument(
                    f"{what} THEN UPDATE SET *: a target row no source row matches has no source values"
                )
            builder.when_matched_update_all(condition=condition)
            return
        values = {}
        for eq in then.expressions:
            if not isinstance(eq, exp.EQ):
                raise refuse(f"{what} THEN UPDATE SET {text_of(eq)}", "expected column = expression")
            col = scope.target_column(eq.this, f"{what} THEN UPDATE SET")
            values[col] = text_of(scope.qualify(eq.expression, sides, f"{what} THEN UPDATE SET {col}"))
        (builder.when_matched_update if matched else builder.when_not_matched_by_source_update)(
            values, condition=condition
        )
        return
    if isinstance(then, exp.Insert):
        if matched or by_source:
            raise InvalidArgument(f"{what} THEN INSERT: only WHEN NOT MATCHED [BY TARGET] inserts rows")
        if isinstance(then.this, exp.Star):
            builder.when_not_matched_insert_all(condition=condition)
            return
        cols = then.this.expressions if isinstance(then.this, exp.Tuple) else None
        vals = then.expression.expressions if isinstance(then.expression, exp.Tuple) else None
        if vals is None:
            raise refuse(f"{what} THEN {text_of(then)}", "expected INSERT (columns) VALUES (expressions) or INSERT *")
        names = (
            [scope.target_column(c, f"{what} THEN INSERT") for c in cols]
            if cols is not None
            else list(scope.target.columns)
        )
        if len(names) != len(vals):
            raise InvalidArgument(f"{what} THEN INSERT: {len(names)} columns but {len(vals)} values")
        values = {n: text_of(scope.qualify(v, sides, f"{what} THEN INSERT {n}")) for n, v in zip(names, vals)}
        builder.when_not_matched_insert(values, condition=condition)
        return
    raise refuse(f"{what} THEN {text_of(then) if then is not None else '?'}", "expected UPDATE SET, DELETE or INSERT")
