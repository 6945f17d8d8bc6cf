"""Can the database take writes? A full disk, a read-only file and a hot standby refuse every write
(:class:`~memabra.storage.DatabaseNotWritableError`), so agents stop logging turns: ``memabra
status`` reads what says so beforehand (:func:`write_state`), reading only: nothing is written to
find out, so the check stays as cheap as the rest of it and never fills a disk it finds full.

Split from :mod:`memabra._health` (whose :class:`~memabra._health.HealthProblem` it returns).

A volume running low is a warning, not a failed check: free space is what the log has left, but
how long that lasts depends on the traffic, which one read cannot know, and a probe failing on a
10 GB VM or a laptop with 800 MB free would page someone (or restart a pod) for a disk that may take
months to fill. The check fails only when a disk is nearly full (:data:`CRITICAL_DISK_FREE_BYTES`),
where a burst of writes can reach the refusal before anyone acts.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from sqlalchemy import Engine, text

from memabra._errors import ConfigError
from memabra._health import HealthProblem
from memabra.storage._engine import sqlite_file

__all__ = [
    "CRITICAL_DISK_FREE_BYTES",
    "LOW_DISK_FREE_BYTES",
    "WRITES_CHECK",
    "WriteState",
    "format_size",
    "write_problems",
    "write_state",
    "write_warnings",
]

WRITES_CHECK = "writes"
"""The check that the database can take writes: a hot standby, read-only transactions, a SQLite
file or folder its writers cannot write, or a volume nearly full."""

LOW_DISK_FREE_BYTES = 1 << 30
"""Free space on a SQLite log's volume below which the writes check warns (it still passes): a
logged turn with its decisions and payloads takes a few kilobytes, so a gibibyte is a few hundred
thousand turns, a day or more of a busy agent. An absolute figure, not a share of the volume: the
room left is the turns left, whatever the volume's size."""

CRITICAL_DISK_FREE_BYTES = 64 << 20
"""Free space below which the writes check fails (``memabra status`` exits 4): some twenty thousand
turns, an hour of a busy agent, and SQLite's write-ahead log grows between checkpoints (a learner's
commit, a deletion run) before its pages reach the file, so a burst can meet the full disk first."""


@dataclass(frozen=True, slots=True)
class WriteState:
    """What says whether the database can take writes, read without writing (``None``: not
    known on this backend). PostgreSQL: ``in_recovery`` (``pg_is_in_recovery()``: a hot standby)
    and ``transaction_read_only`` (a standby, or ``default_transaction_read_only`` set for the role,
    the database or in the URL's options). SQLite: ``query_only`` (``PRAGMA query_only``), the
    ``file`` and whether it (and its ``-wal``/``-shm`` files) and its ``folder`` (where SQLite
    creates them) may be written, and the space free on its volume (``disk_free_bytes``, what an
    unprivileged writer may use, of ``disk_total_bytes``) against ``low_disk_free_bytes`` (a
    warning) and ``critical_disk_free_bytes`` (a failure).

    ``uri_read_only``: a ``file:`` URI opens it read-only (``mode=ro`` or ``immutable=1``).

    ``as_root``: the check ran as root, whom permissions do not stop, so ``file_writable`` and
    ``folder_writable`` say whether ``writer`` may write them (and the volume is not mounted
    read-only): the database file's owner, or its folder's where root owns the file, whom the
    agents are taken to run as (a service user owns the file it created and its folder; a
    container running as root owns both as root, and a write bit cleared there was cleared on
    purpose). A hidden failure the reads cannot see (a PostgreSQL server's full disk) still shows as the
    write's :class:`~memabra.storage.DatabaseNotWritableError`."""

    backend: str
    in_recovery: bool | None = None
    transaction_read_only: bool | None = None
    query_only: bool | None = None
    uri_read_only: bool | None = None
    file: str | None = None
    file_writable: bool | None = None
    folder_writable: bool | None = None
    as_root: bool | None = None
    writer: str | None = None
    disk_free_bytes: int | None = None
    disk_total_bytes: int | None = None
    low_disk_free_bytes: int | None = None
    critical_disk_free_bytes: int | None = None

    @property
    def writable(self) -> bool:
        """Whether nothing read says writes are refused (a nearly full volume still takes them)."""
        refusing = (self.in_recovery, self.transaction_read_only, self.query_only, self.uri_read_only)
        unwritable = (self.file_writable, self.folder_writable)
        return not any(refusing) and False not in unwritable

    @property
    def disk_low(self) -> bool:
        """Whether the volume's free space is below ``low_disk_free_bytes`` (a warning)."""
        return _below(self.disk_free_bytes, self.low_disk_free_bytes)

    @property
    def disk_critical(self) -> bool:
        """Whether the volume's free space is below ``critical_disk_free_bytes`` (a failure)."""
        return _below(self.disk_free_bytes, self.critical_disk_free_bytes)


