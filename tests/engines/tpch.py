"""The TPC-H workload for the engine tests and bench/tpch_bench.py: data from DuckDB's ``tpch``
extension (``dbgen``) as Arrow tables, its 22 queries, the 0.5% of lineitem's and orders'
rows deleted by key, and a comparison of answers that tolerates the engines' float sums."""

from __future__ import annotations

import decimal
import math
from typing import Any

import numpy as np
import pyarrow as pa

TABLES = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")
DELETE_FRACTION = 200  # 1 row in 200 (0.5%) of lineitem and of orders
SEED = 48


def tpch_connection() -> Any:
    """A DuckDB connection with the tpch extension loaded, or None when it cannot be."""
    import duckdb

    from lamina.duckdb import extensions

    con = duckdb.connect()
    return con if extensions.load(con, "tpch") else None


def generate(scale: float) -> tuple[dict[str, pa.Table], dict[int, str]]:
    """The eight tables at ``scale`` and the 22 queries (DuckDB's dbgen, its tpch_queries())."""
    con = tpch_connection()
    if con is None:
        raise RuntimeError("DuckDB's tpch extension cannot be loaded: pip install duckdb-extension-tpch==<duckdb's version>")
    con.execute(f"CALL dbgen(sf={scale})")
    tables = {t: arrow_of(con.sql(f"FROM {t}")) for t in TABLES}
    queries = dict(con.sql("SELECT query_nr, query FROM tpch_queries()").fetchall())
    con.close()
    return tables, queries


def deleted_keys(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The keys of the rows deleted: a seeded 1 in 200 of orders (by o_orderkey) and of lineitem
    (by l_orderkey, l_linenumber), each chosen apart."""
    rng = np.random.default_rng(SEED)
    orders = tables["orders"]
    pick = np.sort(rng.choice(orders.num_rows, size=orders.num_rows // DELETE_FRACTION, replace=False))
    lineitem = tables["lineitem"]
    pick_l = np.sort(rng.choice(lineitem.num_rows, size=lineitem.num_rows // DELETE_FRACTION, replace=False))
    return {
        "orders": orders.select(["o_orderkey"]).take(pa.array(pick)),
        "lineitem": lineitem.select(["l_orderkey", "l_linenumber"]).take(pa.array(pick_l)),
    }


def live_rows(tables: dict[str, pa.Table], keys: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The tables without the deleted keys' rows (computed by Arrow, not by Lamina)."""
    out = dict(tables)
    for name, k in keys.items():
        out[name] = tables[name].join(k, keys=k.column_names, join_type="left anti")
        # (a join reorders rows; the engines' answers do not depend on the order)
    return out


def lamina_tables(root: str, tables: dict[str, pa.Table], keys: dict[str, pa.Table] | None, rows_per_file: int) -> dict[str, Any]:
    """The tables as Lamina tables under ``root`` (``write.max-rows-per-file``), the keys'
    rows deleted by deletion vectors (a delete of orders' keys, a merge of lineitem's)."""
    import lamina
    from lamina.expr import In

    out = {}
    for name, data in tables.items():
        t = lamina.create_table(f"{root}/{name}", data.schema, properties={"write.max-rows-per-file": str(rows_per_file)})
        t.append(data)
        if keys and name == "orders":
            t.delete(In("o_orderkey", tuple(keys[name]["o_orderkey"].to_pylist())))
        if keys and name == "lineitem":
            t.merge(keys[name], on=["l_orderkey", "l_linenumber"]).when_matched_delete().execute()
        out[name] = t
    return out


def normalized(rows: list[tuple]) -> list[tuple]:
    """Rows sorted, numbers as floats (DuckDB's DECIMAL, Polars' floats and decimals alike)."""
    def value(v: Any) -> Any:
        if isinstance(v, (decimal.Decimal, float)) and not isinstance(v, bool):
            return float(v)
        return v

    out = [tuple(value(v) for v in r) for r in rows]
    return sorted(out, key=lambda r: tuple((0, round(v, 2)) if isinstance(v, float) else (1, str(v)) for v in r))


def same_answer(got: list[tuple], want: list[tuple]) -> bool:
    """Equal rows, floats to a relative 1e-9 (engines add in different orders)."""
    g, w = normalized(got), normalized(want)
    if len(g) != len(w):
        return False
    for a, b in zip(g, w):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None or not math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-6):
                    return False
            elif x != y:
                return False
    return True


def arrow_of(rel: Any) -> pa.Table:
    t = rel.arrow()
    return t.read_all() if isinstance(t, pa.RecordBatchReader) else t


__all__ = ["TABLES", "generate", "deleted_keys", "live_rows", "lamina_tables", "same_answer", "normalized", "arrow_of"]
