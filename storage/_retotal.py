"""Re-totalling stored rewards under new weights, a page of episodes at a time.

The components are the record: a re-total rewrites each reward's total, its Hm where a MemPO label
replaces it, the weights and version it was totalled under, and its episode's copy of the total.
What the new total is comes from the caller's ``rescore`` (the reward's rules); storage decides
nothing about it.

Each page (:data:`RETOTAL_PAGE` episodes, in id order) is read, rescored and written in one write
transaction with its episode rows locked (``FOR UPDATE`` on PostgreSQL; SQLite's write transaction
already excludes other writers). Every writer of a reward locks its episode first, so feedback
that arrives meanwhile waits for the page and then replaces the reward whole: a stored total
always agrees with its row's components and weights. Memory holds one page, whatever the log's size.

A run that stops midway (killed, a row that no longer reads as a reward) leaves the pages it
committed re-totalled and the others as they were, each row consistent and recording the weights
it was totalled under; re-totalling is a pure function of the stored components, so running it
again finishes the job.

A learner keeps reading and committing meanwhile. What it committed before a page is counted there
(:attr:`Retotalled.learned`: its model holds those rewards' old totals); what it read before a page
and would commit after is refused at its commit (the totals are in the fingerprint of what it read,
:func:`~memabra.storage._learner_commit.read_digest`), and it learns those rewards again at the new
totals.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from memabra._errors import ConfigError, InvalidRecordError
from memabra._records import RewardBreakdown, RewardWeights
from memabra.storage import _convert as cv
from memabra.storage._models import DecisionRow, EpisodeRow, MemoryScoreRow, RewardRow, table_of
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = [
    "RETOTAL_PAGE",
    "Rescorer",
    "RetotalMethods",
    "Retotalled",
    "LABEL_PAGE",
    "count_learned",
    "label_scorers",
    "memory_label_pages",
    "memory_labels",
    "retotal_rewards",
    "stored_rewards",
    "write_rewards",
]

logger = logging.getLogger("memabra")

RETOTAL_PAGE = 1000
"""Episodes re-totalled per transaction: short enough that feedback waiting on a page's locks is
held up for a moment, large enough that the per-transaction cost is small against the page's work."""

LABEL_PAGE = 5000
"""Episodes' MemPO labels read per round trip by :func:`memory_label_pages`: about 150 bytes each
in the page's dict, so a page stays under a megabyte whatever the log's size."""

Rescorer = Callable[[RewardBreakdown, float | None], RewardBreakdown]
"""The reward's rules for a re-total: a stored reward and its episode's MemPO label (None when it
has none, or labels were not asked for) to the reward under the new weights."""


@dataclass(frozen=True, slots=True)
class Retotalled:
    """What a re-total did: ``rewards`` re-totalled, ``labelled`` of them given Hm from a MemPO label,
    ``learned`` of them already learned by a learner when their page was re-totalled (its model holds
    their old totals)."""

    rewards: int
    labelled: int
    learned: int = 0


@dataclass(frozen=True, slots=True)
class _Page:
    rewards: int
    labelled: int
    learned: int
    last: str | None  # the page's last episode id: the next page starts after it


def retotal_rewards(
    tx: Transactions,
    rescore: Rescorer,
    *,
    since: datetime | None,
    version: str | None,
    labels: bool,
    scorer: str | None = None,
) -> Retotalled:
    """Re-total every stored reward (of episodes created since ``since``) with ``rescore``, a page
    per transaction (see the module docstring for what a run that stops midway leaves).
    ``version``: the reward version stored with the new totals (else the one ``rescore`` gives);
    ``labels``: hand ``rescore`` each episode's MemPO label (only ``scorer``'s labels, when given)."""
    rewards = labelled = learned = 0
    after: str | None = None
    while True:
        work = partial(
            _retotal_page,
            rescore=rescore,
            after=after,
            since=since,
            version=version,
            labels=labels,
            scorer=scorer,
            lock=tx.is_postgres,
        )
        page = tx.write(work, what="retotal_rewards")
        if page.last is None:
            return Retotalled(rewards, labelled, learned)
        rewards, labelled, learned = rewards + page.rewards, labelled + page.labelled, learned + page.learned
        after = page.last
        logger.debug("re-totalled %d rewards so far (through episode %s)", rewards, after)


