"""Spark's own Parquet reader and writer on ``s3://`` tables, through Hadoop's S3A connector.

Lamina reaches S3 with its own FileIO (obstore) everywhere; Spark's native reader and writer
reach it through S3A (``org.apache.hadoop.fs.s3a.S3AFileSystem``, in the ``hadoop-aws`` jar
with the AWS SDK bundle), which PySpark does not ship but every EMR, Dataproc and Databricks
cluster has. Where the class loads, a table's ``s3://bucket/prefix`` is handed to Spark as
``s3a://bucket/prefix`` and the table's storage options become the bucket's S3A settings,
``fs.s3a.bucket.<bucket>.*`` in the session's Hadoop configuration (``bucket_settings``), once
per bucket:

- ``endpoint`` -> ``endpoint`` (with ``path.style.access``, as Lamina's FileIO addresses a
  custom endpoint, and ``connection.ssl.enabled=false`` for an ``http://`` one), ``region`` ->
  ``endpoint.region``; both also from the environment, as FileIO reads them (``AWS_ENDPOINT_URL``,
  ``AWS_REGION``, ...);
- ``access_key_id`` / ``secret_access_key`` / ``session_token`` -> ``access.key`` /
  ``secret.key`` / ``session.token`` (S3A's default credential providers take them); without
  them, the AWS SDK's standard credential chain (``DefaultCredentialsProvider``: environment,
  profile, web identity, container and instance credentials), on each executor.

A key already set, for the bucket or for every bucket (``fs.s3a.<key>``: the cluster's own
settings, from ``spark.hadoop.*`` or ``core-site.xml``), is never overwritten: only the keys
nobody set are. A bucket already configured with other settings (two tables of one bucket
opened with different options: S3A keeps one client per bucket) keeps them, and the table goes
through the Python data source. Without S3A the Python data source (``format("lamina")``, Lamina's
FileIO in the Python workers) is the fallback, and a log line says why and how to get the fast
path (``native_root``).
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lamina.io import FileIO
from lamina.io.fileio import S3_OPTION_ENV

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
# The AWS SDK v2's standard credential chain, as S3A takes a provider class.
DEFAULT_CREDENTIALS = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
# Where Hadoop's own defaults come from (Configuration.getPropertySources): a key whose
# value comes only from these was set by nobody.
_DEFAULT_SOURCES = ("core-default.xml", "hdfs-default.xml", "mapred-default.xml", "yarn-default.xml")

_lock = threading.Lock()
# Per Spark application: bucket -> the settings Lamina derived for it (the first table's);
# and the reasons already logged (each once).
_configured: dict[tuple[str, str], dict[str, str]] = {}
_logged: set[tuple[str, str]] = set()
_available: dict[str, bool] = {}


def _option(options: Mapping[str, Any], key: str, env: bool) -> str | None:
    """A storage option as FileIO reads it: ``key``, ``s3.<key>``, then (``env``) its environment variables."""
    for k in (key, f"s3.{key}"):
        v = options.get(k)
        if v is not None and str(v).strip():
            return str(v)
    if env:
        return next((os.environ[e] for e in S3_OPTION_ENV[key] if os.environ.get(e)), None)
    return None


def bucket_settings(options: Mapping[str, Any] | None) -> dict[str, str]:
    """The S3A settings (keys without the ``fs.s3a.bucket.<bucket>.`` prefix) of a table's
    storage options (Lamina's names: ``lamina.io.fileio.S3_OPTION_ENV``)."""
    options = options or {}
    out: dict[str, str] = {}
    endpoint = _option(options, "endpoint", env=True)
    if endpoint:
        out["endpoint"] = endpoint
        out["path.style.access"] = "true"  # FileIO addresses a custom endpoint by path, not by host name
        if endpoint.lower().startswith("http://"):
            out["connection.ssl.enabled"] = "false"
    region = _option(options, "region", env=True)
    if region:
        out["endpoint.region"] = region
    key, secret = _option(options, "access_key_id", env=False), _option(options, "secret_access_key", env=False)
    if key and secret:
        out["access.key"], out["secret.key"] = key, secret
        token = _option(options, "session_token", env=False)
        if token:
            out["session.token"] = token
    else:
        out["aws.credentials.provider"] = DEFAULT_CREDENTIALS
    return out


def bucket_of(uri: str) -> str:
    return urllib.parse.urlparse(uri).netloc


def spark_uri(io: FileIO) -> str:
    """The table root as Spark's Hadoop file systems take it: ``file://<path>`` for a local
    table, ``s3a://bucket/prefix`` for ``s3://`` (or ``s3a://``) ones."""
    if io.is_local:
        return "file://" + io.uri
    scheme, sep, rest = io.uri.partition("://")
    return ("s3a" + sep + rest) if scheme.lower() in ("s3", "s3a") else io.uri


def _app(spark: SparkSession) -> str:
    return str(spark.sparkContext.applicationId)


def s3a_available(spark: SparkSession) -> bool:
    """Whether the session's JVM can load S3A (the ``hadoop-aws`` jar and the AWS SDK it needs)."""
    app = _app(spark)
    with _lock:
        if app in _available:
            return _available[app]
    try:
        jvm = spark._jvm
        assert jvm is not None  # a classic (JVM-backed) session
        ok = bool(jvm.org.apache.spark.util.Utils.classIsLoadable(S3A_CLASS))
        if ok:  # the connector needs the SDK too: a hadoop-aws jar alone fails at the first request
            ok = bool(jvm.org.apache.spark.util.Utils.classIsLoadable("software.amazon.awssdk.services.s3.S3Client"))
    except Exception:
        ok = False
    with _lock:
        _available[app] = ok
    return ok


def _set_by_user(conf: JavaObject, key: str) -> bool:
    if conf.get(key) is None:
        return False
    sources = conf.getPropertySources(key)
    return sources is None or any(str(s) not in _DEFAULT_SOURCES for s in sources)


def configure(spark: SparkSession, io: FileIO) -> str | None:
    """Set the bucket's S3A settings from the table's storage options (see the module
    docstring); None when Spark can reach the table through them, else why not."""
    bucket = bucket_of(io.uri)
    wanted = bucket_settings(io.options)
    key = (_app(spark), bucket)
    with _lock:
        done = _configured.get(key)
        if done is not None:
            if done != wanted:
                return (
                    f"bucket {bucket!r} is already configured for S3A with other storage options than this "
                    "table's (S3A keeps one client per bucket)"
                )
            return None
        conf = spark._jsparkSession.sparkContext().hadoopConfiguration()
        for name, value in wanted.items():
            per_bucket = f"fs.s3a.bucket.{bucket}.{name}"
            if _set_by_user(conf, per_bucket) or _set_by_user(conf, f"fs.s3a.{name}"):
                continue  # the cluster's own setting stands
            conf.set(per_bucket, value)
        _configured[key] = wanted
    return None


def _hadoop_version(spark: SparkSession) -> str:
    try:
        jvm = spark._jvm
        assert jvm is not None  # a classic (JVM-backed) session
        return str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
    except Exception:
        return "<the Hadoop version of your Spark>"


def native_root(spark: SparkSession, io: FileIO, what: str = "read and written") -> str | None:
    """The URI under which Spark's own Parquet reader and writer reach the table ``io`` is the
    root of, or None where they cannot (the caller then takes the Python data source; the
    reason is logged once per application)."""
    if io.is_local:
        return spark_uri(io)
    reason: str | None
    if io.scheme not in ("s3", "s3a"):
        reason = f"Spark's Hadoop file systems do not reach {io.scheme}:// locations"
    elif not s3a_available(spark):
        version = _hadoop_version(spark)
        reason = (
            f"Spark has no S3A connector (class {S3A_CLASS} is not loadable); for Spark's own Parquet reader "
            f"and writer add hadoop-aws {version} and the AWS SDK bundle it declares to the session "
            f"(spark.jars.packages=org.apache.hadoop:hadoop-aws:{version}, or spark.jars; `make s3a-jars` "
            "fetches them for the tests)"
        )
    else:
        reason = configure(spark, io)
        if reason is None:
            return spark_uri(io)
    key = (_app(spark), reason)
    with _lock:
        first = key not in _logged
        _logged.add(key)
    (log.warning if first else log.debug)(
        "lamina: %s is %s through the Python data source (Lamina's FileIO in the Python workers): %s",
        io.uri,
        what,
        reason,
    )
    return None
