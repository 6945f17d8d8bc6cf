"""MemPO's reads and writes of the log: the decisions whose episode got a gold answer (a page of
feedback at a time), and the labels each scorer stored for them."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, insert, or_, select
from sqlalchemy.orm import Session

from memabra._errors import ConfigError, InvalidRecordError
from memabra._records import GoldDecision, MemoryQuality
from memabra.storage import _convert as cv
from memabra.storage._models import DecisionCandidateRow, DecisionRow, FeedbackRow, MemoryScoreRow, table_of
from memabra.storage._rows import clean_text, prepare
from memabra.storage._tx import Transactions

logger = logging.getLogger("memabra")

__all__ = [
    "all_memory_scores",
    "count_gold_episodes",
    "count_mempo_items",
    "memory_scores",
    "mempo_items",
    "store_memory_scores",
]

# Feedback rows read per page when assembling MemPO items (their episodes' decisions come with them).
_CHUNK = 500


def mempo_items(tx: Transactions, since: datetime | None, unscored_by: str | None = None) -> Iterator[GoldDecision]:
    """Decisions that offered memories and whose episode got a ``gold_answer`` in feedback; with
    ``unscored_by``, only those that scorer has not labelled (what a resumed run has left). Read a
    page of ``_CHUNK`` feedback rows and their episodes' decisions at a time, so memory holds one
    page's texts however long the log is."""
    for gold in _gold_pages(tx, since):
        with tx.read() as s:
            decisions = _gold_decisions(s, list(gold), unscored_by, gold)
            cands: dict[str, list[DecisionCandidateRow]] = defaultdict(list)
            for c in s.scalars(
                select(DecisionCandidateRow)
                .where(
                    DecisionCandidateRow.decision_id.in_([d.id for d in decisions]),
                    DecisionCandidateRow.kind == "memory",
                )
                .order_by(DecisionCandidateRow.ordinal)
            ):
                cands[c.decision_id].append(c)
        for d in decisions:
            memories = cands[d.id]
            yield GoldDecision(
                id=d.id,
                question=d.query,
                selected=tuple(c.text for c in sorted((c for c in memories if c.chosen), key=lambda c: c.slot or 0)),
                candidates=tuple(c.text for c in memories),
                gold_answer=gold[d.episode_id][0],
            )


def count_mempo_items(tx: Transactions, since: datetime | None, unscored_by: str | None = None) -> int:
    """How many decisions :func:`mempo_items` yields for the same arguments (one count per page)."""
    total = 0
    for gold in _gold_pages(tx, since):
        with tx.read() as s:
            total += len(_gold_decisions(s, list(gold), unscored_by, gold))
    return total


def count_gold_episodes(tx: Transactions, since: datetime | None) -> int:
    """Episodes with a gold answer in feedback received since ``since``, whether or not a decision
    of theirs offered memories (what MemPO scores)."""
    return sum(len(gold) for gold in _gold_pages(tx, since))


def _gold_pages(tx: Transactions, since: datetime | None) -> Iterator[dict[str, tuple[str, datetime]]]:
    """Episode id to its gold answer (the latest feedback that gave one) and when it arrived, from
    feedback received since ``since``, a page of ``_CHUNK`` feedback rows at a time: reading every
    gold answer first held the whole log's (about 2 KB an episode at its peak). An episode comes
    in the page of its latest gold answer only, so a corrected answer is not scored twice."""
    after: tuple[datetime, str] | None = None
    while True:
        stmt = select(FeedbackRow).order_by(FeedbackRow.received_at, FeedbackRow.id).limit(_CHUNK)
        if since is not None:
            stmt = stmt.where(FeedbackRow.received_at >= since)
        if after is not None:
            stmt = stmt.where(_after(after))
        with tx.read() as s:
            rows = list(s.scalars(stmt))
            if not rows:
                return
            after = (rows[-1].received_at, rows[-1].id)
            page = {row.episode_id: (answer, row.received_at) for row in rows if (answer := _gold_of(row))}
            if page:  # an episode answered again in a later page is yielded there, with that answer
                later = select(FeedbackRow).where(FeedbackRow.episode_id.in_(list(page)), _after(after))
                for row in s.scalars(later):
                    if _gold_of(row):
                        page.pop(row.episode_id, None)
        if page:
            yield page


def _after(key: tuple[datetime, str]) -> ColumnElement[bool]:
    """Feedback rows after ``key`` in (received_at, id) order: the keyset the pages advance by."""
    received_at, row_id = key
    return or_(
        FeedbackRow.received_at > received_at, and_(FeedbackRow.received_at == received_at, FeedbackRow.id > row_id)
    )


