"""The branch store: branch records, and the version log of each branch.

A branch is a version log of its own (Lance's model, docs/branches.md): its slots, hint and
slot records live under ``_lamina/branch_logs/<id>/`` with exactly main's protocol
(put-if-absent slots, slot records, tombstones), so writers on two branches never touch the
same file and opening a branch's latest version costs what main's does. The log starts with
its base: slot ``b`` (the version the branch was made from) holds a copy of that version, and
the branch's own commits are ``b+1, b+2, ...`` of that log. Data files and manifests are
shared with the rest of the table: nothing is copied when a branch is made.

Creating a branch writes its record (put-if-absent: the name is taken or not), then the
base slot; a reader that finds a record without the slot (a creator that crashed between)
writes the slot itself from the record's copy. Deleting one writes a marker into its log
(``deleted.json``) before anything else: a commit whose put lands on the branch checks the
marker before it is acknowledged (``BranchLog.confirm``), so no commit is acknowledged on a
branch already deleted, and one acknowledged before the marker was deleted with it.
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from lamina.commit.log import VersionLog
from lamina.commit.slots import SlotListing
from lamina.errors import (
    AlreadyExists,
    BranchAlreadyExists,
    BranchNotFound,
    CorruptMetadata,
    NotFound,
    StorageError,
    TableNotFound,
)
from lamina.io import FileIO
from lamina.spec.branch import BRANCHES, BranchRecord, branch_path, check_retention, validate_branch_name
from lamina.spec.features import with_features
from lamina.spec.layout import BRANCH_LOGS_DIR, BRANCHES_DIR
from lamina.spec.slot import Tombstone, slot_chunk_size
from lamina.spec.tag import tag_path
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-branches")

DELETED_SUFFIX = ".deleted.json"


def deleted_marker(branch_id: str) -> str:
    """The deletion marker of a branch's log: beside the log's directory, so one listing of
    ``branch_logs/`` (not of every log) finds the deleted branches."""
    return f"{BRANCH_LOGS_DIR}/{branch_id}{DELETED_SUFFIX}"


@dataclass
class BranchLog(VersionLog):
    """The version log of one branch (``record``)."""

    record: BranchRecord | None = field(default=None, repr=False)

    @property
    def branch(self) -> str:
        assert self.record is not None
        return self.record.name

    # The base slot is virtual until something is written there: a branch is made by writing
    # its record alone (one put, like a tag), and slot ``base_version`` reads as the record's
    # copy while the file is absent and no slot record covers it. Expiry records it like any
    # slot (the copy stays in the branch record, so the branch's base files stay).

    def read_slot(self, version: int) -> VersionManifest | Tombstone | None:
        slot = super().read_slot(version)
        if slot is None and self.record is not None and version == self.record.base_version:
            if self.slot_record(version, slot_chunk_size(self.record.base.properties)) is None:
                return base_copy(self.record.base)
        return slot

    def latest(self) -> VersionManifest:
        try:
            return super().latest()
        except TableNotFound:  # no slot file yet: the base
            assert self.record is not None
            if self.io.exists(deleted_marker(self.record.branch_id)):
                raise BranchNotFound(f"branch {self.record.name!r} of {self.io.uri} was deleted") from None
            return self.load(self.record.base_version)

    def scan_slots(self) -> SlotListing:
        slots = super().scan_slots()
        b = None if self.record is None else self.record.base_version
        if b is None or b in slots.versions or b in slots.tombstones or any(lo <= b <= hi for lo, hi in slots.freed):
            return slots
        return replace(slots, versions=sorted([b, *slots.versions]))

    def check_not_deleted(self) -> None:
        """BranchNotFound if the branch was deleted (its log stays until expiry frees it)."""
        assert self.record is not None
        if self.io.exists(deleted_marker(self.record.branch_id)):
            raise BranchNotFound(f"branch {self.record.name!r} of {self.io.uri} was deleted")

    def confirm(self, vm: VersionManifest) -> None:
        assert self.record is not None
        if self.io.exists(deleted_marker(self.record.branch_id)):
            try:
                self.io.delete(self.version_path(vm.version))
            except StorageError:
                pass  # the branch's log is garbage now: orphan cleanup removes it
            raise BranchNotFound(
                f"branch {self.record.name!r} of {self.io.uri} was deleted while this commit was landing; "
                "nothing was committed"
            )

    def _write_hint_now(self, vm: VersionManifest) -> None:
        super()._write_hint_now(vm)
        # A hint queued by a commit before the branch was deleted and written after
        # delete_branch cleared the log is taken back: a deleted log keeps its marker only.
        assert self.record is not None
        try:
            if self.io.exists(deleted_marker(self.record.branch_id)):
                self.io.delete(self.layout.hint_path)
        except StorageError:
            pass  # gone already, or left to orphan cleanup

    def _no_versions(self) -> str:
        assert self.record is not None
        return f"branch {self.record.name!r} of {self.io.uri} has no versions (its log was removed)"


def base_copy(vm: VersionManifest) -> VersionManifest:
    """What a branch's base slot holds: the version it was made from, needing the feature."""
    return vm.next(writer_features=with_features(vm.writer_features, BRANCHES))


