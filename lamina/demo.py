"""The main job: an orders pipeline on Spark into a partitioned Lamina table, on the embedded default.

Runs with ``make demo`` (or ``python -m lamina.demo [warehouse dir]``), on a local
warehouse directory (recreated each run) and local Spark, no server. The table is
``shop.orders`` in the embedded SQLite catalog ``sqlite:///<warehouse>/catalog.db``:
every commit (Spark's too) is a compare-and-swap of its catalog row. Next to it,
``shop.daily_orders`` holds each day's order count and revenue: every change to the
orders' rows (each day's load, the merge, the published day) commits together with the
summary's change in ONE catalog transaction (``with catalog.transaction() as tx:``), so a
reader through the catalog never sees one table moved without the other.

1. generate a few days of realistic orders in Spark (order id, customer, category,
   timestamp, amount, quantity, country, channel, status);
2. write them with Spark into a new catalog table partitioned by ``day(ts)``, and their
   per-day summary into a new summary table: both tables created in one catalog transaction;
3. append one daily increment per day, with its summary row: one catalog transaction each;
4. query with filters (pruned to the partitions and files that can match);
5. time travel to the version before the increments, by version and by timestamp,
   through both the fast reader and ``spark.read.format("lamina")``;
6. tag each daily load and query as of a tag;
7. merge a day's changes (status updates, cancellations, late orders) into the
   history in one version (Spark), reading only the files whose order ids can match, with
   the summary's counts adjusted in the same catalog transaction, and compare
   before/after by time travel;
8. incremental read: the change data feed of the merge's version (``t.changes(v - 1, v)``),
   what a downstream job reads instead of the table, counted by change type (update
   pre/post-image pairs for the status updates, deletes for the cancellations, inserts
   for the late orders) and checked against the counts the merge reported;
9. query the merged day from DuckDB (``lamina.duckdb.sql`` over the catalog, pruned by the
   WHERE) and Polars (``lamina.polars.scan``), no Spark, checked against Lamina's own read;
10. streaming read: a Spark structured streaming query on the table
   (``spark.readStream.format("lamina")``, from the latest version, into another Lamina table
   with exactly-once batches) picks up a day another pipeline appends after it started;
11. write-audit-publish: the next day is loaded into a branch no reader of main sees, audited
    there with a DuckDB query on the branch (no negative amounts), and published into main as
    one version; a day that fails the audit (refunds booked as negative amounts) is thrown
    away with its branch: main's version and rows stay as they were, its files are freed;
12. compact with Spark the small files and deletion vectors the appends and the merge left,
    reporting files before/after;
13. expire old versions, freeing the compacted inputs (tagged data stays readable), and
    report the space freed;
14. check the table (fsck), check that a reader by path alone (no catalog) sees the
    catalog's version and that the summary agrees with the orders in a catalog snapshot,
    and print a summary of versions, files, rows and timings.

Each step is a small function taking the ``Demo`` state, so later steps (tags, expiry,
merges) slot into ``STEPS``. Each prints one line, a template filled in with its figures
(``Demo.record``); the figures are kept by step (``Demo.figures``), and so are the summary's
(``summary_figures``), so tests/test_demo.py checks every number the job prints against a
count of its own.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from rich.text import Text

import lamina
from lamina.maintenance import fsck

console = Console()

FIRST_DAY = datetime(2026, 1, 1, tzinfo=UTC)
INITIAL_DAYS = 5  # loaded in one write
INCREMENT_DAYS = 3  # then appended one version per day
ROWS_PER_DAY = 400_000  # 3.2 M orders in total
CATEGORIES = ["books", "electronics", "garden", "toys", "grocery", "fashion", "sports", "music", "beauty", "tools"]
COUNTRIES = ["DE", "FR", "GB", "US", "JP", "BR", "IN", "ES", "IT", "NL"]
CHANNELS = ["web", "app", "store"]
STATUSES = ["placed", "paid", "shipped", "delivered", "returned"]


NAMESPACE, TABLE = "shop", "shop.orders"
SUMMARY = "shop.daily_orders"  # per day: orders and revenue in cents, moved with the orders in one transaction
US_PER_DAY = 86_400_000_000


@dataclass
class Demo:
    spark: Any
    warehouse: str
    catalog: Any  # the embedded SQLite catalog
    progress: Progress
    uri: str = ""  # the table's location, once created
    timings: list[tuple[str, float, str]] = field(default_factory=list)  # (step, seconds, what happened)
    facts: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)  # step -> the figures its line prints

    def table(self) -> lamina.Table:
        """The table at its latest version, through the catalog (commits go through its row)."""
        return self.catalog.load_table(TABLE)

    def transaction(self, tx: Any, what: str) -> dict[str, Any]:
        """Note a committed catalog transaction (its id is in the catalog's lamina_transactions):
        the figure a step's line prints of it (``transaction_text``)."""
        self.facts.setdefault("transactions", []).append({"id": tx.id, "what": what, "versions": dict(tx.versions)})
        return {"id": tx.id, "versions": dict(tx.versions)}

    def record(self, step: str, seconds: float, line: str, **figures: Any) -> None:
        """Print a step's line: ``line`` with its ``figures`` filled in (``{orders:,}``; also
        ``{table}`` and ``{summary}``, the tables' names), and keep the figures by step."""
        named = {k: transaction_text(v) if k == "transaction" else v for k, v in figures.items()}
        detail = line.format(table=TABLE, summary=SUMMARY, **named)
        self.figures[step] = figures
        self.timings.append((step, seconds, detail))
        self.progress.console.print(Text.assemble(("✓ ", "green"), step, (f" ({seconds:.1f} s)", "dim"), " — ", detail))


def transaction_text(tx: dict[str, Any]) -> str:
    """A catalog transaction as a step's line says it: its id's start and each table's new version."""
    moved = ", ".join(f"{ident} -> version {v}" for ident, v in tx["versions"].items())
    return f"one catalog transaction {tx['id'][:8]} ({moved})"


# --- data ---------------------------------------------------------------------------------


def orders_for_day(spark: Any, day: int, rows: int, first_id: int) -> Any:
    """One day of orders, generated inside Spark (deterministic per day)."""
    from pyspark.sql import functions as F

    def pick(values: list[str], salt: int) -> Any:
        idx = (F.abs(F.hash(F.col("id"), F.lit(salt))) % len(values) + 1).cast("int")
        return F.element_at(F.array(*[F.lit(v) for v in values]), idx)

    start_us = int((FIRST_DAY + timedelta(days=day)).timestamp() * 1_000_000)
    u = lambda salt: F.abs(F.hash(F.col("id"), F.lit(salt))) % 1_000_000 / 1_000_000.0  # noqa: E731
    return spark.range(first_id, first_id + rows, numPartitions=2).select(
        F.col("id").alias("order_id"),
        (F.abs(F.hash(F.col("id"), F.lit(1))) % 250_000).cast("long").alias("customer_id"),
        pick(CATEGORIES, 2).alias("category"),
        F.timestamp_micros(F.lit(start_us) + (u(3) * 86_400_000_000).cast("long")).alias("ts"),
        F.round(F.exp(u(4) * 5.5) * 2.0 + 1.0, 2).alias("amount"),  # long-tailed, 3 .. ~490
        ((u(5) * 5).cast("int") + 1).alias("quantity"),
        pick(COUNTRIES, 6).alias("country"),
        pick(CHANNELS, 7).alias("channel"),
        pick(STATUSES, 8).alias("status"),
    )


def days_of_orders(spark: Any, days: range, rows_per_day: int) -> Any:
    dfs = [orders_for_day(spark, d, rows_per_day, d * rows_per_day) for d in days]
    out = dfs[0]
    for d in dfs[1:]:
        out = out.unionByName(d)
    return out


# --- the per-day summary ---------------------------------------------------------------------


def summary_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [pa.field("day", pa.date32()), pa.field("orders", pa.int64()), pa.field("revenue_cents", pa.int64())]
    )


