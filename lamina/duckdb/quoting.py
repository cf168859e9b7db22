"""Quoting names and text into the SQL that lamina.duckdb hands DuckDB."""

from __future__ import annotations

__all__ = ["identifier", "string"]


def identifier(name: str) -> str:
    """``name`` as one quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def string(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"
