"""Fixtures of the catalog tests."""

from __future__ import annotations

import pytest

import lamina


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_uri(request, tmp_path):
    """A fresh SQL catalog whose warehouse is ``tmp_path / "wh"``: SQLite, and a database on
    the session's real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/wh/catalog.db"
    return request.getfixturevalue("pg_uri")


@pytest.fixture
def open_catalog():
    """``open_catalog(uri)``: ``lamina.load_catalog(uri)``, closed when the test ends (a
    PostgreSQL catalog holds a connection the garbage collector would otherwise close)."""
    opened = []

    def load(uri, **kwargs):
        cat = lamina.load_catalog(uri, **kwargs)
        opened.append(cat)
        return cat

    yield load
    for cat in opened:
        cat.close()