def daily_summary(orders: Any) -> Any:
    """The summary rows of a Spark DataFrame of orders: per UTC day, the orders and their
    revenue in cents (exact)."""
    from pyspark.sql import functions as F

    day = F.expr(f"date_from_unix_date(CAST(floor(unix_micros(ts) / {US_PER_DAY}) AS INT))")
    return orders.groupBy(day.alias("day")).agg(
        F.count(F.lit(1)).alias("orders"), F.sum(F.round(F.col("amount") * 100).cast("long")).alias("revenue_cents")
    )


def summary_of(orders: Any, sign: Any = None) -> Any:
    """``daily_summary`` of an Arrow table of orders, each row counted ``sign`` times (an Arrow
    array of -1/0/1: what a change adds to or takes from each day; None: once)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cents = pc.cast(pc.round(pc.multiply(orders.column("amount"), 100.0)), pa.int64())
    one = pa.array([1] * orders.num_rows, pa.int64()) if sign is None else pc.cast(sign, pa.int64())
    days = pc.cast(
        pc.floor(pc.divide(pc.cast(pc.cast(orders.column("ts"), pa.int64()), pa.float64()), float(US_PER_DAY))),
        pa.int32(),
    )
    rows = pa.table({"day": pc.cast(days, pa.date32()), "orders": one, "revenue_cents": pc.multiply(cents, one)})
    rows = rows.filter(pc.not_equal(one, 0))
    out = rows.group_by("day").aggregate([("orders", "sum"), ("revenue_cents", "sum")])
    return (
        out.rename_columns(["day", "orders", "revenue_cents"])
        .select(["day", "orders", "revenue_cents"])
        .cast(summary_schema())
    )


def summary_disagreements(snapshot: Any) -> list[str]:
    """The days on which the summary table and the orders disagree in a catalog snapshot
    (both tables at the versions it pins)."""
    orders = summary_of(snapshot.to_arrow(TABLE, columns=["ts", "amount"])).sort_by("day").to_pylist()
    summary = snapshot.to_arrow(SUMMARY).cast(summary_schema()).sort_by("day").to_pylist()
    if orders == summary:
        return []
    have = {r["day"]: r for r in summary}
    return [f"{r['day']}: orders {r} / summary {have.get(r['day'])}" for r in orders if have.get(r["day"]) != r] or [
        "extra summary rows"
    ]


def load_orders(demo: Demo, orders: Any, *, tag: str | None = None, create: bool = False) -> Any:
    """Load a Spark DataFrame of orders and its per-day summary in ONE catalog transaction:
    Spark writes both tables' files, the driver commits both tables at once (``create``: the
    transaction creates them, ``tag``: the orders' new version gets it). The transaction."""
    from lamina.spark import arrow_schema, write

    with demo.catalog.transaction() as tx:
        if create:
            props = {lamina.TableProperties.WRITE_MAX_ROWS_PER_FILE.key: "500000"}
            into = tx.create_table(TABLE, arrow_schema(orders.schema), partition_by=["day(ts)"], properties=props)
            summary = tx.create_table(SUMMARY, summary_schema())
        else:
            into, summary = tx.table(TABLE), tx.table(SUMMARY)
        write(orders, into)
        write(daily_summary(orders), summary, mode="append")
        if tag is not None:
            into.create_tag(tag)
    return tx


