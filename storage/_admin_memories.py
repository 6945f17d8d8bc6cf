"""Read-only memory queries for the admin view: who has memories, one user's memories page by page
with their usage, and how the episodes that chose a memory went.

Usage comes from two places. The registry's counters (``times_chosen``: decisions that injected
the memory; ``times_used``: of those, the ones whose episode reported it used) cost nothing to read.
How the episodes that chose it ended (corrected, mean reward) is read from the log for the memories
on one page only, through the ``(user_id, candidate_id)`` index of the offered candidates, so a
page costs the same however long the log grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Select, case, func, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._memory_records import MemoryRecord, MemoryStatus
from memabra._records import CandidateKind
from memabra.storage._log import EpisodeLog
from memabra.storage._memory_rows import memory_record
from memabra.storage._models import DecisionCandidateRow, DecisionRow, EpisodeRow, RegistryRow

__all__ = [
    "MAX_MEMORY_PAGE",
    "AdminMemories",
    "MemoryOutcomes",
    "MemoryPage",
    "MemoryUsage",
    "MemoryUser",
    "MemorySort",
    "MemoryUse",
]

_MEMORY = CandidateKind.MEMORY.value
MAX_MEMORY_PAGE = 500


class MemoryUsage(StrEnum):
    """How often a memory was put to work: the filter of the memories page."""

    NEVER_USED = "never-used"  # never chosen, so never used either
    CHOSEN_UNUSED = "chosen-unused"  # injected at least once, never reported used
    USED = "used"


class MemorySort(StrEnum):
    NEWEST = "newest"
    OLDEST = "oldest"
    MOST_CHOSEN = "most-chosen"
    MOST_USED = "most-used"
    LAST_CHOSEN = "last-chosen"


@dataclass(frozen=True, slots=True)
class MemoryUser:
    """A user's memories at a glance: how many, how many retired, and how many never helped."""

    user_id: str
    memories: int
    retired: int
    never_used: int
    chosen_unused: int


@dataclass(frozen=True, slots=True)
class MemoryOutcomes:
    """How the decisions that chose one memory went: ``corrected`` counts those whose episode was
    corrected, ``mean_reward`` is over those with a reward (``None``: none yet)."""

    chosen: int
    corrected: int
    rewarded: int
    mean_reward: float | None


@dataclass(frozen=True, slots=True)
class MemoryPage:
    """One page of a user's memories, with each one's outcomes (by memory id)."""

    items: tuple[MemoryRecord, ...]
    outcomes: dict[str, MemoryOutcomes]
    total: int
    offset: int
    limit: int

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None

    @property
    def previous_offset(self) -> int | None:
        return max(0, self.offset - self.limit) if self.offset > 0 else None


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """One decision that chose a memory, for the memory's page."""

    episode_id: str
    decision_id: str
    created_at: datetime
    used: bool | None
    corrected: bool
    reward: float | None


