"""Lamina at two code revisions, side by side in one run, on the same data: append latency and
opening a table with a long history (the workload of the cases append and open, sections 1-2),
planning a scan over a table of 20,000 data files (section 3), and a Spark write
(`lamina.spark.write`, as in the case spark), so a change can be held to "within 10% of the
baseline" (the case `revisions`):

    .venv/bin/python bench/run.py revisions --set baseline=/work/wt-base
    .venv/bin/python bench/run.py revisions --set baseline=/work/wt-base --quick   # smoke test (~1 min)
    .venv/bin/python bench/run.py revisions --set baseline=. --out /tmp/aa.md     # A/A: the noise floor
    .venv/bin/python bench/run.py revisions --set baseline=/work/wt-base --only plan,spark
    .venv/bin/python bench/compare_revisions.py --baseline /work/wt-base [runner options]   # the same

Sizes (--set): rounds (5). Append: appends (commits per revision and round, 2,000), opens (200),
block (commits per turn, 10 as in section 1). Plan: plan_files (20,000), plan_commits (commits
that register them, 1), plan_probes (fresh-process plans per query, revision and round, 5), plans
(plans on an open handle per query, revision and round, 25). Spark: spark_rows (3,000,000),
spark_writes (timed writes per revision and round, 4). --only picks the measures (append, plan,
spark; "append" is the append and open workload).

baseline is a checkout of the baseline revision (e.g. a `git worktree add ... 0f5b064`);
candidate defaults to this repository. Only each checkout's `lamina` package is taken
from it: the harness (schema, data, windows, timing, Spark session) is this script's and
bench/common.py's, the same for both. A full run (defaults) takes about 7 minutes with a 1-min
load average of 4-9 on this 2-vCPU machine (append and open 1.5, plan 1.5, Spark 4), 11 at 20,
27 at 30.

How: each revision's Lamina is imported in its own worker process
(`python bench/compare_revisions.py --worker <checkout>` with PYTHONPATH=<checkout>, and
PYTHONDONTWRITEBYTECODE so the checkouts are not written to), driven over pipes, one request
per block. In every measure the two revisions take turns in blocks, the order of the two
swapping every block (A B, B A, A B, ...), so drifts of load on the shared machine fall on both
alike.

- Append and open: per round, each revision's long-lived worker makes the untimed warm-up appends
  of bench/run.py to a throwaway table and creates a fresh table; the revisions take turns in
  blocks of 10 commits (100-row batches from bench/common.make_batch, one append = one commit,
  each timed end to end). After each block the worker waits, untimed, for its background
  version-hint writes, so none of them runs into the other revision's turn. Then each
  revision's table is opened `--opens` times, in blocks of 5 (one untimed open, then 5 timed
  `open_table` + read the version).
- Plan: each revision builds its own table once per run (its `create_table`, then
  `t.add_files(..., check_files=False)` of entries for 20,000 files that do not exist, a plan
  reads only the manifests: file i holds ids [1024 i, 1024 (i+1)) of make_batch data, with the
  statistics of all four columns a native write of that data records), and a 4-file table of the
  same kind to warm up on. Two queries, as in section 3: all files, and 1% of them
  (`id >= lo AND id < hi`, 200 files). Per round: *open+plan in a fresh process*, `--plan-probes`
  new worker processes per query and revision (turns of one), each planning the small table
  once (untimed: imports, lazy initialisation), then `lamina.open_table` + `t.scan(where=...).plan()`
  of the big one, both timed (no cache of it in the process; the OS page cache is warm): the
  figure of section 3. *Plan on an open handle*: in the round's long-lived workers, blocks of one
  untimed and 5 timed plans on one handle (Lamina's process-wide manifest cache is warm, so this
  is the planning code alone). Every plan's file count is checked against the table's.
- Spark write: per round, a fresh worker per revision (not pinned to a CPU: local[2] uses both)
  starts its own Spark session (the same settings for both; spark.driver.memory=2g; fast-start
  JVM flags in --quick only), both at once, and makes an untimed warm-up write whose table is
  checked (rows and files, through the revision's Lamina). Then the revisions take turns of one
  write of the same DataFrame (bench/spark_bench.build_df: `spark_rows` rows, 8 columns,
  generated in the JVM) into a new table, `lamina.spark.write(df, uri)` timed end to end after a
  full JVM GC; each table is deleted afterwards (untimed). The Spark job dominates this figure:
  Lamina's own part (the new files' footers, one commit) is tens of ms, so it catches only a
  large change there.

Noise, and why the verdict is on the median of the rounds: A/A runs (`--baseline .`) on the
loaded shared 2-vCPU machine showed one worker process running slower than its identical twin
for a whole round: by up to 1.9x (opens) with the two left to the scheduler, still by 10-35%
(in CPU time too) with both pinned to one CPU. The same process appending to two tables in
turn shows no such gap, so it belongs to the process (where it runs, its memory layout), not to
the table or the code. Hence both long-lived workers of a round (and the fresh-process plans)
are pinned to the same CPU, another one each round (only one runs at a time), each round starts
fresh processes and tables, and the ratio candidate / baseline judged against the target
(<= 1.10x) is the median over the rounds of each round's ratio of p50s, over all commits and
all opens. The fresh-process plans and the Spark writes are judged on the ratio of their p50s
pooled over the rounds instead: a round holds only 5 plans (each in a process of its own
already) or 4 writes (which use both CPUs, so any other load on the machine slows them, by up
to 2x), and one disturbed sample moves such a p50: A/A runs on a heavily loaded machine (1-min
load average 10-35) put single rounds 0.4x-8x apart (plans) and 0.61x-1.30x (Spark writes),
the pooled p50s at 0.83x-1.02x. CPU times (of the append and plan workers, and of a Spark worker
with its JVM) are shown beside them: a change that shows in the latency but not in the CPU
time is load. The table also shows the
rounds' range, the ratio of the pooled p50s, p25-p75 of each revision, and rows that are shown
but not judged: windows of the appends (first/last 10% of the commits, bench/run.py's
10-commit windows; an A/A run put 200-commit windows up to 0.8x-1.4x apart), CPU times, and the
plans on an open handle.

The section replaces the one of its former title, "Append and open latency against the baseline
revision", if the file has that.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

import systems
from common import (
    APPEND_BLOCK, OPEN_BLOCK, OUT_DIR, REPO_ROOT, Workspace, err_text, flush_lamina_hints, fmt_s, lamina_revision,
    log_error, make_batch, now, one_percent_ids, p50, rotated, say, synthetic_data_files, timed_append, timed_opens,
    warm_up_appends, worker_cmd,
)
from registry import Run, case, module, program
from report import Report, Section, Target, verdict

SECTION_TITLE = "Lamina against the baseline revision: append, open, plan, Spark write"
FORMER_TITLES = ("Append and open latency against the baseline revision",)
TARGET = 1.10  # candidate p50 <= 1.10 x baseline p50 ("within 10%")
REVISIONS = ("baseline", "candidate")
MEASURES = ["append", "plan", "spark"]  # "append": the append and open workload
REPLY_TIMEOUT_S = 300.0  # one block (or a Spark start); far above any sane one, so only a hung worker trips it
PLAN_RPF = 1024  # rows per (synthetic) data file of the plan table, as in bench/run.py section 3
WARM_PLAN_FILES = 4  # files of the small table a fresh process plans first
PLAN_BLOCK = OPEN_BLOCK  # timed plans on an open handle per turn
SPARK_CONF = {  # the Spark session of every Spark worker (a harness setting: the same for both revisions)
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    "spark.sql.shuffle.partitions": "2",
}
# JVM flags for a short session (lamina.spark.session.FAST_START_JAVA_OPTIONS): --quick only, not for figures
FAST_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


@dataclass
class Config:
    baseline: str = ""  # a checkout of the baseline revision (required)
    candidate: str = str(REPO_ROOT)  # a checkout of the candidate (default: this one)
    rounds: int = 5
    appends: int = 2000  # commits per revision per round
    opens: int = 200  # timed opens per revision per round
    rows: int = 100  # rows per append (bench/run.py section 1)
    block: int = APPEND_BLOCK  # commits per turn
    plan_files: int = 20_000
    plan_commits: int = 1  # add_files commits that register them (1: like section 3's one native write)
    plan_probes: int = 5  # fresh-process open+plan per query, revision and round
    plans: int = 25  # timed plans on an open handle per query, revision and round
    spark_rows: int = 3_000_000
    spark_writes: int = 4  # timed writes per revision and round
    fast_start: bool = False  # fast-start JVM flags for the Spark sessions (quick runs only: not for figures)
    measures: tuple[str, ...] = field(default=tuple(MEASURES), init=False)  # (set from --only)

    KNOBS = ("rounds", "appends", "opens", "block", "plan_files", "plan_commits", "plan_probes", "plans",
             "spark_rows", "spark_writes")

    def check(self) -> None:
        """A usage error for sizes the measures cannot run with."""
        if not self.baseline:
            raise ValueError("set the baseline checkout: --set baseline=<path>")
        for label in REVISIONS:
            if not (Path(getattr(self, label)) / "lamina" / "__init__.py").is_file():
                raise ValueError(f"{label} {getattr(self, label)} is not a Lamina checkout (no lamina/__init__.py)")
        if self.appends < APPEND_BLOCK:
            raise ValueError(f"appends must be at least {APPEND_BLOCK} (one window)")
        small = [k for k in self.KNOBS if getattr(self, k) < 1]
        if small:
            raise ValueError(f"{', '.join(small)} must be at least 1")
        if self.plan_commits > self.plan_files:
            raise ValueError("plan_commits must be at most plan_files (each commit registers at least one file)")

    def queries(self) -> dict[str, tuple[int | None, int | None]]:
        """The plan queries: name -> (lo, hi) id range, or (None, None) for all files."""
        return {"all": (None, None), "1%": one_percent_ids(self.plan_files, PLAN_RPF)}

    def files_planned(self) -> dict[str, int]:
        """What each plan query must return."""
        return {"all": self.plan_files, "1%": max(1, self.plan_files // 100)}


# --------------------------------------------------------------------------- worker (one per revision)
def import_lamina_from(checkout: str) -> str:
    """Import the lamina package of checkout, ahead of this repository (common.py puts it on
    sys.path) and of the venv's editable install; where it came from. Refuses any other copy."""
    want = Path(checkout).resolve()
    here = REPO_ROOT.resolve()
    if "lamina" in sys.modules:
        raise RuntimeError("lamina was imported before the worker chose its checkout")
    sys.path[:] = [str(want)] + [p for p in sys.path if Path(p or ".").resolve() not in (want, here)]
    import lamina

    got = Path(lamina.__file__).resolve()
    if not got.is_relative_to(want):
        raise RuntimeError(f"imported lamina from {got}, not from the checkout {want}")
    return str(got.parent)


