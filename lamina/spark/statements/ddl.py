"""``CREATE TABLE ... USING lamina`` and ``ALTER TABLE`` on Lamina tables.

``CREATE TABLE [IF NOT EXISTS] name (col type [NOT NULL], ...) USING lamina [PARTITIONED BY
(col, days(ts), bucket(16, id), truncate(4, s), ...)] [TBLPROPERTIES ('k' = 'v', ...)]
[LOCATION '...'] [OPTIONS (...)]``, or ``... AS SELECT ...`` (the rows in the next version),
creates the Lamina table:

- ``lamina.`<location>``` at that location; ``lamina.ns.t`` (or ``ns.t`` with a Lamina catalog
  configured, lamina.spark.statements.names) in the Lamina catalog, at ``LOCATION`` or where the
  catalog places it;
- any other name at ``LOCATION`` (else where Spark places a managed table of that name), and
  registers it in Spark's session catalog (``CREATE TABLE name USING lamina LOCATION ...``:
  lamina.spark.registered), so Spark itself ``SELECT``s from it and ``INSERT``s into it.

``ALTER TABLE`` ``ADD COLUMN(S)`` (nested ``s.x`` too, ``NOT NULL`` with a ``DEFAULT``, ``COMMENT``,
``FIRST`` / ``AFTER``), ``DROP COLUMN(S) [IF EXISTS]``, ``RENAME COLUMN a TO b``, ``ALTER COLUMN c
TYPE t`` (widening, as Delta's type widening: ``Table.update_schema``'s rules), ``ALTER COLUMN c
DROP NOT NULL | COMMENT '...' | FIRST | AFTER d`` make one schema version; ``SET TBLPROPERTIES``
/ ``UNSET TBLPROPERTIES [IF EXISTS]`` one properties version (``Table.update_properties``);
``CREATE [OR REPLACE] TAG | BRANCH [IF NOT EXISTS] n [AS OF VERSION v]`` and ``DROP TAG |
BRANCH [IF EXISTS] n`` (Iceberg's DDL) make and drop tags and branches. A table registered in
Spark's catalog is registered again after a schema change, so Spark sees its new columns.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from lamina.errors import InvalidArgument, TableAlreadyExists
from lamina.spark._target import TableRef
from lamina.spark.statements.expressions import literal_value, property_value
from lamina.spark.statements.names import LAMINA, LaminaName, is_path, quote
from lamina.spark.statements.queries import query, table_parts
from lamina.spark.statements.statement import Statement, refuse, text_of

# -- types ----------------------------------------------------------------------------------------


def arrow_type(node: exp.DataType, column: str) -> pa.DataType:
    """A SQL type (as Spark reads it: TIMESTAMP is an instant, TIMESTAMP_NTZ a wall-clock time)
    as the Arrow type Lamina stores."""
    from pyspark.sql import types as T

    from lamina.spark._types import arrow_type as of_spark

    struct = T.StructType.fromDDL(f"c {text_of(node)}")
    assert isinstance(struct, T.StructType)  # "c <type>" is a one-field struct
    return of_spark(struct.fields[0].dataType, column)


def arrow_type_text(text: str, column: str) -> pa.DataType:
    return arrow_type(exp.DataType.build(text, dialect="spark"), column)


def _constraints(col: exp.ColumnDef, what: str) -> tuple[bool, Any, str | None]:
    """(required, default, comment) of a column definition; any other constraint is refused."""
    required, default, comment = False, None, None
    for c in col.args.get("constraints") or []:
        kind = c.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
            required = True
        elif isinstance(kind, exp.DefaultColumnConstraint):
            default = literal_value(kind.this, f"{what} DEFAULT")
        elif isinstance(kind, exp.CommentColumnConstraint):
            comment = literal_value(kind.this, f"{what} COMMENT")
        else:
            raise refuse(f"{what} {text_of(c)}", "Lamina columns take NOT NULL, DEFAULT and COMMENT only")
    return required, default, comment


def _path(node: exp.Expression) -> str:
    """A column path as written (``c``, ``s.x``) as Lamina's dotted path."""
    return ".".join(i.name for i in node.find_all(exp.Identifier, bfs=False))


# -- CREATE TABLE ---------------------------------------------------------------------------------


def uses_lamina(node: exp.Create) -> bool:
    props = node.args.get("properties")
    fmt = next((p for p in (props.expressions if props else []) if isinstance(p, exp.FileFormatProperty)), None)
    return fmt is not None and fmt.name.lower() == LAMINA


