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
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

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

    ``as_root``: the check ran as root, whom permissions do not stop, so ``file_writable`` and
    ``folder_writable`` say whether their owner may write them (and the volume is not mounted
    read-only): a file nobody but root may write refuses an agent that runs as anyone else. A
    hidden failure the reads cannot see (a PostgreSQL server's full disk) still shows as the
    write's :class:`~memabra.storage.DatabaseNotWritableError`."""

    backend: str
    in_recovery: bool | None = None
    transaction_read_only: bool | None = None
    query_only: bool | None = None
    file: str | None = None
    file_writable: bool | None = None
    folder_writable: bool | None = None
    as_root: bool | None = None
    disk_free_bytes: int | None = None
    disk_total_bytes: int | None = None
    low_disk_free_bytes: int | None = None
    critical_disk_free_bytes: int | None = None

    @property
    def writable(self) -> bool:
        """Whether nothing read says writes are refused (a nearly full volume still takes them)."""
        refusing = (self.in_recovery, self.transaction_read_only, self.query_only)
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
    try:
        path = sqlite_file(engine)
    except ConfigError:
        path = None  # its folder went away after the log opened: the reads above said so already
    if path is None:  # in memory, or a file: URI this check does not parse
        return WriteState(backend, query_only=query_only)
    as_root = os.geteuid() == 0
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
        file=str(path),
        file_writable=all(_may_write(f, as_root) for f in files),
        folder_writable=_may_write(path.parent, as_root),
        as_root=as_root,
        disk_free_bytes=free,
        disk_total_bytes=total,
        low_disk_free_bytes=LOW_DISK_FREE_BYTES,
        critical_disk_free_bytes=CRITICAL_DISK_FREE_BYTES,
    )


def _room_on(folder: Path) -> tuple[int, int]:
    usage = shutil.disk_usage(folder)
    return usage.free, usage.total


def _may_write(path: Path, as_root: bool) -> bool:
    """Whether ``path`` may be written: by this process's effective user, or, as root (whom
    ``access`` answers yes for any permissions), by its owner. ``access`` still says no to root on a
    volume mounted read-only or an immutable file. A file that is not there (yet) is no refusal."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return True
    except OSError:
        return False
    effective = os.access in os.supports_effective_ids
    if not os.access(path, os.W_OK, effective_ids=effective):
        return not path.exists()  # gone between the two calls (SQLite removes its -wal at close)
    return not as_root or bool(mode & stat.S_IWUSR)


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
    who = "its owner (this check runs as root, which permissions do not stop)" if state.as_root else "this process"
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
