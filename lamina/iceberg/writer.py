"""The Iceberg view's background writer: a commit queues the view's update for the version it
made and returns; one thread per process runs the queued updates in the order they were
queued, so the view's files are off the commit's critical path (as Delta UniForm writes its
Iceberg metadata after the Delta commit, and as ``lamina.commit.log`` writes version hints).

Per table and log (main, or a branch), at most one update waits: a commit that finds one
still queued gives it its own, newer version instead of queueing another, since a sync
catches up over every version the view lacks. Once an update runs, a new commit queues a
new one after it, so the newest version is never left out.

Whatever needs the view current waits first: ``flush`` (of one table, or of every table)
returns once the updates queued before it have run. ``read_head`` calls it, so this process
reads the view its own commits made; so do a full sync, expiry, garbage collection, fsck and
the catalogs' naming of the view. Process exit waits too (before the interpreter stops its
thread pools, which a sync may use). An update's error is logged by the worker, never raised
into ``flush`` or another caller: the view is derived state, and the next commit or sync
catches up.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["flush", "queue"]

log = logging.getLogger(__name__)

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lamina-iceberg")
_lock = threading.Lock()
# (table uri, log) -> (version, update) queued and not started; the update runs once
_queued: dict[tuple[str, str], tuple[int, Callable[[], object]]] = {}
# every queued or running update's future -> its table's uri
_pending: dict[Future[None], str] = {}
_worker = threading.local()  # ``running`` is set on the worker thread while an update runs


def queue(uri: str, log_name: str, version: int, update: Callable[[], object]) -> None:
    """Run ``update`` (the view's sync up to ``version`` of log ``log_name`` of the table at
    ``uri``) on the worker, after every update queued before it; if one of this log's is
    still waiting, it runs ``update`` instead (the newer version's) and nothing is added."""
    key = (uri, log_name)
    with _lock:
        waiting = _queued.get(key)
        if waiting is not None:
            if version >= waiting[0]:
                _queued[key] = (version, update)
            return
        _queued[key] = (version, update)
        fut = _pool.submit(_run, key)
        _pending[fut] = uri
    fut.add_done_callback(_forget)


def flush(uri: str | None = None) -> None:
    """Wait until every update queued so far (for the table at ``uri``, or for any table) has
    run. On the worker itself (a sync reading the view's head) there is nothing to wait for."""
    if getattr(_worker, "running", False):
        return
    with _lock:
        waiting = [f for f, u in _pending.items() if uri is None or u == uri]
    for f in waiting:
        f.result()  # (_run raises nothing)


def _run(key: tuple[str, str]) -> None:
    with _lock:
        version, update = _queued.pop(key)
    _worker.running = True
    try:
        update()
    except Exception:
        log.warning("the Iceberg view of %s was not updated after version %d", key[0], version, exc_info=True)
    finally:
        _worker.running = False


def _forget(f: Future[None]) -> None:
    with _lock:
        _pending.pop(f, None)


def _after_fork_in_child() -> None:
    """A forked child has no worker thread: the updates its parent queued are the parent's
    to run, and a flush in the child must not wait for them."""
    global _pool, _lock
    _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lamina-iceberg")
    _lock = threading.Lock()
    _queued.clear()
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

# Run before the interpreter's own exit hook for thread pools (threading's exit hooks run in
# reverse order of registration, and concurrent.futures registered its hook on import, above),
# so that a sync still queued can use the pools. A Python without that hook flushes at atexit.
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(flush)
else:  # pragma: no cover
    atexit.register(flush)
