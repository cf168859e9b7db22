"""What every `lamina` command prints to, and how a command fails: the error on stderr, exit 2.

Tables of rows (system tables, history, the change feed, query results) print through
``print_table``, which fits them to the terminal's width; ``write_rows`` prints rows as JSON
Lines or CSV, ``write_file`` writes them to a CSV or Parquet file.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import date, datetime, time, timezone
from decimal import Decimal
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
    err.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)  # one line, whatever the terminal's width; no markup
    raise typer.Exit(2) from None


# -- tables for a terminal ------------------------------------------------------------------

# A column narrower than this wraps or folds its text; a header word longer than it may be cut.
_NARROW = 10


def cell(v: object, null: str = "") -> str:
    """A value for a terminal (None as ``null``): a list of columns ($schemas) as ``path type`` pairs."""
    if v is None:
        return null
    if isinstance(v, list) and v and all(isinstance(x, dict) and "path" in x for x in v):
        return ", ".join(f"{x['path']} {x.get('type', '')}".strip() for x in v)
    return str(v)


def _times(values: list, header: str, aware: bool, null: str) -> tuple[list[str], str]:
    """Times to the second (None as ``null``); a date all of them share goes to the header."""
    utc = [v.astimezone(timezone.utc) if aware and v is not None else v for v in values]
    dates = {v.date() for v in utc if v is not None}
    zone = " UTC" if aware else ""
    if len(dates) == 1:
        return [v.strftime("%H:%M:%S") if v is not None else null for v in utc], f"{header} {dates.pop()}{zone}"
    return [v.strftime("%Y-%m-%d %H:%M:%S") if v is not None else null for v in utc], f"{header}{zone}"


def _longest_word(text: str) -> int:
    return max((cell_len(w) for w in text.split()), default=0)


class _Column(NamedTuple):
    header: str
    cells: list[str]
    narrowest: int  # the width below which it is no longer readable
    cells_width: int  # the width that holds every cell on one line
    header_width: int  # ... and the header too
    number: bool


def _column(name: str, col: pa.ChunkedArray, header: str, short_time: bool, whole_words: bool, null: str) -> _Column:
    values = col.to_pylist()
    kind = col.type
    number = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
    if pa.types.is_timestamp(kind) and short_time:
        cells, header = _times(values, header, kind.tz is not None, null)
        whole_words = True
    else:
        cells = [cell(v, null) for v in values]
    word = max([_longest_word(c) for c in cells] + [0])
    narrowest = word if number or whole_words else min(word, _NARROW)
    cells_width = max([cell_len(c) for c in cells] + [0])
    narrowest = max(narrowest, min(_longest_word(header), _NARROW), 1)
    return _Column(header, cells, narrowest, max(cells_width, narrowest), max(cells_width, cell_len(header), narrowest), number)


def _frame(columns: int) -> int:
    """The width a rich table's frame takes: an edge each side, a rule between columns, a
    space either side of each cell."""
    return 3 * columns + 1


def _share(spare: int, wants: list[int]) -> list[int]:
    """``spare`` width shared in proportion to what each wants, none given more than it wants."""
    total = sum(wants)
    if total <= max(spare, 0):
        return wants
    return [max(spare, 0) * w // total for w in wants]


def print_table(
    tbl: pa.Table, title: str, *, headers: Mapping[str, str] | None = None, short_times: Collection[str] | None = None,
    whole_words: Collection[str] = (), hint: str = "", null: str = "",
) -> None:
    """Print ``tbl`` as a rich table that stays readable at the console's width (COLUMNS):

    - numbers (versions, counts) are never cut, nor the words of the columns in
      ``whole_words`` (operations, change types): they wrap between words;
    - the timestamp columns in ``short_times`` (None: every one) show to the second, a
      date they all share in the header;
    - other text wraps, and folds where a word is wider than its column;
    - the columns, last first, that do not fit at their narrowest readable width are left
      out and named under the table, with ``hint``.

    ``headers`` renames columns for display; ``null`` is what a missing value shows."""
    headers = headers or {}
    width = console.width
    cols = [_column(name, col, headers.get(name, name), short_times is None or name in short_times, name in whole_words, null)
            for name, col in zip(tbl.column_names, tbl.columns)]
    shown = 1
    while shown < len(cols) and _frame(shown + 1) + sum(c.narrowest for c in cols[: shown + 1]) <= width:
        shown += 1
    kept, dropped = cols[:shown], [c.header for c in cols[shown:]]
    # The width left over goes first to cells, then to headers, that would wrap.
    widths = [c.narrowest for c in kept]
    spare = width - _frame(len(kept)) - sum(widths)
    for wanted in ([c.cells_width for c in kept], [c.header_width for c in kept]):
        more = _share(spare, [w - have for w, have in zip(wanted, widths)])
        widths = [w + m for w, m in zip(widths, more)]
        spare -= sum(more)
    rt = RichTable(title=title)
    for c, w in zip(kept, widths):
        rt.add_column(Text(c.header), width=w, justify="right" if c.number else "left", overflow="fold")
    for i in range(tbl.num_rows):
        rt.add_row(*[Text(c.cells[i]) for c in kept])  # as Text: a value's brackets are not markup
    console.print(rt)
    if dropped:
        n = len(dropped)
        note = f"{n} more column{'s do' if n > 1 else ' does'} not fit in {width} characters: {', '.join(dropped)}"
        console.print(note + (f" ({hint})" if hint else ""))


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


_CSV_HINT = "pick other columns with --columns, or print JSON with --json"


def _check_csv(schema: pa.Schema, hint: str) -> None:
    """Refuse nested columns, which CSV cannot hold, before anything is written."""
    nested = [f.name for f in schema if pa.types.is_nested(f.type)]
    if nested:
        raise InvalidArgument(f"CSV cannot hold the nested column{'s' if len(nested) > 1 else ''} {', '.join(nested)}: {hint}")


def write_rows(batches: Iterable[pa.RecordBatch], schema: pa.Schema, fmt: str, csv_hint: str = _CSV_HINT) -> None:
    """Rows to stdout as JSON Lines (``fmt`` 'json': one object per row) or CSV with a header
    ('csv'; nested columns cannot be CSV and are refused, saying ``csv_hint``, before anything is written)."""
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


# The formats a file of rows is written in, by its name's extension.
FILE_FORMATS = {".csv": "csv", ".parquet": "parquet"}


def file_format(path: str) -> str:
    """The format ``path``'s extension names ('csv' or 'parquet'); InvalidArgument for another."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FILE_FORMATS:
        raise InvalidArgument(f"cannot tell the format of {path!r} by its extension: name a {' or '.join(FILE_FORMATS)} file")
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
        with open(tmp, "wb") as sink, (pacsv.CSVWriter(sink, schema) if fmt == "csv" else pq.ParquetWriter(sink, schema)) as writer:
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
