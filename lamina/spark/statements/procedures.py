"""``CALL lamina.system.<procedure>(...)``: table maintenance, rollback, tags and branches, named
and shaped like Iceberg's Spark procedures.

Arguments are positional or named (``table => 'shop.orders'``), in the order listed below; the
table is a string: a catalog identifier (``'shop.orders'``), a Spark table registered ``USING
lamina``, or a location (``'s3://bucket/orders'``, ``'/data/orders'``). Timestamps are any Spark
timestamp expression (a string is read in the session time zone).

============================  ==========================================================  ============================================
procedure                     arguments                                                   result columns
============================  ==========================================================  ============================================
``rewrite_data_files``        table, strategy ('binpack' | 'sort'), sort_order            rewritten_data_files_count,
(alias ``compact``)           ('id DESC NULLS LAST, ts'), options (map:                   added_data_files_count, rewritten_bytes_count,
                              'target-file-size-bytes', 'min-file-size-bytes'), where     failed_data_files_count
``expire_snapshots``          table, older_than, retain_last, dry_run                     deleted_data_files_count,
                                                                                          deleted_position_delete_files_count,
                                                                                          deleted_manifest_files_count,
                                                                                          expired_versions_count
``remove_orphan_files``       table, older_than, dry_run, allow_short_age                 orphan_file_location (one row per file)
``rollback_to_snapshot``      table, snapshot_id (a version)                              previous_snapshot_id, current_snapshot_id
``rollback_to_timestamp``     table, timestamp                                            previous_snapshot_id, current_snapshot_id
``set_current_snapshot``      table, snapshot_id, ref (a tag)                             previous_snapshot_id, current_snapshot_id
``create_tag``                table, tag, version (default: the latest)                   tag_name, tagged_version
``drop_tag``                  table, tag                                                  tag_name
``create_branch``             table, branch, version, tag                                 branch_name, base_version
``drop_branch``               table, branch                                               branch_name
``fast_forward``              table, branch, to                                           branch_updated, previous_ref, updated_ref
``publish_branch``            table, branch, into (default 'main')                        branch_updated, previous_ref, updated_ref
============================  ==========================================================  ============================================

A rollback is Lamina's: a new version whose content is the old one's (history is kept), so
``current_snapshot_id`` is that new version. ``fast_forward(table, branch, to)`` (Iceberg's)
moves ``branch`` to ``to``'s head only if ``branch`` has not moved since ``to`` was made from
it; ``publish_branch`` is Lamina's publish, which re-applies the branch's changes otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from lamina.errors import InvalidArgument
from lamina.spark.statements.expressions import lamina_predicate, literal_value
from lamina.spark.statements.names import LaminaName, is_path
from lamina.spark.statements.queries import one_table
from lamina.spark.statements.statement import Statement, refuse, text_of
from lamina.spec.layout import DV_DIR

_CALL = re.compile(r"^\s*CALL\s+(.*?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
SYSTEM = ("lamina", "system")


@dataclass
class Param:
    name: str
    kind: str  # table, string, int, bool, timestamp, map
    required: bool = False


@dataclass
class Procedure:
    params: list[Param]
    run: Callable[..., Any]


def parse_call(text: str) -> tuple[list[str], list[exp.Expression]] | None:
    """(procedure name parts, argument nodes) of ``CALL a.b.c(args)``; None for anything else."""
    m = _CALL.match(text)
    if m is None:
        return None
    try:
        node = sqlglot.parse_one(f"SELECT {m.group(1)}", read="spark").expressions[0]
    except Exception:
        return None
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Anonymous):
        parts, fn = [i.name for i in node.this.find_all(exp.Identifier, bfs=False)], node.expression
    elif isinstance(node, exp.Anonymous):
        parts, fn = [], node
    else:
        return None
    return [*parts, fn.name], list(fn.expressions)


def _bind(st: Statement, name: str, proc: Procedure, args: list[exp.Expression]) -> dict[str, Any]:
    given: dict[str, exp.Expression] = {}
    for i, a in enumerate(args):
        if isinstance(a, exp.Kwarg):
            key = a.this.name.lower()
            if key not in {p.name for p in proc.params}:
                raise InvalidArgument(
                    f"{name} has no argument {key!r} (it takes {', '.join(p.name for p in proc.params)})"
                )
            given[key] = a.expression
        else:
            if given and any(isinstance(b, exp.Kwarg) for b in args[:i]):
                raise InvalidArgument(f"{name}: positional arguments come before named ones")
            if i >= len(proc.params):
                raise InvalidArgument(f"{name} takes at most {len(proc.params)} arguments")
            given[proc.params[i].name] = a
    out: dict[str, Any] = {}
    for p in proc.params:
        node = given.get(p.name)
        if node is None or isinstance(node, exp.Null):
            if p.required:
                raise InvalidArgument(f"{name} needs its argument {p.name}")
            out[p.name] = None
            continue
        out[p.name] = _value(st, p, node, name)
    return out


def _value(st: Statement, p: Param, node: exp.Expression, proc: str) -> Any:
    what = f"{proc}({p.name})"
    if p.kind == "timestamp":
        return st.timestamp(node)
    if p.kind == "map":
        if not isinstance(node, exp.VarMap):
            raise refuse(f"{what} {text_of(node)}", "expected map('key', 'value', ...)")
        keys, values = node.args["keys"].expressions, node.args["values"].expressions
        return {str(literal_value(k, what)): str(literal_value(v, what)) for k, v in zip(keys, values)}
    v = literal_value(node, what)
    if p.kind in ("string", "table"):
        if not isinstance(v, str):
            raise InvalidArgument(f"{what} must be a string, got {text_of(node)}")
        return v
    if p.kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidArgument(f"{what} must be an integer, got {text_of(node)}")
        return v
    if p.kind == "bool":
        if not isinstance(v, bool):
            raise InvalidArgument(f"{what} must be TRUE or FALSE, got {text_of(node)}")
        return v
    raise AssertionError(p.kind)


def table_of(st: Statement, text: str) -> LaminaName:
    """The Lamina table a procedure's ``table`` argument names (see the module docstring)."""
    if is_path(text) and "`" not in text:
        return st.names.location(text, text)
    name = one_table(st, text)
    if name is None:
        raise InvalidArgument(
            f"{text!r} names no Lamina table (a catalog identifier, a Spark table USING lamina, or a location)"
        )
    return name


