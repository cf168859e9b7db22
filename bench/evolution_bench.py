"""Schema evolution benchmarks of issue 14, in one run (the case `evolution`; --profile adds a
cProfile of Lamina's schema changes and Arrow reads -> bench/out/evolution_*).

1. **Schema change commit** (Lamina vs pyiceberg vs deltalake): each system gets a table with
   `versions` (1,000) versions on top of the empty one and `files_per_commit` (10) data files
   registered per version (10,000 files), built as cheaply as each system allows, all holding the
   same file entries (file i covers ids [i*1024, (i+1)*1024), with id statistics; no data file exists:
   a schema change reads no data file):
   - Lamina: `t.add_files(entries, check_files=False)` per version (as bench/compare_revisions.py's
     plan table);
   - pyiceberg (SqlCatalog on SQLite, as bench/systems.py): per snapshot what `fast_append` writes (a
     manifest of the new files, a manifest list of every manifest so far, a Snapshot with pyiceberg's
     summary), committed through `catalog.commit_table` 100 snapshots at a time (pyiceberg's own
     `fast_append` per snapshot took 9 min for 1,000 here: it deep-copies the metadata per update);
   - deltalake: version 1 by `dt.create_write_transaction([AddAction(...)], ...)`, versions 2.. as the
     same JSON commit lines written directly, checkpoints where delta-rs's post-commit hook puts them
     (one `create_write_transaction` per version took 3.4 min).
   Then the systems take turns in blocks (order rotating every round): one untimed schema change
   (re-warm after another library's turn), then `block` timed ones, each adding a new nullable
   int64 column through a long-lived handle:
   Lamina `t.update_schema().add_column(name, pa.int64()).commit()`;
   pyiceberg `table.update_schema().add_column(name, LongType()).commit()`;
   deltalake `dt.alter.add_columns(Field(name, "long", nullable=True))`.
   Each system first makes untimed changes on a small table of its own (imports, lazy start-up).
   Figure: p50 (and p25-p75) of the timed changes; target Lamina <= 0.5x the best peer. Afterwards
   each table is reopened and must show every added column and one new version per change.
2. **Read across schema versions** (Lamina only): a table whose `read_files` (100) files were
   written under 10 schema versions (10 files each; between them: added columns, a rename, a
   widening int32 -> int64) against a table holding the same rows written with the final schema
   in the same 100-file layout. Read in alternating pairs (order flipped every pair): Arrow
   `t.scan().to_arrow()` and the Spark fast path `lamina.spark.read(spark, uri)` (all rows,
   `write.format("noop")`). Target: the evolved table reads at >= 0.9x the speed of the
   single-schema one (ratio = single-schema time / evolved time). Both tables' contents are
   checked equal (`--set spark=false` leaves the Spark reads out).

--only picks the committers (lamina, pyiceberg, deltalake) and the parts (commit, read).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

import systems
from common import (
    SCHEMA, Workspace, err_text, flush_lamina_hints, fmt_s, log_error, now, p50, profile_dump, profile_start, rotated,
    run_workers_at_once, say, synthetic_data_files,
)
from registry import Run, case, module
from report import Report, Section, Target, verdict

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
    versions: int = 1000  # commits of file entries on top of the empty table
    files_per_commit: int = 10
    rounds: int = 20  # turns of each system
    block: int = 5  # timed schema changes per turn
    warm_changes: int = 3  # untimed changes on a small table before the first turn
    read_files: int = 100
    read_file_rows: int = 50_000
    schema_versions: int = 10
    read_pairs: int = 10  # timed (evolved, single) pairs per reader
    spark: bool = True  # the Spark fast-path reads
    profile: bool = False


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
        with open(os.path.join(log, f"{1:020d}.json")) as f:
            lines = [json.loads(x) for x in f]
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


def worker_build(argv: list[str]) -> dict:
    """Build one system's table (and its small warm-up table); print the seconds the big one took."""
    name, root, warm_root, versions, per_commit = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    a = COMMIT_ADAPTERS[name]()
    t0 = now()
    a.build(root, versions, per_commit)
    took = now() - t0
    a.build(warm_root, 2, per_commit)
    return {"build_s": took}


