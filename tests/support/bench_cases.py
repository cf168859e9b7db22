"""The benchmark cases of bench/ (bench/registry.py) as the tests see them: the cases, and the
pytest marks of a test that runs one, from its registration (its tiers, and bench_heavy when
its tiny run takes long), so no test keeps a list of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import registry  # noqa: E402

CASES = registry.discover()


def case_marks(name: str) -> list[pytest.MarkDecorator]:
    """The marks of a test running the case `name`: slow (a fresh interpreter runs it), and its tiers."""
    return [pytest.mark.slow, *(getattr(pytest.mark, t) for t in sorted(CASES[name].tiers))]