def _below(free: int | None, threshold: int | None) -> bool:
    return free is not None and threshold is not None and free < threshold


def write_state(engine: Engine) -> WriteState:
    """What ``engine``'s database says of taking writes, read on one connection and from the file
    system: nothing is written (see :class:`WriteState`)."""
    backend = engine.dialect.name
    if backend == "postgresql":
        # one statement, not two: through a transaction pooler (PgBouncer) each statement outside a
        # transaction may be served by another server connection, so the two answers could come
        # from two servers; one round trip is cheaper too
        query = text("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
        with engine.connect() as conn:
            recovery, read_only = conn.execute(query).one()
        return WriteState(backend, in_recovery=bool(recovery), transaction_read_only=str(read_only).lower() == "on")
    if backend != "sqlite":
        return WriteState(backend)
    with engine.connect() as conn:
        query_only = bool(conn.execute(text("PRAGMA query_only")).scalar_one())
    uri_read_only, path = _uri(engine)
    if path is None:
        try:
            path = sqlite_file(engine)
        except ConfigError:
            path = None  # its folder went away after the log opened: the reads above said so already
    if path is None:  # in memory
        return WriteState(backend, query_only=query_only, uri_read_only=uri_read_only)
    as_root = os.geteuid() == 0
    writer = _writer(path) if as_root else None
    # the -wal and -shm files are written on every commit in WAL mode, and SQLite creates them (and
    # a rollback journal) in the folder: any of them read-only refuses writes; one not there yet is
    # the folder's to allow
    files = (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
    free: int | None
    total: int | None
    try:
        free, total = _room_on(path.parent)
    except OSError:  # the folder went away since: its writability says so
        free = total = None
    return WriteState(
        backend,
        query_only=query_only,
        uri_read_only=uri_read_only,
        file=str(path),
        file_writable=all(_may_write(f, writer) for f in files),
        folder_writable=_may_write(path.parent, writer),
        as_root=as_root,
        writer=None if writer is None else writer.name,
        disk_free_bytes=free,
        disk_total_bytes=total,
        low_disk_free_bytes=LOW_DISK_FREE_BYTES,
        critical_disk_free_bytes=CRITICAL_DISK_FREE_BYTES,
    )


_TRUE = frozenset({"1", "yes", "true", "on"})  # what sqlite3_uri_boolean reads as true


def _uri(engine: Engine) -> tuple[bool | None, Path | None]:
    """A ``file:`` URI's (``?uri=true``) read-only options and its file: ``mode=ro`` and
    ``immutable=1`` open it read-only whatever the file's permissions, so every write is refused
    though the file is writable (``None, None``: no such URI, or one in memory)."""
    database = engine.url.database or ""
    query = {k: v if isinstance(v, str) else v[-1] for k, v in engine.url.query.items()}
    if not database.startswith("file:") or query.get("uri", "").lower() not in _TRUE:
        return None, None
    parsed = urlsplit(database)
    options = {**dict(parse_qsl(parsed.query)), **query}  # SQLAlchemy moves the URI's query to the URL's
    mode = options.get("mode", "").lower()
    if mode == "memory":
        return None, None
    read_only = mode == "ro" or options.get("immutable", "").lower() in _TRUE
    if not parsed.path or parsed.netloc not in ("", "localhost"):
        return read_only, None
    path = Path(unquote(parsed.path)).expanduser().absolute()
    return read_only, path if path.parent.is_dir() and not path.is_dir() else None


@dataclass(frozen=True, slots=True)
class _Writer:
    """The user the agents are taken to write as, when the check runs as root."""

    name: str
    uid: int
    groups: frozenset[int]


def _writer(path: Path) -> _Writer | None:
    """As root, whom permissions do not stop, the check asks for the user the agents run as: the
    database file's owner, or its folder's where the file is root's or not there yet (``sudo
    memabra init`` leaves a root-owned file in a service user's folder, which that user then cannot
    write). A systemd service user needs the folder (for -wal/-shm) and those files too, whoever
    owns them. The file's group counts as the writer's: the group it was created under, or an
    fsGroup volume's, which a Kubernetes pod holds though no group file lists it. A root-owned
    file in a folder whose owner has no account here is root's to write: a container running as
    root writes its file into a host folder mounted into it, owned by a host user the container does
    not know, and a service user is an account (``useradd``, systemd's ``DynamicUser``). ``None``:
    the owners cannot be read."""
    try:
        folder = path.parent.stat()
        st = path.stat() if path.exists() else folder
    except OSError:
        return None
    if st.st_uid == 0 and _account(folder.st_uid) is not None:
        st = folder
    entry = _account(st.st_uid)
    if entry is None:  # a container's numeric user, with no passwd entry
        return _Writer(str(st.st_uid), st.st_uid, frozenset({st.st_gid}))
    groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid)) | {st.st_gid}
    return _Writer(entry.pw_name, st.st_uid, groups)


