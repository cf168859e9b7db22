"""TPC-H's 22 queries over Lamina through DuckDB and Polars, against the engines' own Parquet
readers over the same files, and DuckDB over deltalake's and Lance's datasets (issue 48; the case
`tpch`, which `make bench-tpch` runs; --only picks the parts beside DuckDB's: peers, polars, s3).

    .venv/bin/python bench/run.py tpch --set scale=0.1 --reps 1 --out /tmp/t.md   # smaller

Data: DuckDB's tpch extension (``CALL dbgen(sf=...)``, duckdb-extension-tpch in the bench
extra), loaded into Lamina (``write.max-rows-per-file`` 1,000,000, one append per table),
then, for the "deletes" half, 0.5% of lineitem's and of orders' rows deleted by key (a merge
on lineitem's (l_orderkey, l_linenumber), a delete of orders' o_orderkey IN (...)): deletion
vectors, no file rewritten. Baselines read the same files: without deletes, ``read_parquet``
of the Lamina table's own files; with deletes, ``read_parquet`` of a Lamina table of the live
rows (the same writer and layout; the rows of the 0.5% gone). Every answer is checked against
DuckDB's over raw Parquet of the same rows.

Readers (each table a view; per query a fresh relation, on one long-lived connection per
reader, so a reader's setup is what it pays per query): ``lamina.duckdb.sql(query,
con=con, tables=...)``; ``read_parquet`` views; DuckDB over ``DeltaTable.to_pyarrow_dataset()``
and ``lance.dataset()`` (both written from the same rows; deletes made by their own
delete); Polars' SQL (``pl.SQLContext``) over ``lamina.polars.scan`` vs over
``pl.scan_parquet`` of the same files (the queries Polars' SQL runs); on S3 (moto, a smaller
scale: ``s3_scale``), DuckDB and Polars over Lamina vs the same engine reading the same
files by ``s3://`` URL. Runs alternate reader by reader, order reversed every repetition;
medians of ``reps``. The machine is shared: ratios, not absolute times.

Targets (issue 48): DuckDB over Lamina, total over the queries, ≤ 1.05× `read_parquet` without
deletes and ≤ 1.2× with them, no single query over 1.5×; ≤ 0.5× DuckDB over deltalake's and
Lance's datasets; Polars ≤ 1.1× `scan_parquet`; on S3 ≤ 1.1× the engine reading the same files.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from common import TESTS_DIR, fmt_s, fmt_times, say
from registry import Run, case, check, module
from report import Report, Section, Target

if str(TESTS_DIR / "engines") not in sys.path:
    sys.path.append(str(TESTS_DIR / "engines"))  # tests/engines/tpch.py: the workload

SECTION = "TPC-H through DuckDB and Polars (issue 48)"
PARTS = ("peers", "polars", "s3")  # beside DuckDB over Lamina vs read_parquet, which always runs


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def files_view(con: Any, name: str, uris: list[str]) -> None:
    con.execute(f"SET VARIABLE files_{name} = ?", [uris])
    con.execute(f"CREATE OR REPLACE VIEW {name} AS FROM read_parquet(getvariable('files_{name}'))")


def uris_of(t: Any) -> list[str]:
    from lamina.data.export import LiveFiles

    return LiveFiles.of(t.scan()).uris


def run_readers(readers: dict[str, Callable[[str], list]], queries: dict[int, str], want: dict[int, list], reps: int) -> dict:
    """Per query, each reader's median time and whether every answer was right."""
    from tpch import same_answer

    out: dict = {}
    names = list(readers)
    for n, q in queries.items():
        times = {r: [] for r in names}
        ok = {r: True for r in names}
        for k in range(reps):
            for r in (names if k % 2 == 0 else names[::-1]):
                try:
                    dt, rows = timed(lambda: readers[r](q))
                except Exception as e:  # noqa: BLE001 - recorded: the reader cannot run this query
                    times[r].append(float("nan"))
                    ok[r] = f"error: {str(e).splitlines()[0][:80]}"
                    continue
                times[r].append(dt)
                if ok[r] is True and not same_answer(rows, want[n]):
                    ok[r] = False
        out[n] = {r: {"s": statistics.median(times[r]), "ok": ok[r]} for r in names}
        say(f"Q{n} " + " ".join(f"{r}={out[n][r]['s']:.3f}{'' if out[n][r]['ok'] is True else '!'}" for r in names))
    return out


@dataclass
class Sizes:
    scale: float = 1.0
    s3_scale: float = 0.1
    reps: int = 3


