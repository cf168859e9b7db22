"""``lamina changes``: the change data feed of a range of versions, as rows or counted."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import typer

from lamina.cli._output import (
    CSV_FLAG,
    JSON_FLAG,
    OUTPUT,
    TABLE,
    OutputFormat,
    at_most,
    console,
    human_count,
    limit_option,
    print_table,
    write_rows,
)
from lamina.cli._output import fail as _fail
from lamina.cli._tables import BRANCH as _BRANCH
from lamina.cli._tables import format_of as _format
from lamina.cli._tables import open_target as _open
from lamina.cli._tables import point_in_time as _point_in_time
from lamina.data.changes import CHANGE_FIELDS, CHANGE_TYPE, CHANGE_TYPES, COMMIT_TIMESTAMP, COMMIT_VERSION
from lamina.errors import InvalidArgument, LaminaError
from lamina.table.changes import ChangeFeed

# The change columns as the table of rows shows them: first, and in words that wrap.
_CHANGE_HEADERS = {COMMIT_VERSION: "version", COMMIT_TIMESTAMP: "commit time", CHANGE_TYPE: "change"}
_COUNT_HEADERS = {
    "timestamp": "commit time",
    "update_preimage": "update preimage",
    "update_postimage": "update postimage",
}


def changes(
    uri: str = typer.Argument(..., help="table location, or ns.name of the catalog (--catalog)"),
    from_version: int | None = typer.Option(
        None, "--from", help="the changes after this version: the range is (from, to]"
    ),
    from_timestamp: str | None = typer.Option(
        None, "--from-timestamp", help="the changes committed at or after this time (ISO 8601, or epoch ms)"
    ),
    from_tag: str | None = typer.Option(None, "--from-tag", help="the changes after this tag's version"),
    to_version: int | None = typer.Option(None, "--to", help="up to this version, included (default: the latest)"),
    to_timestamp: str | None = typer.Option(
        None, "--to-timestamp", help="up to the versions committed at or before this time"
    ),
    to_tag: str | None = typer.Option(None, "--to-tag", help="up to this tag's version, included"),
    where: str | None = typer.Option(None, "--where", "-w", help="SQL predicate the changed rows match"),
    columns: str | None = typer.Option(
        None, "--columns", help="comma-separated columns to show (also _row_id, _last_updated_version)"
    ),
    summary: bool = typer.Option(False, "--summary", help="count the change rows by version and change type"),
    output: OutputFormat = OUTPUT,
    as_json: bool = JSON_FLAG,
    as_csv: bool = CSV_FLAG,
    limit: int | None = limit_option(50, "change rows"),
    branch: str | None = _BRANCH,
):
    """Show the change data feed: the rows the versions in (from, to] inserted, deleted or updated."""
    fmt = _format(output, as_json, as_csv)
    if summary and (columns is not None or limit is not None):
        _fail(
            InvalidArgument(
                "--summary counts every change of the range: --columns and --limit apply to the rows listed without it"
            )
        )
    if sum(x is not None for x in (from_version, from_timestamp, from_tag)) != 1:
        _fail(
            InvalidArgument(
                "say where the changes start with one of --from VERSION, --from-timestamp TIME or --from-tag TAG "
                "(the changes after it are shown)"
            )
        )
    if sum(x is not None for x in (to_version, to_timestamp, to_tag)) > 1:
        _fail(
            InvalidArgument(
                "pass at most one of --to, --to-timestamp or --to-tag (without one, the range ends at the latest version)"
            )
        )
    t = _open(uri, branch=branch)
    try:
        feed = t.changes(
            from_version if from_tag is None else from_tag,
            to_version if to_tag is None else to_tag,
            start_timestamp=_point_in_time(from_timestamp),
            end_timestamp=_point_in_time(to_timestamp),
            where=where,
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


def _print_change_rows(feed: ChangeFeed, limit: int, where: str | None) -> None:
    """The first ``limit`` change rows, the change columns first; computing no version past them."""
    rows = pa.Table.from_batches(list(at_most(feed.to_batches(), limit + 1)), feed.schema)
    shown = rows.slice(0, limit)
    data = [c for c in shown.column_names if c not in {f.name for f in CHANGE_FIELDS}]
    print_table(
        shown.select([COMMIT_VERSION, COMMIT_TIMESTAMP, CHANGE_TYPE, *data]),
        f"changes in {_span(feed)}",
        headers=_CHANGE_HEADERS,
        short_times=[COMMIT_TIMESTAMP],
        whole_words=[CHANGE_TYPE],
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
    print_table(
        counts,
        f"change rows in {_span(feed)} by version and type",
        headers=_COUNT_HEADERS,
        whole_words=["operation"],
        counts=CHANGE_TYPES,
    )
    n = {kind: int(pc.sum(counts.column(kind)).as_py() or 0) for kind in CHANGE_TYPES}
    console.print(
        f"{human_count(sum(n.values()))} change rows: "
        + ", ".join(f"{human_count(n[kind])} {kind}" for kind in CHANGE_TYPES)
    )
