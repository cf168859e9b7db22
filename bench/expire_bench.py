#!/usr/bin/env python
"""Expiry benchmark (issue 5): expire to the last 10 of 1,000 versions of a table
with 20 tags, Lamina vs pylance `cleanup_old_versions` vs deltalake vacuum, in
one run on the same data (the case `expire`; --only picks the systems).

Each repetition builds, per system, a fresh table in a temp dir with the same
history (appends of 100-row batches, a full overwrite every `versions/20`
commits, a tag every `versions/20` commits between the overwrites), then runs
the expiry in a fresh interpreter per system (like bench/probe.py: no cache of
the table survives from the build; a tiny table of the same system is expired
first, untimed, to pay imports and runtime start-up). Files and bytes deleted
are measured by walking the table directory before and after; stranded bytes
are data files left on disk that neither a retained version nor a tag
references.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import timedelta

from common import (
    SCHEMA, Workspace, err_text, file_sizes, flush_lamina_hints, fmt_ratio, fmt_s, log_error, make_batch, now, p50,
    rotated, run_worker, say, timed_open_call,
)
from registry import Run, case, module
from report import Report, Section, Target, report_of, verdict

ORDER = ["lamina", "lance", "deltalake"]
SECTION_TITLE = "Expiry (issue 5)"
TARGET = "faster than Lance and 0 stranded bytes"


# --------------------------------------------------------------------------- config
@dataclass
class Config:
    versions: int = 1000  # commits on top of the empty table
    retain: int = 10
    n_tags: int = 20
    rows: int = 100  # rows per append
    overwrite_rows: int = 1000  # rows written by each overwrite
    reps: int = 3  # fresh histories per system; the expiry time is the p50 over them
    warm_versions: int = 20  # the untimed throwaway table expired first in each fresh process
    profile: bool = False

    @property
    def every(self) -> int:
        """Commits between overwrites, and between tags."""
        return max(2, self.versions // self.n_tags)



def history(n: int, every: int, n_tags: int, rows: int, overwrite_rows: int) -> list[tuple[str, int, int, str | None]]:
    """Commit i (1-based): ("append"|"overwrite", first id, rows, tag name or None).

    Overwrites at i % every == 0; tags half-way between them (i % every == every // 2),
    so each tag holds files that nothing else keeps once its stretch is expired."""
    ops, next_id, tags = [], 0, 0
    for i in range(1, n + 1):
        kind = "overwrite" if i % every == 0 else "append"
        k = overwrite_rows if kind == "overwrite" else rows
        tag = None
        if i % every == every // 2 and tags < n_tags:
            tag, tags = f"t{i:04d}", tags + 1
        ops.append((kind, next_id, k, tag))
        next_id += k
    return ops


# --------------------------------------------------------------------------- directory walks
inventory = file_sizes  # relative path -> size of every file under root


def fmt_b(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------- adapters
class LaminaX:
    name = "lamina"
    expiry_call = "`t.maintenance.expire_versions(retain_last=10, reader_grace=timedelta(0))`"

    def uri(self, root):
        return os.path.join(root, "t")

    def build(self, root, ops, batches):
        import lamina

        t = lamina.create_table(self.uri(root), SCHEMA)
        tags = {}
        for (kind, _s, _k, tag), b in zip(ops, batches):
            (t.overwrite if kind == "overwrite" else t.append)(b)
            if tag:
                t.tags.create(tag, t.version)
                tags[tag] = t.version
        self._settle()
        return {"latest": t.version, "tags": tags}

    _settle = staticmethod(flush_lamina_hints)

    def classify(self, rel):
        if rel.startswith("data/"):
            return "data"
        if rel.startswith("_lamina/versions/"):
            return "version"
        if rel.startswith("_lamina/manifests/"):
            return "meta"
        if rel.startswith("_lamina/tags/"):
            return "tag"
        return "other"  # version hint, in-flight write markers

    def references(self, root, versions, tags):
        """(data files, metadata files) the retained versions and the tags reference."""
        import lamina

        t = lamina.open_table(self.uri(root))
        data, meta = set(), set()
        for kw in [{"version": v} for v in versions] + [{"version": n} for n in tags]:
            f = t.inspect.files(**kw)
            data.update(f.column("path").to_pylist())
            data.update(p for p in f.column("dv_path").to_pylist() if p)
            meta.update(t.inspect.manifests(**kw).column("path").to_pylist())
        return data, meta

    def rows(self, root, versions, tags):
        import lamina

        t = lamina.open_table(self.uri(root))
        out = {}
        for v in versions:
            out[f"v{v}"] = _count(lambda: t.scan(version=v, columns=["id"]).to_arrow().num_rows)
        for n in tags:
            out[n] = _count(lambda: t.scan(version=n, columns=["id"]).to_arrow().num_rows)
        return out

    # worker side (fresh interpreter)
    def open(self, root):
        import lamina

        return lamina.open_table(self.uri(root))

    def expire(self, h, root, retain, latest):
        r = h.maintenance.expire_versions(retain_last=retain, reader_grace=timedelta(0))
        return {
            "expired_versions": len(r.expired_versions),
            "earliest_retained": r.earliest_retained,
            "expired_tags": r.expired_tags,
            "deleted_files": len(r.deleted_files),
            "deleted_manifests": len(r.deleted_manifests),
            "deleted_bytes": r.deleted_bytes,
            "kept_for_tags": r.kept_for_tags,
            "seconds": r.seconds,
        }


class LanceX:
    name = "lance"
    expiry_call = (
        "`ds.cleanup_old_versions(older_than=timedelta(0), retain_versions=10, "
        "error_if_tagged_old_versions=False)` (default `delete_unverified=False`)"
    )

    def uri(self, root):
        return os.path.join(root, "t.lance")

    def build(self, root, ops, batches):
        import lance

        ds = lance.write_dataset(SCHEMA.empty_table(), self.uri(root), schema=SCHEMA)
        tags = {}
        for (kind, _s, _k, tag), b in zip(ops, batches):
            ds = lance.write_dataset(b, ds, mode=kind)
            if tag:
                ds.tags.create(tag, ds.version)
                tags[tag] = ds.version
        return {"latest": ds.version, "tags": tags}

    def classify(self, rel):
        if rel.startswith("data/") or rel.startswith("_deletions/"):
            return "data"
        if rel.startswith("_versions/") and rel.endswith(".manifest"):
            return "version"  # (not _versions/latest_version_hint.json)
        if rel.startswith("_transactions/") or rel.startswith("_indices/"):
            return "meta"
        if rel.startswith("_refs/"):
            return "tag"
        return "other"

    def references(self, root, versions, tags):
        import lance

        data = set()
        for v in list(versions) + list(tags):
            ds = lance.dataset(self.uri(root), version=v)
            for frag in ds.get_fragments():
                md = frag.metadata
                if md.deletion_file is not None:  # not produced by this workload (no deletes)
                    raise RuntimeError("deletion files are not accounted for by this benchmark")
                data.update("data/" + df.path for df in frag.data_files())
        return data, None

    def rows(self, root, versions, tags):
        import lance

        out = {}
        for v in versions:
            out[f"v{v}"] = _count(lambda: lance.dataset(self.uri(root), version=v).to_table(columns=["id"]).num_rows)
        for n in tags:
            out[n] = _count(lambda: lance.dataset(self.uri(root), version=n).to_table(columns=["id"]).num_rows)
        return out

    def open(self, root):
        import lance

        return lance.dataset(self.uri(root))

    def expire(self, h, root, retain, latest):
        st = h.cleanup_old_versions(
            older_than=timedelta(0), retain_versions=retain, error_if_tagged_old_versions=False
        )
        return {
            k: getattr(st, k)
            for k in (
                "old_versions",
                "bytes_removed",
                "data_files_removed",
                "transaction_files_removed",
                "index_files_removed",
                "deletion_files_removed",
                "failed_deletes",
            )
            if hasattr(st, k)
        }


class DeltaX:
    name = "deltalake"
    # Delta's log retention is by age only, and its post-commit hook would delete old log
    # entries at every checkpoint (every 100 commits): with retention 0 that breaks time
    # travel while the history is built, so the hook is off and `cleanup_metadata` is
    # called explicitly at expiry time.
    CONFIG = {"delta.logRetentionDuration": "interval 0 seconds", "delta.enableExpiredLogCleanup": "false"}
    expiry_call = (
        "`dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, "
        "keep_versions=<last 10>)`, then `DeltaTable(uri, version=<oldest kept>)` "
        "`.create_checkpoint()` and `.cleanup_metadata()`"
    )

    def uri(self, root):
        return os.path.join(root, "t")

    def build(self, root, ops, batches):
        from deltalake import DeltaTable, write_deltalake

        dt = DeltaTable.create(self.uri(root), schema=SCHEMA, configuration=self.CONFIG)
        tags = {}
        for i, ((kind, _s, _k, tag), b) in enumerate(zip(ops, batches), start=1):
            write_deltalake(dt, b, mode=kind)
            if tag:
                tags[tag] = i  # no tags in Delta: recorded only to show what the tag would have held
        return {"latest": DeltaTable(self.uri(root)).version(), "tags": tags}

    def classify(self, rel):
        if rel.startswith("_delta_log/"):
            base = rel.rsplit("/", 1)[-1]
            return "version" if re.fullmatch(r"\d{20}\.json", base) else "meta"
        if rel.endswith(".parquet"):
            return "data"
        return "other"

    def references(self, root, versions, tags):
        from deltalake import DeltaTable

        data = set()
        for v in versions:
            uri = self.uri(root)
            data.update(os.path.relpath(u, uri) for u in DeltaTable(uri, version=v).file_uris())
        return data, None

    def rows(self, root, versions, tags):
        from deltalake import DeltaTable

        return {
            f"v{v}": _count(
                lambda: DeltaTable(self.uri(root), version=v).to_pyarrow_table(columns=["id"]).num_rows
            )
            for v in versions
        }

    def open(self, root):
        from deltalake import DeltaTable

        return DeltaTable(self.uri(root))

    def expire(self, h, root, retain, latest):
        from deltalake import DeltaTable

        keep = list(range(latest - retain + 1, latest + 1))
        t0 = now()
        vacuumed = h.maintenance.remove_orphans(
            retention_hours=0, enforce_retention_duration=False, dry_run=False, keep_versions=keep
        )
        t1 = now()
        oldest = DeltaTable(self.uri(root), version=keep[0])
        oldest.create_checkpoint()
        t2 = now()
        oldest.cleanup_metadata()
        t3 = now()
        return {
            "vacuumed_files": len(vacuumed),
            "vacuum_s": t1 - t0,
            "checkpoint_s": t2 - t1,
            "cleanup_metadata_s": t3 - t2,
        }


ADAPTERS = {"lamina": LaminaX, "lance": LanceX, "deltalake": DeltaX}


def _count(fn) -> int | str:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return err_text(e)


# --------------------------------------------------------------------------- worker
def worker(argv: list[str]) -> dict:
    """Fresh interpreter: expire a warm-up table (untimed), then open + expire the real one."""
    name, root, latest, warm_root, warm_latest, retain, profile = (
        argv[0], argv[1], int(argv[2]), argv[3], int(argv[4]), int(argv[5]), argv[6] == "1",
    )
    a = ADAPTERS[name]()
    a.expire(a.open(warm_root), warm_root, retain, warm_latest)
    open_s, expire_s, lib = timed_open_call(
        lambda: a.open(root), lambda h: a.expire(h, root, retain, latest), f"expire_{name}" if profile else None
    )
    return {"open_s": open_s, "expire_s": expire_s, "lib": lib}


def expire_in_worker(name, root, latest, warm_root, warm_latest, retain, profile, timeout=900) -> dict:
    args = [name, root, str(latest), warm_root, str(warm_latest), str(retain), "1" if profile else "0"]
    return run_worker("expire_bench:worker", args, timeout)


# --------------------------------------------------------------------------- one repetition
def one_rep(ws: Workspace, cfg: Config, rep: int, names: list[str], ops, batches, warm_ops, warm_batches) -> dict:
    res: dict[str, dict] = {}
    # 1. build (the systems one after another), and look at each table before expiry
    for name in names:
        a = ADAPTERS[name]()
        r = res[name] = {"root": ws.new(f"expire-{name}"), "warm": ws.new(f"warm-expire-{name}")}
        try:
            r["warm_latest"] = a.build(r["warm"], warm_ops, warm_batches)["latest"]
        except Exception as e:  # noqa: BLE001
            log_error(f"expire/{name}/warm build", e)
            r["error"] = err_text(e)
            continue
        try:
            t0 = now()
            info = a.build(r["root"], ops, batches)
            r["build_s"] = now() - t0
            latest = info["latest"]
            r["latest"], r["tags"] = latest, info["tags"]
            r["retained"] = list(range(latest - cfg.retain + 1, latest + 1))
            real_tags = list(info["tags"]) if name != "deltalake" else []
            r["real_tags"] = real_tags
            r["before"] = inventory(a.uri(r["root"]))
            data, meta = a.references(r["root"], r["retained"], real_tags)
            r["refs"], r["meta_refs"] = data, meta
            r["rows_before"] = a.rows(r["root"], r["retained"], real_tags)
            say(
                f"  rep {rep + 1} {name}: built {len(ops):,} commits in {fmt_s(r['build_s'])} "
                f"(latest version {latest}, {len(info['tags'])} tag points), "
                f"{len(r['before']):,} files, {fmt_b(sum(r['before'].values()))}"
            )
        except Exception as e:  # noqa: BLE001
            log_error(f"expire/{name}/build", e)
            r["error"] = err_text(e)
    # 2. the expiries, back to back (order rotates between repetitions)
    live = [n for n in names if "error" not in res[n]]
    for name in rotated(live, rep):
        r = res[name]
        try:
            w = expire_in_worker(
                name, r["root"], r["latest"], r["warm"], r["warm_latest"], cfg.retain,
                cfg.profile and name == "lamina",
            )
            r.update(w)
            say(f"  rep {rep + 1} {name}: expiry {fmt_s(w['expire_s'])} (open {fmt_s(w['open_s'])})")
        except Exception as e:  # noqa: BLE001
            log_error(f"expire/{name}/expire", e)
            r["error"] = err_text(e)
    # 3. what was deleted, what is left, and can everything kept still be read
    for name in live:
        r = res[name]
        if "error" in r:
            continue
        a = ADAPTERS[name]()
        try:
            if name == "lamina":
                a._settle()
            after = inventory(a.uri(r["root"]))
            before = r["before"]
            gone = set(before) - set(after)
            by = {}
            for p in gone:
                c = a.classify(p)
                by.setdefault(c, [0, 0])
                by[c][0] += 1
                by[c][1] += before[p]
            data_after = {p: s for p, s in after.items() if a.classify(p) == "data"}
            stranded = sorted(p for p in data_after if p not in r["refs"])
            missing = sorted(p for p in r["refs"] if p not in after)
            r["deleted"] = {c: {"files": n, "bytes": b} for c, (n, b) in by.items()}
            r["deleted_bytes"] = sum(b for _, b in by.values())
            r["data_files_left"] = len(data_after)
            r["data_bytes_left"] = sum(data_after.values())
            r["stranded"] = stranded
            r["stranded_bytes"] = sum(data_after[p] for p in stranded)
            r["missing"] = missing
            r["versions_left"] = sum(1 for p in after if a.classify(p) == "version")
            r["files_left"] = len(after)
            r["new_files"] = sorted(set(after) - set(before))
            if r["meta_refs"] is not None:
                meta_after = {p: s for p, s in after.items() if a.classify(p) == "meta"}
                r["stranded_meta"] = sorted(p for p in meta_after if p not in r["meta_refs"])
                r["stranded_meta_bytes"] = sum(meta_after[p] for p in r["stranded_meta"])
            rows_after = a.rows(r["root"], r["retained"], r["real_tags"])
            r["rows_after"] = rows_after
            bad = {k: (r["rows_before"][k], v) for k, v in rows_after.items() if v != r["rows_before"][k]}
            r["read_mismatch"] = bad
            if bad:
                log_error(f"expire/{name}/reads after expiry", RuntimeError(f"row counts changed: {bad}"))
            if name == "deltalake":  # what happened to the versions a tag would have held
                r["tag_points_readable"] = sum(
                    1 for v in r["tags"].values() if isinstance(a.rows(r["root"], [v], []).get(f"v{v}"), int)
                )
        except Exception as e:  # noqa: BLE001
            log_error(f"expire/{name}/after", e)
            r["error"] = err_text(e)
    for r in res.values():
        ws.drop(r.get("root"))
        ws.drop(r.get("warm"))
    return res


# --------------------------------------------------------------------------- report
def summarise(cfg: Config, reps: list[dict]) -> tuple[Section, Target]:
    first = {}
    for res in reps:
        for name, r in res.items():
            if name not in first or ("error" in first[name] and "error" not in r):
                first[name] = r
    times = {n: [res[n]["expire_s"] for res in reps if n in res and "expire_s" in res[n]] for n in ORDER}
    opens = {n: [res[n]["open_s"] for res in reps if n in res and "open_s" in res[n]] for n in ORDER}
    t_exp = {n: p50(v) for n, v in times.items()}
    lam = first.get("lamina", {})
    lam_t, lan_t = t_exp.get("lamina"), t_exp.get("lance")
    faster = None if lam_t is None or lan_t is None else lam_t < lan_t
    lam_all = [res["lamina"] for res in reps if "stranded_bytes" in res.get("lamina", {})]
    zero = None if not lam_all else all(r["stranded_bytes"] == 0 for r in lam_all)
    ok_reads = None if not lam_all else all(not r["read_mismatch"] and not r["missing"] for r in lam_all)
    target_ok = None if faster is None or zero is None else (faster and zero and bool(ok_reads))

    N, R, E = cfg.versions, cfg.retain, cfg.every
    sec = Section(
        key="expire",
        title=SECTION_TITLE,
        what=(
            f"Each system builds the same history in a fresh temp dir: an empty table (id int64, "
            f"category string, value float64, ts timestamp[us]), then {N:,} commits — "
            f"appends of {cfg.rows}-row batches, and every {E}th commit a full overwrite with "
            f"{cfg.overwrite_rows:,} new rows (so {N // E} overwrites) — and {cfg.n_tags} tags, one every "
            f"{E} commits half-way between overwrites (after commits {E // 2}, {E + E // 2}, …), so every "
            "tag holds data files that no other tag and no retained version needs. Lamina "
            "`t.append` / `t.overwrite` / `t.tags.create(name, version)`; lance "
            "`write_dataset(mode='append'|'overwrite')` / `ds.tags.create(name, version)`; deltalake "
            "`write_deltalake(mode='append'|'overwrite')` (**Delta has no tags**: its vacuum cannot "
            "honour them, so it is judged against the retained versions only and deletes what the tags "
            f"would have held). Then each table is expired to its last {R} versions, in a fresh "
            "interpreter per system (no cache of the table survives from the build; the OS page cache is "
            "warm), after an untimed expiry of a tiny table of the same system in that interpreter "
            "(imports, runtime start-up). **expiry** times the expiry call(s) only, on a table opened "
            "just before (open timed apart). Calls: Lamina " + LaminaX.expiry_call + "; lance "
            + LanceX.expiry_call + "; deltalake " + DeltaX.expiry_call + " (the table is created with "
            "`delta.logRetentionDuration=interval 0 seconds` and `delta.enableExpiredLogCleanup=false`, "
            "so that log entries go only at expiry time, and the checkpoint at the oldest kept version "
            f"is what lets `cleanup_metadata` drop the log before it). Files and bytes deleted: walk "
            "of the table directory before/after (all files; sizes from before). **Stranded bytes**: data "
            f"files still on disk after expiry that neither the last {R} versions nor any tag "
            "references (references read before the expiry: Lamina `t.inspect.files(version=v | "
            "name)`, lance `get_fragments()` data files of each kept version and tag, deltalake "
            f"`DeltaTable(uri, version=v).file_uris()`). **Reads after expiry**: every one of the last {R} "
            "versions and every tag is read in full (column id) before and after; the row counts must match."
        ),
        columns=[
            "system",
            f"expiry (p50 of {len(times.get('lamina', []))})" if len(reps) > 1 else "expiry",
            "Lamina time / peer time",
            "open before expiry",
            "versions left",
            "version files deleted",
            "data files deleted",
            "other metadata files deleted",
            "bytes deleted (of which data)",
            "stranded data bytes",
            "reads after expiry",
            "target",
        ],
    )
    for name in ORDER:
        r = first.get(name)
        if r is None:
            continue
        if "error" in r:
            sec.error_row(name, r["error"])
            continue
        d = r["deleted"]
        data_d = d.get("data", {"files": 0, "bytes": 0})
        meta_d = d.get("meta", {"files": 0, "bytes": 0})
        if name == "deltalake":
            reads = (
                f"{sum(isinstance(v, int) for v in r['rows_after'].values())}/{len(r['retained'])} versions OK"
                if not r["read_mismatch"] else f"MISMATCH {len(r['read_mismatch'])}"
            ) + f"; no tags ({r['tag_points_readable']}/{len(r['tags'])} tag points readable)"
        else:
            nv = len(r["retained"])
            nt = len(r["real_tags"])
            bad = r["read_mismatch"]
            reads = (
                f"{nv}/{nv} versions, {nt}/{nt} tags OK"
                if not bad else f"MISMATCH: {len(bad)} of {nv + nt} (e.g. {next(iter(bad))}: {next(iter(bad.values()))})"
            )
        if r["missing"]:
            reads += f"; {len(r['missing'])} needed files missing"
        stranded = f"{r['stranded_bytes']:,} B"
        if r["stranded_bytes"]:
            stranded += (
                f" ({len(r['stranded'])} files, {100 * r['stranded_bytes'] / max(1, r['data_bytes_left']):.1f}% "
                "of data bytes left)"
            )
        tgt = "–"
        if name == "lamina":
            tgt = (
                f"{TARGET}: {verdict(target_ok)} (faster: {verdict(faster)}, "
                f"{fmt_ratio(lam_t, lan_t)} of Lance's time; 0 stranded: {verdict(zero)})"
            )
        sec.rows.append(
            [
                name,
                fmt_s(t_exp[name]),
                "–" if name == "lamina" else fmt_ratio(lam_t, t_exp[name]),
                fmt_s(p50(opens[name])),
                f"{r['versions_left']:,}",
                f"{d.get('version', {'files': 0})['files']:,}",
                f"{data_d['files']:,}",
                f"{meta_d['files']:,}",
                f"{fmt_b(r['deleted_bytes'])} ({fmt_b(data_d['bytes'])})",
                stranded,
                reads,
                tgt,
            ]
        )
        sec.raw[name] = {
            k: v
            for k, v in r.items()
            if k not in ("before", "refs", "meta_refs", "rows_before", "rows_after", "root", "warm")
        }
        sec.raw[name]["expire_s_all"] = times[name]
        sec.raw[name]["open_s_all"] = opens[name]
    # notes
    sec.notes.append(
        f"Target (issue 5): \"{TARGET}\" — {verdict(target_ok)}. Also required here: every retained "
        "version and tag reads the same rows after expiry."
    )
    sec.notes.append(
        "*Lamina time / peer time* < 1: Lamina's expiry is faster (note: the other sections of this file "
        "quote peer / Lamina). Quote ratios, not absolute times: the 2-core machine is shared."
    )
    if len(reps) > 1:
        per = "; ".join(
            f"{n} " + ", ".join(fmt_s(x) for x in times[n]) for n in ORDER if times.get(n)
        )
        sec.notes.append(
            f"Expiry times of each repetition (a fresh history each, the expiries back to back, their order "
            f"rotating): {per}. File and byte counts are from the first repetition (the history is deterministic)."
        )
    builds = "; ".join(
        f"{n} {fmt_s(p50([res[n]['build_s'] for res in reps if n in res and 'build_s' in res[n]]))}"
        for n in ORDER
        if n in first and "build_s" in first[n]
    )
    sec.notes.append(f"Building the {N:,}-commit history (p50, untimed for the target): {builds}.")
    sec.notes.append(
        "*version files*: Lamina `_lamina/versions/*.json`, lance `_versions/*.manifest`, deltalake "
        "`_delta_log/<n>.json`; *other metadata*: Lamina manifests (`_lamina/manifests`), lance "
        "`_transactions`, deltalake checkpoints. Tag files (Lamina `_lamina/tags`, lance `_refs/tags`) "
        "are never deleted. *versions left* counts version files after expiry."
    )
    if "lib" in lam:
        L = lam["lib"]
        sec.notes.append(
            f"lamina's own report (first repetition): {L['expired_versions']} versions expired (earliest retained "
            f"{L['earliest_retained']}), {L['deleted_files']} data files + {L['deleted_manifests']} manifests "
            f"deleted, `deleted_bytes` {L['deleted_bytes']:,} B (data + manifests; the walk's figure above also "
            f"counts the version files), kept_for_tags {L['kept_for_tags']}."
        )
        records = [p for p in lam.get("new_files", []) if "/_lamina/freed/" in "/" + p]
        sec.notes.append(
            f"lamina: *versions left* counts the expired versions' files too "
            f"({lam.get('versions_left', 0) - len(lam.get('retained', [])):,} of "
            f"them): expiry records them as expired ({len(records)} range record(s) written, one per chunk of "
            "`version.slot-chunk-size` slots, naming each slot's commit; no write per version) and they stay in "
            "their slots, keeping the names taken, until the record is older than `expire.slot-retention-ms` "
            "(1 day by default); the next expiry after that deletes them. They are no versions: "
            f"{len(lam.get('retained', []))} versions are readable (the reads column), as for the others."
        )
        if "stranded_meta_bytes" in lam:
            sec.notes.append(
                f"lamina: manifests left that no retained version or tag references: "
                f"{len(lam['stranded_meta'])} ({lam['stranded_meta_bytes']:,} B)."
            )
    lan = first.get("lance", {})
    if "lib" in lan:
        L = lan["lib"]
        sec.notes.append(
            "lance's CleanupStats (first repetition): "
            + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in L.items())
            + f". Versions left include the {len(lan.get('real_tags', []))} tagged versions "
            "(lance keeps a tagged version whole; Lamina keeps a self-contained tag file instead)."
        )
    dl = first.get("deltalake", {})
    if "lib" in dl:
        L = dl["lib"]
        sec.notes.append(
            f"deltalake, first repetition: vacuum {fmt_s(L['vacuum_s'])} ({L['vacuumed_files']} files), checkpoint at the oldest "
            f"kept version {fmt_s(L['checkpoint_s'])}, cleanup_metadata {fmt_s(L['cleanup_metadata_s'])}; "
            "vacuum itself commits 2 versions (VACUUM START/END), so versions left = "
            f"{cfg.retain} + 2. Delta deletes the data of the versions the tags point at in the other "
            f"systems ({dl.get('tag_points_readable', '?')} of {len(dl.get('tags', {}))} such versions readable after)."
        )
    for name in ORDER:
        sig = {
            json.dumps(
                [
                    {c: v["files"] for c, v in r["deleted"].items()},
                    r["deleted"].get("data", {}).get("bytes", 0),  # (metadata sizes vary by a few bytes: timestamps)
                    r.get("stranded_bytes"),
                    bool(r.get("read_mismatch")),
                    len(r.get("missing", [])),
                ],
                sort_keys=True,
            )
            for res in reps
            if "deleted" in (r := res.get(name, {}))
        }
        if len(sig) > 1:
            sec.notes.append(f"{name}: the repetitions differ in files/bytes deleted, stranded or reads: {sorted(sig)}")
    for name in ORDER:
        r = first.get(name, {})
        if r.get("stranded"):
            sec.notes.append(
                f"{name}: stranded data files (first 5 of {len(r['stranded'])}): "
                + ", ".join(f"`{p}`" for p in r["stranded"][:5])
            )
        if r.get("missing"):
            sec.notes.append(f"{name}: files a kept version needs but that are gone: {r['missing'][:5]}")
    target = Target(f"Lamina {TARGET}", target_ok,
                    f"{fmt_ratio(lam_t, lan_t)} of Lance's time; stranded: {'none' if zero else 'some' if zero is False else 'n/a'}")
    return sec, target


@case("expire", title=SECTION_TITLE, sizes=Config, quick=dict(versions=200, reps=1), tiny=dict(versions=40, reps=1),
      only={"systems": tuple(ORDER)}, needs=(module("lance", "deltalake"),), reps="reps")
def expire(run: Run) -> Report:
    """Expire to the last 10 of 1,000 versions with 20 tags, vs Lance's cleanup and deltalake's vacuum."""
    cfg, names = run.sizes, run.only("systems")
    if cfg.versions < 2 * cfg.retain:
        raise ValueError(f"versions must be at least {2 * cfg.retain}")
    say(f"expire: {cfg.versions:,} commits, {cfg.n_tags} tags, overwrite every {cfg.every}, keep last {cfg.retain}; "
        f"{cfg.reps} repetition(s)")
    ops = history(cfg.versions, cfg.every, cfg.n_tags, cfg.rows, cfg.overwrite_rows)
    batches = [make_batch(s, k) for _kind, s, k, _t in ops]
    w_every = max(2, cfg.warm_versions // 4)
    warm_ops = history(cfg.warm_versions, w_every, 2, cfg.rows, cfg.rows)
    warm_batches = [make_batch(s, k) for _kind, s, k, _t in warm_ops]
    reps = []
    for rep in range(cfg.reps):
        say(f"repetition {rep + 1}/{cfg.reps}: {', '.join(names)}")
        reps.append(one_rep(run.ws, cfg, rep, names, ops, batches, warm_ops, warm_batches))
    sec, target = summarise(cfg, reps)
    failed = [n for res in reps for n, r in res.items() if "error" in r or r.get("read_mismatch")]
    if failed:
        say(f"failures in {sorted(set(failed))}")
    return report_of(sec, targets=[target])
