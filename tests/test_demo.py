"""The main job (lamina/demo.py): every step at a small scale on the shared Spark session,
every figure it prints checked against a count of the test's own, and the incremental read's
check, which must stop the job when the change feed and the merge disagree.

The figures' oracle (``Figures``): the orders the job generated (regenerated here in Spark,
deterministic per day) and changed (its merge source), as a pandas model by version; the
data files of each version read with pyarrow (their rows minus the deleted ones must be the
model's); the files on disk (os.walk) before and after each step; the catalog's own rows and
transaction records, read with sqlite3. Never a count Lamina makes of the handle the job used.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sqlite3

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from rich.progress import Progress

import lamina
from lamina import demo
from lamina.commit import flush_hints
from lamina.errors import VersionNotFound
from support.files import referenced_by

ROWS = 800  # a day's orders at the test's scale


def summary_by_duckdb(orders: pa.Table) -> list[tuple]:
    """The oracle of the summary table: per UTC day, orders and revenue in cents, by DuckDB."""
    con = duckdb.connect()
    con.register("o", orders)
    return con.execute(
        "SELECT CAST(to_timestamp(0) AT TIME ZONE 'UTC' AS DATE) + CAST(floor(epoch_us(ts) / 86400000000) AS INTEGER), "
        "count(*), CAST(sum(round(amount * 100)) AS BIGINT) FROM o GROUP BY 1 ORDER BY 1"
    ).fetchall()


def check_summary(cat, snap) -> None:
    summary = snap.to_arrow(demo.SUMMARY).sort_by("day")
    got = list(zip(*[summary.column(c).to_pylist() for c in ("day", "orders", "revenue_cents")]))
    assert got == summary_by_duckdb(snap.to_arrow(demo.TABLE, columns=["ts", "amount"])), snap


def on_disk(root: str) -> dict[str, int]:
    flush_hints()
    return {os.path.relpath(os.path.join(d, f), root): os.path.getsize(os.path.join(d, f))
            for d, _, names in os.walk(root) for f in names}


def generated(spark, day: int, rows: int, first_id: int) -> pd.DataFrame:
    """The orders the job generates for ``day``, with their UTC day number."""
    orders = demo.orders_for_day(spark, day, rows, first_id).toArrow().to_pandas()
    return with_day(orders)


EPOCH = pd.Timestamp("1970-01-01", tz="UTC")


def epoch_day(day: int) -> int:
    """The UTC day number of the job's ``day`` (0: its first)."""
    return (pd.Timestamp(demo.FIRST_DAY) - EPOCH).days + day


