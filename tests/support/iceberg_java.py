"""Iceberg's Java library through the small programs of tests/iceberg/java (``make
iceberg-java`` builds them): the jar, its classpath, the skip marker for machines without
them, and running one program with JSON in and out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.readers import run_reader

JAVA_DIR = Path(__file__).parents[1] / "iceberg" / "java"
JAR = JAVA_DIR / "target" / "iceberg-view-reader-1.jar"
CLASSPATH = JAVA_DIR / "target" / "classpath.txt"

needs_iceberg_java = pytest.mark.skipif(
    not (JAR.exists() and CLASSPATH.exists() and shutil.which("java")),
    reason=f"Iceberg's Java library programs are not built ({JAR}): run `make iceberg-java` (make test does, where "
           "Maven and a JDK are installed)",
)


def run_java(main: str, requests: list[dict]) -> list[dict]:
    """``lamina.interop.<main>`` run on ``requests``: its JSON answers."""
    return run_reader(["java", "-cp", f"{JAR}:{CLASSPATH.read_text().strip()}", f"lamina.interop.{main}"], requests)
