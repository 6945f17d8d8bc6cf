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

What the router earns is no health check either, but an operator promoting a snapshot (or a learner
publishing one) wants to see it: ``reward_window`` sums, per policy and snapshot served, the
rewards that became final in the last :data:`REWARD_WINDOW` (:class:`SnapshotRewards`).

Turns that failed are no loss (each is logged, its reward learned), but a burst of them is an
outage somewhere else: ``failed_turns`` counts, per cause, the turns logged as failed in the last
:data:`FAILED_TURNS_WINDOW` (a provider down shows as ``model_error``, users pressing stop as
``superseded``). No threshold is set here: what is normal depends on the traffic, so the alert
that reads the count decides.

Everything is a read; nothing here changes the log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType

from sqlalchemy import ColumnElement, Engine, and_, case, func, or_, select, text
from sqlalchemy.orm import Session

from memabra.storage._clock import database_now
from memabra.storage._deletion_log import DeletionEntry, unfinished_deletions
from memabra.storage._engine import is_postgres
from memabra.storage._failures import FAILED_TURN_SOURCE, FAILURE_CAUSES, failure_cause
from memabra.storage._learner import LearnerCheckpoint, LearnerStore, LeaseHolder
from memabra.storage._learner_models import LearnerStateRow
from memabra.storage._migrate import current_revision
from memabra.storage._models import DecisionRow, EpisodeRow, FeedbackRow, PolicySnapshotRow, RewardRow
from memabra.storage._policy_versions import snapshot_index_for
from memabra.storage._snapshots import rollback_version
from memabra.storage._status_counts import PG_HORIZON, Accuracy, backlog_count, episode_count, unlearned_count
from memabra.storage._suspended_turns import kept_turn_counts

__all__ = [
    "FAILED_TURNS_WINDOW",
    "OTHER_CAUSE",
    "REWARD_WINDOW",
    "LogStatus",
    "OpenTransaction",
    "PolicyStatus",
    "SnapshotRewards",
    "failed_turn_counts",
    "log_status",
    "reward_window",
]

FAILED_TURNS_WINDOW = timedelta(hours=1)
"""How far back ``failed_turns`` counts. A fixed window keeps the read bounded by the turns logged
in it (an index range on the episodes' time), however long the log. An hour: long enough that a
scrape every minute or a textfile cron every few minutes misses no burst and a steady trickle
shows, short enough that an outage stands out against the day's traffic and the count falls back
to 0 (its alert resolves) an hour after the outage ends."""

REWARD_WINDOW = timedelta(hours=1)
"""How far back ``reward_window`` reads final rewards, for the reasons of
:data:`FAILED_TURNS_WINDOW`: the read is an index range on the episodes' ``finalized_at``, bounded
by the rewards that became final in the window, however long the log."""

OTHER_CAUSE = "other"
"""The cause ``failed_turns`` counts a failed turn under when its comment names none of
:data:`~memabra.storage._failures.FAILURE_CAUSES` (an exception outside any model or tool call):
every failed turn is counted once, under one cause."""

# The comment's head that names its cause: the longest cause word and the character after it.
_CAUSE_HEAD = max(len(c) for c in FAILURE_CAUSES) + 1


def _no_failed_turns() -> dict[str, int]:
    return dict.fromkeys((*FAILURE_CAUSES, OTHER_CAUSE), 0)


