#!/usr/bin/env python
"""Change data feed and row lineage benchmarks of issue 15, in one run (the case `changes`):

    .venv/bin/python bench/run.py changes --only changes --set rows=1000000 --set files=8   # one part, other sizes

1. **Changes of one merge** (Lamina vs deltalake vs reading both versions and diffing them): each system
   gets the same history: version 0 the empty table, version 1 `rows` (10,000,000) rows of
   bench/common.make_batch (id int64, category string, value double, ts timestamp[us]) in `files` (80)
   files of equal size, version 2 a merge that updates `updates` (10,000) rows whose ids are drawn at
   random over the whole table (seeded; every file holds some), setting a new `value` and `category`:
   - Lamina: `create_table(..., properties={"write.max-rows-per-file": rows / files})`, one `t.append`,
     then `t.merge(source, on="id").when_matched_update_all().execute()` (the table's default
     merge-on-read: deletion vectors + one new file); **lamina-cow** the same table copied before the
     merge and merged with `mode="copy-on-write"` (as Delta merges; figure for information, no target);
   - deltalake: `DeltaTable.create(..., configuration={"delta.enableChangeDataFeed": "true"})`, the same
     80 files written by pyarrow and registered by one `dt.create_write_transaction([AddAction...])`
     (delta-rs's writer cannot cut files at a row count), then
     `dt.merge(source, "t.id = s.id", ...).when_matched_update_all().execute()`.
   Timed through a handle opened once: Lamina `t.changes(1, 2).to_arrow()`; deltalake
   `dt.load_cdf(starting_version=2, ending_version=2)` read into a pyarrow Table; **full-diff**
   `t.scan(version=1).to_arrow()` and `t.scan(version=2).to_arrow()` of the Lamina table, a full
   outer Arrow join on id, and the rows whose columns differ as pre/post images. The systems take
   turns (order rotating every round): one untimed call (re-warm after another library's turn; its
   result is checked against the model: exactly the updated ids as update_preimage rows holding the
   old values and update_postimage rows holding the merge source's), then `block` timed calls.
   Targets: Lamina ≤ 0.5× deltalake's p50 and ≤ 0.1× full-diff's. One more Lamina call is
   cProfiled afterwards (bench/out/changes_<system>_profile.txt; its top entries go into the report).
2. **Row lineage cost on appends** (Lamina only): two tables, lineage on (the default) and off
   (`create_table(..., properties={"row-lineage.enabled": "false"})`), each after untimed appends to a
   throwaway table; `appends` (300) appends of `append_rows` (100) rows each, in alternating
   blocks of 10 (bench/common.APPEND_BLOCK, the order flipped every pair of blocks), each timed end to
   end. Target: p50 on ≤ 1.05× off. Checked: the lineage table's `_row_id`s are 0..n-1, the other
   refuses `_row_id` (RowLineageNotEnabled).
3. **Spark write with row lineage** vs raw Parquet, as bench/spark_bench.py measures "fast write ≥
   0.9× raw" (its session, DataFrame and rotating write rounds, reused): `df.write.parquet(dir)` vs
   `lamina.spark.write(df, uri)` (a new table, lineage on: the default) vs the same with
   `properties={"row-lineage.enabled": "false"}`. Target: raw time / lineage-on time ≥ 0.9.

--only picks the change readers (lamina, lamina-cow, deltalake, full-diff) and the parts (changes,
appends, spark).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import systems
from common import (
    APPEND_BLOCK, OUT_DIR, SCHEMA, Workspace, delta_table_of_files, err_text, even_slices, flush_lamina_hints, fmt_s,
    log_error, make_batch, now, p50, profile_dump, profile_start, rotated, say, timed_append, warm_up_appends,
)
from registry import Run, case, module
from report import Report, Section, Target, verdict

SECTION_TITLE = "Change data feed and row lineage (issue 15)"
BENCHES = ["changes", "appends", "spark"]
CHANGE_READERS = ["lamina", "lamina-cow", "deltalake", "full-diff"]
TARGET_DELTA = "Lamina ≤ 0.5× deltalake's time"
TARGET_DIFF = "Lamina ≤ 0.1× full-diff's time"
TARGET_APPEND = "append p50 with lineage on ≤ 1.05× off"
TARGET_SPARK = "Spark write with lineage on ≥ 0.9× raw Parquet's speed"
SEED = 15
CDF = {"delta.enableChangeDataFeed": "true"}
NO_LINEAGE = {"row-lineage.enabled": "false"}
DATA_COLUMNS = SCHEMA.names
PRE, POST = "update_preimage", "update_postimage"
PROFILE_TOP = 8  # entries of a profile quoted in the report


# --------------------------------------------------------------------------- config
@dataclass
class Config:
    rows: int = 10_000_000
    files: int = 80
    updates: int = 10_000
    rounds: int = 5  # turns of each change reader
    block: int = 3  # timed calls per turn
    appends: int = 300  # timed appends per lineage table
    append_rows: int = 100
    spark_rows: int = 10_000_000  # bench/spark_bench.py's default
    spark_repeat: int = 5  # timed write rounds (bench/spark_bench.py's default)


# =========================================================================== 1. changes of one merge
def updated_ids(cfg: Config) -> np.ndarray:
    """The ids the merge updates: drawn at random over the whole table (seeded), sorted."""
    return np.sort(np.random.default_rng(SEED).choice(cfg.rows, cfg.updates, replace=False)).astype(np.int64)


def merge_source(old: pa.Table) -> pa.Table:
    """The merge's source: the rows it updates (old) with a new value and category."""
    return old.set_column(1, "category", pa.array(np.full(old.num_rows, "updated"), pa.string())).set_column(
        2, "value", pc.add(old.column("value"), 0.25))


