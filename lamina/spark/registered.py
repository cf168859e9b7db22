"""Lamina tables registered in Spark's session catalog: ``CREATE TABLE t USING lamina LOCATION '…'``.

Spark 4.3 records such a table in its session catalog with the schema the data source reports
when the table is created, and afterwards hands the Python data source's reader and writer no
options at all: not the location, not the ``OPTIONS``, only the recorded schema. So the table
would be registered and then unreadable (every ``SELECT`` failed asking to "remove
.schema(...)", the schema being the catalog's).

The one thing Spark keeps and passes back is that schema, field metadata included (it is
stored with the table, in the Hive metastore too). So when Spark asks the data source for
the schema of a table being registered (its options then carry Spark's ``provider``), the
first field's metadata records what names the Lamina table (``REGISTRATION_KEY``: its
location or catalog identifier, the catalog URI, the branch, the object-store options
that are not credentials), and a reader or writer given such a schema without a ``path``
reads or writes that table:

- ``SELECT`` reads the table's latest version, in the columns the catalog recorded (columns
  added since are not in Spark's view of the table until it is registered again);
- ``INSERT INTO`` appends, ``INSERT OVERWRITE`` replaces every row (Spark aligns the rows
  to the recorded schema, by position, as it does for every table).

Credentials are never recorded (the schema is visible to every reader of the catalog): a
registered table on an object store reads them from the environment (the standard AWS
chain). A table registered with its columns spelled out (``CREATE TABLE t (id BIGINT) USING
lamina LOCATION …``) gives Spark's catalog no chance to ask Lamina anything: it cannot be
read this way, and the error says how to register it (``lamina.spark.sql`` creates and
registers such tables).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import types as T

from lamina.errors import InvalidArgument, SchemaMismatch

REGISTRATION_KEY = "lamina.table"
# The options Spark adds to those of a table it registers (TableCatalog's reserved properties).
_SPARK_KEYS = ("provider", "location", "owner", "external", "comment")
# What names a table (besides the object-store options): the data source's own options.
_NAMING_KEYS = ("path", "catalog", "branch")
# Options that are credentials: never recorded where every reader of the catalog sees them.
_CREDENTIALS = ("access_key_id", "secret_access_key", "session_token", "password", "token", "secret")


def is_registration(options: Mapping[str, str]) -> bool:
    """Whether Spark asks for the schema of a table it is registering in its catalog (its
    reserved ``provider`` property is among the options) rather than for a ``load()``."""
    return "provider" in {k.lower() for k in options}


def registration(options: Mapping[str, str], storage_keys: set[str]) -> dict[str, str]:
    """What to record of a registered table's options: its location (Spark's ``path``) or
    identifier, catalog, branch and the non-credential object-store options among
    ``storage_keys`` (``OPTIONS (...)`` arrive both as ``key`` and ``option.key``)."""
    out: dict[str, str] = {}
    for k, v in options.items():
        key = k.lower()
        if key.startswith("option."):
            key = key[len("option.") :]
        if key in _SPARK_KEYS or any(c in key for c in _CREDENTIALS):
            continue
        bare = key[3:] if key.startswith("s3.") else key
        if key in _NAMING_KEYS or bare in storage_keys:
            out[key] = str(v)
    if "path" not in out:
        raise InvalidArgument(
            "CREATE TABLE ... USING lamina needs the table: LOCATION '<table location>', or "
            "OPTIONS (catalog '<catalog URI>', path '<namespace.table>') for a table of a Lamina catalog"
        )
    return out


def with_registration(schema: T.StructType, recorded: Mapping[str, str]) -> T.StructType:
    """``schema`` with ``recorded`` in its first field's metadata (see the module docstring)."""
    if not schema.fields:
        raise SchemaMismatch("a Lamina table without columns cannot be registered in Spark's catalog")
    first, *rest = schema.fields
    meta = {**(first.metadata or {}), REGISTRATION_KEY: json.dumps(dict(recorded), sort_keys=True)}
    return T.StructType([T.StructField(first.name, first.dataType, first.nullable, meta), *rest])


def registered_options(schema: T.StructType | None) -> dict[str, str] | None:
    """The options a registered table's recorded schema carries; None for any other schema."""
    if schema is None or not schema.fields:
        return None
    text = (schema.fields[0].metadata or {}).get(REGISTRATION_KEY)
    if text is None:
        return None
    try:
        out = json.loads(text)
    except ValueError:
        out = None
    if not isinstance(out, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in out.items()):
        raise InvalidArgument(
            f"the schema of a Spark table USING lamina carries unreadable {REGISTRATION_KEY!r} metadata: {text!r}"
        )
    return out


def not_registered(what: str) -> InvalidArgument:
    """The error for a reader (``what`` "reads") or writer ("writes") given a schema that names
    no table: a read given ``.schema(...)``, or a Spark catalog table Lamina never saw created."""
    how = (
        "Spark 4.3 hands a Python data source no location for a catalog table declared with its columns "
        "or created AS SELECT: register a Lamina table from the table itself, without columns, with "
        "CREATE TABLE name USING lamina LOCATION '<location>', or run the statement through "
        "lamina.spark.sql(spark, ...), which creates and registers the table so"
    )
    if what == "reads":
        return InvalidArgument(
            f"format('lamina') reads the table's own schema (of the version it reads): remove "
            f".schema(...) from the read. For a Spark catalog table USING lamina: {how}"
        )
    return InvalidArgument(f"the Lamina writer was given no table to write: {how}")


def check_registered_schema(recorded: T.StructType, current: T.StructType, location: str) -> list[str]:
    """The columns to read of a registered table whose catalog recorded ``recorded`` and whose
    latest version has ``current`` (names and types compared, not nullability or metadata):
    the recorded ones. A recorded column the table no longer has, or has with another type,
    is SchemaMismatch saying how to register the table again."""
    have = {f.name: f.dataType for f in current.fields}
    stale = [f.name for f in recorded.fields if f.name not in have or _plain(have[f.name]) != _plain(f.dataType)]
    if stale:
        raise SchemaMismatch(
            f"the Lamina table at {location} no longer has the columns Spark's catalog recorded for it "
            f"({', '.join(stale)} dropped, renamed or retyped since it was registered): register it again with "
            "CREATE OR REPLACE TABLE <name> USING lamina LOCATION '<location>'"
        )
    return [f.name for f in recorded.fields]


def _plain(t: T.DataType) -> Any:
    """A type without nullability and metadata, for comparison."""
    if isinstance(t, T.StructType):
        return ("struct", tuple((f.name, _plain(f.dataType)) for f in t.fields))
    if isinstance(t, T.ArrayType):
        return ("array", _plain(t.elementType))
    if isinstance(t, T.MapType):
        return ("map", _plain(t.keyType), _plain(t.valueType))
    return t.simpleString()