def _retotal_page(
    s: Session,
    *,
    rescore: Rescorer,
    after: str | None,
    since: datetime | None,
    version: str | None,
    labels: bool,
    scorer: str | None,
    lock: bool,
) -> _Page:
    ids_stmt = select(EpisodeRow.id).join(RewardRow, RewardRow.episode_id == EpisodeRow.id)
    if after is not None:
        ids_stmt = ids_stmt.where(EpisodeRow.id > after)
    if since is not None:
        ids_stmt = ids_stmt.where(EpisodeRow.created_at >= since)
    ids_stmt = ids_stmt.order_by(EpisodeRow.id).limit(RETOTAL_PAGE)
    if lock:
        # The episode row is the lock every reward writer takes first (add_feedback, rescore,
        # put_reward): taking it here, in id order, makes them wait for this page.
        ids_stmt = ids_stmt.with_for_update(of=EpisodeRow)
    ids = list(s.scalars(ids_stmt))
    if not ids:
        return _Page(0, 0, 0, None)
    # Read after the locks are held, so a reward replaced while this page waited is read as replaced.
    stored = list(s.scalars(select(RewardRow).where(RewardRow.episode_id.in_(ids)).order_by(RewardRow.episode_id)))
    page_labels = _labels(s, ids, scorer) if labels else {}
    updates = [(row.episode_id, rescore(cv.reward_from_row(row), page_labels.get(row.episode_id))) for row in stored]
    _write_totals(s, updates, version)
    # Counted here, not before the run: a learner keeps committing while the run works through the
    # log, and what it committed before this page was learned under the old totals.
    learned = sum(1 for row in stored if row.learned_at is not None)
    labelled = sum(1 for episode_id, _ in updates if episode_id in page_labels)
    return _Page(len(updates), labelled, learned, ids[-1])


def _labels(s: Session, episode_ids: list[str] | None, scorer: str | None = None) -> dict[str, float]:
    """MemPO's label (+1 / -1) of each episode (of ``episode_ids``, else all) whose decisions have
    one (one of ``scorer``'s, when given): the mean of its decisions' labels where it made several
    (Hm is the episode's, and no one decision's label stands for the others)."""
    stmt = (
        select(DecisionRow.episode_id, func.avg(MemoryScoreRow.reward))
        .join(MemoryScoreRow, MemoryScoreRow.decision_id == DecisionRow.id)
        .group_by(DecisionRow.episode_id)
    )
    if episode_ids is not None:
        stmt = stmt.where(DecisionRow.episode_id.in_(episode_ids))
    if scorer is not None:
        stmt = stmt.where(MemoryScoreRow.scorer == clean_text(scorer))
    return {episode_id: float(reward) for episode_id, reward in s.execute(stmt)}


def _write_totals(s: Session, updates: Iterable[tuple[str, RewardBreakdown]], version: str | None) -> int:
    reward_params: list[dict[str, Any]] = []
    episode_params: list[dict[str, Any]] = []
    for episode_id, breakdown in sorted(updates, key=lambda u: u[0]):
        reward_params.append(
            {
                "b_id": episode_id,
                "b_total": breakdown.total,
                "b_hm": breakdown.components.hm,
                "b_weights": breakdown.weights.as_dict(),
                "b_version": version or breakdown.version,
            }
        )
        episode_params.append({"b_id": episode_id, "b_total": breakdown.total})
    if not reward_params:
        return 0
    rt, et = table_of(RewardRow), table_of(EpisodeRow)
    s.execute(
        update(rt)
        .where(rt.c.episode_id == bindparam("b_id"))
        .values(
            total=bindparam("b_total"),
            hm=bindparam("b_hm"),
            weights=bindparam("b_weights"),
            reward_version=bindparam("b_version"),
        ),
        reward_params,
    )
    s.execute(update(et).where(et.c.id == bindparam("b_id")).values(reward_total=bindparam("b_total")), episode_params)
    return len(reward_params)


def label_scorers(tx: Transactions) -> dict[str, int]:
    """How many decisions each scorer's MemPO labels cover, by scorer name (a decision two scorers
    labelled counts for each)."""
    stmt = select(MemoryScoreRow.scorer, func.count()).group_by(MemoryScoreRow.scorer).order_by(MemoryScoreRow.scorer)
    with tx.read() as s:
        return {name: int(count) for name, count in s.execute(stmt)}


def count_learned(tx: Transactions, since: datetime | None) -> int:
    """How many stored rewards (of episodes created since ``since``) a learner has learned."""
    stmt = (
        select(func.count())
        .select_from(RewardRow)
        .join(EpisodeRow, EpisodeRow.id == RewardRow.episode_id)
        .where(RewardRow.learned_at.is_not(None))
    )
    if since is not None:
        stmt = stmt.where(EpisodeRow.created_at >= since)
    with tx.read() as s:
        return int(s.scalar(stmt) or 0)


def memory_labels(tx: Transactions, scorer: str | None = None) -> dict[str, float]:
    """Every episode's MemPO label, by episode id (see :func:`_labels`), read a page at a time."""
    labels: dict[str, float] = {}
    for page in memory_label_pages(tx, LABEL_PAGE, scorer):
        labels.update(page)
    return labels


