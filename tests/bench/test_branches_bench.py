"""The case branches (bench/branches_bench.py) end to end at its tiny sizes: every measure runs (its checks of the rows
and of each publish's mode included), the report replaces only its own section of the markdown file,
and every target gets a verdict from a ratio."""

from __future__ import annotations

import re
import shutil

from support.bench_cases import case_marks

pytestmark = case_marks("branches")

TITLE = "Branches and write-audit-publish (issue 17)"


def test_branches_bench_writes_its_section_with_a_verdict_per_target(bench_run, seeded_report):
    out = seeded_report(TITLE)
    run = bench_run("branches", "--tiny", "--into", str(out), timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]

    text = out.read_text()
    assert text.startswith(f"# Lamina benchmarks\n\n## Other section\n\nkept as is\n\n## {TITLE}\n")
    assert text.count(f"## {TITLE}\n") == 1 and "stale figure" not in text
    targets = re.findall(r"^- Target: (.*)$", text, re.M)
    assert len(targets) == 4, targets
    for line in targets:  # each names its ratio and a verdict
        assert re.search(r"\(\d+\.\d\d×\): \*\*(PASS|MISS)\*\*$", line), line
    assert "a fast-forward in every iteration: {'fast-forward': 4}" in text
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ")}
    for label in ("`t.branches.create(name)`", "`t.branches.publish(name)`, fast-forward"):
        assert rows[label][1] == "4" and rows[label][6].endswith("×") and rows[label][8].split(": ")[1] in ("PASS", "MISS")
    assert rows["`t.branches.publish(name)`, rebase over 3 commits"][1] == "1"
    assert rows["lamina"][1] == rows["lance"][1] == "2"  # branches made per system against Lance
    where = rows["`create_tag`"]
    assert int(where[3].split(" ")[0]) > 0  # FileIO calls traced
    if shutil.which("strace"):
        assert "create" in where[2]  # a tag creates its file
