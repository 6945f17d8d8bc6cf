"""Engine construction: SQLite (embedded default) and PostgreSQL through psycopg 3."""

from __future__ import annotations

import re
import select
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.exc import DisconnectionError, OperationalError

from memabra._environment import secret_variable
from memabra._errors import ConfigError, MemabraError
from memabra.storage._sqlite import OneConnectionPool, configure_sqlite, in_memory
from memabra.storage._sqlite import sqlite_file as sqlite_file  # where the other modules import it from

DEFAULT_URL = "sqlite:///memabra.db"
URL_ENV = "MEMABRA_DATABASE_URL"

# How long a SQLite writer waits for the file's write lock before the write is retried (and,
# after the retries, refused with StorageContentionError). Each episode holds the lock for a
# millisecond or two, so 30 s is hundreds of queued writers: past that, use PostgreSQL.
SQLITE_BUSY_TIMEOUT_S = 30.0

# A pooled PostgreSQL connection idle for longer than this is pinged before use (a server restart
# or an idle-killing proxy leaves dead ones); one checked in more recently is taken as alive. A
# ping on every checkout (SQLAlchemy's pool_pre_ping) cost a round trip per transaction, five per turn.
PG_PING_IDLE_S = 5.0
# How long opening a PostgreSQL connection may take (TCP, TLS, authentication) unless the URL says
# (``?connect_timeout=``): a server that accepts the connection and never answers would otherwise
# hang the process for as long as the operating system keeps the socket.
PG_CONNECT_TIMEOUT_S = 10
# libpq's TCP settings for a server that vanishes without closing its connections (a failover that
# moves the address, a network partition), each applied unless the URL sets it: without them a
# query or a LISTEN waits until the operating system gives up on the socket, minutes (unacknowledged
# data, ~15 on Linux) to hours (an idle wait for a reply, 2 h before the first keepalive). A live
# server's kernel answers the probes however long a query runs, so only a dead peer trips them:
# idle 10 s, then 3 probes 5 s apart, and unacknowledged data given up after 30 s. libpq ignores
# them on a Unix-domain socket.
PG_SOCKET_DEFAULTS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}
# psycopg 3 prepares a statement server-side after its fifth run on a connection (its default
# prepare_threshold). A transaction-pooling PgBouncer (before 1.21, and later ones unless
# max_prepared_statements is set) hands the next transaction another server connection, where
# the name is unknown or already taken ("prepared statement _pg3_0 already exists"), and nothing
# in a URL says a pooler is there. Never preparing costs direct PostgreSQL a little of a turn's
# storage time (measured in docs/production.md, "Behind PgBouncer"): a failing deployment costs
# more. ``?prepare_threshold=5`` on the URL brings preparing back where no such pooler sits.
PG_PREPARE_THRESHOLD = None
# the DB-API drivers memabra's engines are built for, by backend (SQLAlchemy's default driver names)
_DRIVERS = {"sqlite": ("pysqlite",), "postgresql": ("psycopg",)}


class DatabaseUnavailableError(MemabraError, OperationalError):
    """The database could not be reached: a connection was refused, timed out, named an unknown host
    or database, or was lost while a commit was in flight. The message names the URL (password
    hidden) and the driver's reason in one line; ``orig`` is the driver's error.

    ``may_have_written`` says whether a write of the failed call may have reached the database:
    false where no connection could be opened (nothing was sent, so nothing was stored and the
    same call made again stores it once), and where the database refused or rolled the write back;
    true where the connection was lost while statements or their ``COMMIT`` were in flight, or the
    cause is not known (the default), so that a client is told to check before repeating a change.

    It is a SQLAlchemy :class:`~sqlalchemy.exc.OperationalError` too, so code that waits out a
    database outage by catching that (a learner loop, a health probe) keeps doing so."""

    def __init__(self, message: str, orig: BaseException | None = None, *, may_have_written: bool = True) -> None:
        OperationalError.__init__(self, None, None, orig if orig is not None else Exception(message))
        self.message = message
        self.may_have_written = may_have_written

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        return _rebuild, (type(self), self.message, self.orig, self.may_have_written)


def _rebuild(
    cls: type[DatabaseUnavailableError], message: str, orig: BaseException | None, may_have_written: bool
) -> DatabaseUnavailableError:
    return cls(message, orig, may_have_written=may_have_written)


# USER:PASSWORD@ in a URL that may not parse (so SQLAlchemy cannot hide the password for us): an
# optional scheme, a user name, then everything up to the last "@" (a password may hold "@" or "/")
_USERINFO = re.compile(r"((?:[A-Za-z][A-Za-z0-9+.-]*://)?[^:/@\s'\"]*:)(?!//)[^\s'\"]*@")


