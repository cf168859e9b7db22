"""The version log: finding, loading and time-travelling over version manifests.

Finding the latest version (seeds 000 and 004):

1. Read the hint, load the version it names and check the table uuid.
2. Confirm nothing newer exists. On stores that list in order (S3), one LIST
   page from the start of ``versions/`` (newest sorts first). On local disk and
   memory, where LIST is unordered and O(n), probe the names of the next
   versions (exists(v+1); if present gallop v+2, v+4, ... then binary search),
   which costs one metadata call when the hint is fresh.
3. Without a usable hint (missing, corrupt, naming another table, pointing at
   a missing version) fall back to one full listing.

``allow_list=False`` is for readers that may not list: they trust the hint and
only probe forward.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

from lamina.errors import CorruptMetadata, NotFound, StorageError, TableNotFound, VersionNotFound
from lamina.io import FileIO
from lamina.spec.hint import VersionHint
from lamina.spec.layout import FORMAT_VERSION, HINT_PATH, VERSIONS_DIR, parse_version_file_name, version_path
from lamina.spec.version import VersionManifest

log = logging.getLogger(__name__)

# Hints are written off the commit's critical path by one thread, in commit order
# (so a hint never moves backwards because of this process), and the pool is
# drained at interpreter exit. flush_hints() waits for them.
_hint_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lamina-hint")
_hint_pending: set[Future] = set()
_hint_lock = threading.Lock()


def flush_hints() -> None:
    """Wait until every hint this process queued is written."""
    with _hint_lock:
        pending = list(_hint_pending)
    for f in pending:
        f.result()


@dataclass
class VersionLog:
    io: FileIO
    table_uuid: str | None = None  # when known (catalog or earlier open): hints/versions of other tables are refused
    table_identifier: str | None = None
    allow_list: bool = True

    # -- loading -----------------------------------------------------------------

    def load(self, version: int) -> VersionManifest:
        """One version by number: a single GET."""
        if version < 0:
            raise VersionNotFound(f"version {version} does not exist: versions start at 0")
        try:
            data = self.io.get(version_path(version))
        except NotFound:
            raise VersionNotFound(
                f"version {version} of {self.io.uri} does not exist (never committed, or expired); "
                "see `lamina history` for the versions there are"
            ) from None
        if data.startswith(TOMBSTONE_PREFIX):
            raise VersionNotFound(
                f"version {version} of {self.io.uri} was dropped by a destructive rollback; "
                "see `lamina history` for the versions there are"
            )
        vm = _parse_cached(data, version_path(version))
        if vm.version != version:
            raise CorruptMetadata(f"{version_path(version)} claims to be version {vm.version}")
        if self.table_uuid is not None and vm.table_uuid != self.table_uuid:
            raise CorruptMetadata(
                f"version {version} at {self.io.uri} belongs to table {vm.table_uuid}, "
                f"not {self.table_uuid}: the location was reused by another table"
            )
        return vm

    def exists(self, version: int) -> bool:
        return self.io.exists(version_path(version))

    def try_load(self, version: int) -> VersionManifest | None:
        try:
            return self.load(version)
        except VersionNotFound:
            return None

    # -- latest --------------------------------------------------------------------

    def read_hint(self) -> VersionHint | None:
        try:
            return VersionHint.parse(self.io.get(HINT_PATH))
        except NotFound:
            return None
        except StorageError as e:
            log.warning("could not read version hint: %s", e)
            return None

    def latest(self) -> VersionManifest:
        hint = self.read_hint()
        if hint is not None and (self.table_uuid is None or hint.table_uuid == self.table_uuid):
            try:
                vm = self.load(hint.version)
            except (VersionNotFound, CorruptMetadata):
                vm = None
            if vm is not None and vm.table_uuid == hint.table_uuid:
                if self.table_uuid is None:
                    self.table_uuid = vm.table_uuid
                if self.io.lists_in_order and self.allow_list:
                    newest = self._newest_by_listing()
                    return vm if newest is None or newest <= vm.version else self.load(newest)
                newest = self._probe_forward(vm.version)
                if newest == vm.version:
                    return vm
                found = self.try_load(newest)
                if found is not None:
                    return found
                # The probe stopped on a tombstone: a destructive rollback's hole follows
                # it, so only a listing can tell what lies beyond (see drop_versions_after).
        if not self.allow_list:
            if self.exists(0):
                return self.load(self._probe_forward(0))
            raise TableNotFound(f"{self.io.uri} has no usable version hint and listing is disabled")
        newest = self._newest_by_listing()
        if newest is None:
            raise TableNotFound(
                f"no Lamina table at {self.io.uri} (no {VERSIONS_DIR}/); create one with lamina.create_table"
            )
        vm = self.load(newest)
        if self.table_uuid is None:
            self.table_uuid = vm.table_uuid
        return vm

    def newest_from(self, known: int) -> VersionManifest:
        """The latest version, given that version ``known`` exists (no hint read)."""
        try:
            if self.io.lists_in_order and self.allow_list:
                newest = self._newest_by_listing()
                return self.load(newest if newest is not None and newest > known else known)
            return self.load(self._probe_forward(known))
        except VersionNotFound:
            # ``known`` (or what we found after it) was expired meanwhile: expiry keeps the
            # newest version, so the general lookup finds it
            return self.latest()

    def _probe_forward(self, known: int) -> int:
        """The newest existing version >= ``known`` (which exists), by galloping then bisecting."""
        if not self.exists(known + 1):
            return known
        lo, step = known + 1, 2  # lo exists
        while self.exists(known + step):
            lo = known + step
            step *= 2
        hi = known + step  # hi does not exist
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.exists(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _newest_by_listing(self) -> int | None:
        if self.io.lists_in_order:
            names = self.io.list_first_page(VERSIONS_DIR)
        else:
            names = self.io.list_names(VERSIONS_DIR)
        for name in names:  # newest first
            v = parse_version_file_name(name)
            if v is not None:
                return v
        return None

    def list_versions(self) -> list[int]:
        """Every version present, oldest first (a full listing); tombstones are not versions."""
        return self.list_versions_and_tombstones()[0]

    def list_versions_and_tombstones(self) -> tuple[list[int], list[int]]:
        """(versions, tombstoned versions), ascending, from one listing with sizes."""
        real, dead = [], []
        for o in self.io.list(VERSIONS_DIR):
            v = parse_version_file_name(o.path.rsplit("/", 1)[-1])
            if v is not None:
                (dead if o.size <= TOMBSTONE_MAX_BYTES else real).append(v)
        return sorted(real), sorted(dead)

    def write_hint(self, vm: VersionManifest, wait: bool = True, after: Callable[[], None] | None = None) -> None:
        """Best effort: a stale or failed hint costs readers a probe or a listing, never correctness.

        ``wait=False`` queues the write (in commit order) and returns at once.
        """
        if wait:
            self._write_hint_now(vm)
            if after is not None:
                after()
            return

        def job() -> None:
            self._write_hint_now(vm)
            if after is not None:
                after()

        with _hint_lock:
            fut = _hint_pool.submit(job)
            _hint_pending.add(fut)
        fut.add_done_callback(lambda f: _discard(f))

    def _write_hint_now(self, vm: VersionManifest) -> None:
        hint = VersionHint(
            version=vm.version,
            manifest_path=version_path(vm.version),
            table_uuid=vm.table_uuid,
            table_identifier=self.table_identifier,
            timestamp_ms=vm.timestamp_ms,
            reader_features=vm.reader_features,
            writer_features=vm.writer_features,
            format_version=FORMAT_VERSION,
        )
        try:
            self.io.put(HINT_PATH, hint.to_json())
        except StorageError as e:
            log.warning("commit of version %d succeeded but the hint was not updated: %s", vm.version, e)

    # -- time travel ------------------------------------------------------------------

    def at_timestamp(self, timestamp_ms: int, latest: VersionManifest | None = None) -> VersionManifest:
        """The newest version committed at or before ``timestamp_ms``: O(log n) GETs.

        Timestamps are monotonic along versions, so a binary search over version
        numbers needs no listing while every version in range exists. Expiry
        (oldest first) and destructive rollback (a run in the middle) leave
        holes; the first missing version met switches to a search over the
        versions one listing shows.
        """
        latest = latest or self.latest()
        if latest.timestamp_ms <= timestamp_ms:
            return latest
        best = self._newest_at_or_before(timestamp_ms, range(latest.version), stop_on_missing=True)
        if best is _HOLE:
            listed = [v for v in self.list_versions() if v < latest.version]
            best = self._newest_at_or_before(timestamp_ms, listed, stop_on_missing=False)
            while best is _HOLE:  # a tombstone in the listing: drop it and search again
                best = self._newest_at_or_before(timestamp_ms, listed, stop_on_missing=False)
        if best is None:
            raise VersionNotFound(
                f"no version of {self.io.uri} at or before timestamp {timestamp_ms} "
                "(before the table was created, or those versions were expired)"
            )
        return best  # type: ignore[return-value]

    def _newest_at_or_before(self, timestamp_ms: int, versions: Sequence[int], stop_on_missing: bool) -> Any:
        """Binary search of ``versions`` (ascending): the newest manifest with
        timestamp <= ``timestamp_ms``, None, or _HOLE if one is missing and
        ``stop_on_missing`` (otherwise a missing one, expired meanwhile, counts as too old)."""
        lo, hi = 0, len(versions)  # the answer's index is < hi
        best: VersionManifest | None = None
        while lo < hi:
            mid = (lo + hi) // 2
            vm = self.try_load(versions[mid])
            if vm is None:
                if stop_on_missing:
                    return _HOLE
                if isinstance(versions, list):  # gone or a tombstone: not an answer either way
                    del versions[mid]
                    return _HOLE
                lo = mid + 1
            elif vm.timestamp_ms <= timestamp_ms:
                best = vm
                lo = mid + 1
            else:
                hi = mid
        return best


_HOLE = object()
# A destructive rollback overwrites the first version of the run it drops with this, so a
# probe forward from an older hint still steps onto it instead of stopping before the hole.
TOMBSTONE_PREFIX = b'{"tombstone":'
# A version manifest is always larger (it carries the schema); a tombstone is ~70 bytes.
TOMBSTONE_MAX_BYTES = 160


def tombstone(version: int, dropped_by: int) -> bytes:
    return TOMBSTONE_PREFIX + f'true,"version":{version},"dropped_by_rollback":{dropped_by}}}'.encode()


def _discard(f: Future) -> None:
    with _hint_lock:
        _hint_pending.discard(f)


@lru_cache(maxsize=4096)
def _parse_cached(data: bytes, where: str) -> VersionManifest:
    return VersionManifest.from_json(data, where)
