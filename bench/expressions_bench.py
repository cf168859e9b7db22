"""SQL predicates in ``scan(where=...)`` against DuckDB and deltalake (issue 50), in one run (the
case `expressions`).

    .venv/bin/python bench/run.py expressions           # -> "## SQL predicates (issue 50)" in BENCHMARKS.md
    .venv/bin/python bench/run.py expressions --quick   # smoke test -> bench/out/BENCHMARKS.expressions.md

Data (built once, untimed): ``rows`` (10,000,000) rows in ``files`` (100) files of id int64 (sorted), s string
(sorted: ``k<file>-<row>``), email string (``User<n>@Example.com``, n = (id * 7919) % 50,000, case mixed),
ts timestamp (sorted, 30 s apart: 9.5 years), amount double, qty int64 ((id * 7919 + 13) % 10,000). Lamina: one
append with `write.max-rows-per-file`; deltalake: the same rows as 100 Parquet files (pyarrow) registered in one
transaction with min/max statistics; DuckDB reads Lamina's own data files (the same bytes).

Predicates, each in the SQL every engine reads (the same text; DuckDB's `ts` literal is a TIMESTAMP):
- arithmetic: ``qty * 2 + 1 < 21`` (0.1% of rows, in every file);
- prefix: ``s LIKE 'k0042%'`` (one file's rows);
- lower-in: ``lower(email) IN ('user1@example.com', 'user77@example.com', 'user4999@example.com')`` (every file);
- date_trunc: ``date_trunc('month', ts) = TIMESTAMP '2017-05-01 00:00:00'`` (one month: one or two files).

Readers, every run from the table's location, all columns of the matching rows into one Arrow table:
- Lamina: ``lamina.open_table(uri).scan(where=...).to_arrow()``;
- DuckDB: ``con.sql("SELECT * FROM read_parquet(<the 100 files>) WHERE ...").fetch_arrow_table()`` (one
  connection, made untimed; ``to_arrow_table()``);
- deltalake: ``QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t WHERE ...").read_all()``
  (DataFusion's SQL over the Delta table).
Diagnostic readers (no target): Lamina's scan and DuckDB's query returning only the id column. Interleaved: ``rounds`` rounds, each reader in turn (order rotating) runs each predicate once, after one untimed
run of each; figures are p50s; every answer is checked (row count and sum of ids equal Lamina's). Lamina's files
read are its plan's. Targets: Lamina's time ≤ 1.0× DuckDB's for every predicate; the prefix and date_trunc
predicates read ≤ 2% of the files.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common import fmt_s, fmt_x, now, p50, rotated, say
from registry import Run, case, module
from report import Report, Section, Target, verdict

SECTION_TITLE = "SQL predicates (issue 50)"
T0 = dt.datetime(2017, 1, 1)
PREDICATES = {
    "arithmetic": "qty * 2 + 1 < 21",
    "prefix": "s LIKE 'k0042%'",
    "lower-in": "lower(email) IN ('user1@example.com', 'user77@example.com', 'user4999@example.com')",
    "date_trunc": "date_trunc('month', ts) = TIMESTAMP '2017-05-01 00:00:00'",
}
PRUNED = ("prefix", "date_trunc")  # must read <= 2% of the files


def build_data(rows: int, files: int) -> pa.Table:
    ids = np.arange(rows, dtype=np.int64)
    per = rows // files
    n = (ids * 7919) % 50_000
    user = np.char.add("User", n.astype(str))
    email = np.where(ids % 2 == 0, np.char.add(user, "@Example.com"), np.char.add(np.char.lower(user), "@example.com"))
    rng = np.random.default_rng(50)
    return pa.table({
        "id": ids,
        "s": pa.array(np.char.add(np.char.add("k", np.char.zfill((ids // per).astype(str), 4)),
                                  np.char.add("-", np.char.zfill((ids % per).astype(str), 6)))),
        "email": pa.array(email),
        "ts": pa.array(np.datetime64(T0, "us") + (ids * 30_000_000).astype("timedelta64[us]"), pa.timestamp("us")),
        "amount": rng.random(rows),
        "qty": (ids * 7919 + 13) % 10_000,
    })


def delta_files(uri: str, parts: list[pa.Table], stats_columns: list[str]) -> None:
    """A deltalake table whose version 1 holds one Parquet file per part, with min/max statistics
    (timestamps as ISO text, as Delta keeps them): ``common.delta_table_of_files`` with dates."""
    import json

    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    schema = parts[0].schema
    dt_ = DeltaTable.create(uri, schema=schema)
    adds = []
    for i, part in enumerate(parts):
        name = f"part-{i:05d}.parquet"
        pq.write_table(part, os.path.join(uri, name))
        lo, hi = ({c: pc.min_max(part.column(c))[k].as_py() for c in stats_columns} for k in ("min", "max"))
        stats = {"numRecords": part.num_rows, "minValues": lo, "maxValues": hi,
                 "nullCount": {c: part.column(c).null_count for c in schema.names}}
        text = json.dumps(stats, default=lambda v: v.isoformat(timespec="microseconds"))
        adds.append(AddAction(name, os.path.getsize(os.path.join(uri, name)), {}, int(time.time() * 1000), True, text))
    dt_.create_write_transaction(adds, mode="append", schema=schema)


@dataclass
class Sizes:
    rows: int = 10_000_000
    files: int = 100
    rounds: int = 7


@case("expressions", title=SECTION_TITLE, sizes=Sizes, quick=dict(rows=1_000_000, rounds=2),
      tiny=dict(rows=20_000, rounds=1), needs=(module("duckdb", "deltalake"),),
      versions=("lamina", "deltalake", "duckdb", "pyarrow"), reps="rounds")
def expressions(run: Run) -> Report:
    """SQL predicates in scan(where=...): Lamina against DuckDB and deltalake, and the files Lamina reads."""
    import duckdb
    from deltalake import DeltaTable, QueryBuilder

    import lamina

    cfg, ws = run.sizes, run.ws
    data = build_data(cfg.rows, cfg.files)
    per = cfg.rows // cfg.files
    luri = ws.new("lamina") + "/t"
    t = lamina.create_table(luri, data.schema, properties={"write.max-rows-per-file": str(per)})
    t0 = now()
    t.append(data)
    build_lamina = now() - t0
    files = [t.io.local_path(p) for p in t.scan().plan().entries.column("path").to_pylist()]
    duri = ws.new("delta")
    t0 = now()
    delta_files(duri, [data.slice(i * per, per) for i in range(cfg.files)], ["id", "s", "email", "ts", "qty"])
    build_delta = now() - t0
    say(f"built: lamina {len(files)} files in {build_lamina:.1f} s, deltalake in {build_delta:.1f} s")

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET VARIABLE lamina_bench_files = ?", [files])

    def lamina_run(where: str) -> pa.Table:
        return lamina.open_table(luri).scan(where=where).to_arrow()

    def duckdb_run(where: str) -> pa.Table:
        return con.sql(f"SELECT * FROM read_parquet(getvariable('lamina_bench_files')) WHERE {where}").to_arrow_table()

    def delta_run(where: str) -> pa.Table:
        return pa.table(QueryBuilder().register("t", DeltaTable(duri)).execute(f"SELECT * FROM t WHERE {where}").read_all())

    def lamina_ids_run(where: str) -> pa.Table:  # diagnostic: the same scan, returning the id column only
        return lamina.open_table(luri).scan(where=where, columns=["id"]).to_arrow()

    def duckdb_ids_run(where: str) -> pa.Table:
        return con.sql(f"SELECT id FROM read_parquet(getvariable('lamina_bench_files')) WHERE {where}").to_arrow_table()

    readers = {"lamina": lamina_run, "duckdb": duckdb_run, "deltalake": delta_run,
               "lamina-id": lamina_ids_run, "duckdb-id": duckdb_ids_run}
    times: dict[tuple[str, str], list[float]] = {(r, q): [] for r in readers for q in PREDICATES}
    answers: dict[str, tuple[int, int]] = {}
    errors: dict[tuple[str, str], str] = {}

    def check(reader: str, q: str, out: pa.Table) -> None:
        got = (out.num_rows, int(pc.sum(out.column("id")).as_py() or 0))
        if reader == "lamina":
            answers.setdefault(q, got)
        elif got != answers[q]:
            raise AssertionError(f"{reader} {q}: {got} rows/sum, Lamina {answers[q]}")

    for q, where in PREDICATES.items():  # untimed first runs (Lamina's first: its answer is the reference)
        for r, fn in readers.items():
            try:
                check(r, q, fn(where))
            except Exception as e:  # noqa: BLE001
                errors[(r, q)] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    for rnd in range(cfg.rounds):
        for q, where in PREDICATES.items():
            for r in rotated(list(readers), rnd):
                if (r, q) in errors:
                    continue
                t0 = now()
                out = readers[r](where)
                times[(r, q)].append(now() - t0)
                check(r, q, out)
        say(f"round {rnd + 1}/{cfg.rounds}")
    files_read = {q: lamina.open_table(luri).scan(where=w).plan().entries.num_rows for q, w in PREDICATES.items()}

    sec = Section(key="predicates", title="", what="", columns=[
        "predicate", "rows matched", "Lamina files read", "lamina", "duckdb", "deltalake", "Lamina / DuckDB",
        "Lamina / deltalake", "target", "id only: lamina / duckdb"])
    targets = []
    for q, where in PREDICATES.items():
        lam, duck, delta = (p50(times[(r, q)]) for r in ("lamina", "duckdb", "deltalake"))
        vs_duck = lam / duck if lam and duck else None
        vs_delta = lam / delta if lam and delta else None
        ok_time = vs_duck is not None and vs_duck <= 1.0
        target = f"≤ 1.0× DuckDB: {verdict(ok_time)}"
        targets.append(Target(f"`{q}`: Lamina ≤ 1.0× DuckDB's time", ok_time, fmt_x(vs_duck)))
        if q in PRUNED:
            ok_files = files_read[q] <= 0.02 * len(files)
            target += f"; ≤ 2% of files: {verdict(ok_files)}"
            targets.append(Target(f"`{q}`: Lamina reads ≤ 2% of the files", ok_files, f"{files_read[q]} of {len(files)}"))
        cell = {r: (errors.get((r, q)) or fmt_s(p50(times[(r, q)]))) for r in readers}
        sec.rows.append([f"`{where}`", f"{answers.get(q, ('?',))[0]:,}", f"{files_read[q]} of {len(files)}",
                         cell["lamina"], cell["duckdb"], cell["deltalake"], fmt_x(vs_duck) if vs_duck else "n/a",
                         fmt_x(vs_delta) if vs_delta else "n/a", target, f"{cell['lamina-id']} / {cell['duckdb-id']}"])
    sec.notes = missed_notes(times, files_read, len(files))
    facts = [
        f"Data (built once, untimed): {cfg.rows:,} rows in {cfg.files} files (Lamina: one append, {build_lamina:.1f} s; "
        f"deltalake: pyarrow files + one transaction, {build_delta:.1f} s). bench/expressions_bench.py's docstring has "
        "the columns.",
        "Timing: from the table's location to one Arrow table of all columns of the matching rows; "
        f"{cfg.rounds} rounds, readers in rotating order, p50. Ratios are Lamina's time / the other's (≤ 1: Lamina is "
        "faster). DuckDB reads Lamina's data files with `read_parquet` (its threads; filter pushdown into the Parquet "
        "reader); deltalake runs DataFusion's SQL (`QueryBuilder`). Every answer is checked against Lamina's (row count, "
        "sum of ids). Diagnostic (no target): the same scans returning the id column only (`columns=[\"id\"]`, "
        "`SELECT id`).",
    ]
    raw = {"times": {f"{r}|{q}": v for (r, q), v in times.items()}, "files_read": files_read,
           "errors": {f"{r}|{q}": e for (r, q), e in errors.items()}}
    return Report(title=SECTION_TITLE, facts=facts, targets=targets, sections=[sec], raw=raw)


def missed_notes(times: dict[tuple[str, str], list[float]], files_read: dict[str, int], nfiles: int) -> list[str]:
    """Per predicate where Lamina is slower than DuckDB: where the time goes, from the id-only runs."""
    notes = []
    for q in PREDICATES:
        lam, duck, lam_id, duck_id = (p50(times[(r, q)]) for r in ("lamina", "duckdb", "lamina-id", "duckdb-id"))
        if not (lam and duck and lam_id and duck_id) or lam <= duck:
            continue
        rest_lam, rest_duck = lam - lam_id, duck - duck_id
        decode_bound = rest_lam - rest_duck > lam_id - duck_id
        why = ("decoding the other columns: pyarrow's Parquet scanner decodes every column of every row of a batch before it "
               "filters (no late materialization), where DuckDB decodes them for the rows that pass only" if decode_bound else
               "finding the rows: reading the predicate's columns and evaluating it with Arrow's kernels "
               "(for `lower(...)`, utf8_lower over every string) on 2 cores, against DuckDB's reader and kernels")
        notes.append(
            f"**MISS** `{q}`: Lamina {fmt_s(lam)}, DuckDB {fmt_s(duck)} ({lam / duck:.2f}×); Lamina reads "
            f"{files_read[q]} of {nfiles} files (the files that may hold a match). From the id-only runs: finding the rows "
            f"takes Lamina {fmt_s(lam_id)}, DuckDB {fmt_s(duck_id)} ({lam_id / duck_id:.2f}×); the other columns add "
            f"Lamina {fmt_s(max(rest_lam, 0.0))}, DuckDB {fmt_s(max(rest_duck, 0.0))}. Bottleneck: {why}.")
    return notes