# --- steps -----------------------------------------------------------------------------------


def initial_load(demo: Demo) -> None:
    t0 = time.perf_counter()
    df = days_of_orders(demo.spark, range(INITIAL_DAYS), ROWS_PER_DAY)
    demo.catalog.create_namespace(NAMESPACE)
    tx = load_orders(demo, df, create=True)
    v = tx.versions[TABLE]
    t = demo.table()
    demo.uri = t.uri
    demo.facts["loaded_version"] = v
    demo.record(
        "initial load",
        time.perf_counter() - t0,
        "{days} days, {orders:,} orders -> {table} version {version} ({files} files) in catalog {catalog}, "
        "their summary -> {summary}: {transaction}, both tables created in it",
        days=INITIAL_DAYS,
        orders=t.scan().count(),
        version=v,
        files=len(t.scan().plan()),
        catalog=demo.catalog.uri,
        transaction=demo.transaction(tx, "initial load"),
    )


def daily_increments(demo: Demo) -> None:
    for day in range(INITIAL_DAYS, INITIAL_DAYS + INCREMENT_DAYS):
        t0 = time.perf_counter()
        date = (FIRST_DAY + timedelta(days=day)).date()
        tag = f"load-{date}"  # every daily load is tagged
        tx = load_orders(demo, orders_for_day(demo.spark, day, ROWS_PER_DAY, day * ROWS_PER_DAY), tag=tag)
        demo.facts.setdefault("tags", []).append(tag)
        added = demo.table().log.load(tx.versions[TABLE]).summary["added-records"]
        demo.record(
            f"append {date}",
            time.perf_counter() - t0,
            "{orders:,} orders and their summary row, tag {tag}: {transaction}",
            orders=added,
            tag=tag,
            transaction=demo.transaction(tx, f"load {date}"),
        )


# The filtered queries: revenue on one day; an order-id range (the first eighth of a day's ids) in two countries.
REVENUE_DAY = 2
LOOKUP_DAY = 3
LOOKUP_COUNTRIES = ("DE", "FR")


def lookup_ids() -> tuple[int, int]:
    """The order ids the lookup asks for: [first, end)."""
    return LOOKUP_DAY * ROWS_PER_DAY, LOOKUP_DAY * ROWS_PER_DAY + ROWS_PER_DAY // 8


def filtered_queries(demo: Demo) -> None:
    from pyspark.sql import functions as F

    from lamina.spark import read

    t = demo.table()
    total_files = len(t.scan().plan())
    day = (FIRST_DAY + timedelta(days=REVENUE_DAY)).date()
    where = f"ts >= TIMESTAMP '{day} 00:00:00' AND ts < TIMESTAMP '{day + timedelta(days=1)} 00:00:00'"
    t0 = time.perf_counter()
    revenue = (
        read(demo.spark, t, where=where, columns=["category", "amount", "status"])
        .where(F.col("status") != "returned")
        .groupBy("category")
        .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count("*").alias("orders"))
        .orderBy(F.desc("revenue"))
        .collect()
    )
    planned = len(t.scan(where=where).plan())
    demo.record(
        "query: revenue by category on one day",
        time.perf_counter() - t0,
        "{day}: {planned} of {files} files read; top: {category} {revenue:,.2f}",
        day=day,
        planned=planned,
        files=total_files,
        category=revenue[0]["category"],
        revenue=revenue[0]["revenue"],
    )
    demo.facts["revenue"] = revenue

    t0 = time.perf_counter()
    first, end = lookup_ids()
    lookup = f"order_id >= {first} AND order_id < {end} AND country IN {LOOKUP_COUNTRIES}"
    orders = read(demo.spark, t, where=lookup, columns=["order_id", "customer_id", "amount"])
    n = orders.count()
    planned = len(t.scan(where=lookup).plan())
    demo.record(
        f"query: an order-id range in {'/'.join(LOOKUP_COUNTRIES)}",
        time.perf_counter() - t0,
        "{orders:,} orders with ids {first:,} to {last:,}; {planned} of {files} files after order_id statistics pruning",
        orders=n,
        first=first,
        last=end - 1,
        planned=planned,
        files=total_files,
    )


