"""``--db``: where the database URL comes from, and a usage error naming what is wrong with it
before a command does any work (a URL that does not parse, a SQLite file or folder that is not
there); schema migrations with one-line errors."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy.engine import make_url

from memabra._cli._common import fail, run_guarded
from memabra._environment import FILE_SUFFIX, secret_variable
from memabra._errors import ConfigError, MemabraError

__all__ = [
    "CreateDbOption",
    "DbOption",
    "ProbeDbOption",
    "database_url",
    "existing_database",
    "migrate",
    "probed_database",
    "sqlite_file",
]


def sqlite_file(url: str) -> Path | None:
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


def _resolved_url(db: str | None, *, option: str | None = None) -> str:
    """``resolve_url(db)`` as a usage error that names where the bad URL came from: ``--db``, or
    ``$MEMABRA_DATABASE_URL`` (or its ``_FILE``) when no ``--db`` was given; ``option`` for another
    option's URL. An empty ``--db ""`` is refused, not read as "not given"."""
    from memabra.storage import resolve_url

    if db is not None and not db.strip():
        # an option whose shell variable expanded to nothing must not quietly mean the default database
        fallback = "" if option else " ($MEMABRA_DATABASE_URL or the default is used then)"
        raise typer.BadParameter(
            f"is empty; give a database URL, or leave the option out{fallback}", param_hint=option or "'--db'"
        )
    try:
        return resolve_url(db)
    except MemabraError as exc:
        given = db or _environment_url()
        raise typer.BadParameter(f"{exc}{_url_hint(given)}", param_hint=option or _db_source(db)) from None


def _environment_url() -> str:
    """The URL the environment gives (variable or file), or nothing; only for a hint, after
    resolve_url has already named whatever is wrong with the variables themselves."""
    from memabra.storage import URL_ENV

    try:
        return secret_variable(URL_ENV) or ""
    except ConfigError:
        return ""


def checked_url(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """Typer callback of an option naming a database other than ``--db`` (``bench --log-db``): a
    bad URL is a usage error with the same hint."""
    if value is not None:
        _resolved_url(value, option=param.opts[0] if param.opts else None)
    return value


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)


def _url_hint(given: str) -> str:
    """How to write what ``given`` (not a database URL) seems to mean: a file path, or a SQLite
    URL with too few slashes (``sqlite:/tmp/x.db``), as a SQLite URL."""
    if not given or "://" in given:
        return ""
    if "@" in given:  # USER[:PASSWORD]@HOST without a scheme; never echoed, it may hold a password
        return "; the scheme is missing: a database URL is written postgresql+psycopg://USER:PASSWORD@HOST/NAME"
    path = given
    scheme = _SCHEME.fullmatch(given)
    if scheme is not None and len(scheme.group(1)) > 1:  # one letter: a Windows drive (C:/...)
        if not scheme.group(1).lower().startswith("sqlite"):
            return "; a database URL is written sqlite:///FILE or postgresql+psycopg://USER@HOST/NAME"
        path = scheme.group(2)
    if not path:
        return "; a SQLite file is written sqlite:///relative.db or sqlite:////absolute/path.db"
    slashes = " (four slashes before an absolute path)" if path.startswith("/") else ""
    return f"; a SQLite file is written sqlite:///{path}{slashes}"


def _db_source(db: str | None) -> str:
    """Where the database URL came from, for a usage error: ``--db``, ``$MEMABRA_DATABASE_URL``, or
    (neither given) the default."""
    from memabra.storage import DEFAULT_URL, URL_ENV

    if db:
        return "'--db'"
    if URL_ENV in os.environ:  # set but empty is an error about the variable, not the default
        return f"${URL_ENV} (no --db given)"
    if URL_ENV + FILE_SUFFIX in os.environ:
        return f"${URL_ENV}{FILE_SUFFIX} (no --db given)"
    return f"the default database {DEFAULT_URL} (no --db given and ${URL_ENV} is not set)"


def _missing_folder(path: Path) -> Path | None:
    """The folder that should hold the SQLite file ``path``, when it does not exist (as an
    absolute path: sqlite3 itself says only ``unable to open database file``)."""
    folder = path.absolute().parent
    return None if folder.is_dir() else folder