def _partition_entry(node: exp.Expression) -> str:
    """A PARTITIONED BY entry as Lamina's ``partition_by`` takes it."""
    if isinstance(node, (exp.Identifier, exp.Column)):
        return node.name
    if isinstance(node, exp.PartitionedByBucket):
        return f"bucket({literal_value(node.expression, 'PARTITIONED BY')}, {node.this.name})"
    if isinstance(node, exp.PartitionByTruncate):
        return f"truncate({literal_value(node.expression, 'PARTITIONED BY')}, {node.this.name})"
    if isinstance(node, exp.Anonymous) and len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Column):
        fn, col = node.name.lower(), node.expressions[0].name
        return col if fn == "identity" else f"{fn}({col})"
    raise refuse(
        f"PARTITIONED BY {text_of(node)}",
        "expected a column or a transform: years, months, days, hours "
        "(or year, month, day, hour), bucket(N, col), truncate(W, col), identity(col)",
    )


class CreateTable:
    """The parts of a CREATE TABLE ... USING lamina."""

    def __init__(self, node: exp.Create) -> None:
        self.node = node
        schema = node.this if isinstance(node.this, exp.Schema) else None
        self.table: exp.Table = schema.this if schema is not None else node.this
        self.columns = list(schema.expressions) if schema is not None else None
        self.query = node.args.get("expression")
        self.partition_by: list[str] | None = None
        self.properties: dict[str, str] = {}
        self.location: str | None = None
        self.options: dict[str, str] = {}
        for p in node.args["properties"].expressions:
            if isinstance(p, exp.FileFormatProperty):
                continue
            if isinstance(p, exp.PartitionedByProperty):
                self.partition_by = [_partition_entry(e) for e in p.this.expressions]
            elif isinstance(p, exp.LocationProperty):
                self.location = str(literal_value(p.this, "LOCATION"))
            elif isinstance(p, exp.OptionsProperty):
                self.options = {_key(q.this): property_value(q.args["value"]) for q in p.expressions}
            elif type(p) is exp.Property:
                self.properties[_key(p.this)] = property_value(p.args["value"])
            else:
                raise refuse(
                    text_of(p),
                    "CREATE TABLE ... USING lamina takes PARTITIONED BY, TBLPROPERTIES, LOCATION and OPTIONS",
                )
        if node.args.get("clone") is not None:
            raise refuse("CLONE", "not supported: create a branch (CALL lamina.system.create_branch) or a tag")
        if self.columns is not None and self.query is not None:
            raise refuse(
                "CREATE TABLE (columns) ... AS SELECT", "the query's columns are the table's: drop the column list"
            )

    def arrow_schema(self) -> pa.Schema:
        fields = []
        for col in self.columns or []:
            if not isinstance(col, exp.ColumnDef):
                raise refuse(text_of(col), "expected a column definition")
            required, default, comment = _constraints(col, col.name)
            if default is not None or comment is not None:
                raise refuse(
                    f"{col.name} {'DEFAULT' if default is not None else 'COMMENT'}",
                    "set a column's default or comment after creating the table, with ALTER TABLE ... ADD "
                    "COLUMN ... DEFAULT or ALTER COLUMN ... COMMENT",
                )
            fields.append(pa.field(col.name, arrow_type(col.args["kind"], col.name), not required))
        return pa.schema(fields)


def _key(node: exp.Expression) -> str:
    return str(literal_value(node, "property")) if isinstance(node, exp.Literal) else node.name


def spark_location(st: Statement, parts: list[str]) -> str:
    """Where Spark places a managed table ``parts`` (``[db, ]name``): under its database's location."""
    db = parts[-2] if len(parts) > 1 else st.spark.catalog.currentDatabase()
    return f"{st.spark.catalog.getDatabase(db).locationUri.rstrip('/')}/{parts[-1].lower()}"


def register(st: Statement, spark_name: str, ref: TableRef, *, replace: bool = False) -> None:
    """Register the Lamina table ``ref`` in Spark's session catalog as ``spark_name`` (credentials left out)."""
    from lamina.spark.datasource_options import _STORAGE_KEYS
    from lamina.spark.registered import registration

    recorded = registration({**ref.data_source_options(), "provider": LAMINA}, _STORAGE_KEYS)
    path = recorded.pop("path")
    opts = ", ".join(f"{quote(k)} '{_sql_string(v)}'" for k, v in recorded.items())
    where = (
        f"OPTIONS ({opts + ', ' if opts else ''}path '{_sql_string(path)}')"
        if "catalog" in recorded
        else ((f"OPTIONS ({opts}) " if opts else "") + f"LOCATION '{_sql_string(path)}'")
    )
    st.spark.sql(f"CREATE {'OR REPLACE ' if replace else ''}TABLE {spark_name} USING lamina {where}")


