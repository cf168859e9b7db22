"""Shared pieces of the benchmark harness: the data, timing and formatting helpers."""

from __future__ import annotations

import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"  # git-ignored: raw results and error tracebacks

# Make `import lamina` work when run as `python bench/run.py` from a checkout.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("category", pa.string()),
        ("value", pa.float64()),
        ("ts", pa.timestamp("us")),
    ]
)

_CATEGORIES = np.array([f"cat_{i:02d}" for i in range(16)], dtype=object)
_TS0_US = 1_700_000_000_000_000  # 2023-11-14, microseconds


def make_batch(start: int, n: int) -> pa.Table:
    """`n` rows with ids start..start+n-1 (sorted, contiguous); deterministic."""
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "category": pa.array(_CATEGORIES[ids % 16], pa.string()),
            "value": ids.astype(np.float64) * 0.5,
            "ts": pa.array(_TS0_US + ids * 1_000_000, pa.timestamp("us")),
        },
        schema=SCHEMA,
    )


def now() -> float:
    return time.perf_counter()


def p50(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_s(sec: float | None) -> str:
    """Human-readable duration."""
    if sec is None:
        return "n/a"
    if sec < 1e-3:
        return f"{sec * 1e6:.0f} µs"
    if sec < 1:
        ms = sec * 1e3
        return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{sec:.2f} s" if sec < 100 else f"{sec:.0f} s"


def fmt_ratio(x: float | None, lamina: float | None) -> str:
    """figure / Lamina's figure (>1: the peer is slower / Lamina is faster)."""
    if x is None or lamina is None or lamina <= 0:
        return "–"
    r = x / lamina
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def err_text(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"error: {type(exc).__name__}: {msg}"
    return text[:160]


def log_error(where: str, exc: BaseException) -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / "errors.log", "a") as f:
        f.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {where}\n")
        f.write("".join(traceback.format_exception(exc)))
        f.write("\n")


def dir_size(path: str | os.PathLike) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total