def _account(uid: int) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        return None


def _room_on(folder: Path) -> tuple[int, int]:
    usage = shutil.disk_usage(folder)
    return usage.free, usage.total


def _may_write(path: Path, writer: _Writer | None) -> bool:
    """Whether ``path`` may be written: by this process's effective user, or, as root (whom
    ``access`` answers yes for any permissions), by ``writer``. ``access`` still says no to root on
    a volume mounted read-only or an immutable file. A file that is not there (yet) is no refusal."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    effective = os.access in os.supports_effective_ids
    if not os.access(path, os.W_OK, effective_ids=effective):
        return not path.exists()  # gone between the two calls (SQLite removes its -wal at close)
    if writer is None:
        return True
    if writer.uid == 0 or st.st_uid == writer.uid:
        # root's own: a write bit cleared made it read-only on purpose, which root alone overrides
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid in writer.groups:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def write_problems(state: WriteState) -> tuple[HealthProblem, ...]:
    """The ``writes`` check: each reason ``state`` gives that writes are (or any moment will be)
    refused, with what to do. A volume merely low is :func:`write_warnings`'."""
    found: list[str] = []
    if state.in_recovery:
        found.append(
            "the PostgreSQL server is a hot standby (in recovery: a read replica, or the old primary after a "
            "failover) and refuses every write: point the URL at the primary (a URL naming several hosts wants "
            "target_session_attrs=read-write)"
        )
    elif state.transaction_read_only:
        found.append(
            "the PostgreSQL server's transactions are read-only (default_transaction_read_only is on for this "
            "role, this database or in the URL's options) and every write is refused: turn it off"
        )
    if state.query_only:
        found.append("the SQLite connection is query-only (PRAGMA query_only) and refuses every write")
    if state.uri_read_only:
        found.append(
            "the SQLite URL opens the file read-only (mode=ro or immutable=1 in its file: URI) and every write is "
            "refused: drop that option from the URL the agents and the learner use"
        )
    who = (
        f"{state.writer}, the user the agents are taken to run as (the file's owner, or its folder's where root "
        "owns the file; this check runs as root, which permissions do not stop)"
        if state.as_root and state.writer is not None
        else "this process"
    )
    if state.file_writable is False:
        found.append(
            f"the SQLite file {state.file} (or its -wal/-shm files) cannot be written by {who}: every write is "
            "refused; make them writable to the user the agents and the learner run as"
        )
    if state.folder_writable is False:
        found.append(
            f"the folder of {state.file}, where SQLite creates its -wal, -shm and journal files, cannot be "
            f"written by {who}: writes are refused; make it writable"
        )
    if state.disk_critical:
        found.append(_room(state, state.critical_disk_free_bytes, "nearly full: free space now"))
    return tuple(HealthProblem(WRITES_CHECK, message) for message in found)


def write_warnings(state: WriteState) -> tuple[HealthProblem, ...]:
    """What ``state`` warns of without failing the check: a volume under ``low_disk_free_bytes``
    free but above ``critical_disk_free_bytes`` (which :func:`write_problems` fails)."""
    if not state.disk_low or state.disk_critical:
        return ()
    return (HealthProblem(WRITES_CHECK, _room(state, state.low_disk_free_bytes, "running low: free space soon")),)


def _room(state: WriteState, threshold: int | None, what: str) -> str:
    return (
        f"the volume that holds {state.file} has {format_size(state.disk_free_bytes or 0)} free of "
        f"{format_size(state.disk_total_bytes or 0)} (under {format_size(threshold or 0)}), {what}, before it is "
        "full and every write is refused (episodes deleted with `memabra episodes delete --older-than AGE` "
        "leave room inside the file for new ones)"
    )


def format_size(n: int) -> str:
    """``n`` bytes in the largest binary unit it reaches: 1.5 GiB, 300.0 MiB, 12 B."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
