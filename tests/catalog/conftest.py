"""Fixtures of the catalog tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_uri(request, tmp_path):
    """A fresh SQL catalog whose warehouse is ``tmp_path / "wh"``: SQLite, and a database on
    the session's real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/wh/catalog.db"
    return request.getfixturevalue("pg_uri")
