"""The table explorer's table page on a big history (issue 20): a table of 10,000 versions
and 100,000 data files (registered with add_files, the files themselves never written, so
any request that tried to read a data file would fail), then the page's API requests timed
cold (a new explorer, as on opening the page) and warm, and with headless chromium (if
installed) the page load until every plot is drawn.

    PYTHONPATH=. python bench/ui_bench.py [--versions 10000] [--files 100000] [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

import lamina
from lamina.ui.api import Explorer
from lamina.ui.server import route, start_server, url_of

PAGE_REQUESTS = ["", "history", "bytes", "layout", "health", "versions", "files"]  # what the table page asks for its plots
LAST_REQUEST = "expiry"  # what it asks after every plot is drawn (expire's dry run)


def build(root: str, versions: int, files: int) -> lamina.Table:
    """``versions`` commits of ``files / versions`` files each, over 30 day partitions, file
    sizes from 100 KB to 9.7 MB (a small-file problem)."""
    shutil.rmtree(root, ignore_errors=True)
    t = lamina.create_table(root, pa.schema([("id", pa.int64()), ("day", pa.string())]), partition_by=["day"])
    per = files // versions
    for v in range(versions - 1):  # the create is version 0
        i = np.arange(v * per, (v + 1) * per)
        days = [f"2026-01-{(k % 30) + 1:02d}" for k in i.tolist()]
        t.add_files(pa.table({
            "path": [f"data/day={d}/f{k:07d}.parquet" for d, k in zip(days, i.tolist())],
            "size": pa.array((i % 97 + 1) * 100_000, pa.int64()),
            "record_count": pa.array(np.full(per, 1000), pa.int64()),
            "partition.day": pa.array(days),
        }), check_files=False)
    return t


def timed(ex: Explorer, key: str) -> dict[str, float]:
    out = {}
    for what in PAGE_REQUESTS + [LAST_REQUEST]:
        t0 = time.perf_counter()
        route(ex, ["tables", key] + ([what] if what else []), {})
        out[what or "overview"] = time.perf_counter() - t0
    return out


def browser_load(url: str) -> tuple[float, float, float] | None:
    """Seconds until every plot is drawn, until the expiry preview is shown too, and (by the
    page's own clock, from navigation start) until every plot is drawn."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from support.browser import chromium_available, headless_chromium

    if not chromium_available():
        return None
    from selenium.webdriver.support.ui import WebDriverWait

    d = headless_chromium()
    try:
        d.get("about:blank")
        t0 = time.perf_counter()
        d.get(url)
        body = lambda d: d.find_element("tag name", "body")  # noqa: E731
        WebDriverWait(d, 120, poll_frequency=0.01).until(lambda d: body(d).get_attribute("data-loaded"))
        plots = time.perf_counter() - t0
        WebDriverWait(d, 120, poll_frequency=0.01).until(lambda d: body(d).get_attribute("data-expiry"))
        expiry = time.perf_counter() - t0
        page = d.execute_script("return performance.getEntriesByName('lamina-plots-drawn')[0].startTime") / 1000
        return plots, expiry, page
    finally:
        d.quit()


def api_phase(root: str) -> None:
    ex = Explorer(root)
    cpu = time.process_time()
    cold = timed(ex, ex.single_key)
    cpu = time.process_time() - cpu
    warm = timed(ex, ex.single_key)
    # CPU seconds (every thread of this process): what a busy machine's load does not inflate
    print(f"API cold: {cpu:.2f} s of CPU for all the requests")
    for name, d in (("cold (new process, new explorer)", cold), ("warm (same explorer)", warm)):
        parts = ", ".join(f"{k} {v:.2f}" for k, v in d.items())
        plots = sum(v for k, v in d.items() if k != LAST_REQUEST)
        print(f"API {name}: sum {sum(d.values()):.2f} s (the plots' requests {plots:.2f} s, then {LAST_REQUEST}), "
              f"slowest {max(d.values()):.2f} s ({parts})")


def browser_phase(root: str) -> None:
    server = start_server(Explorer(root))
    try:
        first = browser_load(url_of(server))
        again = browser_load(url_of(server))
    finally:
        server.shutdown()
    if first is not None and again is not None:
        print(f"browser (headless chromium, new process, new explorer) page load to every plot drawn: first "
              f"{first[0]:.2f} s, again {again[0]:.2f} s (by the page's clock {first[2]:.2f} s, {again[2]:.2f} s); to the "
              f"expiry preview shown too: first {first[1]:.2f} s, again {again[1]:.2f} s")
    else:
        print("browser: no headless chromium here")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--root", default="/tmp/lamina-ui-bench")
    ap.add_argument("--reuse", action="store_true", help="use the table already at --root")
    ap.add_argument("--phase", choices=["api", "browser"], help=argparse.SUPPRESS)  # run in a process of its own
    a = ap.parse_args()
    if a.phase:
        return (api_phase if a.phase == "api" else browser_phase)(a.root)
    if not a.reuse:
        t0 = time.perf_counter()
        build(a.root, a.versions, a.files)
        print(f"built {a.versions:,} versions / {a.files:,} files in {time.perf_counter() - t0:.0f} s")
    t = lamina.open_table(a.root)
    print(f"table: version {t.version}, {len(t.log.list_versions()):,} versions, {t.metadata.summary['total-files']:,} files")
    print("load average (1, 5, 15 min) before: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    for phase in ("api", "browser"):  # each in a new process: cold means no process cache (manifests, versions)
        subprocess.run([sys.executable, __file__, "--root", a.root, "--phase", phase], check=True)
    print("load average (1, 5, 15 min) after: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
