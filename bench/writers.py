"""Concurrent-writer worker (imported by spawned processes; keep it top-level)."""

from __future__ import annotations

import logging
import time
import traceback

import common  # noqa: F401  (sys.path for lamina)
import systems
from common import make_batch

ID_STRIDE = 1_000_000  # writer w owns ids [w*ID_STRIDE, (w+1)*ID_STRIDE)


def batch_ids(writer: int, seq: int, rows: int) -> tuple[int, int]:
    start = writer * ID_STRIDE + seq * rows
    return start, start + rows


class _RetryCounter(logging.Handler):
    """pyiceberg logs one WARNING per commit retry; count them instead of printing."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record):
        if "retrying" in record.getMessage():
            self.count += 1


def worker(name, root, writer, n_appends, rows, barrier, queue):
    res = {"writer": writer, "acked": [], "failed": [], "lat": [], "error": None}
    retries = _RetryCounter()
    pylog = logging.getLogger("pyiceberg")
    pylog.addHandler(retries)
    pylog.propagate = False
    try:
        s = systems.get(name)
        h = s.open(root)
    except BaseException as e:  # noqa: BLE001
        res["error"] = f"open: {type(e).__name__}: {e}"[:300]
        try:
            barrier.abort()
        except Exception:
            pass
        queue.put(res)
        return
    try:
        barrier.wait(timeout=300)
    except BaseException as e:  # noqa: BLE001
        res["error"] = f"barrier: {type(e).__name__}"
        queue.put(res)
        return
    res["t_start"] = time.monotonic()
    for seq in range(n_appends):
        lo, _hi = batch_ids(writer, seq, rows)
        data = make_batch(lo, rows)
        t0 = time.perf_counter()
        try:
            h = s.append(h, data)
        except BaseException as e:  # noqa: BLE001
            res["failed"].append((seq, f"{type(e).__name__}: {str(e)[:200]}"))
            if len(res["failed"]) == 1:
                res["first_traceback"] = traceback.format_exc()[-2000:]
            continue
        res["lat"].append(time.perf_counter() - t0)
        res["acked"].append(seq)
    res["t_end"] = time.monotonic()
    res["logged_retries"] = retries.count
    queue.put(res)
