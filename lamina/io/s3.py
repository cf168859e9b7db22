"""A table's S3 settings: its storage options for ``s3://`` (Lamina's names, or ``s3.``-prefixed),
else the AWS_* environment variables; what FileIO's store and the other readers of the
table's files (DuckDB, Polars, Spark's s3a) are configured from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["S3_OPTION_ENV", "s3_settings"]

# Options recognised for s3:// (also read from the environment, AWS_* names).
S3_OPTION_ENV = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "allow_http": ("AWS_ALLOW_HTTP",),
}


def s3_settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """The S3 settings (``S3_OPTION_ENV``'s keys) a table's storage options give, each from
    the option (``key`` or ``s3.key``) or else its environment variable; what other readers
    of the table's files (DuckDB, Polars) are handed too."""
    cfg: dict[str, Any] = {}
    for key, envs in S3_OPTION_ENV.items():
        val = options.get(key)
        if val is None:
            val = options.get(f"s3.{key}")
        if val is None:
            val = next((os.environ[e] for e in envs if e in os.environ), None)
        if val is not None:
            cfg[key] = val
    return cfg