def model_changes(old: pa.Table) -> pa.Table:
    """The change rows a correct answer holds, in canonical form: a pre image (the old row) and a post
    image (the merge source's row) per updated row."""
    kinds = [pa.array(np.full(old.num_rows, k), pa.string()) for k in (PRE, POST)]
    return canonical(pa.concat_tables([t.append_column("_change_type", k) for t, k in zip((old, merge_source(old)), kinds)]))


def canonical(changes: pa.Table) -> pa.Table:
    """The data columns and _change_type of change rows in one type per column (deltalake answers
    string_view), sorted by id then change type: two answers with the same rows compare equal."""
    cols = {c: changes.column(c).cast(SCHEMA.field(c).type) for c in DATA_COLUMNS}
    cols["_change_type"] = changes.column("_change_type").cast(pa.string())
    return pa.table(cols).sort_by([("id", "ascending"), ("_change_type", "ascending")])


def check_changes(got: pa.Table, model: pa.Table, version: int) -> dict:
    """Counts by change type, the commit versions, and whether the rows equal the model's."""
    kinds = got.column("_change_type").cast(pa.string()).value_counts().to_pylist()
    out = {"rows": got.num_rows, "by_type": {k["values"]: k["counts"] for k in kinds}}
    if "_commit_version" in got.column_names:
        out["commit_versions"] = sorted(set(got.column("_commit_version").cast(pa.int64()).to_pylist()))
    out["equals_model"] = canonical(got).equals(model)
    out["ok"] = out["equals_model"] and out.get("commit_versions", [version]) == [version]
    return out


def full_diff(old: pa.Table, new: pa.Table, key: str = "id") -> pa.Table:
    """What a consumer without a change feed computes: join two versions' rows on key (full outer) and
    keep the rows whose other columns differ (update pre/post images), or that only one side has
    (deletes, inserts)."""
    others = [c for c in old.column_names if c != key]
    new_names = {c: f"{c}__new" for c in others}
    ones = lambda t: pa.array(np.ones(t.num_rows, dtype=bool))
    j = old.append_column("__in_old", ones(old)).join(
        new.rename_columns(new_names).append_column("__in_new", ones(new)), keys=key, join_type="full outer")
    in_old, in_new = (pc.fill_null(j.column(c), False) for c in ("__in_old", "__in_new"))
    differs = pa.array(np.zeros(j.num_rows, dtype=bool))
    for c in others:
        a, b = j.column(c), j.column(new_names[c])
        ne = pc.or_(pc.fill_null(pc.not_equal(a, b), False), pc.xor(pc.is_null(a), pc.is_null(b)))
        differs = pc.or_(differs, ne)
    both = pc.and_(in_old, in_new)
    updated = pc.and_(both, differs)
    pre = j.filter(pc.or_(updated, pc.invert(in_new)))
    post = j.filter(pc.or_(updated, pc.invert(in_old)))

    def side(rows: pa.Table, names: dict, in_other: str, same: str, alone: str) -> pa.Table:
        kind = pc.if_else(pc.fill_null(rows.column(in_other), False), same, alone)
        return pa.table({key: rows.column(key)} | {c: rows.column(names.get(c, c)) for c in others} | {"_change_type": kind})

    return pa.concat_tables([side(pre, {}, "__in_new", PRE, "delete"), side(post, new_names, "__in_old", POST, "insert")])