# libpq's secret parameters, which a URL may carry in its query (``?password=``, psycopg takes
# them as connect arguments) and a conninfo string as ``password=...`` or ``password='...'``. An
# unquoted value runs to a space, a quote or an ``&`` that starts the next ``name=`` parameter: a
# ``#`` or a lone ``&`` typed unencoded is the password's (make_url keeps both in the value); a
# backslash escapes the next character (libpq's conninfo: ``password='it\'s x'``, ``a\ b``)
_SECRET_PARAMETER = re.compile(
    r"(?i)\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:[^&\s'\"\\]|\\.)+(?:&(?![A-Za-z_][\w.-]*=)(?:[^&\s'\"\\]|\\.)*)*)"
)


def mask_password(text: str) -> str:
    """``text`` with the password of any ``USER:PASSWORD@`` in it, and the value of any
    ``password=`` or ``sslpassword=`` parameter, replaced by ``***``: an error about a malformed
    URL goes to terminals and logs, and must not carry the secret."""
    return _SECRET_PARAMETER.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


def shown_url(url: str | URL) -> str:
    """``url`` as a message, a table or a repr may show it: its password hidden, whether it is in
    ``USER:PASSWORD@`` or in the query (``?password=``, ``?sslpassword=``)."""
    parsed = make_url(url) if isinstance(url, str) else url
    return mask_password(parsed.render_as_string(hide_password=True))


def resolve_url(url: str | None = None) -> str:
    """The database URL: the argument, else ``$MEMABRA_DATABASE_URL`` (or the file
    ``$MEMABRA_DATABASE_URL_FILE`` names, read once), else ``memabra.db`` here."""
    from_env = None if url else secret_variable(URL_ENV)
    if from_env is not None and not from_env.strip():
        # an unfilled secret must not quietly mean a fresh SQLite file in the working directory
        raise ConfigError(f"${URL_ENV} is set but empty; unset it to use the default {DEFAULT_URL}, or set it to a URL")
    chosen = url or from_env or DEFAULT_URL
    try:
        parsed = make_url(chosen)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a terse message
        raise ConfigError(f"not a database URL: {mask_password(chosen)!r} ({mask_password(str(exc))})") from None
    if parsed.drivername in ("postgresql", "postgres"):
        # psycopg 3 is the supported driver; a bare scheme would pick psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"unsupported database {parsed.get_backend_name()!r}: use sqlite:/// or postgresql+psycopg://"
        )
    driver = parsed.get_driver_name()
    if driver not in _DRIVERS[parsed.get_backend_name()]:
        # an async driver's engine cannot run memabra's statements (they run on worker threads, off
        # any event loop), and psycopg2 rejects the psycopg 3 connect arguments at its first connect
        supported = "sqlite:///PATH" if parsed.get_backend_name() == "sqlite" else "postgresql+psycopg://"
        raise ConfigError(
            f"unsupported database driver {parsed.drivername!r}: memabra runs on {supported} "
            "(its storage runs off the event loop on worker threads, so async servers need no async driver)"
        )
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str | None = None, *, busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S, **kwargs: Any) -> Engine:
    """An engine for ``url``; on SQLite, writers wait up to ``busy_timeout_s`` for the write lock."""
    resolved = resolve_url(url)
    parsed = make_url(resolved)
    if parsed.get_backend_name() == "sqlite":
        memory = in_memory(parsed)
        if memory:
            # One connection for the engine's life: the database lives only in its connections,
            # and every new one would see a different empty database or end this one; lent to one
            # thread at a time, or their transactions mix on it (see _sqlite).
            kwargs.setdefault("poolclass", OneConnectionPool)
        kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": busy_timeout_s})
        engine = create_engine(resolved, **kwargs)
        if isinstance(engine.pool, OneConnectionPool):
            engine.pool.wait_s = busy_timeout_s
        configure_sqlite(engine, wal=not memory, busy_timeout_s=busy_timeout_s)
        _watch_refusals(engine)
        return engine
    defaults: dict[str, Any] = {"prepare_threshold": PG_PREPARE_THRESHOLD}
    if "prepare_threshold" in parsed.query:
        # psycopg takes it as a connect argument, never in a conninfo: read and removed here, so
        # that `memabra learner --db URL?prepare_threshold=5` prepares again where no pooler sits
        defaults["prepare_threshold"] = _prepare_threshold(parsed.query["prepare_threshold"])
        parsed = parsed.difference_update_query(["prepare_threshold"])
        resolved = parsed.render_as_string(hide_password=False)
    defaults.update(pg_connection_defaults(parsed.query))
    kwargs["connect_args"] = {**defaults, **kwargs.get("connect_args", {})}
    try:
        engine = create_engine(resolved, **kwargs)
    except ModuleNotFoundError as exc:
        if exc.name != "psycopg":
            raise
        raise ConfigError(
            "PostgreSQL needs psycopg 3, which is not installed: pip install 'memabra[postgres]'"
        ) from None
    if not kwargs.get("pool_pre_ping"):
        _ping_when_idle(engine)
    _name_connect_failures(engine)
    _watch_refusals(engine)
    return engine


def _watch_refusals(engine: Engine) -> None:
    # both build on this module's errors and helpers
    from memabra.storage._refusals import watch_refusals
    from memabra.storage._timeouts import watch_timeouts

    watch_refusals(engine)
    watch_timeouts(engine)


