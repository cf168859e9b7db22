"""The version log: finding, loading and time-travelling over version manifests.

Finding the latest version (docs/format.md, "The version hint"):

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
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lamina.commit.slots import Ranges, RecordRef, SlotListing, record_ref
from lamina.errors import CorruptMetadata, NotFound, StorageError, TableNotFound, VersionNotFound
from lamina.io import FileIO
from lamina.spec.hint import VersionHint
from lamina.spec.layout import FORMAT_VERSION, MAIN_BRANCH, MAIN_LOG, LogLayout, parse_version_file_name
from lamina.spec.properties import TableProperties
from lamina.spec.slot import (
    TOMBSTONE_MAX_BYTES,
    SlotRecord,
    Tombstone,
    chunk_range,
    records_dir,
    slot_chunk_size,
)
from lamina.spec.version import VersionManifest

log = logging.getLogger(__name__)

# Hints are written off the commit's critical path by one thread, in commit order
# (so a hint never moves backwards because of this process), and the pool is
# drained at interpreter exit. flush_hints() waits for them.
# Where listings come in order, a commit rewrites the hint every this many versions (hint_due).
HINT_EVERY = 10
_hint_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lamina-hint")
_read_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-slots")
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
    # Which log: main's (the table's root log) or a branch's (lamina.commit.branches.BranchLog).
    layout: LogLayout = MAIN_LOG
    # Slot records read so far, by path: records are never deleted nor changed, so one seen stays true.
    _records: dict[str, SlotRecord] = field(default_factory=dict, repr=False, compare=False)
    # (version, monotonic time): that version was the newest slot at that time (``saw_latest``)
    _latest_seen: tuple[int, float] | None = field(default=None, repr=False, compare=False)

    @property
    def branch(self) -> str:
        """The branch whose versions this log holds."""
        return MAIN_BRANCH

    def version_path(self, version: int) -> str:
        return self.layout.version_path(version)

    def _of(self) -> str:
        """Whose versions, for messages: version numbers are per branch."""
        return self.io.uri if self.branch == MAIN_BRANCH else f"branch {self.branch!r} of {self.io.uri}"

    def _history_hint(self) -> str:
        return "see `lamina history` for the versions there are" + (
            "" if self.branch == MAIN_BRANCH else f" (with --branch {self.branch})"
        )

    def confirm(self, vm: VersionManifest) -> None:
        """Called by the committer once ``vm`` is in its slot and the slot was never freed,
        before the commit is acknowledged: raise (after withdrawing the put) if the log may
        no longer take commits. Main's always may; a branch's not once deleted."""

    # -- loading -----------------------------------------------------------------

    def read_slot(self, version: int) -> VersionManifest | Tombstone | None:
        """What slot ``version`` holds now: its manifest, a tombstone, or None (empty), told
        apart by content. No freed-slot check: the committer reads its own put back with it."""
        if version < 0:
            return None
        path = self.layout.version_path(version)
        try:
            data = self.io.get(path)
        except NotFound:
            return None
        stone = Tombstone.parse(data, path)
        if stone is not None:
            if stone.version != version:
                raise CorruptMetadata(f"{path} is a tombstone of version {stone.version}, not {version}")
            return stone
        vm = _parse_cached(data, path)
        if vm.version != version:
            raise CorruptMetadata(f"{path} claims to be version {vm.version}")
        if self.table_uuid is not None and vm.table_uuid != self.table_uuid:
            raise CorruptMetadata(
                f"version {version} at {self.io.uri} belongs to table {vm.table_uuid}, "
                f"not {self.table_uuid}: the location was reused by another table"
            )
        return vm

    def load(self, version: int, *, check_freed: bool = True) -> VersionManifest:
        """One version by number: a GET of its slot and, unless ``check_freed`` is False, a
        look-up of its chunk's slot records (one LIST on S3), which name no live version.
        ``check_freed=False`` only for a slot known to be the newest: it is never expired."""
        if version < 0:
            raise VersionNotFound(f"version {version} does not exist: versions start at 0")
        slot = self.read_slot(version)
        if slot is None:
            raise VersionNotFound(
                f"version {version} of {self._of()} does not exist (never committed, or expired); {self._history_hint()}"
            )
        if isinstance(slot, Tombstone):
            why = "dropped by a destructive rollback" if slot.reason == "rollback" else "expired"
            raise VersionNotFound(f"version {version} of {self._of()} was {why}; {self._history_hint()}")
        if check_freed and self.slot_record(version, slot_chunk_size(slot.properties)) is not None:
            # The version was expired (a range record: its slot file stays until the record is
            # old), or its slot freed and what is there is a put delayed past all that, which
            # its writer withdraws (see lamina.spec.slot).
            raise VersionNotFound(f"version {version} of {self._of()} was expired; {self._history_hint()}")
        return slot

    def exists(self, version: int) -> bool:
        """Whether slot ``version`` is taken (by a version or a tombstone): what probing needs."""
        return self.io.exists(self.layout.version_path(version))

    def is_live(self, version: int, *, check_freed: bool = True) -> bool:
        """Whether ``version`` can still be loaded (not expired, not dropped)."""
        try:
            self.load(version, check_freed=check_freed)
            return True
        except VersionNotFound:
            return False

    def is_newest(self, version: int) -> bool:
        """Whether no slot above ``version`` is taken now (one HEAD): nothing committed after it."""
        return not self.exists(version + 1)

    def is_known_newest(self, vm: VersionManifest) -> bool:
        """Whether ``vm`` is the newest version now: the slot above it is empty (one HEAD), and
        cannot be empty because its chunk was freed (``slot_cannot_have_been_freed``: a version
        held in memory for days may have been expired and its chunk freed since). False when
        unsure; then the caller reads the latest, or checks ``vm`` is still live."""
        return self.slot_cannot_have_been_freed(vm.version + 1, vm.properties) and self.is_newest(vm.version)

    def try_load(self, version: int, *, check_freed: bool = True) -> VersionManifest | None:
        try:
            return self.load(version, check_freed=check_freed)
        except VersionNotFound:
            return None

    def try_load_many(self, versions: Sequence[int]) -> dict[int, VersionManifest]:
        """The live ones of ``versions`` by number: what ``try_load`` gives for each, with each
        chunk's slot records listed once, not once per version. History and change ranges
        load many versions of a chunk: one by one, that is a LIST per version on S3, at about
        12 times a GET's price.

        The slots are read first (in parallel on object stores), then the records listed:
        as in ``load``, a record the listing does not show was written after it, so after
        the slot was read, which then held what its version wrote."""
        wanted = [v for v in versions if v >= 0]
        read = (
            map(self.read_slot, wanted)
            if self.io.is_local or len(wanted) <= 1
            else _read_pool.map(self.read_slot, wanted)
        )
        listed: dict[tuple[int, int], list[RecordRef]] = {}
        out: dict[int, VersionManifest] = {}
        for v, slot in list(zip(wanted, read)):  # (every slot read before any listing)
            if (
                isinstance(slot, VersionManifest)
                and self.slot_record(v, slot_chunk_size(slot.properties), listed) is None
            ):
                out[v] = slot
        return out

    # -- slot records (lamina.spec.slot) ---------------------------------------------------

    def slot_record(
        self, version: int, chunk_size: int, listed: dict[tuple[int, int], list[RecordRef]] | None = None
    ) -> SlotRecord | None:
        """A record covering slot ``version`` (its version expired, the slot maybe freed), or None.
        One listing of the records of the slot's chunk (one LIST on S3; two directory reads on
        local disk, which fail fast where there are none), and a GET of a covering one.
        ``listed``: chunk listings already made by the caller's one batch, reused and added to."""
        for rec in self._records.values():
            if rec.covers(version):
                return rec
        first, last = chunk_range(version, chunk_size)
        refs = listed.get((first, last)) if listed is not None else None
        if refs is None:
            refs = self._chunk_records(first, last)
            if listed is not None:
                listed[(first, last)] = refs
        for ref in refs:
            if ref.first <= version <= ref.last:
                return self.read_record(ref)
        return None

    def read_record(self, ref: RecordRef) -> SlotRecord:
        """The record a listing named (cached: records never change); CorruptMetadata if damaged."""
        hit = self._records.get(ref.path)
        if hit is not None:
            return hit
        rec = SlotRecord.parse(self.io.get(ref.path), ref.path)
        if (rec.first, rec.last, rec.emptied) != (ref.first, ref.last, ref.emptied) or (
            not ref.emptied and rec.at_ms != ref.at_ms
        ):
            raise CorruptMetadata(
                f"slot record {ref.path} records versions {rec.first}..{rec.last}, not what its name says"
            )
        self._records[ref.path] = rec
        return rec

    def _chunk_records(self, first: int, last: int) -> list[RecordRef]:
        """The records of one chunk: its freed-chunk record (older tables) and its range records."""
        chunk = f"{first:020d}-{last:020d}"
        freed_dir = self.layout.freed_dir
        if self.io.lists_in_order:
            # One request: the chunk's record ``<chunk>.json`` and its directory ``<chunk>/``
            # sort right after the name ``<chunk>`` ('.' and '/' before any digit).
            names = self.io.list_first_page(freed_dir, offset=chunk)
            ours = [n for n in names if n.startswith(chunk + ".") or n.startswith(chunk + "/")]
            if len(names) < 1000 or len(ours) < len(names):
                return [r for r in map(lambda n: record_ref(freed_dir, n), ours) if r is not None]
        refs = (
            []
            if self.io.get_optional(self.layout.freed_path(first, last)) is None
            else [RecordRef(self.layout.freed_path(first, last), first, last, 0, True)]
        )
        sub = records_dir(freed_dir, first, last)
        refs += [r for r in (record_ref(freed_dir, f"{chunk}/{n}") for n in self.io.list_names(sub)) if r is not None]
        return refs

    def slot_records(self) -> list[RecordRef]:
        """Every slot record of the log (names only), ascending by first slot: a listing of
        ``freed/`` (recursive; on local disk one directory read per chunk that has range records)."""
        freed_dir = self.layout.freed_dir
        if self.io.is_local:
            names = self.io.list_names(freed_dir)
            for d in self.io.list_subdirs(freed_dir):
                names += [f"{d}/{n}" for n in self.io.list_names(f"{freed_dir}/{d}")]
        else:
            plen = len(freed_dir) + 1
            names = [o.path[plen:] for o in self.io.list(freed_dir)]
        refs = [r for r in (record_ref(freed_dir, n) for n in names) if r is not None]
        return sorted(refs, key=lambda r: (r.first, r.last, r.path))

    def freed_ranges(self) -> list[tuple[int, int]]:
        """(first, last) of every slot record, ascending (records may overlap)."""
        return [(r.first, r.last) for r in self.slot_records()]

    # -- latest --------------------------------------------------------------------

    def read_hint(self) -> VersionHint | None:
        try:
            return VersionHint.parse(self.io.get(self.layout.hint_path))
        except NotFound:
            return None
        except StorageError as e:
            log.warning("could not read version hint: %s", e)
            return None

    def saw_latest(self, version: int, at: float) -> None:
        """Record that no slot above ``version`` existed at monotonic time ``at`` (it was the
        latest, or our commit's put of it had not yet been sent)."""
        if self._latest_seen is None or version >= self._latest_seen[0]:
            self._latest_seen = (version, at)

    def slot_cannot_have_been_freed(self, version: int, properties: Mapping[str, Any]) -> bool:
        """Whether slot ``version`` is known to lie in no freed chunk, without reading its record.

        Freeing a chunk needs every slot in it tombstoned for ``expire.slot-retention-ms``
        (default 24 h; judged by the expiring process's clock). If this process saw a version
        at or below ``version`` as the newest slot at time T, slot ``version`` was live or
        empty then, so it was tombstoned after T and its chunk cannot be freed before
        T + retention. Half the retention after T (the other half covers clock skew between
        hosts) the record need not be read: on S3 one GET less per commit and per tag. A
        retention of 0 (freed at once) always reads it."""
        seen = self._latest_seen
        if seen is None or seen[0] > version:
            return False
        retention_ms = TableProperties.EXPIRE_SLOT_RETENTION_MS.get(properties)
        return (time.monotonic() - seen[1]) * 1000 < retention_ms / 2

    def latest(self) -> VersionManifest:
        at = time.monotonic()
        vm = self._find_latest()
        self.saw_latest(vm.version, at)
        return vm

    def _find_latest(self) -> VersionManifest:
        if self.io.lists_in_order and self.allow_list:
            # An ordered listing (S3) names the newest slot in one request, newest first: the
            # hint could only add a GET (it must be checked by that listing anyway). Two
            # requests whatever the number of versions, as Lance's open.
            return self._latest_by_listing()
        hint = self.read_hint()
        if hint is not None and (self.table_uuid is None or hint.table_uuid == self.table_uuid):
            try:
                # The freed-slot check too: a probe forward, unlike a listing, does not confirm
                # that the hinted slot is not a late put in a freed chunk.
                vm = self.load(hint.version)
            except (VersionNotFound, CorruptMetadata):
                vm = None
            if vm is not None and vm.table_uuid == hint.table_uuid:
                if self.table_uuid is None:
                    self.table_uuid = vm.table_uuid
                newest = self._probe_forward(vm.version)
                if newest == vm.version:
                    return vm
                # above a live version no chunk is freed: whatever the probe found is a slot
                # of the current run of versions and tombstones
                found = self.try_load(newest, check_freed=False)
                if found is not None:
                    return found
                # The probe stopped on a tombstone: a destructive rollback's hole follows
                # it, so only a listing can tell what lies beyond (see drop_versions_after).
        if not self.allow_list:
            if self.exists(0):
                return self.load(self._probe_forward(0))
            raise TableNotFound(f"{self.io.uri} has no usable version hint and listing is disabled")
        return self._latest_by_listing()

    def _latest_by_listing(self) -> VersionManifest:
        newest = self._newest_by_listing()
        if newest is None:
            raise TableNotFound(self._no_versions())
        vm = self.load(newest, check_freed=False)  # the newest slot is never in a freed chunk
        if self.table_uuid is None:
            self.table_uuid = vm.table_uuid
        return vm

    def _no_versions(self) -> str:
        return f"no Lamina table at {self.io.uri} (no {self.layout.versions_dir}/); create one with lamina.create_table"

    def newest_from(self, known: int) -> VersionManifest:
        """The latest version, given that version ``known`` exists (no hint read)."""
        at = time.monotonic()
        vm = self._newest_from(known)
        self.saw_latest(vm.version, at)
        return vm

    def _newest_from(self, known: int) -> VersionManifest:
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
            names = self.io.list_first_page(self.layout.versions_dir)
        else:
            names = self.io.list_names(self.layout.versions_dir)
        for name in names:  # newest first
            v = parse_version_file_name(name)
            if v is not None:
                return v
        return None

    def list_versions(self) -> list[int]:
        """Every version present, oldest first (a full listing); tombstones are not versions."""
        return self.scan_slots().versions

    def scan_slots(self) -> SlotListing:
        """Every slot file, classified by content, from one listing of ``versions/`` and one of
        ``freed/``. A file small enough to be a tombstone is read to tell which it is: a
        truncated version manifest is never mistaken for one (it fails to load instead)."""
        records = self.slot_records()
        covered = Ranges((r.first, r.last) for r in records)
        versions: list[int] = []
        small: list[int] = []
        strays: list[int] = []
        if self.io.is_local:
            # slot files lie directly in versions/ (staged ones, in pending/, are not slots):
            # one directory read, several times cheaper than a recursive object listing
            listed = self.io.list_dir(self.layout.versions_dir)
            files: Iterable[tuple[str, int]] = zip(listed.column("path").to_pylist(), listed.column("size").to_pylist())
        else:
            files = ((o.path, o.size) for o in self.io.list(self.layout.versions_dir))
        for path, size in files:
            v = parse_version_file_name(path.rsplit("/", 1)[-1])
            if v is None:
                continue
            if v in covered:
                strays.append(v)  # recorded: an expired version's file, or a late put into a freed slot
            elif size <= TOMBSTONE_MAX_BYTES:
                small.append(v)
            else:
                versions.append(v)
        tombstones: dict[int, Tombstone] = {}
        paths = [self.layout.version_path(v) for v in small]
        read = (
            map(self.io.get_optional, paths)
            if self.io.is_local or len(paths) <= 1
            else _read_pool.map(self.io.get_optional, paths)
        )
        for v, data in zip(small, read):
            if data is None:
                continue  # deleted since the listing
            try:
                stone = Tombstone.parse(data, self.layout.version_path(v))
            except CorruptMetadata:
                stone = None  # a damaged tombstone
            if stone is not None and stone.version == v:
                tombstones[v] = stone
            else:
                # A small manifest, or damage (a tombstone that does not parse or names
                # another version): listed as a version, so loading it (``read_slot``, the
                # one judge of a slot) says what is wrong, and expiry, orphan cleanup and
                # fsck see it as damage rather than as a gone version.
                versions.append(v)
        return SlotListing(sorted(versions), tombstones, sorted(strays), [(r.first, r.last) for r in records], records)

    def hint_due(self, version: int) -> bool:
        """Whether a commit of ``version`` rewrites the hint. Where listings come in order (S3)
        readers list instead (``latest``): the hint serves only readers not allowed to list,
        which probe forward from it, so every HINT_EVERY-th version keeps their probe short
        while appends save a request. Elsewhere the hint is every reader's first step."""
        return not self.io.lists_in_order or version % HINT_EVERY == 0

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
            manifest_path=self.layout.version_path(vm.version),
            table_uuid=vm.table_uuid,
            table_identifier=self.table_identifier,
            timestamp_ms=vm.timestamp_ms,
            reader_features=vm.reader_features,
            writer_features=vm.writer_features,
            format_version=FORMAT_VERSION,
        )
        try:
            self.io.put_in_place(self.layout.hint_path, hint.to_json())  # readers confirm what a hint says
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
                f"no version of {self._of()} at or before timestamp {timestamp_ms} "
                "(before the table was created, or those versions were expired)"
            )
        return best

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


def _discard(f: Future) -> None:
    with _hint_lock:
        _hint_pending.discard(f)


# Parsed version manifests by their bytes: loading a version costs one JSON parse, once per
# process. A version this process wrote is entered when it is written (``remember``), so a
# writer reading back what it committed (a notebook, a publish of a branch it just wrote)
# parses nothing.
_parsed: OrderedDict[bytes, VersionManifest] = OrderedDict()
_PARSED_MAX = 4096


def remember(data: bytes, vm: VersionManifest) -> None:
    """Enter ``vm`` as what ``data`` (its ``to_json()``) parses to."""
    with _hint_lock:
        _parsed[data] = vm
        if len(_parsed) > _PARSED_MAX:
            _parsed.popitem(last=False)


def _parse_cached(data: bytes, where: str) -> VersionManifest:
    hit = _parsed.get(data)
    if hit is not None:
        return hit
    vm = VersionManifest.from_json(data, where)
    remember(data, vm)
    return vm
