"""Cold plan probe: run in a fresh interpreter so no in-process cache (manifest
caches, object caches) survives from the build or from earlier plans.

    python bench/probe.py SYSTEM ROOT WARM_ROOT [LO HI]

WARM_ROOT is a tiny table of the same system: it is opened and planned first,
untimed, so one-time library costs (imports, async runtimes, query-engine
initialisation, catalog engine) are not charged to the measured table. Then
ROOT is opened and planned once, both timed.

Prints one JSON line: {"open_s": ..., "plan_s": ..., "files": ...}.
The OS page cache is warm (the tables were just written).
"""

from __future__ import annotations

import json
import sys
import time

import common  # noqa: F401  (sys.path for lamina)
import systems


def main(argv):
    name, root, warm_root = argv[0], argv[1], argv[2]
    lo = int(argv[3]) if len(argv) > 3 else None
    hi = int(argv[4]) if len(argv) > 4 else None
    s = systems.get(name)
    s.plan(s.open(warm_root), lo, hi)
    if name == "pyiceberg":
        s.catalog(root)  # constructing the catalog (SQLAlchemy engine) is not "open"
    t0 = time.perf_counter()
    h = s.open(root)
    t1 = time.perf_counter()
    n = s.plan(h, lo, hi)
    t2 = time.perf_counter()
    print(json.dumps({"open_s": t1 - t0, "plan_s": t2 - t1, "files": n}))


if __name__ == "__main__":
    main(sys.argv[1:])
