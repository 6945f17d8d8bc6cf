"""Is every reward on its way to a learner, has every deletion finished, and was every routed turn
logged? The checks ``memabra
status`` and the admin view run on :meth:`EpisodeLog.status <memabra.storage.EpisodeLog.status>`.

Can the database take writes? A full disk, a read-only file and a hot standby refuse every write
(:class:`~memabra.storage.DatabaseNotWritableError`), so agents stop logging turns: ``memabra
status`` reads what says so beforehand (:func:`write_state`), reading only: nothing is written to
find out, so the check stays as cheap as the rest of it and never fills a disk it finds full."""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, func, select, text

from memabra._errors import ConfigError
from memabra.storage import DeletionEntry, EmbeddingTable, LogStatus, PolicyStatus
from memabra.storage._engine import sqlite_file
from memabra.storage._memory_models import EmbeddingRow

__all__ = [
    "DEFAULT_MAX_LAG",
    "DELETIONS_CHECK",
    "FEEDBACK_WINDOWS_CHECK",
    "LEARNER_CHECK",
    "EMBEDDINGS_COUNT_CAP",
    "LOW_DISK_FREE_BYTES",
    "TURNS_CHECK",
    "WRITES_CHECK",
    "HealthProblem",
    "StoredVectors",
    "WriteState",
    "deletion_problems",
    "format_age",
    "format_size",
    "health_problems",
    "stored_vectors",
    "turn_problems",
    "write_problems",
    "write_state",
]

DEFAULT_MAX_LAG = timedelta(minutes=15)
"""How long a closed feedback window may stay open, or a final reward stay unlearned: the learner
commits at least every 30 s and closes windows at every step, so a quarter of an hour is a learner
that is missing or stuck, not one that is busy."""


FEEDBACK_WINDOWS_CHECK = "feedback windows"
"""The check of feedback windows past their end that nobody closed."""

LEARNER_CHECK = "learner"
"""The check of final rewards no learner reads (``learner POLICY`` for one policy's learner)."""

DELETIONS_CHECK = "deletions"
"""The check of deletion runs: the one problem that is not about learning."""

TURNS_CHECK = "turns"
"""The check of routed turns never logged (their process died mid-turn)."""


WRITES_CHECK = "writes"
"""The check that the database can take writes: a hot standby, read-only transactions, a SQLite
file or folder this process cannot write, or a volume nearly full."""

LOW_DISK_FREE_BYTES = 1 << 30
"""Free space on a SQLite log's volume below which the writes check fails, before the disk is full:
a logged turn with its decisions and payloads takes a few kilobytes, so a gibibyte is a few hundred
thousand turns, a day or more of a busy agent, time to free space before every write is refused."""

EMBEDDINGS_COUNT_CAP = 10_000
"""Up to here each encoder key's stored vectors are counted, unless ``exact``: the figure is there
to show which keys hold vectors (a retired model's stay until deleted), and counting 10,000 index
entries per key takes a few milliseconds, where a cap ten times higher made the whole check several
times slower on a cache of a few encoders."""


@dataclass(frozen=True, slots=True)
class WriteState:
    """What says whether the database can take writes, read without writing (``None``: not
    known on this backend). PostgreSQL: ``in_recovery`` (``pg_is_in_recovery()``: a hot standby)
    and ``transaction_read_only`` (``SHOW transaction_read_only``: a standby, or
    ``default_transaction_read_only`` set for the role, the database or in the URL's options).
    SQLite: ``query_only`` (``PRAGMA query_only``), the ``file`` and whether this process may write
    it (and its ``-wal``/``-shm`` files) and its ``folder`` (where SQLite creates them), and the
    space free on its volume (``disk_free_bytes``, what an unprivileged writer may use, of
    ``disk_total_bytes``) against ``low_disk_free_bytes``. A hidden failure the reads cannot see
    (a PostgreSQL server's full disk) still shows as the write's
    :class:`~memabra.storage.DatabaseNotWritableError`."""

    backend: str
    in_recovery: bool | None = None
    transaction_read_only: bool | None = None
    query_only: bool | None = None
    file: str | None = None
    file_writable: bool | None = None
    folder_writable: bool | None = None
    disk_free_bytes: int | None = None
    disk_total_bytes: int | None = None
    low_disk_free_bytes: int | None = None

    @property
    def writable(self) -> bool:
        """Whether nothing read says writes are refused (a nearly full volume still takes them)."""
        refusing = (self.in_recovery, self.transaction_read_only, self.query_only)
        unwritable = (self.file_writable, self.folder_writable)
        return not any(refusing) and False not in unwritable

    @property
    def disk_low(self) -> bool:
        """Whether the volume's free space is below ``low_disk_free_bytes``."""
        if self.disk_free_bytes is None or self.low_disk_free_bytes is None:
            return False
        return self.disk_free_bytes < self.low_disk_free_bytes


