"""Branches and write-audit-publish (issue 17), in one run: Lamina's branch operations against a tag
create and an append on the same table, and a branch made and written in Lamina and in Lance
(the case `branches`: `bench/run.py branches`).

Every table is local (a temp dir under /tmp) and starts with `history` (100) appends of `rows` (100)
rows (make_batch data: id, category, value, ts), one version each. Three measures, in one process:

1. **Create a branch, publish it (fast-forward), create a tag**, `iterations` (200) times on one table,
   after 5 untimed iterations (the first `create_branch` commits the `branches` writer feature): a tag
   of main's latest version (`t.tags.create(name)`), `h = t.branches.create(name)` (from main's latest), an
   untimed `h.append(batch)` on the branch, then `t.branches.publish(name)`, which must be a fast-forward (main did
   not move since the branch was made; checked in every version's summary). The tag is made before the
   branch in even iterations and after the publish in odd ones (both share the drift of the machine).
2. **Publish with rebase over `main_commits` (100) main commits**, `rebase_reps` (30) times after one
   untimed: a branch from main's latest with one append, then 100 appends to main (each timed: the
   "single append"), then `t.branches.publish(name)`, which must be a rebase (checked).
3. **Lance vs Lamina, branch create + a write on it**: a Lamina table and a Lance dataset of the same
   history; `lance_reps` (100) times each, in blocks of `block` (10) per system, order rotating, after
   2 untimed: Lamina `h = t.branches.create(name)` + `h.append(batch)`; Lance `b = ds.create_branch(name)` +
   `lance.write_dataset(batch, b, mode="append")`, batches of `lance_rows` (1,000) rows. Afterwards
   main holds its rows unchanged and the last branch its base + the batch, in both (checked).

Every table's rows are checked at the end against the ids the bench wrote. Where Lamina's time goes:
after the timed runs, a pass of each Lamina operation with every FileIO call (the storage layer: local
reads, stats, creates) recorded on the caller's thread and in the background, and a cProfile of each
operation (bench/out/branches_<op>_profile.txt).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common import (
    OUT_DIR, REPO_ROOT, Workspace, flush_lamina_hints, fmt_s, fmt_x, make_batch, now, p50, rotated, say, shown_path,
    spread, worker_cmd,
)
from registry import Run, case, module
from report import Report, Section, Target, verdict

SECTION_TITLE = "Branches and write-audit-publish (issue 17)"
TAG_TARGET = 1.0  # create_branch and publish (fast-forward) p50 ≤ x × create_tag p50
REBASE_TARGET = 2.0  # publish with rebase p50 ≤ x × a single append p50
LANCE_TARGET = 0.8  # Lamina create_branch + append ≤ x × Lance's create_branch + write_dataset
WARM_ITERATIONS = 5


@dataclass
class Config:
    history: int = 100
    rows: int = 100
    iterations: int = 200
    rebase_reps: int = 30
    main_commits: int = 100
    lance_reps: int = 100
    lance_rows: int = 1000
    block: int = 10
    profile_iterations: int = 50


class Ids:
    """Batches of make_batch data with ids never written before (each table's rows are checked by them)."""

    def __init__(self) -> None:
        self.next = 0

    def batch(self, n: int) -> pa.Table:
        b = make_batch(self.next, n)
        self.next += n
        return b


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = now()
    out = fn()
    return out, now() - t0


def lamina_table(root: str, cfg: Config, ids: Ids) -> tuple[Any, list[pa.Table]]:
    """A new Lamina table of cfg.history appends; (its handle, the batches written)."""
    import lamina

    batches = [ids.batch(cfg.rows) for _ in range(cfg.history)]
    t = lamina.create_table(os.path.join(root, "lamina"), batches[0].schema)
    for b in batches:
        t.append(b)
    return t, batches


def check_rows(t: Any, batches: list[pa.Table], what: str) -> int:
    """The table's ids are exactly those of batches (each once); their count."""
    got = t.scan(columns=["id"]).to_arrow().column("id").combine_chunks()
    want = pa.concat_arrays([b.column("id").combine_chunks() for b in batches])
    if not got.take(pc.sort_indices(got)).equals(want.take(pc.sort_indices(want))):
        raise RuntimeError(f"{what}: the table's ids are not the ones written ({len(got)} rows, {len(want)} expected)")
    return len(want)


# =========================================================================== 1. create branch, publish, tag
def bench_ops(t: Any, cfg: Config, ids: Ids, written: list[pa.Table], disk: DiskProbe) -> dict:
    """Samples (seconds) of create_tag, create_branch, the branch's append and publish (fast-forward);
    the disk probed once per iteration."""
    out: dict = {"create_tag": [], "create_branch": [], "branch_append": [], "publish_ff": [], "modes": Counter()}
    for i in range(-WARM_ITERATIONS, cfg.iterations):
        name = f"wap{i + WARM_ITERATIONS:05d}"

        def tag() -> float:
            return timed(lambda: t.tags.create(f"tag{i + WARM_ITERATIONS:05d}"))[1]

        s_tag = tag() if i % 2 == 0 else None
        h, s_branch = timed(lambda: t.branches.create(name))
        batch = ids.batch(cfg.rows)
        _, s_append = timed(lambda: h.append(batch))
        published, s_publish = timed(lambda: t.branches.publish(name))
        v = published.version
        written.append(batch)
        if s_tag is None:
            s_tag = tag()
        mode = t.metadata.summary.get("publish")
        if v != t.version or mode != "fast-forward":
            raise RuntimeError(f"publish of {name} committed version {v} as {mode!r}, not a fast-forward at {t.version}")
        if i >= 0:
            disk.sample()
            out["modes"][mode] += 1
            for k, s in (("create_tag", s_tag), ("create_branch", s_branch), ("branch_append", s_append),
                         ("publish_ff", s_publish)):
                out[k].append(s)
        if (i + 1) % 50 == 0:
            say(f"ops {i + 1}/{cfg.iterations}: " + ", ".join(f"{k} {fmt_s(p50(out[k]))}" for k in OP_KEYS))
    return out


OP_KEYS = ("create_tag", "create_branch", "publish_ff", "branch_append")


# =========================================================================== 2. publish with rebase
def rebase_round(t: Any, cfg: Config, ids: Ids, written: list[pa.Table], name: str,
                 on_publish: Callable[[Callable[[], Any]], Any] = lambda f: f()) -> tuple[list[float], Any]:
    """A branch with one append, cfg.main_commits timed appends to main, then on_publish(publish): (the
    appends' seconds, what on_publish returned). The publish must be a rebase."""
    h = t.branches.create(name)
    mine = ids.batch(cfg.rows)
    h.append(mine)
    appends = []
    for _ in range(cfg.main_commits):
        b = ids.batch(cfg.rows)
        appends.append(timed(lambda: t.append(b))[1])
        written.append(b)
    out = on_publish(lambda: t.branches.publish(name))
    written.append(mine)
    mode = t.metadata.summary.get("publish")
    if mode != "rebase" or t.metadata.summary.get("added-files") != 1:
        raise RuntimeError(f"publish of {name} was {mode!r} ({t.metadata.summary}), not a rebase adding one file")
    return appends, out


def bench_rebase(t: Any, cfg: Config, ids: Ids, written: list[pa.Table]) -> dict:
    out: dict = {"append": [], "publish_rebase": [], "append_round_p50": []}
    for r in range(-1, cfg.rebase_reps):
        appends, s = rebase_round(t, cfg, ids, written, f"rebase{r + 1:04d}", lambda f: timed(f)[1])
        if r >= 0:
            out["append"] += appends
            out["append_round_p50"].append(p50(appends))
            out["publish_rebase"].append(s)
    say(f"rebase: append {fmt_s(p50(out['append']))}, publish {fmt_s(p50(out['publish_rebase']))}")
    return out


# =========================================================================== 3. Lance vs Lamina
class LamBranchWrite:
    name = "lamina"

    def __init__(self, t: Any) -> None:
        self.t = t

    def create(self, name: str) -> Any:
        return self.t.branches.create(name)

    def write(self, h: Any, batch: pa.Table) -> Any:
        return h.append(batch)

    def main_rows(self) -> int:
        return self.t.refresh().scan(columns=["id"]).to_arrow().num_rows

    def branch_rows(self, name: str) -> int:
        return self.t.branch(name).scan(columns=["id"]).to_arrow().num_rows


class LanceBranchWrite:
    name = "lance"

    def __init__(self, uri: str, batches: list[pa.Table]) -> None:
        import lance

        self.uri = uri
        ds = lance.write_dataset(batches[0], uri)
        for b in batches[1:]:
            ds = lance.write_dataset(b, ds, mode="append")
        self.ds = ds

    def create(self, name: str) -> Any:
        return self.ds.create_branch(name)

    def write(self, h: Any, batch: pa.Table) -> Any:
        import lance

        return lance.write_dataset(batch, h, mode="append")

    def main_rows(self) -> int:
        import lance

        return lance.dataset(self.uri).count_rows()

    def branch_rows(self, name: str) -> int:
        import lance

        return lance.dataset(self.uri).checkout_version((name, None)).count_rows()


def bench_lance(ws: Workspace, cfg: Config) -> dict:
    """Per system: create / write / total seconds per rep and the block (round) it ran in."""
    ids = Ids()
    root = ws.new("vs-lance")
    t, history = lamina_table(root, cfg, ids)
    systems_ = [LamBranchWrite(t), LanceBranchWrite(os.path.join(root, "t.lance"), history)]
    base_rows = cfg.history * cfg.rows
    res: dict = {s.name: {"create": [], "write": [], "total": [], "round": []} for s in systems_}
    last: dict[str, str] = {}
    seq = 0

    def one(s: Any, rnd: int | None) -> None:
        nonlocal seq
        name = f"load{seq:05d}"
        seq += 1
        batch = make_batch(10**9 + seq * cfg.lance_rows, cfg.lance_rows)  # the same batch for both systems' turn
        h, s_create = timed(lambda: s.create(name))
        _, s_write = timed(lambda: s.write(h, batch))
        last[s.name] = name
        if rnd is not None:
            cell = res[s.name]
            for k, v in (("create", s_create), ("write", s_write), ("total", s_create + s_write), ("round", rnd)):
                cell[k].append(v)

    for s in systems_:
        for _ in range(2):
            one(s, None)
    rounds = max(1, cfg.lance_reps // cfg.block)
    for rnd in range(rounds):
        for s in rotated(systems_, rnd):
            for _ in range(cfg.block):
                one(s, rnd)
    checks = {}
    for s in systems_:
        main, branch = s.main_rows(), s.branch_rows(last[s.name])
        if main != base_rows or branch != base_rows + cfg.lance_rows:
            raise RuntimeError(f"{s.name}: main holds {main} rows (expected {base_rows}), branch {last[s.name]} "
                               f"{branch} (expected {base_rows + cfg.lance_rows})")
        checks[s.name] = {"main_rows": main, "last_branch_rows": branch}
    say("vs lance: " + ", ".join(f"{k} {fmt_s(p50(v['total']))}" for k, v in res.items()))
    return {"runs": res, "rounds": rounds, "checks": checks, "table": t}


# =========================================================================== where the time goes
IO_METHODS = ("get", "get_optional", "get_range", "exists", "put", "put_if_absent", "put_new", "delete",
              "delete_many", "list", "list_names", "list_first_page", "list_dir", "size", "sizes")


def path_kind(path: str) -> str:
    """A storage path with its run-specific parts (ids, version numbers, names) replaced."""
    p = re.sub(r"^data/.*", "data/<file>.parquet", str(path))
    p = re.sub(r"-guard\.[0-9a-f]+", "-guard.<g>", p)
    p = re.sub(r"manifests/[0-9a-f]{32}\.(\w+)\.parquet", r"manifests/<m>.\1.parquet", p)
    p = re.sub(r"[0-9a-f]{32}", "<id>", p)
    p = re.sub(r"\d{20}", "<v>", p)
    return re.sub(r"[a-z]+\d{5}", "<name>", p)


class IoTrace:
    """While on, every FileIO call (the outermost one: FileIO methods call each other) is recorded:
    (thread: "caller" or "background", method, path kind, seconds). ``run(op, fn)`` files the calls
    fn makes (its background hint write included) under op."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, float]] = []
        self.by_op: dict[str, list[tuple[str, str, str, float]]] = {}
        self.counts: Counter = Counter()
        self._depth = threading.local()
        self._saved: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "IoTrace":
        from lamina.io.fileio import FileIO

        flush_lamina_hints()  # no earlier background write lands inside the trace
        for m in IO_METHODS:
            orig = getattr(FileIO, m)
            self._saved[m] = orig
            setattr(FileIO, m, self._wrap(m, orig))
        return self

    def __exit__(self, *exc: Any) -> None:
        from lamina.io.fileio import FileIO

        flush_lamina_hints()
        for m, orig in self._saved.items():
            setattr(FileIO, m, orig)

    def _wrap(self, method: str, orig: Callable) -> Callable:
        trace = self

        def wrapper(io: Any, *args: Any, **kw: Any) -> Any:
            depth = getattr(trace._depth, "n", 0)
            trace._depth.n = depth + 1
            t0 = now()
            try:
                return orig(io, *args, **kw)
            finally:
                trace._depth.n = depth
                if depth == 0:
                    who = "caller" if threading.current_thread() is threading.main_thread() else "background"
                    arg = args[0] if args else kw.get("path", kw.get("prefix", ""))
                    arg = f"<{len(arg)} paths>" if isinstance(arg, (list, pa.Array)) else arg
                    with trace._lock:
                        trace.calls.append((who, method, path_kind(arg), now() - t0))

        return wrapper

    def run(self, op: str, fn: Callable[[], Any]) -> Any:
        self.drop()
        out = fn()
        flush_lamina_hints()
        with self._lock:
            self.by_op.setdefault(op, []).extend(self.calls)
            self.calls = []
        self.counts[op] += 1
        return out

    def drop(self) -> None:
        """Forget the calls made since the last run (work around the operations traced)."""
        flush_lamina_hints()
        with self._lock:
            self.calls = []

    def summary(self) -> dict:
        return {op: io_summary(calls, self.counts[op]) for op, calls in self.by_op.items()}


def io_summary(calls: list[tuple[str, str, str, float]], n: int) -> dict:
    """Per operation call (n of them): the caller's I/O calls in order of first use, with counts and
    time (each kind's p50 × its count: robust to the shared machine's outliers), and the background calls."""
    per: dict[tuple[str, str, str], list[float]] = {}
    for who, method, kind, s in calls:
        per.setdefault((who, method, kind), []).append(s)
    rows = [{"thread": who, "call": f"{method} {kind}", "per_op": len(v) / n, "p50_us": p50(v) * 1e6,
             "us_per_op": p50(v) * len(v) / n * 1e6} for (who, method, kind), v in per.items()]
    caller = [r for r in rows if r["thread"] == "caller"]
    return {
        "calls": rows,
        "caller_calls_per_op": sum(r["per_op"] for r in caller),
        "caller_io_us_per_op": sum(r["us_per_op"] for r in caller),
        "background_calls_per_op": sum(r["per_op"] for r in rows if r["thread"] == "background"),
    }


# Where a function's own time goes, by its file / built-in name (first match wins).
BUCKETS = (
    ("object-store writes (obstore put: create + link/rename on the runtime's threads)", lambda f, n: f == "~" and n in ("<put>",)),
    ("thread-pool handoffs and waits (data files, manifest reads)", lambda f, n: "acquire' of '_thread.lock" in n
     or "_queue.SimpleQueue" in n or f.endswith(("threading.py", "concurrent/futures/thread.py", "concurrent/futures/_base.py"))),
    ("local reads and stats (open, read, stat, unlink)", lambda f, n: f == "~" and any(
        x in n for x in ("io.open", "posix.", "_io.", "'read'", "'readinto'"))),
    ("JSON encode / decode", lambda f, n: "/json/" in f or "_json" in n),
    ("pyarrow (compute, tables, Parquet)", lambda f, n: "/pyarrow/" in f or "pyarrow" in n or "parquet" in n),
    ("Lamina's own Python", lambda f, n: f.startswith(str(REPO_ROOT / "lamina"))),
)


def profile_bucket(key: tuple) -> str:
    file, _line, name = key
    return next((b for b, match in BUCKETS if match(str(file), name)), "other (Python stdlib, dataclasses, uuid, ...)")


class OpProfiles:
    """One cProfile per operation, enabled only around that operation's calls; and an IoTrace."""

    def __init__(self) -> None:
        self.profiles: dict[str, cProfile.Profile] = {}
        self.counts: Counter = Counter()
        self.elapsed: Counter = Counter()

    def run(self, op: str, fn: Callable[[], Any]) -> Any:
        prof = self.profiles.setdefault(op, cProfile.Profile())
        t0 = now()
        prof.enable()
        try:
            return fn()
        finally:
            prof.disable()
            self.elapsed[op] += now() - t0
            self.counts[op] += 1

    def summary(self, op: str, top: int = 12) -> dict:
        """Per call of op: profiled time, the functions with the most own time, and the cumulative time
        of Lamina's functions (where in Lamina the calls go); the full listing to bench/out."""
        prof, n = self.profiles[op], self.counts[op]
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        path = OUT_DIR / f"branches_{op}_profile.txt"
        with open(path, "w") as f:
            st = pstats.Stats(prof, stream=f)
            f.write(f"{n} calls of {op}\n")
            st.sort_stats("cumulative").print_stats(50)
            st.sort_stats("tottime").print_stats(30)
        st = pstats.Stats(prof)
        total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]

        def label(key: tuple) -> str:
            file, _line, func = key
            if file == "~":
                return func  # a built-in: "<built-in method posix.stat>"
            rel = os.path.relpath(file, REPO_ROOT) if file.startswith(str(REPO_ROOT)) else Path(file).name
            return f"{rel}:{func}"

        buckets: Counter = Counter()
        for k, v in st.stats.items():  # type: ignore[attr-defined]
            buckets[profile_bucket(k)] += v[2] / n * 1e6
        own = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]  # type: ignore[attr-defined]
        stats = st.stats.items()  # type: ignore[attr-defined]
        lam = sorted(((k, v) for k, v in stats if str(k[0]).startswith(str(REPO_ROOT / "lamina"))), key=lambda kv: -kv[1][3])
        compute_calls = sum(v[1] for k, v in stats if str(k[0]).endswith("pyarrow/compute.py") and k[2] == "wrapper")
        submits = [v for k, v in stats if str(k[0]).endswith("concurrent/futures/thread.py") and k[2] == "submit"]
        return {
            "calls": n,
            "profiled_us_per_op": total / n * 1e6,
            "wall_us_per_op": self.elapsed[op] / n * 1e6,
            "own_time": [{"fn": label(k), "calls_per_op": v[1] / n, "us_per_op": v[2] / n * 1e6} for k, v in own],
            "buckets_us_per_op": dict(buckets.most_common()),
            "pyarrow_compute_calls_per_op": compute_calls / n,
            "pool_submits_per_op": sum(v[1] for v in submits) / n,
            "pool_submit_us_per_op": sum(v[3] for v in submits) / n * 1e6,
            "lamina_cumulative": [{"fn": label(k), "calls_per_op": v[1] / n, "us_per_op": v[3] / n * 1e6} for k, v in lam],
            "file": shown_path(path),
        }


