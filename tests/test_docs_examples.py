"""The guide's Python examples run against the code: every ```python block of the README and of
the docs pages below, in a fresh directory, after a setup that makes the tables and names the
page assumes (``events``, ``batch``, ...). A block that needs what this suite does not start
for it (a remote server, Spark, another format's tables) says so on the line before its fence,
``<!-- not run by tests/test_docs_examples.py: <why> -->``, and is left out (a page with no
other block has no run here); every other block runs, so an example the code no
longer accepts fails here.

Pages run their blocks in order in one namespace, as a reader follows them, except those in
``FRESH``, whose blocks are alternatives on the same table: each gets the setup anew.
"""

from __future__ import annotations

import re
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = re.compile(r"<!-- not run by tests/test_docs_examples\.py: (.+?) -->\n```python\n")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

COMMON = """
import pyarrow as pa, pyarrow.parquet as pq, lamina
from datetime import date, datetime, timedelta, timezone

def at(day, hour=0):
    return datetime(2026, 1, day, hour, tzinfo=timezone.utc)
"""

# warehouse/events: 14 appends (versions 1..14), a column of each kind the pages use.
EVENTS = """
ev_schema = pa.schema([("id", pa.int64()), ("category", pa.string()), ("ts", pa.timestamp("us", "UTC")),
                       ("day", pa.date32()), ("amount", pa.float32()), ("legacy", pa.string()),
                       ("address", pa.struct([("city", pa.string())]))])

def events(n, first=0, day=5):
    return pa.table({"id": list(range(first, first + n)), "category": [["a", "b", "void"][i % 3] for i in range(n)],
                     "ts": [at(day, i % 24) for i in range(n)], "day": [date(2026, 1, day)] * n,
                     "amount": pa.array([float(i) - 1 for i in range(n)], pa.float32()), "legacy": ["x"] * n,
                     "address": [{"city": "Lyon"}] * n}, schema=ev_schema)

t = lamina.create_table("warehouse/events", ev_schema, partition_by=["day(ts)", "bucket(16, id)"])
for v in range(14):
    t.append(events(20, first=20 * v, day=1 + v))
"""

ORDERS = """
or_schema = pa.schema([("order_id", pa.int64()), ("status", pa.string()), ("day", pa.date32()),
                       ("amount", pa.float64()), ("note", pa.string()), ("ts", pa.timestamp("us", "UTC")),
                       ("country", pa.string())])

def orders(ids, status="open", day=5):
    return pa.table({"order_id": ids, "status": [status] * len(ids), "day": [date(2025, 12, 31)] * len(ids),
                     "amount": [10.0] * len(ids), "note": [None] * len(ids), "ts": [at(day)] * len(ids),
                     "country": ["FR"] * len(ids)}, schema=or_schema)

t = lamina.create_table("warehouse/orders", or_schema)
for v in range(8):
    t.append(orders(list(range(10 * v, 10 * v + 10)), status=["open", "cancelled", "stale"][v % 3]))
t.tags.create("nightly", version=3)
changes = orders([1, 2, 95], status="cancelled", day=6)
"""

CATALOG = """
cat = lamina.load_catalog("sqlite:///warehouse/catalog.db")
for ns in ("shop", "bank", "sales"):
    cat.create_namespace(ns)
day_schema = pa.schema([("day", pa.string()), ("amount", pa.float64())])
day = pa.table({"day": ["2026-01-05"], "amount": [3.0]}, schema=day_schema)
for name in ("shop.orders", "shop.staging", "shop.scratch"):
    cat.create_table(name, day_schema).append(day)
summary = pa.table({"day": ["2026-01-05"], "orders": [1], "revenue": [3.0]})
cat.create_table("shop.daily", summary.schema)
audit_schema = pa.schema([("check", pa.string()), ("ok", pa.bool_())])
audit_rows = pa.table({"check": ["no negative amount"], "ok": [True]}, schema=audit_schema)
accounts = pa.table({"acct": pa.array([3, 7], pa.int64()), "bal": pa.array([10, 10], pa.int64())})
cat.create_table("bank.a", accounts.schema).append(accounts)
cat.create_table("bank.b", accounts.schema).append(accounts)
"""

