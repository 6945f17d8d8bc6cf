"""Offline reads and results: every decision for replay, OPE results, and MemPO's labels."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Select, and_, delete, func, insert, or_, select
from sqlalchemy.orm import Session

from memabra._errors import ConfigError, InvalidRecordError
from memabra._records import (
    GoldDecision,
    LoggedDecision,
    MemoryQuality,
    OPEResult,
    PolicySnapshot,
    RewardBreakdown,
    Selection,
)
from memabra.storage import _convert as cv
from memabra.storage._episodes import assemble_selections
from memabra.storage._models import (
    DecisionCandidateRow,
    DecisionRow,
    EpisodeRow,
    FeedbackRow,
    MemoryScoreRow,
    OPERunRow,
    PolicySnapshotRow,
    RewardRow,
    table_of,
)
from memabra.storage._rows import clean_text, prepare
from memabra.storage._snapshots import add_snapshot, snapshot_row_values
from memabra.storage._tx import Transactions

logger = logging.getLogger("memabra")

__all__ = [
    "DECISION_CHUNK",
    "count_rewarded",
    "iter_decisions",
    "rewarded_time_at",
    "iter_selections",
    "list_ope_runs",
    "logged_policies",
    "unlogged_policies",
    "all_memory_scores",
    "check_ope_policy",
    "memory_scores",
    "count_gold_episodes",
    "count_mempo_items",
    "mempo_items",
    "record_ope_results",
    "store_memory_scores",
]

# Feedback rows read per page when assembling MemPO items (their episodes' decisions come with them).
_CHUNK = 500
# decisions read per round trip when streaming the log: each brings its candidates' rows, features
# and metadata decoded (a 128-tool registry: 128 rows a decision), so 1,000 at a time held about
# 600 MB for `memabra ope log` on the multi-turn bench's log and 200 about 300 MB, at the same speed
DECISION_CHUNK = 200


def iter_selections(
    tx: Transactions, since: datetime | None, until: datetime | None, chunk_size: int
) -> Iterator[tuple[Selection, RewardBreakdown | None]]:
    """Every logged decision in time order with its episode's reward (see :func:`iter_decisions`)."""
    for decision in iter_decisions(tx, since, until, chunk_size, with_used=False):
        yield decision.selection, decision.reward


def check_window(since: datetime | None, until: datetime | None, chunk_size: int = 1) -> None:
    """Refuse, before any read, a window the database would only reject mid-stream."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise InvalidRecordError(f"{name} must be timezone-aware (UTC), got a naive datetime {value.isoformat()}")
    if chunk_size < 1:
        raise InvalidRecordError(f"chunk_size must be at least 1, got {chunk_size}")


def iter_decisions(
    tx: Transactions,
    since: datetime | None,
    until: datetime | None,
    chunk_size: int,
    *,
    with_used: bool = True,
    user_id: str | None = None,
    logged_by: Collection[str] | None = None,
) -> Iterator[LoggedDecision]:
    """Every logged decision in time order (only ``user_id``'s when given; only those the policies
    ``logged_by`` names logged, when given) with its episode's reward and used candidates, read in
    chunks through a server-side cursor so memory stays flat however long the log is."""
    stmt = select(DecisionRow).order_by(DecisionRow.created_at, DecisionRow.id)
    if user_id is not None:
        stmt = stmt.where(DecisionRow.user_id == clean_text(user_id))
    if logged_by is not None:
        # in the query: another policy's decisions are never assembled (their candidates are most of a read)
        stmt = stmt.where(DecisionRow.policy.in_(sorted(clean_text(name) for name in logged_by)))
    if since is not None:
        stmt = stmt.where(DecisionRow.created_at >= since)
    if until is not None:
        stmt = stmt.where(DecisionRow.created_at < until)
    with Session(tx.engine) as stream, Session(tx.engine) as s:
        result = stream.scalars(stmt.execution_options(stream_results=True, yield_per=chunk_size))
        for chunk in result.partitions():
            assembled = assemble_selections(s, chunk)
            episode_ids = list({d.episode_id for d in chunk})
            rewards: dict[str, tuple[RewardBreakdown | None, bool, datetime | None]] = {
                r.episode_id: (cv.reward_from_row(r), bool(r.final), r.computed_at)
                for r in s.scalars(select(RewardRow).where(RewardRow.episode_id.in_(episode_ids)))
            }
            used: dict[str, frozenset[str]] = {}
            if with_used:
                rows = s.execute(select(EpisodeRow.id, EpisodeRow.used_ids).where(EpisodeRow.id.in_(episode_ids)))
                used = {eid: frozenset(ids) for eid, ids in rows if ids is not None}
            by_id = {sel.id: sel for sels in assembled.values() for sel in sels}
            for d in chunk:
                selection = by_id.get(d.id)
                if selection is None:  # deleted (episodes delete) while the log was streamed
                    continue
                reward, final, at = rewards.get(d.episode_id, (None, False, None))
                yield LoggedDecision(selection, reward, used.get(d.episode_id), final, d.episode_id, at)
            s.expunge_all()


def _rewarded(since: datetime | None, include_provisional: bool, logged_by: Collection[str] | None) -> Select[datetime]:
    """Decisions whose episode has a reward (a final one unless ``include_provisional``), by time;
    only those the policies ``logged_by`` names logged, when given."""
    stmt = select(DecisionRow.created_at).join(RewardRow, RewardRow.episode_id == DecisionRow.episode_id)
    if not include_provisional:
        stmt = stmt.where(RewardRow.final.is_(True))
    if since is not None:
        stmt = stmt.where(DecisionRow.created_at >= since)
    if logged_by is not None:
        stmt = stmt.where(DecisionRow.policy.in_(sorted(clean_text(name) for name in logged_by)))
    return stmt


def count_rewarded(
    tx: Transactions, since: datetime | None, include_provisional: bool, logged_by: Collection[str] | None = None
) -> int:
    """How many decisions :func:`iter_decisions` would yield with a (final) reward, without reading them."""
    rewarded = _rewarded(since, include_provisional, logged_by).subquery()
    with tx.read() as s:
        return int(s.scalar(select(func.count()).select_from(rewarded)) or 0)


def rewarded_time_at(
    tx: Transactions,
    position: int,
    since: datetime | None,
    include_provisional: bool,
    logged_by: Collection[str] | None = None,
) -> datetime:
    """The time of the rewarded decision at ``position`` (0-based) in the log's time order."""
    stmt = _rewarded(since, include_provisional, logged_by).order_by(DecisionRow.created_at, DecisionRow.id)
    with tx.read() as s:
        at = s.scalar(stmt.offset(position).limit(1))
    if at is None:
        raise InvalidRecordError(f"the log holds no rewarded decision at position {position}")
    return at


