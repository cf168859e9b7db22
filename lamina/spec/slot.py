"""Version slots: what may occupy ``_lamina/versions/<N>.json``, and the records of freed slots.

The commit point is a put-if-absent of version ``v``'s name (its *slot*). A slot
is filled once, by the commit that wins it; from then on it holds, in turn:

1. the version manifest;
2. a **tombstone** once the version is expired or dropped by a destructive
   rollback: a small JSON document that keeps the name taken (so a writer
   whose put was delayed can never land there) and records the commit id of
   the version that held it;
3. nothing, once its whole **chunk** of ``version.slot-chunk-size`` consecutive
   slots has been freed: the chunk's tombstones are replaced by one record,
   ``_lamina/freed/<first>-<last>.json``, written *before* any of them is
   deleted, listing the commit id each slot held.

A put that lands in a freed slot (it was delayed past all of this) succeeds at
the store, but the writer checks for the record of its slot's chunk after every
landing: if the record exists and does not name its commit, the version is not
part of the table and the writer withdraws it and rebases. See docs/format.md,
"The commit guarantee".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from lamina.errors import CorruptMetadata, InvalidArgument
from lamina.spec.layout import META_DIR
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
        j: dict[str, Any] = {"tombstone": True, "version": self.version, "commit_id": self.commit_id,
                             "reason": self.reason, "at_ms": self.at_ms}
        if self.dropped_by is not None:
            j["dropped_by_rollback"] = self.dropped_by
        data = json.dumps(j, separators=(",", ":")).encode()
        assert data.startswith(TOMBSTONE_PREFIX) and len(data) <= TOMBSTONE_MAX_BYTES
        return data

    @classmethod
    def parse(cls, data: bytes, where: str) -> "Tombstone | None":
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


@dataclass(frozen=True)
class FreedChunk:
    """The record of a freed chunk: the commit id each of its slots held (None: unknown)."""

    first: int
    last: int
    commit_ids: tuple[str | None, ...]
    freed_at_ms: int

    def commit_id_at(self, version: int) -> str | None:
        return self.commit_ids[version - self.first]

    def to_json(self) -> bytes:
        return json.dumps(
            {"first_version": self.first, "last_version": self.last, "commit_ids": list(self.commit_ids),
             "freed_at_ms": self.freed_at_ms},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def parse(cls, data: bytes, where: str) -> "FreedChunk":
        try:
            j = json.loads(data)
            first, last = int(j["first_version"]), int(j["last_version"])
            ids = tuple(None if c is None else str(c) for c in j["commit_ids"])
            if last < first or len(ids) != last - first + 1:
                raise ValueError(f"{len(ids)} commit ids for versions {first}..{last}")
            return cls(first, last, ids, int(j["freed_at_ms"]))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadata(
                f"freed-slot record {where} is damaged ({type(e).__name__}: {e}); "
                "restore it from a backup: without it a delayed commit could land in a freed slot unseen"
            ) from None
