"""The main job (lamina/demo.py): every step at a small scale on the shared Spark session, and
the incremental read's check, which must stop the job when the change feed and the merge
disagree."""

from __future__ import annotations

import dataclasses
import io
import os

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from rich.console import Console
from rich.progress import Progress

import lamina
from lamina import demo
from lamina.commit import flush_hints


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


@pytest.mark.xdist_group("spark")
def test_every_step_of_the_main_job_at_a_small_scale(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "ROWS_PER_DAY", 800)
    out = io.StringIO()
    cat = lamina.load_catalog(f"sqlite:///{tmp_path}/catalog.db")
    job = demo.Demo(spark, str(tmp_path), cat, Progress(console=Console(file=out, width=200)))
    checked = 0
    try:
        for _, step in demo.STEPS:
            step(job)
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
    finally:
        job.catalog.close()
        flush_hints()
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
    assert t.list_branches() == [] and [r["name"] for r in t.system_table("branches").to_pylist()] == ["main"]
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
