"""In-flight write markers: what orphan cleanup must not touch yet.

A writer that puts data files under the table long before it commits (a Spark
job, a streaming query) registers its write id in ``_lamina/writes/<id>.json``
first and removes the marker once the job has committed or given up. Orphan
cleanup keeps every file whose path carries a registered write id, whatever
its age, so a slow job's files are never deleted under it (the failure of
iceberg #4194). A marker left by a crashed job stops protecting its files
after ``MARKER_TTL`` so the space is eventually reclaimed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

from lamina.errors import NotFound, StorageError
from lamina.io import FileIO
from lamina.spec.layout import DATA_DIR, WRITES_DIR, engine_data_dir, random_hex

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

MARKER_TTL = timedelta(days=7)


def new_write_id() -> str:
    """A write id: 16 hex digits, carried in the name of every file the write puts."""
    return random_hex(8)


def _marker(write_id: str) -> str:
    if not write_id or not all(c in "0123456789abcdef" for c in write_id):
        raise ValueError(f"write id must be lower-case hex, got {write_id!r}")
    return f"{WRITES_DIR}/{write_id}.json"


def register_write(io: FileIO, write_id: str) -> None:
    body = {
        "write_id": write_id,
        "started_ms": int(time.time() * 1000),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    io.put(_marker(write_id), json.dumps(body).encode())


def finish_write(io: FileIO, write_id: str) -> None:
    try:
        io.delete(_marker(write_id))
    except NotFound:
        pass


def finish_writes(io: FileIO, write_ids: Iterable[str]) -> None:
    """Remove the markers of ``write_ids`` (one batched delete; missing ones are fine)."""
    markers = [_marker(w) for w in sorted(set(write_ids))]
    if markers:
        io.delete_many(markers)


@contextmanager
def inflight(io: FileIO, write_id: str) -> Iterator[str]:
    """Mark ``write_id`` in flight for the duration of the block."""
    register_write(io, write_id)
    try:
        yield write_id
    finally:
        finish_write(io, write_id)


def live_write_ids(io: FileIO, now_ms: int | None = None) -> set[str]:
    """Write ids whose marker is younger than MARKER_TTL."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ttl_ms = int(MARKER_TTL.total_seconds() * 1000)
    out: set[str] = set()
    for meta in io.list(WRITES_DIR):
        name = meta.path.rsplit("/", 1)[-1]
        if not name.endswith(".json"):
            continue
        ms = int(meta.last_modified.timestamp() * 1000) if meta.last_modified is not None else now_ms
        if now_ms - ms < ttl_ms:
            out.add(name[: -len(".json")])
    return out


def written_by(paths: pa.Array, write_ids: set[str] | list[str]) -> pa.Array:
    """Which of ``paths`` carry one of ``write_ids``: Lamina's writer names files
    ``<write id>-<hex>``, Spark's native writer puts them under ``spark-<write id>/``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not write_ids:
        return pa.array([False] * len(paths))
    return pc.match_substring_regex(paths, "|".join(re.escape(w) for w in sorted(write_ids)))


def files_of_writes(io: FileIO, write_ids: set[str] | list[str]) -> list[str]:
    """The files under ``data/`` (data and DV files) written by any of ``write_ids``, so a
    write that gave up is cleaned up by its id."""
    import pyarrow as pa

    if not write_ids:
        return []
    listed = pa.array([o.path for o in io.walk(DATA_DIR)], pa.string())
    return listed.filter(written_by(listed, write_ids)).to_pylist()


def discard_writes(io: FileIO, write_ids: Iterable[str], paths: Iterable[str] = (), *, search: bool = True) -> None:
    """Delete what writes that committed nothing put under ``data/``, then remove their markers.

    Deleted: ``paths`` (the files the writes reported), everything under each write's own
    directory (``engine_data_dir``; on local disk the directories go too), and with
    ``search`` every file under ``data/`` whose name carries one of ``write_ids``: files
    the writes' tasks wrote but never reported (one listing of ``data/``). Best effort: a
    storage error is logged, and what it left behind is orphan cleanup's once the markers
    are gone (or have expired)."""
    ids = sorted(set(write_ids))
    doomed = set(paths)
    try:
        if search:
            doomed.update(files_of_writes(io, ids))
        else:
            for w in ids:
                doomed.update(o.path for o in io.walk(engine_data_dir(w)))
        if doomed:
            io.delete_many(sorted(doomed))
        if io.is_local:
            for w in ids:
                shutil.rmtree(io.local_path(engine_data_dir(w)), ignore_errors=True)  # type: ignore[arg-type]
    except StorageError as e:
        log.warning("could not delete the files of uncommitted writes %s under %s: %s", ids, io.uri, e)
    try:
        finish_writes(io, ids)
    except StorageError as e:  # the markers expire after MARKER_TTL
        log.warning("could not remove the in-flight markers of writes %s under %s: %s", ids, io.uri, e)
