"""DuckDB extensions lamina.duckdb uses when a connection can load them.

- ``delta``: DuckDB's Delta reader. Its scan is DuckDB's own multi-file Parquet reader with
  each file's deletion vector applied inside the scan (a selection per vector of rows), so a
  table with deletes is planned as its plain files are (lamina.duckdb.deltalog).
- ``httpfs``: DuckDB's S3 reader, for ``s3://`` tables.

An extension is taken from, in order: the connection (already loaded); the Python package
``duckdb-extension-<name>`` built for the running DuckDB (``pip install
duckdb-extension-delta``: the file is DuckDB's signed build, loaded with ``LOAD '<file>'``);
DuckDB's own extension directory (``INSTALL <name>`` done beforehand). Nothing is downloaded:
a machine without the extension reads through the fallbacks docs/engines.md describes.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

__all__ = ["load", "is_loaded", "extension_file"]

_loaded: weakref.WeakKeyDictionary[DuckDBPyConnection, dict[str, bool]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def extension_file(name: str) -> str | None:
    """The extension's file from its Python package, for the running DuckDB version; None if
    the package is not installed or holds no build for this version."""
    import duckdb

    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        return None
    version = duckdb.__version__
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "extensions", f"v{version.removeprefix('v')}", f"{name}.duckdb_extension")
        if os.path.isfile(path):
            return path
    return None


def load(con: DuckDBPyConnection, name: str) -> bool:
    """Whether ``name`` is loaded on ``con`` (loading it if it can be); remembered per connection."""
    import duckdb

    with _lock:
        known = _loaded.setdefault(con, {})
        if name in known:
            return known[name]
    ok = False
    try:
        row = con.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = ?", [name]).fetchone()
        ok = bool(row and row[0])
    except duckdb.Error:
        pass
    for target in [] if ok else [extension_file(name), name]:
        if target is None:
            continue
        try:
            quoted = target.replace("'", "''")
            con.execute(f"LOAD '{quoted}'" if os.sep in target else f"LOAD {name}")
            ok = True
            break
        except duckdb.Error:
            continue
    with _lock:
        _loaded.setdefault(con, {})[name] = ok
    return ok


def is_loaded(con: DuckDBPyConnection, name: str) -> bool:
    """Whether ``name`` is loaded on ``con`` already, loading nothing: loading costs a signature
    check of the whole extension file (tens of MB for ``delta``) per connection, which a caller
    pays only where the extension is worth it."""
    import duckdb

    with _lock:
        if _loaded.get(con, {}).get(name):
            return True
    try:
        row = con.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = ?", [name]).fetchone()
    except duckdb.Error:
        return False
    if row and row[0]:
        with _lock:
            _loaded.setdefault(con, {})[name] = True
        return True
    return False
