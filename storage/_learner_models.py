"""ORM rows of the production loop (schema revision 0004): the learner's checkpoint and lease."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from memabra.storage._models import Base, UTCDateTime

__all__ = ["LearnerLeaseRow", "LearnerStateRow"]


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