def time_travel(demo: Demo) -> None:
    from lamina.spark import read

    t = demo.table()
    v = demo.facts["loaded_version"]
    at = t.scan(version=v).vm.timestamp_ms
    t0 = time.perf_counter()
    now = read(demo.spark, t).count()
    then = read(demo.spark, t, version=v).count()
    by_time = read(demo.spark, t, timestamp=at).count()
    # format("lamina") by location alone: a catalog table stays readable without the catalog
    by_source = demo.spark.read.format("lamina").option("versionAsOf", v).load(demo.uri).count()
    if not then == by_time == by_source == INITIAL_DAYS * ROWS_PER_DAY:
        raise AssertionError(f"time travel disagrees: {then}, {by_time}, {by_source}")
    demo.record(
        "time travel",
        time.perf_counter() - t0,
        "version {latest}: {now:,} orders; version {version} (by number, by timestamp, via format('lamina')): {then:,}",
        latest=t.version,
        now=now,
        version=v,
        then=then,
    )


def query_tag(demo: Demo) -> None:
    from lamina.spark import read

    first = demo.facts["tags"][0]
    t0 = time.perf_counter()
    t = demo.table()
    n = read(demo.spark, t, version=first).count()
    via_source = (
        demo.spark.read.format("lamina")
        .option("catalog", demo.catalog.reopen_uri()[0])
        .option("tag", first)
        .load(TABLE)
        .count()
    )
    if n != via_source:
        raise AssertionError(f"tag {first}: {n} != {via_source}")
    tags = t.inspect.tags()
    demo.record(
        "query as of a tag",
        time.perf_counter() - t0,
        "{tag}: {orders:,} orders; $tags has {tags} tags",
        tag=first,
        orders=n,
        tags=tags.num_rows,
    )


