"""Options and helpers shared by every command.

Everything a command prints that came from a user or the log (queries, ids, memory texts) goes
through :func:`plain` or :func:`rich.markup.escape`: rich parses ``[...]`` as markup, so a user id
like ``a[/]b`` would otherwise crash the command or restyle its output.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import getpass
import json
import logging
import math
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, date, datetime
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.progress import Progress, ProgressColumn, TimeElapsedColumn
from rich.segment import Segment
from rich.text import Text

from memabra._cli._streams import BROKEN_PIPE_EXIT, encodes_everything
from memabra._errors import MemabraError

__all__ = [
    "STDOUT",
    "JsonOutOption",
    "OutFileOption",
    "check_json_output",
    "check_output_path",
    "cli_actor",
    "configure_logging",
    "confirm_or_stop",
    "console",
    "err_console",
    "fail",
    "jsonable",
    "open_output",
    "parse_time",
    "plain",
    "print_error",
    "run_guarded",
    "transient_progress",
    "write_json",
    "write_output",
    "YesOption",
]

# Output to a pipe or file is not cut to a terminal's width: tables keep their natural width up to
# this many columns (wide enough for every table memabra prints), so `| grep` sees whole rows.
_PIPED_WIDTH = 400

T = TypeVar("T")


# Control characters other than newline and tab (C0, DEL, C1): text a command prints from the log
# (a user's message, a memory, a tool's output) is anyone's, and ESC sequences in it would move the
# cursor, rewrite what the terminal shows or set its clipboard (OSC 52); rich strips only a few
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if _CONTROL.search(text) else text


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

    def print(self, *objects: Any, crop: bool = False, **kwargs: Any) -> None:
        """rich's ``print``, except that a line wider than the console is not cropped: a table
        whose words do not fit (see :mod:`memabra._cli._tables`) is printed whole, never cut."""
        super().print(*objects, crop=crop, **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        """rich's rendering, with every control character in printed text shown as an escape
        (``\\x1b``): only rich's own control segments (a progress bar's cursor moves) and styles
        reach the terminal as codes."""
        return super()._render_buffer(
            segment if segment.control else Segment(_visible(segment.text), segment.style, segment.control)
            for segment in buffer
        )

    def on_broken_pipe(self) -> None:
        """The reader stopped early (``| head -1``): exit 141, as a shell reports a program SIGPIPE
        ended, quietly (rich's own exit 1 reads as a failure to a script)."""
        if self.quiet:
            return
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(BROKEN_PIPE_EXIT)


console = _Console()
err_console = _Console(stderr=True)


def plain(value: object) -> Text:
    """``value`` as literal text for a table cell or a print (never parsed as markup)."""
    return Text(str(value))


def print_error(message: str) -> None:
    """``error: message`` on stderr, as one line wherever stderr is not a terminal (a CI log, a
    cron mail, ``2>file``, even with ``$COLUMNS`` set): a log read with grep gets the whole message."""
    err_console.print(
        Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=not err_console.is_terminal
    )


def fail(message: str, code: int = 1) -> NoReturn:
    print_error(message)
    raise typer.Exit(code)


def confirm_or_stop(question: str, *, yes: bool, refused: str, only_at_a_terminal: bool = False) -> None:
    """Ask ``question`` (on stderr, so a pipe reading stdout never holds it) before a command
    deletes data; a "no" is ``refused`` and exit 1, nothing changed. ``yes`` (``--yes``) skips it.
    ``only_at_a_terminal``: ask only a person at a terminal; a script or cron job (no terminal on
    standard input) goes ahead as it did before the question existed. Otherwise the answer is read
    from standard input whatever it is (``echo y |`` answers), and no answer at all (a closed
    standard input, Ctrl-C) is a refusal that says to pass ``--yes``, not click's bare "Aborted!"."""
    if yes or (only_at_a_terminal and not _stdin_is_terminal()):
        return
    # not typer.confirm: click reads the answer with input(" "), which writes a space to stdout
    typer.echo(f"{question} [y/N]: ", nl=False, err=True)
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if not answer.endswith("\n") or not _stdin_is_terminal():
        typer.echo(err=True)  # an answer from a pipe (or none) was not echoed: end the question's line
    if not answer:  # end of input: nobody is there to answer
        fail(f"no answer to the question (standard input closed or interrupted); {refused}")
    if answer.strip().lower() not in ("y", "yes"):
        fail(refused)


def _stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


YesOption = Annotated[
    bool,
    typer.Option(
        "--yes",
        help="Do not ask first (only asked at a terminal: scripts and cron jobs are not).",
    ),
]
"""``--yes`` of a command that deletes data and asks first when run at a terminal."""


def cli_actor() -> str:
    """Who an audit trail names for a change made from the command line: the operating-system user."""
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name (a container started with an arbitrary uid)
        return "cli"


def run_guarded(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run library code, turning memabra's own errors into a one-line message and exit 1."""
    try:
        return func(*args, **kwargs)
    except MemabraError as exc:
        fail(str(exc))


def error_line(exc: BaseException) -> str:
    """The first line of an error (of the driver's own error, for SQLAlchemy's wrapper): what a
    one-line message about a database that failed says."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


# ---------------------------------------------------------------------------------- output files

STDOUT = Path("-")


def check_output_path(path: Path | None) -> Path | None:
    """Typer callback of every option that names an output file (``--json``, ``--out``,
    ``--plot``): the folder must exist and be writable and the path must not be a folder, checked
    while the command line is parsed, so a bad path costs no work and changes nothing."""
    if path is None:
        return None
    if path == STDOUT:
        raise typer.BadParameter("'-' (standard output) is not a file name here; give a file name")
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder; give a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise typer.BadParameter(f"the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise typer.BadParameter(f"{path} is not writable")
    return path


def check_json_output(ctx: typer.Context, path: Path | None) -> Path | None:
    """:func:`check_output_path` for ``--json``, which also takes ``-``: the JSON goes to standard
    output alone (what a pipe into ``jq`` needs) and the command's tables and notes go to stderr."""
    if path != STDOUT:
        return check_output_path(path)
    console.stderr = True
    ctx.call_on_close(_console_to_stdout)
    return path


def _console_to_stdout() -> None:
    console.stderr = False


def write_output(path: Path, data: str | bytes) -> None:
    """Write a command's output: ``-`` to standard output, else atomically (a temporary file in
    the same folder, then a rename), so a failure leaves the previous file or none, never half of
    one. A failure is one line and exit 1."""
    with open_output(path, binary=isinstance(data, bytes)) as out:
        out.write(data)


@contextlib.contextmanager
def open_output(path: Path, *, binary: bool = False) -> Iterator[Any]:
    """A command's output file, for writing as a stream: ``-`` is standard output; a file is
    written to a temporary file in its folder and renamed over ``path`` only when the block ends
    without an error, so a failure (or Ctrl-C) leaves the previous file or none, never half of
    one. A failure to write is one line and exit 1 (141 when a reader closed the pipe early)."""
    if path == STDOUT:
        try:
            yield sys.stdout.buffer if binary else _text_stdout()
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader stopped early (`| head`). Say so instead of exiting quietly, and point
            # stdout at /dev/null so the interpreter's last flush does not fail a second time.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            fail(
                "standard output was closed before all of the output was written (broken pipe)",
                code=BROKEN_PIPE_EXIT,
            )
        return
    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else _NEW_FILE_MODE
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        fail(f"could not write {path}: {exc.strerror or exc}")
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes it private; the file gets what a plain write would give it
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        fail(f"could not write {path}: {exc.strerror or exc}")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _text_stdout() -> Any:
    """Standard output for a command's output document: as it is where it encodes everything, else
    (an ASCII-only locale) a UTF-8 writer on its bytes, since JSON escapes written by the ASCII
    stream's error handler (``caf\\xe9``) would make the document invalid."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    if encodes_everything(encoding) or not hasattr(sys.stdout, "buffer"):
        return sys.stdout
    sys.stdout.flush()
    return codecs.getwriter("utf-8")(sys.stdout.buffer)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


_NEW_FILE_MODE = 0o666 & ~_umask()


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON values: records and mappings to objects, times to ISO strings,
    enums to their values, and NaN or infinities to ``null`` (JSON has no such numbers)."""
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, Mapping):
        return {str(k.value if isinstance(k, Enum) else k): jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # a numpy scalar
        return jsonable(value.item())
    raise TypeError(f"{type(value).__name__} has no JSON form")


def write_json(path: Path | None, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` (see :func:`write_output`); nothing when ``None``."""
    if path is None:
        return
    write_output(path, json.dumps(jsonable(value), indent=2, allow_nan=False) + "\n")
    if path != STDOUT:
        console.print(Text(f"wrote {path}"), highlight=False)


JsonOutOption = Annotated[
    Path | None,
    typer.Option(
        "--json",
        help="Also write the result here as JSON ('-': to standard output, the tables to stderr).",
        show_default=False,
        callback=check_json_output,
    ),
]
"""``--json FILE`` for any command: checked before the command does any work."""

OutFileOption = Annotated[
    Path | None,
    typer.Option("--out", help="File to write.", show_default=False, callback=check_output_path),
]
"""``--out FILE``: checked before the command does any work."""


def parse_time(value: str | None, option: str) -> datetime | None:
    """An ISO 8601 date or time given to ``option``, as UTC when it names no offset; anything else
    is a usage error naming ``option`` (exit 2, as every other malformed option value)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"expected an ISO 8601 date or time such as 2025-01-31 or 2025-01-31T08:00:00Z, got {value!r}",
            param_hint=option,
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def transient_progress(*columns: ProgressColumn) -> Progress:
    """A progress line that vanishes when the work ends (the table printed next takes its place);
    off when the console is piped, where it would leave a blank line behind."""
    return Progress(*columns, TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)
