"""A consistent copy of a live SQLite episode log (``memabra db backup``).

A SQLite log runs in WAL mode: committed transactions sit in ``memabra.db-wal`` until a checkpoint
folds them into ``memabra.db``. A plain ``cp memabra.db`` therefore misses them (or, copied while a
checkpoint writes, is torn). :func:`backup_sqlite` copies through SQLite's online backup API
instead, in one step: a single read transaction, so the copy is the log as of one instant, and in
WAL mode that reader never blocks the agents writing meanwhile.

PostgreSQL is backed up with the server's own tools (``pg_dump``, or base backups with WAL
archiving for point-in-time recovery); :func:`backup_sqlite` says so rather than pretend.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from memabra._errors import ConfigError
from memabra.storage._engine import SQLITE_BUSY_TIMEOUT_S, resolve_url
from memabra.storage._migrate import head_revision, known_revisions

__all__ = ["PG_BACKUP_HINT", "PG_RESTORE_HINT", "BackupResult", "backup_sqlite", "restore_sqlite", "sqlite_path"]

logger = logging.getLogger("memabra")

PG_BACKUP_HINT = (
    "memabra db backup copies SQLite logs only; back up PostgreSQL with the server's tools: "
    "pg_dump --format=custom --file memabra.dump DBNAME (a consistent dump while agents keep writing), "
    "or base backups with WAL archiving for point-in-time recovery"
)

PG_RESTORE_HINT = (
    "memabra db restore writes SQLite logs only; restore PostgreSQL with the server's tools: "
    "pg_restore --clean --if-exists --dbname DBNAME memabra.dump, or point-in-time recovery"
)


@dataclass(frozen=True, slots=True)
class BackupResult:
    """What :func:`backup_sqlite` wrote: the copy, its size, the schema revision it is at (``None``
    for a file with no memabra schema) and the episodes it holds."""

    path: Path
    size_bytes: int
    revision: str | None
    episodes: int


def sqlite_path(url: str | None, *, hint: str = PG_BACKUP_HINT) -> Path:
    """The file a SQLite URL names; :class:`ConfigError` saying ``hint`` for PostgreSQL, and for
    an in-memory database or a URI form."""
    parsed = make_url(resolve_url(url))
    if parsed.get_backend_name() != "sqlite":
        raise ConfigError(hint)
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        raise ConfigError(
            f"cannot back up {database or 'an in-memory database'!r}: give the log's file, sqlite:///PATH"
        )
    return Path(database)


def backup_sqlite(url: str | None, out: Path, *, overwrite: bool = False) -> BackupResult:
    """Copy the SQLite log ``url`` names to ``out``, consistent as of one instant, while agents keep
    serving and writing: every transaction committed before the copy started is in it. The copy
    is one self-contained file (rollback journal, no ``-wal`` beside it; an agent opening it
    switches it back to WAL), checked with ``PRAGMA quick_check``, and written under a temporary
    name first, so ``out`` is never a half-written file. Refuses an existing ``out`` unless
    ``overwrite``, and ``out`` naming the log itself."""
    source = sqlite_path(url)
    if not source.is_file():
        raise ConfigError(f"no SQLite database at {source}")
    out = Path(out)
    if out.exists() and out.resolve() == source.resolve():
        raise ConfigError(f"{out} is the database itself; write the backup to another file")
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give the backup's file name")
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} already exists; choose another name or pass --overwrite")
    if not out.absolute().parent.is_dir():
        raise ConfigError(f"cannot write {out}: the directory {out.absolute().parent} does not exist")
    partial = out.with_name(f".{out.name}.partial")
    _remove_database(partial)
    try:
        # created no more readable than the log (it holds personal data) before a page is copied
        os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, source.stat().st_mode & 0o777))
        _copy(source, partial)
        revision, episodes = _describe(partial)
        os.replace(partial, out)
    except BaseException as exc:
        _remove_database(partial)
        if isinstance(exc, (sqlite3.Error, OSError)):
            # a full disk, an I/O error, a damaged log: one line, and no traceback for the operator
            raise ConfigError(f"cannot back up {source} to {out}: {exc}; nothing was written") from None
        raise
    # exactly the log's mode (the creation above was narrowed by the umask)
    out.chmod(source.stat().st_mode & 0o777)
    result = BackupResult(out, out.stat().st_size, revision, episodes)
    logger.info("backed up %s to %s (%d bytes, %d episodes)", source, out, result.size_bytes, episodes)
    return result


def restore_sqlite(backup: Path, url: str | None) -> BackupResult:
    """Replace the whole content of the SQLite log ``url`` names with ``backup`` (a file
    :func:`backup_sqlite` wrote), through SQLite's backup API in one transaction: processes that
    have the log open see the restored log at their next transaction, and a ``-wal`` file a killed
    process left beside the log is superseded, never replayed onto the restored pages (as it is
    after ``cp backup.db memabra.db``). Returns what the log now holds."""
    target = sqlite_path(url, hint=PG_RESTORE_HINT)
    backup = Path(backup)
    if not backup.is_file():
        raise ConfigError(f"no backup file at {backup}")
    if target.exists() and target.resolve() == backup.resolve():
        raise ConfigError(f"{backup} is the database itself; give the backup file")
    if not target.absolute().parent.is_dir():
        raise ConfigError(f"cannot restore to {target}: the directory {target.absolute().parent} does not exist")
    try:
        revision, episodes = _describe(backup)
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{backup} is not a SQLite database ({exc})") from None
    if revision is None:
        raise ConfigError(f"{backup} holds no memabra schema (no alembic_version table): not a backup of a log")
    _check_runnable(backup, revision)
    created = not target.exists()
    try:
        with (
            closing(sqlite3.connect(f"{backup.absolute().as_uri()}?mode=ro", uri=True)) as src,
            closing(sqlite3.connect(target, timeout=SQLITE_BUSY_TIMEOUT_S)) as dst,
        ):
            _backup_step(src, dst, f"the log {target}")
    except sqlite3.Error as exc:
        if created:  # an empty log where there was none would read as a fresh one
            _remove_database(target)
        # one transaction: what the log held before stays (SQLite rolls a failed one back)
        raise ConfigError(f"cannot restore {target} from {backup}: {exc}; nothing was restored") from None
    logger.info("restored %s from %s (%d episodes, schema revision %s)", target, backup, episodes, revision)
    return BackupResult(target, target.stat().st_size, revision, episodes)


# what sqlite3_backup_step returns while a lock held elsewhere keeps it from starting
_WAITING = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


def _backup_step(src: sqlite3.Connection, dst: sqlite3.Connection, locked: str) -> None:
    """``src.backup(dst)`` in one step, giving up (:class:`ConfigError` naming ``locked``) once a lock
    held elsewhere has kept it waiting for the busy timeout. Python's ``backup`` retries a busy step
    every 250 ms for ever: a process holding a write transaction open would hang the command silently.

    pages=-1: the whole file in one step, one read transaction. Copied a few pages a step, each
    write an agent commits meanwhile restarts the copy, which then never ends under load."""
    timeout = SQLITE_BUSY_TIMEOUT_S
    started = time.monotonic()

    def progress(status: int, _remaining: int, _total: int) -> None:
        if status in _WAITING and time.monotonic() - started >= timeout:
            raise ConfigError(
                f"{locked} stayed locked by another process's write transaction for {timeout:g} s; nothing was "
                "copied: end that transaction (a stuck process, an open sqlite3 shell) and run this again"
            )

    src.backup(dst, pages=-1, progress=progress)


def _check_runnable(backup: Path, revision: str) -> None:
    """Refuse a backup at a schema revision this memabra does not ship, unless its compatibility
    marker (``_schema_compat``) says this memabra's code may run on it: the restored log would be
    one no process of this version opens (or another application's file using Alembic too)."""
    known = known_revisions()
    if revision in known:
        return
    with closing(sqlite3.connect(f"{backup.absolute().as_uri()}?mode=ro", uri=True)) as conn:
        has_marker = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_compatibility'"
        ).fetchone()
        found = (
            conn.execute("SELECT oldest_compatible_revision FROM schema_compatibility").fetchone()
            if has_marker
            else None
        )
    if found is not None and found[0] in known:
        return
    raise ConfigError(
        f"{backup} is at schema revision {revision}, which this memabra (schema {head_revision()}) does not know "
        "and cannot run on: a backup taken by a newer memabra (restore it with that version) or not a memabra "
        "log; nothing was changed"
    )


