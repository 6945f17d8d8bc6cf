"""``memabra bench --log-db``: opening and closing the run's episode log, and what the command says
of a log its run could not finish."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

from memabra._cli._common import err_console, error_line, fail, run_guarded
from memabra._errors import ConfigError, MemabraError
from memabra.storage._engine import shown_url

if TYPE_CHECKING:
    from memabra.evals.bench import DecisionLogWriter

__all__ = ["close_log", "explain_partial_log", "open_log"]


def open_log(url: str, logger: str, expected: int) -> DecisionLogWriter:
    """The run's log; a database the driver cannot open (a SQLite file in a missing folder) is
    one line naming the option and the URL, as every other refusal here is."""
    from memabra.evals.bench import DecisionLogWriter

    def opened() -> DecisionLogWriter:
        try:
            return DecisionLogWriter(url, logger=logger, expected=expected)
        except ConfigError as exc:  # storage's words for a file it cannot open: the option named first
            raise ConfigError(f"--log-db {shown_url(url)}: cannot open the log: {exc}") from exc

    try:
        return run_guarded(opened)
    except SQLAlchemyError as exc:
        where = shown_url(url)
        fail(f"--log-db {where}: cannot open the log: {error_line(exc)}")


def close_log(writer: DecisionLogWriter, finished: bool) -> bool:
    """Close the log, writing its last decisions and its run's end; False, with the error said in
    one line, where that failed. It runs while the run's own error or stop may be on its way out
    (a ``finally``), so it reports rather than raises: a raise would be a traceback hiding that."""
    try:
        writer.close(finished=finished)
    except (MemabraError, SQLAlchemyError) as exc:
        reason = str(exc) if isinstance(exc, MemabraError) else f"database error: {error_line(exc)}"
        err_console.print(
            Text.assemble(("error:", "bold red"), f" could not finish writing the log {writer.where}: {reason}"),
            highlight=False,
        )
        return False
    return True


def explain_partial_log(finished: bool, written: int, expected: int, logger: str, url: str | None) -> None:
    """An interrupted run's log reads like a finished one to `ope log`, but covers only the rounds
    played before the stop (or the decisions written before the log failed, where the run
    ``finished``), and no report holds the truth to check it against: say so."""
    if written >= expected:
        return  # the logger finished; a later router stopped the run, and its log is whole
    how, which = (
        ("the log could not be finished", "the decisions written before that")
        if finished
        else ("the bench run stopped before it finished", "the rounds played before the stop")
    )
    where = "the log" if url is None else shown_url(url)
    err_console.print(
        Text(
            f"{how}: {where} holds {written} of the {expected} decisions {logger} would have logged ({which}) and "
            "no report was written to check `memabra ope log` against; run the bench again with a new --log-db"
        ),
        highlight=False,
    )
