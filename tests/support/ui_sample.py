"""A catalog whose table has history, tags, a branch, deletes and several partitions (the
explorer's tests, tests/ui), and helpers to read the explorer's JSON API."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pyarrow as pa

import lamina

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())])
# Rows per day of the first load: skewed on purpose (the per-partition plots show it).
DAY_ROWS = {"2026-01-01": 40, "2026-01-02": 80, "2026-01-03": 20, "2026-01-04": 10}


def _rows(first: int, day_rows: dict[str, int]) -> pa.Table:
    ids, days = [], []
    for day, n in day_rows.items():
        ids += range(first + len(ids), first + len(ids) + n)
        days += [day] * n
    return pa.table({"id": ids, "day": days, "amount": [i * 1.5 for i in ids]}, schema=SCHEMA)


def build_catalog(root: str) -> tuple[str, lamina.Table]:
    """``sqlite:///<root>/catalog.db`` with shop.orders (the table under test) and
    shop.empty (no rows), an empty namespace, and shop.orders offline."""
    uri = f"sqlite:///{root}/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("shop")
    cat.create_namespace("staging")
    t = cat.create_table("shop.orders", SCHEMA, partition_by="day")
    t.append(_rows(0, DAY_ROWS))                                   # v1
    t.append(_rows(1000, {"2026-01-01": 5, "2026-01-02": 5}))      # v2: small files
    t.tags.create("first-load", 1)
    t.append(_rows(2000, {"2026-01-03": 7, "2026-01-05": 3}))      # v3: a new partition
    t.delete("day = '2026-01-02' AND id < 60")                  # v4: DVs, 20 of the day's 85 rows
    t.tags.create("after-delete")
    t.branches.create("audit")
    t.branch("audit").append(_rows(3000, {"2026-01-06": 4}))
    t.append(_rows(4000, {"2026-01-04": 6}))                       # v5
    cat.create_table("shop.empty", SCHEMA)
    cat.close()
    return uri, lamina.load_catalog(uri).load_table("shop.orders")


def listing(root: str) -> dict[str, int]:
    """Every file under ``root`` with its size (the explorer must change none)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out



def get(url: str) -> tuple[int, dict]:
    """GET ``url``: (status, JSON body), also for an error status."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
