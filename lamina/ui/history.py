"""A table's version history as the explorer's plots read it: the version files of many
versions, parsed together, and which versions of a long history to show."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from lamina.errors import NotFound
from lamina.table.table import Table
from lamina.ui.jsonable import int_or_none
from lamina.ui.pool import pool

__all__ = ["HISTORY_SCHEMA", "SERIES", "read_history", "read_version_files", "spread", "version_json"]

# What the history plots need of each version file; everything else in it is skipped by the
# JSON reader (one multi-threaded parse of all the files, not one json.loads per version).
SERIES = (
    "added-files",
    "removed-files",
    "added-records",
    "removed-records",
    "total-files",
    "total-records",
    "deleted-rows",
)
HISTORY_SCHEMA = pa.schema(
    [
        ("tombstone", pa.bool_()),
        ("version", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("operation", pa.string()),
        ("parent_version", pa.int64()),
        ("commit_id", pa.string()),
        ("summary", pa.struct([(k, pa.int64()) for k in SERIES])),
    ]
)


def read_version_file(t: Table, v: int) -> bytes | None:
    """Version ``v``'s file as stored; None if it expired meanwhile. (A branch's base
    version is not in the branch's directory: its log finds it.)"""
    path = t.log.version_path(v)
    try:
        local = t.log.io.local_path(path)
        if local is not None:
            with open(local, "rb") as f:
                return f.read()
        return t.log.io.get(path)
    except (NotFound, FileNotFoundError):
        vm = t.log.try_load(v)
        return None if vm is None else vm.to_json()


def read_version_files(t: Table, versions: list[int]) -> list[bytes | None]:
    """``read_version_file`` of each version: in parallel from an object store, one after
    another from local disk (a small file's read costs less than handing it to a thread)."""
    read = lambda v: read_version_file(t, v)  # noqa: E731
    return list(map(read, versions) if t.log.io.is_local else pool.map(read, versions))


def version_json(raw: bytes | None) -> dict[str, Any] | None:
    """A version file's JSON; None for a tombstone or an unreadable one (the history skips it)."""
    if raw is None:
        return None
    try:
        j = json.loads(raw)
    except ValueError:
        return None
    return j if isinstance(j, dict) and not j.get("tombstone") else None


def read_history(t: Table, versions: list[int]) -> pa.Table:
    """The history rows (``HISTORY_SCHEMA`` but the tombstone flag) of ``versions`` that are
    still versions, oldest first: one multi-threaded Arrow JSON parse of their files."""
    raws = [r for r in read_version_files(t, versions) if r is not None]
    try:
        doc = pa_json.read_json(
            io.BytesIO(b"\n".join(r.strip() for r in raws)),
            parse_options=pa_json.ParseOptions(explicit_schema=HISTORY_SCHEMA, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid:  # a writer stored a series field as other than a number: one by one
        js = [j for j in map(version_json, raws) if j is not None]
        for j in js:
            j["summary"] = {k: int_or_none(j.get("summary") or {}, k) for k in SERIES}
        doc = pa.Table.from_pylist(js, schema=HISTORY_SCHEMA)
    doc = doc.filter(pc.invert(pc.fill_null(doc.column("tombstone"), False)))
    return doc.sort_by("version").drop_columns(["tombstone"])


def spread(versions: list[int], points: int, also: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """About ``points`` (at most ``points`` + 3) of ``versions`` (ascending) spread evenly over
    their span, the oldest and the newest among them, and those in ``also``. The spread ones
    are the multiples of a power of two, so they stay the same as versions are added (a
    refresh after a commit reads only the new ones)."""
    v = np.asarray(versions, dtype=np.int64)
    if len(v) <= points:
        return versions
    span = int(v[-1] - v[0])
    stride = 1 << max(0, math.ceil(math.log2(max(1, span) / points)))
    keep = (v % stride) == 0
    keep[0] = keep[-1] = True
    if also:
        keep |= np.isin(v, np.fromiter(also, dtype=np.int64, count=len(also)))
    return v[keep].tolist()
