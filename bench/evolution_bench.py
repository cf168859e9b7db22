#!/usr/bin/env python
"""Schema evolution benchmarks of issue 14, in one run.

    .venv/bin/python bench/evolution_bench.py            # full run -> "## Schema evolution (issue 14)" in BENCHMARKS.md
    .venv/bin/python bench/evolution_bench.py --quick    # smoke test -> bench/out/BENCHMARKS.evolution.md
    .venv/bin/python bench/evolution_bench.py --profile  # + cProfile of Lamina's schema changes -> bench/out/

1. **Schema change commit** (Lamina vs pyiceberg vs deltalake): each system gets a table with
   `--versions` (1,000) versions on top of the empty one and `--files-per-commit` (10) data files
   registered per version (10,000 files), built as cheaply as each system allows, all holding the
   same file entries (file i covers ids [i*1024, (i+1)*1024), with id statistics; no data file exists:
   a schema change reads no data file):
   - Lamina: `t.add_files(entries, check_files=False)` per version (as bench/compare_revisions.py's
     plan table);
   - pyiceberg (SqlCatalog on SQLite, as bench/systems.py): `tx.update_snapshot().fast_append()` with
     `append_data_file(DataFile(...))` per snapshot, the snapshots of each block of 100 staged in one
     transaction (one catalog commit per 100 snapshots: committing every snapshot alone costs ~1 s
     each at this length of history, see BENCHMARKS.md section 1);
   - deltalake: `dt.create_write_transaction([AddAction(...)], mode="append", schema=...)` per version
     (one real Delta commit each, default post-commit hooks: a checkpoint every 100 versions).
   Then the systems take turns in blocks (order rotating every round): one untimed schema change
   (re-warm after another library's turn), then `--block` timed ones, each adding a new nullable
   int64 column through a long-lived handle:
   Lamina `t.update_schema().add_column(name, pa.int64()).commit()`;
   pyiceberg `table.update_schema().add_column(name, LongType()).commit()`;
   deltalake `dt.alter.add_columns(Field(name, "long", nullable=True))`.
   Each system first makes untimed changes on a small table of its own (imports, lazy start-up).
   Figure: p50 (and p25-p75) of the timed changes; target Lamina <= 0.5x the best peer. Afterwards
   each table is reopened and must show every added column and one new version per change.
2. **Read across schema versions** (Lamina only): a table whose `--read-files` (100) files were
   written under 10 schema versions (10 files each; between them: added columns, a rename, a
   widening int32 -> int64) against a table holding the same rows written with the final schema
   in the same 100-file layout. Read in alternating pairs (order flipped every pair): Arrow
   `t.scan().to_arrow()` and the Spark fast path `lamina.spark.read(spark, uri)` (all rows,
   `write.format("noop")`). Target: the evolved table reads at >= 0.9x the speed of the
   single-schema one (ratio = single-schema time / evolved time). Both tables' contents are
   checked equal.

Only the `## Schema evolution (issue 14)` section of BENCHMARKS.md is replaced (a full
`bench/run.py` run rewrites the file: re-run this script after it). Tracebacks go to
bench/out/errors.log, raw numbers to bench/out/evolution_results.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402,F401  (sys.path for lamina)
from common import (  # noqa: E402
    OUT_DIR, SCHEMA, Section, Workspace, add_only_arg, add_out_arg, begin_run, bench_parser, comma_list,
    command_line, err_text, flush_lamina_hints, fmt_s, loadavg, log_error, md_notes, md_table, now, p50,
    print_rich, profile_dump, profile_start, replace_md_section, report_path, rotated, say, standalone_header,
    synthetic_data_files, verdict, write_results,
)
import systems  # noqa: E402

SECTION_TITLE = "Schema evolution (issue 14)"
BENCHES = ["commit", "read"]
COMMITTERS = ["lamina", "pyiceberg", "deltalake"]
FILE_ROWS = 1024  # rows each synthetic file entry claims to hold
TARGET_COMMIT = "Lamina ≤ 0.5× the best peer"
TARGET_READ = "evolved ≥ 0.9× the speed of single-schema"
ICEBERG_TX_SNAPSHOTS = 100  # snapshots staged per pyiceberg transaction while building


# --------------------------------------------------------------------------- config
@dataclass
class Config:
    quick: bool
    versions: int = 1000  # commits of file entries on top of the empty table
    files_per_commit: int = 10
    rounds: int = 20  # turns of each system
    block: int = 5  # timed schema changes per turn
    warm_changes: int = 3  # untimed changes on a small table before the first turn
    read_files: int = 100
    read_file_rows: int = 50_000
    schema_versions: int = 10
    read_pairs: int = 10  # timed (evolved, single) pairs per reader
    spark: bool = True
    profile: bool = False

    @classmethod
    def make(cls, args) -> "Config":
        cfg = cls(quick=args.quick, profile=args.profile, spark=not args.no_spark)
        if args.quick:
            cfg.versions, cfg.rounds, cfg.block, cfg.read_file_rows, cfg.read_pairs = 100, 3, 3, 2_000, 3
        for k in ("versions", "files_per_commit", "rounds", "block", "read_files", "read_file_rows", "read_pairs"):
            if getattr(args, k) is not None:
                setattr(cfg, k, getattr(args, k))
        return cfg


# =========================================================================== 1. schema change commit
def file_entries(first: int, n: int) -> pa.Table:
    """The entries of files first..first+n-1 (bench/common.synthetic_data_files: path, size, record_count,
    id statistics); every system registers the same ones."""
    return synthetic_data_files(first, n, FILE_ROWS)


class LaminaCommits:
    name = "lamina"
    call = "`t.update_schema().add_column(name, pa.int64()).commit()`"
    build_how = "`t.add_files(entries, check_files=False)` per version"

    def uri(self, root):
        return os.path.join(root, "t")

    def build(self, root, versions, per_commit):
        import lamina

        t = lamina.create_table(self.uri(root), SCHEMA)
        for v in range(versions):
            t.add_files(file_entries(v * per_commit, per_commit), check_files=False)
        flush_lamina_hints()

    def open(self, root):
        import lamina

        return lamina.open_table(self.uri(root))

    def add_column(self, h, name):
        h.update_schema().add_column(name, pa.int64()).commit()
        return h

    def state(self, root) -> dict:
        t = self.open(root)
        return {"version": int(t.version), "columns": list(t.schema.names), "files": len(t.scan().plan())}


class IcebergCommits:
    name = "pyiceberg"
    call = "`table.update_schema().add_column(name, LongType()).commit()` (SqlCatalog on SQLite)"
    build_how = (
        "what `fast_append` does per snapshot — one manifest of the new files (`write_manifest`), a manifest "
        "list of every manifest so far (`write_manifest_list`), a `Snapshot` with the summary "
        "`update_snapshot_summaries` makes — staged as `AddSnapshotUpdate` + `SetSnapshotRefUpdate('main')` "
        f"and committed through `catalog.commit_table` {ICEBERG_TX_SNAPSHOTS} snapshots at a time "
        "(pyiceberg's own `fast_append` re-applies every staged update of a transaction per snapshot and "
        "deep-copies the metadata per commit: 1,000 snapshots took 9 min that way)"
    )

    def __init__(self):
        self.sys = systems.PyIceberg()

    def build(self, root, versions, per_commit):
        import time
        import uuid

        from pyiceberg.conversions import to_bytes
        from pyiceberg.manifest import (
            DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus, write_manifest, write_manifest_list,
        )
        from pyiceberg.table import TableProperties
        from pyiceberg.table.refs import SnapshotRefType
        from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
        from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
        from pyiceberg.typedef import Record
        from pyiceberg.types import LongType

        t = self.sys.create(root)
        schema, spec, io = t.schema(), t.spec(), t.io
        id_field = schema.find_field("id").field_id
        meta_dir = f"{t.metadata.location}/metadata"
        codec = t.metadata.properties.get(TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
        manifests, updates, parent, summary = [], [], None, None
        ts0 = int(time.time() * 1000)
        for v in range(versions):
            seq, snap_id, tag = v + 1, 10_000_000 + v, uuid.uuid4()
            e = file_entries(v * per_commit, per_commit).to_pydict()
            files = [
                DataFile.from_args(
                    content=DataFileContent.DATA, file_path=f"{t.metadata.location}/{path}", file_format=FileFormat.PARQUET,
                    partition=Record(), record_count=rows, file_size_in_bytes=size,
                    lower_bounds={id_field: to_bytes(LongType(), lo)}, upper_bounds={id_field: to_bytes(LongType(), hi)},
                    null_value_counts={id_field: 0}, value_counts={id_field: rows},
                )
                for path, size, rows, lo, hi in zip(e["path"], e["size"], e["record_count"], e["lower.id"], e["upper.id"])
            ]
            with write_manifest(2, spec, schema, io.new_output(f"{meta_dir}/{tag}-m0.avro"), snap_id, codec) as w:
                for f in files:
                    w.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snap_id, data_file=f))
            m = w.to_manifest_file()
            m.sequence_number = m.min_sequence_number = seq  # what the manifest list assigns (later lists keep it)
            manifests.insert(0, m)  # newest first, as fast_append lists them
            list_path = f"{meta_dir}/snap-{snap_id}-0-{tag}.avro"
            with write_manifest_list(2, io.new_output(list_path), snap_id, parent, seq, codec) as lw:
                lw.add_manifests(manifests)
            ssc = SnapshotSummaryCollector()
            for f in files:
                ssc.add_file(f, spec, schema)
            summary = update_snapshot_summaries(Summary(Operation.APPEND, **ssc.build()), summary)
            snap = Snapshot(
                snapshot_id=snap_id, parent_snapshot_id=parent, sequence_number=seq, timestamp_ms=ts0 + v,
                manifest_list=list_path, summary=summary, schema_id=schema.schema_id,
            )
            updates += [
                AddSnapshotUpdate(snapshot=snap),
                SetSnapshotRefUpdate(ref_name="main", type=SnapshotRefType.BRANCH, snapshot_id=snap_id),
            ]
            if len(updates) == 2 * ICEBERG_TX_SNAPSHOTS or v == versions - 1:
                first_parent = updates[0].snapshot.parent_snapshot_id
                t.catalog.commit_table(t, (AssertRefSnapshotId(ref="main", snapshot_id=first_parent),), tuple(updates))
                t = self.sys.open(root)
                updates = []
            parent = snap_id

    def open(self, root):
        return self.sys.open(root)

    def add_column(self, h, name):
        from pyiceberg.types import LongType

        h.update_schema().add_column(name, LongType()).commit()
        return h

    def state(self, root) -> dict:
        t = self.open(root)
        return {"version": len(t.metadata.snapshots), "columns": [f.name for f in t.schema().fields],
                "files": len(t.inspect.files()), "metadata_log": len(t.metadata.metadata_log)}


class DeltaCommits:
    name = "deltalake"
    call = "`dt.alter.add_columns(Field(name, \"long\", nullable=True))`"
    build_how = (
        "version 1 by `dt.create_write_transaction([AddAction(...)], mode=\"append\", schema=...)`; versions "
        "2.. written as the same JSON commit files (delta-rs's own lines, with the next file entries and "
        "timestamps), and a checkpoint wherever delta-rs's default post-commit hook makes one (every 100th "
        "version, by `DeltaTable(uri, version=v).create_checkpoint()`). One `create_write_transaction` per "
        "version took 3.4 min for 1,000 versions"
    )

    def uri(self, root):
        return os.path.join(root, "t")

    def build(self, root, versions, per_commit):
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction

        def actions(v):
            e = file_entries(v * per_commit, per_commit).to_pydict()
            return [
                (path, size, json.dumps({"numRecords": rows, "minValues": {"id": lo}, "maxValues": {"id": hi}, "nullCount": {"id": 0}}))
                for path, size, rows, lo, hi in zip(e["path"], e["size"], e["record_count"], e["lower.id"], e["upper.id"])
            ]

        uri = self.uri(root)
        dt = DeltaTable.create(uri, schema=SCHEMA)
        mtime = 1_700_000_000_000
        dt.create_write_transaction([AddAction(p, n, {}, mtime, True, st) for p, n, st in actions(0)], mode="append", schema=SCHEMA)
        log = os.path.join(uri, "_delta_log")
        lines = [json.loads(x) for x in open(os.path.join(log, f"{1:020d}.json"))]
        info = next(x for x in lines if "commitInfo" in x)
        add = next(x for x in lines if "add" in x)["add"]
        ts0 = info["commitInfo"]["timestamp"]
        interval = int(dt.metadata().configuration.get("delta.checkpointInterval", 100))
        for v in range(1, versions):
            version = v + 1
            info["commitInfo"]["timestamp"] = ts0 + v
            out = [json.dumps(info, separators=(",", ":"))] + [
                json.dumps({"add": dict(add, path=p, size=n, stats=st)}, separators=(",", ":")) for p, n, st in actions(v)
            ]
            with open(os.path.join(log, f"{version:020d}.json"), "x") as f:
                f.write("\n".join(out) + "\n")
            if (version + 1) % interval == 0:
                DeltaTable(uri, version=version).create_checkpoint()

    def open(self, root):
        from deltalake import DeltaTable

        return DeltaTable(self.uri(root))

    def add_column(self, h, name):
        from deltalake import Field

        h.alter.add_columns(Field(name, "long", nullable=True))
        return h

    def state(self, root) -> dict:
        dt = self.open(root)
        log = os.listdir(os.path.join(self.uri(root), "_delta_log"))
        return {"version": int(dt.version()), "columns": [f.name for f in dt.schema().fields],
                "files": len(dt.file_uris()), "checkpoints": sum(1 for x in log if ".checkpoint." in x)}


COMMIT_ADAPTERS = {"lamina": LaminaCommits, "pyiceberg": IcebergCommits, "deltalake": DeltaCommits}


def worker_build(argv) -> None:
    """Build one system's table (and its small warm-up table); print the seconds the big one took."""
    name, root, warm_root, versions, per_commit = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    a = COMMIT_ADAPTERS[name]()
    t0 = now()
    a.build(root, versions, per_commit)
    took = now() - t0
    a.build(warm_root, 2, per_commit)
    print(json.dumps({"build_s": took}), flush=True)


