"""Wide tables (issue 19, item 5): 500 columns (int64, strings of 50-200 characters, doubles in turn;
c0 is the id), Lamina against deltalake (and Lance for appends), in one run (the case `wide`).

1. **Append**: `appends` (40) rounds after 2 untimed appends; each round appends the same new 100-row
   batch to a Lamina table, a deltalake table and a Lance dataset (order rotating); p50 per system.
2. **Manifest bytes per file**: Lamina's manifests (root + leaves of the latest version: `t.inspect.manifests()`)
   over its live files, against deltalake's checkpoint (`dt.create_checkpoint()`) over its files; on the
   append tables and on the 20,000-file tables.
3. **Plan over 20,000 files**: each system's table holds 20,000 data files whose statistics are those its
   own writer recorded for the appended files (cycled; c0's bounds set per file to its 100 ids): Lamina
   by one `add_files(check_files=False)`, deltalake by one `create_write_transaction` of the add actions
   and a checkpoint (the files themselves are not written: a plan reads metadata only). The predicate
   `c0 >= lo AND c0 < hi` selects 1% of the files; Lamina `len(t.scan(where=...).plan())` against
   deltalake `len(dt.file_uris(file_pruning_predicate=...))` (what bench/run.py's plan benchmark
   compares), both must return the same files count. Warm: p50 of `plans` (10) plans on open handles;
   open+plan: a new handle each time (Lamina's process-wide manifest cache cleared first).

Targets (ratios Lamina / peer, this run): append p50 ≤ 1.0× deltalake and Lance; manifest bytes per
file ≤ 2× deltalake's checkpoint bytes per file; plan ≤ 1.0× deltalake. A profile of Lamina's append
and plan goes to bench/out/wide_<op>_profile.txt.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from common import OUT_DIR, Workspace, fmt_s, fmt_x, now, p50, rotated, say
from registry import Run, case, module
from report import Report, Section, Target

SECTION_TITLE = "Wide tables (issue 19)"
COLUMNS = 500
ROWS = 100
APPEND_TARGET, BYTES_TARGET, PLAN_TARGET = 1.0, 2.0, 1.0
LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


def wide_schema() -> pa.Schema:
    kinds = (pa.int64(), pa.string(), pa.float64())
    return pa.schema([(f"c{i}", kinds[i % 3]) for i in range(COLUMNS)])


def wide_batch(first_id: int, rows: int, rng: np.random.Generator) -> pa.Table:
    """rows rows; c0 = ids first_id.., other ints random, strings 50-200 random letters, doubles random."""
    schema = wide_schema()
    cols = []
    for i, f in enumerate(schema):
        if i == 0:
            cols.append(pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)))
        elif f.type == pa.int64():
            cols.append(pa.array(rng.integers(0, 1_000_000, rows)))
        elif f.type == pa.float64():
            cols.append(pa.array(rng.random(rows)))
        else:
            cols.append(random_strings(rows, rng))
    return pa.Table.from_arrays(cols, schema=schema)


# --------------------------------------------------------------------------- systems
class LaminaSys:
    name = "lamina"

    def create(self, root):
        import lamina

        return lamina.create_table(os.path.join(root, "t"), wide_schema())

    def append(self, h, data):
        h.append(data)
        return h

    def settle(self):
        from lamina.commit.log import flush_hints

        flush_hints()


class DeltaSys:
    name = "deltalake"

    def create(self, root):
        from deltalake import DeltaTable

        return DeltaTable.create(os.path.join(root, "t"), schema=wide_schema())

    def append(self, h, data):
        from deltalake import write_deltalake

        write_deltalake(h, data, mode="append")
        return h

    def settle(self):
        pass


class LanceSys:
    name = "lance"

    def create(self, root):
        import lance

        return lance.write_dataset(wide_schema().empty_table(), os.path.join(root, "t.lance"), schema=wide_schema())

    def append(self, h, data):
        import lance

        return lance.write_dataset(data, h, mode="append")

    def settle(self):
        pass


SYSTEMS = [LaminaSys(), DeltaSys(), LanceSys()]


def bench_appends(ws: Workspace, appends: int, rng: np.random.Generator) -> dict:
    handles = {s.name: s.create(ws.new(s.name)) for s in SYSTEMS}
    roots = {}
    next_id = 0
    times: dict[str, list[float]] = {s.name: [] for s in SYSTEMS}
    for rep in range(appends + 2):
        batch = wide_batch(next_id, ROWS, rng)
        next_id += ROWS
        for s in rotated(SYSTEMS, rep):
            t0 = now()
            handles[s.name] = s.append(handles[s.name], batch)
            dt = now() - t0
            s.settle()
            if rep >= 2:
                times[s.name].append(dt)
    for s in SYSTEMS:
        h = handles[s.name]
        roots[s.name] = getattr(h, "uri", None) or getattr(h, "table_uri", None)
    return {"times": times, "handles": handles, "ids": next_id}


# --------------------------------------------------------------------------- metadata bytes
def lamina_manifest_bytes(t) -> tuple[int, int]:
    """(bytes of the latest version's manifests, live data files)."""
    from lamina.commit.log import flush_hints

    flush_hints()
    m = t.inspect.manifests()
    files = t.inspect.files().num_rows
    return int(sum(m.column("size").to_pylist())), files


def delta_checkpoint_bytes(dt) -> tuple[int, int]:
    dt.create_checkpoint()
    log = os.path.join(dt.table_uri.removeprefix("file://"), "_delta_log")
    size = sum(os.path.getsize(os.path.join(log, f)) for f in os.listdir(log) if ".checkpoint" in f and f.endswith(".parquet"))
    return size, len(dt.file_uris())


# --------------------------------------------------------------------------- 20,000-file tables
STATS_COLUMNS = 32  # both systems' default: statistics of the first 32 columns
DELTA_STRING_PREFIX = 64  # deltalake's writer keeps the first 64 characters of a string bound (checked at run time)


def random_strings(n: int, rng: np.random.Generator) -> pa.StringArray:
    lengths = rng.integers(50, 201, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    data = LETTERS[rng.integers(0, 26, int(offsets[-1]))]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))


