"""Converting a Parquet directory and a Delta table of many small files (issue 51).

``lamina.convert`` of a plain (non-partitioned) directory of N small Parquet files, in place,
and of a Delta table of the same N files (one commit, written by pyarrow and registered by
deltalake), into a location of its own: timed on local disk, and on S3 (moto,
tests/support/s3server.py) through the counting proxy (tests/support/s3proxy.py), which
counts the requests of the conversion by kind (LIST is a GET with ``list-type``).
The sources are built untimed and uncounted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow.parquet as pq

import common
from common import fmt_s, make_batch, now, say
from registry import Run, case, module
from report import Report, Section

SECTION_TITLE = "Converting Parquet directories and Delta tables (issue 51)"
KINDS = ["LIST", "GET", "HEAD", "PUT", "DELETE"]


@dataclass
class Sizes:
    files: int = 20_000
    rows: int = 10  # rows per file


def _build(root: str, cfg: Sizes) -> dict[str, str]:
    parts = [make_batch(i * cfg.rows, cfg.rows) for i in range(cfg.files)]
    pdir = os.path.join(root, "parquet")
    os.makedirs(pdir)
    for i, part in enumerate(parts):
        pq.write_table(part, os.path.join(pdir, f"part-{i:05d}.parquet"))
    ddir = os.path.join(root, "delta")
    os.makedirs(ddir)
    common.delta_table_of_files(ddir, parts, ["id"])
    return {"parquet": pdir, "delta": ddir}


@case("convert", title=SECTION_TITLE, sizes=Sizes, quick=dict(files=2000), tiny=dict(files=50),
      needs=(module("moto", "boto3", "deltalake"),), versions=("lamina", "deltalake", "pyarrow", "moto"))
def convert(run: Run) -> Report:
    """lamina.convert of an N-file Parquet directory and Delta table: time, and requests on S3."""
    import lamina
    from requests_bench import BUCKET, kinds_of, lamina_opts, upload
    from support.s3proxy import S3Proxy
    from support.s3server import S3Server

    cfg = run.sizes
    root = run.ws.new("convert")
    say(f"convert: building {cfg.files} files x {cfg.rows} rows (parquet dir and delta table)")
    src = _build(root, cfg)
    results: dict = {}
    for kind, path in src.items():
        loc = None if kind == "parquet" else os.path.join(root, "delta-lamina")
        if kind == "parquet":  # converted in place: a copy, so the upload below is of the plain directory
            path = run.ws.copy(path, "parquet-local")
        t0 = now()
        t = lamina.convert(path, loc, format=kind)
        results[("local", kind)] = {"s": now() - t0, "rows": t.scan().to_arrow().num_rows, "counts": {}}
    server = S3Server()
    try:
        server.create_bucket(BUCKET)
        client = server.client()
        for kind, path in src.items():
            say(f"convert: uploading {kind}")
            upload(client, path, f"s3src/{kind}")
        for kind in src:
            proxy = S3Proxy(server.endpoint)
            try:
                opts = lamina_opts(proxy.endpoint)
                uri = f"s3://{BUCKET}/s3src/{kind}"
                loc = None if kind == "parquet" else f"s3://{BUCKET}/lamina/{kind}"
                dopts = {"AWS_ENDPOINT_URL": proxy.endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                         "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
                proxy.log.clear()
                t0 = now()
                if kind == "delta":
                    from deltalake import DeltaTable

                    t = lamina.convert(DeltaTable(uri, storage_options=dopts), loc, storage_options=opts)
                else:
                    t = lamina.convert(uri, loc, format=kind, storage_options=opts)
                secs = now() - t0
                common.flush_lamina_hints()
                counts = kinds_of(list(proxy.log))
                results[("s3", kind)] = {"s": secs, "rows": t.scan().to_arrow().num_rows, "counts": counts}
            except Exception as e:  # noqa: BLE001 - reported in the table
                results[("s3", kind)] = {"error": common.err_text(e)}
            finally:
                proxy.stop()
    finally:
        server.stop()
    sec = Section(key="convert", title=f"lamina.convert of {cfg.files:,} files ({cfg.rows} rows each)",
                  what="Wall time of one `lamina.convert` call (reading the source, writing version 0); on S3 the "
                       "requests it made, by kind. Rows: the converted table's rows, read back (expected "
                       f"{cfg.files * cfg.rows:,}).",
                  columns=["source", "storage", "time", *KINDS, "total requests", "rows"])
    for (store, kind), r in results.items():
        if "error" in r:
            sec.error_row(kind, r["error"])
            continue
        c = r["counts"]
        sec.rows.append([kind, store, fmt_s(r["s"]), *([str(c.get(k, 0)) for k in KINDS] if store == "s3" else ["–"] * len(KINDS)),
                         str(sum(c.values())) if store == "s3" else "–", f"{r['rows']:,}"])
    raw = {f"{s}/{k}": v for (s, k), v in results.items()}
    return Report(title=SECTION_TITLE, intro=__doc__.split("\n\n", 1)[1].strip(), sections=[sec], raw=raw)
