"""The commands that rewrite or free a table's versions and files: ``rollback``, ``expire``,
``remove-orphans`` (alias ``vacuum``) and ``compact``; after a run, what still holds the
table's space and the commands that free it."""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text

from lamina.cli._output import console, human_bytes
from lamina.cli._output import fail as _fail
from lamina.cli._output import parse_duration as _duration
from lamina.cli._tables import BRANCH as _BRANCH
from lamina.cli._tables import open_target as _open
from lamina.cli._tables import progress_bar as _progress
from lamina.cli._tables import table_title as _of
from lamina.cli.storage import held_lines, kept_versions_line
from lamina.errors import LaminaError


def rollback(
    uri: str,
    to: str = typer.Argument(..., help="version number or tag name to roll back to"),
    destructive: bool = typer.Option(False, "--destructive", help="also delete the versions after the target"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask before a destructive rollback"),
    branch: str | None = _BRANCH,
):
    """Commit a new version whose content equals a version's or a tag's."""
    t = _open(uri, branch=branch)
    if destructive and not yes:
        typer.confirm(f"delete every version of {_of(t)} after {to} (tags stay)?", abort=True)
    try:
        v = t.rollback(to, destructive=destructive)
    except LaminaError as e:
        _fail(e)
    console.print(f"rolled back to {to}: committed version {v.version}")


def expire(
    uri: str,
    older_than: str | None = typer.Option(None, "--older-than", help="age, e.g. 5d (default 5d unless --retain-last)"),
    retain_last: int | None = typer.Option(None, "--retain-last", help="always keep this many newest versions"),
    reader_grace: str | None = typer.Option(
        None, "--reader-grace", help="keep versions superseded less than this ago (default 1h)"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="only report what would be deleted"),
    branch: str | None = _BRANCH,
):
    """Expire old versions and delete the files only they needed (tags keep theirs)."""
    t = _open(uri, branch=branch)
    bar, update = _progress()
    try:
        with bar:
            rep = t.maintenance.expire_versions(
                older_than=_duration(older_than) if older_than else None,
                retain_last=retain_last,
                reader_grace=_duration(reader_grace) if reader_grace else None,
                dry_run=dry_run,
                progress=update,
            )
    except LaminaError as e:
        _fail(e)
    would = "would " if dry_run else ""
    span = f"{rep.expired_versions[0]}..{rep.expired_versions[-1]}" if rep.expired_versions else "none"
    console.print(
        Text(
            f"{would}expire {len(rep.expired_versions)} versions ({span}) and {len(rep.expired_tags)} tags; {would}delete "
            f"{len(rep.deleted_files)} data files and {len(rep.deleted_manifests)} manifests, {human_bytes(rep.deleted_bytes)}; "
            f"{rep.kept_for_tags} files kept for tags; {would}free {rep.freed_slots} version slots"
        )
    )
    kept = kept_versions_line(rep, older_than)
    if kept:
        console.print(Text(kept, style="yellow"))
    _print_held(uri, t)


def remove_orphans(
    uri: str,
    older_than: str = typer.Option("3d", "--older-than", help="only files older than this (at least 1d)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="only list what would be deleted"),
    allow_short_age: bool = typer.Option(
        False, "--allow-short-age", help="allow --older-than below 1d (no writer running)"
    ),
):
    """Delete files no version or tag references (vacuum), sparing in-flight writes."""
    t = _open(uri)
    bar, update = _progress()
    try:
        with bar:
            rep = t.maintenance.remove_orphans(
                _duration(older_than), dry_run=dry_run, allow_short_age=allow_short_age, progress=update
            )
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
        lines = held_lines(uri, t.maintenance.storage())
    except LaminaError as e:
        _fail(e)
    for line in lines:
        console.print(Text(line))


def compact(
    uri: str = typer.Argument(..., help="table location, or ns.name of the catalog (--catalog)"),
    target_mb: int = typer.Option(128, "--target-mb", help="target output file size in MB"),
    where: str | None = typer.Option(None, "--where", "-w", help="only files that may hold rows matching this"),
    sort_by: str | None = typer.Option(None, "--sort-by", help="comma-separated columns to sort outputs by"),
    branch: str | None = _BRANCH,
):
    """Bin-pack small files (and files with deletion vectors) into large ones, in one version."""
    t = _open(uri, branch=branch)
    bar, update = _progress()
    try:
        with bar:
            r = t.maintenance.compact(
                target_file_size=target_mb * 1024 * 1024, where=where, sort_by=sort_by, progress=update
            )
    except LaminaError as e:
        _fail(e)
    if r.version is None:
        console.print(f"nothing to compact ({r.files_before} files)")
        return
    console.print(
        f"version {r.version}: {r.input_files} files in {r.groups} groups -> {r.output_files} files; "
        f"table files {r.files_before} -> {r.files_after}"
    )
