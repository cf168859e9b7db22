"""What every `lamina` command prints to, and how a command fails: the error on stderr, exit 2."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

console = Console()
err = Console(stderr=True)


def fail(e: Exception) -> NoReturn:
    err.print(f"[red]error:[/red] {e}")
    raise typer.Exit(2) from None
