"""What the commands say about a table's space (`lamina info`, `expire`, `remove-orphans`):
its live and total bytes, why expiry kept the versions it kept, and what keeps the bytes
the current version does not read, each with the command that frees them
(``lamina.maintenance.storage`` computes it)."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from typing import Any

from lamina.cli._output import duration_text, human_bytes, human_count
from lamina.maintenance.expire import DEFAULT_OLDER_THAN, ExpireReport
from lamina.maintenance.orphans import DEFAULT_ORPHAN_AGE
from lamina.maintenance.storage import BRANCH, STAGED, TAG, VERSIONS, Holder, StorageReport

# Holders listed by name, the largest first; the rest are counted on one line.
_SHOWN_HOLDERS = 10


def _ms(td: Any) -> int:
    return int(td.total_seconds() * 1000)


def size_fields(target: str, s: StorageReport, machine: bool) -> dict[str, Any]:
    """`lamina info`'s storage fields: raw for programs (``machine``), in human units with what
    each counts and what holds the rest for people (``holder_lines``)."""
    if machine:
        return {
            "live_bytes": s.live_bytes,
            "live_files": s.live_files,
            "total_bytes": s.total_bytes,
            "total_files": s.total_files,
            "held_bytes": s.held_bytes,
            "unreferenced_bytes": s.unreferenced_bytes,
            "metadata_bytes": s.metadata_bytes,
            "holders": [asdict(h) for h in s.holders],
        }
    return {
        "live_bytes": f"{human_bytes(s.live_bytes)} in {human_count(s.live_files)} files, what version {s.version} (main's latest) reads",
        "total_bytes": (
            f"{human_bytes(s.total_bytes)} in {human_count(s.total_files)} files under the location: "
            f"{human_bytes(s.live_bytes)} live, {human_bytes(s.held_bytes)} held by older versions, tags and "
            f"branches, {human_bytes(s.unreferenced_bytes)} unreferenced, {human_bytes(s.metadata_bytes)} metadata"
        ),
        "held_by": holder_lines(target, s),
    }


def kept_versions_line(rep: ExpireReport, older_than: str | None) -> str | None:
    """Why expiry kept the versions before the latest it kept, and what would expire them
    (``older_than``: the --older-than given, if any)."""
    reasons = []
    if rep.kept_by_age:
        age = older_than or duration_text(_ms(DEFAULT_OLDER_THAN))
        reasons.append(
            f"{human_count(rep.kept_by_age)} superseded less than {age} ago, the retention "
            f"(--older-than AGE expires those superseded longer ago than AGE)"
        )
    if rep.kept_by_reader_grace:
        reasons.append(
            f"{human_count(rep.kept_by_reader_grace)} superseded less than the reader grace of "
            f"{duration_text(rep.reader_grace_ms)} ago (--reader-grace 0s when no reader may still read them)"
        )
    if rep.kept_by_retain_last:
        reasons.append(f"{human_count(rep.kept_by_retain_last)} among the {rep.retain_last} newest (--retain-last)")
    kept = rep.kept_by_age + rep.kept_by_reader_grace + rep.kept_by_retain_last
    return f"kept {human_count(kept)} versions besides the latest: " + "; ".join(reasons) if reasons else None


def _holder_line(target: str, h: Holder) -> str:
    size = human_bytes(h.bytes) + (
        "" if h.only_bytes == h.bytes else f", {human_bytes(h.only_bytes)} of it held by nothing else"
    )
    if h.kind == VERSIONS:
        span = f"{h.versions[0]}..{h.versions[-1]}" if len(h.versions) > 1 else str(h.versions[0])
        return (
            f"{human_count(len(h.versions))} older versions ({span}) hold {size}: `lamina expire {target}` expires "
            f"those superseded more than {duration_text(_ms(DEFAULT_OLDER_THAN))} ago (--older-than, --retain-last)"
        )
    if h.kind == TAG:
        return (
            f"tag {h.name} holds version {h.versions[0]}: {size}; `lamina tag delete {target} {shlex.quote(h.name)}` "
            f"frees {'it' if h.only_bytes == h.bytes else 'what nothing else holds'}"
        )
    if h.kind == BRANCH:
        return (
            f"branch {h.name} holds {size}: `lamina branch delete {target} {shlex.quote(h.name)}`, then `lamina "
            f"expire {target}` once the deletion is older than the reader grace"
        )
    assert h.kind == STAGED
    return f"{human_count(len(h.versions))} commits staged by the catalog hold {size}: the next load through the catalog publishes them"


def holder_lines(target: str, s: StorageReport) -> list[str]:
    """What keeps the bytes the current version does not read, the largest first, each with
    the command that frees it (``target``: the table as the command was given it)."""
    q = shlex.quote(target)
    holders = sorted((h for h in s.holders if h.bytes), key=lambda h: -h.bytes)
    lines = [_holder_line(q, h) for h in holders[:_SHOWN_HOLDERS]]
    if len(holders) > _SHOWN_HOLDERS:
        rest = holders[_SHOWN_HOLDERS:]
        lines.append(
            f"{len(rest)} more tags or branches hold {human_bytes(sum(h.bytes for h in rest))} (`lamina tag list {q}`, "
            f"`lamina branch list {q}`)"
        )
    if s.unreferenced_bytes:
        lines.append(
            f"{human_count(s.unreferenced_files)} files no version references hold {human_bytes(s.unreferenced_bytes)}: "
            f"`lamina remove-orphans {q}` deletes those older than {duration_text(_ms(DEFAULT_ORPHAN_AGE))}"
        )
    return lines


def held_lines(target: str, s: StorageReport) -> list[str]:
    """The table's space in a few lines: its total, what the current version reads, and what
    holds the rest (``holder_lines``)."""
    lines = holder_lines(target, s)
    if not lines:
        return [
            f"nothing else holds space: the {human_bytes(s.total_bytes)} under the location are the current version's "
            f"{human_bytes(s.live_bytes)} of data and {human_bytes(s.metadata_bytes)} of metadata"
        ]
    return [
        f"{human_bytes(s.total_bytes)} under the location: {human_bytes(s.live_bytes)} is what version {s.version} reads, "
        f"{human_bytes(s.metadata_bytes)} metadata; the rest is held by:",
        *(f"  {line}" for line in lines),
    ]
