"""The tag store: ``_lamina/tags/<name>.json``, one self-contained file per tag."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from lamina.commit.log import VersionLog
from lamina.errors import AlreadyExists, CorruptMetadata, NotFound, TagAlreadyExists, TagNotFound, VersionNotFound
from lamina.io import FileIO
from lamina.spec.features import BRANCHES, check_writer
from lamina.spec.layout import BRANCHES_DIR, MAIN_BRANCH, TAGS_DIR
from lamina.spec.tag import Tag, tag_path, validate_tag_name
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-tags")


class TagStore:
    def __init__(self, io: FileIO, log: VersionLog) -> None:
        self.io = io
        self.log = log

    def create(
        self,
        name: str,
        vm: VersionManifest,
        *,
        expires_at_ms: int | None = None,
        automatic: bool = False,
        confirm_version: bool = True,
        latest: VersionManifest | None = None,
    ) -> Tag:
        """Create a tag with put-if-absent: an existing tag is never overwritten.

        ``confirm_version``: expiry records versions as expired before it lists tags,
        so if the tagged version still loads after our tag is written, every
        later expiry sees the tag. If it does not, expiry may already be freeing
        that version's files: the tag is withdrawn and the caller told. ``latest``: the
        table's latest version, if the caller has just read it (saves reading it again).
        """
        validate_tag_name(name)
        # The latest version's writer features decide whether we may write. When the caller
        # did not read the latest, they are checked after the put (the tag withdrawn if they
        # refuse): the put's confirmation often shows ``vm`` is the latest, saving the read.
        if latest is not None:
            self.check_writable(latest)
        tag = Tag(name, vm, int(time.time() * 1000), expires_at_ms, automatic)
        try:
            # put_new: a retry after a lost answer finds our own tag (same bytes) and succeeds
            self.io.put_new(tag_path(name), tag.to_json())
        except AlreadyExists:
            existing = self.get(name)
            raise TagAlreadyExists(
                f"tag {name!r} already exists (version {existing.tagged_version}); "
                "delete it first or use t.tags.replace"
            ) from None
        if (
            confirm_version
            and self.log.branch == MAIN_BRANCH
            and BRANCHES not in vm.writer_features
            and self.log.is_known_newest(vm)
        ):
            # Our version is still the newest now that the tag is written: no expiry can have
            # removed it (the newest is always kept; one listing the slots from now on lists the
            # tags after), and no branch can have the name (making the first branch commits
            # the branches feature in a newer version first; a branch made from now on checks
            # for tags after writing its record). One request instead of three on S3.
            if latest is None:
                self._withdraw_unless_writable(name, vm)  # vm is the latest
            return tag
        if latest is None:
            self._withdraw_unless_writable(name, None)
        if self.io.exists(f"{BRANCHES_DIR}/{name}.json"):  # a branch made under the name meanwhile
            self._delete_file(name)
            raise TagAlreadyExists(f"{name!r} is a branch of {self.io.uri}; a tag may not share a branch's name")
        # The version is live unless a slot record covers it (expiry records a version before
        # anything else; its file stays in the slot a while), so the records are read.
        if confirm_version and not self.log.is_live(vm.version):
            self._delete_file(name)
            raise VersionNotFound(
                f"version {vm.version} was expired while tag {name!r} was being created; nothing was tagged"
            )
        return tag

    def guard(self, vm: VersionManifest, purpose: str) -> Tag:
        """A short-lived tag that keeps ``vm``'s files from expiry and tag deletion while an
        operation reads them (a rollback re-adding them). Confirmed like ``create``: after
        it is written, ``vm`` must still be live or held by another tag, or it is withdrawn
        (VersionNotFound). Remove it with ``drop_guard``; a crashed holder's guard expires
        after a day and the next expiry deletes it."""
        name = f"{purpose}-guard.{uuid.uuid4().hex[:16]}"
        tag = self.create(name, vm, expires_at_ms=int(time.time() * 1000) + 86_400_000, confirm_version=False)

        def same(other: VersionManifest | None) -> bool:
            # By commit id, not number: versions of different branches share numbers.
            return other is not None and other.version == vm.version and other.commit_id == vm.commit_id

        held = same(self.log.try_load(vm.version)) or any(same(t.version) for t in self.list() if t.name != name)
        if not held:
            self._delete_file(name)
            raise VersionNotFound(
                f"version {vm.version} was expired (and its files freed) before the {purpose} could hold it; "
                "nothing was committed"
            )
        return tag

    def drop_guard(self, tag: Tag) -> None:
        """Remove a guard's file. What only it held is left to orphan cleanup: usually the
        operation it guarded now references those files anyway."""
        self._delete_file(tag.name)

    def check_writable(self, latest: VersionManifest | None = None) -> None:
        """Tags change what maintenance keeps: a table whose latest version needs a writer
        feature this Lamina lacks may reference files in ways it cannot see (UnsupportedFeature)."""
        check_writer((latest or self.log.latest()).writer_features, f"table {self.io.uri}")

    def _withdraw_unless_writable(self, name: str, latest: VersionManifest | None) -> None:
        try:
            self.check_writable(latest)
        except Exception:
            self._delete_file(name)
            raise

    def put(self, tag: Tag) -> None:
        """Overwrite (t.tags.replace)."""
        self.check_writable()
        self.io.put(tag_path(tag.name), tag.to_json())

    def get(self, name: str) -> Tag:
        path = tag_path(name)
        try:
            data = self.io.get(path)
        except NotFound:
            raise TagNotFound(f"no tag {name!r} on {self.io.uri}; `lamina tag list` shows the tags") from None
        return Tag.from_json(data, path)

    def _delete_file(self, name: str) -> None:
        try:
            self.io.delete(tag_path(name))
        except NotFound:
            pass

    def readable(self, name: str) -> Tag | None:
        """Tag ``name``, or None if its file is damaged (TagNotFound if there is none)."""
        try:
            return self.get(name)
        except CorruptMetadata:
            return None

    def delete(self, name: str) -> Tag | None:
        """Delete tag ``name``; returns it, or None if its file was damaged. A damaged tag is
        deleted all the same: that is what the error reading it advises, and until it is gone
        expiry and orphan cleanup refuse to run. Which files only it held cannot be read, so
        they are left to orphan cleanup (unreferenced once the tag is gone)."""
        self.check_writable()
        tag = self.readable(name)
        self._delete_file(name)
        return tag

    def names(self) -> list[str]:
        return sorted(n[: -len(".json")] for n in self.io.list_names(TAGS_DIR) if n.endswith(".json"))

    def list(self) -> list[Tag]:
        """Every tag, ordered by tagged version then name."""
        names = self.names()

        def load(n: str) -> Tag | None:
            try:
                return self.get(validate_tag_name(n))
            except TagNotFound:  # deleted while listing
                return None

        tags = [t for t in _pool.map(load, names) if t is not None]
        return sorted(tags, key=lambda t: (t.tagged_version, t.name))