@dataclass(frozen=True, slots=True)
class PolicyStatus:
    """One policy: what serves, who learns, and what its learner has not read yet.

    ``backlog`` counts the final rewards after the learner's read position (every final reward
    when the policy has no learner checkpoint yet); ``backlog_since`` is when the oldest of them
    became final. ``held_back`` (PostgreSQL) counts those of them the learner cannot read yet
    because a transaction older than theirs is still open. Both are counted up to
    :data:`~memabra.storage._status_counts.BACKLOG_COUNT_CAP` unless the read was ``exact``
    (``backlog_capped``, ``held_back_capped``: at least that many; ``backlog_since`` is then the
    earliest among the first ones the learner reads)."""

    policy: str
    active_version: str | None
    active_since: datetime | None
    checkpoint: LearnerCheckpoint | None
    lease: LeaseHolder | None
    backlog: int
    backlog_since: datetime | None
    held_back: int
    # what a rollback of the active snapshot re-activates: the snapshot it replaced (else its parent)
    previous_version: str | None = None
    # the backlog (held_back) was counted up to BACKLOG_COUNT_CAP and stopped there: at least that many
    backlog_capped: bool = False
    held_back_capped: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotRewards:
    """The rewards that became final in the window for the turns one snapshot of ``policy`` routed.

    ``version`` is the snapshot the first decision's logged version grew from (``snapshot_group``:
    an online update ``V+7`` counts for snapshot ``V``; a version that grew from no snapshot for its
    configuration), so there is one entry per snapshot, not per online update. ``mean_reward`` and
    ``reward_stddev`` (sample, 0 for one reward) are of the totals; ``mean_success`` of S; the
    shares are of the rewards: ``corrected_share`` with C > 0 (a correction, a wrong-tool verdict,
    a retracted memory, a repeated question), ``missed_share`` with some H_k < 0 (more relevant
    candidates of a kind left out than chosen ones helped), ``tool_error_share`` with E > 0."""

    policy: str
    version: str
    rewards: int
    mean_reward: float
    reward_stddev: float
    mean_success: float
    corrected_share: float
    missed_share: float
    tool_error_share: float


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
    """The log at ``checked_at`` (by the database's clock, as every age here is meant to be read):
    its schema, episodes, feedback windows and each policy.

    ``overdue`` counts the episodes whose feedback window has ended but whose reward is not final
    (``overdue_since``: the earliest end); ``unlearned`` the final rewards no learner has marked
    learned (``unlearned_since``: when the oldest became final), whatever the policy.
    ``unfinished_deletions``: deletion runs with no finish recorded (running, or died part way).
    ``episodes`` and ``unlearned`` are bounded unless the read was ``exact``
    (``episodes_accuracy``, ``unlearned_capped``; :mod:`memabra.storage._status_counts`)."""

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
    # turns logged as failed at or after ``failed_since`` (FAILED_TURNS_WINDOW before
    # ``checked_at``), by cause: every one of FAILURE_CAUSES and OTHER_CAUSE, 0 when none
    failed_turns: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(_no_failed_turns()))
    failed_since: datetime | None = None
    # per policy and snapshot, the rewards final at or after ``rewards_since`` (REWARD_WINDOW
    # before ``checked_at``): only snapshots with such rewards, by policy then version
    reward_window: tuple[SnapshotRewards, ...] = ()
    rewards_since: datetime | None = None
    # how ``episodes`` was made: counted, PostgreSQL's planner estimate, or a lower bound (the
    # count stopped at EPISODES_COUNT_CAP and the table was never analysed); see _status_counts
    episodes_accuracy: Accuracy = "exact"
    # ``unlearned`` was counted up to BACKLOG_COUNT_CAP and stopped there: at least that many
    unlearned_capped: bool = False


# Rows committed by transactions at or above the server's oldest running one; the learner waits on
# them (the same horizon as LearnerStore.read_final; _final_decisions reads it from here).
_PG_HORIZON = PG_HORIZON
# Only transactions that hold a transaction id set that horizon (a read-only one does not), in any
# database of the server.
_PG_OLDEST_TRANSACTION = text(
    "SELECT pid, xact_start, state, datname, application_name, host(client_addr) FROM pg_stat_activity "
    "WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() ORDER BY xact_start NULLS LAST LIMIT 1"
)