def pg_connection_defaults(query: Any) -> dict[str, int]:
    """The libpq settings memabra gives a PostgreSQL connection (its connect timeout and TCP
    keepalives) that the URL's ``query`` does not set itself, and the libpq it runs on knows."""
    wanted = {"connect_timeout": PG_CONNECT_TIMEOUT_S, **PG_SOCKET_DEFAULTS}
    libpq = _libpq_version()
    if libpq is not None and libpq < _LIBPQ_TCP_USER_TIMEOUT:
        # an older libpq refuses every connection given an option it does not know ("invalid
        # connection option"): there the keepalives alone give up on a silent server
        del wanted["tcp_user_timeout"]
    return {name: value for name, value in wanted.items() if name not in query}


# the first libpq with ``tcp_user_timeout`` (PostgreSQL 12's); psycopg 3 runs on libpq 10 and later
_LIBPQ_TCP_USER_TIMEOUT = 120_000


def _libpq_version() -> int | None:
    """The version of the libpq psycopg runs on (``None`` without psycopg: the engine says so)."""
    try:
        from psycopg import pq
    except ImportError:
        return None
    return pq.version()


def _prepare_threshold(value: str | tuple[str, ...]) -> int | None:
    """The URL's ``prepare_threshold``: a non-negative integer, or ``none`` (never prepare)."""
    text_value = value if isinstance(value, str) else ",".join(value)
    if text_value.strip().lower() == "none":
        return None
    if not text_value.strip().isdigit():
        raise ConfigError(
            f"prepare_threshold in the database URL must be a non-negative integer or none, got {text_value!r}"
        )
    return int(text_value)


def unreachable(
    engine: Engine, exc: BaseException, doing: str = "connect to", after: str = ""
) -> DatabaseUnavailableError:
    """``exc`` (a failed connect, a lost connection) as a :class:`DatabaseUnavailableError` naming
    the database (password hidden) and the driver's reason, in one line."""
    return _unreachable_at(engine.url, exc, doing, after)


def _unreachable_at(
    url: URL, exc: BaseException, doing: str = "connect to", after: str = "", *, may_have_written: bool = True
) -> DatabaseUnavailableError:
    return _unavailable(f"cannot {doing} the database", url, exc, after, may_have_written=may_have_written)


def _lost_at(url: URL, exc: BaseException) -> DatabaseUnavailableError:
    return _unavailable("lost the connection to the database", url, exc)


def _unavailable(
    what: str, url: URL, exc: BaseException, after: str = "", *, may_have_written: bool = True
) -> DatabaseUnavailableError:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    reason = lines[0] if lines else type(orig).__name__
    where = shown_url(url)
    error = DatabaseUnavailableError(f"{what} {where}: {reason}{after}", orig, may_have_written=may_have_written)
    error.connection_invalidated = bool(getattr(exc, "connection_invalidated", False))
    return error


def _name_connect_failures(engine: Engine) -> None:
    """A connection the pool cannot open (refused, unknown host or database, timed out), or one the
    server ended under a statement (a restart, a failover, ``pg_terminate_backend``), raises
    :class:`DatabaseUnavailableError` instead of SQLAlchemy's bare ``OperationalError``: one line
    naming the database, for a caller to tell an outage from a bad statement. Its ``orig`` and
    ``connection_invalidated`` stay the driver's, which the write retries read; other errors on an
    open connection pass through untouched."""
    # The listener sits on the dialect, which SQLAlchemy's reflection caches keep (up to 128 of
    # them): closing over the engine would keep the engine, its pool and its compiled statements.
    url = engine.url

    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> BaseException | None:
        if context.is_pre_ping or not isinstance(context.sqlalchemy_exception, OperationalError):
            return None
        if context.connection is None:  # no connection opened: nothing of the call was sent
            return _unreachable_at(url, context.sqlalchemy_exception, may_have_written=False)
        if context.is_disconnect:
            return _lost_at(url, context.sqlalchemy_exception)
        return None


def _ping_when_idle(engine: Engine) -> None:
    dialect = engine.dialect  # not the engine: see _name_connect_failures

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["memabra_checked_in"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("memabra_checked_in")
        if since is None:
            return  # new
        if time.monotonic() - since < PG_PING_IDLE_S and not _has_unread_input(dbapi_connection):
            return  # in use moments ago, and the server has not written to it since (no FATAL, no EOF)
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards the connection and checks out (or opens) another.
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc


def _has_unread_input(dbapi_connection: Any) -> bool:
    """Whether the server wrote to an idle connection: a server that ends a session (a restart,
    ``pg_terminate_backend``) sends a FATAL error and closes it, which leaves the socket readable. A
    poll of the socket costs no round trip, unlike a ping."""
    try:
        readable, _, _ = select.select([dbapi_connection.fileno()], [], [], 0)
    except Exception:  # closed already, or not a socket-backed connection: let the ping decide
        return True
    return bool(readable)


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"