# -- the procedures ----------------------------------------------------------------------------

_SORT_KEY = re.compile(r"^\s*(`(?:[^`]|``)*`|[\w$.]+)\s*(ASC|DESC)?\s*(NULLS\s+(FIRST|LAST))?\s*$", re.IGNORECASE)


def _sort_keys(text: str) -> list[tuple[str, str, str]]:
    """Iceberg's ``sort_order`` (``id DESC NULLS LAST, ts``; ascending puts nulls first, descending last)."""
    keys = []
    for part in text.split(","):
        m = _SORT_KEY.match(part)
        if m is None:
            raise InvalidArgument(f"sort_order {text!r}: expected 'column [ASC|DESC] [NULLS FIRST|LAST], ...'")
        col, order, _, nulls = m.groups()
        desc = (order or "ASC").upper() == "DESC"
        first = (nulls or ("LAST" if desc else "FIRST")).upper() == "FIRST"
        keys.append((col.strip("`"), "descending" if desc else "ascending", "at_start" if first else "at_end"))
    return keys


def rewrite_data_files(
    st: Statement,
    table: str,
    strategy: str | None,
    sort_order: str | None,
    options: dict[str, str] | None,
    where: str | None,
) -> Any:
    from lamina.spark.compact import compact

    name = table_of(st, table)
    t = name.open()
    kwargs: dict[str, Any] = {}
    for k, v in (options or {}).items():
        key = {"target-file-size-bytes": "target_file_size", "min-file-size-bytes": "min_file_size"}.get(k)
        if key is None:
            raise refuse(f"rewrite_data_files option {k!r}", "supported: target-file-size-bytes, min-file-size-bytes")
        kwargs[key] = int(v)
    strategy = (strategy or "binpack").lower()
    if strategy not in ("binpack", "sort"):
        raise InvalidArgument(f"rewrite_data_files strategy {strategy!r}: binpack or sort")
    if strategy == "sort":
        kwargs["sort_by"] = _sort_keys(sort_order) if sort_order else None
    elif sort_order:
        raise InvalidArgument("rewrite_data_files: sort_order goes with strategy => 'sort'")
    if where is not None:
        node = sqlglot.parse_one(f"SELECT 1 WHERE {where}", read="spark").args["where"].this
        pred = lamina_predicate(node, t.metadata.schema, st.time_zone)
        if pred is None:
            raise refuse(
                f"where {where!r}",
                "compaction selects files by a predicate of columns and literals "
                "(=, <, IN, BETWEEN, IS NULL, AND, OR, NOT)",
            )
        kwargs["where"] = pred
    res = compact(st.spark, t, **kwargs)
    return st.result(
        [
            ("rewritten_data_files_count", "int"),
            ("added_data_files_count", "int"),
            ("rewritten_bytes_count", "bigint"),
            ("failed_data_files_count", "int"),
        ],
        [[res.input_files, res.output_files, res.bytes_read, 0]],
    )