def where_time_goes(ws: Workspace, cfg: Config, lance_table: Any) -> dict:
    """A cProfile and an I/O trace of every Lamina operation measured, on a fresh table of the same
    history (the measure against Lance on that measure's table)."""
    ids = Ids()
    t, written = lamina_table(ws.new("profile"), cfg, ids)
    profs, trace = OpProfiles(), IoTrace()
    n_io = max(2, cfg.profile_iterations // 5)
    seq = iter(range(10**6))

    def ops_round(run: Callable[[str, Callable[[], Any]], Any]) -> None:
        i = next(seq)
        run("create_tag", lambda: t.tags.create(f"ptag{i:05d}"))
        h = run("create_branch", lambda: t.branches.create(f"prof{i:05d}"))
        batch = ids.batch(cfg.rows)
        run("branch_append", lambda: h.append(batch))
        run("publish_ff", lambda: t.branches.publish(f"prof{i:05d}"))
        written.append(batch)

    def append_main(run: Callable[[str, Callable[[], Any]], Any]) -> None:
        b = ids.batch(cfg.rows)
        run("append", lambda: t.append(b))
        written.append(b)

    def vs_lance(run: Callable[[str, Callable[[], Any]], Any]) -> None:
        i = next(seq)
        h = run("create_branch_vs_lance", lambda: lance_table.branches.create(f"pl{i:05d}"))
        batch = make_batch(2 * 10**9 + i * cfg.lance_rows, cfg.lance_rows)
        run("append_vs_lance", lambda: h.append(batch))

    for _ in range(WARM_ITERATIONS):
        ops_round(lambda op, fn: fn())
    for _ in range(cfg.profile_iterations):
        ops_round(profs.run)
        append_main(profs.run)
        vs_lance(profs.run)
    for r in range(max(1, cfg.profile_iterations // 10)):
        rebase_round(t, cfg, ids, written, f"prebase{r:05d}", lambda f: profs.run("publish_rebase", f))
    with trace:
        for _ in range(n_io):
            ops_round(trace.run)
            append_main(trace.run)
            vs_lance(trace.run)
        rebase_round(t, cfg, ids, written, "trebase00000", lambda f: trace.run("publish_rebase", f))
    check_rows(t, written, "profiled table")
    return {"profiles": {op: profs.summary(op) for op in profs.profiles}, "io": trace.summary()}


# --------------------------------------------------------------------------- system calls (strace)
MARK = "/__lamina_branches_bench_mark__"  # os.access of MARK/<begin|end>/<op> brackets an operation in the trace
SYSCALLS = "openat,mkdir,mkdirat,link,linkat,rename,renameat,renameat2,unlink,unlinkat,fsync,fdatasync,access,faccessat,faccessat2"
SYSCALL_REPS = 3
SYSCALL_OPS = ("create_tag", "create_branch", "publish_ff", "branch_append", "append", "publish_rebase",
               "lance_create_branch", "lance_write")


def syscall_child(argv: list[str]) -> None:
    """Run under strace (argv: ROOT HISTORY ROWS MAIN_COMMITS LANCE_ROWS): every measured operation
    SYSCALL_REPS times (after a warm-up), each bracketed by marks; background work (hint writes)
    lands before the end mark."""
    root, history, rows, main_commits, lance_rows = argv[0], *map(int, argv[1:5])
    cfg = Config(history=history, rows=rows, main_commits=main_commits, lance_rows=lance_rows)
    ids = Ids()
    t, written = lamina_table(root, cfg, ids)
    lance_ds = LanceBranchWrite(os.path.join(root, "t.lance"), written)

    def run(op: str, fn: Callable[[], Any]) -> Any:
        flush_lamina_hints()
        os.access(f"{MARK}/begin/{op}", os.F_OK)
        out = fn()
        flush_lamina_hints()
        os.access(f"{MARK}/end/{op}", os.F_OK)
        return out

    for i in range(SYSCALL_REPS + 1):
        go = run if i else (lambda op, fn: fn())
        go("create_tag", lambda: t.tags.create(f"stag{i:05d}"))
        h = go("create_branch", lambda: t.branches.create(f"sb{i:05d}"))
        batch = ids.batch(rows)
        go("branch_append", lambda: h.append(batch))
        go("publish_ff", lambda: t.branches.publish(f"sb{i:05d}"))
        go("append", lambda: t.append(ids.batch(rows)))
        b = go("lance_create_branch", lambda: lance_ds.create(f"sl{i:05d}"))
        go("lance_write", lambda: lance_ds.write(b, make_batch(10**9 + i * lance_rows, lance_rows)))
        if i:
            rebase_round(t, cfg, ids, [], f"sr{i:05d}", lambda f: run("publish_rebase", f))


def syscall_counts(ws: Workspace, cfg: Config) -> dict:
    """Per operation (mean of SYSCALL_REPS): the file-system calls on the table's files, by kind, from
    `strace -f` of a child running syscall_child; {"skipped": why} without strace."""
    import shutil
    import subprocess

    if shutil.which("strace") is None:
        return {"skipped": "strace is not installed"}
    root = ws.new("strace")
    log = os.path.join(root, "strace.txt")
    cmd = ["strace", "-f", "-qq", "-e", f"trace={SYSCALLS}", "-o", log,
           *worker_cmd("branches_bench:syscall_child", os.path.join(root, "tables"), str(cfg.history), str(cfg.rows),
                       str(cfg.main_commits), str(cfg.lance_rows))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        return {"skipped": f"strace child failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}"}
    with open(log) as f:
        return parse_strace(f.read().splitlines(), os.path.join(root, "tables"))


def syscall_kind(line: str) -> str | None:
    """What a strace line does to a file: create, read, mkdir, link, rename, unlink, fsync (None: other)."""
    m = re.match(r"\d+\s+(\w+)\(", line)
    if m is None:
        return None
    call = m.group(1)
    if call == "openat":
        return "create" if "O_CREAT" in line else "open"
    for kind in ("mkdir", "link", "rename", "unlink", "fsync", "fdatasync"):
        if call.startswith(kind):
            return "fsync" if kind == "fdatasync" else kind
    return None


def parse_strace(lines: list[str], root: str) -> dict:
    counts: dict[str, Counter] = {op: Counter() for op in SYSCALL_OPS}
    op = None
    for line in lines:
        if MARK in line:
            m = re.search(re.escape(MARK) + r"/(begin|end)/(\w+)", line)
            if m:
                op = m.group(2) if m.group(1) == "begin" else None
            continue
        if op is None or root not in line or "resumed>" in line.split("(", 1)[0]:
            continue
        kind = syscall_kind(line)
        if kind is not None:
            counts[op][kind] += 1
    return {op: {k: v / SYSCALL_REPS for k, v in sorted(c.items())} for op, c in counts.items()}


# --------------------------------------------------------------------------- the disk, during the timed runs
class DiskProbe:
    """The file-system steps the operations are made of, timed once per iteration of the timed runs (the
    shared machine's disk latency drifts by 10× within minutes): create a small file (O_CREAT|O_EXCL,
    write, close), link it under a second name, unlink that, mkdir, open+read a small file, stat, and
    Lamina's FileIO.put_new / get of a small object. p50s in µs."""

    def __init__(self, root: str) -> None:
        from lamina.io.fileio import FileIO

        self.root, self.io, self.n = root, FileIO(root), 0
        self.samples: dict[str, list[float]] = {}

    def _time(self, name: str, fn: Callable[[], Any]) -> None:
        t0 = now()
        fn()
        self.samples.setdefault(name, []).append(now() - t0)

    def sample(self) -> None:
        i, self.n = self.n, self.n + 1
        path = os.path.join(self.root, f"c{i}")

        def create() -> None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b"x" * 1000)
            os.close(fd)

        def read() -> None:
            with open(path, "rb") as f:
                f.read()

        self._time("create a file", create)
        self._time("link", lambda: os.link(path, path + ".l"))
        self._time("unlink", lambda: os.unlink(path + ".l"))
        self._time("mkdir", lambda: os.mkdir(path + ".d"))
        self._time("open+read", read)
        self._time("stat", lambda: os.stat(path))
        self._time("FileIO.put_new", lambda: self.io.put_new(f"p/{i}.json", b"x" * 1000))
        self._time("FileIO.get", lambda: self.io.get(f"p/{i}.json"))

    def p50s(self) -> dict[str, float]:
        return {k: p50(v) * 1e6 for k, v in self.samples.items()}


# =========================================================================== report
def p90(xs: list[float]) -> str:
    return fmt_s(float(np.quantile(xs, 0.9))) if xs else "–"


def ratio(a: list[float], b: list[float]) -> float | None:
    pa_, pb = p50(a), p50(b)
    return pa_ / pb if pa_ and pb else None


def median_iqr(ratios: list[float]) -> str:
    """Ratios as their median (p25–p75)."""
    if not ratios:
        return "–"
    return f"{fmt_x(p50(ratios))} ({fmt_x(float(np.quantile(ratios, 0.25)))}–{fmt_x(float(np.quantile(ratios, 0.75)))})"


def paired(a: list[float], ar: list[int], b: list[float], br: list[int]) -> list[float]:
    """Per round, the ratio of a's p50 to b's p50 in that round."""
    per = []
    for rnd in sorted(set(ar) & set(br)):
        pa_ = p50([x for x, r in zip(a, ar) if r == rnd])
        pb = p50([x for x, r in zip(b, br) if r == rnd])
        per.append(pa_ / pb)
    return per


def ops_section(cfg: Config, ops: dict) -> tuple[Section, list[Target]]:
    tag = ops["create_tag"]
    sec = Section(
        key="ops", title=f"Create a branch, publish it (fast-forward), create a tag: {cfg.iterations} iterations on one table",
        what=(f"One local table of {cfg.history} appends of {cfg.rows} rows; {cfg.iterations} iterations (after "
              f"{WARM_ITERATIONS} untimed), each: `t.tags.create(name)` of main's latest, `h = t.branches.create(name)`, "
              f"`h.append(batch)` ({cfg.rows} rows, on the branch), `t.branches.publish(name)` (a fast-forward in every "
              f"iteration: {dict(ops['modes'])}, checked); the tag before the branch in even iterations, after the "
              "publish in odd ones. Each call is timed alone on a long-lived handle `t`; main grows one version per "
              "iteration (the publish), and the table one tag and one branch."),
        columns=["operation", "calls", "p50", "p25–p75", "p90", "min", "p50 / create_tag p50",
                 "paired: per iteration / that iteration's create_tag, median (p25–p75)", "target"],
    )
    verdicts = []
    labels = {"create_tag": "`t.tags.create(name)`", "create_branch": "`t.branches.create(name)`",
              "publish_ff": "`t.branches.publish(name)`, fast-forward", "branch_append": "`h.append(...)` on the branch (no target)"}
    for k in OP_KEYS:
        xs = ops[k]
        r = ratio(xs, tag)
        if k in ("create_branch", "publish_ff"):
            ok = None if r is None else r <= TAG_TARGET
            tgt = f"≤ {TAG_TARGET}× create_tag: {verdict(ok)}"
            verdicts.append(Target(f"{labels[k]} p50 ≤ {TAG_TARGET}× create_tag p50", ok, fmt_x(r)))
        else:
            tgt = "–"
        sec.rows.append([labels[k], str(len(xs)), fmt_s(p50(xs)), spread(xs), p90(xs), fmt_s(min(xs)), fmt_x(r),
                         median_iqr([x / y for x, y in zip(xs, tag)]), tgt])
    return sec, verdicts


def rebase_section(cfg: Config, reb: dict) -> tuple[Section, list[Target]]:
    app, pub = reb["append"], reb["publish_rebase"]
    r = ratio(pub, app)
    ok = None if r is None else r <= REBASE_TARGET
    sec = Section(
        key="rebase", title=f"Publish with rebase over {cfg.main_commits} main commits",
        what=(f"On the same table, {cfg.rebase_reps} rounds (after 1 untimed): `h = t.branches.create(name)`, "
              f"`h.append(batch)`, then {cfg.main_commits} × `t.append(batch)` to main ({cfg.rows} rows each, every "
              "one timed: the single append), then `t.branches.publish(name)`, timed: main moved since the branch was made, so "
              "it re-applies the branch's file (the version's summary says `rebase`, one added file: checked)."),
        columns=["operation", "calls", "p50", "p25–p75", "p90", "min", "p50 / append p50",
                 "paired: per round / that round's append p50, median (p25–p75)", "target"],
    )
    sec.rows.append(["`t.append(batch)` to main", str(len(app)), fmt_s(p50(app)), spread(app), p90(app), fmt_s(min(app)),
                     "1.00×", "–", "–"])
    sec.rows.append([f"`t.branches.publish(name)`, rebase over {cfg.main_commits} commits", str(len(pub)), fmt_s(p50(pub)),
                     spread(pub), p90(pub), fmt_s(min(pub)), fmt_x(r),
                     median_iqr([x / y for x, y in zip(pub, reb["append_round_p50"])]),
                     f"≤ {REBASE_TARGET}× append: {verdict(ok)}"])
    return sec, [Target(f"publish with rebase over {cfg.main_commits} main commits p50 ≤ {REBASE_TARGET}× a single "
                        "append p50", ok, fmt_x(r))]


def lance_section(cfg: Config, vs: dict) -> tuple[Section, list[Target]]:
    import lance

    runs = vs["runs"]
    lam, lan = runs["lamina"], runs["lance"]
    r = ratio(lam["total"], lan["total"])
    per_round = paired(lam["total"], lam["round"], lan["total"], lan["round"])
    ok = None if r is None else r <= LANCE_TARGET
    sec = Section(
        key="lance", title=f"Branch create + a write of {cfg.lance_rows:,} rows on it, Lamina vs Lance",
        what=(f"A Lamina table and a Lance dataset (pylance {lance.__version__}, which has branches: "
              "`LanceDataset.create_branch`) of the same history "
              f"({cfg.history} appends of {cfg.rows} rows). {vs['rounds']} rounds; in each, {cfg.block} branches per "
              "system (order rotating), after 2 untimed: Lamina `h = t.branches.create(name)` then "
              "`h.append(batch)`; Lance `b = ds.create_branch(name)` (from the dataset's latest version on main) "
              "then `lance.write_dataset(batch, b, mode=\"append\")` (a commit on that branch). Both on a long-lived "
              f"handle of main; the same {cfg.lance_rows:,}-row batch for both systems' n-th branch. Checked afterwards: "
              f"main still holds its {cfg.history * cfg.rows:,} rows and the last branch "
              f"{cfg.history * cfg.rows + cfg.lance_rows:,}, in both."),
        columns=["system", "runs", "create + write p50", "p25–p75", "of which create p50", "of which write p50",
                 "Lamina / this (p50s)", "Lamina / this, paired per round (p25–p75)", "target"],
    )
    tgt = f"Lamina ≤ {LANCE_TARGET}× Lance: {verdict(ok)}"
    for name, cell in (("lamina", lam), ("lance", lan)):
        sec.rows.append([name, str(len(cell["total"])), fmt_s(p50(cell["total"])), spread(cell["total"]),
                         fmt_s(p50(cell["create"])), fmt_s(p50(cell["write"])),
                         "–" if name == "lamina" else fmt_x(r),
                         "–" if name == "lamina" else median_iqr(per_round),
                         tgt if name == "lamina" else "–"])
    sec.notes.append(f"Parts: create {fmt_x(ratio(lam['create'], lan['create']))} of Lance's, write "
                     f"{fmt_x(ratio(lam['write'], lan['write']))} of Lance's (Lamina p50 / Lance p50).")
    return sec, [Target(f"Lamina create_branch + append ≤ {LANCE_TARGET}× Lance create_branch + write_dataset", ok,
                        fmt_x(r))]


def io_line(io: dict, background: bool = True) -> str:
    """The caller's FileIO calls of one operation: `method path` ×count (p50 µs each), in order of first use."""
    caller = [c for c in io["calls"] if c["thread"] == "caller"]
    bg = [c for c in io["calls"] if c["thread"] == "background"]
    text = ", ".join(f"`{c['call']}` ×{c['per_op']:g} ({c['p50_us']:.0f} µs)" for c in caller)
    if bg and background:
        text += "; in the background: " + ", ".join(f"`{c['call']}` ×{c['per_op']:g}" for c in bg)
    return text


def io_sum(io: dict, method: str) -> float:
    """Calls per operation of one FileIO method on the caller's thread."""
    return sum(c["per_op"] for c in io["calls"] if c["thread"] == "caller" and c["call"].split(" ", 1)[0] == method)


def step(prof: dict, name: str) -> str:
    """`function` cumulative µs per operation (calls per operation) of the Lamina function(s) named
    `file.py:function`; "n/a" if the profile did not see it."""
    hits = [f for f in prof["lamina_cumulative"] if f["fn"].endswith(name)]
    if not hits:
        return f"`{name.split(':')[-1]}` n/a"
    us, calls = max(f["us_per_op"] for f in hits), max(f["calls_per_op"] for f in hits)
    return f"`{name.split(':')[-1]}` {us:.0f} µs ({calls:g}×)"


def bucket(prof: dict, prefix: str) -> float:
    return sum(v for k, v in prof["buckets_us_per_op"].items() if k.startswith(prefix))


def split_text(prof: dict, n: int = 4) -> str:
    """The profile's own time per operation by bucket, largest first."""
    items = sorted(prof["buckets_us_per_op"].items(), key=lambda kv: -kv[1])[:n]
    return "; ".join(f"{k.split(' (')[0]} {v:.0f} µs" for k, v in items)


def fs_text(sc: dict | None) -> str:
    """File-system calls of one operation (strace), e.g. `3 creates, 2 links, 1 rename, 3 mkdirs; 6 reads`."""
    if not sc:
        return "–"
    names = (("create", "create"), ("link", "link"), ("rename", "rename"), ("unlink", "unlink"), ("mkdir", "mkdir"),
             ("fsync", "fsync"))
    writes = ", ".join(f"{sc[k]:g} {label}{'s' if sc[k] != 1 else ''}" for k, label in names if sc.get(k))
    return f"{writes or 'no writes'}; {sc.get('open', 0):g} opens to read"


# operation in the "where" table -> (label, timed samples, profile/FileIO key, strace key)
def where_rows(cfg: Config, ops: dict, reb: dict, vs: dict) -> list[tuple[str, list[float], str | None, str]]:
    lam, lan = vs["runs"]["lamina"], vs["runs"]["lance"]
    return [
        ("`create_tag`", ops["create_tag"], "create_tag", "create_tag"),
        ("`create_branch`", ops["create_branch"], "create_branch", "create_branch"),
        ("`publish`, fast-forward", ops["publish_ff"], "publish_ff", "publish_ff"),
        (f"`append` of {cfg.rows} rows on a branch", ops["branch_append"], "branch_append", "branch_append"),
        (f"`append` of {cfg.rows} rows to main", reb["append"], "append", "append"),
        (f"`publish`, rebase over {cfg.main_commits} commits", reb["publish_rebase"], "publish_rebase", "publish_rebase"),
        ("`create_branch` (vs Lance)", lam["create"], "create_branch_vs_lance", "create_branch"),
        (f"`append` of {cfg.lance_rows:,} rows on a branch (vs Lance)", lam["write"], "append_vs_lance", "branch_append"),
        ("Lance `create_branch`", lan["create"], None, "lance_create_branch"),
        (f"Lance `write_dataset` of {cfg.lance_rows:,} rows on a branch", lan["write"], None, "lance_write"),
    ]


def where_section(cfg: Config, ops: dict, reb: dict, vs: dict, w: dict, notes: list[str]) -> Section:
    prof, io, sc = w["profiles"], w["io"], w["syscalls"]
    strace = "skipped" not in sc
    sec = Section(
        key="where", title="Where Lamina's time goes",
        what=("After the timed runs, three looks at each operation. **File-system calls**: `strace -f` of a child "
              f"interpreter running each operation {SYSCALL_REPS}× on tables like the timed ones (bracketed by marks; "
              "its background hint write waited for), the calls on the table's files per operation: a *create* is an "
              "`openat(O_CREAT|O_EXCL)`, which is how obstore writes an object on local disk (a temporary "
              "`<name>#1` created, then `linkat` to its name and `unlink` for a create-if-absent, or `rename` for an "
              "overwrite); *reads* are `openat` for reading (Lamina reads its small JSON files with `open`, and "
              "checks a file's presence with `stat`, not counted). **FileIO calls**: every call of Lamina's storage "
              "layer on the caller's thread (and in the background), in the order first used, with its p50; "
              "**cProfile**: the operation's own time split by where it is spent (listings in "
              "bench/out/branches_<operation>_profile.txt; cProfile inflates Python-heavy code, so read the split, "
              "not the totals). The profiles and FileIO traces run on a fresh table of the same history in this "
              f"process ({cfg.profile_iterations} profiled calls of each operation, "
              f"{max(1, cfg.profile_iterations // 10)} of publish with rebase)."
              + ("" if strace else f" File-system calls: {sc['skipped']}.")),
        columns=["operation", "timed p50", "file-system calls per call (strace)", "FileIO calls on the caller's thread "
                 "(background)", "their time (Σ p50s)", "profiled / call", "where the profiled time goes"],
        notes=notes,
    )
    for label, samples, key, skey in where_rows(cfg, ops, reb, vs):
        i, pr = io.get(key) if key else None, prof.get(key) if key else None
        sec.rows.append([
            label, fmt_s(p50(samples)), fs_text(sc.get(skey)) if strace else "–",
            f"{i['caller_calls_per_op']:g} ({i['background_calls_per_op']:g})" if i else "–",
            fmt_s(i["caller_io_us_per_op"] / 1e6) if i else "–",
            fmt_s(pr["profiled_us_per_op"] / 1e6) if pr else "–", split_text(pr) if pr else "Rust (not profiled)",
        ])
    return sec


def findings(cfg: Config, ops: dict, reb: dict, vs: dict, w: dict) -> list[str]:
    """What each target's figures are made of, from this run's traces, profiles and primitives."""
    prof, io, sc, fs = w["profiles"], w["io"], w["syscalls"], w["fs"]
    strace = "skipped" not in sc
    lam, lan = vs["runs"]["lamina"], vs["runs"]["lance"]

    def us(k: str) -> str:
        return f"{fs[k]:.0f} µs"

    def creates(op: str) -> str:
        return f"{sc[op].get('create', 0):g}" if strace else "n/a"

    def opens(op: str) -> str:
        return f"{sc[op].get('open', 0):g}" if strace else "n/a"

    obst = "object-store writes"
    tag, br, ff = prof["create_tag"], prof["create_branch"], prof["publish_ff"]
    out = [
        "**The disk.** This machine's local disk (ext4 on a virtual disk, shared with other work), probed once per "
        "iteration of the first measure (p50s): " + ", ".join(f"{k} {us(k)}" for k in fs) + ". obstore's "
        "create-if-absent (`FileIO.put_new`) is a temporary file created, linked into place and unlinked, its overwrite "
        "(`FileIO.put`) a temporary file renamed, both on the object-store runtime's threads while the caller waits: "
        f"an object created costs {fs['FileIO.put_new'] / fs['FileIO.get']:.1f}× an object read here (the ratio "
        "swings with the host's load). Lamina reads its small JSON files with a plain `open` and checks presence "
        "with a `stat`.",
        f"**`create_branch` vs `create_tag`** ({fmt_x(ratio(ops['create_branch'], ops['create_tag']))}): both create "
        f"one object. A tag — FileIO: {io_line(io['create_tag'])} — reads the latest version three times (`create_tag` "
        "calls `log.latest()`, `TagStore.create` → `check_writable` calls it again, and `is_live` loads the version "
        "once more). A branch writes its record `branches/<name>.json` alone (its base slot reads as the record's "
        f"copy until written) — FileIO: {io_line(io['create_branch'])}. File-system calls per call: tag "
        f"{fs_text(sc.get('create_tag')) if strace else 'n/a'}; branch {fs_text(sc.get('create_branch')) if strace else 'n/a'}. "
        f"cProfile: obstore's put is {bucket(br, obst):.0f} of {br['profiled_us_per_op']:.0f} µs of a branch, "
        f"{bucket(tag, obst):.0f} of {tag['profiled_us_per_op']:.0f} µs of a tag; JSON {bucket(br, 'JSON'):.0f} vs "
        f"{bucket(tag, 'JSON'):.0f} µs (the record embeds a copy of the base version).",
        f"**`publish`, fast-forward, vs `create_tag`** ({fmt_x(ratio(ops['publish_ff'], ops['create_tag']))}): the "
        "commit is one version file (`put_if_absent versions/<v>.json`, the branch head's content as it is); around it "
        "`publish` reads the branch's record and finds the branch's head as any reader finds a latest version (the "
        "hint, the version, the freed-slot check, a probe past it), and the committer checks main's freed-slot record "
        f"after the put — FileIO: {io_line(io['publish_ff'])}. Files created per call: {creates('publish_ff')} vs the "
        f"tag's {creates('create_tag')}. cProfile per call: {step(ff, 'table.py:branch')}, the commit "
        f"{step(ff, 'committer.py:commit')}; obstore's put {bucket(ff, obst):.0f} µs, reads and stats "
        f"{bucket(ff, 'local reads'):.0f} µs, JSON {bucket(ff, 'JSON'):.0f} µs; split: {split_text(ff, 6)}. Both "
        "make one object and a handful of small reads; what a publish adds is Lamina's own Python around its commit "
        "(the transaction, the operation applied to main's latest, the version manifest built and encoded) and the "
        "record's parse.",
    ]
    rp, ap = prof["publish_rebase"], prof["append"]
    out.append(
        f"**`publish` with rebase vs an append** ({fmt_x(ratio(reb['publish_rebase'], reb['append']))}): files "
        f"created: rebase {creates('publish_rebase')} (manifest, version, hint), append {creates('append')} (data file, "
        f"manifest, version, hint); the rebase reads manifests ({opens('publish_rebase')} files opened vs "
        f"{opens('append')}) and diffs them. cProfile per publish (cumulative): "
        + ", ".join(step(rp, n) for n in ("publish.py:_rebase", "changes.py:changed_entries", "base.py:live_entries",
                                          "tree.py:live_data_entries", "files.py:read_manifests",
                                          "committer.py:_apply_tree", "table.py:branch"))
        + ". `changed_entries` reads the root manifests of the branch's base and head (and the leaves that differ); "
        "main's live entries are read only when the branch removed or rewrote files (not here); `live_data_entries` "
        "reads the head's manifests again for the added file's full entry. Manifests are read on a thread pool: "
        f"{rp['pool_submits_per_op']:.0f} submits per publish costing {rp['pool_submit_us_per_op']:.0f} µs of "
        "handoff (under load the woken worker competes for the GIL), "
        f"{rp['pyarrow_compute_calls_per_op']:.0f} pyarrow.compute calls (an append makes "
        f"{ap['pyarrow_compute_calls_per_op']:.0f}). Split of the profiled time: {split_text(rp, 6)}; an append's: "
        f"{split_text(ap, 6)}. FileIO on the caller's thread: {io_line(io['publish_rebase'], False)}. The "
        "bottleneck is reading and diffing manifests in Python (two trees, small Parquet files through a thread "
        "pool) where an append only encodes its own.")
    aa = prof["append_vs_lance"]
    out.append(
        f"**Against Lance** ({fmt_x(ratio(lam['total'], lan['total']))} of Lance's time; target ≤ {LANCE_TARGET}×): "
        f"making the branch, Lamina {fmt_s(p50(lam['create']))} vs Lance {fmt_s(p50(lan['create']))} "
        f"({fmt_x(ratio(lam['create'], lan['create']))}); the write on it, {fmt_s(p50(lam['write']))} vs "
        f"{fmt_s(p50(lan['write']))} ({fmt_x(ratio(lam['write'], lan['write']))}). The file-system work is alike: "
        f"Lamina's append {fs_text(sc.get('branch_append')) if strace else 'n/a'}; Lance's "
        f"write {fs_text(sc.get('lance_write')) if strace else 'n/a'} (and its create_branch "
        f"{fs_text(sc.get('lance_create_branch')) if strace else 'n/a'}). Lance writes the data file, the "
        "transaction and the manifest from Rust; Lamina's append is Python around pyarrow: cProfile per append "
        "(cumulative) "
        + ", ".join(step(aa, n) for n in ("writer.py:write_data_files", "base.py:new_files", "entries.py:column_stats",
                                          "entries.py:data_entries", "tree.py:apply_change", "files.py:write_manifest",
                                          "coordinator.py:publish"))
        + f"; split: {split_text(aa, 6)}. Two Parquet files are encoded per append (the data file and a manifest "
        "holding its entry), the entry is built column by column in Python (statistics, partition values, row "
        "counts), and the version JSON is written last: three objects created (data file, manifest, version), "
        "each a handoff to the object-store runtime. The bottleneck is this fixed per-commit work in Python (manifest entry and Parquet "
        "manifest), the same that makes Lamina's first commits slower than Lance's in the append benchmark "
        "(section 1).")
    return out


@case("branches", title=SECTION_TITLE, sizes=Config,
      quick=dict(history=10, iterations=10, rebase_reps=2, main_commits=10, lance_reps=4, block=2, profile_iterations=3),
      tiny=dict(history=3, iterations=4, rebase_reps=1, main_commits=3, lance_reps=2, block=1, lance_rows=50),
      needs=(module("lance"),), versions=("lamina", "pylance", "pyarrow"))
def branches(run: Run) -> Report:
    """Branch create, publish (fast-forward and rebase) and tag create, and a branch write vs Lance."""
    cfg, ws = run.sizes, run.ws
    raw: dict = {}
    ids = Ids()
    t, written = lamina_table(ws.new("ops"), cfg, ids)
    disk = DiskProbe(ws.new("disk"))
    raw["ops"] = ops = bench_ops(t, cfg, ids, written, disk)
    raw["rebase"] = reb = bench_rebase(t, cfg, ids, written)
    raw["ops_table_rows"] = check_rows(t, written, "tag/branch/publish table")
    vs = bench_lance(ws, cfg)
    raw["lance"] = {k: v for k, v in vs.items() if k != "table"}
    say("profiling")
    raw["where"] = w = where_time_goes(ws, cfg, vs["table"])
    say("system calls")
    w["syscalls"] = syscall_counts(ws, cfg)
    w["fs"] = disk.p50s()
    secs, targets = [], []
    for make in (lambda: ops_section(cfg, ops), lambda: rebase_section(cfg, reb), lambda: lance_section(cfg, vs)):
        s, v = make()
        secs.append(s)
        targets += v
    secs.append(where_section(cfg, ops, reb, vs, w, findings(cfg, ops, reb, vs, w)))
    facts = [f"Tables: local, each first given {cfg.history} appends of {cfg.rows} rows (id int64, category string, "
             "value double, ts timestamp[us]), one version each; every table's rows checked against the ids written, at "
             "the end. Ratios are Lamina's p50 over the yardstick's p50 (≤ target: PASS)."]
    return Report(title=SECTION_TITLE, facts=facts, targets=targets, sections=secs, raw=raw)