def tpch_extension() -> bool:
    from tpch import tpch_connection

    return tpch_connection() is not None


@case("tpch", heavy=True, title=SECTION, sizes=Sizes, quick=dict(scale=0.1, s3_scale=0.01, reps=1),
      tiny=dict(scale=0.01, s3_scale=0.01, reps=1), only={"parts": PARTS},
      needs=(module("duckdb", "polars", "deltalake", "lance", "moto"), check("DuckDB's tpch extension", tpch_extension)),
      versions=("lamina", "duckdb", "polars", "deltalake", "pylance", "pyarrow"), reps="reps")
def tpch_queries(run: Run) -> Report:
    """TPC-H's 22 queries through DuckDB and Polars over Lamina vs their own readers, the peers, S3."""
    import duckdb
    import polars as pl

    import lamina.duckdb as ldb
    import lamina.polars as lpl
    from tpch import TABLES, deleted_keys, generate, lamina_tables, live_rows

    args, parts, root = run.sizes, run.only("parts"), run.ws.new("tpch")
    results: dict = {}
    t0 = time.perf_counter()
    tables, queries = generate(args.scale)
    keys = deleted_keys(tables)
    live = live_rows(tables, keys)
    plain = lamina_tables(f"{root}/plain", tables, None, 1_000_000)
    deleted = lamina_tables(f"{root}/deleted", tables, keys, 1_000_000)
    live_lamina = lamina_tables(f"{root}/live", {k: live[k] for k in ("lineitem", "orders")}, None, 1_000_000)
    results["build_s"] = time.perf_counter() - t0
    say(f"built in {results['build_s']:.1f} s")

    def raw_con(rows: dict[str, Any]) -> Any:
        con = duckdb.connect()
        for name in TABLES:
            con.register(f"{name}", rows[name])
        return con

    want = {}
    for kind, rows in (("all", tables), ("live", live)):
        con = raw_con(rows)
        want[kind] = {n: con.sql(q).fetchall() for n, q in queries.items()}

    # each half: the Lamina tables, and the files of the same rows its baseline reads
    halves = (
        ("no deletes", plain, {n: uris_of(plain[n]) for n in TABLES}),
        ("deletes", deleted, {n: uris_of(live_lamina[n]) if n in live_lamina else uris_of(deleted[n]) for n in TABLES}),
    )
    for kind, lam, raw_uris in halves:  # DuckDB
        con_raw = duckdb.connect()
        for n in TABLES:
            files_view(con_raw, n, raw_uris[n])
        con_lam = duckdb.connect()
        readers = {
            "read_parquet": lambda q, c=con_raw: c.sql(q).fetchall(),
            "lamina.duckdb.sql": lambda q, c=con_lam, lam=lam: ldb.sql(q, con=c, tables=lam).fetchall(),
        }
        if "peers" in parts:
            readers.update(peer_readers(root, kind, tables, keys))
        say(f"DuckDB, {kind}")
        results[f"duckdb {kind}"] = run_readers(readers, queries, want["all" if kind == "no deletes" else "live"], args.reps)

    if "polars" in parts:
        for kind, lam, raw_uris in halves:
            ctx_raw = pl.SQLContext({n: pl.scan_parquet(raw_uris[n]) for n in TABLES})
            runnable = polars_runnable(ctx_raw, queries)
            readers = {
                "scan_parquet": lambda q, c=ctx_raw: c.execute(q).collect().rows(),
                "lamina.polars.scan": lambda q, lam=lam: pl.SQLContext({n: lpl.scan(t) for n, t in lam.items()}).execute(q).collect().rows(),
            }
            say(f"Polars, {kind}")
            results[f"polars {kind}"] = run_readers(readers, runnable, want["all" if kind == "no deletes" else "live"], args.reps)

    if "s3" in parts:
        results["s3"] = bench_s3(args.s3_scale, args.reps)
    say(summary(results))
    return tpch_report(args, parts, results)


def polars_runnable(ctx: Any, queries: dict[int, str]) -> dict[int, str]:
    """The queries Polars' SQL runs (over ctx's tables): the others are left out of its parts."""
    runnable = {}
    for n, q in queries.items():
        try:
            ctx.execute(q).collect()
            runnable[n] = q
        except Exception:  # noqa: BLE001 - not a query Polars' SQL runs
            pass
    return runnable


