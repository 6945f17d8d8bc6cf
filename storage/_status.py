"""Where a log stands, for the people who run it: is every reward on its way to a learner?

A reward is lost to learning in quiet ways, and each has a number here:

* its feedback window passed and nobody closed it (``overdue``): the learner closes due windows,
  so windows that stay overdue mean no learner is running;
* it is final but the policy's learner has not read it (``backlog``), counted after the learner's
  read position exactly as the learner reads, with the time the oldest of them became final;
* on PostgreSQL, it is final but committed by a transaction newer than the oldest transaction still
  open on the server (``held_back``): the learner cannot read past that transaction until it ends
  (see :mod:`memabra.storage._learner`), and ``oldest_transaction`` names it.

Besides rewards, one other thing can stop half way unnoticed: a deletion (a retention job, an
erasure) killed part way, whose audit entry stays unfinished (``unfinished_deletions``). And
turns an ``interrupt`` paused wait in the log for someone to resume them (``paused_turns``), while
turns whose process died mid-turn wait to be retried or logged as failed (``lost_turns``).

Everything is a read; nothing here changes the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, and_, func, literal, or_, select, text
from sqlalchemy.orm import Session

from memabra._records import utcnow
from memabra.storage._deletion_log import DeletionEntry, unfinished_deletions
from memabra.storage._engine import is_postgres
from memabra.storage._learner import START, LearnerCheckpoint, LearnerStore, LeaseHolder
from memabra.storage._learner_models import LearnerStateRow
from memabra.storage._migrate import current_revision
from memabra.storage._models import EpisodeRow, PolicySnapshotRow, RewardRow
from memabra.storage._suspended_turns import kept_turn_counts

__all__ = ["LogStatus", "OpenTransaction", "PolicyStatus", "log_status"]


@dataclass(frozen=True, slots=True)
class PolicyStatus:
    """One policy: what serves, who learns, and what its learner has not read yet.

    ``backlog`` counts the final rewards after the learner's read position (every final reward
    when the policy has no learner checkpoint yet); ``backlog_since`` is when the oldest of them
    became final. ``held_back`` (PostgreSQL) counts those of them the learner cannot read yet
    because a transaction older than theirs is still open."""

    policy: str
    active_version: str | None
    active_since: datetime | None
    checkpoint: LearnerCheckpoint | None
    lease: LeaseHolder | None
    backlog: int
    backlog_since: datetime | None
    held_back: int


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """The oldest transaction holding a transaction id on the PostgreSQL server (the status read's
    own aside): the learner reads no reward committed after it started until it ends."""

    pid: int
    since: datetime | None
    state: str | None
    database: str | None
    application: str | None
    client: str | None


@dataclass(frozen=True, slots=True)
class LogStatus:
    """The log at ``checked_at``: its schema, episodes, feedback windows and each policy.

    ``overdue`` counts the episodes whose feedback window has ended but whose reward is not final
    (``overdue_since``: the earliest end); ``unlearned`` the final rewards no learner has marked
    learned (``unlearned_since``: when the oldest became final), whatever the policy.
    ``unfinished_deletions``: deletion runs with no finish recorded (running, or died part way)."""

    checked_at: datetime
    backend: str
    schema_revision: str | None
    episodes: int
    last_episode_at: datetime | None
    open_windows: int
    overdue: int
    overdue_since: datetime | None
    unlearned: int
    unlearned_since: datetime | None
    policies: tuple[PolicyStatus, ...]
    oldest_transaction: OpenTransaction | None
    unfinished_deletions: tuple[DeletionEntry, ...] = ()
    # turns an interrupt paused and nobody has resumed yet (``paused_since``: the oldest pause)
    paused_turns: int = 0
    paused_since: datetime | None = None
    # turns kept running for longer than RUNNING_TURN_LIMIT: their process died mid-turn
    # (``lost_since``: the oldest copy, written when the turn was routed or last went on)
    lost_turns: int = 0
    lost_since: datetime | None = None


# Rows committed by transactions at or above the server's oldest running one; the learner waits on
# them (the same horizon as LearnerStore.read_final).
_PG_HORIZON = text("pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
# Only transactions that hold a transaction id set that horizon (a read-only one does not), in any
# database of the server.
_PG_OLDEST_TRANSACTION = text(
    "SELECT pid, xact_start, state, datname, application_name, host(client_addr) FROM pg_stat_activity "
    "WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() ORDER BY xact_start NULLS LAST LIMIT 1"
)


def log_status(engine: Engine, now: datetime | None = None) -> LogStatus:
    """Read the log's status (a handful of indexed aggregates and one count of the episodes)."""
    now = now or utcnow()
    postgres = is_postgres(engine)
    store = LearnerStore(engine)
    with Session(engine) as s, s.begin():
        episodes, last_at = s.execute(select(func.count(), func.max(EpisodeRow.created_at))).one()
        open_windows = s.scalar(select(func.count()).where(EpisodeRow.finalized_at.is_(None))) or 0
        overdue, overdue_since = s.execute(
            select(func.count(), func.min(EpisodeRow.feedback_due_at)).where(
                EpisodeRow.finalized_at.is_(None), EpisodeRow.feedback_due_at <= now
            )
        ).one()
        unlearned, unlearned_since = s.execute(
            select(func.count(), func.min(EpisodeRow.finalized_at))
            .select_from(RewardRow)
            .join(EpisodeRow, EpisodeRow.id == RewardRow.episode_id)
            .where(RewardRow.final.is_(True), RewardRow.learned_at.is_(None))
        ).one()
        learner_policies = set(s.scalars(select(LearnerStateRow.policy)))
        snapshot_policies = set(s.scalars(select(PolicySnapshotRow.policy).distinct()))
        # the newest active snapshot of each policy, as LearnerStore.active_version reads it
        active = {
            policy: (version, created)
            for policy, version, created in s.execute(
                select(PolicySnapshotRow.policy, PolicySnapshotRow.version, PolicySnapshotRow.created_at)
                .where(PolicySnapshotRow.status == "active")
                .order_by(PolicySnapshotRow.created_at)
            )
        }
        oldest = _oldest_transaction(s) if postgres else None
        unfinished = unfinished_deletions(s)
        kept = kept_turn_counts(s, now)
    policies = []
    for policy in sorted(snapshot_policies | learner_policies):
        checkpoint = store.checkpoint(policy)
        backlog, since, held_back = _backlog(engine, checkpoint, postgres)
        active_version, active_since = active.get(policy, (None, None))
        policies.append(
            PolicyStatus(
                policy=policy,
                active_version=active_version,
                active_since=active_since,
                checkpoint=checkpoint,
                lease=store.lease_holder(policy),
                backlog=backlog,
                backlog_since=since,
                held_back=held_back,
            )
        )
    return LogStatus(
        checked_at=now,
        backend=engine.dialect.name,
        schema_revision=current_revision(engine),
        episodes=int(episodes),
        last_episode_at=last_at,
        open_windows=int(open_windows),
        overdue=int(overdue),
        overdue_since=overdue_since,
        unlearned=int(unlearned),
        unlearned_since=unlearned_since,
        policies=tuple(policies),
        oldest_transaction=oldest,
        unfinished_deletions=unfinished,
        paused_turns=kept.paused,
        paused_since=kept.paused_since,
        lost_turns=kept.lost,
        lost_since=kept.lost_since,
    )


def _backlog(engine: Engine, checkpoint: LearnerCheckpoint | None, postgres: bool) -> tuple[int, datetime | None, int]:
    after = checkpoint.position if checkpoint is not None else START
    r = RewardRow
    unread = and_(
        r.final.is_(True),
        r.commit_seq.is_not(None),
        or_(r.commit_seq > after.seq, and_(r.commit_seq == after.seq, r.episode_id > after.episode_id)),
    )
    held_back = func.count().filter(r.commit_seq >= select(_PG_HORIZON).scalar_subquery()) if postgres else literal(0)
    stmt = (
        select(func.count(), func.min(EpisodeRow.finalized_at), held_back)
        .select_from(r)
        .join(EpisodeRow, EpisodeRow.id == r.episode_id)
        .where(unread)
    )
    with Session(engine) as s, s.begin():
        count, since, held = s.execute(stmt).one()
    return int(count), since, int(held)


def _oldest_transaction(s: Session) -> OpenTransaction | None:
    found = s.execute(_PG_OLDEST_TRANSACTION).first()
    if found is None:
        return None
    pid, since, state, database, application, client = found
    return OpenTransaction(int(pid), since, state, database, application or None, client)
