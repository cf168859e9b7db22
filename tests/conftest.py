"""Shared fixtures. The Spark session is created once, by the one xdist worker that runs the
``xdist_group("spark")`` tests (``--dist loadgroup``), and only if a test asks for it."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def spark():
    # Local servers (moto) must never be reached through a proxy, from the driver or from
    # Spark's Python workers, which inherit this environment when the JVM starts.
    for k in ("NO_PROXY", "no_proxy"):
        os.environ[k] = ",".join(p for p in (os.environ.get(k), "127.0.0.1", "localhost") if p)
    from lamina.spark import spark_session

    session = spark_session(
        master="local[2]",
        app_name="lamina-tests",
        fast_start=True,
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