def _sql_string(v: str) -> str:
    return v.replace("\\", "\\\\").replace("'", "\\'")


def create(st: Statement, node: exp.Create) -> Any:
    """CREATE TABLE ... USING lamina (see the module docstring); None: Spark's own registration
    of an existing Lamina table (no columns, no query), which Spark runs unchanged."""
    from lamina.spark.write import write
    from lamina.spec.partition import parse_partition_by
    from lamina.spec.schema import Schema

    c = CreateTable(node)
    if str(node.args.get("kind", "")).upper() != "TABLE":
        raise refuse(f"CREATE {node.args.get('kind')}", "USING lamina creates tables")
    parts = table_parts(c.table)
    names = st.names
    spark_name = None
    if len(parts) == 2 and parts[0].lower() == LAMINA and is_path(parts[1]):
        if c.location is not None and c.location != parts[1]:
            raise InvalidArgument(
                f"CREATE TABLE {text_of(c.table)} names its location; LOCATION {c.location!r} differs"
            )
        target = names.location(parts[1], text_of(c.table))
    elif (len(parts) == 3 and parts[0].lower() == LAMINA) or (len(parts) == 2 and names.catalog is not None):
        ident = ".".join(parts[-2:])
        target = names.new_in_catalog(ident, text_of(c.table))
        if c.location is not None:
            target.ref.location = c.location
    else:
        if c.columns is None and c.query is None:
            return None  # registers an existing Lamina table: Spark's own CREATE TABLE does
        spark_name = ".".join(quote(p) for p in parts)
        location = c.location or spark_location(st, parts)
        target = LaminaName(
            TableRef.of(location, storage_options={**(names.storage or {}), **c.options} or None),
            text_of(c.table),
            spark_name,
        )
    exists = (target.ref.open_or_none() is not None) or (
        spark_name is not None and st.spark.catalog.tableExists(spark_name)
    )
    if exists:
        if node.args.get("exists") or (c.columns is None and c.query is None):
            return st.empty()  # IF NOT EXISTS (Delta: a CREATE without columns of an existing table is a no-op)
        if node.args.get("replace"):
            raise refuse(
                "CREATE OR REPLACE TABLE",
                f"{target.text} exists; replacing a Lamina table's schema and rows "
                "in one version is not supported: ALTER TABLE it, or INSERT OVERWRITE it",
            )
        raise TableAlreadyExists(
            f"table {target.text} already exists; nothing was created (CREATE TABLE IF NOT EXISTS leaves it as it is)"
        )
    if c.columns is None and c.query is None:
        raise InvalidArgument(f"CREATE TABLE {target.text} USING lamina: no table there; give its columns or AS SELECT")
    ref = target.ref
    if c.query is not None:  # the table (version 0) and its rows (version 1), as lamina.spark.write makes them
        into = ref.identifier if ref.catalog is not None else ref.location
        assert into is not None  # a catalog's table is named by its identifier (TableRef.of)
        write(
            query(st, c.query),
            into,
            "append",
            partition_by=c.partition_by,
            properties=c.properties or None,
            storage_options=ref.storage_options,
            catalog=ref.catalog,
        )
    else:
        schema = Schema.from_arrow(c.arrow_schema())
        ref.create(
            schema, parse_partition_by(c.partition_by, schema), c.partition_by, c.properties or None, exclusive=True
        )
    if spark_name is not None:
        register(st, spark_name, target.ref)
    return st.empty()


# -- ALTER TABLE ----------------------------------------------------------------------------------

