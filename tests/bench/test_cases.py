"""Every registered case of bench/run.py runs at its tiny sizes, as a user runs it, and writes its
sections into an existing report: in place of its stale one, keeping the other sections and the
note added by hand, each section naming the command that made it and saying the run was reduced;
its raw numbers land in bench/out (here the test's). And every section of the repository's
BENCHMARKS.md is one a registered case writes, naming `bench/run.py <case>`, the command that
makes it again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.bench_cases import CASES, case_marks

REPO = Path(__file__).resolve().parents[2]


def sections(text: str) -> dict[str, str]:
    """heading -> body of every ``## `` section."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("name", [pytest.param(n, marks=case_marks(n), id=n) for n in CASES])
def test_a_case_at_its_tiny_sizes_writes_its_sections_with_the_command_that_made_them(
        name, bench_run, bench_out, seeded_report, hand_note):
    c = CASES[name]
    missing = c.missing()
    if missing:
        pytest.skip(f"case {name} cannot run here: {'; '.join(missing)}")
    path = seeded_report(c.title)
    args = [name, "--tiny", "--into", str(path)]
    got = bench_run(*args, timeout=900)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]

    text = path.read_text()
    assert text.startswith("# Lamina benchmarks\n\n## Other section\n\nkept as is\n\n## ")
    assert "stale figure" not in text and text.count(hand_note) == 1
    written = {h: body for h, body in sections(text).items() if h != "Other section"}
    assert hand_note in next(iter(written.values()))  # the section written in the stale one's place
    command = f"bench/run.py {' '.join(args)}` (from the repository root"
    for heading, body in written.items():
        assert body.count("- Command: `") == 1 and command in body, (heading, body[:600])
        assert "— **TINY run: reduced sizes, figures not meaningful**" in body, heading
        for verdict in re.findall(r"^- Target: .*: \*\*(.*)\*\*$", body, re.M):
            assert verdict in ("PASS", "MISS", "n/a"), heading
    raw = json.loads((bench_out / f"{name}_results.json").read_text())
    assert raw["case"] == name and raw["scale"] == "tiny" and raw["command"].endswith(f"bench/run.py {' '.join(args)}")
    assert set(raw["reports"]) == set(written)


def test_every_section_of_benchmarks_md_is_a_cases_and_names_the_command_that_makes_it():
    by_title = {c.title: name for name, c in CASES.items()}
    heads = sections((REPO / "BENCHMARKS.md").read_text())
    assert set(heads) == set(by_title), "sections without a case, or cases without a section"
    for heading, body in heads.items():
        makers = [by_title[heading]] + [name for name, c in CASES.items() if heading in c.also]
        assert any(f"bench/run.py {m}`" in body or f"bench/run.py {m} " in body for m in makers), (heading, makers)
