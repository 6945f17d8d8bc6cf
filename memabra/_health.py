"""Is every reward on its way to a learner, has every deletion finished, and was every routed turn
logged? The checks ``memabra
status`` and the admin view run on :meth:`EpisodeLog.status <memabra.storage.EpisodeLog.status>`.

Can the database take writes? That check is :mod:`memabra._write_check`'s."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, func, select

from memabra.storage import DeletionEntry, EmbeddingTable, LogStatus, PolicyStatus
from memabra.storage._memory_models import EmbeddingRow

__all__ = [
    "DEFAULT_MAX_LAG",
    "DELETIONS_CHECK",
    "FEEDBACK_WINDOWS_CHECK",
    "LEARNER_CHECK",
    "EMBEDDINGS_COUNT_CAP",
    "ENCODER_CHECK",
    "TURNS_CHECK",
    "HealthProblem",
    "StoredVectors",
    "deletion_problems",
    "format_age",
    "health_problems",
    "stored_vectors",
    "turn_problems",
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

ENCODER_CHECK = "encoder"
"""The check that the embedding-model setting names a usable model (``memabra status`` only)."""


EMBEDDINGS_COUNT_CAP = 10_000
"""Up to here each encoder key's stored vectors are counted, unless ``exact``: the figure is there
to show which keys hold vectors (a retired model's stay until deleted), and counting 10,000 index
entries per key takes a few milliseconds, where a cap ten times higher made the whole check several
times slower on a cache of a few encoders."""


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
    """One failed check (or a warning): which (``feedback windows``, ``learner``, ``learner
    POLICY``, ``deletions``, ``turns``; and ``writes`` and ``encoder``, which only ``memabra status``
    runs) and why; ``policy``: the policy of a ``learner POLICY`` check (what a metric labels it
    with), ``None`` for the others."""

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