def file_stats(n_files: int, rng: np.random.Generator) -> dict[str, tuple[pa.Array, pa.Array]]:
    """Per-file (lower, upper) of the first 32 columns of n_files files of 100 random rows each: c0
    holds file k's ids [100 k, 100 k + 99]; every other bound differs from file to file (as
    random data's do), so neither system's metadata compresses by repetition."""
    out = {}
    for f in list(wide_schema())[:STATS_COLUMNS]:
        if f.name == "c0":
            lo = np.arange(n_files, dtype=np.int64) * ROWS
            out[f.name] = (pa.array(lo), pa.array(lo + ROWS - 1))
        elif f.type == pa.int64():
            out[f.name] = (pa.array(rng.integers(0, 10_000, n_files)), pa.array(rng.integers(990_000, 1_000_000, n_files)))
        elif f.type == pa.float64():
            out[f.name] = (pa.array(rng.random(n_files) * 0.01), pa.array(0.99 + rng.random(n_files) * 0.01))
        else:
            a, b = random_strings(n_files, rng), random_strings(n_files, rng)
            swap = pa.compute.greater(a, b)
            out[f.name] = (pa.compute.if_else(swap, b, a), pa.compute.if_else(swap, a, b))
    return out


def build_lamina_20k(root: str, stats: dict, n_files: int, size: int):
    """A Lamina table of n_files synthetic entries (one ``add_files``), with the exact statistics
    ``stats`` (Lamina keeps them as its default policy says: strings cut to 16 characters)."""
    import lamina

    t = lamina.create_table(os.path.join(root, "t"), wide_schema())
    cols = {
        "path": pa.array([f"data/{k:08d}-0000000000000000000000000000000000000000.parquet" for k in range(n_files)]),
        "size": pa.array(np.full(n_files, size, dtype=np.int64)),
        "record_count": pa.array(np.full(n_files, ROWS, dtype=np.int64)),
    }
    for name, (lo, hi) in stats.items():
        cols |= {f"lower.{name}": lo, f"upper.{name}": hi, f"null_count.{name}": pa.array(np.zeros(n_files, dtype=np.int64))}
    t.add_files(pa.table(cols), check_files=False)
    return lamina.open_table(t.uri)


