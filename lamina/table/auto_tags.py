"""Automatic tags: one tag per period, oldest expired first.

Table properties:
- ``tag.auto-create``: ``daily`` or ``hourly``;
- ``tag.auto-retain-max``: keep at most this many automatic tags (0 = all).

The tag of a period marks the table as it was at the period's end: when a
commit is the first of a new period, its parent -- the last version of the
previous period -- is tagged with that period's name (``2026-11-21`` or
``2026-11-21T09``, UTC). Tagging is best effort after the commit has landed:
it never fails or undoes the commit, and two writers racing to tag the same
period create one tag (put-if-absent).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lamina.errors import InvalidArgument, LaminaError, TagAlreadyExists
from lamina.spec.properties import AUTO_TAG_PERIOD_FORMATS, TableProperties
from lamina.spec.version import VersionManifest

if TYPE_CHECKING:
    from lamina.table.table import Table

log = logging.getLogger(__name__)


def period_name(timestamp_ms: int, period: str) -> str:
    try:
        fmt = AUTO_TAG_PERIOD_FORMATS[period]
    except KeyError:
        raise InvalidArgument(
            f"{TableProperties.TAG_AUTO_CREATE.key} must be one of {sorted(AUTO_TAG_PERIOD_FORMATS)}, not {period!r}"
        ) from None
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).strftime(fmt)


def on_commit(table: Table, vm: VersionManifest) -> str | None:
    """Create the previous period's tag if ``vm`` opened a new period; returns its name."""
    period = TableProperties.TAG_AUTO_CREATE.get(vm.properties)
    if not period or vm.parent_version is None:
        return None
    try:
        parent = table.log.load(vm.parent_version)
        name = period_name(parent.timestamp_ms, period)
        if name == period_name(vm.timestamp_ms, period):
            return None
        try:
            table.tag_store.create(name, parent, automatic=True)
        except TagAlreadyExists:
            return None
        retain = TableProperties.TAG_AUTO_RETAIN_MAX.get(vm.properties)
        if retain > 0:
            auto = [t for t in table.tag_store.list() if t.automatic]
            for old in auto[: max(0, len(auto) - retain)]:
                table.tags.delete(old.name)
        return name
    except LaminaError as e:  # the commit has landed; a missed tag must not look like a failed commit
        log.warning("automatic tag after version %d failed: %s", vm.version, e)
        return None