class Served:
    """One revision's worker: its state, and a method op_<name>(**request) -> reply per request."""

    def __init__(self, where: str):
        self.where = where
        self.s = systems.get("lamina")  # bench/run.py's adapter: create, append, open, version, plan, add_files
        self.h = self.root = self.rows = None
        self.hints_flushed = True  # every wait for the version hints worked
        self.spark = self.df = None

    def flush_hints(self) -> None:
        self.hints_flushed &= flush_lamina_hints()

    def op_hello(self) -> dict:
        return {"lamina": self.where}

    # append and open
    def op_setup(self, rows: int, warm_root: str, root: str) -> dict:
        self.rows, self.root = rows, root
        warm_up_appends(self.s, warm_root, rows)
        self.flush_hints()
        self.h = self.s.create(root)
        return {}

    def op_append(self, first: int, n: int) -> dict:
        batches = [make_batch(i * self.rows, self.rows) for i in range(first, first + n)]
        lat, cpu = [], []
        for data in batches:
            c0 = time.process_time()
            self.h, dt = timed_append(self.s, self.h, data)
            cpu.append(time.process_time() - c0)
            lat.append(dt)
        self.flush_hints()  # untimed: this block's background writes land before the other's turn
        return {"lat": lat, "cpu": cpu, "hints_flushed": self.hints_flushed}

    def op_open(self, n: int) -> dict:
        return {"lat": timed_opens(self.s, self.root, n), "version": self.s.version(self.s.open(self.root))}

    # plan
    def op_build_plan_table(self, root: str, warm_root: str, files: int, commits: int) -> dict:
        """The big table in root (files entries in commits add_files commits), the small one in warm_root."""
        t0 = now()
        self.create_with_synthetic_files(root, files, commits)
        took = now() - t0
        self.create_with_synthetic_files(warm_root, WARM_PLAN_FILES, 1)
        self.flush_hints()
        return {"build_s": took}

    def create_with_synthetic_files(self, root: str, files: int, commits: int) -> None:
        h = self.s.create(root)
        cuts = [files * c // commits for c in range(commits + 1)]
        for first, last in zip(cuts, cuts[1:]):
            h = self.s.add_files(h, synthetic_data_files(first, last - first, PLAN_RPF, all_columns=True))

    def op_plan(self, root: str, n: int, lo: int | None, hi: int | None) -> dict:
        """n timed plans on one handle, after an untimed one (re-warm after the other revision's turn)."""
        h = self.s.open(root)
        files = self.s.plan(h, lo, hi)
        lat = []
        for _ in range(n):
            t0 = now()
            self.s.plan(h, lo, hi)
            lat.append(now() - t0)
        return {"lat": lat, "files": files}

    def op_plan_fresh(self, root: str, warm_root: str, lo: int | None, hi: int | None) -> dict:
        """The first plan of root in this process: open and plan timed (and their CPU time), after an
        untimed plan of warm_root."""
        self.s.plan(self.s.open(warm_root), lo, hi)
        c0, t0 = time.process_time(), now()
        h = self.s.open(root)
        t1 = now()
        files = self.s.plan(h, lo, hi)
        return {"open": t1 - t0, "plan": now() - t1, "cpu": time.process_time() - c0, "files": files}

    # Spark
    def op_spark_setup(self, rows: int, fast_start: bool, uri: str) -> dict:
        """Start the Spark session, make the DataFrame and one untimed, checked write into uri."""
        from pyspark.sql import SparkSession

        from spark_bench import build_df

        os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable  # workers import this lamina
        builder = SparkSession.builder.master("local[2]").appName("lamina-compare-revisions")
        for k, v in SPARK_CONF.items():
            builder = builder.config(k, v)
        if fast_start:
            builder = builder.config("spark.driver.extraJavaOptions", FAST_START_JAVA_OPTIONS)
        self.spark = builder.getOrCreate()
        self.spark.sparkContext.setLogLevel("ERROR")
        self.df = build_df(self.spark, rows)
        took, _cpu = self.spark_write(uri, drop=False)
        import lamina

        t = lamina.open_table(uri)
        files, got = len(t.scan().plan()), t.scan().count()
        if got != rows:
            raise RuntimeError(f"the warm-up Spark write made a table of {got:,} rows, not {rows:,}")
        self.drop(uri)
        return {"warm_s": took, "files": files}

    def spark_write(self, uri: str, drop: bool = True) -> tuple[float, float]:
        """(seconds, CPU seconds of this process and its JVM) of one lamina.spark.write of the
        DataFrame into a new table at uri (then deleted)."""
        from lamina.spark import write

        self.spark._jvm.System.gc()  # no GC debt of the previous write carried into this one
        c0, t0 = process_tree_cpu_s(os.getpid()), now()
        write(self.df, uri)
        took, cpu = now() - t0, process_tree_cpu_s(os.getpid()) - c0
        if drop:
            self.drop(uri)
        return took, cpu

    def op_spark_write(self, uri: str) -> dict:
        took, cpu = self.spark_write(uri)
        return {"lat": [took], "cpu": [cpu]}

    def drop(self, uri: str) -> None:
        self.flush_hints()  # the background hint write would find its directory gone
        shutil.rmtree(uri)

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process pid and its descendants alive now (here: the worker
    and its Spark JVM), from /proc."""
    tick, total, todo = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()  # after the command name
            total += (int(stat[11]) + int(stat[12])) / tick  # fields 14-15: utime, stime
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
    return total


def worker(argv: list[str]) -> None:
    """Serve the harness (argv: the checkout whose lamina to import): one JSON request a line on
    stdin, one JSON reply a line on stdout."""
    checkout = argv[0]
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything the library (or the JVM) prints goes to stderr, not into the replies
    served = None
    try:  # at once, while the other revision's worker starts too; a failure is the first reply
        served, import_error = Served(import_lamina_from(checkout)), None
    except Exception as e:  # noqa: BLE001
        import_error = e
    try:
        for line in sys.stdin:
            req = json.loads(line)
            try:
                if import_error is not None:
                    raise import_error
                op = req.pop("op")
                handler = getattr(served, f"op_{op}", None)
                if handler is None:
                    raise ValueError(f"unknown request {op!r}")
                reply = handler(**req)
            except Exception as e:  # noqa: BLE001  (the harness says which revision failed, and how)
                reply = {"error": err_text(e), "traceback": traceback.format_exc()}
            replies.write(json.dumps(reply) + "\n")
            replies.flush()
    finally:
        if served is not None:
            served.close()


class Worker:
    """The harness's end of one revision's worker process."""

    def __init__(self, label: str, checkout: str, cpu: int | None, log: Path | None = None):
        """Start the worker, on CPU cpu only (all its threads, from the start) unless cpu is None;
        its stderr into the file log if given."""
        self.label = label
        self.log = log
        # bytecode is read where it exists but never written: the checkouts are not written to
        env = dict(os.environ, PYTHONPATH=checkout, PYTHONDONTWRITEBYTECODE="1")
        with contextlib.ExitStack() as files:
            stderr = files.enter_context(open(log, "w")) if log is not None else None
            self.proc = subprocess.Popen(
                worker_cmd("compare_revisions:worker", checkout),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True,
                preexec_fn=None if cpu is None else lambda: os.sched_setaffinity(0, {cpu}),
            )

    def send(self, **req) -> None:
        self.op = req["op"]
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker died: receive says so

    def receive(self) -> dict:
        """The reply to the request sent. A failure, a dead or a hung worker raises, naming the revision."""
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT_S)
        if not ready:
            raise RuntimeError(f"{self.label} worker gave no reply to {self.op} in {REPLY_TIMEOUT_S:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            where = f"in {self.log}" if self.log else "above"
            raise RuntimeError(f"{self.label} worker exited (code {self.proc.wait()}); its stderr is {where}")
        reply = json.loads(line)
        if "error" in reply:
            log_error(f"compare_revisions/{self.label}/{self.op}", RuntimeError(reply["traceback"]))
            raise RuntimeError(f"{self.label}: {reply['error']}")
        return reply

    def ask(self, **req) -> dict:
        self.send(**req)
        return self.receive()

    def close(self) -> None:
        self.proc.stdin.close()  # the worker's loop ends at end of input
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def workers_for(checkouts: dict[str, str], out: dict, cpu: int | None, log_stem: str | None = None) -> Iterator[dict]:
    """One worker per revision, started at once; each one's lamina location goes to out[label]."""
    workers: dict[str, Worker] = {}
    try:
        for label in REVISIONS:
            log = OUT_DIR / f"{log_stem}-{label}.log" if log_stem else None
            workers[label] = Worker(label, checkouts[label], cpu, log)
            workers[label].send(op="hello")
        for label in REVISIONS:
            out[label]["lamina"] = workers[label].receive()["lamina"]
        yield workers
    finally:
        for w in workers.values():
            w.close()


def ask_both(workers: dict[str, Worker], requests: dict[str, dict]) -> dict[str, dict]:
    """Send each revision its request, then collect both replies: the two work at the same time
    (untimed set-up only)."""
    for label in REVISIONS:
        workers[label].send(**requests[label])
    return {label: workers[label].receive() for label in REVISIONS}


def turns(rnd: int, total: int, block: int) -> Iterator[tuple[int, int, list[str]]]:
    """(first, n, order of the revisions): total items in turns of block, the order swapped every turn."""
    for blk, first in enumerate(range(0, total, block)):
        yield first, min(block, total - first), rotated(list(REVISIONS), rnd + blk)


# --------------------------------------------------------------------------- one round
def check_files(label: str, query: str, got: int, cfg: Config) -> None:
    want = cfg.files_planned()[query]
    if got != want:
        raise RuntimeError(f"{label} planned {got:,} files for the query {query!r}, not {want:,}: not comparable")


def one_round(ws: Workspace, cfg: Config, rnd: int, checkouts: dict[str, str], plan_tables: dict) -> dict:
    """Fresh workers and tables for both revisions, the measures of cfg one after the other.
    {revision: {figure kind: [seconds, ...], ..., "lamina": path, ...}}"""
    out = {label: {"lamina": None} for label in REVISIONS}
    # Both workers on one CPU, another each round. On the shared VM one vCPU can run ~2x slower
    # than the other for minutes (its host core busy with other work): left to the scheduler, a
    # worker that lands on it alone was measured up to 1.9x slower in an A/A run. Only one worker
    # runs at a time, so sharing a CPU costs nothing.
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[rnd % len(cpus)]
    if "append" in cfg.measures or "plan" in cfg.measures:
        with workers_for(checkouts, out, cpu) as workers:
            if "append" in cfg.measures:
                append_and_open(ws, cfg, rnd, workers, out)
            if "plan" in cfg.measures:
                plans_on_handles(cfg, rnd, workers, plan_tables, out)
    if "plan" in cfg.measures:
        plans_in_fresh_processes(cfg, rnd, checkouts, cpu, plan_tables, out)
    if "spark" in cfg.measures:
        spark_writes(ws, cfg, rnd, checkouts, out)
    return out


def append_and_open(ws: Workspace, cfg: Config, rnd: int, workers: dict[str, Worker], out: dict) -> None:
    """The interleaved appends, then the opens: out[label] "append", "append_cpu", "open", "version"."""
    dirs = {label: ws.new(f"round{rnd}-{label}") for label in REVISIONS}
    try:
        ask_both(workers, {
            label: {"op": "setup", "rows": cfg.rows, "warm_root": os.path.join(d, "warm"), "root": os.path.join(d, "table")}
            for label, d in dirs.items()
        })
        for label in REVISIONS:
            out[label] |= {"append": [], "append_cpu": [], "open": []}
        for first, n, order in turns(rnd, cfg.appends, cfg.block):
            for label in order:
                reply = workers[label].ask(op="append", first=first, n=n)
                out[label]["append"] += reply["lat"]
                out[label]["append_cpu"] += reply["cpu"]
                out[label]["hints_flushed"] = reply["hints_flushed"]
            made = first + n
            if made // 500 > first // 500 or made >= cfg.appends:
                say(
                    f"  round {rnd + 1}, commit {made:,}: "
                    + ", ".join(f"{k} {fmt_s(p50(v['append'][-100:]))}" for k, v in out.items())
                    + " (p50 of the last 100)"
                )
        for _first, n, order in turns(rnd, cfg.opens, OPEN_BLOCK):
            for label in order:
                reply = workers[label].ask(op="open", n=n)
                out[label]["open"] += reply["lat"]
                out[label]["version"] = reply["version"]
        say(f"  round {rnd + 1}, opens: " + ", ".join(f"{k} {fmt_s(p50(v['open']))}" for k, v in out.items()) + " (p50)")
    finally:
        for d in dirs.values():
            ws.drop(d)


def build_plan_tables(ws: Workspace, cfg: Config, checkouts: dict[str, str]) -> dict:
    """Each revision's plan table and small warm-up table, built once for the run by its own Lamina.
    {revision: {"root", "warm_root", "build_s"}}"""
    tables = {label: {"root": ws.new(f"plan-{label}"), "warm_root": ws.new(f"plan-warm-{label}")} for label in REVISIONS}
    say(f"building each revision's plan table: {cfg.plan_files:,} files in {cfg.plan_commits:,} add_files commit(s)")
    with workers_for(checkouts, {label: {} for label in REVISIONS}, None) as workers:
        replies = ask_both(workers, {
            label: {"op": "build_plan_table", "files": cfg.plan_files, "commits": cfg.plan_commits, **tables[label]}
            for label in REVISIONS
        })
    for label in REVISIONS:
        tables[label]["build_s"] = replies[label]["build_s"]
    return tables


def plans_on_handles(cfg: Config, rnd: int, workers: dict[str, Worker], plan_tables: dict, out: dict) -> None:
    """out[label]["plan_handle/<query>"]: plans on one open handle, in turns of PLAN_BLOCK."""
    for q, (lo, hi) in cfg.queries().items():
        kind = f"plan_handle/{q}"
        for label in REVISIONS:
            out[label][kind] = []
        for _first, n, order in turns(rnd, cfg.plans, PLAN_BLOCK):
            for label in order:
                reply = workers[label].ask(op="plan", root=plan_tables[label]["root"], n=n, lo=lo, hi=hi)
                check_files(label, q, reply["files"], cfg)
                out[label][kind] += reply["lat"]
    say(f"  round {rnd + 1}, plans on an open handle: " + "; ".join(
        f"{label} " + ", ".join(f"{q} {fmt_s(p50(out[label][f'plan_handle/{q}']))}" for q in cfg.queries())
        for label in REVISIONS) + " (p50)")


def plans_in_fresh_processes(cfg: Config, rnd: int, checkouts: dict[str, str], cpu: int, plan_tables: dict,
                             out: dict) -> None:
    """out[label]["plan_fresh/<query>"]: open+plan of the plan table, each in a new worker process;
    "plan_fresh_cpu/<query>": their CPU time; "plan_fresh_runs": each one's open and plan seconds."""
    for label in REVISIONS:
        out[label] |= {f"plan_fresh{cpu}/{q}": [] for q in cfg.queries() for cpu in ("", "_cpu")}
        out[label]["plan_fresh_runs"] = []
    for _first, _n, order in turns(rnd, cfg.plan_probes, 1):
        for q, (lo, hi) in cfg.queries().items():
            for label in order:
                w = Worker(label, checkouts[label], cpu)
                try:
                    reply = w.ask(op="plan_fresh", lo=lo, hi=hi, root=plan_tables[label]["root"],
                                  warm_root=plan_tables[label]["warm_root"])
                finally:
                    w.close()
                check_files(label, q, reply["files"], cfg)
                out[label][f"plan_fresh/{q}"].append(reply["open"] + reply["plan"])
                out[label][f"plan_fresh_cpu/{q}"].append(reply["cpu"])
                out[label]["plan_fresh_runs"].append({"query": q, "open": reply["open"], "plan": reply["plan"]})
    say(f"  round {rnd + 1}, open+plan in a fresh process: " + "; ".join(
        f"{label} " + ", ".join(f"{q} {fmt_s(p50(out[label][f'plan_fresh/{q}']))}" for q in cfg.queries())
        for label in REVISIONS) + " (p50)")


def spark_writes(ws: Workspace, cfg: Config, rnd: int, checkouts: dict[str, str], out: dict) -> None:
    """out[label]["spark_write"]: seconds per timed write, "spark_write_cpu": its CPU seconds (worker and
    JVM); "spark_files", "spark_warm_s": the warm-up write's data files and seconds."""
    d = ws.new(f"spark{rnd}")
    try:
        with workers_for(checkouts, out, None, log_stem="compare_revisions-spark") as workers:
            warm = ask_both(workers, {
                label: {"op": "spark_setup", "rows": cfg.spark_rows, "fast_start": cfg.fast_start,
                        "uri": os.path.join(d, f"warm-{label}")}
                for label in REVISIONS
            })
            for label in REVISIONS:
                out[label] |= {"spark_write": [], "spark_write_cpu": [], "spark_files": warm[label]["files"],
                               "spark_warm_s": warm[label]["warm_s"]}
            for first, _n, order in turns(rnd, cfg.spark_writes, 1):
                for label in order:
                    reply = workers[label].ask(op="spark_write", uri=os.path.join(d, f"{label}-{first}"))
                    out[label]["spark_write"] += reply["lat"]
                    out[label]["spark_write_cpu"] += reply["cpu"]
    finally:
        ws.drop(d)
    say(f"  round {rnd + 1}, Spark writes: " + ", ".join(f"{k} {fmt_s(p50(v['spark_write']))}" for k, v in out.items())
        + " (p50)")


# --------------------------------------------------------------------------- figures
class Figure(NamedTuple):
    name: str
    kind: str  # which latencies of a round's out[label]
    window: tuple[int, int] | None  # (first, last) 1-based items of them, None: all
    judged_as: str | None  # the verdict it carries, None: shown only
    why_not_judged: str | None = None
    # judged on the ratio of the p50s pooled over the rounds, not on the median of the rounds'
    # ratios: for figures of a few samples a round (see the module docstring)
    on_pooled: bool = False


def figures(cfg: Config) -> list[Figure]:
    """The rows of the table, for the measures of cfg: per measure, the judged one first (all its
    samples), then those shown for where a change sits and how noisy smaller samples are."""
    rows = []
    if "append" in cfg.measures:
        N = cfg.appends
        wide = max(APPEND_BLOCK, N // 10)
        noisy = f"{APPEND_BLOCK} commits a round: noisy, not judged"
        shape = f"{wide:,} commits a round: how the ratio moves with history, not judged"
        rows.append(Figure(f"append: all commits 1–{N:,}", "append", (1, N), "append"))
        if wide > APPEND_BLOCK:
            rows += [
                Figure(f"append: first {wide:,} commits (1–{wide:,})", "append", (1, wide), None, shape),
                Figure(f"append: last {wide:,} commits ({N - wide + 1:,}–{N:,})", "append", (N - wide + 1, N), None, shape),
            ]
        rows += [
            Figure(f"append: commits 1–{APPEND_BLOCK} (bench/run.py window)", "append", (1, APPEND_BLOCK), None, noisy),
            Figure(f"append: commits {N - APPEND_BLOCK + 1:,}–{N:,} (bench/run.py window)", "append",
                   (N - APPEND_BLOCK + 1, N), None, noisy),
            Figure(f"append: all commits 1–{N:,}, CPU time of the worker process", "append_cpu", (1, N), None,
                   "CPU time, not latency: shows how much of a change is load, not judged"),
            Figure(f"open: latest of {N:,} versions", "open", None, "open"),
        ]
    if "plan" in cfg.measures:
        NF, planned = cfg.plan_files, cfg.files_planned()
        what = {"all": f"all {NF:,} files", "1%": f"1% ({planned['1%']:,} of {NF:,} files)"}
        rows += [Figure(f"plan {what[q]}: open+plan, fresh process", f"plan_fresh/{q}", None, f"plan {q}", on_pooled=True)
                 for q in cfg.queries()]
        rows += [Figure(f"plan {what[q]}: open+plan, fresh process, CPU time of the process", f"plan_fresh_cpu/{q}",
                        None, None, "CPU time, not latency: shows how much of a change is load, not judged")
                 for q in cfg.queries()]
        rows += [Figure(f"plan {what[q]}: plan on an open handle", f"plan_handle/{q}", None, None,
                        "manifests cached in the process: the planning code alone, not judged")
                 for q in cfg.queries()]
    if "spark" in cfg.measures:
        what = f"Spark write: `lamina.spark.write` of {cfg.spark_rows:,} rows into a new table"
        rows += [
            Figure(what, "spark_write", None, "Spark write", on_pooled=True),
            Figure(f"{what}, CPU time of the worker and its JVM", "spark_write_cpu", None, None,
                   "CPU time, not latency: shows how much of a change is load, not judged"),
        ]
    return rows


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[1], q[2]


def ratio_text(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}×"


def pooled(rounds: list[dict], label: str, kind: str) -> list[float]:
    return [x for r in rounds for x in r[label][kind]]


def summarise(cfg: Config, rounds: list[dict], plan_tables: dict) -> tuple[Section, dict[str, float]]:
    """One table: a row per figure, each revision's p50 pooled over the rounds with its p25-p75,
    the ratio candidate / baseline (the median of the rounds' ratios, their range, and the ratio of
    the pooled p50s), the verdict; and per judged figure (see figures) the ratio it is judged on."""
    sec = Section(
        key="revisions",
        title="",
        what="",
        columns=[
            "figure", "samples per revision", "baseline p50 (p25–p75)", "candidate p50 (p25–p75)",
            "ratio candidate / baseline: median of rounds (min–max)", "ratio of the pooled p50s",
            f"target ≤ {TARGET:.2f}× (on the median of rounds; where said, on the pooled p50s)",
        ],
    )
    judged: dict[str, float] = {}
    for fig in figures(cfg):

        def pick(rnd: dict, label: str) -> list[float]:
            xs = rnd[label][fig.kind]
            return xs if fig.window is None else xs[fig.window[0] - 1 : fig.window[1]]

        pool = {label: [x for r in rounds for x in pick(r, label)] for label in REVISIONS}
        q = {label: quartiles(pool[label]) for label in REVISIONS}
        per_round = [p50(pick(r, "candidate")) / p50(pick(r, "baseline")) for r in rounds]
        ratio_pooled = q["candidate"][1] / q["baseline"][1]
        ratio = ratio_pooled if fig.on_pooled else p50(per_round)
        ok = ratio <= TARGET
        if fig.judged_as is not None:
            judged[fig.judged_as] = ratio
        sec.rows.append(
            [
                fig.name,
                f"{len(pool['baseline']):,}",
                *(f"{fmt_s(q[label][1])} ({fmt_s(q[label][0])}–{fmt_s(q[label][2])})" for label in REVISIONS),
                ratio_text(p50(per_round)) + (f" ({min(per_round):.2f}×–{max(per_round):.2f}×)" if len(rounds) > 1 else ""),
                ratio_text(ratio_pooled),
                f"({verdict(ok)}; {fig.why_not_judged})" if fig.judged_as is None
                else verdict(ok) + (" (on the pooled p50s)" if fig.on_pooled else ""),
            ]
        )
        sec.raw[fig.name] = {"p25_p50_p75": q, "ratio": ratio, "ratio_per_round": per_round,
                             "judged": fig.judged_as is not None}
    sec.notes += measure_notes(cfg, rounds, plan_tables)
    return sec, judged


def per_revision(text) -> str:
    """'baseline <text(label)>, candidate <text(label)>'."""
    return ", ".join(f"{label} {text(label)}" for label in REVISIONS)


def measure_notes(cfg: Config, rounds: list[dict], plan_tables: dict) -> list[str]:
    notes = []
    if "append" in cfg.measures:
        fastest = {label: min(pooled(rounds, label, "open")) for label in REVISIONS}
        notes.append(f"Fastest open: {per_revision(lambda label: fmt_s(fastest[label]))} "
                     f"(ratio {ratio_text(fastest['candidate'] / fastest['baseline'])}).")
        unflushed = [label for label in REVISIONS if not all(r[label]["hints_flushed"] for r in rounds)]
        if unflushed:
            notes.append(
                f"**{' and '.join(unflushed)}: the harness could not wait for the background version-hint writes** "
                "(bench/common.flush_lamina_hints found no working `lamina.commit.log.flush_hints`), so they may "
                "run into the other revision's turn: point that function at the revision's way to wait for them."
            )
    if "plan" in cfg.measures:
        planned = cfg.files_planned()

        def open_and_plan(label: str, q: str) -> str:
            runs = [x for r in rounds for x in r[label]["plan_fresh_runs"] if x["query"] == q]
            return f"{q} {fmt_s(p50([x['open'] for x in runs]))} + {fmt_s(p50([x['plan'] for x in runs]))}"

        notes.append(
            f"Plan tables: built once per revision, by its own Lamina, with `t.add_files` in {cfg.plan_commits:,} "
            f"commit(s) (untimed for the verdict: {per_revision(lambda label: fmt_s(plan_tables[label]['build_s']))}); "
            f"every plan of both revisions returned {planned['all']:,} files (all) and {planned['1%']:,} (1%) (checked). "
            "Fresh process, open + plan (p50s): "
            + "; ".join(f"{label} " + ", ".join(open_and_plan(label, q) for q in cfg.queries()) for label in REVISIONS)
            + "."
        )
    if "spark" in cfg.measures:
        files = {label: sorted({r[label]["spark_files"] for r in rounds}) for label in REVISIONS}
        same = files["baseline"] == files["candidate"]
        notes.append(
            f"Spark: each warm-up write's table was checked ({cfg.spark_rows:,} rows); its data files: "
            + per_revision(lambda label: "/".join(map(str, files[label])))
            + ("" if same else " (**the revisions wrote different numbers of files: not the same work**)")
            + "; the untimed warm-up writes (the session's first job: JIT, class loading) took (p50 over the rounds) "
            + per_revision(lambda label: fmt_s(p50([r[label]["spark_warm_s"] for r in rounds])))
            + ". The Spark job dominates the figure; Lamina's own part of a write (footers, one commit) is "
            "tens of ms."
        )
    notes.append(
        "Tables on the local disk, as in bench/run.py: a GET is a file read here. On an object store "
        "each GET is a network round trip, so a change in the number of GETs per commit, open or plan "
        "weighs far more there than these ratios show."
    )
    return notes


# --------------------------------------------------------------------------- report
def overall_text(judged: dict[str, float]) -> str:
    """The verdict per judged figure, on its ratio."""
    return ", ".join(f"{name} {ratio_text(r)}: {verdict(r <= TARGET)}" for name, r in judged.items())


def what_runs(cfg: Config) -> str:
    """What the measures of cfg did, for the report."""
    parts = [
        "Lamina only, at two revisions, each imported in its own worker processes (PYTHONPATH=<checkout>) "
        "driven over pipes; in every measure the revisions take turns, the order swapped every turn, so load "
        f"drifts fall on both alike. {cfg.rounds} round(s), each with fresh processes and tables."
    ]
    if "append" in cfg.measures:
        parts.append(
            f"*Append and open* (bench/run.py sections 1–2): per round and revision a long-lived worker makes the "
            f"same untimed warm-up appends as bench/run.py, then a new table gets {cfg.appends:,} appends of "
            f"{cfg.rows}-row batches (one commit each, `t.append(tbl)` timed end to end) in turns of {cfg.block} "
            f"commits (after each turn the worker waits, untimed, for its background version hints); then each "
            f"table is opened {cfg.opens} times (`lamina.open_table(uri)` + read the version), in turns of one "
            f"untimed and {OPEN_BLOCK} timed opens."
        )
    if "plan" in cfg.measures:
        lo, hi = cfg.queries()["1%"]
        parts.append(
            f"*Plan* (bench/run.py section 3): each revision's own table of {cfg.plan_files:,} data files of "
            f"{PLAN_RPF:,} rows (entries registered with `t.add_files(..., check_files=False)`, no files behind "
            "them: a plan reads only the manifests; the statistics of all four columns, as a native write records "
            f"them), built once for the run; queries *all* and *1%* (`id >= {lo:,} AND id < {hi:,}`). "
            f"**open+plan, fresh process**: per round, query and revision {cfg.plan_probes} new processes, each "
            "planning a 4-file table first (untimed: imports, lazy initialisation), then `lamina.open_table` + "
            "`t.scan(where=...).plan()` of the big one, timed (the OS page cache is warm). **plan on an open "
            f"handle**: {cfg.plans} plans per round, query and revision in the long-lived worker, in turns of one "
            f"untimed and {PLAN_BLOCK} timed plans on one handle."
        )
    if "spark" in cfg.measures:
        parts.append(
            "*Spark write* (as bench/spark_bench.py's fast write): per round, each revision's worker starts its "
            "own local[2] Spark session (the same settings for both: "
            + ", ".join(f"{k}={v}" for k, v in SPARK_CONF.items())
            + ("; fast-start JVM flags" if cfg.fast_start else "; default JVM flags")
            + f"; not pinned to a CPU) and makes an untimed warm-up write; then {cfg.spark_writes} timed "
            f"`lamina.spark.write(df, uri)` each into a new table (deleted afterwards, untimed), in turns of one "
            f"write, each after a full JVM GC; df: bench/spark_bench.build_df, {cfg.spark_rows:,} rows of 8 columns "
            "generated in the JVM."
        )
    parts.append(
        "The long-lived workers and the fresh plan processes of a round are pinned to the same CPU, another "
        "each round. The judged ratio is the median over the rounds of each round's ratio of p50s (the "
        "fresh-process plans and the Spark writes, a few samples a round each: the ratio of the p50s pooled over "
        "the rounds, as marked): on this "
        "machine one worker process can run 10–35% slower than an identical one for a whole round, so rounds "
        "with fresh processes are the unit that averages it out. `--baseline .` (the same code twice) measures "
        "the noise floor; the script's docstring has the details."
    )
    return " ".join(parts)


@case("revisions", heavy=True, title=SECTION_TITLE, sizes=Config,
      quick=dict(appends=100, opens=20, rounds=1, plan_files=2_000, plan_probes=1, plans=PLAN_BLOCK, spark_rows=200_000,
                 spark_writes=1, fast_start=True),
      tiny=dict(appends=10, opens=5, plan_files=300, spark_rows=20_000), only={"measures": tuple(MEASURES)},
      needs=(module("pyspark"), program("java")), versions=("pyarrow", "pyspark"), reps="rounds")
def revisions(run: Run) -> Report:
    """Lamina at two revisions side by side: append, open, plan and Spark write (the 10% rule of issue 45)."""
    cfg = run.sizes
    if run.scale == "tiny" and not cfg.baseline:  # the smoke test of the harness: this checkout against itself
        cfg.baseline = str(REPO_ROOT)
    cfg.measures = tuple(run.only("measures"))
    cfg.check()
    checkouts = {label: str(Path(getattr(cfg, label)).resolve()) for label in REVISIONS}
    revisions = {label: lamina_revision(path) for label, path in checkouts.items()}
    say("compare revisions: " + ", ".join(f"{label} {revisions[label]} ({checkouts[label]})" for label in REVISIONS)
        + f"; {cfg.rounds} round(s) of {', '.join(cfg.measures)}")
    rounds = []
    plan_tables = {}
    if "plan" in cfg.measures:
        plan_tables = build_plan_tables(run.ws, cfg, checkouts)
    for rnd in range(cfg.rounds):
        say(f"round {rnd + 1}/{cfg.rounds}")
        rounds.append(one_round(run.ws, cfg, rnd, checkouts, plan_tables))
    sec, judged = summarise(cfg, rounds, plan_tables)
    say(f"target ≤ {TARGET:.2f}×: {overall_text(judged)}")
    if "append" in cfg.measures:
        versions_made = {label: sorted({r[label]["version"] for r in rounds}) for label in REVISIONS}
        sec.notes.append(f"Append tables reached version {per_revision(lambda label: str(versions_made[label]))}.")
    sec.notes.append(f"Lamina imported from {per_revision(lambda label: '`' + rounds[0][label]['lamina'] + '`')}.")
    sec.notes.append("The harness keeps about 1 core busy, 2 in the Spark writes.")
    targets = [Target(f"{name}: candidate ≤ {TARGET:.2f}× baseline (within 10%)", r <= TARGET, ratio_text(r))
               for name, r in judged.items()]
    body = (f"**Target: candidate ≤ {TARGET:.2f}× baseline (within 10%). " + overall_text(judged)
            + "** (the rows marked PASS/MISS below; the others show where a change sits and how noisy smaller samples "
            "are).\n\nWhat runs: " + what_runs(cfg))
    rev = " vs ".join(f"{revisions[label]} ({label}, `{checkouts[label]}`)" for label in REVISIONS)
    return Report(title=SECTION_TITLE, replaces=FORMER_TITLES, targets=targets, body=body, sections=[sec],
                  revision=rev, raw={"checkouts": checkouts, "revisions": revisions, "figures": sec.raw,
                                     "plan_tables": plan_tables, "rounds": rounds})


def runner_args(argv: list[str]) -> list[str]:
    """This script's own options (--baseline, --candidate) as the runner's: the rest passes through."""
    out, it = [], iter(argv)
    for a in it:
        name, eq, value = a.partition("=")
        if name in ("--baseline", "--candidate"):
            out += ["--set", f"{name[2:]}={value if eq else next(it)}"]
        else:
            out.append(a)
    return out


if __name__ == "__main__":  # issue 45's tool: the same as `bench/run.py revisions ...`
    run_py = str(Path(__file__).resolve().with_name("run.py"))
    os.execv(sys.executable, [sys.executable, run_py, "revisions", *runner_args(sys.argv[1:])])
