"""What a learner needs from the log: final rewards in commit order and its checkpoint (the lease is
in :mod:`memabra.storage._learner_lease`).

Exactly-once learning rests on two rules kept here:

* Rewards are read in the order of ``rewards.commit_seq`` (set by a trigger, revision 0004), and on
  PostgreSQL only below the oldest transaction still running, so a reward that commits late can
  never land behind a position already read.
* The model (as a policy snapshot) and the position it has read to are written in ONE transaction,
  guarded by the previous position: a learner killed at any instant resumes from its last commit,
  and a learner that lost its lease cannot overwrite its successor's work.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, and_, func, or_, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from memabra._records import LearningItem, PolicySnapshot, Selection, utcnow
from memabra.storage._engine import is_postgres
from memabra.storage._episodes import assemble_selections
from memabra.storage._from_rows import missed_by_episode, reward_from_row
from memabra.storage._learner_commit import START, LeaseLostError, ReadPosition, commit_checkpoint
from memabra.storage._learner_lease import LearnerLease
from memabra.storage._learner_models import LearnerLeaseRow, LearnerStateRow
from memabra.storage._models import (
    DecisionCandidateRow,
    DecisionRow,
    FeedbackRow,
    PolicySnapshotRow,
    RewardRow,
)
from memabra.storage._policy_versions import SnapshotIndex
from memabra.storage._tx import Transactions

__all__ = [
    "START",
    "FinalReward",
    "LearnerCheckpoint",
    "LearnerStore",
    "LeaseHolder",
    "LeaseLostError",
    "ReadPosition",
]

logger = logging.getLogger("memabra")


@dataclass(frozen=True, slots=True)
class FinalReward:
    """A final reward as the learner reads it, with its place in the commit order."""

    position: ReadPosition
    item: LearningItem


@dataclass(frozen=True, slots=True)
class LearnerCheckpoint:
    """A learner's last commit: the snapshot holding its model and the position it had read to."""

    policy: str
    snapshot_version: str | None
    position: ReadPosition
    learned: int
    published: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who holds a policy's learner lease, as far as the database can tell: on SQLite the holder's
    id and when its lease lapses unless renewed; on PostgreSQL the server process holding the
    advisory lock, its client and since when (``None`` where the server does not say)."""

    policy: str
    holder: str
    until: datetime | None = None
    client: str | None = None
    since: datetime | None = None

    def describe(self) -> str:
        parts = [self.holder]
        if self.client:
            parts.append(f"from {self.client}")
        if self.since is not None:
            parts.append(f"since {self.since.isoformat(timespec='seconds')}")
        if self.until is not None:
            parts.append(f"lease lapses at {self.until.isoformat(timespec='seconds')} unless renewed")
        return ", ".join(parts)


# The server process holding a learner's advisory lock (a bigint key: classid high, objid low),
# and since when: the lease's transaction holds the lock, so its start is when the lease was taken
# (the connection's own start, behind a pooler, is when the pooler opened it).
_PG_HOLDER = text(
    "SELECT l.pid, host(a.client_addr), a.application_name, coalesce(a.xact_start, a.backend_start) FROM pg_locks l "
    "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.classid::bigint = :hi AND l.objid::bigint = :lo "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1"
)


class LearnerStore:
    """Commit-order reads and checkpoint writes on one log's engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def engine(self) -> Engine:
        return self._engine

    def _session(self) -> Session:
        return Session(self._engine, expire_on_commit=False)

    # ------------------------------------------------------------------ reads

    def checkpoint(self, policy: str) -> LearnerCheckpoint | None:
        with self._session() as s, s.begin():
            row = s.get(LearnerStateRow, policy)
            if row is None:
                return None
            return LearnerCheckpoint(
                row.policy,
                row.snapshot_version,
                ReadPosition(row.position_seq, row.position_episode),
                row.learned,
                row.published,
                row.updated_at,
            )

    def read_final(self, after: ReadPosition = START, *, limit: int = 500) -> list[FinalReward]:
        """Final rewards after ``after`` in commit order, up to ``limit``; on PostgreSQL only those
        whose transaction is older than every transaction still running."""
        r = RewardRow
        conds: list[Any] = [
            r.final.is_(True),
            r.commit_seq.is_not(None),
            or_(r.commit_seq > after.seq, and_(r.commit_seq == after.seq, r.episode_id > after.episode_id)),
        ]
        if is_postgres(self._engine):
            conds.append(
                r.commit_seq < select(text("pg_snapshot_xmin(pg_current_snapshot())::text::bigint")).scalar_subquery()
            )
        stmt = select(r).where(*conds).order_by(r.commit_seq, r.episode_id).limit(limit)
        with self._session() as s, s.begin():
            rows = s.scalars(stmt).all()
            if not rows:
                return []
            ids = [row.episode_id for row in rows]
            selections = _selections(s, ids)
            outcomes: dict[str, dict[str, float]] = defaultdict(dict)
            for episode_id, candidate_id, used in s.execute(
                select(DecisionRow.episode_id, DecisionCandidateRow.candidate_id, DecisionCandidateRow.used)
                .join(DecisionRow, DecisionRow.id == DecisionCandidateRow.decision_id)
                .where(DecisionRow.episode_id.in_(ids), DecisionCandidateRow.used.is_not(None))
            ):
                outcomes[episode_id][candidate_id] = 1.0 if used else 0.0
            feedback = s.scalars(select(FeedbackRow).where(FeedbackRow.episode_id.in_(ids)))
            missed = missed_by_episode(feedback, selections)
            return [
                FinalReward(
                    ReadPosition(int(row.commit_seq or 0), row.episode_id),
                    LearningItem(
                        row.episode_id,
                        tuple(selections.get(row.episode_id, ())),
                        reward_from_row(row),
                        outcomes[row.episode_id],
                        missed.get(row.episode_id, ()),
                    ),
                )
                for row in rows
            ]

    def count_final(self) -> int:
        with self._session() as s, s.begin():
            return int(s.scalar(select(func.count()).select_from(RewardRow).where(RewardRow.final.is_(True))) or 0)

    def decisions_served(self) -> dict[str, int]:
        """How many logged decisions each snapshot served, by :func:`snapshot_group`: a decision
        counts for the snapshot its model grew from (online updates are not each saved). Decisions
        that grew from no snapshot count under their configuration, a key no snapshot has."""
        stmt = select(DecisionRow.policy_version, func.count()).group_by(DecisionRow.policy_version)
        with self._session() as s, s.begin():
            per_version = [(str(version), int(n)) for version, n in s.execute(stmt)]
            index = SnapshotIndex(s.scalars(select(PolicySnapshotRow.version)).all())
        served: dict[str, int] = defaultdict(int)
        for version, n in per_version:
            served[index.group(version)] += n
        return dict(served)

    def lease_holder(self, policy: str) -> LeaseHolder | None:
        """Who holds ``policy``'s learner lease now (``None``: nobody)."""
        if not is_postgres(self._engine):
            with self._session() as s, s.begin():
                row = s.get(LearnerLeaseRow, policy)
                if row is None or row.expires_at <= utcnow():
                    return None
                return LeaseHolder(policy, f"learner {row.holder}", until=row.expires_at)
        try:
            with self._engine.connect() as conn:
                # the key the lease itself locks (schema and policy), read the way it computes it
                key = LearnerLease(self._engine, policy)._key(conn) & 0xFFFFFFFFFFFFFFFF
                found = conn.execute(_PG_HOLDER, {"hi": key >> 32, "lo": key & 0xFFFFFFFF}).first()
        except DBAPIError as exc:  # pg_locks unreadable: the holder is only context for a message
            logger.debug("cannot look up the learner lease holder of %s: %s", policy, exc)
            return LeaseHolder(policy, "another process")
        if found is None:
            return None
        pid, client, application, since = found
        where = " ".join(str(v) for v in (application, client) if v) or None
        return LeaseHolder(policy, f"server process {pid}", client=where, since=since)

    def active_version(self, policy: str) -> str | None:
        """The active snapshot's version, without its model bytes (cheap enough to poll)."""
        stmt = (
            select(PolicySnapshotRow.version)
            .where(PolicySnapshotRow.policy == policy, PolicySnapshotRow.status == "active")
            .order_by(PolicySnapshotRow.created_at.desc())
            .limit(1)
        )
        with self._session() as s, s.begin():
            return s.scalar(stmt)

    def active_stamp(self, policy: str) -> tuple[str, datetime] | None:
        """The active snapshot's version and when it was stored: after a restore, a new snapshot
        may reuse a version a process already loaded (the learner's names count rewards)."""
        stmt = (
            select(PolicySnapshotRow.version, PolicySnapshotRow.created_at)
            .where(PolicySnapshotRow.policy == policy, PolicySnapshotRow.status == "active")
            .order_by(PolicySnapshotRow.created_at.desc())
            .limit(1)
        )
        with self._session() as s, s.begin():
            found = s.execute(stmt).first()
            return (found[0], found[1]) if found is not None else None

    # ------------------------------------------------------------------ the one write

    def commit(
        self,
        snapshot: PolicySnapshot,
        *,
        previous: ReadPosition,
        position: ReadPosition,
        learned: int,
        read: int | None = None,
    ) -> PolicySnapshot:
        """Store ``snapshot`` and move the policy's position from ``previous`` to ``position`` in one
        transaction; returns the snapshot as stored (its status says whether it was made active).

        The snapshot becomes active unless an operator made another snapshot of the policy active
        since the learner's last commit (then it is stored as a candidate, to promote by hand).
        Raises :class:`LeaseLostError` when the stored position is no longer ``previous`` and, with
        ``read`` (the :func:`read_digest` of the rewards read since ``previous``), when the log's
        rewards between the two positions are no longer those: a log restored from a backup keeps
        the old position but not the rewards read since.
        """
        policy = snapshot.policy

        def work(s: Session) -> PolicySnapshot:
            return commit_checkpoint(s, snapshot, previous=previous, position=position, learned=learned, read=read)

        try:
            # retried whole on a deadlock, a serialisation failure or SQLite's busy lock, then
            # StorageContentionError: the guard makes a retry of a commit that never landed safe
            return Transactions(self._engine).write(work, what=f"the learner commit of policy {policy!r}")
        except IntegrityError as exc:
            raise LeaseLostError(f"another learner of policy {policy!r} committed first ({exc.orig})") from None


def _selections(s: Session, episode_ids: Sequence[str]) -> dict[str, list[Selection]]:
    decisions = s.scalars(
        select(DecisionRow).where(DecisionRow.episode_id.in_(episode_ids)).order_by(DecisionRow.seq)
    ).all()
    return assemble_selections(s, decisions)
