"""``lamina tag ...`` and ``lamina branch ...``: the names of versions (tags) and the lines of
versions beside main (branches: write-audit-publish)."""

from __future__ import annotations

import pyarrow as pa
import typer

from lamina.cli._output import OUTPUT, OutputFormat, console, print_table
from lamina.cli._output import duration_text as _duration_text
from lamina.cli._output import fail as _fail
from lamina.cli._output import parse_duration as _duration
from lamina.cli._tables import BRANCH as _BRANCH
from lamina.cli._tables import freed_text as _freed
from lamina.cli._tables import listing_units as _units
from lamina.cli._tables import open_target as _open
from lamina.cli._tables import point_in_time as _point_in_time
from lamina.cli._tables import system_listing as _system_listing
from lamina.errors import InvalidArgument, LaminaError
from lamina.spec.layout import MAIN_BRANCH

# -- tags ------------------------------------------------------------------------------

tag_app = typer.Typer(help="Create, delete and list tags.", no_args_is_help=True)


@tag_app.command("create")
def tag_create(
    uri: str,
    name: str,
    version: int | None = typer.Option(None, "--version", "-v", help="version to tag (default: latest)"),
    expires_in: str | None = typer.Option(
        None, "--expires-in", help="delete the tag at expiry after this long, e.g. 30d"
    ),
    branch: str | None = _BRANCH,
):
    """Tag a version (put-if-absent: an existing tag is never overwritten)."""
    t = _open(uri, branch=branch)
    try:
        tag = t.tags.create(name, version, expires_at=_duration(expires_in) if expires_in else None)
    except LaminaError as e:
        _fail(e)
    on = "" if t.branch_name == MAIN_BRANCH else f" of branch {t.branch_name}"
    console.print(f"tagged version {tag.tagged_version}{on} as [bold]{tag.name}[/bold]")


@tag_app.command("delete")
def tag_delete(uri: str, name: str, dry_run: bool = typer.Option(False, "--dry-run", help="only report")):
    """Delete a tag and the files only it held."""
    t = _open(uri)
    try:
        rep = t.tags.delete(name, dry_run=dry_run)
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
    shown = tags.select(
        ["tag_name", "tagged_version", "commit_time", "record_count", "created_at", "expires_at", "automatic"]
    )
    shown = shown.set_column(
        6, "automatic", pa.array(["yes" if a else "" for a in tags["automatic"].to_pylist()], pa.string())
    )
    print_table(
        shown,
        f"tags of {t.uri}",
        null="-",
        headers={
            "tag_name": "tag",
            "tagged_version": "version",
            "commit_time": "committed",
            "record_count": "records",
            "created_at": "created",
            "expires_at": "expires",
            "automatic": "auto",
        },
        **_units(shown),
    )


# -- branches ----------------------------------------------------------------------------

branch_app = typer.Typer(
    help="Create, list, rename, delete and publish branches (write-audit-publish).", no_args_is_help=True
)


@branch_app.command("create")
def branch_create(
    uri: str,
    name: str,
    from_version: int | None = typer.Option(
        None, "--from-version", help="make it from this version (default: the latest)"
    ),
    from_tag: str | None = typer.Option(None, "--from-tag", help="make it from this tag's version"),
    from_timestamp: str | None = typer.Option(
        None, "--from-timestamp", help="make it from the version current at this time (ISO 8601, or epoch ms)"
    ),
    from_branch: str | None = typer.Option(
        None, "--from-branch", help="make it from this branch (default: main); --from-version is then that branch's"
    ),
    retain_last: int | None = typer.Option(
        None, "--retain-last", help="expiry keeps at least this many of its newest versions"
    ),
    max_age: str | None = typer.Option(None, "--max-age", help="expiry's default cutoff on the branch, e.g. 7d"),
):
    """Make a branch from a version (nothing is copied): writes to it stay off main until published."""
    t = _open(uri)
    try:
        if sum(x is not None for x in (from_version, from_tag, from_timestamp)) > 1:
            raise InvalidArgument("pass one of --from-version, --from-tag or --from-timestamp, not several")
        if from_tag is not None and from_branch is not None:
            raise InvalidArgument("a tag names one version of the table: pass --from-tag or --from-branch, not both")
        # --from-version and --from-timestamp are of --from-branch's versions (main's by default)
        source = t.branch(from_branch) if from_branch is not None else t
        b = source.branches.create(
            name,
            version=from_tag if from_tag is not None else from_version,
            timestamp=_point_in_time(from_timestamp),
            retain_last=retain_last,
            max_age=_duration(max_age) if max_age else None,
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
    made_from = [
        None if br is None else f"{br}@{v}"
        for br, v in zip(b["base_branch"].to_pylist(), b["base_version"].to_pylist())
    ]
    shown = pa.table(
        {
            "branch": b["name"],
            "version": b["head_version"],
            "committed": b["head_timestamp"],
            "records": b["head_records"],
            "versions": b["versions"],
            "made from": pa.array(made_from, pa.string()),
            "retain last": b["retain_last"],
            "max age": pa.array(
                [None if ms is None else _duration_text(ms) for ms in b["max_age_ms"].to_pylist()], pa.string()
            ),
            "created": b["created_at"],
        }
    )
    print_table(
        shown,
        f"branches of {t.uri}",
        null="-",
        counts={"records", "versions"},
        hint="--output json or csv prints every column",
    )


@branch_app.command("rename")
def branch_rename(uri: str, name: str, new_name: str):
    """Give a branch a new name (same versions; writers holding it carry on)."""
    t = _open(uri)
    try:
        t.branches.rename(name, new_name)
    except LaminaError as e:
        _fail(e)
    console.print(f"renamed branch {name} to [bold]{new_name}[/bold]")


@branch_app.command("delete")
def branch_delete(uri: str, name: str):
    """Delete a branch: it can no longer be read or written. The files only it held are freed by
    the next `lamina expire` once the deletion is older than the reader grace, or by `lamina remove-orphans`."""
    t = _open(uri)
    try:
        t.branches.delete(name)
    except LaminaError as e:
        _fail(e)
    console.print(
        f"deleted branch {name}; the next `lamina expire` frees the files only it held (after the reader grace)"
    )


@branch_app.command("publish")
def branch_publish(
    uri: str,
    name: str,
    into: str = typer.Option(MAIN_BRANCH, "--into", help="the branch to publish into"),
    expected_version: int | None = typer.Option(
        None, "--expected-version", help="publish only if --into is still at this version (what the audit saw)"
    ),
):
    """Publish a branch's changes into main (or --into) as one version: a fast-forward if main has not moved since the branch was made, else its changes re-applied (refused if they clash)."""  # one line: typer keeps a docstring's line breaks
    t = _open(uri)
    try:
        v = t.branches.publish(name, into, expected_version=expected_version)
        if v.version is None:
            console.print(f"branch {name} has no commits: nothing published into {into}")
            return
        how = v.metrics.get("publish", "")
    except LaminaError as e:
        _fail(e)
    console.print(f"published branch {name} into {into} ({how}): version {v.version}")
