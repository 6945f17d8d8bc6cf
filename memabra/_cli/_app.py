"""Root typer application; sub-commands live in sibling modules."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NoReturn

import typer
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError
from typer.core import TyperGroup

from memabra._cli._admin import admin
from memabra._cli._bench import bench
from memabra._cli._common import console, err_console, error_line, fail, print_error
from memabra._cli._db import db_app
from memabra._cli._demo import demo
from memabra._cli._erase import erase
from memabra._cli._export import episodes_export
from memabra._cli._log import episodes_app, feedback, rewards_app
from memabra._cli._memories import memories_app
from memabra._cli._mempo import mempo_app
from memabra._cli._offline import ope_log, train
from memabra._cli._ope import ope_app
from memabra._cli._paused import episodes_paused
from memabra._cli._policies import policies_app
from memabra._cli._production import learner, route
from memabra._cli._retention import episodes_delete, episodes_deletions
from memabra._cli._simulate import simulate_command
from memabra._cli._skills import skills_app
from memabra._cli._status import status
from memabra._cli._streams import BROKEN_PIPE_EXIT, make_streams_encodable
from memabra._environment import unreported_unknown_variables
from memabra._errors import MemabraError

try:  # newer typer carries its own copy of click, whose classes are not click's
    from typer._click import ClickException, Context
except ImportError:  # older typer uses click itself
    from click import ClickException, Context  # type: ignore[assignment]


class _ReadableErrorsGroup(TyperGroup):
    """The root command group; a usage error written to a terminal is typer's boxed panel, but one
    written elsewhere (a CI log, ``2>file``) is click's plain lines. Rich draws the panel at 80
    columns off a terminal, which cuts URLs and commands mid-word; a wider panel would pad every
    line with spaces to its border."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        # typer appends its completion options after the group is built, so they are wrapped here
        for param in self.params:
            if param.name == "install_completion" and param.callback is not None:
                param.callback = _completion_installed_or_fail(param.callback)
        if not standalone_mode or _stderr_is_terminal():
            return super().main(args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)
        try:
            # not standalone, so that click's errors reach us unprinted; an Exit comes back as its code
            exit_code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except ClickException as exc:
            # a bare command group's help is already printed (typer checks for it by name too)
            if type(exc).__name__ != "NoArgsIsHelpError":
                exc.show()
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        except BrokenPipeError:  # the help, piped into a reader that stopped (head)
            _quiet_broken_pipe()
        sys.exit(exit_code)

    def invoke(self, ctx: Context) -> None:
        # A command's return value is dropped, as standalone mode drops it, so that what main()
        # gets back is only ever an Exit's code.
        try:
            super().invoke(ctx)
        except BrokenPipeError:  # a table piped into a reader that stopped (`| head -1`)
            _quiet_broken_pipe()


def _completion_installed_or_fail(install: Callable[..., Any]) -> Callable[..., Any]:
    """typer's ``--install-completion``, failing in one line that names the path: it writes into
    $HOME, which in a container is often unset, read-only or not a folder, and typer's own failure
    is a traceback."""

    if getattr(install, "_memabra_guarded", False):
        return install

    def callback(ctx: Context, param: Any, value: Any) -> Any:
        try:
            return install(ctx, param, value)
        except OSError as exc:
            where = exc.filename or os.environ.get("HOME") or "the home folder"
            fail(
                f"cannot install shell completion: {where}: {exc.strerror or type(exc).__name__} "
                "(is $HOME writable here?); `memabra --show-completion` prints the script to save where "
                "your shell reads it"
            )

    callback._memabra_guarded = True  # type: ignore[attr-defined]
    return callback


def _quiet_broken_pipe() -> NoReturn:
    """Standard output's reader stopped early (``| head``): exit 141 as a shell reports a program
    SIGPIPE ended, with no message and no traceback (the reader had all it wanted), whether or
    not standard error is a terminal (click itself would exit 1, like a failure)."""
    # Python's recipe: point stdout at devnull so the flush at exit raises nothing more
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(BROKEN_PIPE_EXIT)


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


_ROOT_HELP = (
    "Learned, logged, evaluable context routing for LangGraph agents.\n\n"
    "New here? `memabra demo` runs the whole loop offline, logging to memabra.db in this directory, "
    "and ends by printing the commands to look at what it logged."
)

app = typer.Typer(
    cls=_ReadableErrorsGroup,
    name="memabra",
    help=_ROOT_HELP,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from memabra import __version__

        console.print(f"memabra {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print memabra's version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    # (The root's help is _ROOT_HELP, given to the app.) A mistyped variable would leave its
    # setting at the default without a word; every command says so.
    for message in unreported_unknown_variables():
        err_console.print(Text.assemble(("warning:", "bold yellow"), " ", message), highlight=False)


# The order `memabra --help` lists them in (commands, then groups): a first run's path first
# (demo, then looking at what it logged), then running it in production, then offline work.
app.command("demo")(demo)
app.command("status")(status)
app.command("feedback")(feedback)
app.command("admin")(admin)
app.command("route")(route)
app.command("learner")(learner)
app.command("train")(train)
app.command("bench")(bench)
app.command("simulate")(simulate_command)
app.command("erase")(erase)
episodes_app.command("delete")(episodes_delete)
episodes_app.command("deletions")(episodes_deletions)
episodes_app.command("export")(episodes_export)
episodes_app.command("paused")(episodes_paused)
app.add_typer(episodes_app, name="episodes")
app.add_typer(memories_app, name="memories")
app.add_typer(skills_app, name="skills")
ope_app.command("log")(ope_log)
app.add_typer(ope_app, name="ope")
app.add_typer(policies_app, name="policies")
app.add_typer(rewards_app, name="rewards")
app.add_typer(db_app, name="db")
app.add_typer(mempo_app, name="mempo")


def main() -> None:
    make_streams_encodable()  # LANG=C, PYTHONIOENCODING=ascii: ASCII spellings, not a UnicodeEncodeError
    try:
        app()
    except MemabraError as exc:
        # memabra's own error that no command turned into a message (a database it cannot reach,
        # DatabaseUnavailableError, names the URL): the same one line every other command prints
        print_error(str(exc))
        raise SystemExit(1) from None
    except SQLAlchemyError as exc:
        # a database the command cannot reach or open: one line saying why, not a traceback
        print_error(f"database error: {error_line(exc)}")
        raise SystemExit(1) from None
