"""ORM rows of the production loop (schema revisions 0004, 0015): the learner's checkpoint and lease, and
the counter numbering final rewards on SQLite."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from memabra.storage._models import Base, UTCDateTime

__all__ = ["LearnerLeaseRow", "LearnerStateRow", "RewardCommitCounterRow"]


class LearnerStateRow(Base):
    """Where a policy's learner stands: the snapshot holding its model and the last reward it read
    (``position_seq``, ``position_episode``), written together in one transaction."""

    __tablename__ = "learner_state"

    policy: Mapped[str] = mapped_column(String(100), primary_key=True)
    snapshot_version: Mapped[str | None] = mapped_column(String(100))
    position_seq: Mapped[int] = mapped_column(BigInteger)
    position_episode: Mapped[str] = mapped_column(String(32))
    learned: Mapped[int] = mapped_column(BigInteger)
    # The version the learner last made active; while it is still the active one, the learner's
    # next model replaces it (otherwise an operator promoted another and the learner only proposes).
    published: Mapped[str | None] = mapped_column(String(100))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class LearnerLeaseRow(Base):
    """SQLite's learner lease (PostgreSQL uses an advisory lock): held until ``expires_at``."""

    __tablename__ = "learner_leases"

    policy: Mapped[str] = mapped_column(String(100), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class RewardCommitCounterRow(Base):
    """The last number SQLite's triggers gave a reward made final (revision 0015): one row that only
    grows, so a deleted reward's number is never given again. Unused on PostgreSQL, whose trigger
    numbers by transaction id."""

    __tablename__ = "reward_commit_counter"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last_seq: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)
