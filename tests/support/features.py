"""A table feature that readers and writers must know (lamina.spec.features), checked the one
way it is: a Lamina built without it refuses the table, and commits nothing."""

from __future__ import annotations

from typing import Any, Callable

import pytest

import lamina
from lamina.errors import UnsupportedFeature
from lamina.spec import features


def check_required_by_readers_and_writers(t: lamina.Table, feature: str, change: Callable[[lamina.Table], Any],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader without ``feature`` refuses to open ``t`` (naming it, and to upgrade); a writer
    without it refuses ``change(t)``, and the table keeps its version."""
    before = t.version
    monkeypatch.setattr(features, "KNOWN_READER_FEATURES", features.KNOWN_READER_FEATURES - {feature})
    with pytest.raises(UnsupportedFeature, match=f"{feature}.*upgrade lamina"):
        lamina.open_table(t.io.uri)
    monkeypatch.undo()
    monkeypatch.setattr(features, "KNOWN_WRITER_FEATURES", features.KNOWN_WRITER_FEATURES - {feature})
    with pytest.raises(UnsupportedFeature, match=feature):
        change(t)
    monkeypatch.undo()
    assert lamina.open_table(t.io.uri).version == before