def with_day(orders: pd.DataFrame) -> pd.DataFrame:
    """``orders`` with the UTC day number each was placed on."""
    return orders.assign(day=(pd.to_datetime(orders["ts"], utc=True) - EPOCH) // pd.Timedelta(days=1))


class Figures:
    """What every printed figure must be, step by step (``expected``), from the model and the disk."""

    def __init__(self, spark, job: demo.Demo, cat) -> None:
        self.spark, self.job, self.cat = spark, job, cat
        self.db = os.path.join(job.warehouse, "catalog.db")
        self.states: dict[int, pd.DataFrame] = {}  # the orders after each version that changed them
        self.disk: dict[str, int] = {}  # the files before the step being checked
        self.context: dict[str, object] = {}  # what a later step's check needs of an earlier one
        self.catalog_version_before: int | None = None  # the orders' version before the step being checked

    def before_step(self) -> None:
        """What a step's figures are counted against: the files, the catalog's version and the
        versions kept before it ran."""
        uri = self.job.uri
        self.disk = on_disk(uri) if uri else {}
        self.catalog_version_before = self.catalog_version() if uri else None
        self.context["versions_before"] = [h["version"] for h in lamina.open_table(uri).history()] if uri else []

    # -- sources ----------------------------------------------------------------------------

    def sql(self, query: str, *params) -> list[tuple]:
        with sqlite3.connect(self.db) as con:
            return con.execute(query, params).fetchall()

    def catalog_version(self, ident: str = demo.TABLE) -> int:
        ns, name = ident.split(".")
        return self.sql("SELECT version FROM lamina_tables WHERE namespace = ? AND name = ?", ns, name)[0][0]

    def transaction(self, what: str) -> dict:
        """A catalog transaction the job made, as the catalog recorded it."""
        tx = next(t for t in self.job.facts["transactions"] if t["what"] == what)
        (tables,) = self.sql("SELECT tables_json FROM lamina_transactions WHERE id = ?", tx["id"])[0]
        return {"id": tx["id"], "versions": json.loads(tables)}

    def rows(self, version: int) -> pd.DataFrame:
        return self.states[max(v for v in self.states if v <= version)]

    def files(self, version: int) -> pd.DataFrame:
        """The data files of ``version`` (by path, a handle of its own), each read with pyarrow:
        their rows less the deleted ones are the model's."""
        f = lamina.open_table(self.job.uri, version=version).inspect.files().to_pandas()
        f["rows"] = [pq.ParquetFile(os.path.join(self.job.uri, p)).metadata.num_rows for p in f["path"]]
        assert int(f["rows"].sum() - f["dv_cardinality"].fillna(0).sum()) == len(self.rows(version)), version
        return f

    def holding(self, version: int, column: str, keep) -> int:
        """How many data files of ``version`` hold a row ``keep`` takes (its ``column``, read with pyarrow)."""
        return sum(bool(keep(pq.read_table(os.path.join(self.job.uri, p), columns=[column]).column(column).to_pandas()).any())
                   for p in self.files(version)["path"])

    # -- the model --------------------------------------------------------------------------

    def load(self, version: int, *days: tuple[int, int, int]) -> None:
        """Version ``version`` added the orders of these (day, rows, first id)."""
        before = [self.rows(version)] if self.states else []
        self.states[version] = pd.concat(before + [generated(self.spark, *d) for d in days], ignore_index=True)

    def merged(self, version: int, src: pa.Table) -> None:
        s = with_day(src.to_pandas())
        now = self.rows(version).copy()
        status = dict(zip(s.order_id[s.op == "U"], s.status[s.op == "U"]))
        now["status"] = [status.get(i, st) for i, st in zip(now.order_id, now.status)]
        now = now[~now.order_id.isin(s.order_id[s.op == "D"])]
        self.states[version] = pd.concat([now, s[s.op == "I"].drop(columns="op")], ignore_index=True)

    # -- each step's figures ------------------------------------------------------------------

    def expected(self, step: str) -> dict:
        """The figures the line of ``step`` must print, each counted here."""
        j, R = self.job, demo.ROWS_PER_DAY
        if step == "initial load":
            tx = self.transaction("initial load")
            v = tx["versions"][demo.TABLE]
            self.load(v, *[(d, R, d * R) for d in range(demo.INITIAL_DAYS)])
            return {"days": demo.INITIAL_DAYS, "orders": len(self.rows(v)), "version": v, "files": len(self.files(v)),
                    "catalog": self.cat.uri, "transaction": tx}
        if step.startswith("append "):
            date = step.split()[1]
            tx = self.transaction(f"load {date}")
            v = tx["versions"][demo.TABLE]
            d = (pd.Timestamp(date) - pd.Timestamp(demo.FIRST_DAY.date())).days
            self.load(v, (d, R, d * R))
            tag = lamina.open_table(j.uri).tags.get(f"load-{date}")
            assert tag.tagged_version == v and os.path.exists(os.path.join(j.uri, "_lamina", "tags", f"load-{date}.json"))
            return {"orders": len(self.rows(v)) - len(self.rows(v - 1)), "tag": f"load-{date}", "transaction": tx}
        if step.startswith("query: revenue"):
            v = self.catalog_version()
            o = self.rows(v)
            day = o[(o.day == epoch_day(demo.REVENUE_DAY)) & (o.status != "returned")]
            revenue = day.groupby("category")["amount"].sum().round(2).sort_values(ascending=False)
            start = pd.Timestamp(demo.FIRST_DAY) + pd.Timedelta(days=demo.REVENUE_DAY)
            return {"day": start.date(), "planned": self.holding(v, "ts", lambda ts: ts.dt.normalize() == start),
                    "files": len(self.files(v)), "category": revenue.index[0], "revenue": pytest.approx(revenue.iloc[0], abs=0.011)}
        if step.startswith("query: an order-id range"):
            v = self.catalog_version()
            first, end = demo.lookup_ids()
            o = self.rows(v)
            hit = (o.order_id >= first) & (o.order_id < end) & o.country.isin(demo.LOOKUP_COUNTRIES)
            return {"orders": int(hit.sum()), "first": first, "last": end - 1, "files": len(self.files(v)),
                    "planned": self.holding(v, "order_id", lambda ids: (ids >= first) & (ids < end))}
        if step == "time travel":
            latest, loaded = self.catalog_version(), self.transaction("initial load")["versions"][demo.TABLE]
            return {"latest": latest, "now": len(self.rows(latest)), "version": loaded, "then": len(self.rows(loaded))}
        if step == "query as of a tag":
            first = j.facts["tags"][0]
            v = lamina.open_table(j.uri).tags.get(first).tagged_version
            return {"tag": f"load-{(demo.FIRST_DAY + pd.Timedelta(days=demo.INITIAL_DAYS)).date()}", "orders": len(self.rows(v)),
                    "tags": len(os.listdir(os.path.join(j.uri, "_lamina", "tags")))}
        if step == "merge a day's changes":
            tx = self.transaction("merge")
            v = tx["versions"][demo.TABLE]
            before = self.catalog_version_before
            src = j.facts["merge_source"]
            ops = src.column("op").to_pylist()
            self.merged(v, src)
            keys = set(src.column("order_id").to_pylist())
            self.context["merge"] = {kind: ops.count(kind) for kind in "UDI"}
            return {"version": v, "updated": ops.count("U"), "cancelled": ops.count("D"), "late": ops.count("I"),
                    "scanned": self.holding(before, "order_id", lambda ids: ids.isin(keys)), "files": len(self.files(before)),
                    "before": before, "returned_before": int((self.rows(before).status == "returned").sum()),
                    "returned_after": int((self.rows(v).status == "returned").sum()), "transaction": tx}
        if step.startswith("incremental read"):
            n = self.context["merge"]
            return {"version": self.transaction("merge")["versions"][demo.TABLE], "rows": 2 * n["U"] + n["D"] + n["I"],
                    "updates": n["U"], "deletes": n["D"], "inserts": n["I"]}
        if step == "query from DuckDB and Polars":
            o = self.rows(self.catalog_version())
            day = o[o.day == epoch_day(demo.INITIAL_DAYS + demo.INCREMENT_DAYS - 1)]
            return {"day": (demo.FIRST_DAY + pd.Timedelta(days=demo.INITIAL_DAYS + demo.INCREMENT_DAYS - 1)).date(),
                    "orders": len(day), "categories": day.category.nunique()}
        if step == "streaming read":
            v = self.transaction("streamed day")["versions"][demo.TABLE]
            d = demo.INITIAL_DAYS + demo.INCREMENT_DAYS
            self.load(v, (d, R // 10, (d + 1) * R))
            sink = f"{j.warehouse}/new_orders"
            delivered = sum(pq.ParquetFile(os.path.join(sink, p)).metadata.num_rows for p in on_disk(sink)
                            if p.startswith("data/") and p.endswith(".parquet"))
            return {"version": v, "appended": len(self.rows(v)) - len(self.rows(v - 1)), "delivered": delivered, "sink": sink}
        if step.startswith("write-audit-publish") and "failing" not in step:
            tx = self.transaction(f"publish wap-{(demo.FIRST_DAY + pd.Timedelta(days=demo.WAP_DAY)).date()}")
            v = tx["versions"][demo.TABLE]
            day = generated(self.spark, demo.WAP_DAY, R, demo.day_ids(demo.WAP_DAY))
            self.load(v, (demo.WAP_DAY, R, demo.day_ids(demo.WAP_DAY)))
            base = lamina.open_table(j.uri, version=v).metadata.parent_version  # a fast-forward: onto the version audited
            assert all(len(self.rows(x)) == len(self.rows(self.catalog_version_before))  # the rows main had before the step
                       for x in range(self.catalog_version_before, base + 1))
            return {"loaded": len(day), "branch": f"wap-{(demo.FIRST_DAY + pd.Timedelta(days=demo.WAP_DAY)).date()}",
                    "base_version": base, "negative": int((day.amount < 0).sum()), "version": v,
                    "publish": "fast-forward", "transaction": tx, "orders": len(self.rows(v))}
        if step.endswith("failing the audit"):
            first = demo.day_ids(demo.REJECTED_DAY)
            day = generated(self.spark, demo.REJECTED_DAY, R, first)
            negative = int((day.order_id % demo.REFUND_EVERY == 0).sum())  # the job books these as refunds
            t = lamina.open_table(j.uri)
            main = set().union(*(referenced_by(t, version=h["version"]) for h in t.history()),
                               *(referenced_by(t, version=x.name) for x in t.tags.list()))
            only = sorted(p for p in on_disk(j.uri) if p.startswith("data/") and p not in main)
            assert only == sorted(j.facts["wap_rejected"]["branch_only_files"])
            assert sum(pq.ParquetFile(os.path.join(j.uri, p)).metadata.num_rows for p in only if p.endswith(".parquet")) == R
            v = self.catalog_version()
            return {"loaded": len(day), "branch": f"wap-{(demo.FIRST_DAY + pd.Timedelta(days=demo.REJECTED_DAY)).date()}",
                    "negative": negative, "files": len(only), "version": v, "orders": len(self.rows(v))}
        if step == "compact (Spark)":
            before, v = self.catalog_version_before, self.catalog_version()
            old, new = set(self.files(before).path), set(self.files(v).path)
            outputs = new - old
            self.context["compaction"] = (len(old), len(new), outputs)
            return {"before": len(old), "after": len(new), "inputs": len(old - new), "outputs": len(outputs),
                    "groups": len({os.path.dirname(p) for p in outputs}), "version": v,
                    "rows": sum(pq.ParquetFile(os.path.join(j.uri, p)).metadata.num_rows for p in outputs)}
        if step == "expire old versions":
            versions, now = self.context["versions_before"], on_disk(j.uri)
            kept = [v for v in versions if _opens(j.uri, v)]
            gone = {p: n for p, n in self.disk.items() if p not in now}
            data = [p for p in gone if p.startswith("data/")]
            manifests = [p for p in gone if p.startswith("_lamina/manifests/")]
            current = referenced_by(lamina.open_table(j.uri))
            tag = j.facts["tags"][0]
            return {"expired": len(versions) - len(kept), "versions": len(versions), "kept": kept[0] if len(kept) == 1 else kept,
                    "files": len(data), "manifests": len(manifests),
                    "mb": pytest.approx(sum(gone[p] for p in data + manifests) / 1e6, abs=1e-9),
                    "for_tags": sum(1 for p in now if p.startswith("data/") and p.endswith(".parquet") and p not in current),
                    "tag": tag, "orders": len(self.rows(lamina.open_table(j.uri).tags.get(tag).tagged_version))}
        if step == "fsck":
            t = lamina.open_table(j.uri)
            current, now = referenced_by(t), on_disk(j.uri)
            every = set().union(current, *(referenced_by(t, version=x.name) for x in t.tags.list()))
            stored = {p for p in now if p.startswith("data/") or p.startswith("_lamina/manifests/")}
            return {"checked": len(current), "missing": len(current - set(now)), "unreferenced": len(stored - every),
                    "version": self.catalog_version(),
                    "snapshot": {ident: self.catalog_version(ident) for ident in (demo.SUMMARY, demo.TABLE)},
                    "transactions": self.sql("SELECT count(*) FROM lamina_transactions")[0][0]}
        raise AssertionError(f"no check for the figures of step {step!r}")

    def summary(self) -> dict:
        j = self.job
        t = lamina.open_table(j.uri)
        retained = [v for v in self.context["versions_before"] + [t.version] if _opens(j.uri, v)]
        before, after, outputs = self.context["compaction"]
        v = self.catalog_version()
        files = self.files(v)
        return {
            "versions": [{"version": v, "operation": t.metadata.operation, "added_files": len(outputs),
                          "added_rows": sum(pq.ParquetFile(os.path.join(j.uri, p)).metadata.num_rows for p in outputs),
                          "total_files": len(files), "total_rows": len(self.rows(v))}],
            "version": v, "retained": len(set(retained)), "files": len(files), "rows": len(self.rows(v)),
            "compaction": (before, after),
        }


def _opens(uri: str, version: int) -> bool:
    try:
        lamina.open_table(uri, version=version)
        return True
    except VersionNotFound:
        return False


@pytest.mark.xdist_group("spark")
def test_every_step_of_the_main_job_at_a_small_scale(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "ROWS_PER_DAY", ROWS)
    out = io.StringIO()
    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/catalog.db")
    job = demo.Demo(spark, str(tmp_path), cat, Progress(console=Console(file=out, width=200)))
    figures = Figures(spark, job, cat)
    checked = 0
    wrong: list[str] = []
    try:
        for _, step in demo.STEPS:
            figures.before_step()
            shown = set(job.figures)
            step(job)
            # every figure the step printed, against the test's own count
            for name in [n for n in job.figures if n not in shown]:
                want, got = figures.expected(name), job.figures[name]
                if want != got:
                    wrong.append(f"{name}: printed {got}, counted {want}")
            # Every catalog state the step's transactions left (each table as of the transaction's
            # one timestamp), and the state after the step: the summary agrees with the orders.
            for tx in job.facts.get("transactions", [])[checked:]:
                assert cat.transaction_committed(tx["id"])
                orders = cat.load_table(demo.TABLE)
                at = orders.log.load(tx["versions"][demo.TABLE]).timestamp_ms
                snap = cat.snapshot(at=at)
                assert {k: snap.version_of(k) for k in tx["versions"]} == tx["versions"]
                check_summary(cat, snap)
            checked = len(job.facts.get("transactions", []))
            check_summary(cat, cat.snapshot())
        job.figures["summary"] = demo.summary_figures(job)
        if job.figures["summary"] != figures.summary():
            wrong.append(f"summary: printed {job.figures['summary']}, counted {figures.summary()}")
    finally:
        job.catalog.close()
        flush_hints()
    assert not wrong, "\n".join(wrong)
    # each day's load, the merge, the streamed day and the published day: one transaction each,
    # moving both tables (the tables created by the first), recorded in the catalog
    txs = job.facts["transactions"]
    assert [tx["what"] for tx in txs] == ["initial load", "load 2026-01-06", "load 2026-01-07", "load 2026-01-08",
                                          "merge", "streamed day", "publish wap-2026-01-10"]
    assert all(set(tx["versions"]) == {demo.TABLE, demo.SUMMARY} for tx in txs) and len({tx["id"] for tx in txs}) == 7
    assert txs[0]["versions"] == {demo.TABLE: 1, demo.SUMMARY: 1}
    assert [tx["versions"][demo.SUMMARY] for tx in txs] == list(range(1, 8))
    assert f"one catalog transaction {txs[0]['id'][:8]}" in next(d for st, _, d in job.timings if st == "initial load"), out.getvalue()
    merge = job.facts["merge"]
    assert merge.version == txs[4]["versions"][demo.TABLE]
    assert (merge.rows_updated, merge.rows_deleted, merge.rows_inserted) == (50, 10, 10)  # 60 of a day's orders changed, 10 late ones
    read = next(detail for step, _, detail in job.timings if step.startswith("incremental read"))
    assert f"version {merge.version}: 120 change rows, 50 update pre/post-image pairs" in read, out.getvalue()
    stream = next(detail for step, _, detail in job.timings if step == "streaming read")
    assert "appended 80 orders: all 80 delivered once" in stream, out.getvalue()
    assert [step for step, *_ in job.timings][-1] == "fsck"
    # write-audit-publish: the clean day was published by fast-forward onto the version audited ...
    wap, rejected = job.facts["wap"], job.facts["wap_rejected"]
    assert (wap["negative"], wap["publish"], wap["published_version"]) == (0, "fast-forward", wap["main_version_before"] + 1)
    assert wap["main_rows_after"] == wap["main_rows_before"] + 800 and wap["base_version"] == wap["main_version_before"]
    # ... the day with refunds booked as negative amounts was not: main as it was, the branch's files freed
    refunds = sum(1 for i in range(demo.day_ids(demo.REJECTED_DAY), demo.day_ids(demo.REJECTED_DAY) + 800)
                  if i % demo.REFUND_EVERY == 0)
    assert rejected["negative"] == refunds > 0 and rejected["published_version"] is None
    assert (rejected["main_version_after"], rejected["main_rows_after"]) == (wap["main_version_after"], wap["main_rows_after"])
    # (freed by the job's expiry step, which runs after the branch was deleted)
    assert rejected["branch_only_files"] and not any(os.path.exists(os.path.join(job.uri, p)) for p in rejected["branch_only_files"])
    t = job.table()
    assert t.branches.list() == [] and [r["name"] for r in t.inspect.branches().to_pylist()] == ["main"]
    in_day = "order_id >= {} AND order_id < {}"
    assert t.scan(where=in_day.format(demo.day_ids(demo.WAP_DAY), demo.day_ids(demo.WAP_DAY) + 800)).count() == 800
    assert t.scan(where=in_day.format(demo.day_ids(demo.REJECTED_DAY), demo.day_ids(demo.REJECTED_DAY) + 800)).count() == 0
    assert t.scan(where="amount < 0").count() == 0
    published = next(detail for step, _, detail in job.timings if step.startswith("write-audit-publish") and "failing" not in step)
    assert f"published into main as version {wap['published_version']} (fast-forward" in published, out.getvalue()
    failing = next(detail for step, _, detail in job.timings if step.endswith("failing the audit"))
    assert f"audit: {refunds} negative amounts -> not published" in failing and "main untouched" in failing, out.getvalue()


ORDERS = pa.schema([pa.field("order_id", pa.int64(), False), pa.field("status", pa.string())])


@pytest.fixture
def merged(tmp_path):
    """A merge like the job's: 4 orders updated to 'returned', 2 cancelled (deleted), 3 late ones inserted."""
    t = lamina.create_table(str(tmp_path / "orders"), ORDERS)
    t.append(pa.table({"order_id": pa.array(range(10), pa.int64()), "status": ["paid"] * 10}, schema=ORDERS))
    src = pa.table({"order_id": pa.array([1, 2, 3, 4, 5, 6, 20, 21, 22], pa.int64()),
                    "status": ["returned"] * 4 + ["cancelled"] * 2 + ["placed"] * 3,
                    "op": ["U"] * 4 + ["D"] * 2 + ["I"] * 3})
    res = (t.merge(src, on="order_id").when_matched_delete(condition="source.op = 'D'")
           .when_matched_update({"status": "source.status"}).when_not_matched_insert_all().execute())
    yield t, res
    flush_hints()


def test_the_check_passes_the_feed_of_the_merge(merged):
    t, res = merged
    counts = demo.check_change_feed(t.changes(res.version - 1, res.version).to_arrow(), res)
    assert counts == {"update_preimage": 4, "update_postimage": 4, "delete": 2, "insert": 3}


@pytest.mark.parametrize("field", ["rows_updated", "rows_deleted", "rows_inserted"])
def test_the_check_stops_the_job_when_a_count_differs_from_the_merge(merged, field):
    t, res = merged
    changes = t.changes(res.version - 1, res.version).to_arrow()
    claimed = dataclasses.replace(res, **{field: getattr(res, field) + 1})
    with pytest.raises(AssertionError, match="the merge reported"):
        demo.check_change_feed(changes, claimed)


def test_the_check_stops_the_job_when_an_image_lacks_the_merged_status(merged):
    t, res = merged
    changes = t.changes(res.version - 1, res.version).to_arrow()
    post = pc.equal(changes.column("_change_type"), "update_postimage")
    wrong = changes.set_column(changes.schema.get_field_index("status"), "status",
                               pc.if_else(post, pa.scalar("paid"), changes.column("status")))
    with pytest.raises(AssertionError, match="4 update_postimage rows .* do not have status 'returned'"):
        demo.check_change_feed(wrong, res)
    dropped = changes.filter(pc.invert(pc.equal(changes.column("_change_type"), "delete")))  # a feed missing its deletes
    with pytest.raises(AssertionError, match="the merge reported"):
        demo.check_change_feed(dropped, res)


def test_the_printed_explorer_command_opens_the_jobs_catalog(tmp_path):
    """The job ends by printing ``lamina ui <catalog>``: that command's target is the catalog
    the job wrote, with its tables."""
    import shlex

    from lamina.ui.api import Explorer

    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/catalog.db")
    cat.create_namespace("shop")
    cat.create_table(demo.TABLE, ORDERS)
    words = shlex.split(demo.explorer_command(cat))
    assert words[:2] == ["lamina", "ui"] and len(words) == 3
    explorer = Explorer(words[2])
    try:
        assert [t["key"] for t in explorer.catalog_page()["tables"]] == [demo.TABLE]
    finally:
        explorer.close()
        cat.close()
