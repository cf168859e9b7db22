"""The read-only Iceberg REST catalog of a Lamina catalog (lamina.rest.server; docs/iceberg.md)."""

from lamina.rest.server import IcebergRestCatalog, serve

__all__ = ["IcebergRestCatalog", "serve"]
