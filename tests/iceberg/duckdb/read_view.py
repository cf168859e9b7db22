"""Run in a process of its own by tests/iceberg/test_view_duckdb.py: read snapshots of Iceberg
tables with DuckDB's iceberg extension. Input (stdin, JSON): a list of {location,
snapshot_id, where} (iceberg_scan by path) or {rest, table} (a table of the REST catalog at
``rest``, through ATTACH ... (TYPE iceberg)); output (stdout, JSON): each one's rows, or its error."""

import glob
import json
import os
import sys

import duckdb

site = os.path.dirname(os.path.dirname(duckdb.__file__))
EXTENSIONS = [glob.glob(f"{site}/duckdb_extension_{ext}/extensions/*/{ext}.duckdb_extension")[0]
              for ext in ("avro", "httpfs", "iceberg")]  # (httpfs: the REST catalog's client)


def connect():
    """A connection of its own for each query: DuckDB 1.5.5's iceberg extension, asked for
    several snapshots of one table in one connection, applied to an older snapshot the
    deletion vectors it had cached from a newer one (rows its own DVs delete came back)."""
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for path in EXTENSIONS:
        con.execute(f"LOAD '{path}'")
    return con


def quote(text):
    return "'" + text.replace("'", "''") + "'"


out = []
for q in json.load(sys.stdin):
    try:
        con = connect()
        if q.get("rest"):
            con.execute(f"ATTACH 'lamina' AS lake (TYPE iceberg, ENDPOINT {quote(q['rest'])}, AUTHORIZATION_TYPE 'none')")
            sql = f"SELECT * FROM lake.{q['table']}"
        else:
            at = "" if q.get("snapshot_id") is None else f", snapshot_from_id => {int(q['snapshot_id'])}"
            sql = f"SELECT * FROM iceberg_scan({quote(q['location'])}{at})"  # no snapshot: the latest, by version-hint.text
        if q.get("where"):
            sql += f" WHERE {q['where']}"
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        out.append({"rows": rows})
    except Exception as e:  # reported per query, the test shows it
        out.append({"error": f"{type(e).__name__}: {e}"})
print(json.dumps(out, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v)))