def logged_policies(tx: Transactions) -> list[str]:
    """The policies that logged at least one decision, by name (the decision row's ``policy``)."""
    with tx.read() as s:
        return sorted(s.scalars(select(DecisionRow.policy).distinct()))


def unlogged_policies(tx: Transactions, names: Collection[str]) -> list[str]:
    """Those of ``names`` that logged no decision. One EXISTS a name, which stops at its first
    decision: no index leads with ``policy``, and a DISTINCT over a long log reads all of it."""
    with tx.read() as s:
        return sorted(
            name
            for name in names
            if not s.scalar(select(select(DecisionRow.id).where(DecisionRow.policy == clean_text(name)).exists()))
        )


def record_ope_results(tx: Transactions, results: Sequence[OPEResult], snapshot: PolicySnapshot | None = None) -> None:
    """Store an offline evaluation's rows in one transaction; with ``snapshot`` (the candidate
    ``train --from-log`` keeps), save it in that same transaction: a crash or a refused write
    between two would leave a snapshot in the log without the run that judged it."""
    if snapshot is not None and snapshot.status != "candidate":
        # only a candidate: activating one takes the policy's lock and retires the active one (_snapshots)
        raise InvalidRecordError(
            f"snapshot {snapshot.version!r} is {snapshot.status!r}: only a candidate is saved with its OPE results"
        )
    if not results and snapshot is None:
        return
    rows = prepare(table_of(OPERunRow), [cv.ope_values(r) for r in results]) if results else []
    versions = {r["snapshot_version"] for r in rows if r["snapshot_version"] is not None}
    saved = snapshot_row_values(snapshot) if snapshot is not None else None

    def work(s: Session) -> None:
        if snapshot is not None and saved is not None:
            add_snapshot(s, snapshot, saved)
        for version in sorted(versions):
            if s.get(PolicySnapshotRow, version) is None:
                raise InvalidRecordError(f"OPE result names snapshot {version!r}, which is not in the log")
        if rows:
            s.execute(insert(table_of(OPERunRow)), rows)

    tx.write(work, what="record_ope_results")


def check_ope_policy(policy: str) -> None:
    """Raise :class:`InvalidRecordError` for a target name a stored run could not hold: checked
    before an evaluation that takes minutes, not when its rows are written."""
    prepare(table_of(OPERunRow), [{"policy": policy}])


def list_ope_runs(tx: Transactions, version: str | None, policy: str | None, limit: int) -> list[OPEResult]:
    stmt = select(OPERunRow).order_by(OPERunRow.created_at.desc(), OPERunRow.estimator).limit(limit)
    if version is not None:
        stmt = stmt.where(OPERunRow.snapshot_version == clean_text(version))
    if policy is not None:
        stmt = stmt.where(OPERunRow.policy == clean_text(policy))
    with tx.read() as s:
        return [cv.ope_from_row(r) for r in s.scalars(stmt)]


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
