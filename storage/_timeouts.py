"""Statements PostgreSQL cancels: one that ran past ``statement_timeout`` (SQLSTATE ``57014``, also
``pg_cancel_backend``) and one that waited past ``lock_timeout`` for a lock (``55P03``).

A deployment sets these to bound how long memabra may hold a server connection or queue behind
another transaction; the driver's error carries the statement and its parameters (a user's text,
a model's bytes) and reads as a bug. It is raised as :class:`DatabaseTimeoutError` instead: one
line naming the database (password hidden), the driver's reason, the setting that fired and what
to do. It is not retried: a retry waits the same bound again, and the operator chose that bound.

Cancelled before its ``COMMIT``, the transaction was rolled back and nothing of it was stored. A
cancel that arrives while the ``COMMIT`` runs (a deferred trigger, a synchronous standby's
acknowledgement) is another matter: the server may have committed and lost the chance to say so,
and the error says that the write may or may not have landed, as a connection lost while committing
does, instead of inviting a retry that could store it twice.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, ExceptionContext
from sqlalchemy.exc import OperationalError

from memabra._errors import StorageContentionError
from memabra.storage._engine import mask_password, shown_url

__all__ = ["DatabaseTimeoutError", "timed_out", "watch_timeouts"]

_PG_CANCELED = "57014"  # query_canceled: statement_timeout, pg_cancel_backend, a client's cancel
_PG_LOCK_NOT_AVAILABLE = "55P03"  # lock_not_available: lock_timeout (or a NOWAIT lock)

_ROLLED_BACK = "its transaction was rolled back, nothing of it stored"
_UNKNOWN = (
    "the cancel reached the COMMIT, so the write may or may not have committed: read back what it "
    "wrote before making it again"
)


TIMEOUT_CAUSES = {
    "statement_timeout": "a statement ran longer than the database's statement_timeout allows",
    "lock_timeout": "a statement waited longer than the database's lock_timeout for a lock another transaction holds",
}
"""What each setting's cancel means, in the words every answer to a client uses (the admin's pages,
the feedback endpoint's 503): :attr:`DatabaseTimeoutError.cause`."""


class DatabaseTimeoutError(StorageContentionError, OperationalError):
    """PostgreSQL cancelled a statement: it ran past ``statement_timeout`` (or was cancelled by
    ``pg_cancel_backend``), or waited past ``lock_timeout`` for a lock another transaction held.
    The message names the database (password hidden), the driver's reason and what to do, never
    the statement or its parameters; ``orig`` is the driver's error.

    ``setting`` is ``"statement_timeout"``, ``"lock_timeout"`` or ``None`` (another cancel).
    ``outcome_unknown`` is true when the cancel arrived during the ``COMMIT``: the write may have
    committed, so it must be read back, not blindly made again.

    A :class:`~memabra.StorageContentionError` (what copes with contended writers copes with
    this) and a SQLAlchemy :class:`~sqlalchemy.exc.OperationalError`, as the driver's error was,
    so code that waits out a database problem by catching that keeps doing so."""

    def __init__(
        self,
        message: str,
        orig: BaseException | None = None,
        *,
        setting: str | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        OperationalError.__init__(self, None, None, orig if orig is not None else Exception(message))
        self.message = message
        self.setting = setting
        self.outcome_unknown = outcome_unknown

    def __str__(self) -> str:
        return self.message

    @property
    def cause(self) -> str:
        """What was cancelled, told without the database's name: a client's answer may say it."""
        return TIMEOUT_CAUSES.get(str(self.setting), "a statement was cancelled (pg_cancel_backend)")

    def __reduce__(self) -> Any:
        return _rebuild, (type(self), self.message, self.orig, self.setting, self.outcome_unknown)


def _rebuild(
    cls: type[DatabaseTimeoutError], message: str, orig: BaseException | None, setting: str | None, unknown: bool
) -> DatabaseTimeoutError:
    return cls(message, orig, setting=setting, outcome_unknown=unknown)


def _setting(orig: BaseException) -> tuple[bool, str | None]:
    """Whether ``orig`` is a cancelled statement, and the setting that cancelled it."""
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state == _PG_LOCK_NOT_AVAILABLE:
        return True, "lock_timeout"
    if state == _PG_CANCELED:
        return True, "statement_timeout" if "statement timeout" in str(orig).lower() else None
    return False, None


_ADVICE = {
    "statement_timeout": (
        "it ran longer than statement_timeout (set for memabra's role, its database, or the URL's "
        "options=-c statement_timeout=...): raise it for memabra's role (ALTER ROLE ... SET statement_timeout) "
        "or find what the statement waited on (pg_stat_activity)"
    ),
    "lock_timeout": (
        "it waited longer than lock_timeout for a lock another transaction holds (pg_locks joined to "
        "pg_stat_activity names that one): end that transaction, or raise lock_timeout for memabra's role"
    ),
    None: "it was cancelled (pg_cancel_backend, or the client's own cancel)",
}


def timed_out(url: URL, exc: BaseException, what: str, *, committing: bool) -> DatabaseTimeoutError | None:
    """``exc`` as a :class:`DatabaseTimeoutError` naming ``what`` was cancelled (``None`` when it
    is no cancelled statement); ``committing``: the cancel met the ``COMMIT``."""
    orig = getattr(exc, "orig", None) or exc
    cancelled, setting = _setting(orig)
    if not cancelled:
        return None
    unknown = committing or (isinstance(exc, DatabaseTimeoutError) and exc.outcome_unknown)
    lines = str(orig).strip().splitlines()
    reason = mask_password(lines[0]) if lines else type(orig).__name__
    message = (
        f"the database {shown_url(url)} cancelled {what}: {reason}; {_ADVICE[setting]}; "
        f"{_UNKNOWN if unknown else _ROLLED_BACK}"
    )
    return DatabaseTimeoutError(message, orig, setting=setting, outcome_unknown=unknown)


_WATCHED: weakref.WeakSet[Engine] = weakref.WeakSet()


def watch_timeouts(engine: Engine) -> None:
    """Raise statements ``engine``'s PostgreSQL server cancels as :class:`DatabaseTimeoutError`.
    Called by :func:`~memabra.storage.make_engine`."""
    if engine in _WATCHED or engine.dialect.name != "postgresql":
        return
    _WATCHED.add(engine)
    url = engine.url  # not the engine: the listener sits on a dialect SQLAlchemy may cache

    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> BaseException | None:
        if context.is_pre_ping or context.is_disconnect:
            return None
        # SQLAlchemy hands COMMIT (and ROLLBACK) to the driver with no statement of its own
        committing = context.connection is not None and context.statement is None
        return timed_out(url, context.original_exception, "a statement", committing=committing)
