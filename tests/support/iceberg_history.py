"""Random histories of a Lamina table with the Iceberg view on, and what each retained
version, tag and branch holds according to Lamina: what the tests that read the view with
another engine (DuckDB 1.5 in its own venv, Iceberg's Java library) compare against."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import timedelta

import pyarrow as pa

import lamina
from lamina.iceberg import snapshot_id_of

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("day", pa.date32()),
                    ("small", pa.int32())])


def batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([None if i % 7 == 3 else f"n{i % 5}" for i in ids], pa.string()),
        "amount": pa.array([None if i % 13 == 4 else i * 0.5 - 10 for i in ids], pa.float64()),
        "day": pa.array([19_000 + i % 4 for i in ids], pa.date32()),
        "small": pa.array([i % 100 - 50 for i in ids], pa.int32()),
    })


def conform(t: lamina.Table, rows: pa.Table) -> pa.Table:
    """``rows`` (in SCHEMA) for the table's current columns (renamed, widened or added since)."""
    out = {}
    for f in t.schema:
        src = {"label": "name"}.get(f.name, f.name)
        out[f.name] = rows.column(src).cast(f.type) if src in rows.column_names else pa.nulls(rows.num_rows, f.type)
    return pa.table(out)


def normalized(rows: list[dict]) -> list[tuple]:
    """Rows as a sorted list of (column, value) tuples: a multiset, engines' types aside."""
    def norm(v):
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        if hasattr(v, "isoformat"):
            return v.isoformat()
        return v

    return sorted((tuple(sorted((k, norm(v)) for k, v in r.items())) for r in rows), key=repr)


@dataclass
class Check:
    """One snapshot to read through the view, with the rows Lamina reads for it."""

    label: str
    snapshot_id: int | None  # None: the table's latest, as a reader opening it by path finds it
    rows: list[tuple]
    where: str | None = None  # a filter, in SQL both engines take


@dataclass
class History:
    location: str
    checks: list[Check] = field(default_factory=list)


def play(location: str, seed: int, steps: int = 14) -> History:
    """A table at ``location`` with a random history of ``steps`` changes, then the checks."""
    rng = random.Random(seed)
    partition = rng.choice([None, "day", "bucket(4, id)", "truncate(2, name)"])
    t = lamina.create_table(location, SCHEMA, partition_by=partition,
                            properties={"iceberg.enabled": "true", "manifest.inline-max-files": rng.choice(["64", "0"]),
                                        "manifest.merge-min-leaves": "2"})
    next_id = 0
    tags, branches = [], []

    def every(step: int, k: int) -> str:
        return f"id IN ({', '.join(str(i) for i in range(k, max(next_id, k + 1), step))})"

    for _ in range(steps):
        op = rng.choice(["append", "append", "append", "delete", "update", "merge", "compact", "evolve", "tag",
                         "branch", "expire", "rollback"])
        if op == "append":
            n = rng.randint(1, 40)
            t.append(conform(t, batch(next_id, n)))
            next_id += n
        elif op == "delete":
            t.delete(every(rng.randint(3, 9), rng.randint(0, 5)))
        elif op == "update":
            t.update(every(5, rng.randint(0, 4)), {"small": "small + 1"}, mode=rng.choice(["merge-on-read", "copy-on-write"]))
        elif op == "merge" and next_id:
            rows = conform(t, batch(max(0, next_id - 5), 8))
            next_id += 3
            t.merge(rows, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
        elif op == "compact":
            t.maintenance.compact()
        elif op == "evolve":
            with t.update_schema() as u:
                if "name" in t.schema.names:
                    u.rename_column("name", "label")
                elif t.schema.field("small").type == pa.int32():
                    u.update_column("small", pa.int64())
                else:
                    u.add_column(f"extra{t.version}", pa.string())
        elif op == "tag":
            tags.append(f"tag{len(tags)}")
            t.tags.create(tags[-1])
        elif op == "branch" and len(branches) < 2:
            branches.append(f"b{len(branches)}")
            b = t.branches.create(branches[-1])
            b.append(conform(b, batch(10_000 + next_id, 5)))
            b.delete("id < 3")
        elif op == "expire":
            t.maintenance.expire_versions(retain_last=rng.randint(2, 5), older_than=timedelta(0), reader_grace=timedelta(0))
        elif op == "rollback" and len(t.history()) > 1:
            kept = [h["version"] for h in t.history()]  # newest first
            t.rollback(kept[min(rng.randint(1, 2), len(kept) - 1)])
    out = History(location)
    for h in t.history():
        vm = t.log.load(h["version"])
        out.checks.append(Check(f"version {vm.version}", snapshot_id_of(vm.commit_id),
                                normalized(t.scan(version=vm.version).to_arrow().to_pylist())))
    for name in tags:
        vm = t.tags.get(name).version
        out.checks.append(Check(f"tag {name}", snapshot_id_of(vm.commit_id), normalized(t.scan(version=name).to_arrow().to_pylist())))
    for name in branches:
        b = t.branch(name)
        out.checks.append(Check(f"branch {name}", snapshot_id_of(b.metadata.commit_id), normalized(b.to_arrow().to_pylist())))
    cut = max(0, next_id - 10)
    out.checks.append(Check(f"latest where id >= {cut}", None,
                            normalized(t.scan(where=f"id >= {cut}").to_arrow().to_pylist()), where=f"id >= {cut}"))
    return out
