"""Row <-> record conversion: the only place that knows both shapes. It maps fields and decides
nothing (what a correction is comes from the feedback record)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from memabra._record_fields import slot_fields
from memabra._records import (
    STOP_ID,
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    MemoryQuality,
    OPEResult,
    PolicySnapshot,
    RegistryItem,
    RewardBreakdown,
    Selection,
    Step,
)
from memabra.storage._from_rows import (  # re-exported: callers use one namespace, cv.*
    feedback_from_row,
    memory_score_from_row,
    ope_from_row,
    registry_from_row,
    reward_from_row,
    selection_from_rows,
    snapshot_from_row,
    step_from_row,
    summary_from_row,
)


def episode_values(episode: Episode, feedback_due_at: datetime) -> dict[str, Any]:
    kinds = sorted({k.value for sel in episode.selections for k in sel.context.kinds})
    policy_version = episode.selections[0].policy_version if episode.selections else None
    reward_total = episode.reward.total if episode.reward is not None else None
    return {
        "id": episode.id,
        "user_id": episode.user_id,
        "thread_id": episode.thread_id,
        "turn": episode.turn,
        "query": episode.query,
        "answer": episode.answer,
        "created_at": episode.created_at,
        "feedback_due_at": feedback_due_at,
        "finalized_at": episode.finalized_at,
        "policy_version": policy_version,
        "kinds": ",".join(kinds),
        "reward_total": reward_total,
        "corrected": any(f.signals.corrects for f in episode.feedback),
        "used_ids": sorted(episode.used_ids) if episode.used_ids is not None else None,
        "metadata": dict(episode.metadata),
    }


def decision_values(episode: Episode, seq: int, sel: Selection) -> dict[str, Any]:
    ctx = sel.context
    return {
        "id": sel.id,
        "episode_id": episode.id,
        "user_id": ctx.user_id,
        "seq": seq,
        "query": ctx.query,
        "thread_id": ctx.thread_id,
        "turn": ctx.turn,
        "kinds": [k.value for k in ctx.kinds],
        "slots_budget": {k.value: n for k, n in ctx.budget.slots.items()},
        "token_budget": ctx.budget.max_tokens,
        "policy": sel.policy,
        "policy_version": sel.policy_version,
        "seed": sel.seed,
        "propensity": sel.propensity,
        "latency_ms": sel.latency_ms,
        "tokens_injected": sel.tokens_injected,
        "created_at": sel.created_at,
    }


def slot_values(sel: Selection) -> list[dict[str, Any]]:
    return [
        {"decision_id": sel.id, **slot_fields(d), "max_probability": float(max(d.probabilities))} for d in sel.slots
    ]


# Enum member -> stored text, as a dict lookup: ``.value`` is a descriptor call per candidate row.
_KIND_TEXT: dict[CandidateKind, str] = {k: k.value for k in CandidateKind}


def candidate_metadata(cand: Candidate) -> dict[str, Any]:
    """The metadata column of a logged candidate: its metadata plus usage counts and creation time
    under their pre-typed keys, read back by :func:`~memabra.storage._from_rows.candidate_from_row`."""
    meta: dict[str, Any] = dict(cand.metadata)
    if cand.usage is not None:
        meta.update(times_chosen=cand.usage.times_chosen, times_helped=cand.usage.times_helped)
    if cand.created_at is not None:
        meta["created_at"] = cand.created_at.isoformat()
    return meta


def candidate_values(sel: Selection, used_ids: frozenset[str] | None) -> list[dict[str, Any]]:
    user_id = sel.context.user_id
    chosen_slot = {d.chosen_id: d for d in sel.slots if d.chosen_id != STOP_ID}
    # Probability at the first slot of each kind, as one lookup table per kind.
    first_of_kind: dict[CandidateKind, dict[str, float]] = {}
    for d in sel.slots:
        if d.kind not in first_of_kind:
            first_of_kind[d.kind] = dict(zip(d.candidate_ids, d.probabilities, strict=True))
    rows = []
    for ordinal, sc in enumerate(sel.offered):
        cand = sc.candidate
        draw = chosen_slot.get(cand.id)
        if draw is not None:
            probability = draw.chosen_probability
        else:
            probability = first_of_kind.get(cand.kind, {}).get(cand.id, 0.0)
        rows.append(
            {
                "decision_id": sel.id,
                "candidate_id": cand.id,
                "ordinal": ordinal,
                "user_id": user_id,
                "kind": _KIND_TEXT[cand.kind],
                "text": cand.text,
                "tokens": cand.tokens,
                "metadata": candidate_metadata(cand),
                "features": dict(sc.features),
                "score": sc.score,
                "rank": sc.rank,
                "probability": probability,
                "slot": draw.slot if draw is not None else None,
                "chosen": draw is not None,
                "used": (cand.id in used_ids) if (draw is not None and used_ids is not None) else None,
            }
        )
    return rows


def step_values(episode_id: str, steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {
            "episode_id": episode_id,
            "seq": i,
            "kind": s.kind.value,
            "name": s.name,
            "arguments": dict(s.arguments),
            "result": s.result,
            "status": s.status,
            "error": s.error,
            "latency_ms": s.latency_ms,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "started_at": s.started_at,
        }
        for i, s in enumerate(steps)
    ]


def feedback_values(feedback: Feedback, late: bool) -> dict[str, Any]:
    return {
        "id": feedback.id,
        "episode_id": feedback.episode_id,
        "decision_id": feedback.decision_id,
        "kind": feedback.kind.value,
        "source": feedback.source,
        "payload": thaw(feedback.payload),
        "idempotency_key": feedback.idempotency_key,
        "received_at": feedback.received_at,
        "late": late,
    }


def reward_values(episode_id: str, reward: RewardBreakdown, *, final: bool, at: datetime) -> dict[str, Any]:
    comps = reward.components
    return {
        "episode_id": episode_id,
        **{name: value for name, value in comps.as_dict().items()},
        "weights": reward.weights.as_dict(),
        "total": reward.total,
        "reward_version": reward.version,
        "final": final,
        "computed_at": at,
        "learned_at": None,
    }


def registry_values(item: RegistryItem) -> dict[str, Any]:
    return {
        "kind": item.kind.value,
        "owner": item.owner,
        "id": item.id,
        "name": item.name or item.id,
        "text": item.text,
        "body": item.body,
        "tokens": item.tokens,
        "source": item.source,
        "metadata": thaw(item.metadata),
        "created_at": item.created_at,
        "updated_at": item.updated_at,
        "last_chosen_at": item.last_chosen_at,
        "times_chosen": item.times_chosen,
        "times_used": item.times_used,
        "deleted_at": None,
    }


def snapshot_values(snapshot: PolicySnapshot) -> dict[str, Any]:
    return _by_name(snapshot)


def ope_values(r: OPEResult) -> dict[str, Any]:
    return _by_name(r)


def memory_score_values(q: MemoryQuality) -> dict[str, Any]:
    return _by_name(q)


def _by_name(record: Any) -> dict[str, Any]:
    """Column values of a record whose fields are its row's columns, name for name (the reverse of
    :func:`~memabra.storage._from_rows._by_name`); mappings and tuples thawed into JSON."""
    return {f.name: thaw(getattr(record, f.name)) for f in fields(record)}


def thaw(value: Any) -> Any:
    """Read-only mappings and tuples back into plain JSON containers."""
    if hasattr(value, "items"):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


__all__ = [
    "candidate_metadata",
    "candidate_values",
    "decision_values",
    "episode_values",
    "feedback_from_row",
    "feedback_values",
    "memory_score_from_row",
    "memory_score_values",
    "ope_from_row",
    "ope_values",
    "registry_from_row",
    "registry_values",
    "reward_from_row",
    "reward_values",
    "selection_from_rows",
    "slot_values",
    "snapshot_from_row",
    "snapshot_values",
    "step_from_row",
    "step_values",
    "summary_from_row",
    "thaw",
]
