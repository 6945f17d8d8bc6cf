"""Row -> record conversion (the other direction is :mod:`memabra.storage._convert`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Row

from memabra._errors import InvalidRecordError
from memabra._records import (
    USAGE_METADATA_KEYS,
    Budget,
    Candidate,
    CandidateKind,
    CandidateStats,
    EpisodeSummary,
    Feedback,
    MemoryQuality,
    OPEResult,
    PolicySnapshot,
    RegistryItem,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
    Step,
)
from memabra.storage._models import (
    DecisionCandidateRow,
    DecisionRow,
    DecisionSlotRow,
    EpisodeRow,
    FeedbackRow,
    MemoryScoreRow,
    OPERunRow,
    PolicySnapshotRow,
    RegistryRow,
    RewardRow,
    StepRow,
)

_R = TypeVar("_R")


def candidate_from_row(c: DecisionCandidateRow | Row[Any]) -> Candidate:
    """A logged candidate. Its usage counts and creation time are stored in the metadata column
    under the keys of :data:`~memabra._records.USAGE_METADATA_KEYS` (the row format predates the
    typed fields, so logs written before and after them read the same way)."""
    meta: dict[str, Any] = dict(c.metadata_ or {})
    stored = {key: meta.pop(key) for key in USAGE_METADATA_KEYS if key in meta}
    usage = None
    if "times_chosen" in stored or "times_helped" in stored:
        usage = CandidateStats(_count(stored.get("times_chosen", 0)), _count(stored.get("times_helped", 0)))
    created = stored.get("created_at")
    created_at = None
    if isinstance(created, str):
        created_at = datetime.fromisoformat(created)
        created_at = created_at if created_at.tzinfo is not None else created_at.replace(tzinfo=UTC)
    return Candidate(c.candidate_id, CandidateKind(c.kind), c.text, c.tokens, meta, usage=usage, created_at=created_at)


def _count(value: Any) -> int:
    # JSON may hand back 3.0 for 3; a fractional or negative count is left for CandidateStats to refuse
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _at_row(exc: ValueError, where: str) -> InvalidRecordError:
    """``exc`` with the ids of the row at fault in front, of the same class when it is a record
    error: a corrupted row in a log of thousands is found by its ids, not by what it held."""
    message = f"{where}: {exc}"
    if isinstance(exc, InvalidRecordError):
        try:
            return type(exc)(message)
        except TypeError:  # a subclass whose constructor takes more than the message
            pass
    return InvalidRecordError(message)


def selection_from_rows(
    decision: DecisionRow,
    slots: Iterable[DecisionSlotRow | Row[Any]],
    candidates: Iterable[DecisionCandidateRow | Row[Any]],
) -> Selection:
    """The logged selection; a row that no longer makes a valid record raises
    :class:`~memabra.InvalidRecordError` naming the decision and its episode."""
    try:
        return _selection(decision, slots, candidates)
    except ValueError as exc:  # InvalidRecordError, or an unknown kind's enum error
        raise _at_row(exc, f"decision {decision.id} of episode {decision.episode_id}") from exc


def _selection(
    decision: DecisionRow,
    slots: Iterable[DecisionSlotRow | Row[Any]],
    candidates: Iterable[DecisionCandidateRow | Row[Any]],
) -> Selection:
    budget = Budget(
        max_tokens=decision.token_budget,
        slots={CandidateKind(k): int(n) for k, n in decision.slots_budget.items()},
    )
    context = RoutingContext(
        query=decision.query,
        user_id=decision.user_id,
        thread_id=decision.thread_id,
        turn=decision.turn,
        kinds=tuple(CandidateKind(k) for k in decision.kinds),
        budget=budget,
    )
    offered = tuple(
        ScoredCandidate(
            candidate=candidate_from_row(c),
            features={k: float(v) for k, v in (c.features or {}).items()},
            score=c.score,
            rank=c.rank,
        )
        for c in sorted(candidates, key=lambda c: c.ordinal)
    )
    draws = tuple(
        SlotDraw(
            slot=s.slot,
            kind=CandidateKind(s.kind),
            candidate_ids=tuple(s.candidate_ids),
            probabilities=tuple(float(p) for p in s.probabilities),
            chosen_id=s.chosen_id,
            chosen_probability=s.chosen_probability,
        )
        for s in sorted(slots, key=lambda s: s.slot)
    )
    return Selection(
        context=context,
        offered=offered,
        slots=draws,
        policy=decision.policy,
        policy_version=decision.policy_version,
        seed=decision.seed,
        latency_ms=decision.latency_ms,
        id=decision.id,
        created_at=decision.created_at,
    )


def step_from_row(row: StepRow) -> Step:
    return _by_name(row, Step, arguments=row.arguments or {})


def missed_by_episode(
    rows: Iterable[FeedbackRow], selections: Mapping[str, Sequence[Selection]]
) -> dict[str, tuple[str, ...]]:
    """Per episode, the ``relevant_ids`` of its feedback that none of its selections chose (late
    feedback is never learned from)."""
    wanted: dict[str, set[str]] = {}
    for row in rows:
        if row.late:
            continue
        try:
            relevant = feedback_from_row(row).signals.implicit.relevant_ids or ()
        except Exception:  # one poisoned row must not stop learning from the rest
            logging.getLogger("memabra").warning("feedback %s has an unreadable payload; skipped", row.id)
            continue
        wanted.setdefault(row.episode_id, set()).update(relevant)
    missed: dict[str, tuple[str, ...]] = {}
    for episode_id, ids in wanted.items():
        chosen = {c for selection in selections.get(episode_id, ()) for c in selection.chosen_ids}
        if left := tuple(sorted(ids - chosen)):
            missed[episode_id] = left
    return missed


def feedback_from_row(row: FeedbackRow) -> Feedback:
    return _by_name(row, Feedback, payload=row.payload or {})


def reward_from_row(row: RewardRow) -> RewardBreakdown:
    """The stored reward; a row that no longer makes a valid record raises
    :class:`~memabra.InvalidRecordError` naming its episode."""
    try:
        return RewardBreakdown(
            components=RewardComponents(
                s=row.s, hm=row.hm, hs=row.hs, ht=row.ht, e=row.e, c=row.c, l=row.l, x=row.x, u=row.u
            ),
            weights=RewardWeights(**row.weights),
            version=row.reward_version,
        )
    except ValueError as exc:
        raise _at_row(exc, f"reward of episode {row.episode_id}") from exc


def snapshot_from_row(row: PolicySnapshotRow) -> PolicySnapshot:
    return _by_name(
        row, PolicySnapshot, model=bytes(row.model), learner_args=row.learner_args or {}, metrics=row.metrics or {}
    )


def registry_from_row(row: RegistryRow) -> RegistryItem:
    # ``metadata`` is the column ``metadata_`` (SQLAlchemy reserves the name on a mapped class)
    return _by_name(row, RegistryItem, kind=CandidateKind(row.kind), metadata=row.metadata_ or {})


def ope_from_row(r: OPERunRow) -> OPEResult:
    return _by_name(r, OPEResult, details=r.details or {})


def memory_score_from_row(r: MemoryScoreRow) -> MemoryQuality:
    return _by_name(r, MemoryQuality)


def _by_name(row: object, record: type[_R], **converted: Any) -> _R:
    """``record`` with every field read from the same-named attribute of ``row``, except the
    ``converted`` ones (a column whose name or type differs, or a nullable JSON column)."""
    names = [f.name for f in fields(record) if f.init and f.name not in converted]  # type: ignore[arg-type]
    return record(**{name: getattr(row, name) for name in names}, **converted)


def summary_from_row(
    r: EpisodeRow, *, kinds: tuple[str, ...], failed: bool = False, failure_cause: str | None = None
) -> EpisodeSummary:
    """The listing row of ``r``; ``kinds`` are the kinds its decisions chose (read from the slot
    draws: ``r.kinds`` holds the kinds it was offered); ``failed`` and ``failure_cause`` as the
    failed-turn feedback says (:mod:`~memabra.storage._failures`)."""
    return EpisodeSummary(
        id=r.id,
        user_id=r.user_id,
        query=r.query,
        created_at=r.created_at,
        policy_version=r.policy_version,
        kinds=kinds,
        reward_total=r.reward_total,
        corrected=r.corrected,
        finalized=r.finalized_at is not None,
        feedback_due_at=r.feedback_due_at,
        failed=failed,
        failure_cause=failure_cause,
    )
