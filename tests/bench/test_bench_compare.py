"""The case revisions (bench/compare_revisions.py), end to end at its tiny sizes: each revision's worker imports the
lamina package of its own checkout (bench/common.py puts this repository first on sys.path, so
without care both workers would run this repository's code and the comparison would be A/A),
and the report replaces its own section of the markdown file (or the one of its former title),
leaving the others as they are. The plan and Spark measures run at smoke-test sizes."""

from __future__ import annotations

import shutil
from pathlib import Path

from support.bench_cases import case_marks

pytestmark = case_marks("revisions")

REPO = Path(__file__).resolve().parents[2]
TITLE = "## Lamina against the baseline revision: append, open, plan, Spark write"
FORMER_TITLE = "Append and open latency against the baseline revision"


def test_compare_revisions_imports_each_checkout_and_replaces_only_its_section(tmp_path, bench_run, seeded_report):
    baseline = tmp_path / "baseline"  # a checkout of its own: a copy of this repository's package
    shutil.copytree(REPO / "lamina", baseline / "lamina", ignore=shutil.ignore_patterns("__pycache__"))
    out = seeded_report(FORMER_TITLE)
    run = bench_run("revisions", "--tiny", "--set", f"baseline={baseline}", "--into", str(out), timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]

    text = out.read_text()
    assert text.startswith("# Lamina benchmarks\n\n## Other section\n\nkept as is\n\n" + TITLE)
    assert text.count(TITLE) == 1 and "stale figure" not in text and FORMER_TITLE not in text
    section = text.split(TITLE, 1)[1]
    assert f"Lamina imported from baseline `{baseline / 'lamina'}`, candidate `{REPO / 'lamina'}`" in section
    assert "Append tables reached version baseline [10], candidate [10]" in section
    assert "every plan of both revisions returned 300 files (all) and 3 (1%) (checked)" in section
    assert "each warm-up write's table was checked (20,000 rows)" in section
    for figure, samples in (
        ("| append: all commits 1–10 |", "10"), ("| open: latest of 10 versions |", "5"),
        ("| plan all 300 files: open+plan, fresh process |", "1"),
        ("| plan 1% (3 of 300 files): open+plan, fresh process |", "1"),
        ("| Spark write: `lamina.spark.write` of 20,000 rows into a new table |", "1"),
    ):
        row = next(line for line in section.splitlines() if line.startswith(figure))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == samples  # per revision
        assert cells[4].endswith("×") and float(cells[4][:-1]) > 0  # candidate / baseline
        assert cells[6].split(" (")[0] in ("PASS", "MISS")  # a judged figure
