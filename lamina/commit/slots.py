"""What a listing of a log's ``versions/`` holds (``VersionLog.scan_slots``): its versions,
tombstones and stray slot files, and the slot records (``lamina.spec.slot``) that free ranges
of slots, as the listing names them."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lamina.spec.properties import TableProperties
from lamina.spec.slot import Tombstone, parse_freed_name, parse_range_record_name

__all__ = ["RecordRef", "Ranges", "SlotListing", "record_ref"]


@dataclass(frozen=True)
class RecordRef:
    """A slot record as a listing names it (lamina.spec.slot): its path and what the name says."""

    path: str
    first: int
    last: int
    at_ms: int  # when it was written (range records; 0 for a freed-chunk record)
    emptied: bool  # a freed-chunk record of an older table: its slots were emptied when written

    def freeable(self, now_ms: int, retention_ms: int) -> bool:
        """Whether the slot files in its range may be deleted now (see lamina.spec.slot)."""
        return self.emptied or self.at_ms + retention_ms <= now_ms


def record_ref(freed_dir: str, name: str) -> RecordRef | None:
    """The record a name under ``freed/`` stands for: ``<first>-<last>.json`` (a freed chunk)
    or ``<chunk first>-<chunk last>/<first>-<last>-<at>.json`` (a range record); None for
    anything else."""
    chunk, slash, leaf = name.partition("/")
    if not slash:
        r = parse_freed_name(name)
        return None if r is None else RecordRef(f"{freed_dir}/{name}", r[0], r[1], 0, True)
    c = parse_freed_name(chunk + ".json")
    rr = parse_range_record_name(leaf)
    if c is None or rr is None or "/" in leaf or not (c[0] <= rr[0] and rr[1] <= c[1]):
        return None
    return RecordRef(f"{freed_dir}/{name}", rr[0], rr[1], rr[2], False)


class Ranges:
    """Inclusive integer ranges (overlapping or not), for membership tests by binary search."""

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        merged: list[tuple[int, int]] = []  # overlapping or adjacent ranges joined, ascending
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self._merged = merged
        self._starts = [a for a, _ in merged]

    def __contains__(self, v: int) -> bool:
        i = bisect.bisect_right(self._starts, v) - 1
        return i >= 0 and v <= self._merged[i][1]


@dataclass(frozen=True)
class SlotListing:
    """The slots of ``versions/`` as one listing saw them (see ``VersionLog.scan_slots``)."""

    versions: list[int]  # ascending; loadable unless damaged; none is in a record's range
    tombstones: dict[int, Tombstone]  # expired or dropped versions whose slots stay taken
    # slot files in a record's range: expired versions whose files are not yet deleted, and
    # late puts into freed slots; none of them is a version
    strays: list[int]
    freed: list[tuple[int, int]]  # the ranges of the slot records, ascending (may overlap)
    records: list[RecordRef] = field(default_factory=list)

    def recorded(self, version: int) -> bool:
        return any(a <= version <= b for a, b in self.freed)

    def freeable_strays(self, now_ms: int, properties: Mapping[str, str]) -> list[int]:
        """The strays whose slot files may be deleted at ``now_ms``: in the range of a record
        of an emptied chunk, or of a range record at least the table's slot retention
        (``expire.slot-retention-ms`` of ``properties``) old."""
        retention_ms = TableProperties.EXPIRE_SLOT_RETENTION_MS.get(properties)
        ok = Ranges((r.first, r.last) for r in self.records if r.freeable(now_ms, retention_ms))
        return [v for v in self.strays if v in ok]
