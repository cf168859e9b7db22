"""Shared pieces of the benchmark harness: the data, timing and formatting helpers."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
# git-ignored: raw results, error tracebacks, profiles (LAMINA_BENCH_OUT puts them elsewhere, as the tests do)
OUT_DIR = Path(os.environ.get("LAMINA_BENCH_OUT") or BENCH_DIR / "out")

TESTS_DIR = REPO_ROOT / "tests"


def shown_path(path: Path) -> str:
    """path as a report names it: from the repository root when inside it (bench/out/...), else whole."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)

# Make `import lamina` work when run as `python bench/run.py` from a checkout, and `import support`
# (tests/support: the servers, proxies and racing workers some cases start).
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
if str(TESTS_DIR) not in sys.path:
    sys.path.append(str(TESTS_DIR))

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


def div(a: float | None, b: float | None) -> float | None:
    """a / b, or None without both (or with b ≤ 0)."""
    return None if a is None or b is None or b <= 0 else a / b


def fmt_times(r: float | None) -> str:
    """A ratio: two decimals below 10×, none above."""
    return "–" if r is None else f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def fmt_ratio(x: float | None, lamina: float | None) -> str:
    """figure / Lamina's figure (>1: the peer is slower / Lamina is faster)."""
    return fmt_times(div(x, lamina))


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


ERRORS_LOG = OUT_DIR / "errors.log"


def errors_logged() -> int:
    """How much errors.log holds (bytes): a case that grew it had cells that failed."""
    return ERRORS_LOG.stat().st_size if ERRORS_LOG.exists() else 0


def log_error(where: str, exc: BaseException) -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(ERRORS_LOG, "a") as f:
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


# --------------------------------------------------------------------------- runs
def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


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
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
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


def library_versions(dists: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Distribution -> installed version (or why it is not), for the Versions line of a report."""
    from importlib.metadata import version

    out = {}
    for d in dists:
        try:
            out[d] = version(d)
        except Exception as e:  # noqa: BLE001
            out[d] = f"not installed ({type(e).__name__})"
    return out


def write_results(name: str, payload: dict) -> Path:
    """Raw numbers as JSON in bench/out/<name>."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
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


def worker_cmd(target: str, *args: str) -> list[str]:
    """The command line of a worker in a fresh interpreter: `python bench/run.py --worker
    module:function *args` calls function(list(args)) of the bench module and prints what it
    returns as JSON (its last line)."""
    return [sys.executable, str(BENCH_DIR / "run.py"), "--worker", target, *args]


def run_worker(target: str, args: list[str], timeout: float = 900) -> dict:
    """worker_cmd(target, *args) run to its end; its JSON answer."""
    return run_json(worker_cmd(target, *args), timeout, target)


def run_workers_at_once(target: str, args_of: dict[str, list[str]], timeout: float, where: str) -> dict[str, dict]:
    """One worker per name (worker_cmd(target, *args)), all started at once (e.g. each system building
    its table in a process of its own); name -> its JSON answer, or {"error": its last line} (the
    traceback goes to bench/out/errors.log under where/name)."""
    procs = {name: subprocess.Popen(worker_cmd(target, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, args in args_of.items()}
    out = {}
    for name, p in procs.items():
        o, e = p.communicate(timeout=timeout)
        if p.returncode != 0:
            tail = (e or o).strip().splitlines()
            out[name] = {"error": (tail[-1] if tail else f"exit {p.returncode}")[:160]}
            log_error(f"{where}/{name}", RuntimeError(e[-5000:]))
        else:
            out[name] = json.loads(o.strip().splitlines()[-1])
    return out


def start_barrier() -> float:
    """A racing worker's side of the start barrier of tests/support/workers.spawn_workers: say READY,
    wait for GO; when it came (time.time())."""
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        sys.exit("no GO from the parent")
    return time.time()


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
