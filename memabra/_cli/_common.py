"""Options and helpers shared by every command.

Everything a command prints that came from a user or the log (queries, ids, memory texts) goes
through :func:`plain` or :func:`rich.markup.escape`: rich parses ``[...]`` as markup, so a user id
like ``a[/]b`` would otherwise crash the command or restyle its output.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.text import Text
from sqlalchemy.engine import make_url

from memabra._errors import MemabraError

__all__ = [
    "CreateDbOption",
    "DbOption",
    "JsonOutOption",
    "check_output_path",
    "configure_logging",
    "console",
    "err_console",
    "existing_database",
    "fail",
    "plain",
    "run_guarded",
]

# Output to a pipe or file is not cut to a terminal's width: tables keep their natural width up to
# this many columns (wide enough for every table memabra prints), so `| grep` sees whole rows.
_PIPED_WIDTH = 400

T = TypeVar("T")


class _Console(Console):
    """A console that is as wide as the terminal, or :data:`_PIPED_WIDTH` when output is piped
    (rich's default there is 80 columns); ``$COLUMNS`` still wins."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(_PIPED_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = _Console()
err_console = _Console(stderr=True)


def plain(value: object) -> Text:
    """``value`` as literal text for a table cell or a print (never parsed as markup)."""
    return Text(str(value))


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False)
    raise typer.Exit(code)


def run_guarded(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run library code, turning memabra's own errors into a one-line message and exit 1."""
    try:
        return func(*args, **kwargs)
    except MemabraError as exc:
        fail(str(exc))


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


def _sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (``None`` for other databases, in-memory ones and URI forms)."""
    try:
        parsed = make_url(url)
    except Exception:  # resolve_url names a malformed URL later, with the library's message
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    if parsed.database.startswith("file:"):
        return None
    return Path(parsed.database)


def existing_database(db: str | None) -> str | None:
    """Typer callback of ``--db``: refuse a SQLite file that does not exist rather than create an
    empty one (only ``memabra db upgrade`` and ``memabra demo`` create databases)."""
    from memabra.storage import resolve_url

    try:
        url = resolve_url(db)
    except MemabraError as exc:
        raise typer.BadParameter(str(exc)) from None
    path = _sqlite_file(url)
    if path is not None and not path.exists():
        raise typer.BadParameter(
            f"no database at {path}; create it with `memabra db upgrade --db {url}` (or check the path)"
        )
    return db


def check_output_path(path: Path | None) -> Path | None:
    """Typer callback of an output option (``--json``, ``--plot``, ``--out``): the folder must
    exist and be writable and the path must not be a folder, checked before the work starts."""
    if path is None:
        return None
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder; give a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise typer.BadParameter(f"the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise typer.BadParameter(f"{path} is not writable")
    return path


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (default: $MEMABRA_DATABASE_URL, else sqlite:///memabra.db).",
        show_default=False,
        callback=existing_database,
    ),
]

CreateDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (default: $MEMABRA_DATABASE_URL, else sqlite:///memabra.db); created if missing.",
        show_default=False,
    ),
]

JsonOutOption = Annotated[
    Path | None,
    typer.Option("--json", help="Also write the result here (JSON).", show_default=False, callback=check_output_path),
]
"""``--json FILE`` for any command: its folder is checked before the command does any work."""
