"""Content entries as Arrow tables: their schema for a table, and building them.

See ``lamina.spec.content`` for the column layout. Everything here works on
whole Arrow tables of entries; there is no per-entry Python object.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lamina.errors import SchemaMismatch
from lamina.spec import content as C
from lamina.spec.lineage import DATA_VERSION, ENTRY_FIELDS, FIRST_ROW_ID, has_lineage
from lamina.spec.partition import PartitionSpec, fields_by_id
from lamina.spec.schema import Schema, field_id_of
from lamina.spec.stats import StatsPolicy, full_policy, stats_policy, truncate_bounds, truncate_values
from lamina.spec.transforms import transform_result_type
from lamina.spec.version import VersionManifest

# Entry columns a new file's entry never has when written: the commit fills them (row lineage).
UNSET_AT_WRITE = frozenset(f.name for f in ENTRY_FIELDS)


def _float_type(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


@lru_cache(maxsize=256)
def manifest_schema(
    schema: Schema,
    specs: PartitionSpec | tuple[PartitionSpec, ...] | None,
    lineage: bool = False,
    policy: StatsPolicy | None = None,
) -> pa.Schema:
    """Arrow schema of a manifest for a table with ``schema`` and partition spec(s) ``specs``
    (one spec, or a tuple of every spec the table has had; memoized: all are frozen, and this
    is needed several times per commit). ``lineage``: the table keeps row lineage, whose
    entries record ``first_row_id`` and ``data_version`` (lamina.spec.lineage). ``policy``:
    the table's column statistics (lamina.spec.stats; default: all, exact): a column has
    bounds columns only if its mode keeps bounds, a null count only if it keeps counts, so a
    wide table's manifests (and every commit's entries) stay narrow.

    The partition bounds of every spec's fields are kept, so entries written under an
    older spec keep their values; a field whose source column is gone is left out (no
    predicate can name it)."""
    fields = list(C.BASE_FIELDS)
    fields.append(pa.field("max_added_version", pa.int64(), True))  # leaves: newest entry's added_version
    if lineage:
        fields += ENTRY_FIELDS
    policy = policy or full_policy(schema)
    for f in schema.arrow:
        fid = field_id_of(f)
        mode = policy.mode(fid)
        if mode.bounds and C.stats_supported(f.type):
            fields.append(pa.field(C.min_col(fid), f.type, True))
            fields.append(pa.field(C.max_col(fid), f.type, True))
        if mode.counts:
            fields.append(pa.field(C.nulls_col(fid), pa.int64(), True))
    specs = specs if isinstance(specs, tuple) else (specs,) if specs is not None else ()
    current = specs[-1] if len(specs) == 1 else None
    if current is not None:
        # One spec (the common case): its columns, in its field order.
        ptype = current.partition_type(schema)
        pfields = list(zip((pf.field_id for pf in current.fields), (af.type for af in ptype)))
    else:
        pfields = _partition_types(schema, specs)
    for pid, t in pfields:
        fields.append(pa.field(C.pmin_col(pid), t, True))
        fields.append(pa.field(C.pmax_col(pid), t, True))
    return pa.schema(fields)


def _partition_types(schema: Schema, specs: tuple[PartitionSpec, ...]) -> list[tuple[int, pa.DataType]]:
    """(field id, partition value type) of every partition field of ``specs``, by field id."""
    out = []
    by_name = {field_id_of(f): f for f in schema.arrow}
    for pid, pf in sorted(fields_by_id(specs).items()):
        src = by_name.get(pf.source_id)
        if src is not None:
            out.append((pid, transform_result_type(pf.transform, src.type)))
    return out


def manifest_schema_of(vm: VersionManifest) -> pa.Schema:
    """The manifest schema of a version (a ``VersionManifest``): its schema's, its statistics
    policy's and every partition spec's. Memoized on the (immutable) version: a commit asks
    for it several times, and the policy is parsed from the properties each time otherwise."""
    ms = vm.__dict__.get("_manifest_schema")
    if ms is None:
        specs = vm.partition_specs
        ms = manifest_schema(
            vm.schema, specs if specs else vm.partition_spec, has_lineage(vm), stats_policy(vm.schema, vm.properties)
        )
        object.__setattr__(vm, "_manifest_schema", ms)
    return ms


def conform(entries: pa.Table, mschema: pa.Schema) -> pa.Table:
    """Entries in exactly ``mschema``: missing columns become nulls (unknown), extras are dropped.

    Manifests written under an older schema lack newer columns; unknown stats
    are null, which pruning treats as "may match".
    """
    if entries.schema.equals(mschema):
        return entries
    # A manifest read from disk lacks its all-null columns, and one commit conforms the same
    # cached manifest table several times (planning, then rewriting the leaves it touches):
    # the latest results are kept, by the identity of both inputs (held, so never reused).
    for known, schema, result in tuple(_conformed):  # (a copy: other threads add to it)
        if known is entries and schema is mschema:
            return result
    result = _conform(entries, mschema)
    _conformed.appendleft((entries, mschema, result))
    return result


_conformed: deque[tuple[pa.Table, pa.Schema, pa.Table]] = deque(maxlen=8)


def _conform(entries: pa.Table, mschema: pa.Schema) -> pa.Table:
    n = entries.num_rows
    have = set(entries.column_names)
    cols = []
    for f in mschema:
        if f.name in have:
            c = entries.column(f.name)
            cols.append(c if c.type.equals(f.type) else c.cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=mschema)


@lru_cache(maxsize=256)
def _stats_plan(
    schema: Schema, policy: StatsPolicy
) -> tuple[tuple[str, str, str | None, str | None, bool, int, int, pa.DataType], ...]:
    """What ``column_stats`` computes, per column ``policy`` keeps anything of (memoized: it is
    asked on every file written): (column, null count key, min key or None, max key (None: no
    bounds), float column, truncate length of a string/binary bound (0: none), its position
    among the schema's columns (its leaf in a flat file), its type)."""
    plan = []
    position = {f.name: i for i, f in enumerate(schema.arrow)}
    for f, fid, mode in policy.kept(schema):
        bounds = mode.bounds and C.stats_supported(f.type)
        cut = (
            mode.length if mode.kind == "truncate" and (pa.types.is_string(f.type) or pa.types.is_binary(f.type)) else 0
        )
        plan.append(
            (
                f.name,
                C.nulls_col(fid),
                C.min_col(fid) if bounds else None,
                C.max_col(fid) if bounds else None,
                _float_type(f.type),
                cut,
                position[f.name],
                f.type,
            )
        )
    return tuple(plan)


def _has_nan(col: pa.ChunkedArray | pa.Array) -> bool:
    if col.null_count == 0 and (isinstance(col, pa.Array) or col.num_chunks == 1):
        # one numpy pass over the values (zero copy), cheaper than two kernel calls on small files
        return bool(np.isnan((col if isinstance(col, pa.Array) else col.chunk(0)).to_numpy()).any())
    return bool(pc.any(pc.is_nan(col)).as_py())


def column_stats(
    data: pa.Table, schema: Schema, policy: StatsPolicy, exact: bool = False, footer: pq.FileMetaData | None = None
) -> dict[str, Any]:
    """Per-column min/max/null-count of one data file's rows, keyed by manifest column name:
    those ``policy`` keeps, bounds cut as it says unless ``exact`` (parts of a file, merged
    before they are cut: ``cut_bounds``).

    ``footer``: the ``pyarrow.parquet.FileMetaData`` of the file ``data`` was written as, its
    leaf columns being ``schema``'s columns in order (flat, same types), then any others;
    ``data`` then needs only the columns ``values_needed`` names. Parquet's writer has
    computed each column's null count and bounds while encoding it: those are taken from
    the footer where they are exactly what going over the values gives (``_footer_bounds``),
    which costs next to nothing instead of a pass over its values (for string columns, a
    ``min_max`` pass is a noticeable share of writing the file)."""
    out: dict[str, Any] = {}
    index = {n: i for i, n in enumerate(data.column_names)}  # by position: a lookup by name scans every column
    groups = _row_groups(footer)
    rows_schema = data.schema
    for name, nulls_key, min_key, max_key, is_float, cut, leaf, typ in _stats_plan(schema, policy):
        at = index.get(name)
        got = None
        if groups and not is_float:
            # (the rows' own type where they have the column: it may be another representation, a large string)
            got = _footer_bounds(groups, leaf, typ if at is None else rows_schema.field(at).type)
        if got is not None:
            out[nulls_key], lo, hi = got
            if min_key is None or max_key is None:  # (both or neither)
                continue
        else:
            col = data.column(at)
            out[nulls_key] = col.null_count
            if min_key is None or max_key is None:  # (both or neither)
                continue
            if is_float and _has_nan(col):
                # NaN has no place in an order; leave bounds unknown rather than wrong.
                out[min_key] = out[max_key] = None
                continue
            mm = pc.min_max(col)
            # Arrow scalars, not Python values: entries are assembled without conversions.
            lo, hi = mm["min"], mm["max"]
        if cut and not exact and lo.is_valid:
            lo, hi = _cut(lo, hi, cut)
        out[min_key], out[max_key] = lo, hi
    return out


def _row_groups(footer: pq.FileMetaData | None) -> list[pq.RowGroupMetaData] | None:
    return [footer.row_group(g) for g in range(footer.num_row_groups)] if footer is not None else None


def values_needed(schema: Schema, policy: StatsPolicy, footer: pq.FileMetaData | None = None) -> list[str]:
    """The columns whose values ``column_stats`` reads for a flat file of ``schema``'s columns
    with ``footer`` (None: every column it keeps statistics of): the others it takes from the
    footer, and they may be left out of the ``data`` it is given."""
    groups = _row_groups(footer)
    return [
        name
        for name, _, _, _, is_float, _, leaf, typ in _stats_plan(schema, policy)
        if is_float or not groups or _footer_bounds(groups, leaf, typ) is None
    ]


def _footer_kind(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` reads its exact bounds from a Parquet footer as raw
    values that ``pa.scalar(raw, t)`` takes: booleans, signed integers, dates, strings and
    binaries (Parquet orders them as Arrow does: signed; bytewise, unsigned), and timestamps
    other than seconds (which pyarrow stores as milliseconds: another raw value). Unsigned
    integers (stored as signed raw values), decimals and the rest are computed."""
    return (
        pa.types.is_boolean(t)
        or pa.types.is_signed_integer(t)
        or pa.types.is_date32(t)
        or (pa.types.is_timestamp(t) and t.unit != "s")
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _footer_bounds(
    groups: list[pq.RowGroupMetaData], i: int, t: pa.DataType
) -> tuple[int, pa.Scalar, pa.Scalar] | None:
    """(null count, min, max) of leaf column ``i`` over the row groups ``groups`` of a Parquet
    footer, as ``column_stats`` computes them (null bounds for a column of nulls only); None
    where the footer cannot tell exactly: a type ``_footer_kind`` leaves out, a column written
    without statistics, or a row group holding values without bounds (Parquet's writer leaves
    out the bounds of values over 4 KiB)."""
    if not _footer_kind(t):
        return None
    nulls, lo, hi = 0, None, None
    for g in groups:
        s = g.column(i).statistics
        if s is None or not s.has_null_count:
            return None
        nulls += s.null_count
        if s.has_min_max:
            a, b = s.min_raw, s.max_raw
            if lo is None or a < lo:
                lo = a
            if hi is None or b > hi:
                hi = b
        elif s.null_count != g.num_rows:
            return None
    try:
        return nulls, pa.scalar(lo, t), pa.scalar(hi, t)
    except pa.ArrowInvalid:  # (bytes a string column holds unvalidated, not UTF-8): as the values say
        return None


def _cut(lo: pa.Scalar, hi: pa.Scalar, length: int) -> tuple[pa.Scalar, pa.Scalar]:
    """A file's string (binary) bounds cut to ``length`` characters (bytes), as truncate mode says."""
    lo_v, hi_v = lo.as_py(), hi.as_py()
    if len(lo_v) <= length and len(hi_v) <= length:
        return lo, hi  # nothing to cut (truncate_values would return them as they are)
    low, high = truncate_values(lo_v, hi_v, length)
    return pa.scalar(low, lo.type), pa.scalar(high, hi.type)


def cut_bounds(stats: dict[str, Any], schema: Schema, policy: StatsPolicy) -> dict[str, Any]:
    """``column_stats`` with the bounds of truncate-mode string/binary columns cut (in place)."""
    for _f, fid, mode in policy.kept(schema):
        lo = stats.get(C.min_col(fid))
        if mode.kind != "truncate" or lo is None or not lo.is_valid:
            continue
        if not (pa.types.is_string(lo.type) or pa.types.is_binary(lo.type)):
            continue
        stats[C.min_col(fid)], stats[C.max_col(fid)] = _cut(lo, stats[C.max_col(fid)], mode.length)
    return stats


_CONSTANT, _UNSET, _VALUE = 0, 1, 2
_ENTRY_CONSTANTS = frozenset(("content", "status", "file_count", "added_version", "spec_id"))
_entry_plans: dict[int, tuple[pa.Schema, tuple[tuple[int, str, pa.DataType], ...]]] = {}


def _entry_plan(mschema: pa.Schema) -> tuple[tuple[int, str, pa.DataType], ...]:
    """(kind, name, type) of each column of ``mschema``, as ``data_entries`` fills it. Memoized by
    identity (manifest schemas are memoized objects; hashing a wide one costs more than this
    plan saves), holding the schema so its id is not reused while it is a key."""
    hit = _entry_plans.get(id(mschema))
    if hit is not None and hit[0] is mschema:
        return hit[1]
    plan = tuple(
        (_CONSTANT if f.name in _ENTRY_CONSTANTS else _UNSET if f.name in UNSET_AT_WRITE else _VALUE, f.name, f.type)
        for f in mschema
    )
    if len(_entry_plans) >= 256:
        _entry_plans.clear()
    _entry_plans[id(mschema)] = (mschema, plan)
    return plan


def data_entries(
    files: Sequence[dict[str, Any]],
    mschema: pa.Schema,
    version: int,
    spec_id: int,
    row_ids_from: int | None = None,
) -> pa.Table:
    """Entries for newly written data files; each dict has path, size, record_count,
    optional partition_path, stats and partition columns (see ``column_stats``).

    ``row_ids_from``: on a table with row lineage, the files' ``first_row_id`` are given in
    file order from that counter, one per row, and their ``data_version`` is ``version``
    (what ``lamina.spec.lineage.assign_row_ids`` gives new files); otherwise both are null,
    for the commit to fill."""
    n = len(files)
    if n == 0:
        return mschema.empty_table()
    constants = {"content": C.DATA, "status": C.ADDED, "file_count": 1, "added_version": version, "spec_id": spec_id}
    lineage: dict[str, list[int]] = {}
    if row_ids_from is not None:
        starts, at = [], row_ids_from
        for f in files:
            starts.append(at)
            at += int(f["record_count"])
        lineage = {FIRST_ROW_ID: starts, DATA_VERSION: [version] * n}
    cols = []
    for kind, name, typ in _entry_plan(mschema):
        if kind == _CONSTANT:
            cols.append(_filled(constants[name], typ, n))
        elif kind == _UNSET:
            given = lineage.get(name)
            cols.append(_filled(None, typ, n) if given is None else pa.array(given, typ))
        elif n == 1:
            cols.append(_one(files[0].get(name), typ))  # one file per append: no list to scan
        else:
            cols.append(_column([x.get(name) for x in files], typ))
    return pa.Table.from_arrays(cols, schema=mschema)


_filled_cache: dict[tuple[Any, int], tuple[pa.DataType, pa.Array]] = {}


def _filled(value: Any, typ: pa.DataType, n: int) -> pa.Array:
    """``n`` times ``value`` (None: nulls) as a ``typ`` array. One-row arrays (one file per
    append) are immutable and reused: building them cost more than the rest of an entry."""
    if n != 1 or not isinstance(value, (int, type(None))):
        return pa.nulls(n, typ) if value is None else pa.repeat(pa.scalar(value, typ), n)
    key = (value, id(typ))
    hit = _filled_cache.get(key)
    if hit is not None and hit[0] is typ:
        return hit[1]
    arr = pa.nulls(1, typ) if value is None else pa.repeat(pa.scalar(value, typ), 1)
    if len(_filled_cache) >= 4096:
        _filled_cache.clear()
    _filled_cache[key] = (typ, arr)  # the type held: its id is not reused while it is a key
    return arr


def _one(value: Any, typ: pa.DataType) -> pa.Array:
    """``_column`` of one value."""
    if value is None:
        return _filled(None, typ, 1)
    if isinstance(value, pa.Scalar):
        return pa.repeat(value if value.type.equals(typ) else value.cast(typ), 1)
    return pa.array([value], typ)


def _column(values: list[Any], typ: pa.DataType) -> pa.Array:
    """One entry column from Python values or Arrow scalars (the fast path: no conversion)."""
    if all(isinstance(v, pa.Scalar) for v in values):
        parts = [pa.repeat(v if v.type.equals(typ) else v.cast(typ), 1) for v in values]
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    if all(v is None for v in values):
        return pa.nulls(len(values), typ)
    return pa.array([v.as_py() if isinstance(v, pa.Scalar) else v for v in values], typ)


def entries_from_user_files(
    files: pa.Table, schema: Schema, spec: PartitionSpec | None, mschema: pa.Schema, policy: StatsPolicy
) -> pa.Table:
    """Entries from a user's table of existing files (``Table.add_files``), vectorized.

    Columns: path, size, record_count, optional partition_path, and optional stats named by
    column: ``lower.<col>``, ``upper.<col>``, ``null_count.<col>``, plus ``partition.<field>``
    for partition values. The stats are kept as the table's ``policy`` says (those it does
    not keep are dropped, truncate-mode bounds cut), like those of files Lamina writes.
    """
    for req in ("path", "size", "record_count"):
        if req not in files.column_names:
            raise SchemaMismatch(f"add_files needs a {req!r} column; got {files.column_names}")
    cols: dict[str, pa.ChunkedArray | pa.Array] = {
        "path": files.column("path").cast(pa.string()),
        "size": files.column("size").cast(pa.int64()),
        "record_count": files.column("record_count").cast(pa.int64()),
    }
    if "partition_path" in files.column_names:
        cols["partition_path"] = files.column("partition_path").cast(pa.string())
    known = {"path", "size", "record_count", "partition_path"}
    for f in schema.arrow:
        fid = field_id_of(f)
        for prefix, target in (
            ("lower.", C.min_col(fid)),
            ("upper.", C.max_col(fid)),
            ("null_count.", C.nulls_col(fid)),
        ):
            name = prefix + f.name
            if name in files.column_names:
                known.add(name)
                if target in mschema.names:
                    cols[target] = files.column(name)
        given = [k for k in (C.min_col(fid), C.max_col(fid)) if k in cols]
        if given:
            like = cols[given[0]]
            lo, hi = (cols.get(k, pa.nulls(len(like), like.type)) for k in (C.min_col(fid), C.max_col(fid)))
            cut = dict(zip((C.min_col(fid), C.max_col(fid)), truncate_bounds(lo, hi, policy.mode(fid))))
            cols.update({k: cut[k] for k in given})
    if spec is not None:
        for pf in spec.fields:
            name = "partition." + pf.name
            if name in files.column_names:
                known.add(name)
                cols[C.pmin_col(pf.field_id)] = files.column(name)
                cols[C.pmax_col(pf.field_id)] = files.column(name)
    unknown = [c for c in files.column_names if c not in known]
    if unknown:
        raise SchemaMismatch(
            f"add_files got unknown columns {unknown}; expected path, size, record_count, "
            "lower.<col>, upper.<col>, null_count.<col>, partition.<field>"
        )
    entries = conform(pa.table(cols), mschema)
    return fill_constant(entries, content=C.DATA, file_count=1, spec_id=spec.spec_id if spec is not None else 0)


def fill_constant(entries: pa.Table, **values: Any) -> pa.Table:
    """Set columns of every entry to a constant (vectorized)."""
    n = entries.num_rows
    for name, value in values.items():
        i = entries.schema.get_field_index(name)
        typ = entries.schema.field(i).type
        arr = pa.nulls(n, typ) if value is None else pa.repeat(pa.scalar(value, typ), n)
        entries = entries.set_column(i, entries.schema.field(i), arr)
    return entries
