"""Version slots: what may occupy ``_lamina/versions/<N>.json``, and the records of expired slots.

The commit point is a put-if-absent of version ``v``'s name (its *slot*). A slot
is filled once, by the commit that wins it (its *first occupant*). On a table
with the writer feature ``slot-range-records`` (every table this Lamina writes):

1. the slot holds the version manifest;
2. expiry writes a **range record** ``freed/<chunk>/<first>-<last>-<at>.json`` for
   the run of slots it expires within one chunk of ``version.slot-chunk-size``
   slots, naming the first occupant of each (a short commit id: the first 16 hex
   digits), *before* anything else: from then on those versions are expired
   (readers and writers look the record up; the slot files are left as they are,
   so a delayed put into them still fails);
3. once the record is older than ``expire.slot-retention-ms``, the slot files are
   deleted (the slots are *freed*).

One put-if-absent per chunk instead of one tombstone per slot, and the first
occupants come from the commits themselves: every version manifest carries the
short ids of the versions before it in its block of ``COMMIT_BLOCK`` versions
(``block_commits``), so expiry reads one version per block, not every version.

A put that lands in a freed slot (it was delayed past all of this) succeeds at
the store, but the writer looks up the records of its slot's chunk after every
landing: a record covering the slot that does not name its commit means the
version is not part of the table, and the writer withdraws it and rebases. See
docs/format.md, "The commit guarantee".

Older tables (feature ``slot-tombstones`` only) expired slots by overwriting each
with a **tombstone** (still written by a destructive rollback, and honoured
everywhere) and freed whole chunks under ``freed/<first>-<last>.json``; those
records are read exactly as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lamina.errors import CorruptMetadata, InvalidArgument
from lamina.spec.layout import ARROW_MANIFEST_SUFFIX, MANIFESTS_DIR, META_DIR
from lamina.spec.properties import TableProperties

FREED_DIR = f"{META_DIR}/freed"

TOMBSTONE_PREFIX = b'{"tombstone":'
# Every tombstone Lamina writes is smaller than this; a slot file at most this large is
# read to tell a tombstone from a (damaged) version manifest: by content, never by size.
TOMBSTONE_MAX_BYTES = 512


def slot_chunk_size(properties: Mapping[str, str]) -> int:
    """The table's chunk size (fixed at creation: writers and expiry must agree on which record covers a slot)."""
    try:
        return TableProperties.VERSION_SLOT_CHUNK_SIZE.get(properties)
    except InvalidArgument as e:  # refused at creation: the table's metadata was altered
        raise CorruptMetadata(str(e)) from None


def chunk_range(version: int, size: int) -> tuple[int, int]:
    first = version - version % size
    return first, first + size - 1


def freed_path(first: int, last: int) -> str:
    return f"{FREED_DIR}/{first:020d}-{last:020d}.json"


def parse_freed_name(name: str) -> tuple[int, int] | None:
    stem, _, ext = name.partition(".")
    a, dash, b = stem.partition("-")
    if ext != "json" or not dash or len(a) != 20 or len(b) != 20 or not (a.isdigit() and b.isdigit()):
        return None
    return int(a), int(b)