class BranchStore:
    """Every branch of the table at ``io`` (main excepted: it is the table's root log)."""

    def __init__(self, io: FileIO, table_uuid: str | None = None) -> None:
        self.io = io
        self.table_uuid = table_uuid

    # -- records -------------------------------------------------------------------------

    def get(self, name: str) -> BranchRecord:
        path = branch_path(name)
        data = self.io.get_optional(path)
        if data is None:
            raise BranchNotFound(f"no branch {name!r} on {self.io.uri}; `lamina branch list` shows the branches")
        return BranchRecord.from_json(data, path)

    def exists(self, name: str) -> bool:
        return self.io.exists(branch_path(name))

    def names(self) -> list[str]:
        return sorted(n[: -len(".json")] for n in self.io.list_names(BRANCHES_DIR) if n.endswith(".json"))

    def list(self) -> list[BranchRecord]:
        """Every branch, by name."""

        def load(n: str) -> BranchRecord | None:
            try:
                return self.get(n)
            except BranchNotFound:  # deleted while listing
                return None

        return [r for r in _pool.map(load, self.names()) if r is not None]

    # -- logs ----------------------------------------------------------------------------

    def log(self, record: BranchRecord, allow_list: bool = True) -> BranchLog:
        """The branch's version log; its base slot written if a crashed creator left it out."""
        log = BranchLog(
            self.io, table_uuid=record.base.table_uuid, allow_list=allow_list, layout=record.layout, record=record
        )
        return log

    # -- changes ---------------------------------------------------------------------------

    def create(
        self,
        name: str,
        base: VersionManifest,
        base_branch: str,
        *,
        retain_last: int | None = None,
        max_age_ms: int | None = None,
    ) -> BranchRecord:
        """Make branch ``name`` from version ``base`` of ``base_branch``: the record (put-if-absent),
        then the base slot and the hint. Refused (nothing left behind) for a bad name, an
        existing branch or a tag of the name."""
        validate_branch_name(name)
        check_retention(retain_last, max_age_ms)
        self._refuse_tag(name)
        record = BranchRecord(
            name, uuid.uuid4().hex, base_branch, base, int(time.time() * 1000), retain_last, max_age_ms
        )
        try:
            self.io.put_new(branch_path(name), record.to_json())
        except AlreadyExists:
            raise BranchAlreadyExists(
                f"branch {name!r} already exists on {self.io.uri}; delete it first, or choose another name"
            ) from None
        try:
            # A tag made under the name at the same moment: both check after writing, so at
            # least one of them sees the other and withdraws.
            self._refuse_tag(name)
        except BranchAlreadyExists:
            self.io.delete(branch_path(name))
            raise
        return record

    def refuse_existing(self, name: str) -> None:
        """BranchAlreadyExists if a branch or a tag has the name."""
        if self.exists(name):
            raise BranchAlreadyExists(
                f"branch {name!r} already exists on {self.io.uri}; delete it first, or choose another name"
            )
        self._refuse_tag(name)

    def _refuse_tag(self, name: str) -> None:
        if self.io.exists(tag_path(name)):
            raise BranchAlreadyExists(
                f"{name!r} is a tag of {self.io.uri}; a branch may not share a tag's name (reads by name would be ambiguous)"
            )

    def rename(self, name: str, new_name: str) -> BranchRecord:
        """The same branch (same log) under ``new_name``: the new record first, then the old one
        goes. Writers holding the branch by its old name keep committing to it."""
        record = self.get(name)
        validate_branch_name(new_name)
        if new_name == name:
            # (put_new would take the identical record for its own retry, and the delete
            # below would then remove the branch)
            raise BranchAlreadyExists(f"branch {name!r} already has that name on {self.io.uri}; nothing was renamed")
        self._refuse_tag(new_name)
        new = record.renamed(new_name)
        try:
            self.io.put_new(branch_path(new_name), new.to_json())
        except AlreadyExists:
            raise BranchAlreadyExists(f"branch {new_name!r} already exists on {self.io.uri}") from None
        self.io.delete(branch_path(name))
        return new

    def delete(self, name: str) -> BranchRecord:
        """Delete a branch: the marker in its log first (from then on no commit is acknowledged
        on it), holding its record and the time, then the record (the name is free). Its files
        stay until expiry (``free_deleted_branches``) or orphan cleanup frees them."""
        record = self.get(name)
        marker = {"deleted_at_ms": int(time.time() * 1000), "record": json.loads(record.to_json())}
        self.io.put(deleted_marker(record.branch_id), json.dumps(marker).encode())
        try:
            self.io.delete(branch_path(name))
        except NotFound:
            pass
        return record

    def deleted(self) -> builtins.list[tuple[BranchRecord, int]]:
        """(record, deleted at ms) of every deleted branch whose files have not been freed yet
        (``mark_freed``): one listing of ``branch_logs/`` and a GET per marker."""
        paths = [f"{BRANCH_LOGS_DIR}/{n}" for n in self.io.list_names(BRANCH_LOGS_DIR) if n.endswith(DELETED_SUFFIX)]

        def read(path: str) -> tuple[BranchRecord, int] | None:
            data = self.io.get_optional(path)
            try:
                j = json.loads(data) if data is not None else None
                if j is None or j.get("freed"):
                    return None
                return BranchRecord.from_json(json.dumps(j["record"]).encode(), path), int(j["deleted_at_ms"])
            except (ValueError, KeyError, TypeError, AttributeError, CorruptMetadata):
                return None  # a damaged marker still refuses commits; its files are left to orphan cleanup

        return [r for r in _pool.map(read, paths) if r is not None]

    def mark_freed(self, record: BranchRecord) -> None:
        """Note on a deleted branch's marker that its files were freed (later expiries skip it)."""
        self.io.put(deleted_marker(record.branch_id), json.dumps({"freed": True, "name": record.name}).encode())
