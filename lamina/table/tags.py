"""``t.tags``: a table's tags (as pylance's ``ds.tags``).

A tag names one version of the table and keeps it, and the files it reads, from expiry
(docs/tags.md). Tags are table-wide: a branch's handle sees the same ones, and resolves a
version number against its own branch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lamina.maintenance import expire
from lamina.spec.tag import Tag
from lamina.table.guards import writes
from lamina.table.iceberg_view import then_refs
from lamina.timeutil import epoch_ms

if TYPE_CHECKING:
    from lamina.table.table import Table


def _expiry_ms(expires_at: Any) -> int | None:
    """``expires_at`` (a time, or an age from now as a timedelta) in epoch milliseconds."""
    return None if expires_at is None else epoch_ms(expires_at, "expires_at", timedelta_sign=+1)


class Tags:
    """The tags of ``table``: ``create``, ``replace``, ``rename``, ``delete``, ``get``, ``list``;
    iterating yields every tag, ``name in t.tags`` says whether one exists."""

    def __init__(self, table: Table) -> None:
        self._table = table

    @writes
    @then_refs
    def create(
        self, name: str, version: int | str | None = None, *, timestamp: Any = None, expires_at: Any = None
    ) -> Tag:
        """Tag a version (default: the latest). Creating an existing tag is an error
        (TagAlreadyExists). ``expires_at``: a time, or an age (timedelta from now), after
        which ``t.maintenance.expire_versions`` deletes the tag."""
        t = self._table
        latest = version is None and timestamp is None
        vm = t._fresh_latest() if latest else t._resolve(version, timestamp)
        return t.tag_store.create(name, vm, expires_at_ms=_expiry_ms(expires_at), latest=vm if latest else None)

    @writes
    @then_refs
    def replace(
        self, name: str, version: int | str | None = None, *, timestamp: Any = None, expires_at: Any = None
    ) -> Tag:
        """Point existing tag ``name`` at another version (default: the latest); frees what
        only the old target held."""
        t = self._table
        old = t.tag_store.get(name)
        vm = t.log.latest() if version is None and timestamp is None else t._resolve(version, timestamp)
        new = Tag(name, vm, int(time.time() * 1000), _expiry_ms(expires_at), old.automatic)
        t.tag_store.put(new)
        if old.tagged_version != vm.version:
            expire.free_tag(t.io, t.log, old)
        return new

    @writes
    @then_refs
    def rename(self, name: str, new_name: str) -> Tag:
        """The tag ``name`` under ``new_name`` (same version, same expiry)."""
        store = self._table.tag_store
        old = store.get(name)
        tag = store.create(new_name, old.version, expires_at_ms=old.expires_at_ms, confirm_version=False)
        store.delete(name)
        return tag

    @writes
    @then_refs
    def delete(self, name: str, *, dry_run: bool = False) -> expire.ExpireReport:
        """Delete a tag and every file only it held (its version may be long expired)."""
        t = self._table
        g = expire.delete_tag(t.io, t.log, name, dry_run=dry_run)
        return expire.ExpireReport(
            dry_run,
            deleted_manifests=g.manifests,
            deleted_files=g.files,
            deleted_bytes=g.freed_bytes,
            kept_for_tags=g.kept,
        )

    def get(self, name: str) -> Tag:
        """The tag ``name`` (TagNotFound if there is none)."""
        return self._table.tag_store.get(name)

    def list(self) -> list[Tag]:
        """Every tag, ordered by tagged version (``t.inspect.tags()`` as rows)."""
        return self._table.tag_store.list()

    def __iter__(self) -> Iterator[Tag]:
        return iter(self.list())

    def __len__(self) -> int:
        return len(self.list())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._table.tag_store.names()

    def __repr__(self) -> str:
        return f"lamina.Tags({self._table.uri!r})"
