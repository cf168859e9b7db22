"""Shared fixtures.

- ``spark``: the Spark session, created once, by the one xdist worker that runs the
  ``xdist_group("spark")`` tests (``--dist loadgroup``), and only if a test asks for it;
- ``s3``: a local S3 server with the bucket ``support.BUCKET``;
- ``pg_server`` / ``pg_uri``: a real PostgreSQL server per test session (catalog tests).

The tests mirror the packages of lamina (tests/<package>/test_*.py); what they share that
is not a test (servers, proxies, workers, sample tables) is the package tests/support.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest
from hypothesis import settings

# CI runs the property tests derandomized: a fixed sequence of examples per test, so a
# run is reproducible; locally every run explores new examples.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# tests/ on sys.path, for `support` (pytest puts each test file's own directory there).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from support import pgserver  # noqa: E402
from support import BUCKET  # noqa: E402
from support import workers as _WORKERS  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    # Local servers (moto) must never be reached through a proxy, from the driver or from
    # Spark's Python workers, which inherit this environment when the JVM starts.
    for k in ("NO_PROXY", "no_proxy"):
        os.environ[k] = ",".join(p for p in (os.environ.get(k), "127.0.0.1", "localhost") if p)
    from lamina.spark import spark_session
    from support.s3a_jars import spark_conf as s3a_conf

    # One session for the suite: Hadoop's S3A jars go on its class path when `make s3a-jars`
    # fetched them (the class path is fixed when the JVM starts); tests of s3:// tables through
    # Spark's own reader and writer skip otherwise (the ``s3a`` fixture, tests/spark).
    session = spark_session(
        master="local[2]",
        app_name="lamina-tests",
        fast_start=True,
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", **s3a_conf()},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3():
    """A local S3 server (moto; a real radosgw with LAMINA_S3_BACKEND=radosgw) with BUCKET."""
    from support.s3server import start_s3

    # The server is on localhost: never route to it through a proxy (this process and workers).
    saved = {k: os.environ.get(k) for k in ("NO_PROXY", "no_proxy")}
    for k in saved:
        os.environ[k] = ",".join(p for p in (saved[k], "127.0.0.1", "localhost") if p)
    server = start_s3()
    try:
        server.create_bucket(BUCKET)
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def pg_server():
    """initdb + pg_ctl on 127.0.0.1 (see support/pgserver.py). .ci/run installs PostgreSQL when it is missing."""
    if pgserver.find_bin_dir() is None:
        pytest.skip(
            "PostgreSQL binaries (initdb/pg_ctl) not found under /usr/lib/postgresql/*/bin or on PATH; "
            "install them with `apt-get install -y postgresql` (.ci/run does this)"
        )
    server = pgserver.PgServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_uri(pg_server, tmp_path):
    """A fresh database on the session's server, with a warehouse under tmp_path."""
    db = f"t_{uuid.uuid4().hex[:12]}"
    return pg_server.create_database(db) + f"?warehouse={tmp_path / 'wh'}"


# --- tiers ---------------------------------------------------------------------------------
#
# Every test carries the markers of what it needs, derived here from the fixtures it uses
# (so a new test is tiered without anyone remembering to): `make test` runs every tier (CI) but
# bench_heavy (the benchmark cases registered heavy: tests/support/bench_cases.py, `make test-bench`),
# `make test-fast` leaves out the ones that start servers, engines or long searches.
_TIER_BY_FIXTURE = {
    "spark": "spark",
    "pg_server": "postgres",
    "pg_uri": "postgres",
    "s3": "s3",
    "browser": "browser",
}


# A parameter value that names a server the test starts (``@pytest.mark.parametrize("backend",
# ["sqlite", "postgres"])``, a fixture parametrized over stores): the tier of that server.
_TIER_BY_PARAM = {"postgres": "postgres", "s3": "s3"}
_TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in _TIER_BY_FIXTURE.items():
            if fixture in names:
                item.add_marker(marker)
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            for value in callspec.params.values():
                if isinstance(value, str) and value in _TIER_BY_PARAM:
                    item.add_marker(_TIER_BY_PARAM[value])
        # tests/spark holds the Spark tests, the session's and those that start a local cluster.
        if os.path.relpath(str(item.path), _TESTS).split(os.sep)[0] == "spark":
            item.add_marker("spark")
        # Random histories against a model (tests/**/test_*_model.py), and every property test
        # (hypothesis: many examples, often against an oracle engine), search longer than a unit test.
        if item.path.stem.endswith("_model") or getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker("model")
        # Tests that start worker processes (tests/support/workers.py: races, crashes, kills).
        module = getattr(item, "module", None)
        if module is not None and getattr(module, "workers", None) is _WORKERS:
            item.add_marker("slow")
