"""Shared fixtures: a real PostgreSQL server per test session (for the catalog tests)."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _pgserver  # noqa: E402


@pytest.fixture(scope="session")
def pg_server():
    """initdb + pg_ctl on 127.0.0.1 (see _pgserver). Skipped only if the binaries are absent."""
    if _pgserver.find_bin_dir() is None:
        pytest.skip(
            "PostgreSQL binaries (initdb/pg_ctl) not found under /usr/lib/postgresql/*/bin or on PATH; "
            "install them with `apt-get install -y postgresql` (.ci/run does this)"
        )
    server = _pgserver.PgServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_uri(pg_server, tmp_path):
    """A fresh database on the session's server, with a warehouse under tmp_path."""
    db = f"t_{uuid.uuid4().hex[:12]}"
    return pg_server.create_database(db) + f"?warehouse={tmp_path / 'wh'}"
