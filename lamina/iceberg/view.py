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
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.branches import BranchStore
from lamina.commit.log import VersionLog
from lamina.commit.tags import TagStore
from lamina.errors import AlreadyExists, CorruptMetadata, LaminaError, NotFound
from lamina.iceberg import avro, puffin
from lamina.iceberg.manifests import (
    METADATA_DIR,
    DvLocation,
    GroupContext,
    inline_key_of,
    key_of_manifest,
    leaf_key,
    write_group,
)
from lamina.iceberg.types import check_supported, iceberg_schema, merge_mappings, name_mapping
from lamina.io import FileIO
from lamina.manifest.entries import conform, manifest_schema_of
from lamina.manifest.files import read_manifest
from lamina.manifest.tree import load_root
from lamina.spec import content as C
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.lineage import has_lineage
from lamina.spec.properties import TableProperties
from lamina.spec.sort import effective_sort_order
from lamina.spec.version import VersionManifest
from lamina.timeutil import now_ms

log = logging.getLogger(__name__)

HINT_PATH = f"{METADATA_DIR}/version-hint.text"
NAME_MAPPING = "schema.name-mapping.default"
MAX_ATTEMPTS = 20  # metadata files other writers may take meanwhile before a sync gives up
CREATED_BY = "lamina"
# Snapshot summary keys that tie a snapshot to its Lamina version.
VERSION_KEY, COMMIT_KEY, LOG_KEY = "lamina-version", "lamina-commit-id", "lamina-branch"
# Iceberg snapshot operations of Lamina's.
_OPERATIONS = {
    "append": "append",
    "add-files": "append",
    "create": "append",
    "streaming-append": "append",
    "delete": "delete",
    "compact": "replace",
    "rewrite-manifests": "replace",
    "update-schema": "replace",
    "update-spec": "replace",
    "update-sort-order": "replace",
    "set-properties": "replace",
    "enable-row-lineage": "replace",
    "enable-branches": "replace",
}


def metadata_path(number: int) -> str:
    return f"{METADATA_DIR}/v{number}.metadata.json"


def parse_metadata_name(name: str) -> int | None:
    """k of ``v<k>.metadata.json`` (None for another name)."""
    if name.startswith("v") and name.endswith(".metadata.json"):
        digits = name[1 : -len(".metadata.json")]
        if digits.isdigit():
            return int(digits)
    return None


def snapshot_id_of(commit_id: str) -> int:
    """The Iceberg snapshot id of the version committed as ``commit_id``: its first 60 bits
    (positive, unique as the commit id is, the same whoever derives it)."""
    return int(commit_id[:15], 16) or 1


def is_enabled(vm: VersionManifest) -> bool:
    return TableProperties.ICEBERG_ENABLED.get(vm.properties) == "true"


@dataclass
class Head:
    """The view's newest metadata file."""

    number: int
    metadata: dict[str, Any]

    @property
    def path(self) -> str:
        return metadata_path(self.number)


# The newest metadata file this process read or wrote, per table: the next sync starts from it
# after one existence check of the file after it (metadata files never change once written).
_known_heads: dict[str, Head] = {}
_rows_cache: dict[str, list[dict[str, Any]]] = {}  # manifest list URI -> its rows (immutable files)
_ROWS_CACHE_MAX = 256


def read_head(io: FileIO) -> Head | None:
    """The newest metadata file: the hint's, or a newer one found by probing forward (the
    hint is rewritten after each file, so it may lag); by listing if there is no hint."""
    known = _known_heads.get(io.uri)
    if known is not None and not io.exists(metadata_path(known.number + 1)):
        if io.exists(known.path):  # (not a view deleted meanwhile)
            return known
    number = hint_number(io)
    if number is None or not io.exists(metadata_path(number)):
        found = [k for k in (parse_metadata_name(n) for n in io.list_names(METADATA_DIR)) if k is not None]
        if not found:
            _known_heads.pop(io.uri, None)
            return None
        number = max(found)
    while io.exists(metadata_path(number + 1)):
        number += 1
    data = io.get(metadata_path(number))
    try:
        head = Head(number, json.loads(data))
    except ValueError as e:
        raise CorruptMetadata(
            f"Iceberg metadata {metadata_path(number)} does not parse ({e}); run `lamina iceberg sync`"
        ) from None
    _known_heads[io.uri] = head
    return head


