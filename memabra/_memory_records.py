"""Records of memory management: a memory as people see it, and one change in its history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from memabra._errors import InvalidRecordError

__all__ = ["MemoryAction", "MemoryChange", "MemoryRecord", "MemoryStatus"]


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    RETIRED = "retired"


class MemoryAction(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    REFRESHED = "refreshed"
    RETIRED = "retired"
    RESTORED = "restored"


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory of one user. ``status`` is ``retired`` once a newer fact on the same subject
    replaced it (``superseded_by`` names that fact): kept in history, never recalled.
    ``last_used_at`` is when the router last injected it."""

    id: str
    user_id: str
    text: str
    status: MemoryStatus
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime | None = None
    superseded_by: str | None = None
    source: str = "user"
    times_chosen: int = 0
    times_used: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", MemoryStatus(self.status))
        if not self.id or not self.user_id:
            raise InvalidRecordError("a memory needs an id and a user_id")


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """What changed in a memory, when, and from which episode (``None``: not from a turn)."""

    memory_id: str
    user_id: str
    action: MemoryAction
    at: datetime
    old_text: str | None = None
    new_text: str | None = None
    episode_id: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", MemoryAction(self.action))
