"""The benchmark cases `bench/run.py` runs, and what a case is given.

A case is a function registered with :func:`case`; it takes a :class:`Run` and returns the
:class:`report.Report` (or the list of them) it measured::

    @dataclass
    class Sizes:                       # the full run's sizes; every field can be --set
        rows: int = 10_000_000
        reps: int = 3
        profile: bool = False          # optional: set by --profile (cProfile what the case profiles)

    @case("merge", title="Merge (issue 19)", sizes=Sizes,
          quick=dict(rows=1_000_000, reps=1),       # --quick: a smoke run
          tiny=dict(rows=20_000, reps=1),           # --tiny: seconds (tests/bench runs every case so)
          only={"systems": ("lamina", "deltalake", "lance")},   # what --only picks from
          needs=(module("deltalake", "lance"),),     # absent: the case is skipped, saying why
          versions=("lamina", "deltalake", "pylance", "pyarrow"), reps="reps",
          heavy=True)                               # its --tiny run still takes long: tier bench_heavy
    def merge(run: Run) -> Report:
        cfg = run.sizes                      # a Sizes
        systems = run.only("systems")        # the ones chosen
        root = run.ws.new("merge")           # a temp dir, removed after the case
        ...
        return Report(title="Merge (issue 19)", targets=[Target(...)], sections=[Section(...)])

Cases live in ``bench/*_bench.py`` (and bench/compare_revisions.py): :func:`discover` imports
them, so a new module with a ``@case`` is found without being listed anywhere. Imports of
peers and engines belong inside the functions (a module must import without them). A worker
a case runs in a fresh interpreter is any function ``fn(argv: list[str])`` of a case module,
started with ``common.worker_cmd("module:fn", *argv)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import shutil
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
CASE_MODULES = ("*_bench.py", "compare_revisions.py")  # where discover() looks for cases
SCALES = ("full", "quick", "tiny")
HEAVY = "bench_heavy"  # the tier of the cases whose tiny run takes long (`make test` leaves them to `make test-bench`)
PROFILE = "profile"  # the size --profile sets (a bool): cProfile what the case profiles -> bench/out
DEFAULT_VERSIONS = ("lamina", "deltalake", "pylance", "pyarrow")


# --------------------------------------------------------------------------- what a case needs
class Absent(Exception):
    """Raised by a probe that says itself why the need is absent (its message is the reason)."""


@dataclass(frozen=True)
class Need:
    """Something a case cannot run without; missing() says why it is absent (None: present). tier:
    the test tier (a pytest marker of tests/conftest.py) a run of the case falls in, if any."""

    what: str
    probe: Callable[[], bool]
    tier: str | None = None

    def missing(self) -> str | None:
        try:
            return None if self.probe() else f"{self.what} not found"
        except Absent as e:
            return str(e)
        except Exception as e:  # noqa: BLE001  (a probe that fails is a missing need)
            return f"{self.what}: {type(e).__name__}: {e}"


TIERS = {"pyspark": "spark", "moto": "s3", "selenium": "browser"}  # module -> the test tier it puts a case in


def module(*names: str) -> Need:
    """Python modules (peers, engines)."""
    tier = next((TIERS[n] for n in names if n in TIERS), None)
    return Need("Python module(s) " + ", ".join(names),
                lambda: all(importlib.util.find_spec(n) is not None for n in names), tier)


def program(*names: str) -> Need:
    """Executables on PATH."""
    return Need("program(s) " + ", ".join(names) + " on PATH", lambda: all(shutil.which(n) for n in names))


def postgres() -> Need:
    """The PostgreSQL server binaries tests/support/pgserver.py starts (initdb, pg_ctl)."""

    def probe() -> bool:
        if str(REPO_ROOT / "tests") not in sys.path:
            sys.path.insert(0, str(REPO_ROOT / "tests"))
        from support import pgserver

        return pgserver.find_bin_dir() is not None

    return Need("PostgreSQL server binaries (initdb, pg_ctl)", probe, "postgres")


def check(what: str, probe: Callable[[], bool]) -> Need:
    """Any other condition (a server's binaries, a venv of the repository, ...)."""
    return Need(what, probe)


# --------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class NoSizes:
    """The sizes of a case that has none to set."""


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[["Run"], Any]
    title: str  # the section it writes (its first, if several)
    sizes: type = NoSizes
    quick: dict = field(default_factory=dict)
    tiny: dict = field(default_factory=dict)
    only: dict[str, tuple[str, ...]] = field(default_factory=dict)  # group -> names --only picks from
    needs: tuple[Need, ...] = ()
    versions: tuple[str, ...] = DEFAULT_VERSIONS  # distributions named in the Versions line
    default: bool = False  # run by `bench/run.py` without a case (`make bench`)
    reps: str | None = None  # the size --reps sets
    heavy: bool = False  # its tiny run still takes long (servers, JVMs, many processes): the tier bench_heavy
    also: tuple[str, ...] = ()  # other cases' sections it writes too (in the same run)

    @property
    def about(self) -> str:
        return (self.fn.__doc__ or self.title).strip().splitlines()[0]

    @property
    def profiles(self) -> bool:
        """Whether --profile does something here: its sizes have a ``profile: bool`` the runner sets."""
        return PROFILE in self.size_fields()

    def missing(self) -> list[str]:
        return [why for n in self.needs if (why := n.missing())]

    @property
    def tiers(self) -> set[str]:
        """The test tiers its needs put it in (spark, postgres, s3, browser), and bench_heavy if heavy."""
        return {n.tier for n in self.needs if n.tier} | ({HEAVY} if self.heavy else set())

    def size_fields(self) -> dict[str, Any]:
        """name -> type of every size (the sizes' dataclass fields but those with init=False)."""
        hints = typing.get_type_hints(self.sizes)
        return {f.name: hints[f.name] for f in dataclasses.fields(self.sizes) if f.init}

    def make_sizes(self, scale: str, sets: dict[str, str], profile: bool = False) -> tuple[Any, dict]:
        """The sizes at scale with sets applied (name -> text, parsed by the field's type) and profile
        set (if the sizes have it); and the sets applied."""
        preset = {"full": {}, "quick": self.quick, "tiny": {**self.quick, **self.tiny}}[scale]
        types = self.size_fields()
        if PROFILE in sets:
            raise ValueError("profile is set by --profile")
        mine = {k: parse_value(types[k], v) for k, v in sets.items() if k in types}
        extra = {PROFILE: True} if profile and self.profiles else {}
        return self.sizes(**{**preset, **mine, **extra}), mine


CASES: dict[str, Case] = {}


def case(name: str, *, title: str, sizes: type = NoSizes, quick: dict | None = None, tiny: dict | None = None,
         only: dict[str, tuple[str, ...]] | None = None, needs: tuple[Need, ...] = (),
         versions: tuple[str, ...] = DEFAULT_VERSIONS, default: bool = False, reps: str | None = None,
         heavy: bool = False, also: tuple[str, ...] = ()) -> Callable:
    """Register fn(run) -> Report | list[Report] as the case `name` (see the module's docstring)."""

    def register(fn: Callable) -> Callable:
        if name in CASES and CASES[name].fn.__module__ != fn.__module__:
            raise ValueError(f"two cases named {name!r}: {CASES[name].fn.__module__} and {fn.__module__}")
        c = Case(name, fn, title, sizes, dict(quick or {}), dict(tiny or {}), dict(only or {}), tuple(needs),
                 tuple(versions), default, reps, heavy, tuple(also))
        for preset in (c.quick, c.tiny):
            unknown = set(preset) - set(c.size_fields())
            if unknown:
                raise ValueError(f"case {name!r}: presets name sizes it does not have: {sorted(unknown)}")
        if reps is not None and reps not in c.size_fields():
            raise ValueError(f"case {name!r}: reps={reps!r} is not one of its sizes")
        CASES[name] = c
        return fn

    return register


def discover() -> dict[str, Case]:
    """Import every case module of bench/; the cases, by name, in the order of their modules."""
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    for pattern in CASE_MODULES:
        for path in sorted(BENCH_DIR.glob(pattern)):
            importlib.import_module(path.stem)
    return CASES


def parse_value(kind: Any, text: str) -> Any:
    """text as a value of the type kind: int, float, str, bool, or a tuple of them (a comma list)."""
    origin = typing.get_origin(kind)
    if origin is tuple:
        inner = typing.get_args(kind)[0]
        return tuple(parse_value(inner, x.strip()) for x in text.split(",") if x.strip())
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"not a boolean: {text!r}")
        return text.lower() in ("true", "1", "yes")
    if kind is int:
        return int(text.replace("_", ""))
    if kind in (float, str):
        return kind(text)
    args = typing.get_args(kind)
    if type(None) in args:  # an optional size
        return None if text.lower() == "none" else parse_value(next(a for a in args if a is not type(None)), text)
    raise ValueError(f"cannot set a size of type {kind}")


# --------------------------------------------------------------------------- what a case is given
@dataclass
class Run:
    """What a case runs with: its sizes, what --only chose, a workspace for its tables."""

    case: Case
    sizes: Any
    scale: str  # full | quick | tiny
    chosen: dict[str, list[str]]  # group of case.only -> the names chosen (all by default)
    ws: Any  # common.Workspace

    @property
    def quick(self) -> bool:
        """A reduced run (--quick or --tiny)."""
        return self.scale != "full"

    def only(self, group: str = "systems") -> list[str]:
        return list(self.chosen[group])


def choose(c: Case, names: list[str]) -> dict[str, list[str]]:
    """What --only names picks from each of c's groups: the names of that group it gives, or the
    whole group when it gives none of them."""
    return {g: ([n for n in members if n in names] or list(members)) for g, members in c.only.items()}