def log_status(engine: Engine, now: datetime | None = None, *, exact: bool = False) -> LogStatus:
    """Read the log's status: a handful of indexed aggregates, the counts that grow with the log
    bounded (:mod:`memabra.storage._status_counts`) unless ``exact``. ``now``: by default the
    database's clock (:mod:`memabra.storage._clock`), which the feedback windows' ends, the deletion
    audit trail and PostgreSQL's transaction starts are on: this host's may be minutes apart."""
    postgres = is_postgres(engine)
    store = LearnerStore(engine)
    with Session(engine) as s, s.begin():
        now = now or database_now(s)
        episodes, accuracy = episode_count(s, postgres, exact)
        last_at = s.scalar(select(func.max(EpisodeRow.created_at)))
        open_windows = s.scalar(select(func.count()).where(EpisodeRow.finalized_at.is_(None))) or 0
        overdue, overdue_since = s.execute(
            select(func.count(), func.min(EpisodeRow.feedback_due_at)).where(
                EpisodeRow.finalized_at.is_(None), EpisodeRow.feedback_due_at <= now
            )
        ).one()
        unlearned = unlearned_count(s, exact)
        learner_policies = set(s.scalars(select(LearnerStateRow.policy)))
        snapshot_policies = set(s.scalars(select(PolicySnapshotRow.policy).distinct()))
        active = _active_snapshots(s)
        oldest = _oldest_transaction(s) if postgres else None
        unfinished = unfinished_deletions(s)
        kept = kept_turn_counts(s, now)
        failed_since = now - FAILED_TURNS_WINDOW
        failed = failed_turn_counts(s, failed_since)
        rewards_since = now - REWARD_WINDOW
        rewards = reward_window(s, rewards_since, now)
    policies = []
    for policy in sorted(snapshot_policies | learner_policies):
        checkpoint = store.checkpoint(policy)
        with Session(engine) as s, s.begin():
            backlog = backlog_count(s, checkpoint, postgres, exact)
        active_version, active_since, previous_version = active.get(policy, (None, None, None))
        policies.append(
            PolicyStatus(
                policy=policy,
                active_version=active_version,
                active_since=active_since,
                checkpoint=checkpoint,
                lease=store.lease_holder(policy),
                backlog=backlog.count,
                backlog_since=backlog.since,
                held_back=backlog.held_back,
                previous_version=previous_version,
                backlog_capped=backlog.capped,
                held_back_capped=backlog.held_back_capped,
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
        unlearned=unlearned.count,
        unlearned_since=unlearned.since,
        policies=tuple(policies),
        oldest_transaction=oldest,
        unfinished_deletions=unfinished,
        paused_turns=kept.paused,
        paused_since=kept.paused_since,
        lost_turns=kept.lost,
        lost_since=kept.lost_since,
        failed_turns=failed,
        failed_since=failed_since,
        reward_window=rewards,
        rewards_since=rewards_since,
        episodes_accuracy=accuracy,
        unlearned_capped=unlearned.capped,
    )


def _active_snapshots(s: Session) -> dict[str, tuple[str, datetime, str | None]]:
    """Each policy's newest active snapshot (as LearnerStore.active_version reads it): its version,
    when it was saved, and what a rollback of it re-activates (``rollback_version``)."""
    snap = PolicySnapshotRow
    rows = s.execute(
        select(snap.policy, snap.version, snap.created_at, snap.previous_active, snap.parent)
        .where(snap.status == "active")
        .order_by(snap.created_at)
    ).all()
    named = {v for r in rows for v in (r.previous_active, r.parent) if v is not None}
    policy_of: dict[str, str] = {}
    if named:
        found = s.execute(select(snap.version, snap.policy).where(snap.version.in_(named)))
        policy_of.update((version, policy) for version, policy in found)
    return {
        r.policy: (r.version, r.created_at, rollback_version(r.previous_active, r.parent, r.policy, policy_of.get))
        for r in rows
    }


def failed_turn_counts(s: Session, since: datetime) -> Mapping[str, int]:
    """The turns logged as failed at or after ``since``, by cause (every cause, 0 when none), as
    the episode listing's ``since`` and ``failure_cause`` filters find them.

    Bounded by the episodes' time, which has an index (the feedback's ``received_at`` has none):
    the runtime logs a failed turn's episode when it writes its failed-turn feedback, so both
    fall in the same window. The episodes of the window are an ``IN`` list, not a join: SQLite
    then reads the feedback through its ``episode_id`` index, where with a join it scans the
    whole feedback table. The database counts by the comment's first characters (few distinct
    ones) and :func:`failure_cause` names each, the function the listing's cause badge uses. An
    episode with several failed-turn feedback rows (never written by the runtime) counts each."""
    f = FeedbackRow
    head = func.substr(f.payload["comment"].as_string(), 1, _CAUSE_HEAD).label("head")
    recent = select(EpisodeRow.id).where(EpisodeRow.created_at >= since)
    found = s.execute(
        select(head, func.count())
        .where(f.episode_id.in_(recent), f.source == FAILED_TURN_SOURCE)
        # by the label: PostgreSQL takes the expression's own parameters as a different expression
        .group_by("head")
    )
    counts = _no_failed_turns()
    for comment_head, count in found:
        counts[failure_cause(comment_head) or OTHER_CAUSE] += int(count)
    return MappingProxyType(counts)


def reward_window(s: Session, since: datetime, until: datetime) -> tuple[SnapshotRewards, ...]:
    """The rewards that became final from ``since`` to ``until``, per policy and snapshot served
    (:class:`SnapshotRewards`), by policy then version.

    Bounded by the episodes' ``finalized_at``, which has an index (set with the final reward):
    each episode's reward by its key and its first decision (whose version the episode carries)
    through the decisions' ``episode_id`` index. The database sums per logged version (few in an
    hour) and the snapshot index folds the versions into their snapshots, reading only the
    snapshots those versions can fold into (:func:`snapshot_index_for`)."""
    e, r, d = EpisodeRow, RewardRow, DecisionRow

    def counted(condition: ColumnElement[bool]) -> ColumnElement[int]:
        return func.sum(case((condition, 1), else_=0))

    found = s.execute(
        select(
            d.policy,
            d.policy_version,
            func.count(),
            func.sum(r.total),
            func.sum(r.total * r.total),
            func.sum(r.s),
            counted(r.c > 0),
            counted(or_(r.hm < 0, r.hs < 0, r.ht < 0)),
            counted(r.e > 0),
        )
        .select_from(e)
        .join(r, r.episode_id == e.id)
        .join(d, and_(d.episode_id == e.id, d.seq == 0))
        # no test of rewards.final: both writers set finalized_at exactly with the final reward,
        # and with one SQLite reads every final reward through its (final, learned_at) index
        .where(e.finalized_at >= since, e.finalized_at <= until)
        .group_by(d.policy, d.policy_version)
    ).all()
    if not found:
        return ()
    index = snapshot_index_for(s, {str(version) for _policy, version, *_figures in found})
    sums: dict[tuple[str, str], list[float]] = {}
    for policy, version, *figures in found:
        into = sums.setdefault((str(policy), index.group(str(version))), [0.0] * len(figures))
        for i, figure in enumerate(figures):
            into[i] += float(figure or 0)
    return tuple(_snapshot_rewards(policy, version, *figures) for (policy, version), figures in sorted(sums.items()))


def _snapshot_rewards(
    policy: str, version: str, n: float, total: float, squares: float, *sums: float
) -> SnapshotRewards:
    mean = total / n
    variance = max(0.0, (squares - n * mean * mean) / (n - 1)) if n > 1 else 0.0
    success, corrected, missed, tool_errors = (value / n for value in sums)
    return SnapshotRewards(policy, version, int(n), mean, math.sqrt(variance), success, corrected, missed, tool_errors)


def _oldest_transaction(s: Session) -> OpenTransaction | None:
    found = s.execute(_PG_OLDEST_TRANSACTION).first()
    if found is None:
        return None
    pid, since, state, database, application, client = found
    return OpenTransaction(int(pid), since, state, database, application or None, client)
