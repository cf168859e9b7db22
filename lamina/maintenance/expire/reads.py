"""What an expiry run reads of the versions it may expire, read as little as it can.

A version it may delete is read light (its JSON, parsed lazily: ``_LightVersion``); who
occupied each slot comes from one version per block (``block_commits``); on an object store
the reads go on a pool, each a round trip. ``_Run`` holds what one run has read, for the
steps that decide what is freed (``files``, ``slots``).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from lamina.commit.log import VersionLog
from lamina.errors import CorruptMetadata, NotFound
from lamina.io import FileIO
from lamina.maintenance.reachability import root_of
from lamina.spec.slot import COMMIT_BLOCK, block_flags, block_start, parse_block_entry, short_id
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-expire")


class _LightVersion:
    """What expiry reads of a version it may delete: its JSON, parsed lazily. Building a
    full VersionManifest (schema, partition spec) for each of many versions costs more
    than deciding about them; only the few whose roots are opened need one."""

    def __init__(self, version: int, j: dict[str, Any], raw: bytes, where: str) -> None:
        self._where = where
        self.version = version
        self.timestamp_ms = int(j["timestamp_ms"])
        self.parent_version = j.get("parent_version")
        self.commit_id = j.get("commit_id")
        self.root_manifest = j.get("root_manifest")
        self.summary = j.get("summary") or {}
        blocks = j.get("block_commits")
        self.block_commits = tuple(blocks) if isinstance(blocks, list) else None
        self._raw = raw  # the version file may be a tombstone before the full manifest is needed
        self._full: Any = None

    def __getattr__(self, name: str) -> Any:  # schema, partition_spec, ...: the full manifest
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._full_manifest(), name)

    def _full_manifest(self) -> VersionManifest:
        if self._full is None:
            self._full = VersionManifest.from_json(self._raw, self._where)
        return self._full


def _load_light(log: VersionLog, v: int) -> Any:
    try:
        raw = log.io.get(log.version_path(v))
        j = json.loads(raw)
        if not isinstance(j, dict) or j.get("tombstone") or int(j["version"]) != v:
            return log.load(v)  # the full path says what is wrong
        return _LightVersion(v, j, raw, log.version_path(v))
    except (ValueError, KeyError, TypeError):
        return log.load(v)
    except NotFound:
        return log.load(v)


def _each(io: FileIO, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``fn`` over ``items``: in order on local disk (a local call costs less than a thread
    hand-off), on the pool elsewhere (each call is a round trip)."""
    if io.is_local or len(items) <= 1:
        return [fn(x) for x in items]
    return list(_pool.map(fn, items))


def _load_many(log: VersionLog, versions: Sequence[int]) -> list[Any]:
    return _each(log.io, lambda v: _load_light(log, v), versions)


def _roots(io: FileIO, vms: Sequence[Any]) -> list[pa.Table]:
    return _each(io, lambda vm: root_of(io, vm), vms)


class _Run:
    """What one expiry reads of the versions it may expire, read as little as it can: the
    versions its decisions need, one per block for who occupied the slots (``block_commits``),
    and the roots of the versions that removed files or wrote leaves."""

    def __init__(self, io: FileIO, log: VersionLog, versions: Sequence[int]) -> None:
        self.io = io
        self.log = log
        self.versions = versions
        self._light: dict[int, Any] = {}
        self._full: dict[int, VersionManifest] = {}
        # (short id, flags) of a version, from a later version's block list or its own manifest
        self.who: dict[int, tuple[str, int]] = {}
        self.sizes: dict[str, int] = {}  # sizes of manifests found by name (see files.garbage)

    def light(self, i: int) -> Any:
        """The ``i``-th version (light: its JSON, parsed lazily)."""
        v = self.versions[i]
        hit = self._light.get(v)
        if hit is None:
            hit = self._light[v] = _load_light(self.log, v)
        return hit

    def load(self, vs: Sequence[int]) -> None:
        todo = [v for v in vs if v not in self._light]
        for vm in _load_many(self.log, todo):
            self._light[vm.version] = vm

    def expirable(self, n: int, limit: int) -> int:
        """How many of the first ``n`` versions expire: the ``i``-th does iff its successor was
        committed by ``limit``. Commit times rise along versions, so the answer is the largest
        ``k`` whose ``k``-th version was committed by the limit (a binary search; the common
        answer, all ``n``, costs one read)."""
        if n == 0:
            return 0
        if self.light(n).timestamp_ms <= limit:
            return n
        lo, hi = 0, n - 1  # the answer is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.light(mid).timestamp_ms <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def learn_blocks(self, expired: Sequence[int], survivor: int) -> None:
        """(short id, flags) of every version in ``expired``: from one version per block (the
        newest version of the block at or below ``survivor``, whose ``block_commits`` names every
        slot before it in the block), or from each version where a block list is missing."""
        if all(v in self.who for v in expired):
            return
        by_block: dict[int, list[int]] = {}
        for v in expired:
            by_block.setdefault(block_start(v), []).append(v)
        live = sorted(set(expired) | {survivor})
        carriers = []
        for start in by_block:
            end = min(start + COMMIT_BLOCK - 1, survivor)
            carriers.append(live[bisect.bisect_right(live, end) - 1])
        self.load(carriers)
        missing: list[int] = []
        for (start, vs), c in zip(by_block.items(), carriers):
            vm = self._light[c]
            entries = _entries(vm, start)
            if entries is None:
                missing += vs
                continue
            for v in vs:
                self.who[v] = entries[v - start] if v < c else (short_id(vm.commit_id), block_flags(self.full(v)))
        self.load(missing)
        for v in missing:
            self.who[v] = (short_id(self._light[v].commit_id), block_flags(self.full(v)))

    def full(self, v: int) -> VersionManifest:
        """Version ``v`` as a VersionManifest (read if not yet)."""
        hit = self._full.get(v)
        if hit is None:
            if v not in self._light:
                self.load([v])
            light = self._light[v]
            hit = self._full[v] = light._full_manifest() if isinstance(light, _LightVersion) else light
        return hit


def _entries(vm: Any, start: int) -> list[tuple[str, int]] | None:
    """The (short id, flags) of slots ``start``.. before ``vm`` in its block, from its
    ``block_commits``; None if it has none that fits (an older writer's, or damaged)."""
    raw = vm.block_commits
    if raw is None or len(raw) != vm.version - start:
        return None
    try:
        return [parse_block_entry(e, f"version {vm.version}") for e in raw]
    except CorruptMetadata:
        return None  # read the versions themselves instead
