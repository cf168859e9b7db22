"""The Iceberg view of a Lamina table: Iceberg v3 metadata for every retained version,
written after the versions land (derived state; docs/iceberg.md).

``sync`` brings the view up to date with the table:

1. the view's newest metadata file is found (``metadata/version-hint.text``, then a probe
   forward for newer ``metadata/v<k>.metadata.json`` files);
2. the versions it lacks are loaded: main's from its newest snapshot on (or, with
   ``retained``, main's whole retained list, dropping snapshots of expired versions), each
   branch's, and the tags';
3. each missing version becomes a snapshot: its root manifest is read, every group of
   entries (a leaf manifest, or the inline entries one version added) that the parent's
   snapshot already has is carried by reference, and only new groups are converted
   (``lamina.iceberg.manifests``); deletion vectors those need are found in the Puffin
   files of the groups the version dropped, else written into new Puffin files;
4. the new metadata file ``v<k+1>.metadata.json`` is created with put-if-absent; if
   another writer took the name, steps 1-4 run again on its file. Then the hint is
   rewritten.

Nothing here changes a Lamina file, and every file it writes is new (unique names) or the
next metadata file (put-if-absent), so a sync interrupted anywhere leaves the view at its
previous metadata file, and the next sync starts from there.

Naming and finding the metadata files is ``lamina.iceberg.metadata_files``'s; building a
snapshot and the metadata document ``lamina.iceberg.snapshots``'s.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from lamina.commit.branches import BranchStore
from lamina.commit.log import VersionLog
from lamina.commit.tags import TagStore
from lamina.errors import AlreadyExists, LaminaError
from lamina.iceberg.metadata_files import (
    Head,
    forget_head,
    metadata_path,
    read_head,
    remember_head,
    table_location,
    write_hint,
)
from lamina.iceberg.snapshots import VERSION_KEY, Build, Snap, snapshot_id_of
from lamina.io import FileIO
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.properties import TableProperties
from lamina.spec.version import VersionManifest

# VERSION_KEY and read_head are named here too: lamina.table.iceberg_view imports them from this module.
__all__ = ["MAX_ATTEMPTS", "VERSION_KEY", "SyncResult", "is_enabled", "read_head", "sync"]

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 20  # metadata files other writers may take meanwhile before a sync gives up


def is_enabled(vm: VersionManifest) -> bool:
    return TableProperties.ICEBERG_ENABLED.get(vm.properties) == "true"


@dataclass
class SyncResult:
    """What a sync did: the metadata file it wrote (None if the view was up to date)."""

    metadata_path: str | None
    snapshots_added: int = 0
    snapshots_removed: int = 0
    manifests_written: int = 0
    puffins_written: int = 0
    files_written: list[str] = field(default_factory=list)


def _versions(log: VersionLog, after: int | None, upto: VersionManifest) -> list[VersionManifest]:
    """The versions of ``log`` in (``after``, ``upto``], oldest first, those that load."""
    start = 0 if after is None else after + 1
    wanted = list(range(start, upto.version))
    loaded = log.try_load_many(wanted) if wanted else {}
    return [loaded[v] for v in wanted if v in loaded] + [upto]


def sync(
    io: FileIO,
    main_log: VersionLog,
    *,
    retained: bool = False,
    refs: bool = True,
    committed: tuple[VersionLog, VersionManifest] | None = None,
    force: bool = False,
) -> SyncResult:
    """Bring the Iceberg view up to date (see the module's docstring). ``retained``: rebuild
    the snapshot list from main's retained versions (after expiry, or to repair a view);
    otherwise only versions newer than the view's are added. ``refs``: list the tags and
    branches again. ``committed``: the log and version a commit just made (saves loading
    the latest). ``force``: sync a table whose latest version does not enable the view."""
    for _ in range(MAX_ATTEMPTS):
        result = _attempt(io, main_log, retained, refs, committed, force)
        if result is not None:
            return result
    raise LaminaError(
        f"the Iceberg view of {io.uri} kept changing under this sync ({MAX_ATTEMPTS} attempts); try again"
    )


def _attempt(
    io: FileIO,
    main_log: VersionLog,
    retained: bool,
    refs: bool,
    committed: tuple[VersionLog, VersionManifest] | None,
    force: bool,
) -> SyncResult | None:
    head = read_head(io)
    b = Build(io, head)
    main = committed[1] if committed is not None and committed[0].branch == MAIN_BRANCH else main_log.latest()
    if not main_log.is_known_newest(main):
        main = main_log.latest()
    if not (force or is_enabled(main)):
        return SyncResult(None)
    old_refs = {
        name: (int(r["snapshot-id"]), r.get("type", "branch"))
        for name, r in (head.metadata.get("refs", {}) if head else {}).items()
    }
    # main's versions
    main_snaps = sorted((s for s in b.snaps.values() if s.log_id == MAIN_BRANCH), key=lambda s: s.version)
    keep: set[int] = set()
    if retained or not main_snaps:
        # every retained version: those the view has are carried, the others loaded
        versions = [v for v in main_log.list_versions() if v <= main.version]
        have = {s.version: s for s in main_snaps}
        carried = {v: have[v] for v in versions if v in have}
        missing = [v for v in versions if v not in have and v != main.version]
        loaded = main_log.try_load_many(missing) if missing else {}
        wanted = [loaded[v] for v in missing if v in loaded] + ([main] if main.version not in have else [])
    else:
        carried = {s.version: s for s in main_snaps}
        newest = main_snaps[-1].version
        wanted = _versions(main_log, newest, main) if main.version > newest else []
    keep.update(s.id for s in carried.values())
    chain = dict(carried)
    for vm in sorted(wanted, key=lambda vm: vm.version):
        parent = chain.get(vm.parent_version) if vm.parent_version is not None else None
        snap = b.snapshot(vm, MAIN_BRANCH, parent)
        chain[vm.version] = snap
        keep.add(snap.id)
    new_refs: dict[str, tuple[int, str]] = {MAIN_BRANCH: (snapshot_id_of(main.commit_id), "branch")}
    # branches and tags
    if refs:
        for record in BranchStore(io).list():
            _branch(b, io, main_log, record, keep, new_refs)
        for tag in TagStore(io, main_log).list():
            snap = b.snapshot(tag.version, MAIN_BRANCH, chain.get(tag.version.parent_version or -1))
            keep.add(snap.id)
            new_refs.setdefault(tag.name, (snap.id, "tag"))
    else:
        for name, (sid, kind) in old_refs.items():
            if name != MAIN_BRANCH and sid in b.snaps:
                new_refs[name] = (sid, kind)
                keep.add(sid)
                if kind == "branch":
                    keep.update(s.id for s in b.snaps.values() if s.log_id == b.snaps[sid].log_id)
        if committed is not None and committed[0].branch != MAIN_BRANCH:
            committed_record = getattr(committed[0], "record", None)
            if committed_record is not None:
                _branch(b, io, main_log, committed_record, keep, new_refs, latest=committed[1])
    old_keep = {int(s["snapshot-id"]) for s in (head.metadata.get("snapshots", []) if head else [])}
    if head is not None and not b.added and keep == old_keep and new_refs == old_refs:
        return SyncResult(None)
    metadata = b.metadata(main, keep, new_refs, table_location(io))
    number = head.number + 1 if head else 1
    try:
        io.put_if_absent(metadata_path(number), json.dumps(metadata, separators=(",", ":")).encode())
    except AlreadyExists:
        forget_head(io)
        return None  # another writer's file: start again from it
    remember_head(io, Head(number, metadata))
    try:
        write_hint(io, number, head.number if head else None)
    except LaminaError as e:  # the hint only saves readers a probe
        log.warning("Iceberg version hint of %s not written: %s", io.uri, e)
    return SyncResult(
        metadata_path(number),
        b.added,
        len(old_keep - keep),
        sum(1 for p in b.written if p.endswith(".avro") and "/m-" in p),
        b.puffins_written,
        b.written,
    )


def _branch(
    b: Build,
    io: FileIO,
    main_log: VersionLog,
    record: Any,
    keep: set[int],
    refs: dict[str, tuple[int, str]],
    latest: VersionManifest | None = None,
) -> None:
    """Add branch ``record``'s retained versions to the view."""
    store = BranchStore(io)
    try:
        blog = store.log(record, allow_list=main_log.allow_list)
        head = latest or blog.latest()
    except LaminaError as e:
        log.warning("branch %r left out of the Iceberg view: %s", record.name, e)
        return
    mine = sorted((s for s in b.snaps.values() if s.log_id == record.branch_id), key=lambda s: s.version)
    chain: dict[int, Snap] = {s.version: s for s in mine}
    base = (
        b.snapshot(record.base, MAIN_BRANCH if not mine else record.branch_id, None)
        if snapshot_id_of(record.base.commit_id) not in b.snaps
        else b.snaps[snapshot_id_of(record.base.commit_id)]
    )
    chain.setdefault(record.base_version, base)
    keep.add(base.id)
    after = max([record.base_version, *(s.version for s in mine)])
    for vm in _versions(blog, after, head) if head.version > after else []:
        snap = b.snapshot(vm, record.branch_id, chain.get(vm.parent_version or -1))
        chain[vm.version] = snap
    for s in chain.values():
        keep.add(s.id)
    refs[record.name] = (snapshot_id_of(head.commit_id), "branch")
