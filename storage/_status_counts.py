"""The status read's counts that grow with the log, kept cheap on a log of tens of millions of
episodes (see :mod:`memabra.storage._status`).

Counting every episode (``SELECT count(*) FROM episodes``) or every final reward a policy without a
learner checkpoint has not read costs a read of the whole index: 128 ms and 767 ms on a PostgreSQL
log of a million episodes, seconds at fifty million, on every poll. So, unless ``exact``:

* the episodes are counted up to :data:`EPISODES_COUNT_CAP`; beyond it PostgreSQL's planner estimate
  (``pg_class.reltuples``, kept by ``ANALYZE`` and autovacuum) stands in, said to be one
  (``"estimate"``); where the table was never analysed (the estimate is below the count already
  made) the figure is the cap, said to be a lower bound (``"at least"``). SQLite keeps no estimate,
  so its episodes are counted exactly (an embedded log does not reach these sizes);
* the final rewards not learned yet (all of them, and each policy's backlog) are read in the
  learner's order, ``(commit_seq, episode_id)``, up to :data:`BACKLOG_COUNT_CAP` plus one: the
  count stops at the cap (``capped``), and the time the oldest of them became final is the
  earliest among those read, the next ones the learner reads, as it reads them.

``exact`` counts everything, as the status read did before these bounds (``memabra status --exact``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, and_, func, literal, or_, select, text
from sqlalchemy.orm import Session

from memabra.storage._learner import START, LearnerCheckpoint
from memabra.storage._models import EpisodeRow, RewardRow

__all__ = [
    "BACKLOG_COUNT_CAP",
    "EPISODES_COUNT_CAP",
    "PG_HORIZON",
    "Accuracy",
    "BoundedCount",
    "backlog_count",
    "episode_count",
    "unlearned_count",
]

EPISODES_COUNT_CAP = 100_000
"""Up to here the episodes are counted (an index-only count of this many rows: about 10 ms on
PostgreSQL); beyond it the planner's estimate stands in, unless ``exact``."""

BACKLOG_COUNT_CAP = 10_000
"""Up to here the final rewards not learned yet are counted (each joined with its episode for the
time it became final), per policy and for the whole log, unless ``exact``: a learner that keeps up
leaves far fewer, and one that lags this far fails the age check long before the count matters."""

Accuracy = Literal["exact", "estimate", "at least"]
"""How a count was made: counted, the planner's estimate, or counted up to a cap (a lower bound)."""

# the planner's row estimate of the episodes table (the one the session's search_path names);
# -1 (PostgreSQL 14+) or 0 before the table was first analysed
_PG_EPISODES_ESTIMATE = text("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass('episodes')")
# rows committed by transactions at or above the server's oldest running one (LearnerStore.read_final's horizon)
PG_HORIZON = text("pg_snapshot_xmin(pg_current_snapshot())::text::bigint")


@dataclass(frozen=True, slots=True)
class BoundedCount:
    """A count of final rewards waiting for a learner: ``count`` (the cap when ``capped``: at least
    that many), ``since`` when the oldest of those read became final, ``held_back`` (PostgreSQL)
    how many of them wait behind an open transaction (``held_back_capped``: at least that many)."""

    count: int
    since: datetime | None
    capped: bool = False
    held_back: int = 0
    held_back_capped: bool = False


def episode_count(s: Session, postgres: bool, exact: bool) -> tuple[int, Accuracy]:
    """The episodes in the log and how the figure was made (see the module)."""
    if exact or not postgres:
        return int(s.scalar(select(func.count()).select_from(EpisodeRow)) or 0), "exact"
    counted = int(s.scalar(_bounded(select(EpisodeRow.id), EPISODES_COUNT_CAP)) or 0)
    if counted <= EPISODES_COUNT_CAP:
        return counted, "exact"
    estimate = int(s.scalar(_PG_EPISODES_ESTIMATE) or 0)
    if estimate > EPISODES_COUNT_CAP:
        return estimate, "estimate"
    return EPISODES_COUNT_CAP, "at least"


def unlearned_count(s: Session, exact: bool) -> BoundedCount:
    """The final rewards no learner has marked learned, whatever the policy."""
    r = RewardRow
    return _waiting(s, and_(r.final.is_(True), r.learned_at.is_(None)), exact=exact)


def backlog_count(s: Session, checkpoint: LearnerCheckpoint | None, postgres: bool, exact: bool) -> BoundedCount:
    """The final rewards after a learner's read position (every final reward without a checkpoint)."""
    after = checkpoint.position if checkpoint is not None else START
    r = RewardRow
    unread = and_(
        r.final.is_(True),
        r.commit_seq.is_not(None),
        or_(r.commit_seq > after.seq, and_(r.commit_seq == after.seq, r.episode_id > after.episode_id)),
    )
    horizon = select(PG_HORIZON).scalar_subquery()
    if exact:
        held = func.count().filter(r.commit_seq >= horizon) if postgres else literal(0)
        stmt = (
            select(func.count(), func.min(EpisodeRow.finalized_at), held)
            .select_from(r)
            .join(EpisodeRow, EpisodeRow.id == r.episode_id)
            .where(unread)
        )
        count, since, held_back = s.execute(stmt).one()
        return BoundedCount(int(count), since, held_back=int(held_back))
    found = _waiting(s, unread, exact=False)
    if not postgres or not found.count:
        return found
    # those committed after the oldest open transaction: the newest, an index range from the horizon
    held_back = s.scalar(_bounded(select(r.episode_id).where(unread, r.commit_seq >= horizon), BACKLOG_COUNT_CAP))
    held_back = int(held_back or 0)
    return BoundedCount(
        found.count,
        found.since,
        found.capped,
        held_back=min(held_back, BACKLOG_COUNT_CAP),
        held_back_capped=held_back > BACKLOG_COUNT_CAP,
    )


def _waiting(s: Session, condition: ColumnElement[bool], *, exact: bool) -> BoundedCount:
    """Count the final rewards matching ``condition`` (up to the cap unless ``exact``) and when the
    oldest of those counted became final."""
    r = RewardRow
    if exact:
        count, since = s.execute(
            select(func.count(), func.min(EpisodeRow.finalized_at))
            .select_from(r)
            .join(EpisodeRow, EpisodeRow.id == r.episode_id)
            .where(condition)
        ).one()
        return BoundedCount(int(count), since)
    # in the learner's order: the planner walks (commit_seq, episode_id) from the read position, or
    # the (final, learned_at) index where few match, and stops after the cap
    first = (
        select(EpisodeRow.finalized_at.label("finalized_at"))
        .select_from(r)
        .join(EpisodeRow, EpisodeRow.id == r.episode_id)
        .where(condition)
        .order_by(r.commit_seq, r.episode_id)
        .limit(BACKLOG_COUNT_CAP + 1)
        .subquery()
    )
    count, since = s.execute(select(func.count(), func.min(first.c.finalized_at))).one()
    return BoundedCount(min(int(count), BACKLOG_COUNT_CAP), since, capped=int(count) > BACKLOG_COUNT_CAP)


def _bounded(rows: Select[Any], cap: int) -> Select[Any]:
    """Count the rows of ``rows``, stopping after ``cap + 1``."""
    return select(func.count()).select_from(rows.limit(cap + 1).subquery())
