"""Running the `lamina` command in-process (typer's CliRunner) and reading what it prints."""

from __future__ import annotations

import contextlib
from typing import Iterator

from typer.testing import CliRunner

from lamina.cli.main import app


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(app, list(args), input=input)


def ok(*args: str) -> str:
    r = run(*args)
    assert r.exit_code == 0, r.output
    return r.output


def rows_of(output: str) -> list[list[str]]:
    """The body rows of the rich table(s) in ``output``, as stripped cells."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]


@contextlib.contextmanager
def console_width(width: int) -> Iterator[None]:
    """rich wraps output to its console's width, taken from COLUMNS when the console was
    created (at import, whatever the environment then): set here instead."""
    from lamina.cli._output import console, err

    saved = [(c, c._width) for c in (console, err)]
    for c in (console, err):
        c.width = width
    try:
        yield
    finally:
        for c, w in saved:
            c._width = w