_NAME = r"(?:`(?:[^`]|``)*`|[\w$]+)"
TABLE_NAME = rf"{_NAME}(?:\s*\.\s*{_NAME})*"  # a table name as written: parts, backquoted or not
_TABLE_NAME = re.compile(rf"^\s*TABLE\s+({TABLE_NAME})\s+(.*?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)


def split_alter_command(text: str) -> tuple[str, str] | None:
    """(table name, action) of an ``ALTER TABLE`` sqlglot keeps as an unparsed command."""
    m = _TABLE_NAME.match(text)
    return None if m is None else (m.group(1), m.group(2))


def _ident(text: str) -> str:
    t = text.strip()
    return t[1:-1].replace("``", "`") if t.startswith("`") and t.endswith("`") else t


def _dotted(text: str) -> str:
    return ".".join(_ident(p) for p in re.findall(_NAME, text))


class Alter:
    """The changes of one ALTER TABLE: schema changes in one SchemaUpdate (one version),
    properties in one update_properties (one version), refs (tags, branches) as they come."""

    def __init__(self, st: Statement, name: LaminaName) -> None:
        self.st, self.name = st, name
        self.table = name.open()
        self.update: Any = None
        self.set_props: dict[str, str] = {}
        self.unset_props: list[str] = []
        self.unset_if_exists = False
        self.refs: list[Any] = []  # callables run after the other changes

    @property
    def schema(self) -> Any:
        if self.update is None:
            self.update = self.table.update_schema()
        return self.update

    # -- parsed actions (sqlglot's Alter node) ----------------------------------------------------

    def action(self, a: exp.Expression) -> None:
        if isinstance(a, exp.Schema):  # ADD COLUMNS (a INT, b STRING)
            for col in a.expressions:
                self.add(col)
        elif isinstance(a, exp.ColumnDef):
            self.add(a)
        elif isinstance(a, exp.Drop) and str(a.args.get("kind", "")).upper() in ("COLUMN", "COLUMNS"):
            cols = []
            for t in a.args.get("tables") or []:
                cols += [_path(e) for e in t.expressions] if isinstance(t, exp.Schema) else [_path(t)]
            for c in cols:
                if a.args.get("exists") and not self._has(c):
                    continue
                self.schema.drop_column(c)
        elif isinstance(a, exp.RenameColumn):
            if a.args.get("exists") and not self._has(_path(a.this)):
                return
            self.schema.rename_column(_path(a.this), _path(a.args["to"]).split(".")[-1])
        elif isinstance(a, exp.AlterColumn):
            self.alter_column(a)
        elif isinstance(a, exp.AlterSet):
            for props in a.expressions:
                if not isinstance(props, exp.Properties):
                    raise refuse(f"SET {text_of(props)}", "ALTER TABLE ... SET takes TBLPROPERTIES")
                for p in props.expressions:
                    self.set_props[_key(p.this)] = property_value(p.args["value"])
        elif isinstance(a, exp.Command) and str(a.this).upper() == "DROP":
            self.command(f"DROP {a.expression}")
        else:
            raise refuse(f"ALTER TABLE ... {text_of(a)}", "not supported on Lamina tables")

    def _has(self, path: str) -> bool:
        try:
            self.table.metadata.schema.field(path)
        except Exception:
            return False
        return True

    def add(self, col: exp.ColumnDef) -> None:
        path = _path(col.this)
        required, default, comment = _constraints(col, path)
        pos = col.args.get("position")
        first = pos is not None and str(pos.args.get("position")).upper() == "FIRST"
        after = _path(pos.this) if pos is not None and pos.this is not None else None
        self.schema.add_column(
            path,
            arrow_type(col.args["kind"], path),
            doc=comment,
            default=default,
            required=required,
            first=first,
            after=after,
        )

    def alter_column(self, a: exp.AlterColumn) -> None:
        path = _path(a.this)
        if a.args.get("rename_to") is not None:
            raise refuse("CHANGE COLUMN", "use RENAME COLUMN and ALTER COLUMN ... TYPE")
        if a.args.get("dtype") is not None:
            self.schema.update_column(path, arrow_type(a.args["dtype"], path))
        elif a.args.get("drop") and a.args.get("allow_null"):
            self.schema.update_column(path, nullable=True)
        elif a.args.get("allow_null") is False:
            # Lamina's schema update cannot make an optional column required (UpdateColumn refuses
            # nullable=False), even when no row holds a null: refused whether or not nulls exist.
            raise refuse(
                f"ALTER COLUMN {path} SET NOT NULL",
                "Lamina's schema update cannot make an optional column required (Table.update_schema "
                "only relaxes NOT NULL); add a NOT NULL column with a DEFAULT instead",
            )
        elif a.args.get("comment") is not None:
            self.schema.update_column(path, doc=str(literal_value(a.args["comment"], "COMMENT")))
        else:
            raise refuse(f"ALTER COLUMN {text_of(a)}", "supported: TYPE, DROP NOT NULL, COMMENT, FIRST, AFTER")

    # -- unparsed actions (sqlglot's Command) -----------------------------------------------------

    def command(self, action: str) -> None:
        a = action.strip()
        if m := re.fullmatch(r"UNSET\s+TBLPROPERTIES\s+(IF\s+EXISTS\s+)?\((.*)\)", a, re.IGNORECASE | re.DOTALL):
            self.unset_if_exists = bool(m.group(1))
            for tok in sqlglot.tokenize(m.group(2), read="spark"):
                if tok.token_type.name in ("STRING", "VAR", "IDENTIFIER"):
                    self.unset_props.append(tok.text)
            return
        if m := re.fullmatch(
            rf"ALTER\s+(?:COLUMN\s+)?({_NAME}(?:\s*\.\s*{_NAME})*)\s+(.*)", a, re.IGNORECASE | re.DOTALL
        ):
            path, rest = _dotted(m.group(1)), m.group(2).strip()
            if t := re.fullmatch(r"TYPE\s+(.+)", rest, re.IGNORECASE | re.DOTALL):
                self.schema.update_column(path, arrow_type_text(t.group(1), path))
            elif re.fullmatch(r"FIRST", rest, re.IGNORECASE):
                self.schema.move_column(path, first=True)
            elif t := re.fullmatch(rf"AFTER\s+({_NAME}(?:\s*\.\s*{_NAME})*)", rest, re.IGNORECASE):
                self.schema.move_column(path, after=_dotted(t.group(1)))
            else:
                raise refuse(f"ALTER COLUMN {path} {rest}", "supported: TYPE, DROP NOT NULL, COMMENT, FIRST, AFTER")
            return
        if m := re.fullmatch(
            rf"(CREATE(?:\s+OR\s+REPLACE)?|REPLACE)\s+(TAG|BRANCH)\s+(IF\s+NOT\s+EXISTS\s+)?({_NAME})"
            r"(?:\s+AS\s+OF\s+VERSION\s+(\d+))?(\s+RETAIN\b.*)?",
            a,
            re.IGNORECASE | re.DOTALL,
        ):
            verb, kind, if_not, ref, version, retain = m.groups()
            if retain:
                raise refuse(
                    "RETAIN", "give a tag an expiry with CALL lamina.system.create_tag(..., expires_at => ...)"
                )
            self.refs.append(
                lambda: self.create_ref(
                    kind.upper(),
                    _ident(ref),
                    None if version is None else int(version),
                    verb.upper().replace(" ", ""),
                    bool(if_not),
                )
            )
            return
        if m := re.fullmatch(rf"DROP\s+(TAG|BRANCH)\s+(IF\s+EXISTS\s+)?({_NAME})", a, re.IGNORECASE):
            kind, if_exists, ref = m.groups()
            self.refs.append(lambda: self.drop_ref(kind.upper(), _ident(ref), bool(if_exists)))
            return
        raise refuse(f"ALTER TABLE ... {a}", "not supported on Lamina tables")

    def create_ref(self, kind: str, ref: str, version: int | None, verb: str, if_not_exists: bool) -> None:
        t = self.table
        if ref in (t.tags if kind == "TAG" else t.branches):
            if if_not_exists:
                return
            if verb in ("CREATEORREPLACE", "REPLACE"):
                if kind == "BRANCH":
                    raise refuse("REPLACE BRANCH", "a branch's history is its own: drop it and create it again")
                t.tags.replace(ref, version)
                return
        elif verb == "REPLACE":
            raise InvalidArgument(f"REPLACE {kind} {ref}: {self.name.text} has no {kind.lower()} {ref!r}")
        if kind == "TAG":
            t.tags.create(ref, version)
        else:
            t.branches.create(ref, version=version)

    def drop_ref(self, kind: str, ref: str, if_exists: bool) -> None:
        t = self.table
        refs = t.tags if kind == "TAG" else t.branches
        if if_exists and ref not in refs:
            return
        refs.delete(ref)

    # -- committing -------------------------------------------------------------------------------

    def commit(self) -> None:
        if self.update is not None and (self.set_props or self.unset_props):
            raise refuse("ALTER TABLE", "change the schema and the properties in separate statements")
        if self.update is not None:
            self.update.commit()
            if self.name.spark_name is not None:  # Spark's catalog records the columns: register again
                register(self.st, self.name.spark_name, self.name.ref, replace=True)
        if self.set_props or self.unset_props:
            missing = [k for k in self.unset_props if k not in self.table.properties]
            if missing and not self.unset_if_exists:  # Spark's and Delta's rule; update_properties ignores them
                raise InvalidArgument(f"UNSET TBLPROPERTIES: the table has no property {missing[0]!r} (add IF EXISTS)")
            remove = [k for k in self.unset_props if k not in missing]
            if self.set_props or remove:  # (UNSET IF EXISTS of absent properties: nothing to commit)
                self.table.update_properties(set=self.set_props or None, remove=remove)
        for run in self.refs:
            run()


def alter(
    st: Statement, name: LaminaName, actions: list[exp.Expression] | None = None, command: str | None = None
) -> Any:
    """One ALTER TABLE on a Lamina table: its parsed ``actions``, or the ``command`` text sqlglot left unparsed."""
    change = Alter(st, name)
    for a in actions or []:
        change.action(a)
    if command is not None:
        change.command(command)
    change.commit()
    return st.empty()
