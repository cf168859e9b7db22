"""``t.branches``: a table's branches (docs/branches.md).

A branch is a version log of its own (``lamina.commit.branches``) sharing the table's files;
``t.branch(name)`` is a handle on one (a Table whose reads and writes go to that log). This
namespace makes, lists, renames, deletes and publishes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lamina.commit import CommitOptions
from lamina.commit.branches import BranchStore, base_copy
from lamina.errors import InvalidBranchName, VersionNotFound
from lamina.operations.publish import EnableBranches
from lamina.spec.branch import BranchRecord, check_retention, validate_branch_name
from lamina.spec.features import BRANCHES
from lamina.spec.layout import MAIN_BRANCH
from lamina.table.guards import writes
from lamina.table.iceberg_view import then_refs
from lamina.timeutil import duration_ms

if TYPE_CHECKING:
    from lamina.table.table import Table


class Branches:
    """The branches of ``table`` but main: ``create``, ``get``, ``list``, ``rename``, ``delete``,
    ``publish``; iterating yields every record, ``name in t.branches`` says whether one
    exists (``main`` always does)."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def _store(self) -> BranchStore:
        return BranchStore(self._table.io)

    @writes
    @then_refs
    def create(
        self,
        name: str,
        *,
        version: int | str | None = None,
        timestamp: Any = None,
        retain_last: int | None = None,
        max_age: Any = None,
    ) -> Table:
        """Make branch ``name`` from a version (default: the latest) and return its handle.
        ``version``: a version number of this handle's branch, or a tag or branch name (a
        branch: its latest); ``timestamp``: this branch's version then. Nothing is copied: the
        branch shares the table's files. ``retain_last`` / ``max_age`` (a timedelta): the
        branch's retention, which ``t.maintenance.expire_versions`` applies to its versions.

        Refused with nothing changed: a bad name, ``main``, a branch or tag of that name
        (BranchAlreadyExists), an unknown source (BranchNotFound, TagNotFound,
        VersionNotFound), both ``version`` and ``timestamp`` (InvalidArgument)."""
        t = self._table
        validate_branch_name(name)
        max_age_ms = None if max_age is None else duration_ms(max_age, "max_age")
        check_retention(retain_last, max_age_ms)
        source, number, tag = t._source(version, timestamp)
        latest = number is None and tag is None and timestamp is None
        # A source named explicitly is found before the feature is enabled: an unknown one
        # changes nothing. The latest is read after, so it is the enabling version itself (a
        # branch made from main's latest publishes by fast-forward if main stays there).
        base = None if latest else source._resolve(number if tag is None else tag, timestamp)
        main = t.main
        store = self._store()
        if BRANCHES not in main.metadata.writer_features:
            store.refuse_existing(name)  # before anything is committed
            main._one(main.transaction().add_operation(EnableBranches()))
        if base is None:
            base = source._fresh_latest()
        record = store.create(name, base, source.branch_name, retain_last=retain_last, max_age_ms=max_age_ms)
        # As for tags: expiry records versions as expired before it lists branches, so a base still
        # loadable now is seen by every later expiry (and a tag's copy by its tag); a base still
        # the newest cannot have been expired (the newest is always kept).
        held = (
            source.tag_store.readable(tag) is not None
            if tag is not None
            else source.log.is_known_newest(base) or source.log.is_live(base.version)
        )
        if not held:
            store.delete(name)
            raise VersionNotFound(
                f"version {base.version} was expired while branch {name!r} was being made; nothing was made"
            )
        return main._handle(store.log(record, allow_list=main.log.allow_list), base_copy(base))

    def get(self, name: str) -> BranchRecord:
        """Branch ``name``'s record (BranchNotFound if there is none)."""
        return self._store().get(name)

    def list(self) -> list[BranchRecord]:
        """Every branch but main, by name (``t.inspect.branches()`` lists main too)."""
        return self._store().list()

    @writes
    @then_refs
    def rename(self, name: str, new_name: str) -> BranchRecord:
        """Give branch ``name`` a new name (same versions; handles on it keep working)."""
        if name == MAIN_BRANCH:
            raise InvalidBranchName(f"{MAIN_BRANCH!r} cannot be renamed")
        validate_branch_name(new_name)
        return self._store().rename(name, new_name)

    @writes
    @then_refs
    def delete(self, name: str) -> BranchRecord:
        """Delete branch ``name`` (its record is returned): it can no longer be read or written,
        and a commit landing on it meanwhile is refused. The files only it needed are freed by
        the next ``t.maintenance.expire_versions`` once the deletion is older than the reader
        grace (a publish or a read of it may still be running until then), or by
        ``t.maintenance.remove_orphans``."""
        if name == MAIN_BRANCH:
            raise InvalidBranchName(f"{MAIN_BRANCH!r} is the table itself and cannot be deleted")
        return self._store().delete(name)

    @writes
    def publish(
        self,
        branch: str,
        into: str = MAIN_BRANCH,
        *,
        expected_version: int | None = None,
        commit_options: CommitOptions | None = None,
    ) -> Any:
        """Publish branch ``branch`` into ``into`` as one version: a fast-forward if ``into`` has
        not moved since the branch was made from it, else the branch's changes re-applied on
        ``into``'s latest (PublishConflict naming the files if they clash with what ``into``
        changed). ``expected_version``: only if ``into`` is still at that version
        (CommitConflict otherwise). Nothing is committed if the branch has no commit."""
        dst = self._table.branch(into)
        op = dst._publish_operation(branch, expected_version)
        return dst._commit_operation(op, commit_options)

    def __iter__(self) -> Iterator[BranchRecord]:
        return iter(self.list())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name == MAIN_BRANCH or self._store().exists(name))

    def __repr__(self) -> str:
        return f"lamina.Branches({self._table.uri!r})"