def build_delta_20k(root: str, stats: dict, n_files: int, size: int):
    """A deltalake table whose version 1 adds n_files files with the statistics deltalake's writer
    would record for ``stats`` (strings cut to their first 64 characters), then a checkpoint."""
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    uri = os.path.join(root, "t")
    dt = DeltaTable.create(uri, schema=wide_schema())
    lows = {k: lo.to_pylist() for k, (lo, _) in stats.items()}
    highs = {k: hi.to_pylist() for k, (_, hi) in stats.items()}
    cut = lambda v: v[:DELTA_STRING_PREFIX] if isinstance(v, str) else v  # noqa: E731
    nulls = {k: 0 for k in stats}
    ms = int(time.time() * 1000)
    adds = []
    for k in range(n_files):
        st = {"numRecords": ROWS, "minValues": {c: cut(v[k]) for c, v in lows.items()},
              "maxValues": {c: cut(v[k]) for c, v in highs.items()}, "nullCount": nulls}
        name = f"part-{k:05d}-00000000-0000-0000-0000-000000000000-c000.snappy.parquet"
        adds.append(AddAction(name, size, {}, ms, True, json.dumps(st)))
    dt.create_write_transaction(adds, mode="append", schema=wide_schema())
    dt = DeltaTable(uri)
    dt.create_checkpoint()
    return DeltaTable(uri)


def delta_string_prefix(dt) -> int:
    """The longest string bound deltalake's writer recorded in dt's JSON commits."""
    log = os.path.join(dt.table_uri.removeprefix("file://"), "_delta_log")
    longest = 0
    for f in sorted(os.listdir(log)):
        if f.endswith(".json"):
            for line in open(os.path.join(log, f)):
                j = json.loads(line)
                if "add" in j:
                    st = json.loads(j["add"]["stats"])
                    longest = max([longest] + [len(v) for v in st["minValues"].values() if isinstance(v, str)])
    return longest