class LaminaChanges:
    name = "lamina"
    label = "Lamina (merge-on-read merge, the default)"
    call = "`t.changes(v - 1, v).to_arrow()`"
    table = "lamina"  # the table it reads

    def open(self, uri):
        import lamina

        return lamina.open_table(uri)

    def read(self, h, v: int) -> pa.Table:
        return h.changes(v - 1, v).to_arrow()


class LaminaCowChanges(LaminaChanges):
    name = "lamina-cow"
    label = "Lamina (copy-on-write merge; no target)"
    table = "lamina-cow"


class DeltaChanges:
    name = "deltalake"
    label = "deltalake"
    call = "`dt.load_cdf(starting_version=v, ending_version=v)` read into a pyarrow Table"
    table = "deltalake"

    def open(self, uri):
        from deltalake import DeltaTable

        return DeltaTable(uri)

    def read(self, h, v: int) -> pa.Table:
        return pa.RecordBatchReader.from_stream(h.load_cdf(starting_version=v, ending_version=v)).read_all()


class FullDiff(LaminaChanges):
    name = "full-diff"
    label = "full read + diff (Lamina table)"
    call = "`t.scan(version=v - 1).to_arrow()` + `t.scan(version=v).to_arrow()` + Arrow full outer join on id"

    def read(self, h, v: int) -> pa.Table:
        return full_diff(h.scan(version=v - 1).to_arrow(), h.scan(version=v).to_arrow())


CHANGE_ADAPTERS = {a.name: a for a in (LaminaChanges, LaminaCowChanges, DeltaChanges, FullDiff)}


