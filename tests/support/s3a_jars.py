"""Hadoop's S3A connector for the tests' Spark sessions: the jars `make s3a-jars` fetches
(hadoop-aws of PySpark's Hadoop and the AWS SDK bundle it declares) into
``.cache/jars/hadoop-<version>`` (``LAMINA_JARS_DIR`` overrides ``.cache/jars``), put on the
driver's and executors' class paths when present. Only the directory of the Hadoop version
PySpark ships is used, so jars left by an older PySpark never join the class path. Class paths
rather than ``spark.jars``: every process runs on this machine, so nothing is copied to the
executors (the SDK bundle is large)."""

from __future__ import annotations

import glob
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JARS_DIR = os.environ.get("LAMINA_JARS_DIR", os.path.join(REPO, ".cache", "jars"))


def hadoop_version() -> str | None:
    """The Hadoop version PySpark ships (its ``hadoop-client-api`` jar), or None."""
    import pyspark

    found = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    return os.path.basename(found[0])[len("hadoop-client-api-"):-len(".jar")] if found else None


def jars_dir() -> str:
    return os.path.join(JARS_DIR, f"hadoop-{hadoop_version()}")


MISSING = (f"Hadoop's S3A jars (hadoop-aws {hadoop_version()} and the AWS SDK bundle) are not in {jars_dir()} "
           "(`make s3a-jars` fetches them with Maven): Spark's own Parquet reader and writer cannot reach s3:// here")


def s3a_jars() -> list[str]:
    """The jars of the S3A connector for PySpark's Hadoop, or [] when they are not all there."""
    jars = sorted(glob.glob(os.path.join(jars_dir(), "*.jar")))
    names = [os.path.basename(j) for j in jars]
    if f"hadoop-aws-{hadoop_version()}.jar" not in names or not any(n.startswith("bundle-") for n in names):
        return []
    return jars


def spark_conf() -> dict[str, str]:
    """The class path settings of a session that has S3A (empty when the jars are missing)."""
    jars = s3a_jars()
    if not jars:
        return {}
    path = os.pathsep.join(jars)
    return {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}