def bench_plans(lt, dt, n_files: int, reps: int) -> dict:
    import lamina
    from deltalake import DeltaTable
    from lamina.manifest.files import clear_cache

    lo = (n_files // 2) * ROWS
    hi = lo + n_files // 100 * ROWS
    pred = f"c0 >= {lo} AND c0 < {hi}"
    out = {"lamina": {"warm": [], "open": []}, "deltalake": {"warm": [], "open": []}, "pred": pred}
    counts = {}
    for rep in range(reps + 1):
        for name in rotated(["lamina", "deltalake"], rep):
            if name == "lamina":
                t0 = now()
                counts[name] = len(lt.scan(where=pred).plan())
                warm = now() - t0
                clear_cache()
                t0 = now()
                counts[name] = len(lamina.open_table(lt.uri).scan(where=pred).plan())
                opened = now() - t0
            else:
                t0 = now()
                counts[name] = len(dt.file_uris(file_pruning_predicate=pred))
                warm = now() - t0
                t0 = now()
                counts[name] = len(DeltaTable(dt.table_uri).file_uris(file_pruning_predicate=pred))
                opened = now() - t0
            if rep:
                out[name]["warm"].append(warm)
                out[name]["open"].append(opened)
    if counts["lamina"] != counts["deltalake"] or counts["lamina"] != n_files // 100:
        raise AssertionError(f"plans disagree: {counts} (want {n_files // 100})")
    out["files"] = counts["lamina"]
    return out


def profile(stem: str, fn, n: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / f"wide_{stem}_profile.txt", "w") as f:
        pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(40)


# --------------------------------------------------------------------------- the case
@dataclass
class Sizes:
    appends: int = 40
    files: int = 20_000
    plans: int = 10


@case("wide", title=SECTION_TITLE, sizes=Sizes, quick=dict(appends=5, files=2_000, plans=3),
      tiny=dict(appends=2, files=200, plans=1), needs=(module("deltalake", "lance"),), reps="plans")
def wide(run: Run) -> Report:
    """500-column tables: append, metadata bytes per file and planning, Lamina vs deltalake (and Lance)."""
    cfg, ws = run.sizes, run.ws
    rng = np.random.default_rng(19)
    raw: dict = {}
    say("appends")
    ap_res = bench_appends(ws, cfg.appends, rng)
    h = ap_res["handles"]
    app = {k: p50(v) for k, v in ap_res["times"].items()}
    raw["append"] = ap_res["times"]
    lam_bytes, lam_files = lamina_manifest_bytes(h["lamina"])
    dl_bytes, dl_files = delta_checkpoint_bytes(h["deltalake"])
    say("20k tables")
    prefix = delta_string_prefix(h["deltalake"])
    if prefix != DELTA_STRING_PREFIX:
        raise AssertionError(f"deltalake kept {prefix} characters of string bounds, not {DELTA_STRING_PREFIX}")
    size = int(p50(h["lamina"].inspect.files().column("size").to_pylist()))
    stats = file_stats(cfg.files, np.random.default_rng(20))
    lt = build_lamina_20k(ws.new("lamina20k"), stats, cfg.files, size)
    dt = build_delta_20k(ws.new("delta20k"), stats, cfg.files, size)
    lam20_bytes, lam20_files = lamina_manifest_bytes(lt)
    dl20_bytes, dl20_files = delta_checkpoint_bytes(dt)
    say("plans")
    plans = bench_plans(lt, dt, cfg.files, cfg.plans)
    raw["plans"] = plans
    say("profiles")
    rng2 = np.random.default_rng(7)
    batches = [wide_batch(10**9 + i * ROWS, ROWS, rng2) for i in range(20)]
    it = iter(batches)
    profile("append", lambda: h["lamina"].append(next(it)), len(batches))
    profile("plan", lambda: len(lt.scan(where=plans["pred"]).plan()), 20)
    a_dl, a_ln = app["lamina"] / app["deltalake"], app["lamina"] / app["lance"]
    b_app = (lam_bytes / lam_files) / (dl_bytes / dl_files)
    b_20k = (lam20_bytes / lam20_files) / (dl20_bytes / dl20_files)
    pw = p50(plans["lamina"]["warm"]) / p50(plans["deltalake"]["warm"])
    po = p50(plans["lamina"]["open"]) / p50(plans["deltalake"]["open"])
    targets = [
        Target(f"append p50 ≤ {APPEND_TARGET}× deltalake", a_dl <= APPEND_TARGET, fmt_x(a_dl)),
        Target(f"append p50 ≤ {APPEND_TARGET}× Lance", a_ln <= APPEND_TARGET, fmt_x(a_ln)),
        Target(f"manifest bytes per file ≤ {BYTES_TARGET}× deltalake's checkpoint bytes per file, {cfg.files:,} files",
               b_20k <= BYTES_TARGET, f"{fmt_x(b_20k)}; on the {lam_files}-file append tables {fmt_x(b_app)}"),
        Target(f"plan over {cfg.files:,} files ≤ {PLAN_TARGET}× deltalake, warm", pw <= PLAN_TARGET, fmt_x(pw)),
        Target(f"plan over {cfg.files:,} files ≤ {PLAN_TARGET}× deltalake, open+plan", po <= PLAN_TARGET, fmt_x(po)),
    ]
    appends = Section(key="append", title=f"Append of {ROWS} rows ({cfg.appends} per system after 2 untimed, order "
                      "rotating)", what="", columns=["system", "p50", "Lamina / this"],
                      rows=[[n, fmt_s(app[n]), fmt_x(app["lamina"] / app[n])] for n in ("lamina", "deltalake", "lance")])
    meta = Section(key="bytes", title="Metadata bytes per data file", what="", columns=[
        "table", "Lamina manifests", "bytes / file", "deltalake checkpoint", "bytes / file", "Lamina / deltalake"], rows=[
        [f"append table ({lam_files} files)", f"{lam_bytes:,}", f"{lam_bytes / lam_files:,.0f}", f"{dl_bytes:,}",
         f"{dl_bytes / dl_files:,.0f}", fmt_x(b_app)],
        [f"{cfg.files:,} files", f"{lam20_bytes:,}", f"{lam20_bytes / lam20_files:,.0f}", f"{dl20_bytes:,}",
         f"{dl20_bytes / dl20_files:,.0f}", fmt_x(b_20k)]])
    plan = Section(key="plan", title=f"Plan over {cfg.files:,} files: `{plans['pred']}` ({plans['files']} files, both)",
                   what="", columns=["system", "warm p50", "open+plan p50"],
                   rows=[[n, fmt_s(p50(plans[n]["warm"])), fmt_s(p50(plans[n]["open"]))] for n in ("lamina", "deltalake")])
    facts = [f"Table: {COLUMNS} columns (c0 id int64, then string of 50–200 letters, double, int64 in turn); Lamina's "
             "default statistics (the first 32 columns, strings cut to 16 characters); deltalake's default (its writer's "
             "stats of the first 32 columns)."]
    return Report(title=SECTION_TITLE, facts=facts, targets=targets, sections=[appends, meta, plan], raw=raw)
