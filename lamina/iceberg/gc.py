"""What the Iceberg view references, what it no longer needs, and whether it is whole.

The view's files are all under ``metadata/``: metadata files ``v<k>.metadata.json``, the
hint, manifest lists ``snap-*.avro``, manifests ``m-*.avro`` and Puffin files ``dv-*.puffin``.
The newest metadata file and the ``KEEP_METADATA`` before it are kept, with everything the
snapshots of the newest reference (their manifest lists, those lists' manifests, the Puffin
files of the delete manifests). Anything else the view wrote is garbage once it is older
than the caller's age: the files of expired versions' snapshots, and those a sync wrote
before another writer's metadata file won (which a younger cutoff could take from a sync
still running, so callers pass at least the reader grace).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lamina.errors import LaminaError, NotFound
from lamina.iceberg import avro
from lamina.iceberg.manifests import METADATA_DIR
from lamina.iceberg.metadata_files import HINT_PATH, Head, parse_metadata_name, read_head, relative_path
from lamina.iceberg.snapshots import VERSION_KEY, snapshot_id_of
from lamina.iceberg.view import is_enabled
from lamina.iceberg.writer import flush
from lamina.io import FileIO
from lamina.spec.version import VersionManifest

KEEP_METADATA = 10  # metadata files kept before the newest (a reader may have just opened one)


def is_view_file(path: str) -> bool:
    """Whether ``path`` is a file the view writes (only those are ever collected)."""
    if not path.startswith(f"{METADATA_DIR}/") or "/" in path[len(METADATA_DIR) + 1 :]:
        return False
    name = path[len(METADATA_DIR) + 1 :]
    return (
        name == "version-hint.text"
        or parse_metadata_name(name) is not None
        or (name.startswith(("m-", "snap-")) and name.endswith(".avro"))
        or (name.startswith("dv-") and name.endswith(".puffin"))
    )


@dataclass
class Referenced:
    """The view's files that must stay, and what is wrong with the view (missing files)."""

    head: Head | None
    paths: set[str] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)


def referenced(io: FileIO, head: Head | None = None) -> Referenced:
    """Everything the newest metadata file (and the ones kept before it) needs."""
    head = head if head is not None else read_head(io)
    out = Referenced(head)
    if head is None:
        return out
    out.paths.add(HINT_PATH)
    out.paths.update(
        f"{METADATA_DIR}/v{k}.metadata.json" for k in range(max(1, head.number - KEEP_METADATA), head.number + 1)
    )
    manifests: set[str] = set()
    for snap in head.metadata.get("snapshots", []):
        path = relative_path(snap["manifest-list"], io)
        out.paths.add(path)
        try:
            rows, _ = avro.read(io.get(path))
        except NotFound:
            out.missing.append(path)
            continue
        for row in rows:
            m = relative_path(row["manifest_path"], io)
            if m in manifests:
                continue
            manifests.add(m)
            if row["content"] != avro.DELETES:
                continue
            try:
                entries, _ = avro.read(io.get(m))
            except NotFound:
                out.missing.append(m)
                continue
            out.paths.update(relative_path(e["data_file"]["file_path"], io) for e in entries)
    out.paths |= manifests
    return out


@dataclass
class Garbage:
    files: list[str] = field(default_factory=list)
    bytes: int = 0


def collect(io: FileIO, older_than_ms: int, dry_run: bool = False) -> Garbage:
    """Delete the view's files nothing kept references that were written more than
    ``older_than_ms`` ago. Listing first: a file written after it is not considered."""
    flush(io.uri)  # a sync this process queued would write files the collection must not judge
    listed = [o for o in io.list(METADATA_DIR) if is_view_file(o.path)]
    if not listed:
        return Garbage()  # no view (one listing, on a table that never had one)
    refs = referenced(io)
    if refs.head is None or refs.missing:
        return Garbage()  # no view, or a damaged one: what it references is not known
    cutoff = time.time() * 1000 - older_than_ms
    doomed = [o for o in listed if o.path not in refs.paths and o.last_modified.timestamp() * 1000 < cutoff]
    out = Garbage([o.path for o in doomed], sum(o.size for o in doomed))
    if not dry_run and out.files:
        for i in range(0, len(out.files), 1000):
            try:
                io.delete_many(out.files[i : i + 1000])
            except LaminaError:
                for p in out.files[i : i + 1000]:
                    try:
                        io.delete(p)
                    except NotFound:
                        pass
    return out


@dataclass
class Check:
    """fsck's look at the view: what it references, what is missing, how it lags."""

    referenced: set[str] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def check(io: FileIO, latest: VersionManifest) -> Check:
    """The view of a table whose latest main version is ``latest``: is it there if enabled,
    does its main ref name ``latest``, does every file it references exist?"""
    out = Check()
    enabled = is_enabled(latest)
    if not enabled and not io.exists(HINT_PATH) and not io.list_names(METADATA_DIR):
        return out  # no view, none wanted
    try:
        refs = referenced(io)
    except (LaminaError, ValueError, KeyError) as e:
        out.missing.append(f"the view cannot be read: {e}")
        return out
    if refs.head is None:
        if enabled:
            out.problems.append("the table enables the Iceberg view but it has none; run `lamina iceberg sync`")
        return out
    out.referenced = refs.paths
    for path in refs.missing:
        out.missing.append(f"{path} is referenced by {refs.head.path} but missing; run `lamina iceberg sync`")
    main = refs.head.metadata.get("refs", {}).get("main", {}).get("snapshot-id")
    if not enabled:
        out.problems.append(
            "the table no longer enables the Iceberg view: it stays at the version it last "
            f"showed ({refs.head.path}); Iceberg readers see that version"
        )
    elif main != snapshot_id_of(latest.commit_id):
        shown = next(
            (
                s.get("summary", {}).get(VERSION_KEY)
                for s in refs.head.metadata.get("snapshots", [])
                if s.get("snapshot-id") == main
            ),
            None,
        )
        out.problems.append(
            f"the Iceberg view shows version {shown} of main, not the latest {latest.version}; "
            "run `lamina iceberg sync`"
        )
    return out