def database_url(db: str | None) -> str | None:
    """Typer callback of a ``--db`` that may create the database: the URL must parse, and a SQLite
    file's folder must exist (a missing one is named, not left to sqlite3's vaguer error)."""
    url = _resolved_url(db)
    path = sqlite_file(url)
    if path is not None:
        folder = _missing_folder(path)
        if folder is not None:
            raise typer.BadParameter(
                f"cannot create the SQLite database {path}: the directory {folder} does not exist; create it first",
                param_hint=_db_source(db),
            )
        if path.is_dir():
            raise typer.BadParameter(f"{path} is a folder, not a SQLite database file", param_hint=_db_source(db))
        if not path.exists() and not _writable_folder(path.absolute().parent):
            # sqlite3 says only "unable to open database file"; in a container whose working
            # directory is on a read-only root file system this is where the default path lands
            raise typer.BadParameter(
                f"cannot create the SQLite database {path.absolute()}: the directory {path.absolute().parent} "
                "is not writable (a read-only file system?); give a path on a writable volume",
                param_hint=_db_source(db),
            )
    return db


def _writable_folder(folder: Path) -> bool:
    # access(2) also answers EROFS for a read-only mount, which permission bits do not show
    return os.access(folder, os.W_OK | os.X_OK)


def existing_database(db: str | None) -> str | None:
    """Typer callback of ``--db``: refuse a SQLite file that does not exist rather than create an
    empty one (only ``memabra db upgrade`` and ``memabra demo`` create databases)."""
    url = _resolved_url(db)
    path = sqlite_file(url)
    if path is None:
        return db
    folder = _missing_folder(path)
    if folder is not None:
        raise typer.BadParameter(
            f"no database at {path}: the directory {folder} does not exist (check the path; to start a new "
            f"database there, create the directory first, then run `memabra db upgrade --db {url}`)",
            param_hint=_db_source(db),
        )
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder, not a SQLite database file", param_hint=_db_source(db))
    if not path.exists():
        raise typer.BadParameter(
            f"no database at {path}; create it with `memabra db upgrade --db {url}` (or check the path)",
            param_hint=_db_source(db),
        )
    return db


def probed_database(db: str | None) -> str | None:
    """Typer callback of ``--db`` for ``memabra status``: only the URL must parse. A SQLite file
    that is not there (a volume not mounted, a file moved) is the check failing, exit 1 with its
    ``--json`` and ``--prometheus`` files saying so, not a usage error that leaves an earlier
    run's healthy figures in them for a scraper to read."""
    _resolved_url(db)
    return db


def migrate(action: Callable[[str, str], str], url: str, revision: str) -> str:
    """Run an Alembic migration, naming what is wrong (a database newer than this memabra, a
    revision that does not exist) in one line instead of Alembic's traceback. A SQLite file the
    failed run created is removed again."""
    created = sqlite_file(url)
    if created is not None and created.exists():
        created = None
    try:
        return _migrate(action, url, revision)
    except BaseException:
        if created is not None:
            _remove_new_sqlite(created)
        raise


def _migrate(action: Callable[[str, str], str], url: str, revision: str) -> str:
    from alembic.util import CommandError

    from memabra.storage import current_revision, head_revision, known_revisions, make_engine

    try:
        return run_guarded(action, url, revision)
    except CommandError as exc:
        engine = make_engine(url)
        try:
            current = current_revision(engine)
        except Exception:  # the database's own state is only context for the message
            current = None
        finally:
            engine.dispose()
        known = known_revisions()
        if current is not None and current not in known:
            fail(
                f"the database is at schema revision {current}, newer than this memabra "
                f"(which knows up to {head_revision()}); upgrade memabra instead"
            )
        if revision not in known and revision not in ("head", "base", "heads") and not revision.startswith(("+", "-")):
            fail(f"unknown schema revision {revision!r}; known: {', '.join(sorted(known))}, head or base")
        fail(f"cannot migrate to {revision!r}: {exc}")


def _remove_new_sqlite(path: Path) -> None:
    """A SQLite file this run created, gone again: a migration that failed on a new path must not
    leave an empty database behind that later commands take for a real one."""
    for leftover in (path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal"))):
        # a folder that cannot be written (EROFS even for a file that is not there) holds nothing
        # this run made; the migration's own error is the one to report, not this one
        with contextlib.suppress(OSError):
            leftover.unlink(missing_ok=True)


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (default: $MEMABRA_DATABASE_URL or $MEMABRA_DATABASE_URL_FILE, else sqlite:///memabra.db).",
        show_default=False,
        callback=existing_database,
    ),
]

CreateDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (default: $MEMABRA_DATABASE_URL or $MEMABRA_DATABASE_URL_FILE, else sqlite:///memabra.db); "
        "created if missing.",
        show_default=False,
        callback=database_url,
    ),
]

ProbeDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (default: $MEMABRA_DATABASE_URL or $MEMABRA_DATABASE_URL_FILE, else sqlite:///memabra.db).",
        show_default=False,
        callback=probed_database,
    ),
]
