"""Which learners retention waits for, and dropping a dead learner's claim.

Every policy learned from a log keeps its own read position in ``learner_state`` (a point in the
commit order of final rewards, :mod:`memabra.storage._learner`). ``rewards.learned_at`` only says
that *some* learner has read a reward (the first to commit); when two policies learn from one log,
the second may not have read it yet. Retention (:mod:`memabra.storage._retention`) therefore
keeps a final reward while any checkpoint in ``learner_state`` stands before it: a learner counts
from its first commit until its checkpoint is deleted with :func:`forget_learner`
(``memabra policies forget-learner``), which is how a policy no longer learned stops holding
retention back. Its snapshots stay.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, text
from sqlalchemy.orm import Session

from memabra._errors import MemabraError
from memabra._records import utcnow
from memabra.storage._learner_lease import lease_key
from memabra.storage._learner_models import LearnerLeaseRow, LearnerStateRow
from memabra.storage._models import RewardRow
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = ["LearnerBusyError", "RetentionHold", "behind_a_learner", "forget_learner", "retention_holds"]

logger = logging.getLogger("memabra")


class LearnerBusyError(MemabraError, RuntimeError):
    """The learner whose checkpoint was to be forgotten holds its lease: it is alive."""


@dataclass(frozen=True, slots=True)
class RetentionHold:
    """A learner checkpoint retention waits for: its policy, its read position, how many final
    rewards still in the log stand after it (kept for it), and when it last committed."""

    policy: str
    position_seq: int
    position_episode: str
    behind: int
    updated_at: datetime


def behind_a_learner() -> ColumnElement[bool]:
    """True for a reward row that some learner checkpoint has not read past (correlated to
    ``rewards``)."""
    state = LearnerStateRow
    return (
        select(state.policy)
        .where(
            or_(
                RewardRow.commit_seq > state.position_seq,
                and_(RewardRow.commit_seq == state.position_seq, RewardRow.episode_id > state.position_episode),
            )
        )
        .correlate(RewardRow)
        .exists()
    )


def retention_holds(tx: Transactions) -> list[RetentionHold]:
    """Every learner checkpoint of the log, oldest position first, with the final rewards it has
    yet to read (what retention keeps for it)."""
    with tx.read() as s:
        states = s.execute(
            select(
                LearnerStateRow.policy,
                LearnerStateRow.position_seq,
                LearnerStateRow.position_episode,
                LearnerStateRow.updated_at,
            ).order_by(LearnerStateRow.position_seq, LearnerStateRow.position_episode, LearnerStateRow.policy)
        ).all()
        holds = []
        for policy, seq, episode, updated_at in states:
            behind = s.scalar(
                select(func.count())
                .select_from(RewardRow)
                .where(
                    RewardRow.final.is_(True),
                    or_(RewardRow.commit_seq > seq, and_(RewardRow.commit_seq == seq, RewardRow.episode_id > episode)),
                )
            )
            holds.append(RetentionHold(policy, int(seq), episode, int(behind or 0), updated_at))
        return holds


def forget_learner(tx: Transactions, policy: str) -> bool:
    """Delete ``policy``'s learner checkpoint, so retention no longer keeps rewards for it; its
    snapshots stay (an active one keeps serving). ``False`` when it had none. Raises
    :class:`LearnerBusyError` while a learner holds the policy's lease: a live learner would only
    start again from the beginning of the log."""
    policy = clean_text(policy)

    def work(s: Session) -> bool:
        _refuse_if_leased(s, policy)
        gone = s.execute(delete(LearnerStateRow).where(LearnerStateRow.policy == policy))
        return bool(getattr(gone, "rowcount", 0))

    forgotten = tx.write(work, what="forget_learner")
    if forgotten:
        logger.info("forgot the learner checkpoint of policy %s: retention no longer waits for it", policy)
    return forgotten


def _refuse_if_leased(s: Session, policy: str) -> None:
    busy = f"a learner holds the learner lease of policy {policy!r}; stop it first, nothing was forgotten"
    if s.get_bind().dialect.name == "postgresql":
        # the transaction-level lock conflicts with a holder's session lock and, taken, keeps a
        # learner from starting until the checkpoint is gone
        conn = s.connection()
        if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": lease_key(conn, policy)}).scalar_one():
            raise LearnerBusyError(busy)
        return
    lease = s.get(LearnerLeaseRow, policy)
    if lease is not None and lease.expires_at > utcnow():
        raise LearnerBusyError(busy)
