"""MemPO labels in the admin view's episode list: the episodes one of whose decisions a scorer
graded worse than offering every candidate memory (reward -1), and which episodes of a page are such.

The filter is one more WHERE condition of the listing (:mod:`~memabra.storage._episode_listing`),
so it combines with the others and pages on the same ``(created_at, id)`` keyset. Two shapes of it
reach the same rows, each fast in its own regime:

* ``EXISTS``, correlated to the episode (like the kind and failed-turn filters): the page walks
  the episodes' ``(created_at, id)`` index newest first and probes each one's decisions
  (``decisions.episode_id``) and their labels (``memory_scores``' primary key, scorer included).
  Quick when many episodes match; when few do, the walk (and the capped count) reads the log.
* ``IN`` the labels graded -1: the labels are read once (from the index on ``memory_scores (reward,
  scorer, decision_id)``), each finds its decision and episode by primary key, and the page sorts what
  matched. Its cost grows with the labels, not the log.

PostgreSQL's planner chooses between the two by its statistics (it plans both as a semi-join), so
it gets ``EXISTS``. SQLite keeps no statistics: it gets ``IN`` when the -1 labels are few against
the log (``W² <= COUNT_CAP * N``, ``N`` read from the episodes' largest rowid, ``W`` counted no
further than that bound), else ``EXISTS`` (docs/storage.md has the timings of both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, func, literal_column, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._records import Page
from memabra.storage._episode_listing import COUNT_CAP, list_episodes, list_lowest_rewards
from memabra.storage._episodes import EpisodeFilter
from memabra.storage._log import EpisodeLog
from memabra.storage._models import DecisionRow, EpisodeRow, MemoryScoreRow
from memabra.storage._rows import clean_text

__all__ = ["WORSE", "MemPOFilter", "MemPOListing", "mempo_condition", "worse_episodes", "worse_scorers"]

WORSE = -1
"""The reward MemPO gives a decision whose selected memories predict the gold answer worse than
every candidate memory did (``p_selected < p_all - eps``)."""

# the longest scorer name the log stores: memory_scores.scorer is VARCHAR(200)
_MAX_SCORER = 200
# below this many -1 labels SQLite always reads them first: a few thousand lookups cost nothing
_FEW_LABELS = 1_000
# the scorer field's suggestions: a deployment runs one or two models; past this many the field
# still takes any name typed in
_SUGGESTED_SCORERS = 20


@dataclass(frozen=True, slots=True)
class MemPOFilter:
    """Keep the episodes with a decision MemPO graded -1: by ``scorer`` (``None``: by any scorer)."""

    scorer: str | None = None

    def __post_init__(self) -> None:
        if self.scorer is not None:
            if not self.scorer.strip():
                raise InvalidRecordError("scorer must not be blank (leave it out for every scorer)")
            if len(self.scorer) > _MAX_SCORER:
                raise InvalidRecordError(f"scorer is longer than {_MAX_SCORER} characters: no scorer is named so")


def _worse_labels(flt: MemPOFilter) -> list[Any]:
    m = MemoryScoreRow
    where = [m.reward == WORSE]
    if flt.scorer is not None:
        where.append(m.scorer == clean_text(flt.scorer))
    return where


def mempo_condition(s: Session, flt: MemPOFilter) -> Any:
    """The WHERE condition on :class:`EpisodeRow` of ``flt``, in the shape that reads least (the
    module's docstring says how it is chosen)."""
    d, m = DecisionRow, MemoryScoreRow
    if _few_labels(s, flt):
        labelled = select(d.episode_id).join(m, m.decision_id == d.id).where(*_worse_labels(flt))
        return EpisodeRow.id.in_(labelled)
    return exists().where(d.episode_id == EpisodeRow.id, m.decision_id == d.id, *_worse_labels(flt))


def _few_labels(s: Session, flt: MemPOFilter) -> bool:
    """Whether reading the -1 labels first reads less than walking the episodes (SQLite only)."""
    if s.get_bind().dialect.name != "sqlite":
        return False
    # the largest rowid: the episodes ever logged, at once (a deletion leaves it as it was)
    episodes = int(s.scalar(select(func.max(literal_column("rowid"))).select_from(EpisodeRow)) or 0)
    bound = max(_FEW_LABELS, math.isqrt(COUNT_CAP * episodes))
    labels = select(MemoryScoreRow.decision_id).where(*_worse_labels(flt)).limit(bound + 1).subquery()
    return int(s.scalar(select(func.count()).select_from(labels)) or 0) <= bound


def worse_scorers(s: Session, limit: int = _SUGGESTED_SCORERS) -> list[str]:
    """The scorers that graded some decision -1, by name (at most ``limit``). One index seek per
    name (the next name after the last on ``(reward, scorer, ...)``), so it costs the same on a
    log of a billion labels: neither server skips through an index on its own for a DISTINCT."""
    m, names = MemoryScoreRow, list[str]()
    while len(names) < limit:
        after = [m.scorer > names[-1]] if names else []
        name = s.scalar(select(func.min(m.scorer)).where(m.reward == WORSE, *after))
        if name is None:
            break
        names.append(str(name))
    return names


def worse_episodes(s: Session, episode_ids: Sequence[str], scorer: str | None = None) -> dict[str, tuple[str, ...]]:
    """Of ``episode_ids`` (a page's), those with a decision graded -1, each with the scorers that
    graded one so (``scorer``'s only, when given), by name."""
    if not episode_ids:
        return {}
    d, m = DecisionRow, MemoryScoreRow
    stmt = (
        select(d.episode_id, m.scorer)
        .join(m, m.decision_id == d.id)
        .where(d.episode_id.in_(list(episode_ids)), *_worse_labels(MemPOFilter(scorer)))
        .distinct()
    )
    found: dict[str, set[str]] = {}
    for episode_id, name in s.execute(stmt):
        found.setdefault(episode_id, set()).add(name)
    return {episode_id: tuple(sorted(names)) for episode_id, names in found.items()}


class MemPOListing:
    """The episode list with the MemPO filter, for the admin view. Never writes."""

    def __init__(self, log: EpisodeLog) -> None:
        self.log = log

    def newest(self, filters: EpisodeFilter | None, mempo: MemPOFilter | None, cursor: str | None, limit: int) -> Page:
        """:func:`~memabra.storage._episode_listing.list_episodes` (counted), of the episodes ``mempo`` keeps."""
        also = self._also(mempo)
        return list_episodes(self.log.transactions, filters, cursor, limit, count=True, also=also)

    def lowest_rewards(self, filters: EpisodeFilter | None, mempo: MemPOFilter | None, offset: int, limit: int) -> Page:
        """:func:`~memabra.storage._episode_listing.list_lowest_rewards`, of the episodes ``mempo`` keeps."""
        also = self._also(mempo)
        with self.log.transactions.read() as s:
            return list_lowest_rewards(s, filters, offset, limit, also=also)

    def worse(self, episode_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """:func:`worse_episodes` of a page."""
        with self.log.transactions.read() as s:
            return worse_episodes(s, episode_ids)

    def scorers(self) -> list[str]:
        """:func:`worse_scorers`: the names the filter's scorer field suggests."""
        with self.log.transactions.read() as s:
            return worse_scorers(s)

    def _also(self, mempo: MemPOFilter | None) -> list[Any]:
        if mempo is None:
            return []
        # a choice of plan, not of rows: read apart from the page, it cannot change what matches
        with self.log.transactions.read() as s:
            return [mempo_condition(s, mempo)]