def _changes(demo: Demo) -> Any:
    """A day's changes for orders already in the history: status updates, cancellations
    (op = 'D'), plus late orders not in the table yet."""
    import numpy as np
    import pyarrow as pa

    t = demo.table()
    day = INITIAL_DAYS + INCREMENT_DAYS - 1  # the latest day, and late orders for the next one
    rng = np.random.default_rng(7)
    existing = rng.choice(
        np.arange(day * ROWS_PER_DAY, (day + 1) * ROWS_PER_DAY), ROWS_PER_DAY * 3 // 40, replace=False
    )
    changed = t.scan(where=f"order_id >= {int(existing.min())} AND order_id <= {int(existing.max())}").to_arrow()
    changed = changed.filter(pa.compute.is_in(changed.column("order_id"), pa.array(existing)))
    ops = np.where(np.arange(changed.num_rows) % 6 == 0, "D", "U")
    changed = changed.set_column(
        changed.schema.get_field_index("status"), "status", pa.array(np.where(ops == "D", "cancelled", "returned"))
    )
    late_ids = np.arange((day + 1) * ROWS_PER_DAY, (day + 1) * ROWS_PER_DAY + ROWS_PER_DAY // 80)
    sample = changed.slice(0, len(late_ids))
    late = sample.set_column(0, "order_id", pa.array(late_ids)).set_column(
        sample.schema.get_field_index("status"), "status", pa.array(["placed"] * len(late_ids))
    )
    src = pa.concat_tables([changed, late.cast(changed.schema)])
    return src.append_column("op", pa.array(list(ops) + ["I"] * len(late_ids)))


def merge_changes(demo: Demo) -> None:
    """The day's changes merged with Spark and the summary adjusted (cancelled orders out,
    late orders in) in one catalog transaction."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.compute as pc

    from lamina.spark import merge

    t = demo.table()
    before = t.version
    src = _changes(demo)
    demo.facts["merge_source"] = src
    t0 = time.perf_counter()
    with demo.catalog.transaction() as tx:
        res = (
            merge(tx.table(TABLE), demo.spark.createDataFrame(src), on="order_id")
            .when_matched_delete(condition="source.op = 'D'")
            .when_matched_update({"status": "source.status"})
            .when_not_matched_insert_all()
            .execute()
        )
        op = src.column("op")
        sign = pc.if_else(pc.equal(op, "D"), -1, pc.if_else(pc.equal(op, "I"), 1, 0))
        (
            tx.table(SUMMARY)
            .merge(summary_of(src, pa.array(sign)), on="day")
            .when_matched_update(
                {
                    "orders": "target.orders + source.orders",
                    "revenue_cents": "target.revenue_cents + source.revenue_cents",
                }
            )
            .when_not_matched_insert_all()
            .execute()
        )
    res = dataclasses.replace(res, version=tx.versions[TABLE])
    done = demo.transaction(tx, "merge")
    demo.facts["merge"] = res
    returned = "status = 'returned'"
    merged = demo.table()  # (``t`` stays at the version the merge read: counts of the merged version come from here)
    demo.record(
        "merge a day's changes",
        time.perf_counter() - t0,
        "version {version}: {updated:,} updated, {cancelled:,} cancelled, {late:,} late orders; read {scanned} of "
        "the {files} files of version {before}; 'returned' orders {returned_before:,} -> {returned_after:,} "
        "(version {before} -> {version}); summary counts adjusted: {transaction}",
        version=res.version,
        updated=res.rows_updated,
        cancelled=res.rows_deleted,
        late=res.rows_inserted,
        scanned=res.files_scanned,
        files=len(t.scan(version=before).plan()),
        before=before,
        returned_before=t.scan(where=returned, version=before).count(),
        returned_after=merged.scan(where=returned, version=res.version).count(),
        transaction=done,
    )


def expected_change_counts(merge: Any) -> dict[str, int]:
    """What each change type of a merge's version must count: the merge's own counts."""
    return {
        "update_preimage": merge.rows_updated,
        "update_postimage": merge.rows_updated,
        "delete": merge.rows_deleted,
        "insert": merge.rows_inserted,
    }


def check_change_feed(changes: Any, merge: Any) -> dict[str, int]:
    """The change rows of ``merge``'s version (an Arrow table) counted by change type; raises
    AssertionError, stopping the job, unless the counts are the merge's and every update's
    post-image and every insert carries the status the merge wrote."""
    import pyarrow.compute as pc

    by_type = pc.value_counts(changes.column("_change_type"))
    counts = dict(zip(by_type.field("values").to_pylist(), by_type.field("counts").to_pylist()))
    want = expected_change_counts(merge)
    if {kind: counts.get(kind, 0) for kind in want} != want or set(counts) - set(want):
        raise AssertionError(f"the change feed of version {merge.version} counts {counts}, the merge reported {want}")
    for kind, status in (("update_postimage", "returned"), ("insert", "placed")):
        rows = changes.filter(pc.equal(changes.column("_change_type"), kind))
        wrong = rows.filter(pc.invert(pc.fill_null(pc.equal(rows.column("status"), status), False))).num_rows
        if wrong:
            raise AssertionError(f"{wrong} {kind} rows of version {merge.version} do not have status {status!r}")
    return counts


def incremental_read(demo: Demo) -> None:
    merge = demo.facts["merge"]
    t = demo.table()
    t0 = time.perf_counter()
    changes = t.changes(merge.version - 1, merge.version).to_arrow()  # what a downstream job reads
    counts = check_change_feed(changes, merge)
    demo.record(
        "incremental read (change feed)",
        time.perf_counter() - t0,
        "version {version}: {rows:,} change rows, {updates:,} update pre/post-image pairs (status -> 'returned'), "
        "{deletes:,} deletes (cancelled), {inserts:,} inserts (late orders), as the merge reported (from what it "
        "changed, not a diff of two versions)",
        version=merge.version,
        rows=changes.num_rows,
        updates=counts.get("update_preimage", 0),
        deletes=counts.get("delete", 0),
        inserts=counts.get("insert", 0),
    )


def query_without_spark(demo: Demo) -> None:
    """The same day's orders per category from DuckDB (SQL over the catalog, pruned by the
    WHERE) and Polars (a LazyFrame), after the merge (so deletion vectors are applied),
    checked against Lamina's own read."""
    import polars as pl
    import pyarrow.compute as pc

    import lamina.duckdb
    import lamina.polars

    t = demo.table()
    day = (FIRST_DAY + timedelta(days=INITIAL_DAYS + INCREMENT_DAYS - 1)).date()  # the day the merge changed
    start, end = f"{day} 00:00:00+00", f"{day + timedelta(days=1)} 00:00:00+00"
    t0 = time.perf_counter()
    duck = lamina.duckdb.sql(
        f"SELECT category, count(*) AS orders FROM {TABLE} WHERE ts >= TIMESTAMPTZ '{start}' AND ts < TIMESTAMPTZ '{end}' "
        "GROUP BY category ORDER BY category",
        catalog=demo.catalog,
    ).fetchall()
    lo, hi = datetime.fromisoformat(start), datetime.fromisoformat(end)
    polars = (
        lamina.polars.scan(t)
        .filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
        .group_by("category")
        .agg(pl.len().alias("orders"))
        .sort("category")
        .collect()
        .rows()
    )
    elapsed = time.perf_counter() - t0
    rows = t.scan(where=f"ts >= TIMESTAMP '{start}' AND ts < TIMESTAMP '{end}'", columns=["category"]).to_arrow()
    own = sorted((r["values"], r["counts"]) for r in pc.value_counts(rows.column("category")).to_pylist())
    if not duck == [tuple(r) for r in polars] == own:
        raise AssertionError(f"DuckDB, Polars and Lamina disagree on {day}: {duck} / {polars} / {own}")
    demo.record(
        "query from DuckDB and Polars",
        elapsed,
        "{day}: {orders:,} orders in {categories} categories, the same from DuckDB SQL, a Polars LazyFrame and "
        "Lamina (deletion vectors applied)",
        day=day,
        orders=sum(n for _, n in own),
        categories=len(own),
    )


