"""The report model of every benchmark and its one writer.

A case (bench/registry.py) returns one or more :class:`Report`: one ``## title`` section of
BENCHMARKS.md each, made of what the case measured (``intro``, ``facts``, ``targets``,
``body``, ``sections``: the ``###`` tables, ``notes``). The runner (bench/run.py) adds how
the figures were made (:class:`RunInfo`: the command, when, how long, the versions, the
machine, the load) and hands the reports to :func:`write_into` or :func:`write_new`, which
render every section the same way::

    ## <title>

    <intro>

    - Command: `<the command line>` (from the repository root)
    - Run: <date>, took <n> min
    - Versions: <library versions>; Lamina code at git <revision>
    - Machine: <CPU, RAM, kernel, Python>; shared, so absolute times drift — ...
    - 1-min load average <before> before, <after> after.
    - <facts>
    - Target: <what> (<figure>): **PASS** | **MISS** | **n/a**

    <body>

    ### <section title>

    <what is timed>

    | table |

    - <section notes>

    - <notes>

Writing into an existing file replaces each report's section (matched by its title, by a
stable heading prefix, or by a former title) and leaves every other section as it is. Notes
added to a section by hand survive the rewrite: a list item holding ``(added by hand`` (for
example ``- Note (added by hand): ...``) is carried to the end of the new section.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

HAND_MARK = "(added by hand"

PREAMBLE = """# Lamina benchmarks

Lamina side by side with deltalake, lance and pyiceberg, on the same data. Every section is
written by `bench/run.py`, and names the command that reproduces it (`make bench` runs the
default cases); a run replaces only its own sections, keeping the notes marked "(added by
hand)". `bench/run.py --help` says how a case is run, bench/registry.py how one is written.

- **Machine note:** 2 cores, shared with other work on the host. Absolute times drift between runs by tens of percent; quote the *ratios* between systems measured in the same run, not the absolute figures.
- Ratio columns are *peer figure / Lamina figure* for times (>1: Lamina is faster), and *peer / Lamina* for throughput (commits/s, >1: peer is faster), unless a section says otherwise. Targets are Lamina's (from the issues); peers have none.
- Every table lives in a fresh temp dir under /tmp on the local disk, removed afterwards, unless a section says otherwise.
"""


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


@dataclass
class Section:
    """One ``###`` part of a report: what is timed, a table, notes. With an empty title it has
    no heading; without columns, no table."""

    key: str
    title: str
    what: str  # markdown: exactly what is timed
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict)

    def error_row(self, name: str, text: str) -> None:
        """A row that says only why the system has no figures."""
        self.rows.append([name, text] + [""] * (len(self.columns) - 2))


@dataclass
class Target:
    """A target and its verdict; figure: the measured ratio or count it was judged on."""

    what: str
    ok: bool | None
    figure: str = ""

    @property
    def verdict(self) -> str:
        return verdict(self.ok)

    def text(self) -> str:
        return self.what + (f" ({self.figure})" if self.figure else "")


@dataclass
class RunInfo:
    """How a report's figures were made (filled in by the runner)."""

    command: str
    started: float  # time.time()
    elapsed: float  # seconds
    versions: dict[str, str]
    revision: str
    machine: str
    load: tuple[float | None, float | None]
    scale: str = "full"  # full | quick | tiny
    changed: dict = field(default_factory=dict)  # sizes set on the command line (--set, --reps)
    elsewhere: str = ""  # the checkout that ran it, when the file written is not that checkout's


@dataclass
class Report:
    """One ``## title`` section of BENCHMARKS.md."""

    title: str
    intro: str = ""  # paragraphs under the title
    facts: list[str] = field(default_factory=list)  # list items after the run's own lines
    targets: list[Target] = field(default_factory=list)
    body: str = ""  # markdown between the header list and the sections
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)  # more versions than the case names
    revision: str | None = None  # instead of this checkout's git revision (e.g. two revisions compared)
    match: str | None = None  # a heading prefix that finds the section whatever its sizes
    replaces: tuple[str, ...] = ()  # former titles of the section
    raw: dict = field(default_factory=dict)  # raw numbers for bench/out
    run: RunInfo | None = None


def report_of(sec: Section, **fields) -> Report:
    """A report of one table without a heading of its own: titled as sec was, holding sec's raw numbers."""
    return Report(title=sec.title, sections=[dataclasses.replace(sec, title="")], raw=sec.raw, **fields)


# --------------------------------------------------------------------------- markdown
def md_table(sec: Section) -> str:
    def esc(x: str) -> str:
        return x.replace("|", "\\|")

    lines = ["| " + " | ".join(sec.columns) + " |", "|" + "---|" * len(sec.columns)]
    for r in sec.rows:
        lines.append("| " + " | ".join(esc(x) for x in r) + " |")
    return "\n".join(lines)


def md_notes(notes: list[str]) -> list[str]:
    """Notes as markdown list items (one that already is, or a lead-in ending with ':', stays as it is)."""
    return [n if n.startswith("- ") or n.endswith(":") else f"- {n}" for n in notes]


