"""Reading and writing manifest Parquet files.

Manifests are immutable once written (unique names), so parsed tables are
cached process-wide by location; a repeated plan or commit reads no bytes.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from lamina.errors import CorruptMetadata, MissingFile, NotFound
from lamina.io import FileIO
from lamina.spec.layout import (
    ARROW_MANIFEST_SUFFIX,
    FORMAT_VERSION,
    inline_root_name_of,
    is_inline_root,
    new_inline_root_name,
    new_manifest_path,
)

_CACHE_BYTES = 512 * 2**20
_cache: OrderedDict[tuple[str, str], tuple[pa.Table, int]] = OrderedDict()  # (table, bytes counted)
_cache_size = 0
_cache_lock = threading.Lock()
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-manifest")


def _cache_get(key: tuple[str, str]) -> pa.Table | None:
    with _cache_lock:
        hit = _cache.get(key)
        if hit is None:
            return None
        _cache.move_to_end(key)
        return hit[0]


def _cache_put(key: tuple[str, str], t: pa.Table, nbytes: int | None = None) -> None:
    """Cache ``t`` under ``key``, counted as ``nbytes`` (default: its buffers' size; a root's
    uncompressed Arrow IPC encoding is as large as its buffers, and already known)."""
    global _cache_size
    with _cache_lock:
        if key in _cache:
            return
        size = t.get_total_buffer_size() if nbytes is None else nbytes
        _cache[key] = (t, size)
        _cache_size += size
        while _cache_size > _CACHE_BYTES and _cache:
            _, (_, old) = _cache.popitem(last=False)
            _cache_size -= old


def clear_cache() -> None:
    global _cache_size
    with _cache_lock:
        _cache.clear()
        _cache_size = 0


# The IPC format's defaults (metadata V5), fixed: pyarrow otherwise reads two environment
# variables on every file written, and a root's format should not depend on them.
_IPC_OPTIONS = pa.ipc.IpcWriteOptions()


def write_manifest(
    io: FileIO, entries: pa.Table, kind: str, arrow: bool = False, path: str | None = None
) -> tuple[str, int]:
    """Write ``entries`` as a new manifest; returns (path, size in bytes). ``arrow``: as an Arrow
    IPC file (a root manifest of a table with the feature arrow-root-manifests, a small leaf of
    one with arrow-leaf-manifests), else Parquet.
    ``path``: its name (a commit's root, lamina.spec.slot.commit_root_path), else a random one."""
    entries, batch = _one_batch(entries)
    return _store(io, entries, batch, kind, arrow, path)


def _store(
    io: FileIO,
    entries: pa.Table,
    batch: pa.RecordBatch,
    kind: str,
    arrow: bool,
    path: str | None,
) -> tuple[str, int]:
    """``write_manifest`` of entries already split by ``_one_batch``."""
    data = _ipc_file(batch, kind) if arrow else _parquet(batch, kind)
    path = path or new_manifest_path(kind, arrow)
    io.put_new(path, data)
    _cache_put((io.uri, path), entries, data.size if arrow else None)
    return path, data.size


def write_root(
    io: FileIO,
    entries: pa.Table,
    arrow: bool,
    inline_max_bytes: int,
    path: str | None = None,
) -> tuple[str, int, bytes | None]:
    """The root manifest of a new version: (name, size, its bytes) when the version manifest is
    to carry it (feature inline-root-manifests: ``inline_max_bytes`` > 0 and its encoding, an
    Arrow IPC stream, no larger), else (path, size, None) of the root file written. ``path``:
    the root's name as a file (a commit's root, lamina.spec.slot.commit_root_path), which a
    carried one takes too, as ``<the same>.root.inline``; else random names."""
    if inline_max_bytes <= 0:
        path, size = write_manifest(io, entries, "root", arrow, path=path)
        return path, size, None
    entries, batch = _one_batch(entries)
    data = _ipc_stream(batch, "root")
    if len(data) <= inline_max_bytes:
        name = new_inline_root_name() if path is None else inline_root_name_of(path)
        _cache_put((io.uri, name), entries, len(data))
        return name, len(data), data
    path, size = _store(io, entries, batch, "root", arrow, path)
    return path, size, None


def _one_batch(entries: pa.Table) -> tuple[pa.Table, pa.RecordBatch]:
    """(``entries`` as cached: one chunk per column, no schema metadata; what a manifest stores of
    them: one record batch without the all-null columns).

    Worked on as one record batch: a root is encoded on every commit, and each step of it
    (a table's chunks combined, its metadata replaced, a wrapper per column) costs there."""
    # One chunk per column: compute kernels pay per chunk, and the cached copy is reused.
    batches = entries.to_batches()
    if len(batches) == 1 and batches[0].schema.metadata is None:
        batch, cached = batches[0], entries  # one chunk per column already (the tree builds roots so)
    else:
        cached = entries.replace_schema_metadata(None).combine_chunks()
        parts = cached.to_batches()
        batch = parts[0] if parts else pa.RecordBatch.from_pylist([], schema=cached.schema)
    # All-null columns (unused DV slots, unknown stats) are left out of the file: readers
    # treat a missing column as all-unknown, and every column costs write time.
    n = batch.num_rows
    nulls = [c.null_count for c in batch.columns]
    if n and n in nulls:
        schema = batch.schema
        batch = batch.select([i for i, k in enumerate(nulls) if k < n or not schema.field(i).nullable])
    return cached, batch


def _metadata(kind: str) -> dict[bytes, bytes]:
    return {b"lamina.format_version": str(FORMAT_VERSION).encode(), b"lamina.manifest_kind": kind.encode()}


def _ipc_file(batch: pa.RecordBatch, kind: str) -> pa.Buffer:
    """An Arrow IPC file of one record batch, uncompressed: a root is small and read whole."""
    sink = pa.BufferOutputStream()
    writer = pa.ipc.RecordBatchFileWriter(sink, batch.schema.with_metadata(_metadata(kind)), options=_IPC_OPTIONS)
    writer.write_batch(batch)
    writer.close()
    return sink.getvalue()


# The end-of-stream marker of the Arrow IPC stream format (continuation token, zero length).
_IPC_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_schema_messages: list[tuple[pa.Schema, str, bytes]] = []  # the latest first
_schema_messages_lock = threading.Lock()


def _ipc_stream(batch: pa.RecordBatch, kind: str) -> bytes:
    """An Arrow IPC stream of one record batch (its schema message, the batch's, the end of the
    stream). The schema message is the same from one commit to the next (the same columns):
    it is encoded once and kept, so a root costs one message to encode, not a writer's set-up."""
    schema = batch.schema
    with _schema_messages_lock:
        message = next((m for known, k, m in _schema_messages if k == kind and known.equals(schema)), None)
    if message is None:
        message = schema.with_metadata(_metadata(kind)).serialize().to_pybytes()
        with _schema_messages_lock:
            _schema_messages.insert(0, (schema, kind, message))
            del _schema_messages[16:]
    return b"".join((message, batch.serialize().to_pybytes(), _IPC_END_OF_STREAM))


def _parquet(batch: pa.RecordBatch, kind: str) -> pa.Buffer:
    on_disk = pa.Table.from_batches([batch])
    small = on_disk.num_rows <= 1024
    sink = pa.BufferOutputStream()
    pq.write_table(
        on_disk.replace_schema_metadata(_metadata(kind)),
        sink,
        # The small roots written on every commit are cheapest uncompressed; large leaves
        # use lz4 (fast to decode when planning) and a dictionary for partition paths.
        compression="none" if small else "lz4",
        use_dictionary=False if small else ["partition_path"],
        row_group_size=64 * 1024,
        write_statistics=False,  # manifests are read whole; their own stats are in columns
        store_schema=False,  # readers conform to the manifest schema derived from the table
        data_page_version="2.0",
    )
    return sink.getvalue()


def _read_arrow(io: FileIO, path: str) -> pa.Table:
    """An Arrow IPC manifest, whole (a root or a leaf of at most 1,024 entries: small)."""
    return pa.ipc.open_file(pa.py_buffer(io.get(path))).read_all()


def read_manifest(io: FileIO, path: str, columns: Sequence[str] | None = None, inline: bytes | None = None) -> pa.Table:
    """A manifest as an Arrow table; ``columns`` reads only those that exist in it. ``inline``:
    the bytes of a root its version manifest carries (``path`` then names it)."""
    full = _cache_get((io.uri, path))
    if full is not None:
        return full if columns is None else full.select([c for c in columns if c in full.schema.names])
    if is_inline_root(path):
        return _read_inline_root(io, path, inline, columns)
    key = (io.uri, path) if columns is None else (io.uri, path + "|" + ",".join(columns))
    t = _cache_get(key)
    if t is not None:
        return t
    try:
        if path.endswith(ARROW_MANIFEST_SUFFIX):
            t = _read_arrow(io, path)
            if columns is not None:
                t = t.select([c for c in columns if c in t.schema.names])
        else:
            t = _read_parquet(io, path, columns)
    except NotFound:
        raise MissingFile(
            f"manifest {path} is missing; the version referencing it cannot be read "
            "(run `lamina fsck` and roll back to a version whose files are intact)"
        ) from None
    except FileNotFoundError as e:
        raise MissingFile(f"manifest {path} is missing ({e}); run `lamina fsck`") from None
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptMetadata(f"manifest {path} is corrupt or truncated ({e}); run `lamina fsck`") from None
    t = t.replace_schema_metadata(None).combine_chunks()
    _cache_put(key, t)
    return t


def _read_inline_root(io: FileIO, name: str, inline: bytes | None, columns: Sequence[str] | None) -> pa.Table:
    """A root carried by its version manifest, decoded whole and cached under its name."""
    if inline is None:
        # A caller that passed the root's name without its version's bytes: reading a file of
        # that name would find nothing, and an empty root would drop every file of the version.
        raise CorruptMetadata(f"root {name} is carried by its version manifest, and its bytes were not given")
    try:
        t = pa.ipc.open_stream(pa.py_buffer(inline)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptMetadata(
            f"root {name} carried by its version manifest is corrupt or truncated ({e}); run `lamina fsck`"
        ) from None
    t = t.replace_schema_metadata(None).combine_chunks()
    _cache_put((io.uri, name), t)
    return t if columns is None else t.select([c for c in columns if c in t.schema.names])


# Local manifests of at most this many bytes in all are read on the calling thread.
LOCAL_SERIAL_BYTES = 1 << 20


def _read_parquet(io: FileIO, path: str, columns: Sequence[str] | None) -> pa.Table:
    """A Parquet manifest (``columns`` of it: those it has) through pq.ParquetReader, not
    pq.ParquetFile, whose Python set-up costs about as much as reading a leaf of a few hundred
    entries. Manifests are flat, so a column's
    field index is its leaf index; a file that is not goes through ParquetFile."""
    local = io.local_path(path)
    with pa.OSFile(local) if local is not None else pa.BufferReader(io.get(path)) as source:
        reader = pq.ParquetReader()
        reader.open(source, pre_buffer=False)
        if columns is None:
            return reader.read_all(use_threads=False)
        names = reader.schema_arrow.names
        if reader.metadata.num_columns == len(names):
            return reader.read_all(column_indices=[names.index(c) for c in columns if c in names], use_threads=False)
        present = set(names)
        return pq.ParquetFile(source).read(columns=[c for c in columns if c in present], use_threads=False)


def read_manifests(io: FileIO, paths: Sequence[str], columns: Sequence[str] | None = None) -> list[pa.Table]:
    """Read many manifests, in parallel (I/O and Parquet decoding release the GIL) unless they
    are cached or a few small local files: decoding one of those costs about what handing it to
    a pool thread and back costs (starting that thread, in a fresh process, and waiting out the
    interpreter's switch interval while another thread holds its lock)."""
    if len(paths) <= 1:
        return [read_manifest(io, p, columns) for p in paths]
    uncached = [p for p in paths if _cache_get((io.uri, p)) is None]
    if not uncached or (io.is_local and _local_bytes(io, uncached) <= LOCAL_SERIAL_BYTES):
        return [read_manifest(io, p, columns) for p in paths]
    return list(_pool.map(lambda p: read_manifest(io, p, columns), paths))


def _local_bytes(io: FileIO, paths: Sequence[str]) -> int:
    """The size of local manifests (a missing one counts as nothing: reading it reports it)."""
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(io.local_path(p))  # type: ignore[arg-type]
        except OSError:
            pass
    return total
