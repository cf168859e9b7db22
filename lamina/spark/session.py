"""A SparkSession set up for Lamina: Python workers that can import lamina, the data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

# Faster JVM start for short-lived sessions (tests): less JIT and a simpler collector.
FAST_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def python_for_workers(master: str) -> None:
    """Make Spark's Python workers run this interpreter, so they import the same lamina.

    With a local master (``local[...]``, ``local-cluster[...]``) the workers run on this
    machine and must use this interpreter; on a real cluster an explicit
    ``PYSPARK_PYTHON`` (the executors' Python) is respected.
    """
    if master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(
    master: str = "local[2]",
    app_name: str = "lamina",
    conf: Mapping[str, Any] | None = None,
    fast_start: bool = False,
) -> Any:
    """Get or create a SparkSession with Lamina registered (``spark.read.format("lamina")``).

    ``fast_start`` trades JIT quality for JVM start-up time; use it for tests, not benchmarks.
    """
    from pyspark.sql import SparkSession

    from lamina.spark.datasource import register

    python_for_workers(master)
    builder = SparkSession.builder.master(master).appName(app_name).config("spark.ui.enabled", "false")
    if fast_start:
        builder = builder.config("spark.driver.extraJavaOptions", FAST_START_JAVA_OPTIONS)
        builder = builder.config("spark.executor.extraJavaOptions", FAST_START_JAVA_OPTIONS)
    for k, v in (conf or {}).items():
        builder = builder.config(k, str(v))
    spark = builder.getOrCreate()
    register(spark)
    return spark
