#!/usr/bin/env python
"""Append and open latency of Lamina at two code revisions, side by side in one run: the
workload of bench/run.py sections 1 (append latency) and 2 (open the latest version of a
table with a long history), so a change can be held to "within 10% of the baseline".

    .venv/bin/python bench/compare_revisions.py --baseline /work/wt-base --out BENCHMARKS.md
    .venv/bin/python bench/compare_revisions.py --baseline /work/wt-base --quick   # smoke test (~20 s)
    .venv/bin/python bench/compare_revisions.py --baseline . --out /tmp/aa.md   # A/A: the noise floor

Knobs: --appends (commits per revision and round, default 2,000), --opens (200), --rounds (5),
--block (commits per turn, 10 as in bench/run.py).

--baseline is a checkout of the baseline revision (e.g. a `git worktree add ... 0f5b064`);
--candidate defaults to this repository. Only each checkout's `lamina` package is taken
from it: the harness (schema, batch generator, windows, timing) is this script's and
bench/common.py's, the same for both. A full run (defaults) takes about 1.5 minutes on an idle
machine, 2-3 on a busy one.

How: each revision's Lamina is imported in its own long-lived worker process
(`python bench/compare_revisions.py --worker <checkout>` with PYTHONPATH=<checkout>, and
PYTHONDONTWRITEBYTECODE so the checkouts are not written to), driven over pipes, one request
per block. Per round, each worker makes the untimed warm-up appends of bench/run.py to a
throwaway table, creates a fresh table, and the two revisions take turns in blocks of 10
commits (100-row batches from bench/common.make_batch, one append = one commit, each timed end
to end), the order of the two swapping every block (A B, B A, A B, ...), so drifts of load on
the shared machine fall on both alike. After each block the worker waits, untimed, for its
background version-hint writes, so none of them runs into the other revision's turn. Then each
revision's table is opened `--opens` times, in the same alternating blocks of 5 (one untimed
open, then 5 timed `open_table` + read the version).

Noise, and why the verdict is on the median of the rounds: A/A runs (`--baseline .`) on the
loaded shared 2-vCPU machine showed one worker process running slower than its identical twin
for a whole round: by up to 1.9x (opens) with the two left to the scheduler, still by 10-35%
(in CPU time too) with both pinned to one CPU. The same process appending to two tables in
turn shows no such gap, so it belongs to the process (where it runs, its memory layout), not to
the table or the code. Hence both workers of a round are pinned to the same CPU, another one
each round (only one runs at a time), each round starts fresh processes
and tables, and the ratio candidate / baseline judged against the target (<= 1.10x) is the
median over the rounds of each round's ratio of p50s, over all commits and over all opens; the
table also shows the rounds' range, the ratio of the p50s pooled over all rounds, p25-p75 of
each revision, and windows (first/last 10% of the commits, bench/run.py's 10-commit windows),
which are shown but not judged (an A/A run put 200-commit windows up to 0.8x-1.4x apart).

Only the section "Append and open latency against the baseline revision" of the --out file is
replaced (bench/run.py owns the rest of BENCHMARKS.md and rewrites all of it; re-run this
script after a full bench/run.py run). Raw latencies go to bench/out/compare_revisions.json.
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    APPEND_BLOCK, OPEN_BLOCK, REPO_ROOT, Section, Workspace, add_out_arg, begin_run, bench_parser, command_line,
    err_text, flush_lamina_hints, fmt_s, lamina_revision, loadavg, log_error, make_batch, md_notes, md_table, now,
    p50, print_rich, replace_md_section, report_path, rotated, say, standalone_header, timed_append, timed_opens,
    verdict, warm_up_appends, write_results,
)
import systems  # noqa: E402

SECTION_TITLE = "Append and open latency against the baseline revision"
TARGET = 1.10  # candidate p50 <= 1.10 x baseline p50 ("within 10%")
REVISIONS = ("baseline", "candidate")
REPLY_TIMEOUT_S = 300.0  # one block; far above any sane block, so only a hung worker trips it


@dataclass
class Config:
    quick: bool
    appends: int = 2000  # commits per revision per round
    opens: int = 200  # timed opens per revision per round
    rounds: int = 5
    rows: int = 100  # rows per append (bench/run.py section 1)
    block: int = APPEND_BLOCK  # commits per turn

    @classmethod
    def make(cls, args) -> "Config":
        cfg = cls(quick=args.quick)
        if args.quick:
            cfg.appends, cfg.opens, cfg.rounds = 100, 20, 1
        for knob in ("appends", "opens", "rounds", "block"):
            if getattr(args, knob) is not None:
                setattr(cfg, knob, getattr(args, knob))
        if cfg.appends < APPEND_BLOCK:
            raise SystemExit(f"--appends must be at least {APPEND_BLOCK} (one window)")
        if cfg.opens < 1 or cfg.rounds < 1 or cfg.block < 1:
            raise SystemExit("--opens, --rounds and --block must be at least 1")
        return cfg

    @property
    def default_sizes(self) -> bool:
        d = Config(quick=False)
        return (self.appends, self.opens, self.rounds, self.block) == (d.appends, d.opens, d.rounds, d.block)


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


def worker(checkout: str) -> None:
    """Serve the harness: one JSON request a line on stdin, one JSON reply a line on stdout."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything the library prints goes to stderr, not into the replies
    s = h = root = rows = None
    try:  # at once, while the other revision's worker starts too; a failure is the first reply
        where, import_error = import_lamina_from(checkout), None
    except Exception as e:  # noqa: BLE001
        import_error = e
    for line in sys.stdin:
        req = json.loads(line)
        try:
            op = req["op"]
            if op == "setup":
                if import_error is not None:
                    raise import_error
                rows, root = req["rows"], req["root"]
                s = systems.get("lamina")
                warm_up_appends(s, req["warm_root"], rows)
                flush_lamina_hints()
                h = s.create(root)
                reply = {"lamina": where}
            elif op == "append":
                batches = [make_batch(i * rows, rows) for i in range(req["first"], req["first"] + req["n"])]
                lat, cpu = [], []
                for data in batches:
                    c0 = time.process_time()
                    h, dt = timed_append(s, h, data)
                    cpu.append(time.process_time() - c0)
                    lat.append(dt)
                flush_lamina_hints()  # untimed: this block's background writes land before the other's turn
                reply = {"lat": lat, "cpu": cpu}
            elif op == "open":
                reply = {"lat": timed_opens(s, root, req["n"]), "version": s.version(s.open(root))}
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as e:  # noqa: BLE001  (the harness says which revision failed, and how)
            reply = {"error": err_text(e), "traceback": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


class Worker:
    """The harness's end of one revision's worker process."""

    def __init__(self, label: str, checkout: str, cpu: int):
        """Start the worker on CPU cpu only (all its threads, from the start)."""
        self.label = label
        # bytecode is read where it exists but never written: the checkouts are not written to
        env = dict(os.environ, PYTHONPATH=checkout, PYTHONDONTWRITEBYTECODE="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", checkout],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
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
            raise RuntimeError(f"{self.label} worker exited (code {self.proc.wait()}); its stderr is above")
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
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- one round
def one_round(ws: Workspace, cfg: Config, rnd: int, checkouts: dict[str, str]) -> dict:
    """Fresh workers and tables for both revisions: the interleaved appends, then the opens.
    {revision: {"append": [s per commit], "append_cpu": [CPU s per commit], "open": [s per open],
    "version": int, "lamina": path}}"""
    out = {label: {"append": [], "append_cpu": [], "open": []} for label in REVISIONS}
    workers: dict[str, Worker] = {}
    dirs = []
    # Both workers on one CPU, another each round. On the shared VM one vCPU can run ~2x slower
    # than the other for minutes (its host core busy with other work): left to the scheduler, a
    # worker that lands on it alone was measured up to 1.9x slower in an A/A run. Only one worker
    # runs at a time, so sharing a CPU costs nothing.
    cpu = sorted(os.sched_getaffinity(0))[rnd % len(os.sched_getaffinity(0))]
    try:
        for label in REVISIONS:
            workers[label] = Worker(label, checkouts[label], cpu)
        for label in REVISIONS:  # both at once: untimed
            dirs.append(d := ws.new(f"round{rnd}-{label}"))
            workers[label].send(
                op="setup", rows=cfg.rows, warm_root=os.path.join(d, "warm"), root=os.path.join(d, "table")
            )
        for label in REVISIONS:
            out[label]["lamina"] = workers[label].receive()["lamina"]
        for blk, first in enumerate(range(0, cfg.appends, cfg.block)):
            for label in rotated(list(REVISIONS), rnd + blk):
                n = min(cfg.block, cfg.appends - first)
                reply = workers[label].ask(op="append", first=first, n=n)
                out[label]["append"] += reply["lat"]
                out[label]["append_cpu"] += reply["cpu"]
            made = first + n
            if made // 500 > first // 500 or made >= cfg.appends:
                say(
                    f"  round {rnd + 1}, commit {min(made, cfg.appends):,}: "
                    + ", ".join(f"{k} {fmt_s(p50(v['append'][-100:]))}" for k, v in out.items())
                    + " (p50 of the last 100)"
                )
        for blk in range(-(-cfg.opens // OPEN_BLOCK)):
            for label in rotated(list(REVISIONS), rnd + blk):
                n = min(OPEN_BLOCK, cfg.opens - blk * OPEN_BLOCK)
                reply = workers[label].ask(op="open", n=n)
                out[label]["open"] += reply["lat"]
                out[label]["version"] = reply["version"]
        say(f"  round {rnd + 1}, opens: " + ", ".join(f"{k} {fmt_s(p50(v['open']))}" for k, v in out.items()) + " (p50)")
    finally:
        for w in workers.values():
            w.close()
        for d in dirs:
            ws.drop(d)
    return out


# --------------------------------------------------------------------------- figures
def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[1], q[2]


def ratio_text(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}×"


def summarise(cfg: Config, rounds: list[dict]) -> tuple[Section, dict[str, float]]:
    """One table: a row per figure (append windows, open), each revision's p50 pooled over the
    rounds with its p25-p75, the ratio candidate / baseline (the median of the rounds' ratios, their
    range, and the ratio of the pooled p50s), the verdict;
    and per kind (append, open) the ratio of its judged row: the one with the most samples (all
    commits, all opens; see the module docstring for why)."""
    N = cfg.appends
    wide = max(APPEND_BLOCK, N // 10)
    # (row label, which latencies, (first, last) 1-based commit window or None = all, why the row
    # is not judged or None)
    noisy = f"{APPEND_BLOCK} commits a round: noisy, not judged"
    shape = f"{wide:,} commits a round: how the ratio moves with history, not judged"
    figures = [(f"append: all commits 1–{N:,}", "append", (1, N), None)]
    if wide > APPEND_BLOCK:
        figures += [
            (f"append: first {wide:,} commits (1–{wide:,})", "append", (1, wide), shape),
            (f"append: last {wide:,} commits ({N - wide + 1:,}–{N:,})", "append", (N - wide + 1, N), shape),
        ]
    figures += [
        (f"append: commits 1–{APPEND_BLOCK} (bench/run.py window)", "append", (1, APPEND_BLOCK), noisy),
        (f"append: commits {N - APPEND_BLOCK + 1:,}–{N:,} (bench/run.py window)", "append",
         (N - APPEND_BLOCK + 1, N), noisy),
        (f"append: all commits 1–{N:,}, CPU time of the worker process", "append_cpu", (1, N),
         "CPU time, not latency: shows how much of a change is load, not judged"),
        (f"open: latest of {N:,} versions", "open", None, None),
    ]
    sec = Section(
        key="revisions",
        title=SECTION_TITLE,
        what="",
        columns=[
            "figure", "samples per revision", "baseline p50 (p25–p75)", "candidate p50 (p25–p75)",
            "ratio candidate / baseline: median of rounds (min–max)", "ratio of the pooled p50s",
            f"target ≤ {TARGET:.2f}× (median of rounds)",
        ],
    )
    judged: dict[str, float] = {}
    for name, kind, win, why_not_judged in figures:

        def pick(rnd: dict, label: str) -> list[float]:
            xs = rnd[label][kind]
            return xs if win is None else xs[win[0] - 1 : win[1]]

        pooled = {label: [x for r in rounds for x in pick(r, label)] for label in REVISIONS}
        q = {label: quartiles(pooled[label]) for label in REVISIONS}
        per_round = [p50(pick(r, "candidate")) / p50(pick(r, "baseline")) for r in rounds]
        ratio = p50(per_round)
        ok = ratio <= TARGET
        if why_not_judged is None:
            judged[kind] = ratio
        sec.rows.append(
            [
                name,
                f"{len(pooled['baseline']):,}",
                *(f"{fmt_s(q[label][1])} ({fmt_s(q[label][0])}–{fmt_s(q[label][2])})" for label in REVISIONS),
                ratio_text(ratio) + (f" ({min(per_round):.2f}×–{max(per_round):.2f}×)" if len(rounds) > 1 else ""),
                ratio_text(q["candidate"][1] / q["baseline"][1]),
                f"({verdict(ok)}; {why_not_judged})" if why_not_judged else verdict(ok),
            ]
        )
        sec.raw[name] = {"p25_p50_p75": q, "ratio": ratio, "ratio_per_round": per_round, "judged": why_not_judged is None}
    mins = {label: min(x for r in rounds for x in r[label]["open"]) for label in REVISIONS}
    sec.notes.append(
        f"Fastest open: baseline {fmt_s(mins['baseline'])}, candidate {fmt_s(mins['candidate'])} "
        f"(ratio {ratio_text(mins['candidate'] / mins['baseline'])})."
    )
    sec.notes.append(
        "Tables on the local disk, as in bench/run.py: a GET is a file read here. On an object store "
        "each GET is a network round trip, so a change in the number of GETs per commit or open "
        "weighs far more there than these ratios show."
    )
    return sec, judged


# --------------------------------------------------------------------------- report
def overall_text(judged: dict[str, float]) -> str:
    """The verdict per kind, on the ratio of its judged row."""
    return ", ".join(f"{kind} {ratio_text(r)}: {verdict(r <= TARGET)}" for kind, r in judged.items())


def write_section(
    path: Path, sec: Section, judged: dict[str, float], cfg: Config, checkouts: dict, revisions: dict, rounds: list[dict],
    command: str, started: float, elapsed: float,
) -> None:
    import pyarrow as pa

    rev = " vs ".join(f"{revisions[label]} ({label}, `{checkouts[label]}`)" for label in REVISIONS)
    lines = [f"## {SECTION_TITLE}", ""]
    lines += standalone_header(
        path, "bench/compare_revisions.py", command, started, elapsed, rev, cfg.quick, "ratios and verdicts",
        versions={"pyarrow": pa.__version__},
    )
    versions_made = {label: {r[label]["version"] for r in rounds} for label in REVISIONS}
    lines += [
        "",
        f"**Target: candidate ≤ {TARGET:.2f}× baseline (within 10%). " + overall_text(judged)
        + "** (the rows marked PASS/MISS below: all commits, all opens; the others show where a "
        "change sits and how noisy smaller samples are).",
        "",
        f"What runs: the workload of bench/run.py sections 1–2 on Lamina only, at two revisions, each "
        f"imported in its own long-lived worker process (PYTHONPATH=<checkout>) driven over pipes. "
        f"{cfg.rounds} round(s); per round and revision: fresh worker process, the same untimed warm-up "
        f"appends as bench/run.py, then a new table gets {cfg.appends:,} appends of {cfg.rows}-row batches "
        f"(one commit each, `t.append(tbl)` timed end to end), the two revisions taking turns in blocks of "
        f"{cfg.block} commits with the order swapped every block, so load drifts fall on both alike "
        f"(after each block the worker waits, untimed, for its background version hints); then each "
        f"table is opened {cfg.opens} times (`lamina.open_table(uri)` + read the version), in alternating "
        f"blocks of one untimed and {OPEN_BLOCK} timed opens. Both workers of a round are pinned to the "
        "same CPU, another each round. The judged ratio is the median over the rounds of each round's "
        "ratio of p50s: on this machine one worker process can run 10–35% slower than an identical one "
        "for a whole round, so rounds with fresh processes are the unit that averages it out. "
        "`--baseline .` (the same code twice) measures the noise floor; the script's docstring has the "
        "details.",
        "",
        md_table(sec),
        "",
    ]
    lines += md_notes(sec.notes)
    lines.append(
        f"- Tables reached version {', '.join(f'{label} {sorted(v)}' for label, v in versions_made.items())}; "
        "Lamina imported from "
        + ", ".join(f"{label} `{rounds[0][label]['lamina']}`" for label in REVISIONS)
        + "."
    )
    if sec.load:
        l0, l1, _dt = sec.load
        lines.append(f"- 1-min load average {l0} before, {l1} after (the harness keeps about 1 core busy).")
    lines.append("")
    replace_md_section(path, SECTION_TITLE, "\n".join(lines))


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(argv[1])
        return 0
    ap = bench_parser(__doc__)
    ap.add_argument("--baseline", required=True, help="a checkout of the baseline revision (e.g. /work/wt-base)")
    ap.add_argument("--candidate", default=str(REPO_ROOT), help="a checkout of the candidate (default: this one)")
    ap.add_argument("--appends", type=int, default=None, help="commits per revision and round (default 2,000)")
    ap.add_argument("--opens", type=int, default=None, help="timed opens per revision and round (default 200)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds, each with fresh workers and tables (default 5)")
    ap.add_argument("--block", type=int, default=None,
                    help=f"commits per turn of a revision (default {APPEND_BLOCK}, as bench/run.py)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 round of 100 appends and 20 opens")
    add_out_arg(ap, f'markdown file whose "{SECTION_TITLE}" section is replaced', "a full default run",
                "BENCHMARKS.revisions.md")
    args = ap.parse_args(argv)
    cfg = Config.make(args)
    checkouts = {"baseline": str(Path(args.baseline).resolve()), "candidate": str(Path(args.candidate).resolve())}
    for label, path in checkouts.items():
        if not (Path(path) / "lamina" / "__init__.py").is_file():
            ap.error(f"--{label} {path} is not a Lamina checkout (no lamina/__init__.py)")
    out_md = report_path(args.out, not cfg.quick and cfg.default_sizes, "BENCHMARKS.revisions.md")
    command = command_line("bench/compare_revisions.py", argv)
    revisions = {label: lamina_revision(path) for label, path in checkouts.items()}

    _, started, t0 = begin_run(
        "compare revisions: " + ", ".join(f"{label} {revisions[label]} ({checkouts[label]})" for label in REVISIONS)
        + f"; {cfg.rounds} round(s) of {cfg.appends:,} appends and {cfg.opens} opens"
    )
    ws = Workspace()
    rounds = []
    l0 = loadavg()
    try:
        for rnd in range(cfg.rounds):
            say(f"round {rnd + 1}/{cfg.rounds}")
            rounds.append(one_round(ws, cfg, rnd, checkouts))
    except Exception as e:  # noqa: BLE001
        log_error("compare_revisions", e)
        say(f"failed: {err_text(e)}; nothing written (tracebacks in bench/out/errors.log)")
        return 1
    finally:
        ws.close()
    elapsed = now() - t0
    sec, judged = summarise(cfg, rounds)
    sec.load = (l0, loadavg(), elapsed)
    print()
    print_rich([sec])
    say(f"target ≤ {TARGET:.2f}×: {overall_text(judged)}")
    out_md.parent.mkdir(parents=True, exist_ok=True)
    write_section(out_md, sec, judged, cfg, checkouts, revisions, rounds, command, started, elapsed)
    raw = write_results(
        "compare_revisions.json",
        {
            "command": command, "config": cfg.__dict__, "checkouts": checkouts, "revisions": revisions,
            "elapsed_s": elapsed, "figures": sec.raw,
            "rounds": [{label: {k: r[label][k] for k in ("append", "append_cpu", "open", "version")} for label in REVISIONS}
                       for r in rounds],
        },
    )
    say(f"done in {elapsed / 60:.1f} min; report: {out_md}; raw: {raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
