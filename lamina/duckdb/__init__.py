"""DuckDB reads Lamina tables: ``register`` makes one version a view, ``sql`` runs a query over
tables named in it (catalog names, paths, time travel), ``register_catalog`` names them all.

A view reads the version's planned data files with DuckDB's own Parquet reader (its
projection and filter pushdown, its threads). Deleted rows are dropped exactly, inside
DuckDB's scan where its delta extension loads (``lamina.duckdb.deltalog``: the plan is that
of the plain files), else by an anti-join of ``file_row_number`` with the deleted positions.
``s3://`` tables are read by DuckDB's httpfs (``lamina.duckdb.extensions``, ``lamina.duckdb.s3``).
Lamina prunes files before DuckDB sees them: by the ``where`` given to ``register``, and in ``sql`` by the conjuncts of each query's WHERE that
name only one table. Pruning uses Lamina's statistics and Lamina's predicate semantics, so
only predicates on columns where both agree are used (``lamina.duckdb.pruning``); the rows
are always filtered by DuckDB. Tables DuckDB cannot read by itself (object stores without DuckDB's
httpfs, evolved schemas, row lineage columns) are handed over as a pyarrow Dataset
(``lamina.data.export``). See docs/engines.md.

The package: ``views`` (``register``, ``register_catalog``: a version as a view),
``query`` (``sql``), ``pruning`` (which WHERE conjuncts prune files), ``s3`` (DuckDB's
secret for an ``s3://`` table), ``deltalog`` and ``extensions``.
"""

from lamina.duckdb.pruning import pruning_predicate
from lamina.duckdb.query import error_text, sql
from lamina.duckdb.views import register, register_catalog, register_scan

__all__ = ["register", "register_catalog", "register_scan", "sql", "pruning_predicate", "error_text"]