def hint_number(io: FileIO) -> int | None:
    """The number ``version-hint.text`` names (None: no usable hint)."""
    raw = io.get_optional(HINT_PATH)
    try:
        return None if raw is None else int(raw.decode().strip())
    except ValueError:
        return None


def _write_hint(io: FileIO, number: int, previous: int | None) -> None:
    """Point the hint at metadata file ``number``. Rewritten in place (no new file: what a
    busy disk makes costly) when the text is no shorter than the number it held, so it is
    never padded; replaced otherwise."""
    text = str(number).encode()
    if previous is not None and len(text) >= len(str(previous)) and number > previous:
        io.put_in_place(HINT_PATH, text)
    else:
        io.put(HINT_PATH, text)


def relative_path(metadata_uri: str, io: FileIO) -> str:
    """A path the view wrote, relative to the table root, from its URI."""
    root = table_location(io)
    return metadata_uri[len(root) + 1 :] if metadata_uri.startswith(root + "/") else metadata_uri


def table_location(io: FileIO) -> str:
    """The table's location as Iceberg readers open it."""
    return io.full_uri(METADATA_DIR)[: -len(METADATA_DIR) - 1]


class _Ids:
    """View ids of schemas, partition specs or sort orders by content: an object already in
    the view keeps its id; a new one takes Lamina's id when that is free, else the next."""

    def __init__(self, existing: Iterable[tuple[int, Any]], floor: int = 0) -> None:
        self.items: dict[int, Any] = {}
        for i, obj in existing:
            self.items[i] = obj
        self.floor = floor

    def id_for(self, obj: Any, preferred: int) -> int:
        for i, known in self.items.items():
            if known == obj:
                return i
        i = (
            preferred
            if preferred not in self.items and preferred >= self.floor
            else max([self.floor - 1, *self.items]) + 1
        )
        self.items[i] = obj
        return i


def _without_id(j: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in j.items() if k != key}


@dataclass
class _Snap:
    """A snapshot of the view and what it was built from."""

    json: dict[str, Any]
    log_id: str  # "main" or a branch id
    version: int
    vm: VersionManifest | None = None  # None: carried from the previous metadata file

    @property
    def id(self) -> int:
        return int(self.json["snapshot-id"])


@dataclass
class SyncResult:
    """What a sync did: the metadata file it wrote (None if the view was up to date)."""

    metadata_path: str | None
    snapshots_added: int = 0
    snapshots_removed: int = 0
    manifests_written: int = 0
    puffins_written: int = 0
    files_written: list[str] = field(default_factory=list)


