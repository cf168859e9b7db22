"""The Iceberg view as commit hooks of the table (``lamina.iceberg`` writes it).

With the table property ``iceberg.enabled=true``, every new version (of main or a branch)
is added to the view after it lands: by the process's background writer, in commit order
(``lamina.iceberg.writer``; a sync there covers every version still waiting), or before the
commit returns with ``iceberg.sync-mode=sync``. A change of tags or branches updates the
view's refs. As automatic tags, this is best effort after the commit: a failure is logged
and never fails, undoes or repeats the commit, which was acknowledged before the hook ran;
the next commit, ``Table.sync_iceberg()`` or ``lamina iceberg sync`` catches up, however
many versions behind the view is. Whatever here needs the view current (a full sync, the
refs, expiry, status) waits for the background writer first, so it never races it. After
expiry the view drops the snapshots of expired versions and frees the files only they
needed (``lamina.iceberg.gc``).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from lamina.errors import InvalidArgument, LaminaError
from lamina.iceberg import gc
from lamina.iceberg.types import check_supported as _check_schema
from lamina.iceberg.view import VERSION_KEY, SyncResult, is_enabled, read_head, sync
from lamina.iceberg.writer import flush, queue
from lamina.spec.properties import TableProperties
from lamina.table.guards import table_of

if TYPE_CHECKING:
    from lamina.table.table import Table

log = logging.getLogger(__name__)


def _best_effort(what: str, table: Table, fn: Any) -> Any:
    try:
        return fn()
    except (LaminaError, OSError, ValueError, KeyError, TypeError) as e:
        # The version has landed: a view left behind is caught up later, a failed commit would lie.
        log.warning("the Iceberg view of %s was not updated %s: %s (run `lamina iceberg sync`)", table.uri, what, e)
        return None


def _named(table: Table, result: SyncResult) -> SyncResult:
    """``result``, after the table's catalog (if any) names the view's newest metadata file."""
    if result.metadata_path is not None:
        table.main.iceberg_synced(table.io.full_uri(result.metadata_path))
    return result


def on_commit(table: Table, vm: Any) -> SyncResult | None:
    """Add ``vm`` (just committed on ``table``'s branch) to the view, if the table enables it:
    queued for the background writer (None returned), or at once with ``iceberg.sync-mode=sync``."""
    if not is_enabled(vm):
        return None
    main, branch_log = table.main, table.log

    def update() -> SyncResult | None:
        return _best_effort(
            f"after version {vm.version}",
            table,
            lambda: _named(table, sync(table.io, main.log, refs=False, committed=(branch_log, vm))),
        )

    if TableProperties.ICEBERG_SYNC_MODE.get(vm.properties) == "sync":
        flush(table.io.uri)  # what earlier commits queued lands first: the view moves in commit order
        return update()
    queue(table.io.uri, branch_log.branch, vm.version, update)
    return None


def wait(table: Table) -> None:
    """Wait until the view's updates this process queued for ``table`` have run."""
    flush(table.io.uri)


def on_refs(table: Table) -> SyncResult | None:
    """Bring the view's tags and branches up to date (after a change of them). A table whose
    handle holds a version without the view costs nothing more (a view enabled by a newer
    version takes the refs at its next commit or sync: it is derived state)."""
    main = table.main
    if not is_enabled(main.metadata) or not is_enabled(main.log.latest()):
        return None
    flush(table.io.uri)  # (after the versions queued before the change)
    return _best_effort(
        "after a change of tags or branches", table, lambda: _named(table, sync(table.io, main.log, refs=True))
    )


def then_refs(method: Any) -> Any:
    """Decorates a method changing tags or branches (of ``t.tags``, ``t.branches``): after it,
    the view's refs are brought up to date (``on_refs``), unless it was a dry run."""

    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        if not kwargs.get("dry_run"):
            on_refs(table_of(self))
        return out

    return wrapped


def check_supported(vm: Any) -> None:
    """IcebergUnsupported if version ``vm``'s schema has a column Iceberg cannot represent."""
    _check_schema(vm.schema)


def sync_all(table: Table) -> SyncResult:
    """A full sync (``Table.sync_iceberg``): every retained version, every ref; errors raised."""
    main = table.main
    if not is_enabled(main.log.latest()):
        raise InvalidArgument(
            f"table {table.uri} does not enable the Iceberg view; "
            "turn it on with `lamina iceberg enable` (Table.set_iceberg_enabled())"
        )
    flush(table.io.uri)
    result = sync(table.io, main.log, retained=True, refs=True)
    head = read_head(table.io)
    if head is not None:  # named even when up to date: a sync repairs the catalog's name too
        main.iceberg_synced(table.io.full_uri(head.path))
    return result


def after_expiry(table: Table, dry_run: bool, reader_grace_ms: int | None) -> gc.Garbage | None:
    """Drop the expired versions' snapshots from the view and free what only they needed:
    the view's files no kept snapshot references, older than the reader grace (the call's,
    else the table's)."""
    main = table.main
    latest = main.metadata  # (expiry changes no property: no read of the latest for tables without the view)
    if dry_run or not is_enabled(latest):
        return None  # a disabled view stays as it was (docs/iceberg.md)

    def run() -> gc.Garbage:
        flush(table.io.uri)  # no queued sync may add files after the collection decides
        _named(table, sync(table.io, main.log, retained=True, refs=True))
        grace = (
            reader_grace_ms
            if reader_grace_ms is not None
            else TableProperties.EXPIRE_READER_GRACE_MS.get(latest.properties)
        )
        return gc.collect(table.io, older_than_ms=grace)

    return _best_effort("after expiry", table, run)


def status(table: Table) -> dict[str, Any]:
    """What ``Table.iceberg_status`` returns (see there)."""
    flush(table.io.uri)
    latest = table.main.log.latest()
    head = read_head(table.io)
    check = gc.check(table.io, latest)
    out: dict[str, Any] = {
        "enabled": is_enabled(latest),
        "sync_mode": TableProperties.ICEBERG_SYNC_MODE.get(latest.properties),
        "metadata": None,
        "shown_version": None,
        "latest_version": latest.version,
        "snapshots": 0,
        "refs": [],
        "problems": check.missing + check.problems,
    }
    if head is not None:
        meta = head.metadata
        main = meta.get("refs", {}).get("main", {}).get("snapshot-id")
        shown = next(
            (s["summary"].get(VERSION_KEY) for s in meta.get("snapshots", []) if s["snapshot-id"] == main), None
        )
        out.update(
            metadata=table.io.full_uri(head.path),
            shown_version=None if shown is None else int(shown),
            snapshots=len(meta.get("snapshots", [])),
            refs=sorted(meta.get("refs", {})),
        )
    return out
