#!/usr/bin/env python
"""The one benchmark runner: runs the registered cases (bench/registry.py) and writes their
sections of BENCHMARKS.md (bench/report.py).

    .venv/bin/python bench/run.py                      # the default cases -> BENCHMARKS.md (make bench)
    .venv/bin/python bench/run.py --list               # every case: its section, sizes, --only names, needs
    .venv/bin/python bench/run.py branches expire      # these cases, full size -> their sections of BENCHMARKS.md
    .venv/bin/python bench/run.py all --quick          # every case, a smoke run -> bench/out/BENCHMARKS.partial.md
    .venv/bin/python bench/run.py append --only lamina,lance --into BENCHMARKS.md
    .venv/bin/python bench/run.py merge --set rows=1000000 --reps 1 --out /tmp/merge.md

Cases: names (see --list), or `all`; none: the default cases. Each case runs in a fresh
interpreter of its own (one case: in this one), one after another; a case whose peers or
engines are missing is skipped, saying why.

Sizes: every case has its full run's sizes; --quick shrinks them to a smoke run, --tiny to a
few seconds (what tests/bench runs), --set NAME=VALUE sets one (where the case has it),
--reps N its repetitions. --only NAMES picks among the systems (or catalogs, readers, parts)
a case compares, as --list shows; a case's group none of the names belong to runs whole.

Output: each case's sections replace theirs in the file given by --into (created if absent;
other sections kept as they are, and notes marked "(added by hand)" within them); --out writes
a new file holding only this run's sections. Without either: BENCHMARKS.md for a run at the
default sizes, else bench/out/BENCHMARKS.<case>.md (or .partial.md for several cases), so a
smoke or partial run never overwrites the real report. Raw numbers go to
bench/out/<case>_results.json, tracebacks to bench/out/errors.log.

Workers: `run.py --worker module:function ARGS...` calls function(ARGS) of a bench module in
this fresh interpreter and prints what it returns as JSON (common.worker_cmd makes the line).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import registry  # noqa: E402
import report  # noqa: E402

DEFAULT_REPORT = common.REPO_ROOT / "BENCHMARKS.md"


def worker(target: str, argv: list[str]) -> int:
    mod, _, fn = target.partition(":")
    out = getattr(importlib.import_module(mod), fn)(argv)
    if out is not None:
        print(json.dumps(out, default=str), flush=True)
    return 0


def command_line(argv: list[str]) -> str:
    """How the run was started, as one could type it from the repository root."""
    try:
        exe = os.path.relpath(sys.executable, common.REPO_ROOT)
    except ValueError:
        exe = sys.executable
    if exe.startswith(".."):
        exe = sys.executable
    return " ".join([exe, "bench/run.py"] + [shlex.quote(a) for a in argv])


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help="case names, or all (default: the default cases)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    scale = ap.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="a smoke run: reduced sizes, figures not meaningful")
    scale.add_argument("--tiny", action="store_true", help="a few seconds a case (what tests/bench runs)")
    ap.add_argument("--only", default="", help="comma list of the systems (catalogs, readers, parts) to run")
    ap.add_argument("--reps", type=int, default=None, help="repetitions of the cases (those that have them)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="set one of the sizes")
    ap.add_argument("--profile", action="store_true", help="cProfile what the cases profile -> bench/out")
    dest = ap.add_mutually_exclusive_group()
    dest.add_argument("--into", default=None, help="markdown file whose sections this run replaces")
    dest.add_argument("--out", default=None, help="new markdown file holding only this run's sections")
    ap.add_argument("--command", default=None, help=argparse.SUPPRESS)  # the parent's command line, in a child
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # a case run by a parent run
    return ap


def list_cases(cases: dict[str, registry.Case]) -> None:
    for c in cases.values():
        sizes = ", ".join(f"{k}={getattr(c.sizes(), k)!r}" for k in c.size_fields())
        print(f"{c.name}{' (default)' if c.default else ''}: {c.about}")
        print(f"    section: ## {c.title}")
        if sizes:
            print(f"    sizes: {sizes}" + (f"; --reps sets {c.reps}" if c.reps else ""))
        for group, names in c.only.items():
            print(f"    --only {group}: {','.join(names)}")
        missing = c.missing()
        if missing:
            print(f"    cannot run here: {'; '.join(missing)}")


def case_options(c: registry.Case, args, sets: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The sizes set for case c (--set and --reps, where c has them), and the --only names that
    are c's."""
    mine = {k: v for k, v in sets.items() if k in c.size_fields()}
    if args.reps is not None and c.reps:
        mine[c.reps] = str(args.reps)
    names = [n for n in common_names(args.only) if any(n in g for g in c.only.values())]
    return mine, names


