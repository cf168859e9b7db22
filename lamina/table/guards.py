"""The write guard: ``@writes`` marks a method that writes or deletes anything.

A marked method first checks that its table may be written now (``Table.check_writable``:
no writer feature this Lamina lacks, the table online in its catalog), so a refused call
leaves no file behind. It works on Table's methods and on those of its namespaces
(``t.tags``, ``t.branches``, ``t.maintenance``), which hold their table as ``_table``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def table_of(owner: Any) -> Any:
    """The table a method of ``owner`` (a Table, or one of its namespaces) works on."""
    return getattr(owner, "_table", owner)


def writes(method: F) -> F:
    """``method`` writes: it runs only once its table passes ``check_writable``."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        table_of(self).check_writable()
        return method(self, *args, **kwargs)

    guarded.__lamina_writes__ = True  # type: ignore[attr-defined]
    return guarded  # type: ignore[return-value]


def is_write(method: Any) -> bool:
    """Whether ``method`` is marked ``@writes``."""
    return getattr(method, "__lamina_writes__", False)