class AdminMemories:
    """Memory listings over an :class:`EpisodeLog`'s registry. Never writes."""

    def __init__(self, log: EpisodeLog) -> None:
        self.log = log

    def users(self, *, search: str | None = None, limit: int = 200) -> list[MemoryUser]:
        """Users with memories (whose id contains ``search``), most memories first."""
        r = RegistryRow
        never = case((r.times_chosen == 0, 1), else_=0)
        unused = case(((r.times_chosen > 0) & (r.times_used == 0), 1), else_=0)
        retired = case((r.retired_at.is_not(None), 1), else_=0)
        stmt = (
            select(r.owner, func.count(), func.sum(retired), func.sum(never), func.sum(unused))
            .where(r.kind == _MEMORY, r.deleted_at.is_(None))
            .group_by(r.owner)
            .order_by(func.count().desc(), r.owner)
            .limit(limit)
        )
        if search:
            stmt = stmt.where(func.lower(r.owner).contains(search.lower(), autoescape=True))
        with Session(self.log.engine) as s:
            rows = s.execute(stmt).all()
        return [MemoryUser(str(u), int(n), int(ret or 0), int(nv or 0), int(cu or 0)) for u, n, ret, nv, cu in rows]

    def memories(
        self,
        user_id: str,
        *,
        search: str | None = None,
        status: MemoryStatus | None = None,
        usage: MemoryUsage | None = None,
        sort: MemorySort = MemorySort.NEWEST,
        offset: int = 0,
        limit: int = 50,
    ) -> MemoryPage:
        """One page of ``user_id``'s memories: text or id containing ``search`` (any case),
        of ``status`` and ``usage`` when given, in ``sort`` order."""
        if not user_id:
            raise InvalidRecordError("user: memories are listed per user; give a user id")
        if not 1 <= limit <= MAX_MEMORY_PAGE:
            raise InvalidRecordError(f"limit must be between 1 and {MAX_MEMORY_PAGE}, got {limit}")
        if offset < 0:
            raise InvalidRecordError(f"offset must not be negative, got {offset}")
        r = RegistryRow
        stmt: Select[Any] = select(r).where(r.kind == _MEMORY, r.owner == user_id, r.deleted_at.is_(None))
        if search:
            needle = search.lower()
            stmt = stmt.where(
                func.lower(r.text).contains(needle, autoescape=True)
                | func.lower(r.id).contains(needle, autoescape=True)
            )
        if status is MemoryStatus.ACTIVE:
            stmt = stmt.where(r.retired_at.is_(None))
        elif status is MemoryStatus.RETIRED:
            stmt = stmt.where(r.retired_at.is_not(None))
        if usage is MemoryUsage.NEVER_USED:
            stmt = stmt.where(r.times_chosen == 0)
        elif usage is MemoryUsage.CHOSEN_UNUSED:
            stmt = stmt.where(r.times_chosen > 0, r.times_used == 0)
        elif usage is MemoryUsage.USED:
            stmt = stmt.where(r.times_used > 0)
        order = {
            MemorySort.NEWEST: (r.created_at.desc(), r.id.desc()),
            MemorySort.OLDEST: (r.created_at.asc(), r.id.asc()),
            MemorySort.MOST_CHOSEN: (r.times_chosen.desc(), r.created_at.desc(), r.id.desc()),
            MemorySort.MOST_USED: (r.times_used.desc(), r.created_at.desc(), r.id.desc()),
            MemorySort.LAST_CHOSEN: (r.last_chosen_at.is_(None), r.last_chosen_at.desc(), r.id.desc()),
        }[sort]
        count = select(func.count()).select_from(stmt.subquery())
        with Session(self.log.engine) as s:
            total = int(s.scalar(count) or 0)
            rows = s.scalars(stmt.order_by(*order).offset(offset).limit(limit)).all()
            items = tuple(memory_record(row) for row in rows)
            outcomes = _outcomes(s, user_id, [m.id for m in items])
        return MemoryPage(items, outcomes, total, offset, limit)

    def uses(self, user_id: str, memory_id: str, *, limit: int = 20) -> list[MemoryUse]:
        """The latest ``limit`` decisions that chose the memory, newest first."""
        c, d, e = DecisionCandidateRow, DecisionRow, EpisodeRow
        stmt = (
            select(d.episode_id, d.id, d.created_at, c.used, e.corrected, e.reward_total)
            .select_from(c)
            .join(d, d.id == c.decision_id)
            .join(e, e.id == d.episode_id)
            .where(c.user_id == user_id, c.candidate_id == memory_id, c.kind == _MEMORY, c.chosen.is_(True))
            .order_by(d.created_at.desc(), d.id.desc())
            .limit(limit)
        )
        with Session(self.log.engine) as s:
            rows = s.execute(stmt).all()
        return [
            MemoryUse(str(ep), str(dec), at, None if used is None else bool(used), bool(corr), reward)
            for ep, dec, at, used, corr, reward in rows
        ]


def _outcomes(s: Session, user_id: str, memory_ids: list[str]) -> dict[str, MemoryOutcomes]:
    if not memory_ids:
        return {}
    c, d, e = DecisionCandidateRow, DecisionRow, EpisodeRow
    stmt = (
        select(
            c.candidate_id,
            func.count(),
            func.sum(case((e.corrected.is_(True), 1), else_=0)),
            func.count(e.reward_total),
            func.avg(e.reward_total),
        )
        .select_from(c)
        .join(d, d.id == c.decision_id)
        .join(e, e.id == d.episode_id)
        .where(c.user_id == user_id, c.candidate_id.in_(memory_ids), c.kind == _MEMORY, c.chosen.is_(True))
        .group_by(c.candidate_id)
    )
    return {
        str(mid): MemoryOutcomes(int(n), int(corr or 0), int(rewarded), None if mean is None else float(mean))
        for mid, n, corr, rewarded, mean in s.execute(stmt).all()
    }
