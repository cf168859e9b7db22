"""lamina.spark.s3a without a Spark session: the S3A settings a table's storage options make,
and the choice between Spark's own reader and writer and the Python data source (a stand-in
session whose JVM has or lacks S3A). With a real session and moto: tests/spark/test_spark_s3a.py."""

from __future__ import annotations

import logging
import uuid
from types import SimpleNamespace

import pytest

from lamina.io import FileIO
from lamina.spark.s3a import DEFAULT_CREDENTIALS, bucket_settings, native_root, spark_uri


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch):
    for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION",
              "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(k, raising=False)


def test_settings_of_storage_options():
    assert bucket_settings({"endpoint": "https://minio.example:9000", "region": "eu-west-1",
                            "access_key_id": "AK", "secret_access_key": "SK", "session_token": "TOK"}) == {
        "endpoint": "https://minio.example:9000", "path.style.access": "true", "endpoint.region": "eu-west-1",
        "access.key": "AK", "secret.key": "SK", "session.token": "TOK"}
    # Lamina's s3.-prefixed names too; an http:// endpoint turns TLS off; no keys: the SDK's standard chain
    assert bucket_settings({"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "us-east-1"}) == {
        "endpoint": "http://127.0.0.1:9000", "path.style.access": "true", "connection.ssl.enabled": "false",
        "endpoint.region": "us-east-1", "aws.credentials.provider": DEFAULT_CREDENTIALS}
    assert bucket_settings({}) == {"aws.credentials.provider": DEFAULT_CREDENTIALS}  # AWS itself: S3A's defaults
    # half a key pair is no credentials
    assert bucket_settings({"access_key_id": "AK"}) == {"aws.credentials.provider": DEFAULT_CREDENTIALS}


def test_endpoint_and_region_from_the_environment_credentials_never(monkeypatch):
    """As FileIO reads them: the endpoint and region from AWS_* variables; credentials from the
    environment stay with each process's own chain (they are not copied into Hadoop's configuration)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9100")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
    got = bucket_settings(None)
    assert got["endpoint"] == "http://127.0.0.1:9100" and got["endpoint.region"] == "ap-south-1"
    assert "access.key" not in got and got["aws.credentials.provider"] == DEFAULT_CREDENTIALS
    assert bucket_settings({"region": "eu-west-3"})["endpoint.region"] == "eu-west-3"  # an option wins


def stand_in(loadable: bool) -> SimpleNamespace:
    """A session whose JVM does (not) load classes; nothing else of Spark."""
    utils = SimpleNamespace(classIsLoadable=lambda name: loadable)
    jvm = SimpleNamespace(org=SimpleNamespace(
        apache=SimpleNamespace(spark=SimpleNamespace(util=SimpleNamespace(Utils=utils)),
                               hadoop=SimpleNamespace(util=SimpleNamespace(VersionInfo=SimpleNamespace(getVersion=lambda: "3.5.0"))))))
    return SimpleNamespace(_jvm=jvm, sparkContext=SimpleNamespace(applicationId=f"app-{uuid.uuid4().hex}"))


def test_without_s3a_the_python_data_source_and_one_log_line(caplog):
    spark = stand_in(loadable=False)
    io = FileIO("s3://bucket/orders", {"region": "us-east-1"})
    with caplog.at_level(logging.DEBUG, logger="lamina.spark.s3a"):
        assert native_root(spark, io, "read") is None
        assert native_root(spark, FileIO("s3://bucket/other", {"region": "us-east-1"}), "written") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per application and reason; later ones at DEBUG
    text = warnings[0].getMessage()
    assert "s3://bucket/orders is read through the Python data source" in text
    assert "org.apache.hadoop.fs.s3a.S3AFileSystem is not loadable" in text
    assert "spark.jars.packages=org.apache.hadoop:hadoop-aws:3.5.0" in text


def test_local_tables_always_and_other_stores_never(tmp_path, caplog):
    spark = stand_in(loadable=True)
    assert native_root(spark, FileIO(str(tmp_path / "t"))) == "file://" + str(tmp_path / "t")
    with caplog.at_level(logging.WARNING, logger="lamina.spark.s3a"):
        assert native_root(spark, FileIO("memory://m/t")) is None
    assert "do not reach memory:// locations" in caplog.text
    assert spark_uri(FileIO("s3://bucket/a/b", {"region": "us-east-1"})) == "s3a://bucket/a/b"
