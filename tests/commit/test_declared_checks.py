"""Every Operation declares its conflict checks (lamina.commit.checks), the declaration is
what its code runs, and docs/architecture.md's table is the one the code gives."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import lamina
from lamina.commit import Operation
from lamina.commit.checks import CHECKS, conflict_table

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- conflict-checks:begin -->", "<!-- conflict-checks:end -->"
CONFLICT_ERRORS = r"(CommitConflict|PublishConflict|StaleRowDelta|TransactionAlreadyCommitted)"


def _operations() -> list[type[Operation]]:
    """Every subclass of Operation in lamina, found by importing each of its modules."""
    for m in pkgutil.walk_packages(lamina.__path__, "lamina."):
        importlib.import_module(m.name)
    out: list[type[Operation]] = []
    todo = list(Operation.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("lamina.") and cls not in out:
            out.append(cls)
        todo += cls.__subclasses__()
    return sorted(out, key=lambda c: c.__qualname__)


OPERATIONS = _operations()


def _called(cls: type) -> set[str]:
    """The checks the class's own code calls."""
    return set(re.findall(r"\b(require_\w+)\(", inspect.getsource(cls))) & set(CHECKS)


def test_the_operations_are_found():
    names = {c.__name__ for c in OPERATIONS}
    assert {"AppendFiles", "RowDelta", "PositionDelta", "UpdateSchema", "PublishBranch"} <= names


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda c: c.__name__)
def test_every_operation_declares_its_checks(op):
    assert "conflict_checks" in vars(op), f"{op.__name__} declares no conflict_checks (lamina.commit.checks)"
    declared = op.conflict_checks
    assert isinstance(declared, tuple)
    assert all(fn in CHECKS.values() for fn in declared), f"{op.__name__} declares a check not in lamina.commit.checks"
    assert len(set(declared)) == len(declared)


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda c: c.__name__)
def test_declared_checks_are_the_ones_its_code_runs(op):
    """What the class (and the operations it extends) calls is declared, and what it declares
    it calls; ``require_live`` is run by the committer for every change (so declaring it says
    the operation removes files)."""
    declared = {fn.__name__ for fn in op.conflict_checks}
    ancestry = [c for c in op.__mro__ if isinstance(c, type) and issubclass(c, Operation) and c is not Operation]
    called = set().union(*(_called(c) for c in ancestry))
    assert called <= declared, f"{op.__name__} runs {sorted(called - declared)} without declaring them"
    assert declared - {"require_live"} <= called, f"{op.__name__} declares {sorted(declared - called)} it never runs"


def test_the_committer_runs_require_live():
    from lamina.commit import committer

    assert "with require_live(change.operation):" in inspect.getsource(committer)


def test_no_operation_raises_a_conflict_outside_the_checks():
    """A conflict is raised by a named check only (a raise elsewhere would be undeclared)."""
    for path in sorted((ROOT / "lamina" / "operations").rglob("*.py")):
        hits = re.findall(rf"raise {CONFLICT_ERRORS}\b", path.read_text())
        assert not hits, f"{path.relative_to(ROOT)} raises {hits}: move it into a check of lamina.commit.checks"


def test_every_check_is_declared_by_some_operation():
    used = {fn.__name__ for op in OPERATIONS for fn in op.conflict_checks}
    assert set(CHECKS) == used


def test_architecture_lists_each_operations_checks():
    text = DOC.read_text()
    assert BEGIN in text and END in text
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    want = conflict_table(OPERATIONS)
    assert shown == want, f"docs/architecture.md's conflict table is stale; put between the markers:\n{want}"
