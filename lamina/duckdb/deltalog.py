"""A version's planned files as a Delta log, so DuckDB applies deletion vectors inside its scan.

DuckDB's Delta reader (its ``delta`` extension, ``delta_scan``) hands each data file to
DuckDB's own Parquet reader together with the file's deleted rows, which the reader drops
as it scans (what its Iceberg and Delta readers do; not SQL a user can write). A query over
it is planned exactly as one over ``read_parquet`` of the same files: join order, filter and
projection pushdown, the join filters DuckDB pushes from a hash join's build side into the
probe side's scan, statistics. An anti-join of ``file_row_number`` with the deleted
positions, the SQL way, blocks those join filters and changes join orders
(docs/engines.md; BENCHMARKS.md, TPC-H).

So a version with deletes is written, once per process and version, as a one-commit Delta
table in a local cache directory: a ``_delta_log/00000000000000000000.json`` whose add
actions name Lamina's own data files (by a relative path: Delta joins it to the log's root)
with their row counts, and a deletion-vector file in Delta's format holding each file's
deleted positions. No data is copied; the log is a few KB per file. Delta joins every path
to the root, so the files must be reachable from a local directory: object-store tables
are read otherwise (lamina.duckdb).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import struct
import tempfile
import threading
import zlib
from collections import OrderedDict
from urllib.parse import quote

import pyarrow as pa
from pyroaring import BitMap

from lamina.data.deletes import read_bitmaps_of
from lamina.data.export import LiveFiles

__all__ = ["delta_schema", "log_of"]

# Delta's deletion vectors (PROTOCOL.md, "Deletion Vector Format"): a RoaringBitmapArray
# (magic, count of 32-bit bitmaps, each a key and a portable roaring bitmap); a DV file is a
# version byte, then per vector its size (big-endian), the bytes and their CRC-32.
_MAGIC = 1681511377
_FILE_VERSION = b"\x01"

_SIMPLE = [
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_int8, "byte"),
    (pa.types.is_int16, "short"),
    (pa.types.is_int32, "integer"),
    (pa.types.is_int64, "long"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
    (pa.types.is_string, "string"),
    (pa.types.is_large_string, "string"),
    (pa.types.is_binary, "binary"),
    (pa.types.is_large_binary, "binary"),
    (pa.types.is_date32, "date"),
]


def _type(t: pa.DataType, features: set[str]) -> str | dict[str, object] | None:
    """Delta's type for ``t`` (whose reading DuckDB maps back to the type read_parquet gives),
    or None: unsigned integers, other timestamp units, maps, ... have none that reads alike."""
    for test, name in _SIMPLE:
        if test(t):
            return name
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t) and t.unit == "us":
        if t.tz is None:
            features.add("timestampNtz")
            return "timestamp_ntz"
        return "timestamp" if t.tz in ("UTC", "+00:00", "Etc/UTC") else None
    if pa.types.is_struct(t):
        fields = [_field(t.field(i), features) for i in range(t.num_fields)]
        return None if any(f is None for f in fields) else {"type": "struct", "fields": fields}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _type(t.value_type, features)
        return None if inner is None else {"type": "array", "elementType": inner, "containsNull": True}
    return None


def _field(f: pa.Field, features: set[str]) -> dict[str, object] | None:
    t = _type(f.type, features)
    return None if t is None else {"name": f.name, "type": t, "nullable": True, "metadata": {}}


def delta_schema(schema: pa.Schema) -> tuple[str, set[str]] | None:
    """The Delta schema string of ``schema`` and the reader features it needs; None when a
    column has no Delta type DuckDB reads as read_parquet would."""
    features: set[str] = set()
    fields = [_field(f, features) for f in schema]
    if any(f is None for f in fields):
        return None
    return json.dumps({"type": "struct", "fields": fields}), features


def _dv_bytes(bitmap: BitMap) -> bytes:
    return struct.pack("<iqi", _MAGIC, 1, 0) + bitmap.serialize()


class _Cache:
    """Logs written by this process, by version and file set; the least recently used are
    removed past ``_MAX`` (a view made from one keeps reading it: DuckDB reads the log when
    a query is bound, so a removed log fails only queries of views made long before)."""

    _MAX = 256

    def __init__(self) -> None:
        self.root: str | None = None
        self.logs: OrderedDict[str, str] = OrderedDict()
        self.lock = threading.Lock()

    def directory(self) -> str:
        if self.root is None:
            self.root = tempfile.mkdtemp(prefix="lamina-duckdb-")
            atexit.register(shutil.rmtree, self.root, True)
        return self.root


_cache = _Cache()


def _key(live: LiveFiles, schema: str) -> str:
    e = live.entries
    cols = [c for c in ("path", "dv_path", "dv_offset") if c in e.column_names]
    h = hashlib.sha256(live.scan.io.uri.encode())
    h.update(str(live.scan.version).encode())
    h.update(schema.encode())
    for c in cols:
        h.update(json.dumps(e.column(c).to_pylist()).encode())
    return h.hexdigest()[:32]


def log_of(live: LiveFiles, schema: pa.Schema) -> str | None:
    """The root of a Delta table of ``live``'s files and deletes with columns ``schema`` (the
    files' own names and types), written on first use; None if a column has no Delta type
    or the files are not local."""
    io = live.scan.io
    converted = delta_schema(schema)
    if not io.is_local or converted is None:
        return None
    schema_json, features = converted
    key = _key(live, schema_json)
    with _cache.lock:
        root = _cache.logs.get(key)
        if root is not None and os.path.isdir(root):
            _cache.logs.move_to_end(key)
            return root
        root = os.path.join(_cache.directory(), key)
        _write(live, root, schema_json, features)
        _cache.logs[key] = root
        while len(_cache.logs) > _Cache._MAX:
            _, old = _cache.logs.popitem(last=False)
            shutil.rmtree(old, ignore_errors=True)
    return root


def _write(live: LiveFiles, root: str, schema_json: str, features: set[str]) -> None:
    io = live.scan.io
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "_delta_log"))
    bitmaps = read_bitmaps_of(io, live.dvs)
    descriptors: dict[int, dict[str, object]] = {}
    if bitmaps:
        chunks, pos = [_FILE_VERSION], len(_FILE_VERSION)
        dv_file = os.path.join(root, "deletes.bin")
        for i, bm in bitmaps.items():
            data = _dv_bytes(bm)
            descriptors[i] = {
                "storageType": "p",
                "pathOrInlineDv": "file://" + quote(dv_file),
                "offset": pos,
                "sizeInBytes": len(data),
                "cardinality": len(bm),
            }
            blob = struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
            chunks.append(blob)
            pos += len(blob)
        with open(os.path.join(tmp, "deletes.bin"), "wb") as f:
            f.write(b"".join(chunks))
    reader_features = sorted(features | {"deletionVectors"})
    actions: list[dict[str, object]] = [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": reader_features,
                "writerFeatures": reader_features,
            }
        },
        {
            "metaData": {
                "id": os.path.basename(root),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema_json,
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 0,
            }
        },
    ]
    sizes = live.entries.column("size").to_pylist() if "size" in live.entries.column_names else None
    for i, path in enumerate(live.paths):
        local = io.local_path(path)
        assert local is not None  # (log_of writes logs of local tables only)
        add: dict[str, object] = {
            "path": quote(os.path.relpath(local, root)),
            "partitionValues": {},
            "size": int(sizes[i]) if sizes and sizes[i] is not None else os.path.getsize(local),
            "modificationTime": 0,
            "dataChange": True,
            "stats": json.dumps({"numRecords": int(live.rows[i])}),
        }
        if i in descriptors:
            add["deletionVector"] = descriptors[i]
        actions.append({"add": add})
    with open(os.path.join(tmp, "_delta_log", "00000000000000000000.json"), "w") as f:
        f.write("\n".join(json.dumps(a) for a in actions) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)