def build_lamina(root: str, data: pa.Table, cfg: Config, source: pa.Table, ws: Workspace, cow: bool) -> dict:
    import lamina

    uri = os.path.join(root, "t")
    t0 = now()
    t = lamina.create_table(uri, SCHEMA, properties={"write.max-rows-per-file": str(cfg.rows // cfg.files)})
    t.append(data)
    out = {"lamina": {"uri": uri, "append_s": now() - t0, "files_before": len(t.scan().plan())}}
    if cow:
        flush_lamina_hints()
        out["lamina-cow"] = {"uri": os.path.join(ws.copy(root, "lamina-cow"), "t")}
    for name, mode in (("lamina", None), ("lamina-cow", "copy-on-write")):
        if name not in out:
            continue
        h = lamina.open_table(out[name]["uri"])
        t0 = now()
        r = h.merge(source, on="id", mode=mode).when_matched_update_all().execute()
        out[name] |= {"merge_s": now() - t0, "version": int(h.version), "files_after": len(h.scan().plan()),
                      "merge": {k: getattr(r, k) for k in ("rows_updated", "files_scanned", "files_touched")}}
    flush_lamina_hints()
    return out


def build_delta(root: str, data: pa.Table, cfg: Config, source: pa.Table) -> dict:
    from deltalake import DeltaTable

    uri = os.path.join(root, "t")
    t0 = now()
    delta_table_of_files(uri, even_slices(data, cfg.files), ["id", "value"], configuration=CDF)
    append_s = now() - t0
    dt = DeltaTable(uri)
    t0 = now()
    metrics = dt.merge(source=source, predicate="t.id = s.id", source_alias="s", target_alias="t").when_matched_update_all().execute()
    merge_s = now() - t0
    dt = DeltaTable(uri)
    cdc = os.path.join(uri, "_change_data")
    return {"deltalake": {
        "uri": uri, "append_s": append_s, "merge_s": merge_s, "version": int(dt.version()), "files_before": cfg.files,
        "files_after": len(dt.file_uris()), "change_data_files": len(os.listdir(cdc)) if os.path.isdir(cdc) else 0,
        "merge": {k: metrics.get(k) for k in ("num_target_rows_updated", "num_target_files_removed", "num_target_files_added")},
    }}


def profile_top(stem: str, n: int = PROFILE_TOP) -> list[str]:
    """The n entries of bench/out/<stem>.prof with the most own time, as 'function (file:line): tottime / cumtime'."""
    import pstats

    st = pstats.Stats(str(OUT_DIR / f"{stem}.prof")).stats
    rows = sorted(st.items(), key=lambda kv: kv[1][2], reverse=True)[:n]
    return [f"{fn} ({Path(f).name}:{ln}) {fmt_s(tt)} own / {fmt_s(ct)} cum" for (f, ln, fn), (_cc, _nc, tt, ct, _c) in rows]


def bench_changes(ws: Workspace, cfg: Config, names: list[str]) -> dict:
    data = make_batch(0, cfg.rows)
    old = data.take(pa.array(updated_ids(cfg)))  # make_batch(0, n)'s ids are the row positions
    source, model = merge_source(old), model_changes(old)
    res: dict = {"built": {}, "errors": {}}
    say(f"building: {cfg.rows:,} rows in {cfg.files} files, then a merge updating {cfg.updates:,} rows")
    tables: dict[str, dict] = {}
    if {"lamina", "lamina-cow", "full-diff"} & set(names):
        try:
            tables |= build_lamina(ws.new("lamina"), data, cfg, source, ws, cow="lamina-cow" in names)
        except Exception as e:  # noqa: BLE001
            log_error("changes/lamina/build", e)
            for n in ("lamina", "lamina-cow"):
                res["errors"][n] = err_text(e)
    if "deltalake" in names:
        try:
            tables |= build_delta(ws.new("deltalake"), data, cfg, source)
        except Exception as e:  # noqa: BLE001
            log_error("changes/deltalake/build", e)
            res["errors"]["deltalake"] = err_text(e)
    del data
    res["built"] = {k: {x: y for x, y in v.items() if x != "uri"} for k, v in tables.items()}
    for k, v in res["built"].items():
        say(f"  {k}: {v}")
    readers = {n: CHANGE_ADAPTERS[n]() for n in names if CHANGE_ADAPTERS[n].table in tables}
    handles, lat, checks = {}, {n: [] for n in readers}, {n: [] for n in readers}
    for n, a in list(readers.items()):
        try:
            handles[n] = a.open(tables[a.table]["uri"])
        except Exception as e:  # noqa: BLE001
            log_error(f"changes/{n}/open", e)
            res["errors"][n] = err_text(e)
            del readers[n]
    for rnd in range(cfg.rounds):
        order = rotated(list(readers), rnd)
        for n in order:
            a, v = readers[n], tables[readers[n].table]["version"]
            try:
                checks[n].append(check_changes(a.read(handles[n], v), model, v))  # untimed: re-warm, and the answer checked
                for _ in range(cfg.block):
                    t0 = now()
                    a.read(handles[n], v)
                    lat[n].append(now() - t0)
            except Exception as e:  # noqa: BLE001
                log_error(f"changes/{n}/round{rnd}", e)
                res["errors"][n] = err_text(e)
                del readers[n]
        say(f"round {rnd + 1}/{cfg.rounds}: " + ", ".join(f"{n} p50 {fmt_s(p50(lat[n][-cfg.block:]))}" for n in order if lat[n]))
    res["lat"], res["checks"] = lat, {n: c[0] | {"all_ok": all(x["ok"] for x in c)} for n, c in checks.items() if c}
    res["profile"] = {}
    for n in ("lamina", "lamina-cow"):
        if n in readers:
            stem = f"changes_{n}"
            prof = profile_start(True)
            readers[n].read(handles[n], tables[readers[n].table]["version"])
            profile_dump(prof, stem)
            res["profile"][n] = profile_top(stem)
    return res


def quantile(xs, q):
    return float(np.quantile(np.asarray(xs), q)) if xs else None


def fmt_x(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}×" if x < 0.1 else f"{x:.2f}×" if x < 10 else f"{x:.0f}×"


def spread(xs: list[float]) -> str:
    return f"{fmt_s(quantile(xs, 0.25))}–{fmt_s(quantile(xs, 0.75))}"


def summarise_changes(cfg: Config, res: dict, names: list[str]) -> tuple[Section, list[Target]]:
    lat, checks = res.get("lat", {}), res.get("checks", {})
    med = {n: p50(lat.get(n, [])) for n in names}
    lam = med.get("lamina")
    ratio = {n: lam / med[n] if lam and med.get(n) else None for n in names}
    ok_lamina = checks.get("lamina", {}).get("all_ok", False)
    oks = {}
    for peer, limit in (("deltalake", 0.5), ("full-diff", 0.1)):
        r = ratio.get(peer)
        oks[peer] = None if r is None else r <= limit and ok_lamina and checks.get(peer, {}).get("all_ok", False)
    built = res.get("built", {})
    sec = Section(
        key="changes",
        title=f"Changes of one merge: {cfg.updates:,} updated rows in a {cfg.rows:,}-row, {cfg.files}-file table",
        what=(
            f"Same history in every table: version 0 empty, version 1 {cfg.rows:,} rows (id int64, category string, value "
            f"double, ts timestamp[us]; bench/common.make_batch) in {cfg.files} files of {cfg.rows // cfg.files:,} rows, "
            f"version 2 a merge updating {cfg.updates:,} rows whose ids are drawn at random (seed {SEED}) over the whole "
            "table (new `value` and `category`; `when_matched_update_all`). **Lamina**: one `t.append` with "
            "`write.max-rows-per-file`, `t.merge(source, on=\"id\").when_matched_update_all().execute()` (merge-on-read, "
            "the default); **Lamina copy-on-write**: a copy of that table before the merge, merged with "
            "`mode=\"copy-on-write\"`; **deltalake**: `DeltaTable.create(..., configuration={\"delta.enableChangeDataFeed\": "
            "\"true\"})`, the same rows in the same 80-file layout written by pyarrow and registered in one "
            "`create_write_transaction` (delta-rs's writer cannot cut files at a row count), then "
            "`dt.merge(source, \"t.id = s.id\", ...).when_matched_update_all().execute()`. Timed, through a handle opened "
            "once: " + "; ".join(f"**{CHANGE_ADAPTERS[n].label}** {CHANGE_ADAPTERS[n].call}" for n in names)
            + f". {cfg.rounds} rounds; in each, every reader in turn (order rotating) makes one untimed call (re-warm; its "
            f"answer is checked) and {cfg.block} timed ones. Ratio = Lamina's time / the reader's (< 1: Lamina is faster)."
        ),
        columns=["reader", "timed calls", "p50", "p25–p75", "min", "Lamina / this (p50)", "answer (untimed calls)", "target"],
    )
    for n in names:
        xs = lat.get(n, [])
        err = res.get("errors", {}).get(n)
        a = CHANGE_ADAPTERS[n]
        if not xs:
            sec.error_row(a.label, err or "no figures")
            continue
        c = checks.get(n, {})
        answer = (
            ", ".join(f"{v:,} {k}" for k, v in sorted(c.get("by_type", {}).items()))
            + ("; rows = the model's in every call" if c.get("all_ok") else "; **CHECK FAILED** (rows differ from the model)")
        )
        tgt = {"deltalake": f"{TARGET_DELTA}: {verdict(oks.get('deltalake'))}",
               "full-diff": f"{TARGET_DIFF}: {verdict(oks.get('full-diff'))}"}.get(n, "–")
        sec.rows.append([a.label, str(len(xs)), fmt_s(med[n]), spread(xs), fmt_s(min(xs)),
                         "–" if n == "lamina" else fmt_x(ratio[n]), answer + (f"; {err}" if err else ""), tgt])
    for peer, target in (("deltalake", TARGET_DELTA), ("full-diff", TARGET_DIFF)):
        if ratio.get(peer) is not None:
            sec.notes.append(f"Target (issue 15): {target} — **{verdict(oks[peer])}**: Lamina {fmt_s(lam)} / {peer} "
                             f"{fmt_s(med[peer])} = {fmt_x(ratio[peer])}.")
    sec.notes.append(
        f"Answer checked against a model on every untimed call: {cfg.updates:,} update_preimage rows holding the rows of "
        f"version 1 and {cfg.updates:,} update_postimage rows holding the merge source's, nothing else, all with "
        "_commit_version 2 (deltalake answers category as string_view and _commit_version as uint64: compared after a cast)."
    )
    for n, b in built.items():
        sec.notes.append(
            f"Build of {n} (untimed): version 1 "
            + (f"in {fmt_s(b['append_s'])} ({b['files_before']} files)" if "append_s" in b else "copied from lamina's")
            + f", the merge in "
            f"{fmt_s(b.get('merge_s'))} → version {b.get('version')}, {b.get('files_after')} live files"
            + (f", {b['change_data_files']} change data files" if "change_data_files" in b else "")
            + f"; merge metrics {b.get('merge')}."
        )
    for n, top in res.get("profile", {}).items():
        sec.notes.append(f"cProfile of one more `changes()` call ({n}; bench/out/changes_{n}_profile.txt; calling thread only), "
                         f"top {len(top)} by own time: " + "; ".join(top) + ".")
    return sec, [Target(f"changes of one merge: {TARGET_DELTA}", oks["deltalake"], fmt_x(ratio.get("deltalake"))),
                 Target(f"changes of one merge: {TARGET_DIFF}", oks["full-diff"], fmt_x(ratio.get("full-diff")))]


# =========================================================================== 2. row lineage cost on appends
LINEAGE_TABLES = {"on": None, "off": NO_LINEAGE}  # name -> properties at creation


def lineage_state(uri: str, rows: int, lineage: bool, versions: int | None = None) -> dict:
    """The table at uri after its writes: its row count (and version), and whether it has row lineage as
    expected: with lineage its `_row_id`s are 0..rows-1, each once; without, asking for `_row_id` raises
    RowLineageNotEnabled. "ok": all as expected."""
    import lamina

    out: dict = {}
    try:
        from lamina.errors import RowLineageNotEnabled

        t = lamina.open_table(uri)
        out |= {"rows": t.scan().count(), "files": len(t.scan().plan()), "version": int(t.version)}
        try:
            rid = t.scan(columns=["_row_id"]).to_arrow().column("_row_id")
            out["row_ids_0_to_n"] = (rid.null_count == 0 and len(rid) == rows == pc.count_distinct(rid).as_py()
                                     and pc.min_max(rid).as_py() == {"min": 0, "max": rows - 1})
        except RowLineageNotEnabled:
            out["row_ids"] = "refused (RowLineageNotEnabled)"
    except Exception as e:  # noqa: BLE001
        log_error(f"lineage check {uri}", e)
        out["failed"] = err_text(e)
    out["ok"] = ("failed" not in out and out["rows"] == rows and (versions is None or out["version"] == versions)
                 and (out.get("row_ids_0_to_n") is True if lineage else "row_ids" in out))
    return out


def state_text(st: dict) -> str:
    """A lineage_state answer for the report."""
    text = st.get("failed") or ", ".join(f"{x} {y:,}" if isinstance(y, int) and not isinstance(y, bool) else f"{x} {y}"
                                         for x, y in st.items() if x != "ok")
    return text + ("" if st.get("ok") else " — **CHECK FAILED**")


def bench_appends(ws: Workspace, cfg: Config, _names=None) -> dict:
    s = systems.get("lamina")
    warm_up_appends(s, ws.new("warm"), cfg.append_rows)
    roots = {k: ws.new(f"lineage-{k}") for k in LINEAGE_TABLES}
    handles = {k: s.create(roots[k], properties=p) for k, p in LINEAGE_TABLES.items()}
    lat: dict[str, list[float]] = {k: [] for k in LINEAGE_TABLES}
    blocks = -(-cfg.appends // APPEND_BLOCK)
    say(f"appends: {blocks} blocks of {APPEND_BLOCK} x {cfg.append_rows} rows per table, lineage on / off alternating")
    for b in range(blocks):
        for k in rotated(list(LINEAGE_TABLES), b):  # on, off, off, on, on, off, ...: each goes first alike
            for i in range(b * APPEND_BLOCK, min((b + 1) * APPEND_BLOCK, cfg.appends)):
                handles[k], took = timed_append(s, handles[k], make_batch(i * cfg.append_rows, cfg.append_rows))
                lat[k].append(took)
    say("  p50: " + ", ".join(f"{k} {fmt_s(p50(v))}" for k, v in lat.items()))
    rows = cfg.appends * cfg.append_rows
    # systems.Lamina keeps its table in <root>/t
    state = {k: lineage_state(os.path.join(roots[k], "t"), rows, k == "on", versions=cfg.appends) for k in LINEAGE_TABLES}
    return {"lat": lat, "state": state}


def summarise_appends(cfg: Config, res: dict, _names=None) -> tuple[Section, list[Target]]:
    lat, state = res.get("lat", {}), res.get("state", {})
    med = {k: p50(v) for k, v in lat.items()}
    ratio = med["on"] / med["off"] if med.get("on") and med.get("off") else None
    ok = None if ratio is None else ratio <= 1.05 and all(s.get("ok") for s in state.values())
    sec = Section(
        key="appends",
        title=f"Row lineage cost on appends: {cfg.appends} appends of {cfg.append_rows} rows, lineage on vs off",
        what=(
            "Two Lamina tables (bench schema): **on** `create_table(uri, schema)` (row lineage is the default), **off** "
            "`create_table(uri, schema, properties={\"row-lineage.enabled\": \"false\"})`. After "
            "untimed appends to a throwaway table (imports, lazy start-up), "
            f"each gets {cfg.appends} appends of {cfg.append_rows} rows (`t.append(batch)`: data file + commit, timed end "
            f"to end), in blocks of {APPEND_BLOCK} alternating between the tables (on, off, off, on, ...), the same "
            "batches for both. Ratio = on / off (p50)."
        ),
        columns=["table", "appends", "p50", "p25–p75", "min", "on / off (p50)", "after the appends", "target"],
    )
    for k in LINEAGE_TABLES:
        xs = lat.get(k, [])
        if not xs:
            sec.error_row(k, "no figures")
            continue
        shown = state_text(state.get(k, {}))
        tgt = f"{TARGET_APPEND}: {verdict(ok)}" if k == "on" else "–"
        sec.rows.append([f"lineage {k}", str(len(xs)), fmt_s(med[k]), spread(xs), fmt_s(min(xs)),
                         fmt_x(ratio) if k == "on" else "–", shown, tgt])
    if ratio is not None:
        sec.notes.append(f"Target (issue 15): {TARGET_APPEND} — **{verdict(ok)}**: {fmt_s(med['on'])} / {fmt_s(med['off'])} "
                         f"= {fmt_x(ratio)}.")
    sec.notes.append("Checked after the appends: every append is one version and all rows are there; the lineage table's "
                     "`scan(columns=[\"_row_id\"])` gives row ids 0..n-1, each once; the other refuses `_row_id` "
                     "(RowLineageNotEnabled).")
    return sec, [Target(f"row lineage cost: {TARGET_APPEND}", ok, fmt_x(ratio))]


# =========================================================================== 3. Spark write with lineage
def bench_spark(ws: Workspace, cfg: Config, _names=None) -> dict:
    """bench/spark_bench.py's write measurement (its session, DataFrame and rotating rounds) with the writers
    raw Parquet, Lamina with lineage (the default) and Lamina without."""
    from spark_bench import bench_session, build_df, rotating_writes

    from lamina.spark import write

    t0 = now()
    spark = bench_session("lamina-changes-bench")
    out: dict = {"session_s": now() - t0}
    try:
        df = build_df(spark, cfg.spark_rows)
        writers = {
            "raw": lambda d: df.write.parquet(str(d)),
            "on": lambda d: write(df, str(d)),
            "off": lambda d: write(df, str(d), properties=NO_LINEAGE),
        }
        work = Path(ws.new("spark"))
        out["times"] = rotating_writes(spark, writers, work, cfg.spark_repeat, keep_first=True)
        out["state"] = {k: lineage_state(str(work / f"{k}1"), cfg.spark_rows, k == "on") for k in ("on", "off")}
    finally:
        spark.stop()
    return out


def summarise_spark(cfg: Config, res: dict, _names=None) -> tuple[Section, list[Target]]:
    times, state = res.get("times", {}), res.get("state", {})
    med = {k: p50(v) for k, v in times.items()}
    ratio = {k: med["raw"] / med[k] if med.get("raw") and med.get(k) else None for k in ("on", "off")}
    ok = None if ratio["on"] is None else ratio["on"] >= 0.9 and state.get("on", {}).get("ok", False)
    sec = Section(
        key="spark",
        title=f"Spark write with row lineage: {cfg.spark_rows:,} rows, vs raw Parquet",
        what=(
            f"bench/spark_bench.py's write measurement, reused (`bench_session`, `build_df`, `rotating_writes`): local[2], "
            f"spark.driver.memory=4g, TIMESTAMP_MICROS for every writer, {cfg.spark_rows:,} rows of 8 columns generated in "
            f"the JVM; {cfg.spark_repeat} timed rounds after a full-size warm-up round, the writers' order rotating, a "
            "full JVM GC before each write. **raw** `df.write.parquet(dir)`; **lineage on** `lamina.spark.write(df, uri)` "
            "(a new table; lineage is the default); **lineage off** `lamina.spark.write(df, uri, "
            "properties={\"row-lineage.enabled\": \"false\"})`. Ratio = raw time / the writer's (≥ 1: as fast as raw)."
        ),
        columns=["writer", "rounds", "p50", "min–max", "raw / this (p50)", "table written", "target"],
    )
    if "error" in res:
        sec.error_row("Spark", res["error"])
    for k, label in (("raw", "raw Parquet `df.write.parquet`"), ("on", "Lamina, lineage on"), ("off", "Lamina, lineage off")):
        xs = times.get(k, [])
        if not xs:
            continue
        shown = "–" if k == "raw" else state_text(state.get(k, {}))
        sec.rows.append([label, str(len(xs)), fmt_s(med[k]), f"{fmt_s(min(xs))}–{fmt_s(max(xs))}",
                         "–" if k == "raw" else fmt_x(ratio[k]), shown, f"{TARGET_SPARK}: {verdict(ok)}" if k == "on" else "–"])
    if ratio["on"] is not None:
        sec.notes.append(f"Target (issue 15): {TARGET_SPARK} — **{verdict(ok)}**: raw {fmt_s(med['raw'])} / lineage on "
                         f"{fmt_s(med['on'])} = {fmt_x(ratio['on'])} (lineage off: {fmt_x(ratio['off'])}).")
    if times:
        sec.notes.append("Runs: " + "; ".join(f"{k} " + ", ".join(fmt_s(x) for x in v) for k, v in times.items())
                         + f"; session start {fmt_s(res.get('session_s'))}.")
    sec.notes.append("Checked on each writer's first timed table: all rows there; lineage on gives row ids 0..n-1, "
                     "each once; lineage off refuses `_row_id`.")
    return sec, [Target(f"row lineage cost: {TARGET_SPARK}", ok, fmt_x(ratio["on"]))]


# =========================================================================== the case
PARTS = {  # part -> (run(ws, cfg, readers) -> raw results, summarise(cfg, results, readers) -> (Section, targets))
    "changes": (bench_changes, summarise_changes),
    "appends": (bench_appends, summarise_appends),
    "spark": (bench_spark, summarise_spark),
}


@case("changes", heavy=True, title=SECTION_TITLE, sizes=Config,
      quick=dict(rows=200_000, files=8, updates=2_000, rounds=2, block=2, appends=40, spark_rows=200_000, spark_repeat=1),
      tiny=dict(rows=20_000, files=4, updates=200, rounds=1, block=1, appends=20, append_rows=10, spark_rows=20_000),
      only={"readers": tuple(CHANGE_READERS), "parts": tuple(BENCHES)},
      needs=(module("deltalake", "pyspark"),), versions=("lamina", "deltalake", "pyarrow", "pyspark"))
def changes(run: Run) -> Report:
    """The change feed of one merge vs deltalake and a full diff; row lineage's cost on appends and Spark writes."""
    cfg, names = run.sizes, run.only("readers")
    if "changes" in run.only("parts") and "lamina" not in names:
        raise ValueError("--only must include the reader lamina (every ratio is Lamina's)")
    raw: dict = {}
    secs, targets = [], []
    for part in run.only("parts"):
        bench, summarise = PARTS[part]
        try:
            res = raw[part] = bench(run.ws, cfg, names)
        except Exception as e:  # noqa: BLE001
            log_error(part, e)
            res = raw[part] = {"error": err_text(e)}
            say(f"{part}: {res['error']}")
        sec, judged = summarise(cfg, res, names)
        secs.append(sec)
        targets += judged
    return Report(title=SECTION_TITLE, targets=targets, sections=secs, raw=raw)
