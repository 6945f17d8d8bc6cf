"""Records of memory management: a memory as people see it, and one change in its history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from memabra._errors import InvalidRecordError

__all__ = ["MemoryAction", "MemoryChange", "MemoryRecord", "MemoryStatus", "storable_user"]


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


def storable_user(user_id: str) -> str:
    """``user_id`` if the log stores it as given; an id the log would store as another (a NUL byte
    dropped, a lone surrogate replaced) is an :class:`~memabra.InvalidRecordError` naming why."""
    if not isinstance(user_id, str) or not user_id:
        raise InvalidRecordError("memories are scoped by user: give a non-empty user_id")
    from memabra.storage import clean_text  # the log's own cleaning (storage imports this module)

    if clean_text(user_id) != user_id:
        what = "a NUL byte" if "\x00" in user_id else "a lone surrogate (not valid Unicode)"
        raise InvalidRecordError(
            f"the user id {user_id!r} holds {what}, which the log cannot store: it would be stored and read as "
            f"user {clean_text(user_id)!r}, another user's memories; clean such ids in your application"
        )
    return user_id