def expire_snapshots(st: Statement, table: str, older_than: Any, retain_last: int | None, dry_run: bool | None) -> Any:
    report = (
        table_of(st, table)
        .open()
        .maintenance.expire_versions(older_than=older_than, retain_last=retain_last, dry_run=bool(dry_run))
    )
    dv = sum(1 for f in report.deleted_files if f.startswith(DV_DIR + "/") or f"/{DV_DIR}/" in f)
    return st.result(
        [
            ("deleted_data_files_count", "bigint"),
            ("deleted_position_delete_files_count", "bigint"),
            ("deleted_manifest_files_count", "bigint"),
            ("expired_versions_count", "bigint"),
        ],
        [[len(report.deleted_files) - dv, dv, len(report.deleted_manifests), len(report.expired_versions)]],
    )


def remove_orphan_files(
    st: Statement, table: str, older_than: Any, dry_run: bool | None, allow_short_age: bool | None
) -> Any:
    t = table_of(st, table).open()
    kwargs = {} if older_than is None else {"older_than": older_than}
    report = t.maintenance.remove_orphans(dry_run=bool(dry_run), allow_short_age=bool(allow_short_age), **kwargs)
    return st.result([("orphan_file_location", "string")], [[p] for p in report.orphans])


def _rollback(st: Statement, table: str, **target: Any) -> Any:
    t = table_of(st, table).open()
    before = t.version
    after = t.rollback(**target).version
    return st.result([("previous_snapshot_id", "bigint"), ("current_snapshot_id", "bigint")], [[before, after]])


def rollback_to_snapshot(st: Statement, table: str, snapshot_id: int) -> Any:
    return _rollback(st, table, version=snapshot_id)


def rollback_to_timestamp(st: Statement, table: str, timestamp: Any) -> Any:
    return _rollback(st, table, timestamp=timestamp)


def set_current_snapshot(st: Statement, table: str, snapshot_id: int | None, ref: str | None) -> Any:
    if (snapshot_id is None) == (ref is None):
        raise InvalidArgument("set_current_snapshot takes snapshot_id or ref (a tag), one of them")
    return _rollback(st, table, version=snapshot_id if ref is None else ref)


def create_tag(st: Statement, table: str, tag: str, version: int | None) -> Any:
    made = table_of(st, table).open().tags.create(tag, version)
    return st.result([("tag_name", "string"), ("tagged_version", "bigint")], [[made.name, made.tagged_version]])


def drop_tag(st: Statement, table: str, tag: str) -> Any:
    table_of(st, table).open().tags.delete(tag)
    return st.result([("tag_name", "string")], [[tag]])