def common_names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1], argv[2:])
    ap = parser()
    args = ap.parse_args(argv)
    cases = registry.discover()
    if args.list:
        list_cases(cases)
        return 0
    names = list(cases) if args.cases == ["all"] else (args.cases or [n for n, c in cases.items() if c.default])
    unknown = [n for n in names if n not in cases]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; the cases: {', '.join(cases)}")
    chosen = [cases[n] for n in names]
    scale = "tiny" if args.tiny else "quick" if args.quick else "full"
    sets = {}
    for item in args.set:
        k, eq, v = item.partition("=")
        if not eq:
            ap.error(f"--set {item!r}: NAME=VALUE")
        sets[k.strip().replace("-", "_")] = v.strip()
    for k in sets:
        if not any(k in c.size_fields() for c in chosen):
            ap.error(f"--set {k}: no size of that name in {', '.join(names)}")
    if args.reps is not None and not any(c.reps for c in chosen):
        ap.error(f"--reps: {', '.join(names)} have no repetitions to set")
    for n in common_names(args.only):
        if not any(n in g for c in chosen for g in c.only.values()):
            ap.error(f"--only {n}: not a system, catalog, reader or part of {', '.join(names)}")
    if args.profile and not any(c.profiles for c in chosen):
        ap.error(f"--profile: {', '.join(names)} profile nothing")
    for c in chosen:
        try:
            c.make_sizes(scale, case_options(c, args, sets)[0])
        except (TypeError, ValueError) as e:
            ap.error(f"{c.name}: {e}")
    full = scale == "full" and not sets and args.reps is None and not args.only and not args.profile
    if args.into or args.out:
        dest = Path(args.into or args.out)
    elif full:
        dest = DEFAULT_REPORT
    else:
        dest = common.OUT_DIR / f"BENCHMARKS.{names[0] if len(names) == 1 else 'partial'}.md"
    command = args.command or command_line(argv)
    if not args.child:
        common.OUT_DIR.mkdir(parents=True, exist_ok=True)
        common.ERRORS_LOG.unlink(missing_ok=True)
    if args.out:
        report.write_new(dest)
    if len(chosen) == 1:
        c = chosen[0]
        mine, only = case_options(c, args, sets)
        return run_case(c, scale, mine, only, args.profile and c.profiles, dest, command)
    failed = []
    for c in chosen:  # each in a fresh interpreter, one after another, all into the same file
        mine, only = case_options(c, args, sets)
        child = [c.name, *([f"--{scale}"] if scale != "full" else []), "--into", str(dest), "--command", command,
                 "--child", *[f"--set={k}={v}" for k, v in mine.items()], *(["--only", ",".join(only)] if only else []),
                 *(["--profile"] if args.profile and c.profiles else [])]
        if subprocess.run([sys.executable, str(Path(__file__).resolve()), *child]).returncode != 0:
            failed.append(c.name)
    common.say(f"report: {dest}" + (f"; failed: {', '.join(failed)} (tracebacks in {common.ERRORS_LOG})" if failed else ""))
    return 1 if failed else 0


def run_case(c: registry.Case, scale: str, sets: dict[str, str], only: list[str], profile: bool, dest: Path,
             command: str) -> int:
    """Run case c in this interpreter and write its sections into dest."""
    missing = c.missing()
    if missing:
        common.say(f"skip {c.name}: {'; '.join(missing)}")
        return 0
    sizes, changed = c.make_sizes(scale, sets, profile)
    run = registry.Run(c, sizes, scale, registry.choose(c, only), common.Workspace())
    revision, started, t0, l0 = common.lamina_revision(), time.time(), common.now(), common.loadavg()
    logged = common.errors_logged()
    common.say(f"{c.name} ({scale}): {sizes}" + (f"; {run.chosen}" if c.only else ""))
    try:
        out = c.fn(run)
    except Exception as e:  # noqa: BLE001  (nothing is written for a case that failed)
        common.log_error(c.name, e)
        traceback.print_exc()
        common.say(f"{c.name} failed: {common.err_text(e)}; nothing written (tracebacks in {common.ERRORS_LOG})")
        return 1
    finally:
        run.ws.close()
    elapsed, l1 = common.now() - t0, common.loadavg()
    reports = out if isinstance(out, list) else [out]
    versions = common.library_versions(c.versions)
    elsewhere = "" if dest.resolve().parent == common.REPO_ROOT else str(common.REPO_ROOT)
    for rep in reports:
        rep.run = report.RunInfo(command, started, elapsed, {**versions, **rep.versions}, revision,
                                 common.machine_note(), (l0, l1), scale, changed, elsewhere)
    print()
    report.print_console(reports)
    report.write_into(dest, reports)
    raw = common.write_results(f"{c.name}_results.json", {
        "command": command, "case": c.name, "scale": scale, "sizes": dataclasses.asdict(sizes), "only": run.chosen,
        "elapsed_s": elapsed, "reports": {rep.title: rep.raw for rep in reports},
    })
    common.say(f"{c.name} done in {elapsed / 60:.1f} min; report: {dest}; raw: {raw}")
    if common.errors_logged() > logged:
        common.say(f"some cells of {c.name} failed; tracebacks in {common.ERRORS_LOG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
