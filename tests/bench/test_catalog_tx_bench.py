"""The case catalog_tx (bench/catalog_tx_bench.py) end to end at its tiny sizes, on SQLite and PostgreSQL: both measures
run (with their read-back checks of every table), the report replaces only its own section of the
markdown file, every target gets a verdict from a ratio or a count, the racing transactions
are all acknowledged with nothing lost or torn, and the bank's transfers (1 and 4 writers, as
catalog transactions and as single-table commits) all land, with exact final balances."""

from __future__ import annotations

import re

from support.bench_cases import case_marks

pytestmark = case_marks("catalog_tx")

TITLE = "Catalog transactions (issue 18)"


def test_catalog_tx_bench_writes_its_section_with_a_verdict_per_target(bench_run, seeded_report):
    out = seeded_report(TITLE)
    run = bench_run("catalog_tx", "--tiny", "--into", str(out), timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]

    text = out.read_text()
    assert text.startswith(f"# Lamina benchmarks\n\n## Other section\n\nkept as is\n\n## {TITLE}\n")
    assert text.count(f"## {TITLE}\n") == 1 and "stale figure" not in text
    targets = re.findall(r"^- Target: (.*)$", text, re.M)
    assert len(targets) == 8, targets  # 2 latency targets, 1 race target, 1 bank target, per catalog
    for line in targets:
        assert re.search(r"\((\d+\.\d\d×|\d+/\d+ acknowledged.*|\d+/\d+ failed.*)\): \*\*(PASS|MISS)\*\*$", line), line
    verdicts = [line for line in run.stdout.splitlines() if line.startswith(("PASS ", "MISS "))]
    assert len(verdicts) == 8, run.stdout[-2000:]

    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    for catalog in ("SQLite", "PostgreSQL"):
        latency = {r[1]: r for r in rows if r[0] == catalog and r[1].endswith(("append", "transaction"))}
        assert set(latency) == {"single-table append", "2-table transaction", "10-table transaction"}
        for call in ("2-table transaction", "10-table transaction"):
            assert latency[call][5].endswith("×") and latency[call][6].split(": ")[1] in ("PASS", "MISS")
        race = next(r for r in rows if r[0] == catalog and "/" in r[1])
        assert race[1:6] == ["6 / 6", "0", "0", "0", "0"]  # acknowledged, failed, lost, torn, duplicated
        assert "one version per acknowledged transaction" in race[9] and race[10].endswith("PASS")
        assert f"{catalog}: every table's rows checked after the run" in text
        bank = {(r[1], r[2]): r for r in rows if r[0] == catalog and r[2] in ("catalog transaction", "2 single-table commits")}
        assert set(bank) == {(w, how) for w in ("1", "4") for how in ("catalog transaction", "2 single-table commits")}
        for (writers, how), r in bank.items():
            sent = 2 * int(writers)
            assert r[3:5] == [f"{sent} / {sent}", "0 (0.0%)"] and r[8] == "exact", r  # acknowledged, failed, balances
            assert float(r[5]) > 0  # transfers/s
        assert bank[("4", "catalog transaction")][9] == "≤ 1% failed: PASS"
    assert "Where the time goes, SQLite" in text and "Where the time goes, PostgreSQL" in text
