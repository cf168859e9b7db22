"""DuckDB's access to a table's ``s3://`` location: httpfs, and a secret scoped to the
location that carries its endpoint and keys (from the table's FileIO options)."""

from __future__ import annotations

import hashlib
import json
import weakref
from typing import TYPE_CHECKING

from lamina.duckdb import extensions
from lamina.duckdb.quoting import string
from lamina.io import FileIO
from lamina.io.s3 import s3_settings

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

__all__ = ["s3_ready"]

# The secrets made per connection, by name.
_secrets: weakref.WeakKeyDictionary[DuckDBPyConnection, set[str]] = weakref.WeakKeyDictionary()


def s3_ready(con: DuckDBPyConnection, io: FileIO) -> bool:
    """Whether DuckDB reads ``io``'s ``s3://`` files itself: httpfs loads, and a secret scoped
    to the table's location carries its endpoint and keys (``lamina.io.s3``)."""
    if io.scheme not in ("s3", "s3a") or not extensions.load(con, "httpfs"):
        return False
    cfg = s3_settings(io.options)
    scope = io.full_uri("")
    secret = (
        "lamina_s3_" + hashlib.sha256(json.dumps([scope, sorted(cfg.items())], default=str).encode()).hexdigest()[:16]
    )
    done = _secrets.setdefault(con, set())
    if secret in done:
        return True
    parts = ["TYPE s3", f"SCOPE {string(scope.replace('s3a://', 's3://', 1))}"]
    endpoint = str(cfg.get("endpoint") or "")
    if endpoint:
        ssl = not endpoint.startswith("http://") and not _is_true(cfg.get("allow_http"))
        parts += [
            f"ENDPOINT {string(endpoint.split('://', 1)[-1].rstrip('/'))}",
            "URL_STYLE 'path'",
            f"USE_SSL {str(ssl).lower()}",
        ]
    for key, option in (
        ("access_key_id", "KEY_ID"),
        ("secret_access_key", "SECRET"),
        ("session_token", "SESSION_TOKEN"),
        ("region", "REGION"),
    ):
        if cfg.get(key):
            parts.append(f"{option} {string(str(cfg[key]))}")
    con.execute(f"CREATE OR REPLACE SECRET {secret} ({', '.join(parts)})")
    done.add(secret)
    return True


def _is_true(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")
