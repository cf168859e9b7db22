#!/usr/bin/env python
"""TPC-H's 22 queries over Lamina through DuckDB and Polars, against the engines' own Parquet
readers over the same files, and DuckDB over deltalake's and Lance's datasets (issue 48).

    make bench-tpch                                   # = .venv/bin/python bench/tpch_bench.py
    .venv/bin/python bench/tpch_bench.py --scale 0.1 --reps 1 --out /tmp/t.md   # smaller

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
scale: ``--s3-scale``), DuckDB and Polars over Lamina vs the same engine reading the same
files by ``s3://`` URL. Runs alternate reader by reader, order reversed every repetition;
medians of ``--reps``. The machine is shared: ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "engines")]

import duckdb  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import lamina  # noqa: E402
import lamina.duckdb as ldb  # noqa: E402
import lamina.polars as lpl  # noqa: E402
from lamina.data.export import LiveFiles  # noqa: E402
from tpch import TABLES, deleted_keys, generate, lamina_tables, live_rows, same_answer  # noqa: E402

SECTION = "TPC-H through DuckDB and Polars (issue 48)"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def files_view(con: Any, name: str, uris: list[str]) -> None:
    con.execute(f"SET VARIABLE files_{name} = ?", [uris])
    con.execute(f"CREATE OR REPLACE VIEW {name} AS FROM read_parquet(getvariable('files_{name}'))")


def uris_of(t: Any) -> list[str]:
    return LiveFiles.of(t.scan()).uris


def run_readers(readers: dict[str, Callable[[str], list]], queries: dict[int, str], want: dict[int, list], reps: int) -> dict:
    """Per query, each reader's median time and whether every answer was right."""
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
        print(n, " ".join(f"{r}={out[n][r]['s']:.3f}{'' if out[n][r]['ok'] is True else '!'}" for r in names), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--s3-scale", type=float, default=0.1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: peers,polars,s3")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "tpch_results.json"))
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    results: dict = {"command": "bench/tpch_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                     "duckdb": duckdb.__version__, "polars": pl.__version__, "scale": args.scale, "reps": args.reps}
    with tempfile.TemporaryDirectory(prefix="tpch-bench-") as root:
        t0 = time.perf_counter()
        tables, queries = generate(args.scale)
        keys = deleted_keys(tables)
        live = live_rows(tables, keys)
        plain = lamina_tables(f"{root}/plain", tables, None, 1_000_000)
        deleted = lamina_tables(f"{root}/deleted", tables, keys, 1_000_000)
        live_lamina = lamina_tables(f"{root}/live", {k: live[k] for k in ("lineitem", "orders")}, None, 1_000_000)
        results["build_s"] = time.perf_counter() - t0
        print("built", results["build_s"], flush=True)

        def raw_con(rows: dict[str, Any]) -> Any:
            con = duckdb.connect()
            for name in TABLES:
                con.register(f"{name}", rows[name])
            return con

        want = {}
        for kind, rows in (("all", tables), ("live", live)):
            con = raw_con(rows)
            want[kind] = {n: con.sql(q).fetchall() for n, q in queries.items()}

        # DuckDB, without deletes and with them
        for kind, lam, raw_uris in (
            ("no deletes", plain, {n: uris_of(plain[n]) for n in TABLES}),
            ("deletes", deleted, {n: uris_of(live_lamina[n]) if n in live_lamina else uris_of(deleted[n]) for n in TABLES}),
        ):
            con_raw = duckdb.connect()
            for n in TABLES:
                files_view(con_raw, n, raw_uris[n])
            con_lam = duckdb.connect()
            readers = {
                "read_parquet": lambda q, c=con_raw: c.sql(q).fetchall(),
                "lamina.duckdb.sql": lambda q, c=con_lam, lam=lam: ldb.sql(q, con=c, tables=lam).fetchall(),
            }
            if "peers" not in skip:
                readers.update(peer_readers(root, kind, tables, keys))
            print("==", kind, flush=True)
            results[f"duckdb {kind}"] = run_readers(readers, queries, want["all" if kind == "no deletes" else "live"], args.reps)

        if "polars" not in skip:
            for kind, lam, raw_uris in (
                ("no deletes", plain, {n: uris_of(plain[n]) for n in TABLES}),
                ("deletes", deleted, {n: uris_of(live_lamina[n]) if n in live_lamina else uris_of(deleted[n]) for n in TABLES}),
            ):
                ctx_raw = pl.SQLContext({n: pl.scan_parquet(raw_uris[n]) for n in TABLES})
                runnable = {}
                for n, q in queries.items():
                    try:
                        ctx_raw.execute(q).collect()
                        runnable[n] = q
                    except Exception:  # noqa: BLE001 - not a query Polars' SQL runs
                        pass
                readers = {
                    "scan_parquet": lambda q, c=ctx_raw: c.execute(q).collect().rows(),
                    "lamina.polars.scan": lambda q, lam=lam: pl.SQLContext({n: lpl.scan(t) for n, t in lam.items()}).execute(q).collect().rows(),
                }
                print("== polars", kind, flush=True)
                results[f"polars {kind}"] = run_readers(readers, runnable, want["all" if kind == "no deletes" else "live"], args.reps)

        if "s3" not in skip:
            results["s3"] = bench_s3(args.s3_scale, args.reps)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    print(summary(results))
    return 0


def peer_readers(root: str, kind: str, tables: dict, keys: dict) -> dict:
    """DuckDB over deltalake's and Lance's datasets of the same rows; their deletes by their own delete."""
    import lance
    from deltalake import DeltaTable, write_deltalake

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

    from support import BUCKET
    from support.s3server import start_s3

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
            ldb._s3_ready(con_raw, lam[n].io)  # (the secret lamina.duckdb makes: the same endpoint and keys)
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
        runnable = {}
        for n, q in queries.items():
            try:
                ctx_raw.execute(q).collect()
                runnable[n] = q
            except Exception:  # noqa: BLE001
                pass
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


if __name__ == "__main__":
    sys.exit(main())