def _remove_database(path: Path) -> None:
    """``path`` and the journal files SQLite may have left beside it."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        path.with_name(f"{path.name}{suffix}").unlink(missing_ok=True)


def _copy(source: Path, destination: Path) -> None:
    timeout = SQLITE_BUSY_TIMEOUT_S
    with (
        closing(sqlite3.connect(source, timeout=timeout)) as src,
        closing(sqlite3.connect(destination, timeout=timeout)) as dst,
    ):
        _backup_step(src, dst, f"the log {source}")
        # a lease names the process that held it when the copy was taken: restored, it would keep
        # a restarted learner waiting for the lease to lapse (only its holder renews it)
        if dst.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'learner_leases'").fetchone():
            with dst:
                dst.execute("DELETE FROM learner_leases")
        # a backup is one file to move about: no -wal that a copy of it could leave behind
        dst.execute("PRAGMA journal_mode=DELETE")
        problems = [row[0] for row in dst.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise ConfigError(f"the copy of {source} failed its integrity check: {'; '.join(problems[:3])}")


def _describe(copy: Path) -> tuple[str | None, int]:
    with closing(sqlite3.connect(copy)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        revision = None
        if "alembic_version" in tables:
            found = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            revision = found[0] if found else None
        episodes = conn.execute("SELECT count(*) FROM episodes").fetchone()[0] if "episodes" in tables else 0
    return revision, int(episodes)
