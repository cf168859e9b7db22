"""The commands that show a table: ``info``, ``history``, ``schema``, ``files``, ``system`` and
``fsck`` (which checks that every file the latest version references is there)."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import typer
from rich.cells import cell_len
from rich.text import Text

from lamina.cli._output import (
    JSON_FLAG,
    OUTPUT,
    TABLE,
    OutputFormat,
    console,
    human_count,
    limit_option,
    print_table,
    wrap_text,
    write_table,
)
from lamina.cli._output import fail as _fail
from lamina.cli._tables import BRANCH as _BRANCH
from lamina.cli._tables import format_of as _format
from lamina.cli._tables import listing_units as _units
from lamina.cli._tables import open_target as _open
from lamina.cli._tables import table_title as _of
from lamina.cli._tables import timestamp_text as _ts
from lamina.cli.storage import size_fields
from lamina.errors import InvalidArgument, LaminaError
from lamina.maintenance import fsck as run_fsck
from lamina.spec.lineage import has_lineage
from lamina.spec.sort import effective_sort_order


def info(
    uri: str,
    version: int | None = typer.Option(None, "--version", "-v"),
    output: OutputFormat = OUTPUT,
    as_json: bool = JSON_FLAG,
    branch: str | None = _BRANCH,
):
    """Show a table's version, schema, partitioning, properties and features."""
    fmt = _format(output, as_json)
    t = _open(uri, version, branch)
    vm = t.metadata
    doc = {
        "location": t.uri,
        "uuid": vm.table_uuid,
        "branch": t.branch_name,
        "version": vm.version,
        "timestamp": _ts(vm.timestamp_ms),
        "format_version": vm.format_version,
        "files": vm.summary.get("total-files"),
        "records": vm.summary.get("total-records"),
        "schema": [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in t.schema],
        "partition_by": [
            f"{f.transform}({t.metadata.schema.name_of(f.source_id)}) as {f.name}" for f in t.partition_spec.fields
        ],
        "partition_spec_id": vm.partition_spec.spec_id,
        "partition_specs": len(vm.all_partition_specs),
        "sort_order": effective_sort_order(vm.schema, vm.sort_order, vm.properties).describe(vm.schema),
        "properties": vm.properties,
        "reader_features": list(vm.reader_features),
        "writer_features": list(vm.writer_features),
        "row_lineage": has_lineage(vm),  # _row_id, _last_updated_version and the change feed
        "next_row_id": vm.next_row_id,  # the id the next row added gets
    }
    try:
        space = t.maintenance.storage()
    except LaminaError as e:
        _fail(e)
    doc.update(size_fields(uri, space, machine=fmt != TABLE))
    if fmt != TABLE:
        write_table(pa.Table.from_pylist([doc]), fmt)
        return
    _print_fields(doc, counts={"files", "records"})


def _print_fields(doc: dict[str, Any], counts: Collection[str]) -> None:
    """``doc`` as lines of ``name  value`` fitted to the terminal, each value under itself."""
    key_width = max(cell_len(k) for k in doc)
    room = max(console.width - key_width - 2, 8)
    for k, v in doc.items():
        for i, line in enumerate(_field_lines(v, room, k in counts)):
            console.print(Text.assemble(((k if i == 0 else "").rjust(key_width), "bold"), "  ", line), soft_wrap=True)


def _field_lines(v: Any, room: int, count: bool) -> list[str]:
    """A value in lines of at most ``room``: a list (or a mapping) on one line if it fits, else
    one item a line; text broken after slashes, commas, ... (``wrap_text``)."""
    if isinstance(v, dict):
        v = [f"{name}={value}" for name, value in v.items()]
    if v is None or v == []:
        return ["-"]
    if isinstance(v, bool):
        return ["on" if v else "off"]
    if isinstance(v, list):
        one = ", ".join(v)
        return [one] if cell_len(one) <= room else [line for item in v for line in wrap_text(item, room).split("\n")]
    return wrap_text(human_count(v) if count and isinstance(v, int) else str(v), room).split("\n")


# `history` in a table: the columns after the operation, and the summary keys they count.
# In the order a narrow terminal keeps them: rows before files.
_HISTORY_COUNTS = {
    "+rows": "added-records",
    "-rows": "removed-records",
    "total rows": "total-records",
    "+files": "added-files",
    "-files": "removed-files",
    "deleted rows": "deleted-rows",
}


def _count(v: Any) -> int | None:
    return None if v is None or v == "" else int(v)