def memory_label_pages(tx: Transactions, page_size: int, scorer: str | None = None) -> Iterator[dict[str, float]]:
    """Episodes' MemPO labels (see :func:`_labels`), ``page_size`` episodes a page in episode-id
    order, each page read in its own short transaction: reading them all at once held the whole
    result in the driver and the dict together (psycopg fetches a result whole)."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidRecordError(f"page_size must be a positive integer, got {page_size!r}")
    if scorer is None:
        stored = label_scorers(tx)
        if len(stored) > 1:  # an episode's mean would mix two models' verdicts
            listed = ", ".join(f"{name} ({count} decisions)" for name, count in stored.items())
            raise ConfigError(
                f"MemPO labels of {len(stored)} scorers are stored ({listed}): pass scorer= to read one's"
            )
    return _label_pages(tx, page_size, scorer)


def _label_pages(tx: Transactions, page_size: int, scorer: str | None) -> Iterator[dict[str, float]]:
    after: str | None = None
    while True:
        stmt = (
            select(DecisionRow.episode_id, func.avg(MemoryScoreRow.reward))
            .join(MemoryScoreRow, MemoryScoreRow.decision_id == DecisionRow.id)
            .group_by(DecisionRow.episode_id)
            .order_by(DecisionRow.episode_id)
            .limit(page_size)
        )
        if after is not None:
            stmt = stmt.where(DecisionRow.episode_id > after)
        if scorer is not None:
            stmt = stmt.where(MemoryScoreRow.scorer == clean_text(scorer))
        with tx.read() as s:
            page = {episode_id: float(reward) for episode_id, reward in s.execute(stmt)}
        if not page:
            return
        yield page
        after = next(reversed(page))  # the page's last id in the database's order, not Python's


_UNBOUNDED = (
    "{name} is deprecated: it holds every stored reward in memory and writes apart from the read, so "
    "feedback arriving in between is overwritten with a stale total; use EpisodeLog.retotal_rewards"
)


def stored_rewards(tx: Transactions, since: datetime | None) -> list[tuple[str, RewardBreakdown]]:
    """Deprecated: every stored reward (of episodes created since ``since``) as (episode id, breakdown)."""
    warnings.warn(_UNBOUNDED.format(name="EpisodeLog.stored_rewards"), DeprecationWarning, stacklevel=3)
    stmt = select(RewardRow).join(EpisodeRow, EpisodeRow.id == RewardRow.episode_id).order_by(RewardRow.episode_id)
    if since is not None:
        stmt = stmt.where(EpisodeRow.created_at >= since)
    with tx.read() as s:
        return [(r.episode_id, cv.reward_from_row(r)) for r in s.scalars(stmt)]


def write_rewards(
    tx: Transactions, updates: Mapping[str, RewardBreakdown], weights: RewardWeights, version: str | None
) -> int:
    """Deprecated: replace the totals (and Hm, weights, version) of stored rewards; returns how many."""
    warnings.warn(_UNBOUNDED.format(name="EpisodeLog.write_rewards"), DeprecationWarning, stacklevel=3)
    if not updates:
        return 0
    reweighted = [(episode_id, breakdown.reweighted(weights)) for episode_id, breakdown in updates.items()]
    return tx.write(lambda s: _write_totals(s, reweighted, version), what="write_rewards")


class RetotalMethods:
    """Mixed into :class:`~memabra.storage.EpisodeLog`, which supplies the transactions."""

    _tx: Transactions

    def retotal_rewards(
        self,
        rescore: Rescorer,
        *,
        since: datetime | None = None,
        version: str | None = None,
        labels: bool = False,
        scorer: str | None = None,
    ) -> Retotalled:
        """Re-total stored rewards with ``rescore``, a locked page per transaction (see ``_retotal``);
        with ``labels``, only ``scorer``'s MemPO labels when it is given."""
        return retotal_rewards(self._tx, rescore, since=since, version=version, labels=labels, scorer=scorer)

    def memory_label_scorers(self) -> dict[str, int]:
        """The scorers MemPO labels are stored under, each with how many decisions it labelled."""
        return label_scorers(self._tx)

    def count_learned_rewards(self, *, since: datetime | None = None) -> int:
        """How many stored rewards (of episodes created since ``since``) a learner has learned:
        re-totalling those leaves the learner's model on their old totals."""
        return count_learned(self._tx, since)

    def memory_labels(self, *, scorer: str | None = None) -> dict[str, float]:
        """MemPO's +1 / -1 label of each episode that has one, by episode id: every label in one
        dict (read a page at a time); :meth:`memory_label_pages` holds one page. ``scorer``: its
        labels only; left out, :class:`ConfigError` where several scorers' labels are stored."""
        return memory_labels(self._tx, scorer)

    def memory_label_pages(
        self, *, page_size: int = LABEL_PAGE, scorer: str | None = None
    ) -> Iterator[dict[str, float]]:
        """The labels of :meth:`memory_labels`, ``page_size`` episodes at a time (in episode-id order)."""
        return memory_label_pages(self._tx, page_size, scorer)

    def stored_rewards(self, *, since: datetime | None = None) -> list[tuple[str, RewardBreakdown]]:
        """Deprecated (loads every reward at once): use :meth:`retotal_rewards`."""
        return stored_rewards(self._tx, since)

    def write_rewards(
        self, updates: Mapping[str, RewardBreakdown], weights: RewardWeights, *, version: str | None = None
    ) -> int:
        """Deprecated (writes apart from the read): use :meth:`retotal_rewards`."""
        return write_rewards(self._tx, updates, weights, version)