def _stream_new_orders(demo: Demo, sink: str, checkpoint: str) -> None:
    """One run of the streaming query: every version of the orders table after the one it
    started at, not yet delivered, appended exactly once to ``sink`` (then it stops)."""
    query = (
        demo.spark.readStream.format("lamina")
        .option("startingVersion", "latest")
        .load(demo.uri)
        .writeStream.format("lamina")
        .option("path", sink)
        .option("appId", "new-orders")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def streaming_read(demo: Demo) -> None:
    """A structured streaming query on the orders table picks up an append made after it
    started: run from its checkpoint after the append, it delivers exactly the new rows."""
    sink, checkpoint = f"{demo.warehouse}/new_orders", f"{demo.warehouse}/_checkpoints/new_orders"
    t0 = time.perf_counter()
    _stream_new_orders(demo, sink, checkpoint)  # starts at the latest version: nothing new yet
    day = INITIAL_DAYS + INCREMENT_DAYS
    # another pipeline appends a (smaller) next day and its summary; ids after the merge's late orders
    tx = load_orders(demo, orders_for_day(demo.spark, day, ROWS_PER_DAY // 10, (day + 1) * ROWS_PER_DAY))
    demo.transaction(tx, "streamed day")
    v = tx.versions[TABLE]
    _stream_new_orders(demo, sink, checkpoint)  # the same query, restarted from its checkpoint
    got = lamina.open_table(sink).scan().to_arrow()
    want = demo.table().changes(v - 1, v, columns=["order_id"]).to_arrow()  # what version v inserted
    if sorted(got.column("order_id").to_pylist()) != sorted(want.column("order_id").to_pylist()):
        raise AssertionError(f"the stream delivered {got.num_rows:,} rows; version {v} appended {want.num_rows:,}")
    demo.record(
        "streaming read",
        time.perf_counter() - t0,
        "spark.readStream.format('lamina') from the latest version, restarted from its checkpoint after version "
        "{version} appended {appended:,} orders: all {delivered:,} delivered once into {sink}",
        version=v,
        appended=want.num_rows,
        delivered=got.num_rows,
        sink=sink,
    )


# Write-audit-publish: the days after the streamed one, and the ids they take (after the
# streamed day's, which start at (streamed day + 1) * ROWS_PER_DAY).
WAP_DAY = INITIAL_DAYS + INCREMENT_DAYS + 1
REJECTED_DAY = WAP_DAY + 1
REFUND_EVERY = 97  # in the rejected day, every order whose id is a multiple of this has a negative amount


def day_ids(day: int) -> int:
    """The first order id of a day loaded by write-audit-publish."""
    return (day + 1) * ROWS_PER_DAY


def negative_amounts(demo: Demo, branch: str) -> int:
    """The audit: orders with a negative amount on ``branch``'s latest version, by a DuckDB query
    on the branch (``AT (BRANCH => ...)``) through the catalog."""
    import lamina.duckdb

    query = f"SELECT count(*) FROM {TABLE} AT (BRANCH => '{branch}') WHERE amount < 0"
    return lamina.duckdb.sql(query, catalog=demo.catalog).fetchall()[0][0]


def _data_files(files: Any) -> set[str]:
    """The data and deletion-vector files of a ``$files`` table."""
    return {p for p in files.column("path").to_pylist() + files.column("dv_path").to_pylist() if p is not None}


def audit_and_publish(demo: Demo, day: int, orders: Any) -> dict[str, Any]:
    """Load ``orders`` (one day, Arrow) into a new branch of main, audit it there, publish it
    into main if it passes (only onto the version of main the audit saw), and delete the
    branch either way. Returns what happened; raises AssertionError, stopping the job, if a
    reader of main saw the load before it was published, or a rejected day changed main."""
    t = demo.table()
    name = f"wap-{(FIRST_DAY + timedelta(days=day)).date()}"
    b = t.branches.create(name)  # from main's latest: nothing is copied
    main_version, main_rows = demo.table().version, demo.table().scan().count()
    b.append(orders)
    out = {
        "branch": name,
        "base_version": b.branch_record.base_version,
        "loaded": orders.num_rows,
        "negative": negative_amounts(demo, name),
        "main_version_before": main_version,
        "main_rows_before": main_rows,
    }
    if demo.table().scan().count() != main_rows:
        raise AssertionError(f"a reader of main saw branch {name}'s load before it was published")
    if out["negative"] == 0:  # the day is published with its summary row, in one catalog transaction
        with demo.catalog.transaction() as tx:
            tx.table(TABLE).publish(name, expected_version=main_version)
            tx.table(SUMMARY).append(summary_of(orders))
        out["transaction"] = demo.transaction(tx, f"publish {name}")
        out["published_version"] = tx.versions[TABLE]
        out["publish"] = demo.table().metadata.summary["publish"]
    else:
        out["published_version"] = None
    # What only the branch holds (nothing once published: main holds its files now); the
    # expiry step below frees it, the deletion being older than its reader grace of 0.
    held = _data_files(b.inspect.files())
    out["branch_only_files"] = sorted(
        held - _data_files(t.refresh().inspect.files())
    )  # (main's deletion vectors are main's)
    t.branches.delete(name)
    now = demo.table()
    out["main_version_after"], out["main_rows_after"] = now.version, now.scan().count()
    want = (
        (main_version, main_rows)
        if out["published_version"] is None
        else (out["published_version"], main_rows + orders.num_rows)
    )
    if (out["main_version_after"], out["main_rows_after"]) != want:
        raise AssertionError(
            f"after branch {name}, main is at version {now.version} with {out['main_rows_after']:,} orders; "
            f"expected version {want[0]} with {want[1]:,}"
        )
    return out


def write_audit_publish(demo: Demo) -> None:
    """A day that passes the audit is published into main; a day that fails leaves main untouched."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    good = orders_for_day(demo.spark, WAP_DAY, ROWS_PER_DAY, day_ids(WAP_DAY)).toArrow()
    passed = audit_and_publish(demo, WAP_DAY, good)
    demo.facts["wap"] = passed
    demo.record(
        f"write-audit-publish {passed['branch'][4:]}",
        time.perf_counter() - t0,
        "{loaded:,} orders loaded into branch {branch} (from main's version {base_version}), unseen by main's "
        "readers; audit on the branch (DuckDB): {negative} negative amounts -> published into main as version "
        "{version} ({publish}, only onto the version audited) with its summary row in {transaction}; main now has "
        "{orders:,} orders; branch deleted",
        loaded=passed["loaded"],
        branch=passed["branch"],
        base_version=passed["base_version"],
        negative=passed["negative"],
        version=passed["published_version"],
        publish=passed["publish"],
        transaction=passed["transaction"],
        orders=passed["main_rows_after"],
    )
    t0 = time.perf_counter()
    day = orders_for_day(demo.spark, REJECTED_DAY, ROWS_PER_DAY, day_ids(REJECTED_DAY))
    refunds = day.withColumn(
        "amount", F.when(F.col("order_id") % REFUND_EVERY == 0, -F.col("amount")).otherwise(F.col("amount"))
    )
    failed = audit_and_publish(demo, REJECTED_DAY, refunds.toArrow())
    demo.facts["wap_rejected"] = failed
    demo.record(
        f"write-audit-publish {failed['branch'][4:]}, failing the audit",
        time.perf_counter() - t0,
        "{loaded:,} orders loaded into branch {branch}; audit: {negative:,} negative amounts -> not published; "
        "branch deleted (the files only it held, {files}, are freed by the expiry below); main untouched: still version "
        "{version} with {orders:,} orders",
        loaded=failed["loaded"],
        branch=failed["branch"],
        negative=failed["negative"],
        files=len(failed["branch_only_files"]),
        version=failed["main_version_after"],
        orders=failed["main_rows_after"],
    )


def expire_history(demo: Demo) -> None:
    t = demo.table()
    versions = len(t.log.list_versions())
    t0 = time.perf_counter()
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0))
    first = demo.facts["tags"][0]
    still = t.scan(version=first).count()  # the tagged version's files were kept
    demo.facts["expiry"] = rep
    demo.record(
        "expire old versions",
        time.perf_counter() - t0,
        "{expired} of {versions} versions expired (version {kept}, the latest, kept; one record names the expired "
        "ones, whose files keep their slots taken a day, so a writer still holding one as its base rebases), "
        "{files} data and deletion-vector files and {manifests} manifests deleted, {mb:,.1f} MB freed; {for_tags} "
        "files kept because tags need them: tag {tag} still reads {orders:,} orders",
        expired=len(rep.expired_versions),
        versions=versions,
        kept=rep.earliest_retained,
        files=len(rep.deleted_files),
        manifests=len(rep.deleted_manifests),
        mb=rep.deleted_bytes / 1e6,
        for_tags=rep.kept_for_tags,
        tag=first,
        orders=still,
    )


def compact_files(demo: Demo) -> None:
    from lamina.spark import compact

    t0 = time.perf_counter()
    r = compact(demo.spark, demo.table(), target_file_size=64 * 1024 * 1024)  # groups rewritten by Spark tasks
    demo.facts["compaction"] = r
    demo.record(
        "compact (Spark)",
        time.perf_counter() - t0,
        "files {before} -> {after}: {inputs} small or with deletes rewritten as {outputs} in {groups} Spark tasks, "
        "{rows:,} rows, version {version}",
        before=r.files_before,
        after=r.files_after,
        inputs=r.input_files,
        outputs=r.output_files,
        groups=r.groups,
        rows=r.rows_written,
        version=r.version,
    )


def check_table(demo: Demo) -> None:
    t0 = time.perf_counter()
    rep = fsck(demo.table())
    info = demo.catalog.table_info(TABLE)
    by_path = lamina.open_table(demo.uri)  # by path: the hint and versions, no catalog
    if by_path.version != info.version or by_path.uuid != info.uuid:
        raise SystemExit(f"a path reader sees version {by_path.version}, the catalog {info.version}")
    snap = demo.catalog.snapshot()  # both tables at one catalog state
    wrong = summary_disagreements(snap)
    if wrong:
        raise SystemExit(f"the summary disagrees with the orders at {snap.versions}: {wrong[:3]}")
    txs = demo.facts.get("transactions", [])
    unrecorded = [tx["id"] for tx in txs if not demo.catalog.transaction_committed(tx["id"])]
    if unrecorded:
        raise SystemExit(f"catalog transactions {unrecorded} are not recorded in the catalog")
    demo.record(
        "fsck",
        time.perf_counter() - t0,
        "{checked} files checked, {missing} missing, {unreferenced} unreferenced; catalog row and path reader agree "
        "on version {version}; in catalog snapshot {snapshot} {summary} agrees with {table} on every day; "
        "{transactions} catalog transactions, each recorded in the catalog",
        checked=rep.checked_files,
        missing=len(rep.missing),
        unreferenced=len(rep.unreferenced),
        version=info.version,
        snapshot=snap.versions,
        transactions=len(txs),
    )
    if not rep.ok:
        raise SystemExit(f"fsck failed: {rep}")


STEPS: list[tuple[str, Callable[[Demo], None]]] = [
    ("initial load", initial_load),
    ("daily increments", daily_increments),
    ("filtered queries", filtered_queries),
    ("time travel", time_travel),
    ("query as of a tag", query_tag),
    ("merge changes", merge_changes),
    ("incremental read", incremental_read),
    ("query from DuckDB and Polars", query_without_spark),
    ("streaming read", streaming_read),
    ("write-audit-publish", write_audit_publish),
    ("compact", compact_files),
    ("expire old versions", expire_history),
    ("check", check_table),
]


# --- summary ---------------------------------------------------------------------------------


def summary_figures(demo: Demo) -> dict[str, Any]:
    """What the summary prints: each retained version of the orders (as ``history`` rows:
    version, operation, added files and rows, total files and rows), the latest version,
    how many are retained, its files and rows, and the compaction's files before and after."""
    t = demo.table()
    versions = []
    for h in reversed(t.history()):
        s = h["summary"]
        operation = h["operation"] + (f" ({s['branch']}, {s['publish']})" if h["operation"] == "publish" else "")
        versions.append(
            {
                "version": h["version"],
                "operation": operation,
                "added_files": s.get("added-files"),
                "added_rows": s.get("added-records"),
                "total_files": s.get("total-files", 0),
                "total_rows": s.get("total-records", 0),
            }
        )
    r = demo.facts.get("compaction")
    return {
        "versions": versions,
        "version": t.version,
        "retained": len(t.log.list_versions()),
        "files": len(t.scan().plan()),
        "rows": t.scan().count(),
        "compaction": None if r is None else (r.files_before, r.files_after),
    }


def print_summary(demo: Demo, total_s: float) -> None:
    f = demo.figures["summary"] = summary_figures(demo)
    hist = RichTable(title=f"Versions of {TABLE} ({demo.uri})")
    for col in ("version", "operation", "added files", "added rows", "total files", "total rows"):
        hist.add_column(col, justify="right" if col != "operation" else "left")
    for v in f["versions"]:
        hist.add_row(
            str(v["version"]),
            Text(v["operation"]),
            "" if v["added_files"] is None else str(v["added_files"]),
            "" if v["added_rows"] is None else f"{v['added_rows']:,}",
            str(v["total_files"]),
            f"{v['total_rows']:,}",
        )
    console.print(hist)
    steps = RichTable(title="Steps")
    steps.add_column("step")
    steps.add_column("seconds", justify="right")
    steps.add_column("result")
    for name, secs, detail in demo.timings:
        steps.add_row(name, f"{secs:.1f}", Text(detail))
    console.print(steps)
    compacted = "" if f["compaction"] is None else f"; compaction: {f['compaction'][0]} -> {f['compaction'][1]} files"
    console.print(
        Text.assemble(
            (
                f"{TABLE}: version {f['version']} ({f['retained']} retained), {f['files']} files, {f['rows']:,} rows",
                "bold",
            ),
            f" in {demo.uri} (catalog {demo.catalog.uri}){compacted}; whole job {total_s:.1f} s",
        )
    )
    console.print(f"Explore it in a browser (local, read-only): [bold]{explorer_command(demo.catalog)}[/bold]")


def explorer_command(catalog: Any) -> str:
    """The command that opens the table explorer on the demo's catalog."""
    return shlex.join(["lamina", "ui", catalog.reopen_uri()[0]])


def start_spark() -> Any:
    from lamina.spark import spark_session

    spark = spark_session(
        master="local[2]",
        app_name="lamina-demo",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "2g",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(warehouse: str = "warehouse") -> None:
    t_start = time.perf_counter()
    shutil.rmtree(warehouse, ignore_errors=True)
    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("starting Spark", total=len(STEPS) + 1)
        t0 = time.perf_counter()
        spark = start_spark()
        demo = Demo(spark, warehouse, lamina.load_catalog(f"sqlite:///{warehouse}/catalog.db"), progress)
        demo.record("start Spark (local[2])", time.perf_counter() - t0, "Spark {version}", version=spark.version)
        progress.advance(task)
        for name, step in STEPS:
            progress.update(task, description=name)
            step(demo)
            progress.advance(task)
        progress.update(task, description="done")
    print_summary(demo, time.perf_counter() - t_start)
    demo.catalog.close()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
