"""`lamina` command: info, history, files, changes, fsck, tags, branches, properties, rollback, expire, remove-orphans, sql (typer + rich).

The commands that read or write one line of versions take ``--branch NAME`` (default: main):
version numbers given with it are that branch's.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Collection, Optional

import pyarrow as pa
import pyarrow.compute as pc
import typer
from rich.cells import cell_len
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

import lamina
from lamina.catalog import DEFAULT_CATALOG, load_catalog
from lamina.cli._catalogs import chosen, missing, set_root
from lamina.cli._output import (
    CSV_FLAG, JSON_FLAG, OUTPUT, TABLE, OutputFormat, at_most, limit_option, console, err, human_bytes, human_count, output_format, print_table, wrap_text, write_rows,
    write_table,
)
from lamina.cli._output import duration_text as _duration_text
from lamina.cli._output import fail as _fail
from lamina.cli._output import parse_duration as _duration
from lamina.cli.storage import held_lines, kept_versions_line, size_fields
from lamina.data.changes import CHANGE_FIELDS, CHANGE_TYPE, CHANGE_TYPES, COMMIT_TIMESTAMP, COMMIT_VERSION
from lamina.errors import CatalogNotFound, InvalidArgument, LaminaError
from lamina.maintenance import fsck as run_fsck
from lamina.spec.layout import MAIN_BRANCH
from lamina.spec.lineage import has_lineage
from lamina.spec.sort import effective_sort_order
from lamina.table.changes import ChangeFeed
from lamina.timeutil import iso_ms

app = typer.Typer(help="Inspect and maintain Lamina tables.", no_args_is_help=True, add_completion=False)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"lamina {lamina.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    catalog: str = typer.Option(
        DEFAULT_CATALOG, "--catalog", "-c", envvar="LAMINA_CATALOG",
        help="catalog for tables named ns.name (a location is opened directly)",
    ),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print Lamina's version and exit",
    ),
) -> None:
    set_root(ctx, catalog)


def _is_identifier(target: str) -> bool:
    """``ns.name`` that is not an existing path: a catalog table."""
    return target.count(".") == 1 and "/" not in target and "\\" not in target and not os.path.exists(target)


# `--branch` of the commands that read or write one branch's versions.
_BRANCH = typer.Option(None, "--branch", "-b", help="the branch to work on (default: main); versions are its own")


def _open(target: str, version: Optional[int] = None, branch: Optional[str] = None):
    """A table by location, or by ``ns.name`` through the catalog (main's commits go through
    its row); ``branch``: a handle on that branch (at its ``version``)."""
    try:
        if not _is_identifier(target):
            return lamina.open_table(target, version=version, branch=branch)
        uri, source = chosen()
        error = missing(uri, source)
        if error is not None:
            raise CatalogNotFound(f"{target!r} is not a table location, and {error}")
        table = load_catalog(uri).load_table(target)
        if version is not None:
            return lamina.open_table(table.uri, version=version, branch=branch)
        return table if branch is None else table.branch(branch)
    except LaminaError as e:
        _fail(e)


def _of(t: Any) -> str:
    """The table, and the branch if not main, for titles and messages."""
    return t.uri if t.branch_name == MAIN_BRANCH else f"{t.uri} (branch {t.branch_name})"


def _progress():
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total or 1)
        bar.update(tasks[stage], completed=done, total=total or 1)

    return bar, update


def _freed(rep: Any, dry_run: bool) -> str:
    """What a deletion freed (a tag's or a branch's)."""
    return (f"{'would free' if dry_run else 'freed'} {len(rep.deleted_files)} data files, "
            f"{len(rep.deleted_manifests)} manifests, {human_bytes(rep.deleted_bytes)}")


def _ts(ms: int) -> str:
    return iso_ms(ms, sep=" ")


def _format(output: OutputFormat, as_json: bool = False, as_csv: bool = False) -> str:
    try:
        return output_format(output, as_json, as_csv)
    except LaminaError as e:
        _fail(e)


def _system_listing(uri: str, name: str, output: OutputFormat) -> "tuple[lamina.Table, pa.Table] | None":
    """The table and its system table ``name`` for a listing command; None once printed as
    json or csv (machine output: the system table's rows as they are)."""
    fmt = _format(output)
    t = _open(uri)
    try:
        rows = t.system_table(name)
    except LaminaError as e:
        _fail(e)
    if fmt != TABLE:
        write_table(rows, fmt)
        return None
    return t, rows


@app.command()
def info(
    uri: str, version: Optional[int] = typer.Option(None, "--version", "-v"), output: OutputFormat = OUTPUT, as_json: bool = JSON_FLAG,
    branch: Optional[str] = _BRANCH,
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
        "partition_by": [f"{f.transform}({t.metadata.schema.name_of(f.source_id)}) as {f.name}" for f in t.partition_spec.fields],
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
        space = t.storage()
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
    "+rows": "added-records", "-rows": "removed-records", "total rows": "total-records",
    "+files": "added-files", "-files": "removed-files", "deleted rows": "deleted-rows",
}


def _count(v: Any) -> int | None:
    return None if v is None or v == "" else int(v)


@app.command()
def history(uri: str, limit: Optional[int] = limit_option(50, "versions"), output: OutputFormat = OUTPUT, branch: Optional[str] = _BRANCH):
    """List versions, newest first; json and csv print them as the rows of $snapshots."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    if fmt != TABLE:
        snapshots = t.system_table("snapshots")
        newest_first = snapshots.take(pa.array(range(snapshots.num_rows - 1, -1, -1), pa.int64()))
        write_table(newest_first.slice(0, limit), fmt)
        return
    hist = t.history(limit=limit or 50)
    operations = [h["operation"] + (f" ({h['summary']['schema-changes']})" if h["summary"].get("schema-changes") else "")
                  for h in hist]
    tbl = pa.table({
        "version": pa.array([h["version"] for h in hist], pa.int64()),
        "timestamp": pa.array([h["timestamp_ms"] for h in hist], pa.timestamp("ms", "UTC")),
        "operation": pa.array(operations, pa.string()),
        **{c: pa.array([_count(h["summary"].get(key)) for h in hist], pa.int64()) for c, key in _HISTORY_COUNTS.items()},
    })
    print_table(tbl, f"history of {_of(t)}", whole_words=["operation"], counts=_HISTORY_COUNTS,
                hint="--output json or csv prints every column")


@app.command()
def schema(
    uri: str,
    version: Optional[str] = typer.Option(None, "--version", "-v", help="version number (or tag name)"),
    tag: Optional[str] = typer.Option(None, "--tag", "-t", help="tag name"),
    as_json: bool = typer.Option(False, "--json"),
    branch: Optional[str] = _BRANCH,
):
    """Print the schema of a version or tag, with field ids, defaults and docs."""
    t = _open(uri, branch=branch)
    try:
        vm = t.scan(version=version, tag=tag).vm
    except LaminaError as e:
        _fail(e)
    fields = vm.schema.describe()
    if as_json:
        console.print_json(json.dumps({"version": vm.version, "schema_id": vm.schema.schema_id, "fields": fields}))
        return
    # Types whole (timestamp[us, tz=UTC]: as text, not markup), a nested field indented under its parent.
    shown = pa.table({
        "id": pa.array([f["field_id"] for f in fields], pa.int64()),
        "column": ["  " * f["depth"] + f["path"].rsplit(".", 1)[-1] if f["depth"] else f["path"] for f in fields],
        "type": [f["type"] for f in fields],
        "required": ["yes" if f["required"] else "" for f in fields],
        "default": [f["initial_default"] or "" for f in fields],
        "doc": [f["doc"] or "" for f in fields],
    })
    print_table(shown, f"schema #{vm.schema.schema_id} of {_of(t)} at version {vm.version}", whole_words=["type"],
                hint="--json prints every field")


# How the metadata listings show in a table: sizes, counts and paths by column name (as
# the system tables, and the commands built on them, name them).
_SIZES = {"size"}
_COUNTS = {"record_count", "file_count", "total_files", "total_records", "dv_cardinality", "head_records", "versions",
           "records", "rows", "deleted rows"}
_PATHS = {"path", "dv_path", "location"}


def _units(tbl: pa.Table) -> dict[str, Any]:
    """``print_table``'s sizes, counts and paths among ``tbl``'s columns ($files' null counts too)."""
    names = set(tbl.column_names)
    return {"sizes": names & _SIZES, "paths": names & _PATHS,
            "counts": {n for n in names if n in _COUNTS or n.startswith("null_count.")}}


@app.command()
def files(
    uri: str,
    version: Optional[str] = typer.Option(None, "--version", "-v", help="version number or tag name"),
    where: Optional[str] = typer.Option(None, "--where", "-w", help="SQL predicate to prune by"),
    limit: Optional[int] = limit_option(100, "files"),
    output: OutputFormat = OUTPUT,
    branch: Optional[str] = _BRANCH,
):
    """List the live data files of a version or tag (pruned by --where); json and csv name their columns as $files does."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    try:
        plan = t.scan(where=where, version=version).plan()
    except LaminaError as e:
        _fail(e)
    e = plan.entries
    listed = pa.table({
        "path": e["path"], "size": e["size"], "record_count": e["record_count"], "added_version": e["added_version"],
        "partition": e["partition_path"], "dv_cardinality": e["dv_cardinality"],
    }).slice(0, limit if limit is not None or fmt != TABLE else 100)
    if fmt != TABLE:
        write_table(listed, fmt)
        return
    # The path holds the partition's directory: it folds after its slashes, whole.
    shown = listed.select(["path", "record_count", "size", "added_version", "dv_cardinality"])
    shown = shown.set_column(4, "dv_cardinality", pc.fill_null(shown["dv_cardinality"], 0))
    print_table(shown, f"{human_count(len(plan))} files, {human_count(plan.record_count)} rows",
                headers={"record_count": "rows", "added_version": "added in", "dv_cardinality": "deleted rows"},
                counts={"record_count", "dv_cardinality"}, sizes={"size"}, paths={"path"})
    if len(plan) > shown.num_rows:
        console.print(f"... {len(plan) - shown.num_rows} more (use --limit)")


# -- the change data feed ------------------------------------------------------------------------

# The change columns as the table of rows shows them: first, and in words that wrap.
_CHANGE_HEADERS = {COMMIT_VERSION: "version", COMMIT_TIMESTAMP: "commit time", CHANGE_TYPE: "change"}
_COUNT_HEADERS = {"timestamp": "commit time", "update_preimage": "update preimage", "update_postimage": "update postimage"}


def _point_in_time(text: Optional[str]) -> Optional[str | int]:
    """A time as given on the command line: digits are epoch milliseconds, else ISO 8601."""
    return int(text) if text is not None and text.strip().isascii() and text.strip().isdigit() else text


@app.command()
def changes(
    uri: str = typer.Argument(..., help="table location, or ns.name of the catalog (--catalog)"),
    from_version: Optional[int] = typer.Option(None, "--from", help="the changes after this version: the range is (from, to]"),
    from_timestamp: Optional[str] = typer.Option(
        None, "--from-timestamp", help="the changes committed at or after this time (ISO 8601, or epoch ms)"),
    from_tag: Optional[str] = typer.Option(None, "--from-tag", help="the changes after this tag's version"),
    to_version: Optional[int] = typer.Option(None, "--to", help="up to this version, included (default: the latest)"),
    to_timestamp: Optional[str] = typer.Option(None, "--to-timestamp", help="up to the versions committed at or before this time"),
    to_tag: Optional[str] = typer.Option(None, "--to-tag", help="up to this tag's version, included"),
    where: Optional[str] = typer.Option(None, "--where", "-w", help="SQL predicate the changed rows match"),
    columns: Optional[str] = typer.Option(
        None, "--columns", help="comma-separated columns to show (also _row_id, _last_updated_version)"),
    summary: bool = typer.Option(False, "--summary", help="count the change rows by version and change type"),
    output: OutputFormat = OUTPUT,
    as_json: bool = JSON_FLAG,
    as_csv: bool = CSV_FLAG,
    limit: Optional[int] = limit_option(50, "change rows"),
    branch: Optional[str] = _BRANCH,
):
    """Show the change data feed: the rows the versions in (from, to] inserted, deleted or updated."""
    fmt = _format(output, as_json, as_csv)
    if summary and (columns is not None or limit is not None):
        _fail(InvalidArgument("--summary counts every change of the range: --columns and --limit apply to the rows listed without it"))
    if sum(x is not None for x in (from_version, from_timestamp, from_tag)) != 1:
        _fail(InvalidArgument("say where the changes start with one of --from VERSION, --from-timestamp TIME or --from-tag TAG "
                              "(the changes after it are shown)"))
    if sum(x is not None for x in (to_version, to_timestamp, to_tag)) > 1:
        _fail(InvalidArgument("pass at most one of --to, --to-timestamp or --to-tag (without one, the range ends at the latest version)"))
    t = _open(uri, branch=branch)
    try:
        feed = t.changes(
            from_version, to_version, start_timestamp=_point_in_time(from_timestamp), end_timestamp=_point_in_time(to_timestamp),
            start_tag=from_tag, end_tag=to_tag, where=where,
            columns=None if columns is None else [c.strip() for c in columns.split(",") if c.strip()],
        )
        if summary:
            _print_change_counts(feed, fmt)
        elif fmt != TABLE:
            write_rows(at_most(feed.to_batches(), limit), feed.schema, fmt)
        else:
            _print_change_rows(feed, limit or 50, where)
    except LaminaError as e:
        _fail(e)


def _span(feed: ChangeFeed) -> str:
    return f"versions ({feed.start_version}, {feed.end_version}]"


def _print_change_rows(feed: ChangeFeed, limit: int, where: Optional[str]) -> None:
    """The first ``limit`` change rows, the change columns first; computing no version past them."""
    rows = pa.Table.from_batches(list(at_most(feed.to_batches(), limit + 1)), feed.schema)
    shown = rows.slice(0, limit)
    data = [c for c in shown.column_names if c not in {f.name for f in CHANGE_FIELDS}]
    print_table(
        shown.select([COMMIT_VERSION, COMMIT_TIMESTAMP, CHANGE_TYPE, *data]), f"changes in {_span(feed)}",
        headers=_CHANGE_HEADERS, short_times=[COMMIT_TIMESTAMP], whole_words=[CHANGE_TYPE],
        hint="--columns picks columns; --output json or csv prints every one",
    )
    if rows.num_rows > limit:
        console.print(f"the first {limit} change rows; more follow (--limit N, or --summary to count them)")
    elif not rows.num_rows:
        console.print(f"no row changes in {_span(feed)}" + (" matching --where" if where else ""))


def _print_change_counts(feed: ChangeFeed, fmt: str) -> None:
    counts = feed.counts()
    if fmt != TABLE:
        write_rows(counts.to_batches(), counts.schema, fmt)
        return
    print_table(counts, f"change rows in {_span(feed)} by version and type", headers=_COUNT_HEADERS,
                whole_words=["operation"], counts=CHANGE_TYPES)
    n = {kind: int(pc.sum(counts.column(kind)).as_py() or 0) for kind in CHANGE_TYPES}
    console.print(f"{human_count(sum(n.values()))} change rows: " + ", ".join(f"{human_count(n[kind])} {kind}" for kind in CHANGE_TYPES))


@app.command()
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


# -- tags ------------------------------------------------------------------------------

tag_app = typer.Typer(help="Create, delete and list tags.", no_args_is_help=True)
app.add_typer(tag_app, name="tag")


@tag_app.command("create")
def tag_create(
    uri: str,
    name: str,
    version: Optional[int] = typer.Option(None, "--version", "-v", help="version to tag (default: latest)"),
    expires_in: Optional[str] = typer.Option(None, "--expires-in", help="delete the tag at expiry after this long, e.g. 30d"),
    branch: Optional[str] = _BRANCH,
):
    """Tag a version (put-if-absent: an existing tag is never overwritten)."""
    t = _open(uri, branch=branch)
    try:
        tag = t.create_tag(name, version, expires_at=_duration(expires_in) if expires_in else None)
    except LaminaError as e:
        _fail(e)
    on = "" if t.branch_name == MAIN_BRANCH else f" of branch {t.branch_name}"
    console.print(f"tagged version {tag.tagged_version}{on} as [bold]{tag.name}[/bold]")


@tag_app.command("delete")
def tag_delete(uri: str, name: str, dry_run: bool = typer.Option(False, "--dry-run", help="only report")):
    """Delete a tag and the files only it held."""
    t = _open(uri)
    try:
        rep = t.delete_tag(name, dry_run=dry_run)
    except LaminaError as e:
        _fail(e)
    console.print(f"{'would delete' if dry_run else 'deleted'} tag {name}; {_freed(rep, dry_run)}")


@tag_app.command("list")
def tag_list(uri: str, output: OutputFormat = OUTPUT):
    """List tags, oldest tagged version first; json and csv print the rows of $tags."""
    listed = _system_listing(uri, "tags", output)
    if listed is None:
        return
    t, tags = listed
    shown = tags.select(["tag_name", "tagged_version", "commit_time", "record_count", "created_at", "expires_at", "automatic"])
    shown = shown.set_column(6, "automatic", pa.array(["yes" if a else "" for a in tags["automatic"].to_pylist()], pa.string()))
    print_table(shown, f"tags of {t.uri}", null="-", headers={
        "tag_name": "tag", "tagged_version": "version", "commit_time": "committed", "record_count": "records",
        "created_at": "created", "expires_at": "expires", "automatic": "auto"}, **_units(shown))


# -- branches ----------------------------------------------------------------------------

branch_app = typer.Typer(help="Create, list, rename, delete and publish branches (write-audit-publish).", no_args_is_help=True)
app.add_typer(branch_app, name="branch")


@branch_app.command("create")
def branch_create(
    uri: str,
    name: str,
    from_version: Optional[int] = typer.Option(None, "--from-version", help="make it from this version (default: the latest)"),
    from_tag: Optional[str] = typer.Option(None, "--from-tag", help="make it from this tag's version"),
    from_timestamp: Optional[str] = typer.Option(
        None, "--from-timestamp", help="make it from the version current at this time (ISO 8601, or epoch ms)"),
    from_branch: Optional[str] = typer.Option(
        None, "--from-branch", help="make it from this branch (default: main); --from-version is then that branch's"),
    retain_last: Optional[int] = typer.Option(None, "--retain-last", help="expiry keeps at least this many of its newest versions"),
    max_age: Optional[str] = typer.Option(None, "--max-age", help="expiry's default cutoff on the branch, e.g. 7d"),
):
    """Make a branch from a version (nothing is copied): writes to it stay off main until published."""
    t = _open(uri)
    try:
        b = t.create_branch(
            name, from_version=from_version, from_tag=from_tag, from_timestamp=_point_in_time(from_timestamp),
            from_branch=from_branch, retain_last=retain_last, max_age=_duration(max_age) if max_age else None,
        )
    except LaminaError as e:
        _fail(e)
    record = b.branch_record
    console.print(f"created branch [bold]{name}[/bold] from version {record.base_version} of {record.base_branch}")


@branch_app.command("list")
def branch_list(uri: str, output: OutputFormat = OUTPUT):
    """List the branches, main first: latest version, where each was made from, retention; json and csv print the rows of $branches."""
    listed = _system_listing(uri, "branches", output)
    if listed is None:
        return
    t, b = listed
    made_from = [None if br is None else f"{br}@{v}" for br, v in zip(b["base_branch"].to_pylist(), b["base_version"].to_pylist())]
    shown = pa.table({
        "branch": b["name"], "version": b["head_version"], "committed": b["head_timestamp"], "records": b["head_records"],
        "versions": b["versions"], "made from": pa.array(made_from, pa.string()), "retain last": b["retain_last"],
        "max age": pa.array([None if ms is None else _duration_text(ms) for ms in b["max_age_ms"].to_pylist()], pa.string()),
        "created": b["created_at"],
    })
    print_table(shown, f"branches of {t.uri}", null="-", counts={"records", "versions"},
                hint="--output json or csv prints every column")


@branch_app.command("rename")
def branch_rename(uri: str, name: str, new_name: str):
    """Give a branch a new name (same versions; writers holding it carry on)."""
    t = _open(uri)
    try:
        t.rename_branch(name, new_name)
    except LaminaError as e:
        _fail(e)
    console.print(f"renamed branch {name} to [bold]{new_name}[/bold]")


@branch_app.command("delete")
def branch_delete(uri: str, name: str):
    """Delete a branch: it can no longer be read or written. The files only it held are freed by
    the next `lamina expire` once the deletion is older than the reader grace, or by `lamina remove-orphans`."""
    t = _open(uri)
    try:
        t.delete_branch(name)
    except LaminaError as e:
        _fail(e)
    console.print(f"deleted branch {name}; the next `lamina expire` frees the files only it held (after the reader grace)")


@branch_app.command("publish")
def branch_publish(
    uri: str,
    name: str,
    into: str = typer.Option(MAIN_BRANCH, "--into", help="the branch to publish into"),
    expected_version: Optional[int] = typer.Option(
        None, "--expected-version", help="publish only if --into is still at this version (what the audit saw)"),
):
    """Publish a branch's changes into main (or --into) as one version: a fast-forward if main has not moved since the branch was made, else its changes re-applied (refused if they clash)."""  # one line: typer keeps a docstring's line breaks
    t = _open(uri)
    try:
        v = t.publish(name, into, expected_version=expected_version)
        if v is None:
            console.print(f"branch {name} has no commits: nothing published into {into}")
            return
        how = t.branch(into).log.load(v).summary.get("publish", "")
    except LaminaError as e:
        _fail(e)
    console.print(f"published branch {name} into {into} ({how}): version {v}")


# -- table properties ----------------------------------------------------------------------

properties_app = typer.Typer(help="List, set and unset table properties (each change is one version).", no_args_is_help=True)
app.add_typer(properties_app, name="properties")


def _assignments(items: list[str]) -> dict[str, str]:
    """``key=value`` arguments as a mapping (the value may hold '=')."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise typer.BadParameter(f"{item!r} is not key=value, e.g. write.parquet.compression=zstd")
        if key.strip() in out:
            raise typer.BadParameter(f"{key.strip()!r} is given twice; give each property once")
        out[key.strip()] = value
    return out


def _update_properties(uri: str, branch: Optional[str], **change: Any) -> None:
    """Commit ``t.update_properties(**change)`` and say what it did."""
    t = _open(uri, branch=branch)
    try:
        v = t.update_properties(**change)
    except LaminaError as e:
        _fail(e)
    if v is None:
        console.print(f"nothing to change: {_of(t)} has every property so already")
        return
    s = t.metadata.summary
    done = [f"{what} {s[key]}" for what, key in (("set", "properties-set"), ("removed", "properties-removed")) if s.get(key)]
    console.print(f"version {v}: {'; '.join(done)}")


@properties_app.command("set")
def properties_set(
    uri: str,
    assignments: list[str] = typer.Argument(..., help="key=value, one or more"),
    branch: Optional[str] = _BRANCH,
):
    """Set table properties in one version (writes after it use them); refused, with nothing committed, for the ones fixed when the table was created."""  # one line: typer keeps a docstring's line breaks
    _update_properties(uri, branch, set=_assignments(assignments))


@properties_app.command("unset")
def properties_unset(
    uri: str,
    keys: list[str] = typer.Argument(..., help="property keys, one or more"),
    branch: Optional[str] = _BRANCH,
):
    """Remove table properties in one version (each then reads its default)."""
    _update_properties(uri, branch, remove=keys)


@properties_app.command("list")
def properties_list(uri: str, output: OutputFormat = OUTPUT, branch: Optional[str] = _BRANCH):
    """List the properties the table sets, by key; json and csv print one row per property."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    props = sorted(t.properties.items())
    rows = pa.table({"key": pa.array([k for k, _ in props], pa.string()), "value": pa.array([v for _, v in props], pa.string())})
    if fmt != TABLE:
        write_table(rows, fmt)
        return
    print_table(rows, f"properties of {_of(t)} (version {t.version})", hint="unset ones read their defaults (docs/format.md)")


# -- rollback, expiry, orphans -------------------------------------------------------------


@app.command()
def rollback(
    uri: str,
    to: str = typer.Argument(..., help="version number or tag name to roll back to"),
    destructive: bool = typer.Option(False, "--destructive", help="also delete the versions after the target"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask before a destructive rollback"),
    branch: Optional[str] = _BRANCH,
):
    """Commit a new version whose content equals a version's or a tag's."""
    t = _open(uri, branch=branch)
    if destructive and not yes:
        typer.confirm(f"delete every version of {_of(t)} after {to} (tags stay)?", abort=True)
    try:
        v = t.rollback(to, destructive=destructive)
    except LaminaError as e:
        _fail(e)
    console.print(f"rolled back to {to}: committed version {v}")


@app.command()
def expire(
    uri: str,
    older_than: Optional[str] = typer.Option(None, "--older-than", help="age, e.g. 5d (default 5d unless --retain-last)"),
    retain_last: Optional[int] = typer.Option(None, "--retain-last", help="always keep this many newest versions"),
    reader_grace: Optional[str] = typer.Option(None, "--reader-grace", help="keep versions superseded less than this ago (default 1h)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="only report what would be deleted"),
    branch: Optional[str] = _BRANCH,
):
    """Expire old versions and delete the files only they needed (tags keep theirs)."""
    t = _open(uri, branch=branch)
    bar, update = _progress()
    try:
        with bar:
            rep = t.expire_versions(
                older_than=_duration(older_than) if older_than else None, retain_last=retain_last,
                reader_grace=_duration(reader_grace) if reader_grace else None, dry_run=dry_run, progress=update,
            )
    except LaminaError as e:
        _fail(e)
    would = "would " if dry_run else ""
    span = f"{rep.expired_versions[0]}..{rep.expired_versions[-1]}" if rep.expired_versions else "none"
    console.print(Text(
        f"{would}expire {len(rep.expired_versions)} versions ({span}) and {len(rep.expired_tags)} tags; {would}delete "
        f"{len(rep.deleted_files)} data files and {len(rep.deleted_manifests)} manifests, {human_bytes(rep.deleted_bytes)}; "
        f"{rep.kept_for_tags} files kept for tags; {would}free {rep.freed_slots} version slots"
    ))
    kept = kept_versions_line(rep, older_than)
    if kept:
        console.print(Text(kept, style="yellow"))
    _print_held(uri, t)


@app.command("remove-orphans")
def remove_orphans(
    uri: str,
    older_than: str = typer.Option("3d", "--older-than", help="only files older than this (at least 1d)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="only list what would be deleted"),
    allow_short_age: bool = typer.Option(False, "--allow-short-age", help="allow --older-than below 1d (no writer running)"),
):
    """Delete files no version or tag references (vacuum), sparing in-flight writes."""
    t = _open(uri)
    bar, update = _progress()
    try:
        with bar:
            rep = t.remove_orphans(_duration(older_than), dry_run=dry_run, allow_short_age=allow_short_age, progress=update)
    except LaminaError as e:
        _fail(e)
    for p in rep.orphans[:50]:
        console.print(f"{'would delete' if dry_run else 'deleted'} {p}")
    console.print(
        f"{len(rep.orphans)} orphans ({human_bytes(rep.deleted_bytes)}) of {rep.scanned} files; "
        f"kept {rep.kept_young} younger than {older_than}, {rep.kept_in_flight} of writes in flight"
    )
    _print_held(uri, t)


def _print_held(uri: str, t: Any) -> None:
    """What holds the table's space after a maintenance run, and the commands that free it."""
    try:
        lines = held_lines(uri, t.storage())
    except LaminaError as e:
        _fail(e)
    for line in lines:
        console.print(Text(line))


app.command("vacuum", help="Alias of remove-orphans.")(remove_orphans)


@app.command()
def compact(
    uri: str = typer.Argument(..., help="table location, or ns.name of the catalog (--catalog)"),
    target_mb: int = typer.Option(128, "--target-mb", help="target output file size in MB"),
    where: Optional[str] = typer.Option(None, "--where", "-w", help="only files that may hold rows matching this"),
    sort_by: Optional[str] = typer.Option(None, "--sort-by", help="comma-separated columns to sort outputs by"),
    branch: Optional[str] = _BRANCH,
):
    """Bin-pack small files (and files with deletion vectors) into large ones, in one version."""
    t = _open(uri, branch=branch)
    bar, update = _progress()
    try:
        with bar:
            r = t.compact(target_file_size=target_mb * 1024 * 1024, where=where, sort_by=sort_by, progress=update)
    except LaminaError as e:
        _fail(e)
    if r.version is None:
        console.print(f"nothing to compact ({r.files_before} files)")
        return
    console.print(
        f"version {r.version}: {r.input_files} files in {r.groups} groups -> {r.output_files} files; "
        f"table files {r.files_before} -> {r.files_after}"
    )


@app.command()
def system(
    uri: str,
    name: str = typer.Argument(..., help="snapshots, tags, branches, files, manifests or schemas"),
    version: Optional[str] = typer.Option(None, "--version", "-v", help="version or tag (files, manifests)"),
    limit: Optional[int] = limit_option(50),
    output: OutputFormat = OUTPUT,
    branch: Optional[str] = _BRANCH,
):
    """Print a system table ($snapshots, $tags, $branches, $files, $manifests, $schemas)."""
    fmt = _format(output)
    t = _open(uri, branch=branch)
    try:
        tbl = t.system_table(name, version=version)
    except LaminaError as e:
        _fail(e)
    if fmt != TABLE:
        write_table(tbl.slice(0, limit), fmt)
        return
    shown = tbl.slice(0, limit or 50)
    print_table(shown, f"${name.lstrip('$')} ({human_count(tbl.num_rows)} rows)", whole_words=["operation"],
                hint="--output json or csv prints every column", **_units(shown))


@app.command()
def ui(
    target: Optional[str] = typer.Argument(None, help="catalog URI or table location (default: --catalog)"),
    port: int = typer.Option(8765, "--port", "-p", help="port on the loopback address (0: any free port)"),
    host: str = typer.Option("127.0.0.1", "--host", help="loopback address to bind (127.0.0.1, ::1 or localhost)"),
    open_browser: bool = typer.Option(False, "--open/--no-open", help="open the page in this machine's browser"),
):
    """Serve a local, read-only web explorer of a catalog's tables or of one table."""
    from lamina.ui.server import serve

    uri, source = (target, "given as the target") if target else chosen()
    try:
        error = missing(uri, source) if uri.startswith("sqlite:") or "://" not in uri else None
    except LaminaError as e:
        _fail(e)
    if error is not None:  # a local path is a table's location or a directory catalog's warehouse
        _fail(error if "://" in uri else CatalogNotFound(f"{uri!r} is no table location, and {error}"))
    target = uri
    try:
        server, url = serve(target, host, port)
    except LaminaError as e:
        _fail(e)
    except OSError as e:
        _fail(InvalidArgument(f"cannot listen on {host}:{port} ({e.strerror}); pick another --port"))
    console.print(f"Lamina explorer of {target} at [bold]{url}[/bold] (read-only; Ctrl-C stops it)")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


# -- catalogs (lamina/cli/catalog.py) ---------------------------------------------------------

from lamina.cli.catalog import catalog_app  # noqa: E402
from lamina.cli.convert import convert  # noqa: E402
from lamina.cli.iceberg import iceberg_app, serve_iceberg  # noqa: E402
from lamina.cli.sql import sql  # noqa: E402

app.add_typer(catalog_app, name="catalog")
app.add_typer(iceberg_app, name="iceberg")
app.command("serve-iceberg")(serve_iceberg)
app.command()(sql)
app.command()(convert)


if __name__ == "__main__":  # pragma: no cover
    app()