def _gold_of(row: FeedbackRow) -> str | None:
    """The feedback's gold answer, None when it gives none (or cannot be read)."""
    try:
        answer = cv.feedback_from_row(row).signals.explicit.gold_answer
    except InvalidRecordError as exc:  # a row stored before payloads were validated
        logger.warning("feedback %s of episode %s is unreadable, skipped: %s", row.id, row.episode_id, exc)
        return None
    return answer if answer is not None and answer.strip() else None


def _gold_decisions(
    s: Session, episode_ids: Sequence[str], unscored_by: str | None, gold: Mapping[str, tuple[str, datetime]]
) -> list[DecisionRow]:
    """The decisions of ``episode_ids`` that offered a memory, oldest first; with ``unscored_by``,
    those that scorer has not labelled since their gold answer arrived: a gold answer sent again,
    corrected, reopens a decision labelled against the old one (its label would grade the old)."""
    offered_memory = select(DecisionCandidateRow.decision_id).where(
        DecisionCandidateRow.decision_id == DecisionRow.id, DecisionCandidateRow.kind == "memory"
    )
    stmt = select(DecisionRow).where(DecisionRow.episode_id.in_(episode_ids), offered_memory.exists())
    if unscored_by is None:
        return list(s.scalars(stmt.order_by(DecisionRow.created_at)))
    labelled = (
        select(MemoryScoreRow.decision_id, MemoryScoreRow.scored_at)
        .where(MemoryScoreRow.scorer == clean_text(unscored_by))
        .subquery()
    )
    rows = s.execute(
        stmt.add_columns(labelled.c.scored_at)
        .outerjoin(labelled, labelled.c.decision_id == DecisionRow.id)
        .order_by(DecisionRow.created_at)
    ).all()
    return [d for d, scored_at in rows if scored_at is None or scored_at < gold[d.episode_id][1]]


def store_memory_scores(tx: Transactions, scores: Sequence[MemoryQuality]) -> None:
    """Insert or replace MemPO labels, each scorer's its own: a label replaces the one its scorer
    stored for the decision, never another scorer's. A decision named twice for one scorer is
    refused, and nothing of the batch is stored."""
    if not scores:
        return
    rows = prepare(table_of(MemoryScoreRow), [cv.memory_score_values(q) for q in scores])
    by_scorer: defaultdict[str, set[str]] = defaultdict(set)
    for r in rows:
        decisions = by_scorer[r["scorer"]]
        if r["decision_id"] in decisions:
            raise InvalidRecordError(
                f"the labels name decision {r['decision_id']!r} twice for scorer {r['scorer']!r}: "
                "give each decision one label per scorer"
            )
        decisions.add(r["decision_id"])

    def work(s: Session) -> None:
        for scorer, ids in sorted(by_scorer.items()):
            s.execute(
                delete(MemoryScoreRow).where(
                    MemoryScoreRow.scorer == scorer, MemoryScoreRow.decision_id.in_(sorted(ids))
                )
            )
        s.execute(insert(table_of(MemoryScoreRow)), rows)

    tx.write(work, what="store_memory_scores")


def memory_scores(tx: Transactions, decision_ids: Sequence[str], scorer: str | None) -> dict[str, MemoryQuality]:
    """``scorer``'s label of each of ``decision_ids`` it labelled; without ``scorer``, each
    decision's label where one scorer labelled it, and :class:`ConfigError` naming the scorers
    where several did (a decision id maps to one label)."""
    labels = all_memory_scores(tx, decision_ids, scorer)
    by_decision: dict[str, MemoryQuality] = {}
    for label in labels:
        if label.decision_id in by_decision:
            scorers = sorted({q.scorer for q in labels if q.decision_id == label.decision_id})
            raise ConfigError(
                f"decision {label.decision_id!r} has MemPO labels of {len(scorers)} scorers "
                f"({', '.join(scorers)}): pass scorer= to read one scorer's labels, or read every "
                "scorer's with all_memory_scores"
            )
        by_decision[label.decision_id] = label
    return by_decision


def all_memory_scores(tx: Transactions, decision_ids: Sequence[str], scorer: str | None) -> list[MemoryQuality]:
    """Every stored label of ``decision_ids`` (``scorer``'s only, when given), by decision then scorer."""
    if not decision_ids:
        return []
    ids = [clean_text(d) for d in decision_ids]
    stmt = select(MemoryScoreRow).where(MemoryScoreRow.decision_id.in_(ids))
    if scorer is not None:
        stmt = stmt.where(MemoryScoreRow.scorer == clean_text(scorer))
    with tx.read() as s:
        rows = s.scalars(stmt.order_by(MemoryScoreRow.decision_id, MemoryScoreRow.scorer))
        return [cv.memory_score_from_row(r) for r in rows]