def write_state(engine: Engine) -> WriteState:
    """What ``engine``'s database says of taking writes, read on one connection and from the file
    system: nothing is written (see :class:`WriteState`)."""
    backend = engine.dialect.name
    if backend == "postgresql":
        with engine.connect() as conn:
            recovery = bool(conn.execute(select(func.pg_is_in_recovery())).scalar_one())
            read_only = str(conn.execute(text("SHOW transaction_read_only")).scalar_one()).lower() == "on"
        return WriteState(backend, in_recovery=recovery, transaction_read_only=read_only)
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
    # the -wal and -shm files are written on every commit in WAL mode, and SQLite creates them
    # (and a rollback journal) in the folder: any of them read-only refuses writes
    files = [path, *(f for f in (Path(f"{path}-wal"), Path(f"{path}-shm")) if f.exists())]
    usage = shutil.disk_usage(path.parent)
    return WriteState(
        backend,
        query_only=query_only,
        file=str(path),
        file_writable=all(os.access(f, os.W_OK) for f in files),
        folder_writable=os.access(path.parent, os.W_OK),
        disk_free_bytes=usage.free,
        disk_total_bytes=usage.total,
        low_disk_free_bytes=LOW_DISK_FREE_BYTES,
    )


def write_problems(state: WriteState) -> tuple[HealthProblem, ...]:
    """The ``writes`` check: each reason ``state`` gives that writes are (or soon will be) refused,
    with what to do."""
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
    if state.file_writable is False:
        found.append(
            f"this process cannot write the SQLite file {state.file} (or its -wal/-shm files): every write is "
            "refused; make them writable to the user the agents and the learner run as"
        )
    if state.folder_writable is False:
        found.append(
            f"this process cannot write the folder of {state.file}, where SQLite creates its -wal, -shm and "
            "journal files: writes are refused; make it writable"
        )
    if state.disk_low and state.disk_free_bytes is not None and state.low_disk_free_bytes is not None:
        found.append(
            f"the volume that holds {state.file} has {format_size(state.disk_free_bytes)} free of "
            f"{format_size(state.disk_total_bytes or 0)} (under {format_size(state.low_disk_free_bytes)}): free space before "
            "it is full, when every write is refused (episodes deleted with `memabra episodes delete --older-than "
            "AGE` leave room inside the file for new ones)"
        )
    return tuple(HealthProblem(WRITES_CHECK, message) for message in found)


