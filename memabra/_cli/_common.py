"""Options and helpers shared by every command."""

from __future__ import annotations

import logging
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from memabra._errors import MemabraError

console = Console()
err_console = Console(stderr=True)

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: $MEMABRA_DATABASE_URL, else sqlite:///memabra.db).", show_default=False),
]


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def run_guarded(func, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Run library code, turning memabra's own errors into a one-line message and exit 1."""
    try:
        return func(*args, **kwargs)
    except MemabraError as exc:
        fail(str(exc))


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