def build_commit_tables(ws: Workspace, cfg: Config, names: list[str]) -> dict:
    """Each system's table built in its own process, all at once."""
    built = {name: {"root": ws.new(f"{name}-big"), "warm": ws.new(f"{name}-warm")} for name in names}
    args = {name: [name, b["root"], b["warm"], str(cfg.versions), str(cfg.files_per_commit)] for name, b in built.items()}
    for name, got in run_workers_at_once("evolution_bench:worker_build", args, 1800, "commit/build").items():
        b = built[name]
        if "error" in got:
            b["error"] = got["error"]
            say(f"  {name}: build failed: {b['error']}")
            continue
        b["build_s"] = got["build_s"]
        try:
            b["state"] = COMMIT_ADAPTERS[name]().state(b["root"])
            say(f"  {name}: built in {fmt_s(b['build_s'])}: version {b['state']['version']}, {b['state']['files']:,} files")
        except Exception as e:  # noqa: BLE001
            log_error(f"commit/{name}/state", e)
            b["error"] = err_text(e)
    return built


def warm_up(a, warm_root: str, n: int, prefix: str) -> None:
    """n untimed schema changes on the system's small table (imports, lazy start-up)."""
    h = a.open(warm_root)
    for i in range(n):
        h = a.add_column(h, f"{prefix}{i}")


def bench_commit(ws: Workspace, cfg: Config, names: list[str]) -> dict:
    say(f"building the tables: {cfg.versions:,} versions x {cfg.files_per_commit} file entries, one process per system")
    built = build_commit_tables(ws, cfg, names)
    res: dict = {"built": {n: {k: v for k, v in b.items() if k not in ("root", "warm")} for n, b in built.items()}}
    live = [n for n in names if "error" not in built[n]]
    adapters = {n: COMMIT_ADAPTERS[n]() for n in live}
    handles, lat, untimed = {}, {n: [] for n in live}, {n: 0 for n in live}
    for n in list(live):
        try:
            warm_up(adapters[n], built[n]["warm"], cfg.warm_changes, "warm_")
            handles[n] = adapters[n].open(built[n]["root"])
        except Exception as e:  # noqa: BLE001
            log_error(f"commit/{n}/warm", e)
            res.setdefault("errors", {})[n] = err_text(e)
            live.remove(n)
    for rnd in range(cfg.rounds):
        order = rotated(live, rnd)
        for n in order:
            a = adapters[n]
            try:
                handles[n] = a.add_column(handles[n], f"u_{rnd}")  # untimed: re-warm after another library's turn
                untimed[n] += 1
                for i in range(cfg.block):
                    name = f"c_{rnd}_{i}"
                    t0 = now()
                    handles[n] = a.add_column(handles[n], name)
                    lat[n].append(now() - t0)
            except Exception as e:  # noqa: BLE001
                log_error(f"commit/{n}/round{rnd}", e)
                res.setdefault("errors", {})[n] = err_text(e)
                live.remove(n)
        say(f"round {rnd + 1}/{cfg.rounds} ({', '.join(order)}): " + ", ".join(
            f"{n} p50 {fmt_s(p50(lat[n][-cfg.block:]))}" for n in order if lat[n]))
    res["lat"] = lat
    # Every change must be visible after a reopen: all added columns, and (Lamina, deltalake) one version each.
    checks = {}
    for n in adapters:
        try:
            st = adapters[n].state(built[n]["root"])
            want = [f"u_{r}" for r in range(cfg.rounds)] + [f"c_{r}_{i}" for r in range(cfg.rounds) for i in range(cfg.block)]
            missing = sorted(set(want) - set(st["columns"]))
            base = built[n]["state"]["version"]
            changes = untimed[n] + len(lat[n])
            checks[n] = {
                "columns_missing": len(missing), "version_before": base, "version_after": st["version"], "changes": changes,
                "ok": not missing and (n == "pyiceberg" or st["version"] == base + changes),
            }
        except Exception as e:  # noqa: BLE001
            log_error(f"commit/{n}/check", e)
            checks[n] = {"ok": False, "error": err_text(e)}
    res["checks"] = checks
    if cfg.profile and "lamina" in handles:
        # Where a Lamina schema change's time goes, and how it grows with the schema's width: CPU time per
        # change and per step, on the small warm-up table and on the big table after the timed rounds.
        res["phases"] = {
            "small table": lamina_phases(adapters["lamina"], adapters["lamina"].open(built["lamina"]["warm"]), 30),
            "big table after the rounds": lamina_phases(adapters["lamina"], handles["lamina"], 30),
        }
        for k, v in res["phases"].items():
            say(f"  lamina phases, {k}: {v}")
        prof = profile_start(True)
        for i in range(50):
            handles["lamina"] = adapters["lamina"].add_column(handles["lamina"], f"prof_{i}")
        profile_dump(prof, "evolution_commit_lamina")
        say("profile of 50 Lamina schema changes: bench/out/evolution_commit_lamina_profile.txt")
    return res