def build_commit_tables(ws: Workspace, cfg: Config, names: list[str]) -> dict:
    """Each system's table built in its own process, all at once."""
    built, procs = {}, {}
    for name in names:
        b = built[name] = {"root": ws.new(f"{name}-big"), "warm": ws.new(f"{name}-warm")}
        args = [name, b["root"], b["warm"], str(cfg.versions), str(cfg.files_per_commit)]
        procs[name] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "build", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    for name, p in procs.items():
        o, e = p.communicate(timeout=1800)
        b = built[name]
        if p.returncode != 0:
            tail = (e or o).strip().splitlines()
            b["error"] = (tail[-1] if tail else f"build exit {p.returncode}")[:160]
            log_error(f"commit/{name}/build", RuntimeError(e[-5000:]))
            say(f"  {name}: build failed: {b['error']}")
            continue
        b["build_s"] = json.loads(o.strip().splitlines()[-1])["build_s"]
        try:
            b["state"] = COMMIT_ADAPTERS[name]().state(b["root"])
            say(f"  {name}: built in {fmt_s(b['build_s'])}: version {b['state']['version']}, {b['state']['files']:,} files")
        except Exception as e:  # noqa: BLE001
            log_error(f"commit/{name}/state", e)
            b["error"] = err_text(e)
    return built
