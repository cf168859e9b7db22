"""How maintenance reports print: on one line, whatever the table's size."""

from __future__ import annotations

import dataclasses
from typing import Any

# A list (of paths, versions, tags) longer than this prints as its length.
_SHOWN_ITEMS = 3


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def short_repr(report: Any) -> str:
    """A dataclass report's repr: the fields that differ from their default (nothing found,
    nothing deleted is said by leaving it out), each long list or mapping as its length
    (``<1,840 items>``), not every path it holds: a dry run over a large table lists thousands."""
    parts = []
    for f in dataclasses.fields(report):
        v = getattr(report, f.name)
        if not f.repr or v == _default(f):
            continue
        if isinstance(v, float):
            parts.append(f"{f.name}={v:.3g}")
        elif isinstance(v, (list, tuple, dict, set, frozenset)) and len(v) > _SHOWN_ITEMS:
            parts.append(f"{f.name}=<{len(v):,} items>")
        else:
            parts.append(f"{f.name}={v!r}")
    return f"{type(report).__name__}({', '.join(parts)})"
