"""The SQL catalog as an Iceberg SQL catalog: the tables of Iceberg's JDBC/SQL catalog
(``iceberg_tables``, ``iceberg_namespace_properties``, the layout pyiceberg's ``SqlCatalog``
and Iceberg Java's ``JdbcCatalog`` use) in the same database, naming each Lamina table whose
Iceberg view is on, under the catalog name ``lamina``:

    from pyiceberg.catalog.sql import SqlCatalog
    SqlCatalog("lamina", uri="sqlite:////lake/catalog.db").load_table("shop.orders")

The rows are derived state, like the view they point at: a table's row is written after its
view's new metadata file exists (``CatalogTable.iceberg_synced``), never in the SQL
transaction of the Lamina commit. In that transaction the metadata file does not exist yet
(it is written after the commit point, and must not delay or fail the commit), so a row
swapped there would name a file Iceberg readers cannot open; a row written after it always
names a complete metadata file, at worst an older one, which the next sync moves forward.

Read-only: triggers refuse every insert, update or delete of a ``lamina`` row that is not
Lamina's own (an Iceberg writer's commit names a metadata file of its own naming, never
``v<k>.metadata.json``), with a message saying Lamina is the writer. Rows of other catalog
names are left alone, so the database can still hold Iceberg tables of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lamina.catalog.base import parse_identifier

ICEBERG_CATALOG_NAME = "lamina"
DROPPED = "lamina:dropped"  # a row's metadata_location while Lamina deletes it (the triggers allow that)
READ_ONLY = (
    "Lamina tables are read-only through Iceberg catalogs: Lamina is their writer. Write with "
    "lamina (Table.append, merge, ...) or lamina.spark; Iceberg readers see each commit"
)

_TABLES = [
    """CREATE TABLE IF NOT EXISTS iceberg_tables (
        catalog_name VARCHAR(255) NOT NULL,
        table_namespace VARCHAR(255) NOT NULL,
        table_name VARCHAR(255) NOT NULL,
        metadata_location VARCHAR(1000),
        previous_metadata_location VARCHAR(1000),
        iceberg_type VARCHAR(5),
        PRIMARY KEY (catalog_name, table_namespace, table_name)
    )""",
    """CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
        catalog_name VARCHAR(255) NOT NULL,
        namespace VARCHAR(255) NOT NULL,
        property_key VARCHAR(255) NOT NULL,
        property_value VARCHAR(1000),
        PRIMARY KEY (catalog_name, namespace, property_key)
    )""",
]

_SQLITE_GUARD = (
    f"NEW.catalog_name = '{ICEBERG_CATALOG_NAME}' AND NEW.metadata_location IS NOT '{DROPPED}' AND "
    "(NEW.metadata_location IS NULL OR NEW.metadata_location NOT GLOB '*/metadata/v[0-9]*.metadata.json')"
)
_SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER IF NOT EXISTS lamina_iceberg_tables_insert BEFORE INSERT ON iceberg_tables
        WHEN {_SQLITE_GUARD} BEGIN SELECT RAISE(ABORT, '{READ_ONLY}'); END""",
    f"""CREATE TRIGGER IF NOT EXISTS lamina_iceberg_tables_update BEFORE UPDATE ON iceberg_tables
        WHEN {_SQLITE_GUARD} BEGIN SELECT RAISE(ABORT, '{READ_ONLY}'); END""",
    f"""CREATE TRIGGER IF NOT EXISTS lamina_iceberg_tables_delete BEFORE DELETE ON iceberg_tables
        WHEN OLD.catalog_name = '{ICEBERG_CATALOG_NAME}' AND OLD.metadata_location IS NOT '{DROPPED}'
        BEGIN SELECT RAISE(ABORT, '{READ_ONLY}'); END""",
]
_POSTGRES_TRIGGERS = [
    f"""CREATE OR REPLACE FUNCTION lamina_iceberg_read_only() RETURNS trigger AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            IF OLD.catalog_name = '{ICEBERG_CATALOG_NAME}' AND OLD.metadata_location IS DISTINCT FROM '{DROPPED}' THEN
                RAISE EXCEPTION '{READ_ONLY}';
            END IF;
            RETURN OLD;
        END IF;
        IF NEW.catalog_name = '{ICEBERG_CATALOG_NAME}' AND NEW.metadata_location IS DISTINCT FROM '{DROPPED}' AND
           (NEW.metadata_location IS NULL OR NEW.metadata_location !~ '/metadata/v[0-9]+[.]metadata[.]json$') THEN
            RAISE EXCEPTION '{READ_ONLY}';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql""",
    "DROP TRIGGER IF EXISTS lamina_iceberg_tables_read_only ON iceberg_tables",
    """CREATE TRIGGER lamina_iceberg_tables_read_only BEFORE INSERT OR UPDATE OR DELETE ON iceberg_tables
        FOR EACH ROW EXECUTE FUNCTION lamina_iceberg_read_only()""",
]


def _ensure(q: Callable[..., Any], postgres: bool) -> None:
    for ddl in _TABLES + (_POSTGRES_TRIGGERS if postgres else _SQLITE_TRIGGERS):
        q(ddl)


def _lock(q: Callable[..., Any], postgres: bool) -> None:
    if postgres:
        q("SELECT pg_advisory_xact_lock(7318324)")  # CREATE ... IF NOT EXISTS races itself across sessions


def publish(catalog: Any, identifier: str, metadata_location: str) -> None:
    """Name ``identifier``'s view (its newest metadata file) in the Iceberg tables, and its
    namespace, in one SQL transaction."""
    ns, name = parse_identifier(identifier)
    postgres = catalog.is_postgres
    with catalog.sql_transaction() as q:
        _lock(q, postgres)
        _ensure(q, postgres)
        row = q(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
            (ICEBERG_CATALOG_NAME, ns, name),
        ).fetchone()
        if row is None:
            q(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, "
                "previous_metadata_location, iceberg_type) VALUES (?, ?, ?, ?, NULL, 'TABLE')",
                (ICEBERG_CATALOG_NAME, ns, name, metadata_location),
            )
        elif row[0] != metadata_location:
            q(
                "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
                "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
                (metadata_location, row[0], ICEBERG_CATALOG_NAME, ns, name),
            )
        if (
            q(
                "SELECT 1 FROM iceberg_namespace_properties WHERE catalog_name = ? AND namespace = ? AND property_key = 'exists'",
                (ICEBERG_CATALOG_NAME, ns),
            ).fetchone()
            is None
        ):
            q(
                "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, property_key, property_value) "
                "VALUES (?, ?, 'exists', 'true')",
                (ICEBERG_CATALOG_NAME, ns),
            )


def forget(catalog: Any, identifier: str) -> None:
    """Remove ``identifier``'s row (the table was dropped or renamed), if there is one."""
    ns, name = parse_identifier(identifier)
    postgres = catalog.is_postgres
    with catalog.sql_transaction() as q:
        _lock(q, postgres)
        _ensure(q, postgres)
        key = (ICEBERG_CATALOG_NAME, ns, name)
        q(
            "UPDATE iceberg_tables SET metadata_location = ? WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
            (DROPPED, *key),
        )
        q("DELETE FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?", key)