class _Build:
    """One attempt of a sync: the view's previous metadata and what this attempt adds."""

    def __init__(self, io: FileIO, head: Head | None) -> None:
        self.io = io
        self.head = head
        old = head.metadata if head else {}
        self.uri = io.full_uri
        self.snaps: dict[int, _Snap] = {}
        for s in old.get("snapshots", []):
            summary = s.get("summary", {})
            if VERSION_KEY in summary:
                self.snaps[int(s["snapshot-id"])] = _Snap(
                    s, summary.get(LOG_KEY, MAIN_BRANCH), int(summary[VERSION_KEY])
                )
        self.schemas = _Ids((s["schema-id"], _without_id(s, "schema-id")) for s in old.get("schemas", []))
        self.specs = _Ids((s["spec-id"], s["fields"]) for s in old.get("partition-specs", []))
        self.orders = _Ids(((o["order-id"], o["fields"]) for o in old.get("sort-orders", [])), floor=1)
        self.lamina_schemas: dict[int, Any] = {}  # view schema id -> Lamina schema (for the name mapping)
        self.rows_cache: dict[str, list[dict[str, Any]]] = {}  # manifest list path -> rows
        self.made: dict[str, list[dict[str, Any]]] = {}  # group key -> rows, written by this attempt
        self.dv_index: dict[tuple[str, int], DvLocation] = {}
        self.puffins_read: set[str] = set()
        self.written: list[str] = []
        self.puffins_written = 0
        self.added = 0
        self.lineage = False

    # -- ids ------------------------------------------------------------------------------

    def schema_id(self, vm: VersionManifest) -> tuple[int, dict[str, Any]]:
        j = iceberg_schema(vm.schema, 0)
        sid = self.schemas.id_for(_without_id(j, "schema-id"), vm.schema.schema_id)
        self.lamina_schemas[sid] = vm.schema
        return sid, {**j, "schema-id": sid}

    def spec_ids(self, vm: VersionManifest) -> dict[int, int]:
        out = {}
        for spec in vm.all_partition_specs:
            fields = [
                {"source-id": f.source_id, "field-id": f.field_id, "name": f.name, "transform": f.transform}
                for f in spec.fields
            ]
            out[spec.spec_id] = self.specs.id_for(fields, spec.spec_id)
        return out

    def order_id(self, vm: VersionManifest) -> int:
        order = effective_sort_order(vm.schema, vm.sort_order, vm.properties)
        if order.is_unsorted:
            self.orders.items[0] = []  # Iceberg's unsorted order is always id 0
            return 0
        fields = [
            {"transform": "identity", "source-id": f.source_id, "direction": f.direction, "null-order": f.null_order}
            for f in order.fields
        ]
        return self.orders.id_for(fields, max(order.order_id, 1))

    # -- manifests --------------------------------------------------------------------------

    def rows_of(self, snap: _Snap | None) -> list[dict[str, Any]]:
        if snap is None:
            return []
        uri = snap.json["manifest-list"]
        rows = self.rows_cache.get(uri) or _rows_cache.get(uri)
        if rows is None:
            rows, _ = avro.read(self.io.get(relative_path(uri, self.io)))
        self.rows_cache[uri] = rows
        return rows

    def _index_puffins(self, rows: Iterable[dict[str, Any]]) -> None:
        """Learn where the deletion vectors of the delete manifests ``rows`` are (their Puffin
        footers name each blob's Lamina deletion vector)."""
        for row in rows:
            if row["content"] != avro.DELETES:
                continue
            entries, _ = avro.read(self.io.get(relative_path(row["manifest_path"], self.io)))
            for e in entries:
                path = relative_path(e["data_file"]["file_path"], self.io)
                if path in self.puffins_read:
                    continue
                self.puffins_read.add(path)
                self._index_puffin(path, e["data_file"]["file_size_in_bytes"])

    def _index_puffin(self, path: str, size: int) -> None:
        try:
            tail = self.io.get_range(path, size - 12, 12)
            length = int.from_bytes(tail[:4], "little")
            footer = json.loads(self.io.get_range(path, size - 12 - length, length))
        except (NotFound, ValueError):
            return  # unreadable: its DVs are written again
        for b in footer.get("blobs", []):
            p = b.get("properties", {})
            if "lamina-dv-path" in p:
                self.dv_index[(p["lamina-dv-path"], int(p["lamina-dv-offset"]))] = DvLocation(
                    path, int(b["offset"]), int(b["length"]), size, int(p.get("cardinality", 0))
                )

    def find_dvs(
        self, wanted: list[tuple[str, int, int, str]], candidates: list[dict[str, Any]], new_puffins: set[str]
    ) -> dict[tuple[str, int], DvLocation]:
        missing = [w for w in wanted if (w[0], w[1]) not in self.dv_index]
        if missing and candidates:
            self._index_puffins(candidates)
            candidates.clear()
            missing = [w for w in wanted if (w[0], w[1]) not in self.dv_index]
        by_file: dict[str, list[tuple[int, int, str]]] = {}
        for dv_path, offset, length, data_path in missing:
            if (offset, length, data_path) not in by_file.setdefault(dv_path, []):
                by_file[dv_path].append((offset, length, data_path))
        for dv_path, blobs in by_file.items():
            self._write_puffin(dv_path, sorted(blobs), new_puffins)
        return {(w[0], w[1]): self.dv_index[(w[0], w[1])] for w in wanted}

    def _write_puffin(self, dv_path: str, blobs: list[tuple[int, int, str]], new_puffins: set[str]) -> None:
        data = self.io.get(dv_path)
        vectors = []
        for offset, length, data_path in blobs:
            blob, cardinality = puffin.dv_blob(data[offset : offset + length], dv_path, offset)
            vectors.append((self.uri(data_path), blob, cardinality))
        body, placed = puffin.puffin_file(
            vectors, CREATED_BY, [{"lamina-dv-path": dv_path, "lamina-dv-offset": str(o)} for o, _, _ in blobs]
        )
        stem = dv_path.rsplit("/", 1)[-1].split(".", 1)[0]
        path = f"{METADATA_DIR}/dv-{stem}-{uuid.uuid4().hex[:16]}.puffin"
        self.io.put_new(path, body)
        self.written.append(path)
        self.puffins_written += 1
        new_puffins.add(path)
        for (offset, _, _), b in zip(blobs, placed):
            self.dv_index[(dv_path, offset)] = DvLocation(path, b.offset, b.length, len(body), b.cardinality)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self, vm: VersionManifest, log_id: str, parent: _Snap | None) -> _Snap:
        """The snapshot of ``vm`` (built unless the view has it), its manifests carried from
        ``parent``'s (the snapshot of its parent version, if the view has it) where unchanged."""
        sid = snapshot_id_of(vm.commit_id)
        if sid in self.snaps:
            return self.snaps[sid]
        check_supported(vm.schema)
        schema_id, schema_json = self.schema_id(vm)
        spec_ids = self.spec_ids(vm)
        self.order_id(vm)
        self.lineage = self.lineage or has_lineage(vm)
        mschema = manifest_schema_of(vm)
        parent_rows = self.rows_of(parent)
        by_key: dict[str, list[dict[str, Any]]] = {}
        for row in parent_rows:
            key = key_of_manifest(row["manifest_path"])
            if key is not None:
                by_key.setdefault(key, []).append(row)
        root = load_root(self.io, vm.root_manifest, mschema, vm.root_inline)
        groups: list[tuple[str, Any]] = []  # (key, leaf path | positions of inline entries in the root)
        if root.num_rows:
            # one pass over the root's columns as lists (a root is small: its inline entries
            # and a row per leaf); only new groups' entries are taken out of it
            content, status, paths, dv_paths, dv_offsets, added = (
                root.column(c).to_pylist()
                for c in ("content", "status", "path", "dv_path", "dv_offset", "added_version")
            )
            inline: dict[int, list[int]] = {}
            for i, (c, st) in enumerate(zip(content, status)):
                if st == C.REMOVED:
                    continue
                if c == C.LEAF:
                    groups.append((leaf_key(paths[i]), paths[i]))
                else:
                    inline.setdefault(added[i], []).append(i)
            for a in sorted(inline):
                at = inline[a]
                groups.append((inline_key_of([(paths[i], dv_paths[i], dv_offsets[i]) for i in at]), at))
        rows: list[dict[str, Any]] = []
        todo: list[tuple[str, pa.Table]] = []
        keys = set()
        for key, source in groups:
            keys.add(key)
            carried = by_key.get(key) or self.made.get(key)
            if carried is not None:
                rows += carried
                continue
            if isinstance(source, list):
                entries = root.take(pa.array(source, pa.int64()))
            else:
                entries = conform(read_manifest(self.io, source), mschema)
                entries = entries.filter(pc.not_equal(entries.column("status"), C.REMOVED))
            todo.append((key, entries))
        # the DVs new groups need may be in the Puffin files of the groups this version dropped
        candidates = [r for k, rs in by_key.items() if k not in keys for r in rs if r["content"] == avro.DELETES]
        new_puffins: set[str] = set()
        wanted = []
        for _, entries in todo:
            dv = entries.column("dv_path").to_pylist()
            if any(p is not None for p in dv):
                off, ln, paths = (entries.column(c).to_pylist() for c in ("dv_offset", "dv_length", "path"))
                wanted += [(d, o, n, p) for d, o, n, p in zip(dv, off, ln, paths) if d is not None]
        located = self.find_dvs(wanted, candidates, new_puffins) if wanted else {}
        ctx = GroupContext(
            io=self.io,
            schema=vm.schema,
            schema_json=schema_json,
            specs={s.spec_id: s for s in vm.all_partition_specs},
            view_spec_ids=spec_ids,
            mschema=mschema,
            version=vm.version,
            snapshot_id=sid,
            uri=self.uri,
            find_dvs=lambda w: {(d, o): located[(d, o)] for d, o, _, _ in w},
            new_puffins=new_puffins,
        )
        for key, entries in todo:
            made = write_group(ctx, key, entries)
            self.made[key] = made
            rows += made
        self.written += ctx.written
        parent_id = self.parent_id(vm, parent)
        first_row_id = None
        if has_lineage(vm) and vm.next_row_id is not None:
            first_row_id = (
                parent.vm.next_row_id
                if parent is not None and parent.vm is not None and parent.vm.next_row_id is not None
                else None
            )
        list_path = f"{METADATA_DIR}/snap-{sid}-{uuid.uuid4().hex[:16]}.avro"
        self.io.put_new(list_path, avro.manifest_list_bytes(rows, sid, parent_id, vm.version, first_row_id))
        self.written.append(list_path)
        if len(_rows_cache) >= _ROWS_CACHE_MAX:
            _rows_cache.clear()
        _rows_cache[self.uri(list_path)] = rows  # the next version's parent
        snap_json: dict[str, Any] = {
            "snapshot-id": sid,
            "sequence-number": vm.version,
            "timestamp-ms": vm.timestamp_ms,
            "manifest-list": self.uri(list_path),
            "schema-id": schema_id,
            "summary": self.summary(vm, rows, log_id),
        }
        if parent_id is not None:
            snap_json["parent-snapshot-id"] = parent_id
        if has_lineage(vm) and vm.next_row_id is not None:
            start = first_row_id if first_row_id is not None else self.first_row_of(rows, vm.next_row_id)
            snap_json["first-row-id"] = start
            snap_json["added-rows"] = max(0, vm.next_row_id - start)
        snap = _Snap(snap_json, log_id, vm.version, vm)
        self.snaps[sid] = snap
        self.added += 1
        return snap

    @staticmethod
    def first_row_of(rows: list[dict[str, Any]], next_row_id: int) -> int:
        """A snapshot's first row id when its parent is unknown: where the ids of the files it
        added start (the counter, if it added none)."""
        added = [
            r["first_row_id"]
            for r in rows
            if r["content"] == avro.DATA and r["added_files_count"] and r["first_row_id"] is not None
        ]
        return min(added) if added else next_row_id

    def parent_id(self, vm: VersionManifest, parent: _Snap | None) -> int | None:
        if vm.parent_version is None:
            return None
        if parent is not None and parent.version == vm.parent_version:
            return parent.id
        blocks = vm.block_commits
        if blocks and vm.version % 64 and vm.parent_version == vm.version - 1:
            return int(blocks[-1][:15], 16) or 1  # the parent's short id (lamina.spec.slot)
        return None

    @staticmethod
    def summary(vm: VersionManifest, rows: list[dict[str, Any]], log_id: str) -> dict[str, str]:
        data = [r for r in rows if r["content"] == avro.DATA]
        deletes = [r for r in rows if r["content"] == avro.DELETES]
        s = vm.summary
        op = _OPERATIONS.get(vm.operation, "overwrite")
        return {
            "operation": op,
            "added-data-files": str(s.get("added-files", 0)),
            "deleted-data-files": str(s.get("removed-files", 0)),
            "total-data-files": str(sum(r["added_files_count"] + r["existing_files_count"] for r in data)),
            "total-delete-files": str(sum(r["added_files_count"] + r["existing_files_count"] for r in deletes)),
            "total-records": str(sum(r["added_rows_count"] + r["existing_rows_count"] for r in data)),
            "total-position-deletes": str(sum(r["added_rows_count"] + r["existing_rows_count"] for r in deletes)),
            "total-equality-deletes": "0",
            VERSION_KEY: str(vm.version),
            COMMIT_KEY: vm.commit_id,
            LOG_KEY: log_id,
            "lamina-operation": vm.operation,
        }

    # -- the metadata file ----------------------------------------------------------------------

    def metadata(
        self, main: VersionManifest, keep: set[int], refs: dict[str, tuple[int, str]], location: str
    ) -> dict[str, Any]:
        snaps = sorted((self.snaps[i] for i in keep), key=lambda s: (s.json["timestamp-ms"], s.json["sequence-number"]))
        head = snapshot_id_of(main.commit_id)
        schema_id, _ = self.schema_id(main)
        spec_id = self.spec_ids(main)[main.partition_spec.spec_id]
        order_id = self.order_id(main)
        used_schemas = {int(s.json["schema-id"]) for s in snaps} | {schema_id}
        schemas = [{**self.schemas.items[i], "schema-id": i} for i in sorted(self.schemas.items) if i in used_schemas]
        specs = [{"spec-id": i, "fields": f} for i, f in sorted(self.specs.items.items())]
        orders = [{"order-id": i, "fields": f} for i, f in sorted(self.orders.items.items())]
        if not any(o["order-id"] == 0 for o in orders):
            orders.insert(0, {"order-id": 0, "fields": []})
        last_seq = max([0, *(int(s.json["sequence-number"]) for s in snaps)])
        next_row = max([0, *(int(s.json.get("first-row-id", 0)) + int(s.json.get("added-rows", 0)) for s in snaps)])
        old = self.head.metadata if self.head else {}
        log_entries = [
            {"timestamp-ms": s.json["timestamp-ms"], "snapshot-id": s.id} for s in snaps if s.log_id == MAIN_BRANCH
        ]
        mlog = list(old.get("metadata-log", []))
        if self.head is not None:
            mlog.append({"timestamp-ms": old.get("last-updated-ms", 0), "metadata-file": self.uri(self.head.path)})
        mlog = mlog[-10:]
        updated = max([now_ms(), *(s.json["timestamp-ms"] for s in snaps)])
        known = [s for i, s in self.lamina_schemas.items() if i in used_schemas]
        try:
            old_mapping = json.loads(old.get("properties", {}).get(NAME_MAPPING, "[]"))
        except ValueError:
            old_mapping = []
        mapping = merge_mappings(old_mapping, name_mapping(known, self.lineage or has_lineage(main)))
        props = {
            NAME_MAPPING: json.dumps(mapping),
            "lamina.view": "read-only: Lamina is the writer of this table",
            "format-version": "3",
        }
        return {
            "format-version": 3,
            "table-uuid": main.table_uuid,
            "location": location,
            "last-sequence-number": last_seq,
            "last-updated-ms": updated,
            "last-column-id": max([main.schema.last_column_id, *(self._last_column(s) for s in schemas)]),
            "current-schema-id": schema_id,
            "schemas": schemas,
            "default-spec-id": spec_id,
            "partition-specs": specs,
            "last-partition-id": max([999, *(f["field-id"] for s in specs for f in s["fields"])]),
            "default-sort-order-id": order_id,
            "sort-orders": orders,
            "properties": props,
            "current-snapshot-id": head,
            "refs": {name: {"snapshot-id": sid, "type": kind} for name, (sid, kind) in sorted(refs.items())},
            "snapshots": [s.json for s in snaps],
            "statistics": [],
            "partition-statistics": [],
            "snapshot-log": log_entries,
            "metadata-log": mlog,
            "next-row-id": next_row,
        }

    @staticmethod
    def _last_column(schema: dict[str, Any]) -> int:
        best = 0

        def walk(t: Any) -> None:
            nonlocal best
            if isinstance(t, dict):
                if t.get("type") == "struct":
                    for f in t["fields"]:
                        best = max(best, f["id"])
                        walk(f["type"])
                elif t.get("type") == "list":
                    best = max(best, t["element-id"])
                    walk(t["element"])
                elif t.get("type") == "map":
                    best = max(best, t["key-id"], t["value-id"])
                    walk(t["key"])
                    walk(t["value"])

        walk(schema)
        return best


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
    b = _Build(io, head)
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
        _known_heads.pop(io.uri, None)
        return None  # another writer's file: start again from it
    _known_heads[io.uri] = Head(number, metadata)
    try:
        _write_hint(io, number, head.number if head else None)
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
    b: _Build,
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
    chain: dict[int, _Snap] = {s.version: s for s in mine}
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