def create_branch(st: Statement, table: str, branch: str, version: int | None, tag: str | None) -> Any:
    if version is not None and tag is not None:
        raise InvalidArgument("create_branch takes version or tag (a tag names a version), not both")
    made = table_of(st, table).open().branches.create(branch, version=tag if tag is not None else version)
    return st.result([("branch_name", "string"), ("base_version", "bigint")], [[branch, made.version]])


def drop_branch(st: Statement, table: str, branch: str) -> Any:
    table_of(st, table).open().branches.delete(branch)
    return st.result([("branch_name", "string")], [[branch]])


def _publish(st: Statement, t: Any, source: str, into: str) -> Any:
    before = t.branch(into).version
    t.branches.publish(source, into)
    after = t.branch(into).refresh().version
    return st.result(
        [("branch_updated", "string"), ("previous_ref", "bigint"), ("updated_ref", "bigint")], [[into, before, after]]
    )


def fast_forward(st: Statement, table: str, branch: str, to: str) -> Any:
    t = table_of(st, table).open()
    record = t.branch(to).branch_record
    head = t.branch(branch).metadata
    if record is None or record.base_branch != branch or record.base.commit_id != head.commit_id:
        raise InvalidArgument(
            f"cannot fast-forward {branch!r} to {to!r}: {branch!r} is not where {to!r} was made from (it moved, or "
            f"{to!r} was made from another branch); CALL lamina.system.publish_branch re-applies {to!r}'s changes instead"
        )
    return _publish(st, t, to, branch)


def publish_branch(st: Statement, table: str, branch: str, into: str | None) -> Any:
    return _publish(st, table_of(st, table).open(), branch, into or "main")


def _p(name: str, kind: str, required: bool = False) -> Param:
    return Param(name, kind, required)


_TABLE = _p("table", "table", True)
PROCEDURES: dict[str, Procedure] = {
    "rewrite_data_files": Procedure(
        [_TABLE, _p("strategy", "string"), _p("sort_order", "string"), _p("options", "map"), _p("where", "string")],
        rewrite_data_files,
    ),
    "expire_snapshots": Procedure(
        [_TABLE, _p("older_than", "timestamp"), _p("retain_last", "int"), _p("dry_run", "bool")], expire_snapshots
    ),
    "remove_orphan_files": Procedure(
        [_TABLE, _p("older_than", "timestamp"), _p("dry_run", "bool"), _p("allow_short_age", "bool")],
        remove_orphan_files,
    ),
    "rollback_to_snapshot": Procedure([_TABLE, _p("snapshot_id", "int", True)], rollback_to_snapshot),
    "rollback_to_timestamp": Procedure([_TABLE, _p("timestamp", "timestamp", True)], rollback_to_timestamp),
    "set_current_snapshot": Procedure([_TABLE, _p("snapshot_id", "int"), _p("ref", "string")], set_current_snapshot),
    "create_tag": Procedure([_TABLE, _p("tag", "string", True), _p("version", "int")], create_tag),
    "drop_tag": Procedure([_TABLE, _p("tag", "string", True)], drop_tag),
    "create_branch": Procedure(
        [_TABLE, _p("branch", "string", True), _p("version", "int"), _p("tag", "string")], create_branch
    ),
    "drop_branch": Procedure([_TABLE, _p("branch", "string", True)], drop_branch),
    "fast_forward": Procedure([_TABLE, _p("branch", "string", True), _p("to", "string", True)], fast_forward),
    "publish_branch": Procedure([_TABLE, _p("branch", "string", True), _p("into", "string")], publish_branch),
}
PROCEDURES["compact"] = PROCEDURES["rewrite_data_files"]


def call(st: Statement, parts: list[str], args: list[exp.Expression]) -> Any:
    """Run ``CALL lamina.system.<name>(args)``."""
    name = parts[-1].lower()
    proc = PROCEDURES.get(name)
    if proc is None:
        raise refuse(f"CALL {'.'.join(parts)}", f"no such Lamina procedure; there are {', '.join(sorted(PROCEDURES))}")
    return proc.run(st, **_bind(st, name, proc, args))
