"""System tables as Arrow: ``$snapshots``, ``$tags``, ``$branches``, ``$files``, ``$manifests``,
``$schemas``.

Spark users get the same tables as DataFrames through ``lamina.spark``; the CLI prints them
(``lamina system``). On a branch's handle ``$snapshots`` lists that branch's versions (and
``$files``/``$manifests`` describe its version); ``$tags`` and ``$branches`` are table-wide.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.branches import BranchStore
from lamina.errors import BranchNotFound, InvalidArgument
from lamina.manifest.entries import manifest_schema_of
from lamina.manifest.tree import live_data_entries, load_root
from lamina.spec import content as C
from lamina.spec.branch import BranchRecord
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.schema import field_id_of
from lamina.spec.version import VersionManifest

if TYPE_CHECKING:
    from lamina.commit.log import VersionLog
    from lamina.table.table import Table

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-system")
_TS = pa.timestamp("ms", "UTC")

SNAPSHOTS_SCHEMA = pa.schema(
    [
        ("version", pa.int64()),
        ("timestamp", _TS),
        ("operation", pa.string()),
        ("parent_version", pa.int64()),
        ("summary", pa.string()),  # JSON
        ("total_files", pa.int64()),
        ("total_records", pa.int64()),
        ("commit_id", pa.string()),
        ("branch", pa.string()),  # the branch whose log holds the version (version numbers are per branch)
    ]
)
BRANCHES_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("branch_id", pa.string()),  # names the branch's log directory; null for main (the table's root log)
        ("base_branch", pa.string()),  # made from a version of this branch (its name then); null for main
        ("base_version", pa.int64()),
        ("head_version", pa.int64()),  # the branch's latest version
        ("head_timestamp", _TS),
        ("head_records", pa.int64()),
        ("created_at", _TS),  # null for main
        ("retain_last", pa.int64()),  # the branch's retention, applied by expire_versions
        ("max_age_ms", pa.int64()),
        ("versions", pa.int64()),  # versions its log holds now (expired ones excluded)
    ]
)
TAGS_SCHEMA = pa.schema(
    [
        ("tag_name", pa.string()),
        ("tagged_version", pa.int64()),
        ("schema_id", pa.int64()),
        ("commit_time", _TS),
        ("record_count", pa.int64()),
        ("created_at", _TS),
        ("expires_at", _TS),
        ("automatic", pa.bool_()),
    ]
)
MANIFESTS_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("kind", pa.string()),
        ("size", pa.int64()),
        ("file_count", pa.int64()),
        ("record_count", pa.int64()),
        ("min_added_version", pa.int64()),
        ("max_added_version", pa.int64()),
    ]
)


def _versions(table: Table) -> list[VersionManifest]:
    """Every existing version, oldest first."""
    log = table.log
    # try_load: a version expired between the listing and the read is simply not there
    return [vm for vm in _pool.map(log.try_load, log.list_versions()) if vm is not None]


def snapshots(table: Table) -> pa.Table:
    """Every existing version, oldest first."""
    vms = _versions(table)
    return pa.table(
        {
            "version": [vm.version for vm in vms],
            "timestamp": [vm.timestamp_ms for vm in vms],
            "operation": [vm.operation for vm in vms],
            "parent_version": [vm.parent_version for vm in vms],
            "summary": [json.dumps(vm.summary, sort_keys=True) for vm in vms],
            "total_files": [int(vm.summary.get("total-files", 0)) for vm in vms],
            "total_records": [int(vm.summary.get("total-records", 0)) for vm in vms],
            "commit_id": [vm.commit_id for vm in vms],
            "branch": [table.branch_name] * len(vms),
        },
        schema=SNAPSHOTS_SCHEMA,
    )


def tags(table: Table) -> pa.Table:
    ts = table.tag_store.list()
    return pa.table(
        {
            "tag_name": [t.name for t in ts],
            "tagged_version": [t.tagged_version for t in ts],
            "schema_id": [t.version.schema.schema_id for t in ts],
            "commit_time": [t.version.timestamp_ms for t in ts],
            "record_count": [int(t.version.summary.get("total-records", 0)) for t in ts],
            "created_at": [t.created_at_ms for t in ts],
            "expires_at": [t.expires_at_ms for t in ts],
            "automatic": [t.automatic for t in ts],
        },
        schema=TAGS_SCHEMA,
    )


def _branch_row(
    table: Table,
    store: BranchStore,
    record: BranchRecord | None,
    count_versions: Callable[[VersionLog, VersionManifest], int],
) -> dict | None:
    """One row of ``$branches``: main's (``record`` None) or a branch's; None for a branch
    deleted since it was listed."""
    if record is None:
        log = table.main.log
        head = log.latest()
    else:
        log = store.log(record, allow_list=table.main.log.allow_list)
        try:
            head = log.latest()
        except BranchNotFound:
            return None
    return {
        "name": MAIN_BRANCH if record is None else record.name,
        "branch_id": None if record is None else record.branch_id,
        "base_branch": None if record is None else record.base_branch,
        "base_version": None if record is None else record.base_version,
        "head_version": head.version,
        "head_timestamp": head.timestamp_ms,
        "head_records": int(head.summary.get("total-records", 0)),
        "created_at": None if record is None else record.created_at_ms,
        "retain_last": None if record is None else record.retain_last,
        "max_age_ms": None if record is None else record.max_age_ms,
        "versions": count_versions(log, head),
    }


def branches(
    table: Table,
    count_versions: Callable[[VersionLog, VersionManifest], int] = lambda log, head: len(log.list_versions()),
) -> pa.Table:
    """Every branch, main first, then the others by name: where each was made from, its
    latest version, its retention and how many versions its log holds (one listing and one
    latest-version read per branch, the branches in parallel; ``count_versions(log, head)``
    counts them, by default by listing: a caller that keeps listings passes its own)."""
    store = BranchStore(table.io)
    records: list[BranchRecord | None] = [None, *store.list()]
    rows = [r for r in _pool.map(lambda rec: _branch_row(table, store, rec, count_versions), records) if r is not None]
    return pa.Table.from_pylist(rows, schema=BRANCHES_SCHEMA)


def files(table: Table, vm: VersionManifest) -> pa.Table:
    """Live data files of ``vm`` with their statistics, bounds keyed by column name."""
    mschema = manifest_schema_of(vm)
    e = live_data_entries(table.io, vm.root_manifest, mschema, inline=vm.root_inline)
    out = {
        "path": e.column("path"),
        "size": e.column("size"),
        "record_count": e.column("record_count"),
        "added_version": e.column("added_version"),
        "spec_id": e.column("spec_id"),  # the partition spec the file was written with
        "partition": e.column("partition_path"),
        "dv_path": e.column("dv_path"),
        "dv_cardinality": e.column("dv_cardinality"),
    }
    for f in vm.schema.arrow:
        fid = field_id_of(f)
        for prefix, col in (("lower", C.min_col(fid)), ("upper", C.max_col(fid)), ("null_count", C.nulls_col(fid))):
            if col in e.column_names:
                out[f"{prefix}.{f.name}"] = e.column(col)
    return pa.table(out)


def manifests(table: Table, vm: VersionManifest) -> pa.Table:
    """The root manifest of ``vm`` and the leaves it references."""
    if vm.root_manifest is None:
        return MANIFESTS_SCHEMA.empty_table()
    root = load_root(table.io, vm.root_manifest, manifest_schema_of(vm), vm.root_inline)
    leaves = root.filter(pc.equal(root.column("content"), C.LEAF))
    inline = root.filter(
        pc.and_(pc.equal(root.column("content"), C.DATA), pc.not_equal(root.column("status"), C.REMOVED))
    )
    root_row = pa.table(
        {
            "path": [vm.root_manifest],
            "kind": ["root"],
            # a root its version manifest carries: the size of its bytes there
            "size": [table.io.size(vm.root_manifest) if vm.root_inline is None else len(vm.root_inline)],
            "file_count": [inline.num_rows],
            "record_count": [int(pc.sum(inline.column("record_count")).as_py() or 0)],
            "min_added_version": [pc.min(inline.column("added_version")).as_py() if inline.num_rows else None],
            "max_added_version": [pc.max(inline.column("added_version")).as_py() if inline.num_rows else None],
        },
        schema=MANIFESTS_SCHEMA,
    )
    leaf_rows = pa.table(
        {
            "path": leaves.column("path"),
            "kind": pa.array(["leaf"] * leaves.num_rows, pa.string()),
            "size": leaves.column("size"),
            "file_count": leaves.column("file_count"),
            "record_count": leaves.column("record_count"),
            "min_added_version": leaves.column("added_version"),
            "max_added_version": leaves.column("max_added_version"),
        },
        schema=MANIFESTS_SCHEMA,
    )
    return pa.concat_tables([root_row, leaf_rows])


SCHEMA_COLUMN = pa.struct(
    [
        ("path", pa.string()),
        ("field_id", pa.int64()),
        ("type", pa.string()),
        ("required", pa.bool_()),
        ("doc", pa.string()),
        ("initial_default", pa.string()),
        ("physical_name", pa.string()),
    ]
)
SCHEMAS_SCHEMA = pa.schema(
    [
        ("schema_id", pa.int64()),
        ("first_version", pa.int64()),  # the oldest existing version with this schema
        ("last_version", pa.int64()),
        ("versions", pa.int64()),  # how many existing versions have it
        ("columns", pa.list_(SCHEMA_COLUMN)),  # every field at any depth, by dotted path
    ]
)


def schemas(table: Table) -> pa.Table:
    """Every schema the existing versions have, oldest first, with its columns."""
    seen: dict[int, dict] = {}
    for vm in _versions(table):
        sid = vm.schema.schema_id
        row = seen.get(sid)
        if row is None:
            cols = [{k: c[k] for k in SCHEMA_COLUMN.names} for c in vm.schema.describe()]
            seen[sid] = {
                "schema_id": sid,
                "first_version": vm.version,
                "last_version": vm.version,
                "versions": 1,
                "columns": cols,
            }
        else:
            row["last_version"] = vm.version
            row["versions"] += 1
    return pa.Table.from_pylist(list(seen.values()), schema=SCHEMAS_SCHEMA)


SYSTEM_TABLES = ("snapshots", "tags", "branches", "files", "manifests", "schemas")


def system_table(table: Table, name: str, vm: VersionManifest | None = None) -> pa.Table:
    key = name.lstrip("$").lower()
    if key == "snapshots":
        return snapshots(table)
    if key == "tags":
        return tags(table)
    if key == "branches":
        return branches(table)
    if key == "schemas":
        return schemas(table)
    if key == "files":
        return files(table, vm or table.metadata)
    if key == "manifests":
        return manifests(table, vm or table.metadata)
    raise InvalidArgument(f"no system table {name!r}; there are {', '.join('$' + n for n in SYSTEM_TABLES)}")