def peer_readers(root: str, kind: str, tables: dict, keys: dict) -> dict:
    """DuckDB over deltalake's and Lance's datasets of the same rows; their deletes by their own delete."""
    import duckdb
    import lance
    from deltalake import DeltaTable, write_deltalake
    from tpch import TABLES

    out = {}
    dcon, lcon = duckdb.connect(), duckdb.connect()
    for n in TABLES:
        d = f"{root}/delta-{kind.replace(' ', '-')}/{n}"
        write_deltalake(d, tables[n])
        ds_path = f"{root}/lance-{kind.replace(' ', '-')}/{n}.lance"
        lance.write_dataset(tables[n], ds_path, max_rows_per_file=1_000_000)
        if kind == "deletes" and n in keys:
            where = _key_predicate(n, keys[n])
            DeltaTable(d).delete(where)
            lance.dataset(ds_path).delete(where)
        dcon.register(n, DeltaTable(d).to_pyarrow_dataset())
        lcon.register(n, lance.dataset(ds_path))
    out["deltalake dataset"] = lambda q, c=dcon: c.sql(q).fetchall()
    out["lance dataset"] = lambda q, c=lcon: c.sql(q).fetchall()
    return out


def _key_predicate(name: str, keys: Any) -> str:
    if name == "orders":
        return f"o_orderkey IN ({', '.join(map(str, keys['o_orderkey'].to_pylist()))})"
    pairs = zip(keys["l_orderkey"].to_pylist(), keys["l_linenumber"].to_pylist())
    return " OR ".join(f"(l_orderkey = {a} AND l_linenumber = {b})" for a, b in pairs)


def bench_s3(scale: float, reps: int) -> dict:
    """DuckDB and Polars over Lamina on S3 (moto) vs the same engine reading the same files by URL."""
    import uuid

    import duckdb
    import polars as pl
    from support import BUCKET
    from support.s3server import start_s3
    from tpch import TABLES, generate

    import lamina
    import lamina.duckdb as ldb
    import lamina.polars as lpl
    from lamina.duckdb.s3 import s3_ready

    tables, queries = generate(scale)
    server = start_s3()
    try:
        server.create_bucket(BUCKET)
        opts = server.storage_options
        root = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
        lam = {}
        for n, t in tables.items():
            tab = lamina.create_table(f"{root}/{n}", t.schema, storage_options=opts)
            tab.append(t)
            lam[n] = tab
        con_raw = duckdb.connect()
        for n in TABLES:
            s3_ready(con_raw, lam[n].io)  # (the secret lamina.duckdb makes: the same endpoint and keys)
            files_view(con_raw, n, uris_of(lam[n]))
        con_lam = duckdb.connect()
        con_want = duckdb.connect()
        for n, t in tables.items():
            con_want.register(n, t)
        want = {n: con_want.sql(q).fetchall() for n, q in queries.items()}
        readers = {
            "read_parquet s3://": lambda q: con_raw.sql(q).fetchall(),
            "lamina.duckdb.sql s3": lambda q: ldb.sql(q, con=con_lam, tables=lam).fetchall(),
        }
        out = {"duckdb": run_readers(readers, queries, want, reps)}
        from lamina.polars import _storage_options  # noqa: PLC2701 - the bench reads the same options

        so = _storage_options(lam["nation"].io)
        ctx_raw = pl.SQLContext({n: pl.scan_parquet(uris_of(lam[n]), storage_options=so) for n in TABLES})
        runnable = polars_runnable(ctx_raw, queries)
        readers = {
            "scan_parquet s3://": lambda q: ctx_raw.execute(q).collect().rows(),
            "lamina.polars.scan s3": lambda q: pl.SQLContext({n: lpl.scan(t) for n, t in lam.items()}).execute(q).collect().rows(),
        }
        out["polars"] = run_readers(readers, runnable, want, reps)
        return out
    finally:
        server.stop()


def summary(results: dict) -> str:
    lines = []
    for part, per_query in results.items():
        if not isinstance(per_query, dict) or part in ("s3",):
            continue
        if not all(isinstance(v, dict) for v in per_query.values()):
            continue
        readers = list(next(iter(per_query.values())))
        tot = {r: sum(v[r]["s"] for v in per_query.values()) for r in readers}
        lines.append(f"{part}: " + ", ".join(f"{r} {tot[r]:.2f} s" for r in readers))
    return "\n".join(lines)