def history(
    uri: str,
    limit: int | None = limit_option(50, "versions"),
    output: OutputFormat = OUTPUT,
    branch: str | None = _BRANCH,
):
    """List versions, newest first; json and csv print them as the rows of $snapshots."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    if fmt != TABLE:
        snapshots = t.inspect.snapshots()
        newest_first = snapshots.take(pa.array(range(snapshots.num_rows - 1, -1, -1), pa.int64()))
        write_table(newest_first.slice(0, limit), fmt)
        return
    hist = t.history(limit=limit or 50)
    operations = [
        h["operation"] + (f" ({h['summary']['schema-changes']})" if h["summary"].get("schema-changes") else "")
        for h in hist
    ]
    tbl = pa.table(
        {
            "version": pa.array([h["version"] for h in hist], pa.int64()),
            "timestamp": pa.array([h["timestamp_ms"] for h in hist], pa.timestamp("ms", "UTC")),
            "operation": pa.array(operations, pa.string()),
            **{
                c: pa.array([_count(h["summary"].get(key)) for h in hist], pa.int64())
                for c, key in _HISTORY_COUNTS.items()
            },
        }
    )
    print_table(
        tbl,
        f"history of {_of(t)}",
        whole_words=["operation"],
        counts=_HISTORY_COUNTS,
        hint="--output json or csv prints every column",
    )


def schema(
    uri: str,
    version: str | None = typer.Option(None, "--version", "-v", help="version number (or tag name)"),
    tag: str | None = typer.Option(None, "--tag", "-t", help="tag name"),
    as_json: bool = typer.Option(False, "--json"),
    branch: str | None = _BRANCH,
):
    """Print the schema of a version or tag, with field ids, defaults and docs."""
    t = _open(uri, branch=branch)
    try:
        if version is not None and tag is not None:
            raise InvalidArgument("pass --version or --tag, not both (a tag's name is a version too)")
        vm = t.scan(version=version if tag is None else tag).vm
    except LaminaError as e:
        _fail(e)
    fields = vm.schema.describe()
    if as_json:
        console.print_json(json.dumps({"version": vm.version, "schema_id": vm.schema.schema_id, "fields": fields}))
        return
    # Types whole (timestamp[us, tz=UTC]: as text, not markup), a nested field indented under its parent.
    shown = pa.table(
        {
            "id": pa.array([f["field_id"] for f in fields], pa.int64()),
            "column": ["  " * f["depth"] + f["path"].rsplit(".", 1)[-1] if f["depth"] else f["path"] for f in fields],
            "type": [f["type"] for f in fields],
            "required": ["yes" if f["required"] else "" for f in fields],
            "default": [f["initial_default"] or "" for f in fields],
            "doc": [f["doc"] or "" for f in fields],
        }
    )
    print_table(
        shown,
        f"schema #{vm.schema.schema_id} of {_of(t)} at version {vm.version}",
        whole_words=["type"],
        hint="--json prints every field",
    )


def files(
    uri: str,
    version: str | None = typer.Option(None, "--version", "-v", help="version number or tag name"),
    where: str | None = typer.Option(None, "--where", "-w", help="SQL predicate to prune by"),
    limit: int | None = limit_option(100, "files"),
    output: OutputFormat = OUTPUT,
    branch: str | None = _BRANCH,
):
    """List the live data files of a version or tag (pruned by --where); json and csv name their columns as $files does."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    try:
        plan = t.scan(where=where, version=version).plan()
    except LaminaError as e:
        _fail(e)
    entries = plan.entries
    listed = pa.table(
        {
            "path": entries["path"],
            "size": entries["size"],
            "record_count": entries["record_count"],
            "added_version": entries["added_version"],
            "partition": entries["partition_path"],
            "dv_cardinality": entries["dv_cardinality"],
        }
    ).slice(0, limit if limit is not None or fmt != TABLE else 100)
    if fmt != TABLE:
        write_table(listed, fmt)
        return
    # The path holds the partition's directory: it folds after its slashes, whole.
    shown = listed.select(["path", "record_count", "size", "added_version", "dv_cardinality"])
    shown = shown.set_column(4, "dv_cardinality", pc.fill_null(shown["dv_cardinality"], 0))
    print_table(
        shown,
        f"{human_count(len(plan))} files, {human_count(plan.record_count)} rows",
        headers={"record_count": "rows", "added_version": "added in", "dv_cardinality": "deleted rows"},
        counts={"record_count", "dv_cardinality"},
        sizes={"size"},
        paths={"path"},
    )
    if len(plan) > shown.num_rows:
        console.print(f"... {len(plan) - shown.num_rows} more (use --limit)")


def fsck(uri: str):
    """Verify every file the latest version references exists; report unreferenced files."""
    t = _open(uri)
    with console.status("checking..."):
        rep = run_fsck(t)
    console.print(f"version {rep.version}: checked {rep.checked_files} referenced files")
    for m in rep.missing:
        console.print(f"[red]missing[/red] {m}")
    for e in rep.errors:
        console.print(f"[red]error[/red] {e}")
    for u in rep.unreferenced:
        console.print(f"[yellow]unreferenced[/yellow] {u}")
    for p in rep.iceberg:
        console.print(f"[yellow]iceberg[/yellow] {p}")
    if not rep.unreferenced_known:
        console.print("unreferenced files not listed: the damage above hides what some version or tag references")
    console.print(f"{len(rep.missing)} missing, {len(rep.errors)} errors, {len(rep.unreferenced)} unreferenced")
    if not rep.ok:
        raise typer.Exit(1)


def system(
    uri: str,
    name: str = typer.Argument(..., help="snapshots, tags, branches, files, manifests or schemas"),
    version: str | None = typer.Option(None, "--version", "-v", help="version or tag (files, manifests)"),
    limit: int | None = limit_option(50),
    output: OutputFormat = OUTPUT,
    branch: str | None = _BRANCH,
):
    """Print a system table ($snapshots, $tags, $branches, $files, $manifests, $schemas)."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    try:
        tbl = t.inspect.table(name, version=version)
    except LaminaError as e:
        _fail(e)
    if fmt != TABLE:
        write_table(tbl.slice(0, limit), fmt)
        return
    shown = tbl.slice(0, limit or 50)
    print_table(
        shown,
        f"${name.lstrip('$')} ({human_count(tbl.num_rows)} rows)",
        whole_words=["operation"],
        hint="--output json or csv prints every column",
        **_units(shown),
    )