def format_size(n: int) -> str:
    """``n`` bytes in the largest binary unit it reaches: 1.5 GiB, 300.0 MiB, 12 B."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True, slots=True)
class StoredVectors:
    """How many vectors one encoder key holds (``capped``: counted up to
    :data:`EMBEDDINGS_COUNT_CAP`, at least that many)."""

    model: str
    vectors: int
    capped: bool = False


def stored_vectors(engine: Engine, *, exact: bool = False) -> tuple[StoredVectors, ...]:
    """The encoder keys with stored vectors and how many each holds, by key; counted up to
    :data:`EMBEDDINGS_COUNT_CAP` unless ``exact`` (:meth:`EmbeddingTable.models
    <memabra.storage.EmbeddingTable.models>`, which reads every row)."""
    if exact:
        return tuple(StoredVectors(model, count) for model, count in EmbeddingTable(engine).models().items())
    t = EmbeddingRow
    # each next key by one seek into the primary key (model, text_sha256), however many vectors
    # each key holds: neither database skips through an index for a DISTINCT by itself
    keys = select(func.min(t.model).label("model")).cte("memabra_keys", recursive=True)
    following = select(func.min(t.model)).where(t.model > keys.c.model).scalar_subquery()
    keys = keys.union_all(select(following).where(keys.c.model.is_not(None)))
    out: list[StoredVectors] = []
    with engine.connect() as conn:
        models = [m for m in conn.execute(select(keys.c.model).where(keys.c.model.is_not(None))).scalars()]
        for model in models:
            rows = select(t.text_sha256).where(t.model == model).limit(EMBEDDINGS_COUNT_CAP + 1).subquery()
            count = int(conn.execute(select(func.count()).select_from(rows)).scalar_one())
            out.append(StoredVectors(model, min(count, EMBEDDINGS_COUNT_CAP), count > EMBEDDINGS_COUNT_CAP))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class HealthProblem:
    """One failed check: which (``feedback windows``, ``learner``, ``learner POLICY``,
    ``deletions``, ``turns``) and why; ``policy``: the policy of a ``learner POLICY`` check (what
    a metric labels it with), ``None`` for the others."""

    check: str
    message: str
    policy: str | None = None


def health_problems(
    state: LogStatus, max_lag: timedelta = DEFAULT_MAX_LAG, *, policies: Collection[str] | None = None
) -> tuple[HealthProblem, ...]:
    """What has waited longer than ``max_lag`` on its way to a learner, each named with its likely
    cause, and each deletion run that has made no progress for longer than ``max_lag`` without
    finishing (it died part way: what it was asked to delete is partly still there). ``policies``:
    check only these policies' learners (a log that once served another policy keeps that policy's
    checkpoint, and its learner falls behind for good); every one by default. Turns whose process
    died mid-turn (running past ``RUNNING_TURN_LIMIT``) are a problem as soon as they are counted."""
    now = state.checked_at
    problems: list[HealthProblem] = []
    if state.overdue_since is not None and now - state.overdue_since > max_lag:
        overdue = f"{state.overdue} feedback window(s) closed up to {format_age(now - state.overdue_since)} ago and are still open"
        holder = next((p.lease for p in state.policies if p.lease is not None), None)
        if holder is not None:
            why = (
                f"a learner holds the lease ({holder.describe()}) but has not closed them: it logs an error "
                "for each episode it cannot score ('could not be finalised'), which stays open"
            )
        else:
            why = "a learner closes them, so none is running (start `memabra learner`, or an agent process)"
        problems.append(HealthProblem(FEEDBACK_WINDOWS_CHECK, f"{overdue}: {why}"))
    if not state.policies and state.unlearned_since is not None and now - state.unlearned_since > max_lag:
        problems.append(
            HealthProblem(
                LEARNER_CHECK,
                f"{state.unlearned}{'+' if state.unlearned_capped else ''} final reward(s) not learned, the oldest final for {format_age(now - state.unlearned_since)}, "
                "and no policy has a learner yet (start `memabra learner`, or an agent process)",
            )
        )
    for policy in state.policies:
        if policies is not None and policy.policy not in policies:
            continue
        if policy.backlog_since is None or now - policy.backlog_since <= max_lag:
            continue
        waiting = f"policy {policy.policy}: {policy.backlog}{'+' if policy.backlog_capped else ''} final reward(s) not learned, the oldest final for {format_age(now - policy.backlog_since)}"
        problems.append(
            HealthProblem(
                f"{LEARNER_CHECK} {policy.policy}", f"{waiting}; {_why_behind(state, policy)}", policy=policy.policy
            )
        )
    problems.extend(deletion_problems(state.unfinished_deletions, now, max_lag))
    problems.extend(turn_problems(state.lost_turns, state.lost_since, now))
    return tuple(problems)


def turn_problems(lost: int, lost_since: datetime | None, now: datetime) -> tuple[HealthProblem, ...]:
    """The ``turns`` check alone (the unfinished turns page reads only these counts): ``lost``
    turns running past ``RUNNING_TURN_LIMIT``, the oldest since ``lost_since``."""
    if not lost or lost_since is None:
        return ()
    return (
        HealthProblem(
            TURNS_CHECK,
            f"{lost} turn(s) routed and never finished, the oldest running since "
            f"{format_age(now - lost_since)} ago: their process died mid-turn. A run retried from its "
            "checkpoint goes on with its turn; `memabra episodes paused --lost --abandon` logs them as failed "
            "episodes, so their routing decisions are learned from and evaluated",
        ),
    )


def deletion_problems(
    unfinished: Iterable[DeletionEntry], now: datetime, max_lag: timedelta = DEFAULT_MAX_LAG
) -> tuple[HealthProblem, ...]:
    """The ``deletions`` check alone: each unfinished run with no progress for ``max_lag``."""
    return tuple(
        HealthProblem(DELETIONS_CHECK, _stalled(deletion, now))
        for deletion in unfinished
        if now - deletion.progressed_at > max_lag
    )


def _stalled(deletion: DeletionEntry, now: datetime) -> str:
    command = deletion.rerun_command()
    again = f"`{command}`" if command is not None else f"the same command with all {deletion.named} ids"
    return (
        f"the deletion of {deletion.describe()} asked by {deletion.actor} {format_age(now - deletion.started_at)} ago "
        f"stopped after {deletion.deleted} episode(s) and has not finished (nothing deleted for "
        f"{format_age(now - deletion.progressed_at)}): some of what it was asked to delete is still in the log; "
        f"run it again to finish: {again} (entry {deletion.id})"
    )


def _why_behind(state: LogStatus, policy: PolicyStatus) -> str:
    tx = state.oldest_transaction
    held = f"{policy.held_back}{'+' if policy.held_back_capped else ''}"
    if policy.held_back and tx is not None:
        since = "" if tx.since is None else f" open for {format_age(state.checked_at - tx.since)}"
        where = ", ".join(v for v in (tx.state, tx.database, tx.application, tx.client) if v)
        return (
            f"{held} of them wait behind PostgreSQL transaction {tx.pid}{since} ({where}): the learner "
            "reads no reward committed after a transaction that is still open"
        )
    if policy.held_back:
        return (
            f"{held} of them wait behind a transaction still open on the PostgreSQL server, which this "
            "database role cannot see (pg_stat_activity shows other roles' transactions to pg_read_all_stats)"
        )
    if policy.lease is None:
        return (
            f"no learner holds the lease (start `memabra learner --policy {policy.policy}`, or an agent process; "
            "if the log no longer serves this policy, check only the ones it does: `memabra status --policy P`)"
        )
    return f"the learner holding the lease ({policy.lease.describe()}) is not keeping up"


def format_age(delta: timedelta) -> str:
    """``delta`` to the two largest units that matter: 2d 4h, 3h 5m, 12m, 45s (seconds only under
    ten minutes, where a probe's interval is what they measure)."""
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    if minutes >= 10 or (minutes and not seconds):
        return f"{minutes}m"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{seconds}s"
