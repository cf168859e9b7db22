"""Shared pieces of the benchmark harness: the data, timing and formatting helpers."""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"  # git-ignored: raw results and error tracebacks

# Make `import lamina` work when run as `python bench/run.py` from a checkout.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("category", pa.string()),
        ("value", pa.float64()),
        ("ts", pa.timestamp("us")),
    ]
)

_CATEGORIES = np.array([f"cat_{i:02d}" for i in range(16)], dtype=object)
_TS0_US = 1_700_000_000_000_000  # 2023-11-14, microseconds


def make_batch(start: int, n: int) -> pa.Table:
    """`n` rows with ids start..start+n-1 (sorted, contiguous); deterministic."""
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "category": pa.array(_CATEGORIES[ids % 16], pa.string()),
            "value": ids.astype(np.float64) * 0.5,
            "ts": pa.array(_TS0_US + ids * 1_000_000, pa.timestamp("us")),
        },
        schema=SCHEMA,
    )


def now() -> float:
    return time.perf_counter()


def p50(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_s(sec: float | None) -> str:
    """Human-readable duration."""
    if sec is None:
        return "n/a"
    if sec < 1e-3:
        return f"{sec * 1e6:.0f} µs"
    if sec < 1:
        ms = sec * 1e3
        return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{sec:.2f} s" if sec < 100 else f"{sec:.0f} s"


def fmt_ratio(x: float | None, lamina: float | None) -> str:
    """figure / Lamina's figure (>1: the peer is slower / Lamina is faster)."""
    if x is None or lamina is None or lamina <= 0:
        return "–"
    r = x / lamina
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def fmt_x(x: float | None) -> str:
    """A ratio to two decimals."""
    return "–" if x is None else f"{x:.2f}×"


def spread(xs: list[float]) -> str:
    """p25–p75 of durations."""
    return f"{fmt_s(float(np.quantile(xs, 0.25)))}–{fmt_s(float(np.quantile(xs, 0.75)))}" if xs else "–"


def err_text(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"error: {type(exc).__name__}: {msg}"
    return text[:160]


def log_error(where: str, exc: BaseException) -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / "errors.log", "a") as f:
        f.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {where}\n")
        f.write("".join(traceback.format_exception(exc)))
        f.write("\n")


def dir_size(path: str | os.PathLike) -> int:
    return sum(file_sizes(path).values())


def file_sizes(root: str | os.PathLike) -> dict[str, int]:
    """relative path -> size of every file under root."""
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                out[os.path.relpath(p, root)] = os.path.getsize(p)
            except OSError:
                pass
    return out


def flush_lamina_hints() -> bool:
    """Version hints are written in the background: let them land before a walk or a copy. False
    if this Lamina has no lamina.commit.log.flush_hints (or it failed): nothing was waited for."""
    try:
        from lamina.commit.log import flush_hints

        flush_hints()
        return True
    except Exception:  # noqa: BLE001
        return False


# --------------------------------------------------------------------------- plan tables
def one_percent_ids(n_files: int, rows_per_file: int) -> tuple[int, int]:
    """[lo, hi) of the ids of make_batch data held by 1% of n_files files of rows_per_file rows
    (at least one file), in the middle of the table: the selective query of the plan benchmarks."""
    lo = (n_files // 2) * rows_per_file
    return lo, lo + max(1, n_files // 100) * rows_per_file


def synthetic_data_files(first: int, n: int, rows_per_file: int, all_columns: bool = False) -> pa.Table:
    """Entries for ``Table.add_files(..., check_files=False)`` of n data files that do not exist
    (a plan reads only the manifests): file i (first <= i < first + n) holds the ids
    [i * rows_per_file, (i + 1) * rows_per_file) of make_batch data. Statistics of id, or with
    all_columns of every column of SCHEMA, as a native write of that data records them."""
    i = np.arange(first, first + n, dtype=np.int64)
    lo, hi = i * rows_per_file, i * rows_per_file + rows_per_file - 1
    cols = {
        "path": pa.array([f"data/synthetic/{k:07d}.parquet" for k in i.tolist()], pa.string()),
        "size": pa.array(np.full(n, 4_000_000, dtype=np.int64)),
        "record_count": pa.array(np.full(n, rows_per_file, dtype=np.int64)),
    }
    bounds = {"id": (pa.array(lo), pa.array(hi))}
    if all_columns:
        if rows_per_file < len(_CATEGORIES):
            raise ValueError(f"all_columns needs files of at least {len(_CATEGORIES)} rows (every category)")
        bounds |= {
            "category": (pa.array(np.full(n, _CATEGORIES[0]), pa.string()), pa.array(np.full(n, _CATEGORIES[-1]), pa.string())),
            "value": (pa.array(lo * 0.5), pa.array(hi * 0.5)),
            "ts": tuple(pa.array(_TS0_US + x * 1_000_000, pa.timestamp("us")) for x in (lo, hi)),
        }
    for name, (lower, upper) in bounds.items():
        cols |= {f"lower.{name}": lower, f"upper.{name}": upper, f"null_count.{name}": pa.array(np.zeros(n, dtype=np.int64))}
    return pa.table(cols)


# --------------------------------------------------------------------------- deltalake tables of given files
def even_slices(data: pa.Table, n: int) -> list[pa.Table]:
    """data cut into n consecutive slices of len(data) // n rows (the last takes the rest)."""
    per = data.num_rows // n
    return [data.slice(i * per, per if i < n - 1 else data.num_rows - i * per) for i in range(n)]


def delta_table_of_files(uri: str, parts: list[pa.Table], stats_columns: list[str], configuration: dict | None = None) -> None:
    """A new deltalake table at uri whose version 1 holds one Parquet file per part (written by pyarrow,
    registered by one ``create_write_transaction``, min/max statistics of stats_columns): delta-rs's
    writer cannot cut files at a row count."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    schema = parts[0].schema
    dt = DeltaTable.create(uri, schema=schema, configuration=configuration)
    adds = []
    for i, part in enumerate(parts):
        name = f"part-{i:05d}.parquet"
        pq.write_table(part, os.path.join(uri, name))
        lo, hi = ({c: pc.min_max(part.column(c))[k].as_py() for c in stats_columns} for k in ("min", "max"))
        nulls = {c: part.column(c).null_count for c in schema.names}
        stats = {"numRecords": part.num_rows, "minValues": lo, "maxValues": hi, "nullCount": nulls}
        adds.append(AddAction(name, os.path.getsize(os.path.join(uri, name)), {}, int(time.time() * 1000), True, json.dumps(stats)))
    dt.create_write_transaction(adds, mode="append", schema=schema)


# --------------------------------------------------------------------------- tables built by appends
class AppendBuilt:
    """One system's table built by appending ``batches``, one version each (the same data for
    every system). A benchmark's adapter subclasses the system's class and adds the operation
    it times; ``schema`` is the benchmark's."""

    name = ""
    schema = SCHEMA
    table_dir = "t"

    def uri(self, root):
        return os.path.join(root, self.table_dir)

    def settle(self) -> None:
        """Let a build's background work finish before the table is copied or read."""


class LaminaAppends(AppendBuilt):
    name = "lamina"

    def build(self, root, batches):
        import lamina

        t = lamina.create_table(self.uri(root), self.schema)
        for b in batches:
            t.append(b)
        self.settle()

    def settle(self) -> None:
        flush_lamina_hints()

    def open(self, root):
        import lamina

        return lamina.open_table(self.uri(root))


class DeltaAppends(AppendBuilt):
    name = "deltalake"

    def build(self, root, batches):
        from deltalake import DeltaTable, write_deltalake

        dt = DeltaTable.create(self.uri(root), schema=self.schema)
        for b in batches:
            write_deltalake(dt, b, mode="append")

    def open(self, root):
        from deltalake import DeltaTable

        return DeltaTable(self.uri(root))


class LanceAppends(AppendBuilt):
    name = "lance"
    table_dir = "t.lance"

    def build(self, root, batches):
        import lance

        ds = lance.write_dataset(batches[0], self.uri(root), schema=self.schema)
        for b in batches[1:]:
            ds = lance.write_dataset(b, ds, mode="append")

    def open(self, root):
        import lance

        return lance.dataset(self.uri(root))


# --------------------------------------------------------------------------- the append and open workload
# (bench/run.py sections 1-2; bench/compare_revisions.py runs the same on two Lamina revisions)
# Systems take turns in blocks: 10 consecutive commits (= one reported window) or
# opens per system, then the next system. Blocks keep background load on the shared
# machine spread over all systems alike, while consecutive calls of one system avoid
# charging it for another library's after-effects (CPU caches, runtime threads),
# which distorts sub-millisecond calls when systems alternate call by call.
APPEND_BLOCK = 10
OPEN_BLOCK = 5
WARM_APPENDS = 5  # untimed appends to a throwaway table before a system's timed ones


def warm_up_appends(s, root: str, rows: int) -> None:
    """WARM_APPENDS untimed appends through adapter s (bench/systems.py) to a throwaway table in
    root (imports, runtimes, lazy initialisation), so that the timed commits 1-10 of the real table
    measure a small history, not start-up."""
    h = s.create(root)
    for i in range(WARM_APPENDS):
        h = s.append(h, make_batch(i * rows, rows))


def timed_append(s, h, data: pa.Table):
    """(handle, seconds) of one append through adapter s, timed end to end (write the data file +
    commit the new version)."""
    t0 = now()
    h = s.append(h, data)
    return h, now() - t0


def timed_opens(s, root: str, n: int) -> list[float]:
    """One untimed open through adapter s (re-warm after another system's turn), then n timed
    opens of the table in root, each timed with reading the version number."""
    s.version(s.open(root))
    lat = []
    for _ in range(n):
        t0 = now()
        s.version(s.open(root))
        lat.append(now() - t0)
    return lat


# --------------------------------------------------------------------------- sections and reports
@dataclass
class Section:
    key: str
    title: str
    what: str  # markdown: exactly what is timed
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict)
    load: tuple | None = None  # (1-min load average before, after, seconds taken)

    def error_row(self, name: str, text: str) -> None:
        """A row that says only why the system has no figures."""
        self.rows.append([name, text] + [""] * (len(self.columns) - 2))


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def rotated(items: list, rep: int) -> list:
    """items, started at rep % len(items): each repetition puts another system first."""
    k = rep % len(items) if items else 0
    return items[k:] + items[:k]


class Workspace:
    """All tables live in one temp dir under /tmp, removed at the end."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="lamina-bench-", dir="/tmp")

    def new(self, label: str) -> str:
        return tempfile.mkdtemp(prefix=f"{label}-", dir=self.base)

    def copy(self, src: str, label: str) -> str:
        """A new dir holding a copy of the tree at src."""
        dst = self.new(label)
        shutil.copytree(src, dst, dirs_exist_ok=True)
        return dst

    def drop(self, path: str | None) -> None:
        if path:
            shutil.rmtree(path, ignore_errors=True)

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)


def loadavg() -> float | None:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except Exception:  # noqa: BLE001
        return None


def lamina_revision(checkout: str | os.PathLike = REPO_ROOT) -> str:
    """Read-only git look-up: which Lamina code (of the checkout, by default this one) the figures
    belong to."""
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--", "lamina"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return (head or "no commit") + (" + uncommitted changes in lamina/" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


def machine_note() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(open("/proc/meminfo").readline().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except Exception:  # noqa: BLE001
        pass
    return f"{os.cpu_count()} vCPU ({cpu}){mem}, Linux {platform.release()}, Python {platform.python_version()}"


def print_rich(sections: list[Section]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=200)
    for sec in sections:
        t = Table(title=sec.title, show_lines=False, title_justify="left")
        for c in sec.columns:
            t.add_column(c, overflow="fold")
        for r in sec.rows:
            cells = [
                (f"[green]{x}[/]" if "PASS" in x and "MISS" not in x else f"[red]{x}[/]" if ("MISS" in x or x.startswith("error")) else x)
                for x in r
            ]
            t.add_row(*cells)
        con.print(t)
        for n in sec.notes:
            con.print(f"  {n}", markup=False, highlight=False)
        con.print()


def md_table(sec: Section) -> str:
    def esc(x: str) -> str:
        return x.replace("|", "\\|")

    lines = ["| " + " | ".join(sec.columns) + " |", "|" + "---|" * len(sec.columns)]
    for r in sec.rows:
        lines.append("| " + " | ".join(esc(x) for x in r) + " |")
    return "\n".join(lines)


def md_notes(notes: list[str]) -> list[str]:
    """Notes as markdown list items (a note that already is one stays as it is)."""
    return [n if n.startswith("- ") else f"- {n}" for n in notes]


def sections_markdown(secs: list[Section]) -> list[str]:
    """The lines of each section under its `### title`: what is timed, the table, the notes."""
    lines: list[str] = []
    for sec in secs:
        lines += [f"### {sec.title}", "", sec.what, "", md_table(sec), "", *md_notes(sec.notes), ""]
    return lines


# --------------------------------------------------------------------------- command line and output files
def command_line(script: str, argv: list[str]) -> str:
    """How the run was started, as one could type it from the repository root."""
    try:
        exe = os.path.relpath(sys.executable, REPO_ROOT)
    except ValueError:
        exe = sys.executable
    if exe.startswith(".."):
        exe = sys.executable
    return " ".join([exe, script] + [shlex.quote(a) for a in argv])


def report_path(out: str | None, full: bool, partial_name: str) -> Path:
    """--out if given; else BENCHMARKS.md for a full default run, else bench/out/<partial_name>,
    so that a partial or quick run never overwrites the real report."""
    if out:
        return Path(out)
    return REPO_ROOT / "BENCHMARKS.md" if full else OUT_DIR / partial_name


def standalone_header(
    path: Path, script: str, command: str, started: float, elapsed: float, revision: str, quick: bool,
    quick_note: str, intro_extra: str = "", versions: dict | None = None,
) -> list[str]:
    """The opening lines of a `## ...` section written by a standalone script (not by bench/run.py);
    versions: the libraries to name (default: every system's)."""
    vers = systems_versions() if versions is None else versions
    return [
        f"Written by `{script}` (not by `bench/run.py`; a full `bench/run.py` run rewrites this "
        "file, so re-run this command after it)." + intro_extra,
        "",
        f"- Command: `{command}` (from the repository root"
        + (
            f"; run in the checkout at `{REPO_ROOT}`, at the commit below, writing into this file)"
            if path.resolve().parent != REPO_ROOT
            else ")"
        ),
        f"- Run: {time.strftime('%Y-%m-%d %H:%M %Z', time.localtime(started))}, took {elapsed / 60:.1f} min"
        + (f" — **QUICK smoke run: reduced sizes, {quick_note} not meaningful**" if quick else ""),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items() if k != "pyiceberg")
        + f"; Lamina code at git {revision}",
        f"- Machine: {machine_note()}; shared, so absolute times drift — quote the ratios from this run.",
    ]


def systems_versions() -> dict:
    import systems

    return systems.library_versions()


def replace_md_section(path: Path, title: str, block: str) -> None:
    """Replace the `## title` section of the markdown file at path with block (or append it),
    leaving the rest of the file as it is."""
    text = path.read_text() if path.exists() else "# Lamina benchmarks\n"
    pat = re.compile(r"^## " + re.escape(title) + r"\n.*?(?=^## |\Z)", re.S | re.M)
    if pat.search(text):
        text = pat.sub(lambda _m: block + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text.rstrip("\n") + "\n")


def write_results(name: str, payload: dict) -> Path:
    """Raw numbers as JSON in bench/out/<name>."""
    path = OUT_DIR / name
    path.write_text(json.dumps(payload, indent=1, default=str))
    return path


# --------------------------------------------------------------------------- fresh processes
def run_json(cmd: list[str], timeout: float = 900, what: str = "worker") -> dict:
    """Run cmd; its last stdout line is JSON. A failure raises with the last line it printed."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()
        raise RuntimeError(tail[-1] if tail else f"{what} exit {p.returncode}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_script_worker(script: str | os.PathLike, args: list[str], timeout: float = 900) -> dict:
    """`python <script> --worker *args` in a fresh interpreter; its JSON answer."""
    return run_json([sys.executable, str(Path(script).resolve()), "--worker", *args], timeout)


def profile_start(on: bool):
    if not on:
        return None
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    return prof


def profile_dump(prof, stem: str) -> None:
    """Stop prof; write bench/out/<stem>.prof and a text summary <stem>_profile.txt."""
    if prof is None:
        return
    import pstats

    prof.disable()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    prof.dump_stats(str(OUT_DIR / f"{stem}.prof"))
    with open(OUT_DIR / f"{stem}_profile.txt", "w") as f:
        ps = pstats.Stats(prof, stream=f).sort_stats("cumulative")
        ps.print_stats(40)
        ps.sort_stats("tottime").print_stats(25)


def timed_open_call(open_fn, call_fn, profile_stem: str | None = None) -> tuple[float, float, object]:
    """(seconds to open, seconds of call_fn(handle), its result); cProfile the call when
    profile_stem is given (see profile_dump)."""
    t0 = now()
    h = open_fn()
    t1 = now()
    prof = profile_start(profile_stem is not None)
    t2 = now()
    out = call_fn(h)
    t3 = now()
    profile_dump(prof, profile_stem)
    return t1 - t0, t3 - t2, out


def bench_parser(doc: str | None):
    """The argument parser of a bench script, with its docstring as the description."""
    import argparse

    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_out_arg(ap, what: str, full_run: str, partial_name: str, why: str = "") -> None:
    """--out: the markdown file to write; by default the one report_path picks."""
    ap.add_argument(
        "--out", default=None, help=f"{what} (default: BENCHMARKS.md for {full_run}, else bench/out/{partial_name}{why})"
    )


def add_only_arg(ap, names: list[str]) -> None:
    ap.add_argument("--only", default=",".join(names), help="comma list of " + ",".join(names))


def comma_list(ap, value: str, allowed: list[str], what: str) -> list[str]:
    """The names in a comma list (--only); an unknown one is a usage error."""
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad:
        ap.error(f"unknown {what}(s): {bad}")
    return items


def finish_run(secs: list[Section], out_md: Path, title: str, block: str, raw: dict, results_name: str,
               targets: list[str], elapsed: float) -> None:
    """The end of a standalone bench script: print its sections, put block in place of the `## title`
    section of out_md, write the raw numbers to bench/out/<results_name>, and say the verdicts."""
    print()
    print_rich(secs)
    replace_md_section(out_md, title, block)
    raw["elapsed_s"] = elapsed
    write_results(results_name, raw)
    say(f"done in {elapsed / 60:.1f} min; " + "; ".join(targets) + f"; report: {out_md}")


def begin_run(banner: str) -> tuple[str, float, float]:
    """Say what runs; (Lamina revision, wall-clock start, perf-counter start). The revision is read at
    the start: spawned workers import lamina later."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    say(banner)
    return lamina_revision(), time.time(), now()