# --------------------------------------------------------------------------- report
# part of the results -> (label, Lamina's reader, the baseline reader, target on the total, no query above)
JUDGED = [
    ("duckdb no deletes", "DuckDB, no deletes: `lamina.duckdb.sql` / `read_parquet` of the same files",
     "lamina.duckdb.sql", "read_parquet", 1.05, 1.5),
    ("duckdb deletes", "DuckDB, deletes: `lamina.duckdb.sql` / `read_parquet` of the live rows",
     "lamina.duckdb.sql", "read_parquet", 1.2, 1.5),
    ("duckdb no deletes", "DuckDB, no deletes: `lamina.duckdb.sql` / DuckDB over deltalake's dataset",
     "lamina.duckdb.sql", "deltalake dataset", 0.5, None),
    ("duckdb no deletes", "DuckDB, no deletes: `lamina.duckdb.sql` / DuckDB over Lance's dataset",
     "lamina.duckdb.sql", "lance dataset", 0.5, None),
    ("duckdb deletes", "DuckDB, deletes: `lamina.duckdb.sql` / DuckDB over deltalake's dataset",
     "lamina.duckdb.sql", "deltalake dataset", 0.5, None),
    ("duckdb deletes", "DuckDB, deletes: `lamina.duckdb.sql` / DuckDB over Lance's dataset",
     "lamina.duckdb.sql", "lance dataset", 0.5, None),
    ("polars no deletes", "Polars SQL, no deletes: `lamina.polars.scan` / `scan_parquet`",
     "lamina.polars.scan", "scan_parquet", 1.1, None),
    ("polars deletes", "Polars SQL, deletes: `lamina.polars.scan` / `scan_parquet` of the live rows",
     "lamina.polars.scan", "scan_parquet", 1.1, None),
    ("s3 duckdb", "S3 (moto), DuckDB: `lamina.duckdb.sql` / `read_parquet` of the same `s3://` files",
     "lamina.duckdb.sql s3", "read_parquet s3://", 1.1, None),
    ("s3 polars", "S3 (moto), Polars SQL: `lamina.polars.scan` / `scan_parquet` of the same `s3://` files",
     "lamina.polars.scan s3", "scan_parquet s3://", 1.1, None),
]


def tpch_report(args: Sizes, parts: list[str], results: dict) -> Report:
    sec = Section(key="tpch", title="", what=(
        f"TPC-H at scale factor {args.scale:g} (S3: {args.s3_scale:g}); {args.reps} repetition(s) per query, one "
        "long-lived connection (or SQLContext) per reader, so Lamina's figures include its per-query work (open, "
        "plan or cached view, bind). Ratios: the totals of the medians over the queries a part ran."),
        columns=["part", "queries", "Lamina total / baseline total", "worst single query", "answers right", "target",
                 "verdict"])
    runs = dict(results)
    runs.update({f"s3 {k}": v for k, v in results.get("s3", {}).items()})
    targets = []
    for part, label, mine, base, limit, per_query in JUDGED:
        per = runs.get(part)
        if not per or mine not in next(iter(per.values())) or base not in next(iter(per.values())):
            continue
        ratios = {n: v[mine]["s"] / v[base]["s"] for n, v in per.items() if v[base]["s"] > 0}
        ratios = {n: r for n, r in ratios.items() if not math.isnan(r)}
        total = sum(v[mine]["s"] for v in per.values()) / sum(v[base]["s"] for v in per.values())
        worst = max(ratios, key=ratios.get) if ratios else None
        right = sum(v[mine]["ok"] is True for v in per.values())
        ok_total = total <= limit
        tgt = f"≤ {limit}×" + (f", no query > {per_query}×" if per_query else "")
        verdicts = f"total {'PASS' if ok_total else 'MISS'}"
        targets.append(Target(f"{label.split(':')[0]}, total ≤ {limit}× {base}", ok_total and right == len(per),
                              fmt_times(total)))
        if per_query:
            ok_each = all(r <= per_query for r in ratios.values())
            verdicts += f"; single query {'PASS' if ok_each else 'MISS'}"
            targets.append(Target(f"{label.split(':')[0]}, no query over {per_query}× {base}", ok_each,
                                  f"Q{worst} {fmt_times(ratios[worst])}" if worst else ""))
        sec.rows.append([label, str(len(per)), fmt_times(total), f"Q{worst} {fmt_times(ratios[worst])}" if worst else "–",
                         f"{right} of {len(per)}", tgt, verdicts])
    not_run = [p for p in PARTS if p not in parts]
    if not_run:
        sec.notes.append(f"Not run: {', '.join(not_run)} (--only).")
    sec.notes.append(f"Building the tables (untimed): {fmt_s(results['build_s'])}.")
    return Report(title=SECTION, targets=targets, sections=[sec], raw=results)
