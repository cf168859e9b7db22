"""Requests per operation on S3: Lamina vs deltalake vs Lance, counted, not timed (issue 19).

Every system's tables live in one local S3 server (moto, tests/support/s3server.py; its
mutating requests are serialized so put-if-absent is atomic, as on S3). Each measured
operation runs in a fresh interpreter (no cache of an earlier call survives) that talks to
the server through a counting proxy of its own (tests/support/s3proxy.py), which logs every
request it forwards: GET, PUT, LIST (a GET with ``list-type``), HEAD, DELETE (a POST
``?delete`` is a batch DELETE; any other POST, e.g. multipart, counts as a PUT). Background
requests a call leaves behind (Lamina's version hint) are waited for and counted. Counts
are exact: noise-free, unlike times.

Operations (the same data for every system):
1. **open-latest** of a table of N versions (N one-row appends; at 10 and at --versions).
2. **append** of 100 rows to the N-version table, on a handle opened before counting.
3. **plan, 1% selective**, over --plan-files files (10 rows each, one commit): open + plan.
4. **delete 10%** (``category = 'c0'``) of a --delete-files file table: open + delete.
5. **tag create** on an open handle (deltalake has no tags): Lamina's default call (the table's
   latest version) and, like Lance's call, of the handle's version given explicitly.
6. **expiry** of all but the last 100 of N versions (Lamina ``t.maintenance.expire_versions(retain_last=100)``;
   deltalake ``cleanup_metadata()`` with a checkpoint at N-100 and a zero log retention;
   Lance ``cleanup_old_versions`` with the age of version N-99).

Tables are built locally with each library (untimed, uncounted) and uploaded to the server.

Targets (issue 19, item 6): for every operation Lamina makes the fewest requests of the
three (a tie with the fewest counts as fewest); open-latest <= 3 requests whatever N.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa

import common
from common import make_batch, one_percent_ids, run_worker, say
from registry import Run, case, module
from report import Report, Section, Target, verdict


SECTION_TITLE = "Requests per operation on S3 (issue 19)"
BUCKET = "lamina-requests"
SYSTEMS = ["lamina", "deltalake", "lance"]
KINDS = ["GET", "PUT", "LIST", "HEAD", "DELETE"]
KEEP = 100  # versions an expiry keeps
DELETE_ROWS = 5000  # rows per file of the delete table
PLAN_ROWS = 10  # rows per file of the plan table
CATEGORIES = np.array([f"c{i}" for i in range(10)], dtype=object)


# --------------------------------------------------------------------------- the server's addresses
def lamina_opts(endpoint: str) -> dict:
    return {"endpoint": endpoint, "access_key_id": "test", "secret_access_key": "test", "region": "us-east-1",
            "allow_http": "true"}


def delta_opts(endpoint: str) -> dict:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true", "AWS_CONDITIONAL_PUT": "etag"}


def lance_opts(endpoint: str) -> dict:
    return {"aws_endpoint": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
            "aws_region": "us-east-1", "allow_http": "true"}


def table_dir(system: str, name: str) -> str:
    return f"{system}/{name}" + (".lance" if system == "lance" else "")


# --------------------------------------------------------------------------- data
def delete_file(i: int) -> pa.Table:
    """File i of the delete table: exactly 10% of its rows have category 'c0'."""
    ids = np.arange(i * DELETE_ROWS, (i + 1) * DELETE_ROWS, dtype=np.int64)
    return pa.table({"id": ids, "category": pa.array(CATEGORIES[ids % 10], pa.string()),
                     "amount": ids.astype(np.float64)})


# --------------------------------------------------------------------------- building (local, then uploaded)
def build_history(system: str, path: str, n: int, checkpoint_at: int | None = None) -> None:
    """A table of n+1 versions: created, then n appends of one make_batch row."""
    batches = [make_batch(i, 1) for i in range(n)]
    if system == "lamina":
        import lamina

        t = lamina.create_table(path, batches[0].schema)
        for b in batches:
            t.append(b)
        common.flush_lamina_hints()
    elif system == "deltalake":
        from deltalake import DeltaTable, write_deltalake

        # The history table keeps deltalake's defaults (a checkpoint every 100 commits). The one
        # to expire gets its only checkpoint at n - KEEP (what cleanup_metadata expires up to),
        # a zero log retention, and no automatic log cleanup while it is built.
        conf = None if checkpoint_at is None else {
            "delta.logRetentionDuration": "interval 0 seconds", "delta.enableExpiredLogCleanup": "false",
            "delta.checkpointInterval": str(10 * n)}
        dt = DeltaTable.create(path, schema=batches[0].schema, configuration=conf)
        for i, b in enumerate(batches, 1):
            write_deltalake(dt, b, mode="append")
            if checkpoint_at is not None and i == checkpoint_at:
                dt.create_checkpoint()  # what cleanup_metadata may expire up to
    else:
        import lance

        ds = lance.write_dataset(batches[0].schema.empty_table(), path, schema=batches[0].schema)
        for b in batches:
            ds = lance.write_dataset(b, ds, mode="append")


def build_files(system: str, path: str, parts: list[pa.Table], stats: list[str]) -> None:
    """A table whose one commit holds one data file per part."""
    data = pa.concat_tables(parts)
    rows = parts[0].num_rows
    if system == "lamina":
        import lamina

        t = lamina.create_table(path, data.schema, properties={"write.max-rows-per-file": str(rows)})
        t.append(data)
        common.flush_lamina_hints()
    elif system == "deltalake":
        common.delta_table_of_files(path, parts, stats)
    else:
        import lance

        lance.write_dataset(data, path, max_rows_per_file=rows, max_rows_per_group=rows)


def upload(client, local: str, prefix: str) -> int:
    files = [os.path.join(d, f) for d, _, fs in os.walk(local) for f in fs]

    def put(p: str) -> None:
        client.upload_file(p, BUCKET, f"{prefix}/{os.path.relpath(p, local)}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, files))
    return len(files)


# --------------------------------------------------------------------------- one counted operation (worker)
def kinds_of(log: list) -> dict[str, int]:
    out = collections.Counter()
    for method, path, _ in log:
        if method == "GET" and "list-type=" in path:
            out["LIST"] += 1
        elif method == "POST" and "delete" in path.split("?", 1)[-1]:
            out["DELETE"] += 1
        elif method == "POST":
            out["PUT"] += 1
        else:
            out[method] += 1
    return dict(out)


def worker(argv: list[str]) -> dict:
    """Fresh interpreter: the operation of the JSON spec argv[0] through a counting proxy of its own."""
    return count_requests(json.loads(argv[0]))


def count_requests(spec: dict) -> dict:
    """Runs one operation in this fresh interpreter through a counting proxy of its own."""
    from support.s3proxy import S3Proxy

    proxy = S3Proxy(spec["endpoint"])
    system, op, uri = spec["system"], spec["op"], f"s3://{BUCKET}/{spec['dir']}"
    extra: dict = {}
    try:
        if system == "lamina":
            import lamina
            from lamina.commit import flush_hints

            opts = lamina_opts(proxy.endpoint)
            h = None if op in ("open", "plan", "delete") else lamina.open_table(uri, storage_options=opts)
            proxy.log.clear()
            if op == "open":
                extra["version"] = lamina.open_table(uri, storage_options=opts).version
            elif op == "append":
                extra["version"] = h.append(make_batch(10**9, 100)).version
            elif op == "tag":  # the default: the table's latest version
                extra["tagged"] = h.tags.create("requests").tagged_version
            elif op == "tag_version":  # the handle's version, given as Lance is given it
                extra["tagged"] = h.tags.create("requests-v", h.version).tagged_version
            elif op == "plan":
                t = lamina.open_table(uri, storage_options=opts)
                extra["files"] = len(t.scan(where=spec["where"]).plan())
            elif op == "delete":
                t = lamina.open_table(uri, storage_options=opts)
                t.delete(spec["where"])
            elif op == "expire":
                extra["expired"] = len(h.maintenance.expire_versions(retain_last=KEEP, reader_grace=timedelta(0)).expired_versions)
            flush_hints()
        elif system == "deltalake":
            from deltalake import DeltaTable, write_deltalake

            opts = delta_opts(proxy.endpoint)
            dt = None if op in ("open", "plan", "delete") else DeltaTable(uri, storage_options=opts)
            proxy.log.clear()
            if op == "open":
                extra["version"] = DeltaTable(uri, storage_options=opts).version()
            elif op == "append":
                write_deltalake(dt, make_batch(10**9, 100), mode="append")
                extra["version"] = dt.version()
            elif op == "plan":
                d = DeltaTable(uri, storage_options=opts)
                extra["files"] = len(d.file_uris(file_pruning_predicate=spec["where"]))
            elif op == "delete":
                DeltaTable(uri, storage_options=opts).delete(spec["where"])
            elif op == "expire":
                dt.cleanup_metadata()
                log_files = [o for o in _bucket_keys(spec, f"{spec['dir']}/_delta_log/") if o.endswith(".json")]
                extra["expired"] = int(dt.version()) + 1 - len(log_files)
        else:
            import lance

            opts = lance_opts(proxy.endpoint)
            ds = None if op in ("open", "plan", "delete") else lance.dataset(uri, storage_options=opts)
            if op == "expire":  # the age of version N-99: every older version goes
                stamps = {v["version"]: v["timestamp"] for v in ds.versions()}
                keep_from = max(stamps) - KEEP + 1
                if keep_from - 1 in stamps:
                    cut = stamps[keep_from] - (stamps[keep_from] - stamps[keep_from - 1]) / 2
                else:  # fewer versions than kept: nothing is old enough
                    cut = min(stamps.values()) - timedelta(days=1)
                now = datetime.now(cut.tzinfo) if cut.tzinfo else datetime.now()
            proxy.log.clear()
            if op == "open":
                extra["version"] = lance.dataset(uri, storage_options=opts).version
            elif op == "append":
                extra["version"] = lance.write_dataset(make_batch(10**9, 100), ds, mode="append").version
            elif op in ("tag", "tag_version"):  # Lance's tags name a version: the handle's
                ds.tags.create("requests" if op == "tag" else "requests-v", ds.version)
                extra["tagged"] = ds.version
            elif op == "plan":
                d = lance.dataset(uri, storage_options=opts)
                d.scanner(filter=spec["where"]).explain_plan()
            elif op == "delete":
                lance.dataset(uri, storage_options=opts).delete(spec["where"])
            elif op == "expire":
                extra["expired"] = ds.cleanup_old_versions(older_than=now - cut, delete_unverified=True).old_versions
        log = list(proxy.log)
    finally:
        proxy.stop()
    return {"counts": kinds_of(log), "requests": [f"{m} {p}" for m, p, _ in log][:40], **extra}


def _bucket_keys(spec: dict, prefix: str) -> list[str]:
    """Keys under ``prefix``, listed straight from the server (not through the counting proxy)."""
    import boto3

    client = boto3.client("s3", endpoint_url=spec["endpoint"], aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


# --------------------------------------------------------------------------- the run
OPS = [
    # (key, label, directory name, what)
    ("open_small", "open-latest, 10 versions", "hist_small", "open"),
    ("open", "open-latest, N versions", "hist", "open"),
    ("append", "append of 100 rows (N versions)", "hist", "append"),
    ("plan", "plan 1% of the files (open + plan)", "plan", "plan"),
    ("delete", "delete 10% of the rows (open + delete)", "del", "delete"),
    ("tag", "tag create (Lamina: the latest, its default; Lance: the handle's version)", "hist", "tag"),
    ("tag_version", "tag create of the handle's version (both given it)", "hist", "tag_version"),
    ("expire", "expire all but the last 100 of N versions", "exp", "expire"),
]


@dataclass
class Sizes:
    versions: int = 1000  # N
    plan_files: int = 20_000
    delete_files: int = 200


@case("requests", heavy=True, title=SECTION_TITLE, sizes=Sizes, quick=dict(versions=150, plan_files=200, delete_files=20),
      tiny=dict(versions=110, plan_files=100, delete_files=2), needs=(module("moto", "boto3", "deltalake", "lance"),))
def requests(run: Run) -> Report:
    """Requests per operation on S3 (moto), counted: open, append, plan, delete, tag, expire."""
    cfg = run.sizes
    n, plan_files, delete_files = cfg.versions, cfg.plan_files, cfg.delete_files
    say(f"requests per operation on S3: {n} versions, {plan_files} plan files, {delete_files} delete files")
    from support.s3server import S3Server

    server = S3Server()
    server.create_bucket(BUCKET)
    client = server.client()
    lo, hi = one_percent_ids(plan_files, PLAN_ROWS)
    where = {"plan": f"id >= {lo} AND id < {hi}", "delete": "category = 'c0'"}
    plan_parts = [make_batch(i * PLAN_ROWS, PLAN_ROWS) for i in range(plan_files)]
    del_parts = [delete_file(i) for i in range(delete_files)]
    uploaded = {}
    try:
        with tempfile.TemporaryDirectory(prefix="lamina-requests-") as tmp:
            for system in SYSTEMS:
                say(f"building {system}'s tables")
                builds = {
                    "hist_small": lambda p: build_history(system, p, 10),
                    "hist": lambda p: build_history(system, p, n),
                    "exp": lambda p: build_history(system, p, n, checkpoint_at=n - KEEP),
                    "plan": lambda p: build_files(system, p, plan_parts, ["id"]),
                    "del": lambda p: build_files(system, p, del_parts, ["id", "category"]),
                }
                for name, build in builds.items():
                    local = os.path.join(tmp, system, name)
                    os.makedirs(os.path.dirname(local), exist_ok=True)
                    build(local)
                    uploaded[(system, name)] = upload(client, local, table_dir(system, name))
            results: dict = {}
            for key, _label, name, op in OPS:
                for system in SYSTEMS:
                    if op in ("tag", "tag_version") and system == "deltalake":
                        continue
                    say(f"{key}: {system}")
                    spec = {"system": system, "op": op, "dir": table_dir(system, name), "endpoint": server.endpoint,
                            "where": where.get(op)}
                    try:
                        results[(key, system)] = run_worker("requests_bench:worker", [json.dumps(spec)])
                    except Exception as e:  # noqa: BLE001 - reported in the table
                        results[(key, system)] = {"error": f"{system} {op}: {e}"}
    finally:
        server.stop()
    sec = Section(
        key="requests", title=f"Requests per operation (N = {n:,} versions)",
        what="Requests each call made to the S3 server, by kind; fewer is better. Lamina's total / the fewest "
             "of the other systems' totals.",
        columns=["operation", "system"] + KINDS + ["total", "Lamina / fewest other", "target"],
    )
    targets = []
    for key, label, _name, op in OPS:
        label = label.replace("N versions", f"{n:,} versions")
        row_of = {s: results.get((key, s)) for s in SYSTEMS if (key, s) in results}
        # An expiry that removed fewer than the versions asked for did not do the work compared.
        short = {s for s, r in row_of.items() if op == "expire" and "error" not in r and (r.get("expired") or 0) < n - KEEP}
        totals = {s: sum(r["counts"].values()) for s, r in row_of.items() if "error" not in r and s not in short}
        others = [totals[s] for s in totals if s != "lamina"]
        mine = totals.get("lamina")
        ok = None if mine is None or not others else mine <= min(others)
        if op == "open":
            ok = None if mine is None else (ok is not False) and mine <= 3
        why = "fewest of all three" + (" and ≤ 3 requests" if op == "open" else "")
        ratio = f"{mine / min(others):.2f}×" if mine is not None and others and min(others) else "–"
        for s, r in row_of.items():
            if "error" in r:
                sec.rows.append([label, s, *["" for _ in KINDS], "error", r["error"][:200], ""])
                continue
            c = r["counts"]
            if s in short:
                sec.rows.append([label, s, *[str(c.get(k, 0)) for k in KINDS], str(sum(c.values())),
                                 f"expired {r.get('expired')} of {n - KEEP}: not compared", ""])
                continue
            sec.rows.append([label, s, *[str(c.get(k, 0)) for k in KINDS], str(totals[s]),
                             ratio if s == "lamina" else "", f"{why}: {verdict(ok)}" if s == "lamina" else ""])
        tie = " (a tie)" if ok and others and mine == min(others) else ""
        targets.append(Target(label, ok, f"Lamina {mine} vs fewest other {min(others) if others else '–'}{tie}"))
    notes = []
    for key, label, _name, op in OPS:
        for s in SYSTEMS:
            r = results.get((key, s))
            if r is None or "error" in r:
                continue
            facts = {k: v for k, v in r.items() if k not in ("counts", "requests")}
            if facts:
                notes.append(f"{key}, {s}: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
    lamina_requests = {key: results.get((key, "lamina"), {}).get("requests", []) for key, *_ in OPS}
    notes.append("Lamina's requests, in order: " + "; ".join(
        f"**{key}**: " + ", ".join(x.split("?")[0].split("/", 3)[-1] if not x.startswith("GET /" + BUCKET + "?") else "LIST "
                                   + x.split("prefix=", 1)[-1].split("&")[0] for x in reqs[:12])
        for key, reqs in lamina_requests.items()))
    sec.notes = notes
    intro = __doc__.split("\n\n", 1)[1].strip()
    raw = {"results": {f"{k}/{s}": v for (k, s), v in results.items()},
           "uploaded": {f"{s}/{n}": c for (s, n), c in uploaded.items()}}
    return Report(title=SECTION_TITLE, intro=intro, targets=targets, sections=[sec], raw=raw)
