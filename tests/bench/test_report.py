"""bench/report.py and bench/registry.py without running a benchmark: a section rendered in the
one format, a report file whose other sections (and hand notes) survive a run writing into it,
and the runner's sizes, --only and usage errors."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import registry  # noqa: E402
import report  # noqa: E402
from report import Report, RunInfo, Section, Target  # noqa: E402


def run_info(**kw) -> RunInfo:
    return RunInfo(**{"command": ".venv/bin/python bench/run.py x", "started": 0.0, "elapsed": 90.0,
                      "versions": {"lamina": "0.1.0"}, "revision": "abc1234", "machine": "2 vCPU", "load": (1.0, 2.0),
                      **kw})


def a_report(title: str = "X (issue 1)", **kw) -> Report:
    sec = Section(key="k", title="Part one", what="What is timed.", columns=["system", "p50"],
                  rows=[["lamina", "1 ms"], ["a|b", "2 ms"]], notes=["a note", "- a listed note", "Lead-in:"])
    fields = {"intro": "Intro.", "facts": ["A fact."], "sections": [sec], "notes": ["Closing note."], "run": run_info(),
              "targets": [Target("p50 ≤ 1 ms", True, "1.00×"), Target("no figure", None)]}
    return Report(title=title, **{**fields, **kw})


def test_a_report_renders_every_part_in_the_one_format():
    text = report.render(a_report())
    assert text == "\n".join([
        "## X (issue 1)", "", "Intro.", "",
        "- Command: `.venv/bin/python bench/run.py x` (from the repository root)",
        "- Run: 1970-01-01 00:00 UTC, took 1.5 min",
        "- Versions: lamina 0.1.0; Lamina code at git abc1234",
        "- Machine: 2 vCPU; shared, so absolute times drift — quote the ratios from this run.",
        "- 1-min load average 1.0 before, 2.0 after.",
        "- A fact.",
        "- Target: p50 ≤ 1 ms (1.00×): **PASS**",
        "- Target: no figure: **n/a**", "",
        "### Part one", "", "What is timed.", "",
        "| system | p50 |", "|---|---|", "| lamina | 1 ms |", "| a\\|b | 2 ms |", "",
        "- a note", "- a listed note", "Lead-in:", "",
        "- Closing note.", "",
    ])


def test_a_reduced_or_resized_run_says_so_on_its_run_line():
    assert "— **TINY run: reduced sizes, figures not meaningful**" in report.render(a_report(run=run_info(scale="tiny")))
    text = report.render(a_report(run=run_info(changed={"rows": 10}), revision="a vs b"))
    assert "took 1.5 min — sizes set: rows=10\n" in text and "Lamina code at git a vs b\n" in text


def test_writing_into_a_file_replaces_only_the_section_and_keeps_its_hand_notes(tmp_path, hand_note):
    path = tmp_path / "B.md"
    path.write_text("# Lamina benchmarks\n\nhead\n\n## Other\n\nkept as is\n\n## X (issue 1)\n\n- Command: `old`\n"
                    f"- stale figure\n{hand_note}\n\n## Last\n\nalso kept\n")
    report.write_into(path, [a_report()])
    text = path.read_text()
    assert text.startswith("# Lamina benchmarks\n\nhead\n\n## Other\n\nkept as is\n\n## X (issue 1)\n")
    assert text.endswith(f"- Closing note.\n{hand_note}\n\n## Last\n\nalso kept\n")
    assert "stale figure" not in text and "`old`" not in text and text.count("## X (issue 1)") == 1
    report.write_into(path, [a_report()])  # again: the hand note is carried once, not twice
    assert path.read_text() == text


def test_a_section_is_found_by_a_former_title_or_its_heading_prefix_and_appended_if_absent(tmp_path):
    path = tmp_path / "B.md"
    path.write_text("# Lamina benchmarks\n\n## Old name\n\nold\n\n## 5. Writers (16 × 50)\n\nold too\n")
    report.write_into(path, [a_report(replaces=("Old name",)), a_report("5. Writers (2 × 3)", match="5. Writers"),
                             a_report("New (issue 9)")])
    heads = [line for line in path.read_text().splitlines() if line.startswith("## ")]
    assert heads == ["## X (issue 1)", "## 5. Writers (2 × 3)", "## New (issue 9)"]
    assert "\nold\n" not in path.read_text() and "old too" not in path.read_text()
    fresh = tmp_path / "new" / "C.md"
    report.write_into(fresh, [a_report()])
    assert fresh.read_text().startswith(report.PREAMBLE + "\n## X (issue 1)\n")


titles = st.lists(st.text(st.characters(min_codepoint=65, max_codepoint=90), min_size=1, max_size=6), min_size=1,
                  max_size=6, unique=True)


@settings(deadline=None)  # string work only, but the shared 2-core host can stall any example
@given(titles, st.data())
def test_replacing_one_section_leaves_every_other_one_byte_for_byte(names, data):
    bodies = {n: data.draw(st.text(st.sampled_from("ab |\n-#"), max_size=40).map(lambda t: t.replace("\n#", "\n"))
                           .filter(lambda t: "## " not in t)) for n in names}
    text = "# Lamina benchmarks\n\n" + "".join(f"## {n}\n\n{bodies[n]}\n\n" for n in names)
    target = data.draw(st.sampled_from(names))
    got = report.replace_section(text, a_report(target))
    for n in names:
        if n != target:
            assert f"## {n}\n\n{bodies[n]}\n\n" in got
    assert got.count(f"## {target}\n") == 1 and report.render(a_report(target)) in got


# --------------------------------------------------------------------------- registry and runner
@dataclass
class Sizes:
    rows: int = 100
    names: tuple[str, ...] = ("a", "b")
    ratio: float = 0.5
    on: bool = True
    profile: bool = False


def test_sizes_come_from_the_presets_and_the_command_line_parsed_by_their_types():
    c = registry.Case("c", lambda run: None, "C", Sizes, quick={"rows": 10}, tiny={"ratio": 0.1})
    assert c.make_sizes("full", {}) == (Sizes(), {})
    assert c.make_sizes("tiny", {})[0] == Sizes(rows=10, ratio=0.1)  # tiny starts from quick
    sizes, changed = c.make_sizes("quick", {"names": "x, y", "on": "false", "ratio": "2"}, profile=True)
    assert sizes == Sizes(rows=10, names=("x", "y"), ratio=2.0, on=False, profile=True)
    assert changed == {"names": ("x", "y"), "on": False, "ratio": 2.0}
    with pytest.raises(ValueError):
        c.make_sizes("full", {"on": "maybe"})
    with pytest.raises(ValueError):
        c.make_sizes("full", {"profile": "true"})  # that is --profile's
    assert c.profiles and not registry.Case("d", lambda run: None, "D", registry.NoSizes).profiles


def test_only_narrows_the_groups_it_names_and_leaves_the_others_whole():
    c = registry.Case("c", lambda run: None, "C", only={"systems": ("lamina", "lance", "deltalake"),
                                                       "parts": ("read", "write")})
    assert registry.choose(c, ["deltalake", "lamina"]) == {"systems": ["lamina", "deltalake"], "parts": ["read", "write"]}
    assert registry.choose(c, []) == {"systems": ["lamina", "lance", "deltalake"], "parts": ["read", "write"]}


def test_a_case_with_a_missing_need_says_which():
    c = registry.Case("c", lambda run: None, "C", needs=(registry.module("no_such_module_here"),
                                                          registry.program("no-such-program-here"),
                                                          registry.module("json")))
    assert c.missing() == ["Python module(s) no_such_module_here not found",
                           "program(s) no-such-program-here on PATH not found"]

    def jars_absent() -> bool:
        raise registry.Absent("the jars are not in /nowhere (`make jars` fetches them)")

    told = registry.Case("c", lambda run: None, "C", needs=(registry.check("jars", jars_absent),))
    assert told.missing() == ["the jars are not in /nowhere (`make jars` fetches them)"]


def test_a_case_is_in_the_tiers_of_its_needs_and_in_bench_heavy_when_registered_heavy():
    from support.bench_cases import CASES, case_marks

    needs = (registry.module("pyspark"), registry.module("moto", "boto3"), registry.program("java"))
    assert registry.Case("c", lambda run: None, "C", needs=needs).tiers == {"spark", "s3"}
    assert registry.Case("c", lambda run: None, "C", needs=needs, heavy=True).tiers == {"spark", "s3", "bench_heavy"}
    heavy = {n for n, c in CASES.items() if c.heavy}
    assert heavy and heavy != set(CASES)  # make test keeps some cases and leaves some to make test-bench
    for name in CASES:
        marks = {m.name for m in case_marks(name)}
        assert ("bench_heavy" in marks) == (name in heavy) and "slow" in marks, name


@pytest.mark.slow  # runs the bench runner in processes
def test_the_runner_lists_every_case_and_refuses_what_no_case_has(tmp_path, bench_run):
    listed = bench_run("--list")
    assert listed.returncode == 0, listed.stderr
    cases = registry.discover()
    assert {"append", "open", "plan", "plan1m", "concurrent", "revisions"} <= set(cases)
    for name, c in cases.items():
        assert f"\n{name}" in "\n" + listed.stdout and f"section: ## {c.title}" in listed.stdout
    assert sorted(n for n, c in cases.items() if c.default) == ["append", "concurrent", "open", "plan", "plan1m"]
    for args, why in ((["nope"], "unknown case"), (["plan1m", "--set", "rows=1"], "no size of that name"),
                      (["plan1m", "--only", "lance"], "not a system"), (["plan1m", "--profile"], "profile nothing"),
                      (["wide", "--set", "files=x"], "wide:"), (["ui", "--reps", "2"], "no repetitions")):
        got = bench_run(*args, "--out", str(tmp_path / "never.md"))
        assert got.returncode == 2 and why in got.stderr, (args, got.stderr)
    assert not (tmp_path / "never.md").exists()
