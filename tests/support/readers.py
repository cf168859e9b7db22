"""Running another engine's reader of the Iceberg view in a subprocess (DuckDB 1.5 in its own
venv, Iceberg's Java library): JSON queries in on stdin, JSON answers out on stdout."""

from __future__ import annotations

import json
import subprocess
import sys


def run_reader(command: list[str], queries: list[dict], timeout: int = 600) -> list[dict]:
    done = subprocess.run(command, input=json.dumps(queries), capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        sys.stderr.write(done.stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
