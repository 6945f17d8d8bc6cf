"""ORM models of memory history and stored embeddings (migration 0005). They never leave
``memabra.storage``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from memabra.storage._models import Base, UTCDateTime

__all__ = ["EmbeddingRow", "MemoryHistoryRow", "MemoryPoolRow"]


class MemoryHistoryRow(Base):
    """One change to a memory: created, updated, refreshed, retired (superseded) or restored.

    ``episode_id`` names the turn that caused it; it is not a foreign key, so a history outlives
    pruned episodes. Forgetting a memory deletes its history with it.
    """

    __tablename__ = "memory_history"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    memory_id: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(20))
    old_text: Mapped[str | None] = mapped_column(Text)
    new_text: Mapped[str | None] = mapped_column(Text)
    episode_id: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(String(200), default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (Index(None, "owner", "memory_id", "at"),)


class EmbeddingRow(Base):
    """A text's embedding under one encoder, content-addressed so every process (and every user
    with the same skill or tool text) reuses it."""

    __tablename__ = "embeddings"

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    text_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class MemoryPoolRow(Base):
    """A user's memory pool generation, bumped by every write to it, so a process can tell in one
    primary-key read whether the recall index it holds for the user is still current."""

    __tablename__ = "memory_pools"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    generation: Mapped[int] = mapped_column(Integer)