@dataclass(frozen=True)
class Tombstone:
    """What stays in a slot whose version is gone."""

    version: int
    commit_id: str | None  # None: unknown (rollback tombstones written before slot records existed)
    reason: str  # "expired" | "rollback"
    at_ms: int | None  # when the version was expired or dropped
    dropped_by: int | None = None  # the destructive rollback's version

    def to_json(self) -> bytes:
        j: dict[str, Any] = {
            "tombstone": True,
            "version": self.version,
            "commit_id": self.commit_id,
            "reason": self.reason,
            "at_ms": self.at_ms,
        }
        if self.dropped_by is not None:
            j["dropped_by_rollback"] = self.dropped_by
        data = json.dumps(j, separators=(",", ":")).encode()
        assert data.startswith(TOMBSTONE_PREFIX) and len(data) <= TOMBSTONE_MAX_BYTES
        return data

    @classmethod
    def parse(cls, data: bytes, where: str) -> Tombstone | None:
        """The tombstone, None if ``data`` is not one (a version manifest), or CorruptMetadata
        if it claims to be a tombstone and is damaged."""
        if not data.startswith(TOMBSTONE_PREFIX):
            return None
        try:
            j = json.loads(data)
            if not isinstance(j, dict) or j.get("tombstone") is not True:
                raise ValueError("not a tombstone object")
            commit_id = j.get("commit_id")
            dropped = j.get("dropped_by_rollback")
            return cls(
                version=int(j["version"]),
                commit_id=None if commit_id is None else str(commit_id),
                reason=str(j.get("reason", "rollback" if dropped is not None else "expired")),
                at_ms=None if j.get("at_ms") is None else int(j["at_ms"]),
                dropped_by=None if dropped is None else int(dropped),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadata(
                f"{where} is a damaged tombstone ({type(e).__name__}: {e}); restore it from a backup "
                "(a tombstone only records that its version is gone)"
            ) from None


# The short id that names a commit in range records and block lists: the first 16 hex digits
# of its 32-digit commit id (a random 128-bit uuid; 60 random bits in the prefix, so two
# commits share one with odds of 2^-60, and a root manifest named by it that collided would
# make its commit fail, never mix two tables' state).
SHORT_ID_LEN = 16
# Versions carry the short ids of the versions before them in their block of this many
# (block_commits); fixed by the format: writers and expiry must agree on where blocks start.
COMMIT_BLOCK = 64

# Flags of a version in a later version's block list (one hex digit after its short id).
REMOVED = 1  # it removed data files or rows (its removals are garbage candidates)
WROTE_LEAVES = 2  # it wrote leaf manifests
IRREGULAR = 4  # re-added files, a tree taken from a branch, a parent gap, a root not named by it
_ENTRY_LEN = SHORT_ID_LEN + 1
_HEX = frozenset("0123456789abcdef")


def short_id(commit_id: str) -> str:
    return commit_id[:SHORT_ID_LEN]


def block_entry(commit_id: str, flags: int) -> str:
    return f"{short_id(commit_id)}{flags:x}"


def parse_block_entry(entry: Any, where: str) -> tuple[str, int]:
    """(short id, flags) of one entry of a version's ``block_commits``."""
    if not isinstance(entry, str) or len(entry) != _ENTRY_LEN or not set(entry) <= _HEX:
        raise CorruptMetadata(
            f"{where}: block_commits entry {entry!r} is not {SHORT_ID_LEN} hex digits and a flag digit"
        )
    return entry[:SHORT_ID_LEN], int(entry[SHORT_ID_LEN], 16)


def commit_root_path(commit_id: str, version: int, arrow: bool) -> str:
    """The root manifest a commit writes for ``version``, named by its short id and the version
    (not a random name), so that expiry knows an expired version's root from a block list
    without reading the version. A commit retried under the same id targets another version."""
    return f"{MANIFESTS_DIR}/{short_id(commit_id)}-{version}.root{ARROW_MANIFEST_SUFFIX if arrow else '.parquet'}"


def is_commit_root_path(path: str) -> bool:
    """Whether ``path`` is named as ``commit_root_path`` names roots (for some commit and version)."""
    head, _, name = path.rpartition("/")
    stem, dot, _ = name.partition(".")
    sid, dash, v = stem.partition("-")
    return head == MANIFESTS_DIR and bool(dash) and len(sid) == SHORT_ID_LEN and set(sid) <= _HEX and v.isdigit()


def block_flags(vm: Any) -> int:
    """What expiry must know of version ``vm`` (a VersionManifest) beyond its short id."""
    if vm.parent_version is None:  # version 0: an empty table, or irregular if not
        return 0 if vm.root_manifest is None else IRREGULAR
    summary = vm.summary

    def count(key: str) -> int:
        v = summary.get(key)
        return 1 if v is None else int(v)  # unknown: as if it did

    flags = 0
    if count("removed-files") or count("removed-records"):
        flags |= REMOVED
    if count("leaves-written"):
        flags |= WROTE_LEAVES
    if (
        vm.last_readd_version == vm.version
        or vm.parent_version != vm.version - 1
        or (vm.root_manifest is not None and not is_commit_root_path(vm.root_manifest))
    ):
        flags |= IRREGULAR
    return flags


def next_block_commits(base: Any) -> tuple[str, ...] | None:
    """The ``block_commits`` of the version committed on ``base`` (a VersionManifest)."""
    if (base.version + 1) % COMMIT_BLOCK == 0:
        return ()
    before = base.block_commits
    if before is None:
        if base.version % COMMIT_BLOCK:
            return None  # the base does not know its block: neither does its successor
        before = ()
    return (*before, block_entry(base.commit_id, block_flags(base)))


def block_start(version: int) -> int:
    return version - version % COMMIT_BLOCK


def records_dir(freed_dir: str, first: int, last: int) -> str:
    """The directory of the range records of the chunk ``first``..``last``."""
    return f"{freed_dir}/{first:020d}-{last:020d}"


def range_record_name(first: int, last: int, at_ms: int) -> str:
    # The time is in the name so that expiry tells which records are old enough to free
    # their slots from a listing, without reading each record.
    return f"{first:020d}-{last:020d}-{at_ms:d}.json"


def parse_range_record_name(name: str) -> tuple[int, int, int] | None:
    """(first, last, at_ms) of a range record's file name, or None."""
    stem, _, ext = name.partition(".")
    parts = stem.split("-")
    if (
        ext != "json"
        or len(parts) != 3
        or len(parts[0]) != 20
        or len(parts[1]) != 20
        or not all(p.isdigit() for p in parts)
    ):
        return None
    first, last, at = (int(p) for p in parts)
    return (first, last, at) if first <= last else None


@dataclass(frozen=True)
class SlotRecord:
    """A record of expired slots ``first``..``last`` and the commit each held (None: unknown,
    or a hole). ``emptied``: an older table's freed-chunk record, written when its slots
    (tombstones) were emptied; otherwise a range record, written when its slots' versions
    expired, the slot files being deleted once it is ``expire.slot-retention-ms`` old."""

    first: int
    last: int
    commit_ids: tuple[str | None, ...]  # full commit ids or short ids
    at_ms: int
    emptied: bool = False

    def commit_id_at(self, version: int) -> str | None:
        return self.commit_ids[version - self.first]

    def names(self, version: int, commit_id: str) -> bool:
        """Whether this record names ``commit_id`` (full) as the first occupant of ``version``."""
        held = self.commit_id_at(version)
        return held is not None and commit_id.startswith(held)

    def covers(self, version: int) -> bool:
        return self.first <= version <= self.last

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "first_version": self.first,
                "last_version": self.last,
                "commit_ids": list(self.commit_ids),
                "freed_at_ms" if self.emptied else "expired_at_ms": self.at_ms,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def parse(cls, data: bytes, where: str) -> SlotRecord:
        try:
            j = json.loads(data)
            first, last = int(j["first_version"]), int(j["last_version"])
            ids = tuple(None if c is None else str(c) for c in j["commit_ids"])
            if last < first or len(ids) != last - first + 1:
                raise ValueError(f"{len(ids)} commit ids for versions {first}..{last}")
            # A record's ids are compared as prefixes: an empty or short one would match anything.
            if any(c is not None and (len(c) < SHORT_ID_LEN or not set(c) <= _HEX) for c in ids):
                raise ValueError("a commit id is not hex digits of at least the short id's length")
            emptied = "freed_at_ms" in j
            return cls(first, last, ids, int(j["freed_at_ms"] if emptied else j["expired_at_ms"]), emptied)
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadata(
                f"slot record {where} is damaged ({type(e).__name__}: {e}); "
                "restore it from a backup: without it a delayed commit could land in a freed slot unseen"
            ) from None