def section_lines(sec: Section) -> list[str]:
    lines = [f"### {sec.title}", ""] if sec.title else []
    if sec.what:
        lines += [sec.what, ""]
    if sec.columns:
        lines += [md_table(sec), ""]
    if sec.notes:
        lines += [*md_notes(sec.notes), ""]
    return lines


def run_lines(run: RunInfo, revision: str | None) -> list[str]:
    when = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(run.started))
    scale = ""
    if run.scale != "full":
        scale = f" — **{run.scale.upper()} run: reduced sizes, figures not meaningful**"
    elif run.changed:
        scale = " — sizes set: " + ", ".join(f"{k}={v}" for k, v in run.changed.items())
    where = f"; run in the checkout at `{run.elsewhere}`, at the commit below" if run.elsewhere else ""
    return [
        f"- Command: `{run.command}` (from the repository root{where})",
        f"- Run: {when}, took {run.elapsed / 60:.1f} min{scale}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in run.versions.items())
        + f"; Lamina code at git {revision or run.revision}",
        f"- Machine: {run.machine}; shared, so absolute times drift — quote the ratios from this run.",
        f"- 1-min load average {run.load[0]} before, {run.load[1]} after.",
    ]


def render(rep: Report) -> str:
    """The report's section, from its ``## title`` to its last line (one newline at the end)."""
    lines = [f"## {rep.title}", ""]
    if rep.intro:
        lines += [rep.intro, ""]
    head = run_lines(rep.run, rep.revision) if rep.run else []
    head += md_notes(rep.facts)
    head += [f"- Target: {t.text()}: **{t.verdict}**" for t in rep.targets]
    if head:
        lines += [*head, ""]
    if rep.body:
        lines += [rep.body, ""]
    for sec in rep.sections:
        lines += section_lines(sec)
    if rep.notes:
        lines += [*md_notes(rep.notes), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- sections of a file
def _sections(text: str) -> list[tuple[int, int, str]]:
    """(start, end, heading) of every ``## `` section of text."""
    heads = [(m.start(), m.group(1)) for m in re.finditer(r"^## (.*)$", text, re.M)]
    return [(s, heads[i + 1][0] if i + 1 < len(heads) else len(text), h) for i, (s, h) in enumerate(heads)]


def find_section(text: str, rep: Report) -> tuple[int, int] | None:
    """Where rep's section is in text: by its title, then a former title, then its heading prefix."""
    secs = _sections(text)
    for wanted in (rep.title, *rep.replaces):
        hit = next(((s, e) for s, e, h in secs if h.strip() == wanted), None)
        if hit:
            return hit
    if rep.match:
        return next(((s, e) for s, e, h in secs if h.startswith(rep.match)), None)
    return None


def hand_notes(section: str) -> list[str]:
    """The list items of a section that say they were added by hand (with their continuation lines)."""
    items: list[list[str]] = []
    item: list[str] | None = None
    for line in section.splitlines():
        if line.startswith("- "):
            item = [line] if HAND_MARK in line else None
            if item is not None:
                items.append(item)
        elif item is not None and line.startswith("  ") and line.strip():
            item.append(line)
        else:
            item = None
    return ["\n".join(x) for x in items]


def replace_section(text: str, rep: Report) -> str:
    """text with rep's section rendered in place of its old one (or appended), hand notes kept."""
    block = render(rep)
    where = find_section(text, rep)
    if where is None:
        return text.rstrip("\n") + "\n\n" + block
    start, end = where
    kept = [n for n in hand_notes(text[start:end]) if n not in block]
    if kept:
        block = block.rstrip("\n") + "\n" + "\n".join(kept) + "\n"
    return text[:start] + block + ("\n" if end < len(text) else "") + text[end:]


def write_into(path: Path, reports: list[Report]) -> None:
    """Replace each report's section of the markdown file at path (created if absent), leaving the
    rest of the file as it is."""
    text = path.read_text() if path.exists() else PREAMBLE
    for rep in reports:
        text = replace_section(text, rep)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")


def write_new(path: Path) -> None:
    """A new report file holding only the preamble (the runs that follow write into it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PREAMBLE)


# --------------------------------------------------------------------------- the console
def print_console(reports: list[Report]) -> None:
    """Every table of the reports (rich), then a line per target: PASS / MISS / n/a and what."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=200)
    for rep in reports:
        for sec in rep.sections:
            if not sec.columns:
                continue
            t = Table(title=sec.title or rep.title, show_lines=False, title_justify="left")
            for c in sec.columns:
                t.add_column(c, overflow="fold")
            for r in sec.rows:
                t.add_row(*[(f"[green]{x}[/]" if "PASS" in x and "MISS" not in x
                             else f"[red]{x}[/]" if ("MISS" in x or x.startswith("error")) else x) for x in r])
            con.print(t)
            for n in sec.notes:
                con.print(f"  {n}", markup=False, highlight=False)
            con.print()
    for rep in reports:
        for t in rep.targets:
            print(f"{t.verdict} {rep.title}: {t.text()}", flush=True)
