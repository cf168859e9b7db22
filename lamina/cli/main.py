"""`lamina` command: info, history, files, fsck (typer + rich)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Optional

import pyarrow.compute as pc
import typer
from rich.console import Console
from rich.table import Table as RichTable

import lamina
from lamina.errors import LaminaError
from lamina.maintenance import fsck as run_fsck

app = typer.Typer(help="Inspect and maintain Lamina tables.", no_args_is_help=True, add_completion=False)
console = Console()
err = Console(stderr=True)


def _open(uri: str, version: Optional[int] = None):
    try:
        return lamina.open_table(uri, version=version)
    except LaminaError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


@app.command()
def info(uri: str, version: Optional[int] = typer.Option(None, "--version", "-v"), as_json: bool = typer.Option(False, "--json")):
    """Show a table's version, schema, partitioning, properties and features."""
    t = _open(uri, version)
    vm = t.metadata
    doc = {
        "location": t.uri,
        "uuid": vm.table_uuid,
        "version": vm.version,
        "timestamp": _ts(vm.timestamp_ms),
        "format_version": vm.format_version,
        "files": vm.summary.get("total-files"),
        "records": vm.summary.get("total-records"),
        "schema": [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in t.schema],
        "partition_by": [f"{f.transform}({t.metadata.schema.name_of(f.source_id)}) as {f.name}" for f in t.partition_spec.fields],
        "properties": vm.properties,
        "reader_features": list(vm.reader_features),
        "writer_features": list(vm.writer_features),
    }
    if as_json:
        console.print_json(json.dumps(doc))
        return
    for k, v in doc.items():
        if isinstance(v, list):
            v = ", ".join(v) if v else "-"
        console.print(f"[bold]{k:>16}[/bold]  {v}")


@app.command()
def history(uri: str, limit: int = typer.Option(50, "--limit", "-n")):
    """List versions, newest first."""
    t = _open(uri)
    rt = RichTable(title=f"history of {t.uri}")
    for c in ("version", "timestamp", "operation", "+files", "-files", "+rows", "-rows", "total rows"):
        rt.add_column(c, justify="right" if c != "operation" else "left")
    for h in t.history(limit=limit):
        s = h["summary"]
        rt.add_row(
            str(h["version"]), _ts(h["timestamp_ms"]), h["operation"],
            str(s.get("added-files", "")), str(s.get("removed-files", "")),
            str(s.get("added-records", "")), str(s.get("removed-records", "")), str(s.get("total-records", "")),
        )
    console.print(rt)


@app.command()
def files(
    uri: str,
    version: Optional[int] = typer.Option(None, "--version", "-v"),
    where: Optional[str] = typer.Option(None, "--where", "-w", help="SQL predicate to prune by"),
    limit: int = typer.Option(100, "--limit", "-n"),
):
    """List the live data files of a version (pruned by --where)."""
    t = _open(uri)
    try:
        plan = t.scan(where=where, version=version).plan()
    except LaminaError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    rt = RichTable(title=f"{len(plan)} files, {plan.record_count} rows")
    for c in ("path", "rows", "bytes", "partition", "added in", "deleted rows"):
        rt.add_column(c)
    e = plan.entries.slice(0, limit)
    for r in e.select(["path", "record_count", "size", "partition_path", "added_version", "dv_cardinality"]).to_pylist():
        rt.add_row(r["path"], str(r["record_count"]), str(r["size"]), r["partition_path"] or "-", str(r["added_version"]), str(r["dv_cardinality"] or 0))
    console.print(rt)
    if len(plan) > limit:
        console.print(f"... {len(plan) - limit} more (use --limit)")


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
    console.print(f"{len(rep.missing)} missing, {len(rep.errors)} errors, {len(rep.unreferenced)} unreferenced")
    if not rep.ok:
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover
    app()