def lamina_phases(a, h, n: int) -> dict:
    """CPU ms per schema change of n changes through handle h, and of the steps that grow with the schema's
    width (timers around them, removed afterwards)."""
    import functools
    import time

    import lamina.commit.base as base_mod
    import lamina.commit.committer as committer_mod
    import lamina.operations.schema as schema_ops

    steps = {
        "apply_schema_changes (in add_column and again at commit)": (schema_ops, "apply_schema_changes"),
        "Committer._apply_tree (root manifest rewritten in the new manifest schema)": (committer_mod.Committer, "_apply_tree"),
        "Base.empty (empty entries table of the manifest schema)": (base_mod.Base, "empty"),
        "Committer._publish (version file)": (committer_mod.Committer, "_publish"),
    }
    acc = dict.fromkeys(steps, 0.0)
    saved = {k: getattr(owner, attr) for k, (owner, attr) in steps.items()}

    def timed(key, f):
        @functools.wraps(f)
        def g(*args, **kw):
            t0 = time.process_time()
            try:
                return f(*args, **kw)
            finally:
                acc[key] += time.process_time() - t0
        return g

    for k, (owner, attr) in steps.items():
        setattr(owner, attr, timed(k, saved[k]))
    try:
        cols = len(h.schema)
        c0, w0 = time.process_time(), now()
        for i in range(n):
            h = a.add_column(h, f"phase_{time.time_ns()}_{i}")
        cpu, wall = (time.process_time() - c0) / n, (now() - w0) / n
    finally:
        for k, (owner, attr) in steps.items():
            setattr(owner, attr, saved[k])
    return {"columns": f"{cols}→{cols + n}", "cpu_ms": round(cpu * 1e3, 2), "wall_ms": round(wall * 1e3, 2)} | {
        k: round(v / n * 1e3, 2) for k, v in acc.items()}


def quantile(xs, q):
    return float(np.quantile(np.asarray(xs), q)) if xs else None


