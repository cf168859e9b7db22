"""What the bench tests share: the runner started as a user starts it (from the repository root,
in a fresh interpreter), with its raw results and tracebacks (bench/out) in the test's temp dir,
and a report file that already holds other sections, a stale one and a note added by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[2]
HAND_NOTE = "- Note (added by hand): this figure is the host's load,\n  not the change."


@pytest.fixture
def bench_out(tmp_path) -> Path:
    """Where the runner's raw results and tracebacks go (LAMINA_BENCH_OUT), instead of bench/out."""
    return tmp_path / "bench-out"


@pytest.fixture
def bench_run(bench_out) -> Callable[..., subprocess.CompletedProcess]:
    """bench_run(*args) runs `python bench/run.py ARGS` from the repository root."""

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = dict(os.environ, LAMINA_BENCH_OUT=str(bench_out))
        return subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=timeout)

    return run


@pytest.fixture
def hand_note() -> str:
    return HAND_NOTE


@pytest.fixture
def seeded_report(tmp_path) -> Callable[[str], Path]:
    """seeded_report(title): a BENCHMARKS.md holding `## Other section`, then `## title` with a stale
    figure and HAND_NOTE."""

    def seed(title: str) -> Path:
        path = tmp_path / "BENCHMARKS.md"
        path.write_text(f"# Lamina benchmarks\n\n## Other section\n\nkept as is\n\n## {title}\n\n- stale figure\n"
                        f"{HAND_NOTE}\n")
        return path

    return seed
