"""Hadoop's S3A connector for the tests' Spark sessions: the jars `make s3a-jars` fetches
(hadoop-aws of PySpark's Hadoop and the AWS SDK bundle it declares) into ``.cache/jars``
(``LAMINA_JARS_DIR`` overrides), put on the driver's and executors' class paths when present.
Class paths rather than ``spark.jars``: every process runs on this machine, so nothing is
copied to the executors (the SDK bundle is ~650 MB)."""

from __future__ import annotations

import glob
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JARS_DIR = os.environ.get("LAMINA_JARS_DIR", os.path.join(REPO, ".cache", "jars"))
MISSING = (f"Hadoop's S3A jars are not in {JARS_DIR} (`make s3a-jars` fetches them with Maven): "
           "Spark's own Parquet reader and writer cannot reach s3:// here")


def s3a_jars() -> list[str]:
    jars = sorted(glob.glob(os.path.join(JARS_DIR, "*.jar")))
    names = [os.path.basename(j) for j in jars]
    if not any(n.startswith("hadoop-aws-") for n in names) or not any(n.startswith("bundle-") for n in names):
        return []
    return jars


def spark_conf() -> dict[str, str]:
    """The class path settings of a session that has S3A (empty when the jars are missing)."""
    jars = s3a_jars()
    if not jars:
        return {}
    path = os.pathsep.join(jars)
    return {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}