def fmt_x(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×" if x < 10 else f"{x:.0f}×"


def summarise_commit(cfg: Config, res: dict, names: list[str]) -> tuple[Section, bool | None]:
    lat = res.get("lat", {})
    med = {n: p50(lat.get(n, [])) for n in names}
    peers = [n for n in names if n != "lamina" and med.get(n) is not None]
    best = min(peers, key=lambda n: med[n]) if peers else None
    ratio = med["lamina"] / med[best] if best and med.get("lamina") else None
    ok = None if ratio is None else ratio <= 0.5 and all(c.get("ok") for c in res.get("checks", {}).values())
    sec = Section(
        key="commit",
        title=f"Schema change commit on a table with {cfg.versions:,} versions and {cfg.versions * cfg.files_per_commit:,} files",
        what=(
            f"Each system's table: the empty table, then {cfg.versions:,} versions each registering {cfg.files_per_commit} "
            f"data-file entries ({cfg.versions * cfg.files_per_commit:,} files; file i claims ids [i·{FILE_ROWS}, (i+1)·{FILE_ROWS}) "
            "with id statistics; no data file exists — a schema change reads none), same entries for all. Built: "
            + "; ".join(f"**{n}** {COMMIT_ADAPTERS[n].build_how}" for n in names)
            + f". Then {cfg.rounds} rounds; in each, every system in turn (order rotating) makes one untimed schema change "
            f"(re-warm after another library's turn) and {cfg.block} timed ones, each adding a new nullable int64 "
            "column through one long-lived handle: "
            + "; ".join(f"{n} {COMMIT_ADAPTERS[n].call}" for n in names)
            + f". Before the first round each system makes {cfg.warm_changes} untimed changes on a small table of its own. "
            "Each figure is over the timed changes of the whole run; ratio = peer / Lamina (>1: Lamina is faster)."
        ),
        columns=["system", "timed changes", "p50", "p25–p75", "min", "ratio peer / Lamina (p50)", "after reopen", "target"],
    )
    for n in names:
        xs = lat.get(n, [])
        err = res.get("built", {}).get(n, {}).get("error") or res.get("errors", {}).get(n)
        if not xs:
            sec.error_row(n, err or "no figures")
            continue
        c = res.get("checks", {}).get(n, {})
        chk = (
            f"{c['changes']} columns present, version {c['version_before']:,} → {c['version_after']:,}"
            if "changes" in c and not c.get("columns_missing") else f"CHECK FAILED: {c}"
        )
        tgt = "–"
        if n == "lamina":
            tgt = f"{TARGET_COMMIT}: {verdict(ok)}" + (f" ({fmt_x(ratio)} of {best})" if ratio is not None else "")
        sec.rows.append([
            n, str(len(xs)), fmt_s(med[n]), f"{fmt_s(quantile(xs, 0.25))}–{fmt_s(quantile(xs, 0.75))}", fmt_s(min(xs)),
            "–" if n == "lamina" else fmt_x(med[n] / med["lamina"] if med.get("lamina") else None),
            chk + (f"; {err}" if err else ""), tgt,
        ])
    if ratio is not None:
        sec.notes.append(
            f"Target (issue 14): schema change commit p50 {TARGET_COMMIT} — {verdict(ok)}: Lamina {fmt_s(med['lamina'])} / "
            f"{best} {fmt_s(med[best])} = {fmt_x(ratio)}."
        )
    sec.notes.append(
        "pyiceberg has no integer versions: its *version* is the snapshot count, which a schema change leaves alone "
        "(the change writes a new metadata.json and swaps the catalog pointer); Lamina's and deltalake's versions "
        "must grow by one per change (checked), and every added column must be in the reopened schema (checked)."
    )
    for k, v in res.get("phases", {}).items():
        sec.notes.append(
            f"Lamina, {k} (`--profile`): {v['columns']} columns, {v['cpu_ms']} ms CPU per change (wall {v['wall_ms']} ms); "
            + ", ".join(f"{s} {ms} ms" for s, ms in v.items() if s not in ("columns", "cpu_ms", "wall_ms")) + "."
        )
    b = res.get("built", {})
    sec.notes.append(
        "Building the tables (untimed, the builds ran at the same time, one process each): "
        + "; ".join(
            f"{n} {fmt_s(b[n].get('build_s'))} (" + ", ".join(f"{k} {v:,}" for k, v in b[n].get("state", {}).items() if k != "columns") + ")"
            for n in names if b.get(n, {}).get("build_s")
        )
        + "."
    )
    return sec, ok


# =========================================================================== 2. read across schema versions
# The schema before the first write, and the change made before the writes of stage k (k = 1..9): the files of
# stage k hold the columns of the schema as it was then, under the names and types of then.
READ_SCHEMA0 = pa.schema(list(SCHEMA) + [pa.field("qty", pa.int32())])
SCHEMA_CHANGES = [
    ("add", "a1", pa.int64()),
    ("rename", "category", "cat"),
    ("widen", "qty", pa.int64()),
    ("add", "a2", pa.string()),
    ("add", "a3", pa.float64()),
    ("add", "a4", pa.int64()),
    ("add", "a5", pa.string()),
    ("add", "a6", pa.float64()),
    ("add", "a7", pa.int64()),
]
CHANGES_TEXT = "add a1 int64; rename category → cat; widen qty int32 → int64; add a2 string, a3 double, a4 int64, a5 string, a6 double, a7 int64"


def evolve_schema(schema: pa.Schema, change) -> pa.Schema:
    """The Arrow schema after one SCHEMA_CHANGES entry (the model the tables are checked against)."""
    kind, name, arg = change
    i = schema.get_field_index(name) if kind != "add" else -1
    if kind == "add":
        return schema.append(pa.field(name, arg))
    if kind == "rename":
        return schema.set(i, schema.field(i).with_name(arg))
    return schema.set(i, schema.field(i).with_type(arg))


def stage_schemas(n_stages: int) -> list[pa.Schema]:
    out = [READ_SCHEMA0]
    for change in SCHEMA_CHANGES[: n_stages - 1]:
        out.append(evolve_schema(out[-1], change))
    return out


def stage_rows(k: int, schema: pa.Schema, files: int, file_rows: int) -> pa.Table:
    """The rows of stage k (files k*files .. k*files+files-1), in stage k's schema; each column's values are a
    function of id alone, so that the rows of a stage read the same under every later schema."""
    from common import make_batch

    n = files * file_rows
    base = make_batch(k * n, n)
    ids = base.column("id").to_numpy()
    cols = {"id": base.column("id"), "category": base.column("category"), "value": base.column("value"), "ts": base.column("ts"),
            "qty": pa.array((ids % 20 + 1).astype(np.int32))}
    cols["cat"] = cols["category"]
    for name in ("a1", "a4", "a7"):
        cols[name] = pa.array(ids * int(name[1]))
    for name in ("a2", "a5"):
        cols[name] = pa.array(np.char.add(f"{name}-", (ids % 997).astype(str)).astype(object), pa.string())
    for name in ("a3", "a6"):
        cols[name] = pa.array(ids * 0.25 + int(name[1]))
    return pa.table([cols[f.name].cast(f.type) for f in schema], schema=schema)


def as_final(tbl: pa.Table, final: pa.Schema) -> pa.Table:
    """tbl read under the final schema: later names (category → cat), widened types, nulls for later columns."""
    renamed = {"category": "cat"}
    cols = {renamed.get(f.name, f.name): tbl.column(f.name) for f in tbl.schema}
    return pa.table(
        [cols[f.name].cast(f.type) if f.name in cols else pa.nulls(tbl.num_rows, f.type) for f in final], schema=final
    )


def apply_change(t, change) -> None:
    kind, name, arg = change
    if kind == "add":
        t.update_schema().add_column(name, arg).commit()
    elif kind == "rename":
        t.update_schema().rename_column(name, arg).commit()
    else:
        t.update_schema().update_column(name, type=arg).commit()


def build_read_tables(root: str, cfg: Config) -> dict:
    """The evolved table (root/evolved) and the single-schema one (root/single): the same rows in the same
    100-file layout, written in the same 10 appends."""
    import lamina

    stages = cfg.schema_versions
    per_stage = cfg.read_files // stages
    schemas = stage_schemas(stages)
    props = {"write.max-rows-per-file": str(cfg.read_file_rows)}
    out = {"evolved": os.path.join(root, "evolved"), "single": os.path.join(root, "single")}
    t0 = now()
    ev = lamina.create_table(out["evolved"], schemas[0], properties=props)
    for k in range(stages):
        if k:
            apply_change(ev, SCHEMA_CHANGES[k - 1])
        ev.append(stage_rows(k, schemas[k], per_stage, cfg.read_file_rows))
    t1 = now()
    single = lamina.create_table(out["single"], schemas[-1], properties=props)
    for k in range(stages):
        single.append(as_final(stage_rows(k, schemas[k], per_stage, cfg.read_file_rows), schemas[-1]))
    t2 = now()
    flush_lamina_hints()
    out.update(build_evolved_s=t1 - t0, build_single_s=t2 - t1, final_schema=schemas[-1])
    return out


def alternate_pairs(fns: dict, pairs: int, before=None) -> dict:
    """Times of fns['evolved'] and fns['single'] in `pairs` pairs after one untimed pair, the order flipped
    every pair; before() (untimed) runs before each call."""
    times = {k: [] for k in fns}
    for i in range(pairs + 1):
        order = ["evolved", "single"] if i % 2 == 0 else ["single", "evolved"]
        for k in order:
            if before:
                before()
            t0 = now()
            fns[k]()
            took = now() - t0
            if i:
                times[k].append(took)
    return times


def bench_read(ws: Workspace, cfg: Config) -> dict:
    import lamina

    res: dict = {}
    root = ws.new("read")
    say(f"building the read tables: {cfg.read_files} files x {cfg.read_file_rows:,} rows over {cfg.schema_versions} schema versions")
    b = build_read_tables(root, cfg)
    res["build"] = {k: v for k, v in b.items() if k.endswith("_s")}
    tabs = {k: lamina.open_table(b[k]) for k in ("evolved", "single")}
    # Same content: the evolved table read under its final schema must equal the single-schema table and the model.
    got = {k: t.scan().to_arrow().sort_by("id") for k, t in tabs.items()}
    stages = cfg.schema_versions
    model = pa.concat_tables([
        as_final(stage_rows(k, sch, cfg.read_files // stages, cfg.read_file_rows), b["final_schema"])
        for k, sch in enumerate(stage_schemas(stages))
    ])
    res["check"] = {
        "rows": got["evolved"].num_rows,
        "evolved_equals_model": got["evolved"].equals(model),
        "single_equals_model": got["single"].equals(model),
        "files": {k: len(t.scan().plan()) for k, t in tabs.items()},
        "versions": {k: int(t.version) for k, t in tabs.items()},
        "schema": str(got["evolved"].schema).replace("\n", ", "),
    }
    if not (res["check"]["evolved_equals_model"] and res["check"]["single_equals_model"]):
        res["check"]["error"] = f"contents differ: {res['check']}"
    del got, model
    say(f"  built (evolved {fmt_s(res['build']['build_evolved_s'])}, single {fmt_s(res['build']['build_single_s'])}); check {res['check']}")
    say(f"arrow: {cfg.read_pairs} pairs of t.scan().to_arrow()")
    res["arrow"] = alternate_pairs({k: (lambda t=t: t.scan().to_arrow()) for k, t in tabs.items()}, cfg.read_pairs)
    say("  arrow p50: " + ", ".join(f"{k} {fmt_s(p50(v))}" for k, v in res["arrow"].items()))
    if cfg.profile:
        prof = profile_start(True)
        for _ in range(3):
            tabs["evolved"].scan().to_arrow()
        profile_dump(prof, "evolution_read_arrow_evolved")
        prof = profile_start(True)
        for _ in range(3):
            tabs["single"].scan().to_arrow()
        profile_dump(prof, "evolution_read_arrow_single")
    if cfg.spark:
        try:
            res["spark"] = bench_spark_read(b, cfg)
            say("  spark p50: " + ", ".join(f"{k} {fmt_s(p50(v))}" for k, v in res["spark"]["times"].items()))
        except Exception as e:  # noqa: BLE001
            log_error("read/spark", e)
            res["spark"] = {"error": err_text(e)}
            say(f"  spark: {res['spark']['error']}")
    return res


def bench_spark_read(b: dict, cfg: Config) -> dict:
    """The Spark fast path over both tables in one local[2] session (bench/spark_bench.py's settings)."""
    from pyspark.sql import functions as F

    from lamina.spark import read, spark_session

    t0 = now()
    spark = spark_session(master="local[2]", app_name="lamina-evolution-bench",
                          conf={"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "2",
                                "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    out: dict = {"session_s": now() - t0}
    # The same answer from both tables (every evolved column: renamed, widened, added later).
    aggs = [F.count(F.lit(1)).alias("n"), F.sum("qty").alias("qty"), F.sum("a1").alias("a1"), F.sum("a7").alias("a7"),
            F.count("a2").alias("a2"), F.countDistinct("cat").alias("cat")]
    out["check"] = {k: read(spark, b[k]).agg(*aggs).collect()[0].asDict() for k in ("evolved", "single")}
    out["check_ok"] = out["check"]["evolved"] == out["check"]["single"]
    out["columns"] = {k: read(spark, b[k]).columns for k in ("evolved", "single")}
    out["times"] = alternate_pairs(
        {k: (lambda u=b[k]: read(spark, u).write.format("noop").mode("overwrite").save()) for k in ("evolved", "single")},
        cfg.read_pairs, before=lambda: spark._jvm.System.gc(),
    )
    spark.stop()
    return out


def summarise_read(cfg: Config, res: dict) -> tuple[Section, bool | None]:
    chk = res.get("check", {})
    rows = chk.get("rows", cfg.read_files * cfg.read_file_rows)
    sec = Section(
        key="read",
        title=f"Read a table whose {cfg.read_files} files span {cfg.schema_versions} schema versions (Lamina only)",
        what=(
            f"**evolved**: a Lamina table created with (id int64, category string, value double, ts timestamp[us], qty int32), "
            f"then {cfg.schema_versions} appends of {cfg.read_files // cfg.schema_versions} files × {cfg.read_file_rows:,} rows "
            f"(`write.max-rows-per-file`), one schema change before each append after the first ({CHANGES_TEXT}; "
            "`t.update_schema().add_column / rename_column / update_column(type=) ... .commit()`), each append written "
            "in the schema of its time. **single**: the same rows written with the final schema (nulls where a "
            f"column did not exist yet) in the same {cfg.schema_versions} appends and {cfg.read_files}-file layout. "
            f"{rows:,} rows, 12 columns. Both read in {cfg.read_pairs} timed pairs after an untimed pair, the order flipped "
            "every pair, each through a handle opened once: **Arrow** `t.scan().to_arrow()`; **Spark fast path** "
            "`lamina.spark.read(spark, uri).write.format(\"noop\").mode(\"overwrite\").save()` (local[2], "
            "spark.driver.memory=4g; a full JVM GC before each read). Ratio = single time / evolved time (the evolved "
            "table's speed relative to the single-schema one; ≥ 1: no slower)."
        ),
        columns=["reader", "single-schema p50 (p25–p75)", "evolved p50 (p25–p75)", "ratio single / evolved", "target"],
    )
    oks = []
    for key, label in (("arrow", "Arrow `t.scan().to_arrow()`"), ("spark", "Spark fast path `lamina.spark.read`")):
        r = res.get(key)
        if r is None:
            continue
        times = r.get("times", r) if key == "spark" else r
        if "error" in r:
            sec.error_row(label, r["error"])
            oks.append(False)
            continue
        s, e = times["single"], times["evolved"]
        ratio = p50(s) / p50(e)
        # A reader that returns other rows from the evolved table than from the single-schema one has no speed to judge.
        wrong = key == "spark" and not r.get("check_ok")
        ok = ratio >= 0.9 and not wrong
        oks.append(ok)
        spread = lambda xs: f"{fmt_s(p50(xs))} ({fmt_s(quantile(xs, 0.25))}–{fmt_s(quantile(xs, 0.75))})"
        tgt = "≥ 0.9×: " + ("MISS (wrong result from the evolved table, see notes)" if wrong else verdict(ok))
        sec.rows.append([label, spread(s), spread(e), fmt_x(ratio), tgt])
    if "error" in chk:
        oks.append(False)
    sec.notes.append(
        f"Contents checked: evolved and single read {rows:,} rows equal to a model of the final schema (rename, widening "
        f"and nulls for later columns applied in Arrow): evolved {chk.get('evolved_equals_model')}, single "
        f"{chk.get('single_equals_model')}; files {chk.get('files')}, versions {chk.get('versions')}."
    )
    sp = res.get("spark", {})
    if "check" in sp:
        sec.notes.append(
            f"Spark: the same aggregate (count, sum(qty), sum(a1), sum(a7), count(a2), count distinct cat) from both tables: "
            f"{'equal' if sp['check_ok'] else 'DIFFERENT: ' + str(sp['check'])}; session start {fmt_s(sp['session_s'])}."
        )
    for key in ("arrow", "spark"):
        r = res.get(key)
        times = (r or {}).get("times", r) if key == "spark" else r
        if times and "error" not in (r or {}):
            sec.notes.append(f"{key} runs: " + "; ".join(f"{k} " + ", ".join(fmt_s(x) for x in v) for k, v in times.items()) + ".")
    bld = res.get("build", {})
    sec.notes.append(f"Building (untimed): evolved {fmt_s(bld.get('build_evolved_s'))}, single {fmt_s(bld.get('build_single_s'))}.")
    ok = None if not oks else all(oks)
    return sec, ok


# =========================================================================== the case
@case("evolution", heavy=True, title=SECTION_TITLE, sizes=Config,
      quick=dict(versions=100, rounds=3, block=3, read_file_rows=2_000, read_pairs=3),
      tiny=dict(versions=20, files_per_commit=2, rounds=1, block=1, warm_changes=1, read_files=10, schema_versions=10,
                read_file_rows=200, read_pairs=1),
      only={"systems": tuple(COMMITTERS), "parts": tuple(BENCHES)}, needs=(module("pyiceberg", "deltalake", "pyspark"),),
      versions=("lamina", "deltalake", "pyiceberg", "pyarrow"))
def evolution(run: Run) -> Report:
    """A schema change on a long history vs pyiceberg and deltalake; reading files of 10 schema versions."""
    cfg, ws, parts = run.sizes, run.ws, run.only("parts")
    raw: dict = {}
    secs, targets = [], []
    if "commit" in parts:
        res = raw["commit"] = bench_commit(ws, cfg, run.only("systems"))
        sec, ok = summarise_commit(cfg, res, run.only("systems"))
        secs.append(sec)
        targets.append(Target(f"schema change commit: {TARGET_COMMIT}", ok))
    if "read" in parts:
        try:
            res = raw["read"] = bench_read(ws, cfg)
        except Exception as e:  # noqa: BLE001
            log_error("read", e)
            res = raw["read"] = {"arrow": {"error": err_text(e)}}
            say(f"read: {res['arrow']['error']}")
        sec, ok = summarise_read(cfg, res)
        secs.append(sec)
        targets.append(Target(f"read across schema versions: {TARGET_READ}", ok))
    return Report(title=SECTION_TITLE, targets=targets, sections=secs, raw=raw)
