"""What every `lamina` command prints to, and how a command fails: the error on stderr, exit 2.

Tables of rows (system tables, history, the change feed, query results) print through
``print_table``, which fits them to the terminal's width, sizes and counts in human units;
``write_rows`` prints rows for programs, whole and raw (``--output json|csv``), ``write_file``
writes them to a CSV or Parquet file.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import NamedTuple, NoReturn

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import typer
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable
from rich.text import Text

from lamina.errors import InvalidArgument

console = Console()
err = Console(stderr=True)


def fail(e: Exception) -> NoReturn:
    err.print(
        f"[red]error:[/red] {escape(str(e))}", soft_wrap=True
    )  # one line, whatever the terminal's width; no markup
    raise typer.Exit(2) from None


# -- the format of a listing: --output table|json|csv -----------------------------------------

TABLE, JSON, CSV = "table", "json", "csv"


class OutputFormat(str, Enum):  # noqa: UP042 (str() of a member is its name here, as typer shows it)
    table = TABLE
    json = JSON
    csv = CSV


OUTPUT_HELP = (
    "table for people (fitted to the terminal, sizes and counts in human units); json (JSON Lines, one "
    "object per row) or csv (with a header) for programs: every row, whole and raw"
)

# `--output` of every command that lists rows; `--json` and `--csv`, its shorthands, where they were first.
OUTPUT = typer.Option(TABLE, "--output", "-o", case_sensitive=False, help=OUTPUT_HELP)
JSON_FLAG = typer.Option(False, "--json", help="same as --output json")
CSV_FLAG = typer.Option(False, "--csv", help="same as --output csv")


def limit_option(rows: int, what: str = "rows"):
    """`--limit` of a listing: a table shows its first ``rows``, json and csv every one."""
    return typer.Option(
        None, "--limit", "-n", min=1, help=f"{what} to print (default: {rows} in a table, all with --output json|csv)"
    )


def output_format(output: OutputFormat | str, as_json: bool = False, as_csv: bool = False) -> str:
    """The format ``--output`` names, or its shorthand ``--json`` / ``--csv`` does (one of them)."""
    named = OutputFormat(output).value
    asked = {f for f, on in ((JSON, as_json), (CSV, as_csv), (named, named != TABLE)) if on}
    if len(asked) > 1:
        raise InvalidArgument("pass one of --json, --csv or --output: each says what to print")
    return asked.pop() if asked else TABLE


# -- human units ------------------------------------------------------------------------------

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(n: int) -> str:
    """A size for people: 905 B, 5.5 KiB, 1.2 MiB, 3.0 GiB (powers of 1024)."""
    if abs(n) < 1024:
        return f"{n} B"
    value, unit = float(n), 0
    while unit < len(_BYTE_UNITS) - 1 and abs(value) >= 1024 - 0.05:  # 1023.97 KiB reads 1.0 MiB, not 1024.0 KiB
        value, unit = value / 1024, unit + 1
    return f"{value:.1f} {_BYTE_UNITS[unit]}"


def human_count(n: int) -> str:
    """A count for people, thousands apart: 1,840."""
    return f"{n:,}"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_text(ms: int) -> str:
    """Milliseconds in the largest unit ``parse_duration`` reads that holds them whole: 604800000 -> '1w'."""
    for unit, seconds in sorted(_UNITS.items(), key=lambda u: -u[1]):
        if ms and ms % (seconds * 1000) == 0:
            return f"{ms // (seconds * 1000)}{unit}"
    return f"{ms / 1000:g}s"


def parse_duration(text: str) -> timedelta:
    """'30s', '15m', '12h', '5d', '2w' -> timedelta."""
    t = text.strip().lower()
    try:
        return timedelta(seconds=float(t[:-1]) * _UNITS[t[-1]])
    except (KeyError, ValueError, IndexError, OverflowError):  # 'xh', 'nanh', 'infd', '1e30w'
        raise typer.BadParameter(f"{text!r} is not a duration like 30s, 15m, 12h, 5d or 2w") from None


# -- tables for a terminal ------------------------------------------------------------------

# A column of text is not made narrower than this (or its longest piece, if shorter): below
# it a value takes more lines than it is worth, and columns further right give way instead.
_NARROW = 16
# A header piece longer than this may fold.
_HEADER_NARROW = 12
# A column of paths is not made narrower than its widest directory or file name, up to this
# (Lamina's ``<write id>-<file id>.parquet`` names fit it): a path folds after its slashes, and
# only a name wider than its column (Spark's ``part-...`` names) is broken within.
_PATH_NARROW = 40


def cell(v: object, null: str = "") -> str:
    """A value for a terminal (None as ``null``): a list of columns ($schemas) as ``path type`` pairs."""
    if v is None:
        return null
    if isinstance(v, list) and v and all(isinstance(x, dict) and "path" in x for x in v):
        return ", ".join(f"{x['path']} {x.get('type', '')}".strip() for x in v)
    return str(v)


def _times(values: list, header: str, aware: bool, null: str) -> tuple[list[str], str]:
    """Times to the second (None as ``null``); a date all of them share goes to the header."""
    utc = [v.astimezone(UTC) if aware and v is not None else v for v in values]
    dates = {v.date() for v in utc if v is not None}
    zone = " UTC" if aware else ""
    if len(dates) == 1:
        return [v.strftime("%H:%M:%S") if v is not None else null for v in utc], f"{header} {dates.pop()}{zone}"
    return [v.strftime("%Y-%m-%d %H:%M:%S") if v is not None else null for v in utc], f"{header}{zone}"


# The places a name or a path may break: after a space, a slash, an underscore, a dot, a
# comma, an equals sign (not a hyphen: 2026-01-05 stays whole).
_PIECE = re.compile(r"[/_.,=]*[^\s/_.,=]*[/_.,=]*\s*")


def _pieces(text: str) -> list[str]:
    return [p for p in _PIECE.findall(text) if p]


def _longest_word(text: str, pieces: bool = False) -> int:
    """The widest word of ``text`` (``pieces``: the widest piece between places it may break)."""
    return max((cell_len(w.rstrip()) for w in (_pieces(text) if pieces else text.split())), default=0)


def wrap_text(text: str, width: int) -> str:
    """``text`` in lines of at most ``width``, broken where ``_PIECE`` allows (a piece wider
    than that is folded): ``tagged_version`` in 10 is ``tagged_`` over ``version``."""
    lines, line = [], ""
    for part in text.split("\n"):
        for piece in _pieces(part):
            if line and cell_len((line + piece).rstrip()) > width:
                lines.append(line.rstrip())
                line = ""
            while cell_len(piece.rstrip()) > width:
                lines.append(piece[:width])
                piece = piece[width:]
            line += piece
        lines.append(line.rstrip())
        line = ""
    return "\n".join(lines)


# A path's directories and its file name, each with the slash that ends it.
_SEGMENT = re.compile(r"[^/]*/|[^/]+")


def path_segments(path: str) -> list[str]:
    return _SEGMENT.findall(path)


def wrap_path(path: str, width: int) -> str:
    """``path`` whole, in lines of at most ``width``, broken after its slashes: its directories
    (a partition's ``ts_day=2026-01-05/``) and its file name each on one line where they fit;
    one wider than ``width`` broken as ``wrap_text`` breaks it."""
    lines, line = [], ""
    for segment in path_segments(path):
        if line and cell_len(line + segment) > width:
            lines.append(line)
            line = ""
        if cell_len(segment) > width:
            *whole, line = wrap_text(segment, width).split("\n")
            lines += whole
        else:
            line += segment
    return "\n".join([*lines, line])


class _Column(NamedTuple):
    header: str
    cells: list[str]
    narrowest: int  # the width below which it is no longer readable
    cells_width: int  # the width that holds every cell on one line
    header_width: int  # ... and the header too
    number: bool
    kind: (
        str  # how its cells fit a narrower width: "whole" (wrap between words), "path" (wrap_path), "text" (wrap_text)
    )


def _column(col: pa.ChunkedArray, header: str, short_time: bool, kind: str, unit: str, null: str) -> _Column:
    values = col.to_pylist()
    typ = col.type
    number = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
    if pa.types.is_timestamp(typ) and short_time:
        cells, header = _times(values, header, typ.tz is not None, null)
        kind = "whole"
    elif number and unit:
        show = human_bytes if unit == "bytes" else human_count
        cells = [null if v is None else show(v) for v in values]
    else:
        cells = [cell(v, null) for v in values]
    cells_width = max([cell_len(c) for c in cells] + [0])
    if number:  # never cut: a version number is whole or not shown
        narrowest, kind = cells_width, "whole"
    elif kind == "path":
        narrowest = min(max([cell_len(s) for c in cells for s in path_segments(c)] + [0]), _PATH_NARROW)
    else:
        word = max([_longest_word(c, pieces=kind == "text") for c in cells] + [0])
        narrowest = word if kind == "whole" else min(word, _NARROW)
    narrowest = max(narrowest, min(_longest_word(header, pieces=True), _HEADER_NARROW), 1)
    return _Column(
        header,
        cells,
        narrowest,
        max(cells_width, narrowest),
        max(cells_width, cell_len(header), narrowest),
        number,
        kind,
    )


def _fit(c: _Column, width: int) -> list[str]:
    """The column's cells in ``width``: paths and text broken where they may be; words of
    "whole" columns wrap in the table."""
    if c.kind == "path":
        return [wrap_path(v, width) for v in c.cells]
    if c.kind == "text":
        return [wrap_text(v, width) for v in c.cells]
    return c.cells


def _frame(columns: int) -> int:
    """The width a rich table's frame takes: an edge each side, a rule between columns, a
    space either side of each cell."""
    return 3 * columns + 1


def _share(spare: int, wants: list[int]) -> list[int]:
    """``spare`` width shared out, none given more than it wants: the smallest wants met
    first (a short value stays whole), the rest split evenly among the columns that want more."""
    given = [0] * len(wants)
    left = max(spare, 0)
    by_want = sorted(range(len(wants)), key=lambda i: wants[i])
    while by_want and wants[by_want[0]] <= left:
        i = by_want.pop(0)
        given[i], left = wants[i], left - wants[i]
    for k, i in enumerate(by_want):
        given[i] = left // (len(by_want) - k)
        left -= given[i]
    return given


def print_table(
    tbl: pa.Table,
    title: str,
    *,
    headers: Mapping[str, str] | None = None,
    short_times: Collection[str] | None = None,
    whole_words: Collection[str] = (),
    paths: Collection[str] = (),
    counts: Collection[str] = (),
    sizes: Collection[str] = (),
    hint: str = "",
    null: str = "",
) -> None:
    """Print ``tbl`` as a rich table that stays readable at the console's width (COLUMNS):

    - numbers (versions, counts) are never cut, and right-aligned; the integer columns in
      ``counts`` show thousands apart (1,840), those in ``sizes`` as bytes (1.2 MiB);
    - the words of the columns in ``whole_words`` (operations, change types) are never cut:
      they wrap between words;
    - the paths in ``paths`` are never cut: they fold after their slashes, each directory and
      the file name whole where the column holds it (``wrap_path``);
    - the timestamp columns in ``short_times`` (None: every one) show to the second, a
      date they all share in the header;
    - other text, and headers, wrap after spaces, slashes, underscores, dots, commas, and
      fold where a piece is wider than its column;
    - the columns, last first, that do not fit at their narrowest readable width are left
      out and named under the table, with ``hint``.

    ``headers`` renames columns for display; ``null`` is what a missing value shows."""
    headers = headers or {}
    width = console.width

    def kind(name: str) -> str:
        return "path" if name in paths else "whole" if name in whole_words else "text"

    def unit(name: str) -> str:
        return "bytes" if name in sizes else "count" if name in counts else ""

    cols = [
        _column(col, headers.get(name, name), short_times is None or name in short_times, kind(name), unit(name), null)
        for name, col in zip(tbl.column_names, tbl.columns)
    ]
    shown = 1
    while shown < len(cols) and _frame(shown + 1) + sum(c.narrowest for c in cols[: shown + 1]) <= width:
        shown += 1
    kept, dropped = cols[:shown], [c.header for c in cols[shown:]]
    # The width left over goes first to cells, then to headers, that would wrap; a first
    # column alone wider than the terminal is narrowed to it (its cells fold).
    widths = [c.narrowest for c in kept]
    widths[0] = min(widths[0], max(width - _frame(len(kept)) - sum(widths[1:]), 1))
    spare = width - _frame(len(kept)) - sum(widths)
    for wanted in ([c.cells_width for c in kept], [c.header_width for c in kept]):
        more = _share(spare, [w - have for w, have in zip(wanted, widths)])
        widths = [w + m for w, m in zip(widths, more)]
        spare -= sum(more)
    rt = RichTable(title=title)
    for c, w in zip(kept, widths):
        rt.add_column(Text(wrap_text(c.header, w)), width=w, justify="right" if c.number else "left", overflow="fold")
    fitted = [_fit(c, w) for c, w in zip(kept, widths)]
    for i in range(tbl.num_rows):
        rt.add_row(*[Text(cells[i]) for cells in fitted])  # as Text: a value's brackets are not markup
    console.print(rt)
    notes = []
    if dropped:
        n = len(dropped)
        note = f"{n} more column{'s do' if n > 1 else ' does'} not fit in {width} characters: {', '.join(dropped)}"
        notes.append(note + (f" ({hint})" if hint else ""))
    for note in notes:
        console.print(Text(note))


# -- rows for programs ----------------------------------------------------------------------


def at_most(batches: Iterable[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
    """The first ``limit`` rows of ``batches`` (None: all of them), reading no batch beyond them."""
    left = limit
    for b in batches:
        if left is None:
            yield b
            continue
        if left <= 0:
            return
        yield b.slice(0, left)
        left -= min(left, b.num_rows)


def _json_value(v: object) -> object:
    if isinstance(v, (datetime, date, time)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return str(v)


_CSV_HINT = "pick other columns with --columns, or print JSON with --output json"


def _check_csv(schema: pa.Schema, hint: str) -> None:
    """Refuse nested columns, which CSV cannot hold, before anything is written."""
    nested = [f.name for f in schema if pa.types.is_nested(f.type)]
    if nested:
        raise InvalidArgument(
            f"CSV cannot hold the nested column{'s' if len(nested) > 1 else ''} {', '.join(nested)}: {hint}"
        )


def nested_as_json(tbl: pa.Table) -> pa.Table:
    """``tbl`` with each nested column (a list, a struct, a map) as JSON text, which CSV can hold."""
    for i, f in enumerate(tbl.schema):
        if pa.types.is_nested(f.type):
            text = [None if v is None else json.dumps(v, default=_json_value) for v in tbl.column(i).to_pylist()]
            tbl = tbl.set_column(i, f.name, pa.array(text, pa.string()))
    return tbl


def write_rows(batches: Iterable[pa.RecordBatch], schema: pa.Schema, fmt: str, csv_hint: str = _CSV_HINT) -> None:
    """Rows to stdout as JSON Lines (``fmt`` 'json': one object per row) or CSV with a header
    ('csv'; nested columns cannot be CSV and are refused, saying ``csv_hint``, before anything is written).
    Never through the console: whatever the terminal's width, nothing is wrapped or cut."""
    if fmt == "json":
        for b in batches:
            sys.stdout.write("".join(json.dumps(row, default=_json_value) + "\n" for row in b.to_pylist()))
        sys.stdout.flush()
        return
    _check_csv(schema, csv_hint)
    sys.stdout.flush()
    with pacsv.CSVWriter(sys.stdout.buffer, schema) as writer:
        for b in batches:
            writer.write_batch(b)
    sys.stdout.buffer.flush()


def write_table(tbl: pa.Table, fmt: str) -> None:
    """A listing of metadata for programs (``fmt`` 'json' or 'csv'), nested columns in CSV as JSON text."""
    if fmt == CSV:
        tbl = nested_as_json(tbl)
    write_rows(tbl.to_batches(), tbl.schema, fmt)


# The formats a file of rows is written in, by its name's extension.
FILE_FORMATS = {".csv": "csv", ".parquet": "parquet"}


def file_format(path: str) -> str:
    """The format ``path``'s extension names ('csv' or 'parquet'); InvalidArgument for another."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FILE_FORMATS:
        raise InvalidArgument(
            f"cannot tell the format of {path!r} by its extension: name a {' or '.join(FILE_FORMATS)} file"
        )
    return FILE_FORMATS[ext]


def write_file(batches: Iterable[pa.RecordBatch], schema: pa.Schema, path: str, csv_hint: str) -> int:
    """Rows to the file ``path``, CSV with a header or Parquet by its extension (``file_format``);
    returns how many. All or nothing: the rows go to a temporary file beside it, renamed over
    ``path`` once all are written (a failure leaves no file, and an existing one as it was)."""
    fmt = file_format(path)
    if fmt == "csv":
        _check_csv(schema, csv_hint)
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    rows = 0
    try:
        with (
            open(tmp, "wb") as sink,
            pacsv.CSVWriter(sink, schema) if fmt == "csv" else pq.ParquetWriter(sink, schema) as writer,
        ):
            for b in batches:
                writer.write_batch(b)
                rows += b.num_rows
        os.replace(tmp, path)
    except OSError as e:
        raise InvalidArgument(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return rows
