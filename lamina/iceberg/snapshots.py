"""Building the view's metadata: each Lamina version as an Iceberg snapshot (its manifest
list, its manifests carried from its parent's snapshot where unchanged or converted by
``lamina.iceberg.manifests``, its deletion vectors found in or written into Puffin files),
and the metadata file's document over the snapshots kept."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import NotFound
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
from lamina.iceberg.metadata_files import Head, relative_path
from lamina.iceberg.types import check_supported, iceberg_schema, merge_mappings, name_mapping
from lamina.io import FileIO
from lamina.manifest.entries import conform, manifest_schema_of
from lamina.manifest.files import read_manifest
from lamina.manifest.tree import load_root
from lamina.spec import content as C
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.lineage import has_lineage
from lamina.spec.sort import effective_sort_order
from lamina.spec.version import VersionManifest
from lamina.timeutil import now_ms

__all__ = ["COMMIT_KEY", "CREATED_BY", "LOG_KEY", "VERSION_KEY", "Build", "Snap", "snapshot_id_of"]

NAME_MAPPING = "schema.name-mapping.default"
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


def snapshot_id_of(commit_id: str) -> int:
    """The Iceberg snapshot id of the version committed as ``commit_id``: its first 60 bits
    (positive, unique as the commit id is, the same whoever derives it)."""
    return int(commit_id[:15], 16) or 1


_rows_cache: dict[str, list[dict[str, Any]]] = {}  # manifest list URI -> its rows (immutable files)
_ROWS_CACHE_MAX = 256


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
class Snap:
    """A snapshot of the view and what it was built from."""

    json: dict[str, Any]
    log_id: str  # "main" or a branch id
    version: int
    vm: VersionManifest | None = None  # None: carried from the previous metadata file

    @property
    def id(self) -> int:
        return int(self.json["snapshot-id"])


class Build:
    """One attempt of a sync: the view's previous metadata and what this attempt adds."""

    def __init__(self, io: FileIO, head: Head | None) -> None:
        self.io = io
        self.head = head
        old = head.metadata if head else {}
        self.uri = io.full_uri
        self.snaps: dict[int, Snap] = {}
        for s in old.get("snapshots", []):
            summary = s.get("summary", {})
            if VERSION_KEY in summary:
                self.snaps[int(s["snapshot-id"])] = Snap(
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

    def rows_of(self, snap: Snap | None) -> list[dict[str, Any]]:
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

    def snapshot(self, vm: VersionManifest, log_id: str, parent: Snap | None) -> Snap:
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
        snap = Snap(snap_json, log_id, vm.version, vm)
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

    def parent_id(self, vm: VersionManifest, parent: Snap | None) -> int | None:
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