SETUP = {
    "README.md": "",
    "docs/getting-started.md": "",
    "docs/writing.md": """
batch = pa.table({"id": [1, 2, 3], "category": ["a", "void", "b"], "ts": [at(3), at(4), at(5)]},
                 schema=pa.schema([("id", pa.int64()), ("category", pa.string()), ("ts", pa.timestamp("us", "UTC"))]))
day_fixed = batch.slice(0, 1)
everything = batch
import os
os.makedirs("warehouse/events/data/day=2026-01-05")
for i in range(2):  # the files add_files registers: one row each, so one partition each
    pq.write_table(batch.slice(2, 1), f"warehouse/events/data/day=2026-01-05/part-{i}.parquet")
""",
    "docs/configuration.md": """
schema = pa.schema([("id", pa.int64()), ("category", pa.string()), ("ts", pa.timestamp("us", "UTC"))])
""",
    "docs/reading.md": EVENTS + """
t.tags.create("eod-2026-01-05", version=5)
t.branches.create("audit")
""",  # on the clock of CLOCK_STARTS: the page reads by a time of early 2026
    "docs/row-level.md": ORDERS,
    "docs/schema.md": EVENTS + """
batch_with_new_columns = events(3, first=1000).append_column("extra", pa.array(["e"] * 3))
reshaped = pa.table({"id": [1], "event_time": [at(9)], "name": ["n"]})  # keeps the partition sources
""",
    "docs/tags.md": EVENTS,
    "docs/branches.md": """
sales_schema = pa.schema([("id", pa.int64()), ("amount", pa.float64())])
lamina.create_table("lake/sales", sales_schema).append(pa.table({"id": [1], "amount": [5.0]}, schema=sales_schema))
day = pa.table({"id": [2, 3], "amount": [7.0, 8.0]}, schema=sales_schema)
""",
    "docs/maintenance.md": EVENTS,
    "docs/catalog.md": CATALOG,
    "docs/engines.md": EVENTS + """
t.tags.create("nightly")
cat = lamina.load_catalog("sqlite:///cat.db")
cat.create_namespace("sales")
cat.create_table("sales.orders", pa.schema([("oid", pa.int64()), ("cid", pa.int64())])).append(
    pa.table({"oid": [1, 2], "cid": [7, 8]}))
cat.create_table("sales.customers", pa.schema([("cid", pa.int64()), ("name", pa.string())])).append(
    pa.table({"cid": [7], "name": ["Ada"]}))
""",
    "docs/iceberg.md": """
schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])
rows = pa.table({"id": [1, 2], "ts": [at(1), at(2)]}, schema=schema)
cat = lamina.load_catalog(f"sqlite:///{LAKE}/catalog.db")
cat.create_namespace("shop")
cat.create_table("shop.orders", schema, properties={"iceberg.enabled": "true"}).append(rows)
""",
    "docs/expressions.md": """
ex_schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("event_date", pa.date32()), ("country", pa.string()),
                       ("qty", pa.int32()), ("amount", pa.float64()), ("status", pa.string()),
                       ("payload", pa.struct([("user", pa.struct([("id", pa.int64())]))])),
                       ("ts", pa.timestamp("us", "UTC"))])
today = datetime.now(timezone.utc).date()
rows = pa.table({"id": list(range(40)), "s": [f"x{i}" for i in range(40)],
                 "event_date": [today - timedelta(days=5 * i) for i in range(40)],
                 "country": [["FR", "de", "it"][i % 3] for i in range(40)], "qty": list(range(0, 80, 2)),
                 "amount": [50.0 * i for i in range(40)], "status": ["open"] * 40,
                 "payload": [{"user": {"id": i % 10}} for i in range(40)], "ts": [at(1)] * 40}, schema=ex_schema)
t = lamina.create_table("warehouse/expressions", ex_schema)
t.append(rows)
src = rows.slice(0, 3).set_column(8, "ts", pa.array([at(2)] * 3, pa.timestamp("us", "UTC")))
""",
    "docs/convert.md": "",
    "docs/storage.md": "",
    "docs/spark.md": "",
}
FRESH = {"docs/reading.md", "docs/row-level.md", "docs/schema.md"}
# Pages whose examples read by a commit time: their tables are made on a clock that starts
# then and moves an hour per call, so the times the page names fall within their history.
CLOCK_STARTS = {"docs/reading.md": datetime(2026, 1, 1, tzinfo=timezone.utc)}


class _Clock:
    """The ``time`` module, but for ``time()``: ``start``, then an hour later on each call."""

    def __init__(self, start: datetime) -> None:
        self._next = start.timestamp()

    def time(self) -> float:
        self._next += 3600
        return self._next - 3600

    def __getattr__(self, name: str):
        return getattr(time, name)


def _blocks(page: str) -> tuple[list[str], list[str]]:
    """The page's blocks to run, and why each of the others is not run."""
    text = (ROOT / page).read_text()
    skipped = NOT_RUN.findall(text)
    run = BLOCK.findall(NOT_RUN.sub("```text\n", text))
    return run, skipped


def _absolute(code: str, lake: Path) -> str:
    """The pages' absolute example locations (``/lake/...``) under the test's directory."""
    return code.replace("sqlite:////lake/", f"sqlite:///{lake}/").replace('"/lake/', f'"{lake}/')


@pytest.mark.slow  # a table or a catalog made per example: the edit-run loop leaves it to make test
@pytest.mark.parametrize("page", sorted(p for p in SETUP if _blocks(p)[0]))  # (pages whose every block says why not)
def test_the_examples_of_a_page_run(page, tmp_path, monkeypatch):
    run, _ = _blocks(page)

    def fresh(where: Path) -> tuple[dict, Path]:
        lake = where / "lake"
        lake.mkdir(parents=True)
        monkeypatch.chdir(where)
        namespace: dict = {"__name__": "__docs_example__"}
        setup = COMMON + f"LAKE = {str(lake)!r}\n" + textwrap.dedent(SETUP[page])
        exec(compile(setup, f"{page} (setup)", "exec"), namespace)
        return namespace, lake

    if page in CLOCK_STARTS:
        import lamina.commit.committer
        import lamina.table.table

        clock = _Clock(CLOCK_STARTS[page])
        for module in (lamina.commit.committer, lamina.table.table):  # where versions get their times
            monkeypatch.setattr(module, "time", clock)
    failures = []
    for i, code in enumerate(run):
        if i == 0 or page in FRESH:
            namespace, lake = fresh(tmp_path / f"example-{i + 1}")
        try:
            exec(compile(_absolute(code, lake), f"{page}, example {i + 1}", "exec"), namespace)
        except Exception as e:  # every example's failure, not only the first one's
            failures.append(f"example {i + 1}: {type(e).__name__}: {e}")
    assert failures == [], f"{page}:\n" + "\n".join(failures)


def test_a_block_left_out_says_why():
    for page in SETUP:
        text = (ROOT / page).read_text()
        for reason in NOT_RUN.findall(text):
            assert len(reason.split()) >= 2, f"{page}: say why the example is not run"
    assert set(SETUP) >= {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if "```python" in p.read_text()}, (
        "a docs page with Python examples has no setup in tests/test_docs_examples.py")
