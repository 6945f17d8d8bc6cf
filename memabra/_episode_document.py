"""An episode as one JSON document: what ``memabra episodes show --json`` writes and the admin
view's "Download JSON" serves, so a reviewer and a script read the same thing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memabra._records import (
    STOP_ID,
    Candidate,
    CandidateKind,
    Episode,
    MemoryQuality,
    RewardBreakdown,
    ScoredCandidate,
    Selection,
    SlotDraw,
)
from memabra.storage._injected_bodies import BODY_DIGEST_KEY

__all__ = [
    "NOT_KEPT",
    "candidate_fields",
    "episode_document",
    "injected_fields",
    "kept_body",
    "mempo_fields",
    "probability_shown",
    "reward_terms",
    "slot_fields",
]

NOT_KEPT = {
    "not_logged": "not kept: logged before memabra kept injected bodies (schema revision 0017), by an "
    "older release, or for an item registered without skill_items()/tool_items(), so the log names no "
    "body; the registry's row is today's, not necessarily this one",
    "missing": "not kept: the log names this body's digest but holds no body under it (deleted by hand?)",
    "not_read": "not read: the log names this body's digest, but the caller passed no bodies (EpisodeLog.injected_bodies, "
    "export_decisions and export_final_decisions read them)",
}
"""Why a chosen skill's or tool's body is not shown, by the ``body_status`` that says so."""


def candidate_fields(sc: ScoredCandidate) -> dict[str, Any]:
    """An offered candidate as both documents of a decision show it (this one and the
    ``memabra.decision/1`` export): id, kind, text, tokens, the router's score and rank."""
    return {
        "id": sc.candidate.id,
        "kind": sc.candidate.kind.value,
        "text": sc.candidate.text,
        "tokens": sc.candidate.tokens,
        "score": sc.score,
        "rank": sc.rank,
    }


def injected_fields(sel: Selection, body_of: Callable[[Candidate], str | None] | None) -> list[dict[str, Any]]:
    """What each chosen skill and tool put into the model's context, in slot order: a skill's
    instructions, a tool's function spec, as the log kept them (``body_of`` finds the kept body of
    a candidate that logged a digest; ``None``: the bodies were not read). ``body_status``:
    ``kept``, or why ``body`` is ``None`` (:data:`NOT_KEPT` has the words)."""
    out = []
    for cand in sel.chosen:
        if cand.kind is CandidateKind.MEMORY:  # a memory's text is the candidate's text, shown already
            continue
        digest = cand.metadata.get(BODY_DIGEST_KEY)
        logged = isinstance(digest, str)
        body = body_of(cand) if logged and body_of is not None else None
        if body is not None:
            status = "kept"
        elif not logged:
            status = "not_logged"
        else:
            status = "missing" if body_of is not None else "not_read"
        entry: dict[str, Any] = {
            "id": cand.id,
            "kind": cand.kind.value,
            "body_digest": digest if isinstance(digest, str) else None,
            "body": body,
            "body_status": status,
        }
        if body is None:
            entry["note"] = NOT_KEPT[status]
        out.append(entry)
    return out


def kept_body(bodies: Mapping[str, str]) -> Callable[[Candidate], str | None]:
    """:func:`injected_fields`' ``body_of`` over ``bodies`` (digest -> body, as
    ``EpisodeLog.injected_bodies`` reads them)."""

    def body_of(cand: Candidate) -> str | None:
        return bodies.get(str(cand.metadata.get(BODY_DIGEST_KEY)))

    return body_of


def slot_fields(d: SlotDraw) -> dict[str, Any]:
    """One slot's draw, whole: its distribution and what was drawn (the ``memabra.decision/1``
    export and a paused turn's document)."""
    return {
        "slot": d.slot,
        "kind": d.kind.value,
        "candidate_ids": list(d.candidate_ids),
        "probabilities": list(d.probabilities),
        "chosen_id": d.chosen_id,
        "chosen_probability": d.chosen_probability,
    }


def episode_document(
    ep: Episode, bodies: Mapping[str, str] | None = None, *, labels: Sequence[MemoryQuality] | None = None
) -> dict[str, Any]:
    """What ``episodes show`` prints, as JSON: every decision with every candidate and what its
    chosen skills and tools injected (:func:`injected_fields`, from ``bodies`` as
    ``EpisodeLog.injected_bodies`` reads them; ``None``: marked not read), the steps, the feedback
    and the reward with its terms. With ``labels`` (``EpisodeLog.all_memory_scores`` of its
    decisions), each decision also holds ``mempo``: its MemPO labels, every scorer's (``[]``: none);
    without, the key is left out, so a document of a caller that reads no labels stays as it was."""
    by_decision: dict[str, list[dict[str, Any]]] = {}
    for q in labels or ():
        by_decision.setdefault(q.decision_id, []).append(mempo_fields(q))
    decisions = []
    for sel in ep.selections:
        chosen_slot = {d.chosen_id: d for d in sel.slots}
        candidates = []
        for sc in sorted(sel.offered, key=lambda s: (s.candidate.kind.value, s.rank)):
            draw = chosen_slot.get(sc.candidate.id)
            candidates.append(
                {
                    **candidate_fields(sc),
                    "p": probability_shown(sel, sc.candidate.id, sc.candidate.kind),
                    "slot": draw.slot if draw else None,
                    "chosen": draw is not None,
                }
            )
        decisions.append(
            {
                "id": sel.id,
                "policy": sel.policy,
                "policy_version": sel.policy_version,
                "seed": sel.seed,
                "propensity": sel.propensity,
                "candidates": candidates,
                "injected": injected_fields(sel, None if bodies is None else kept_body(bodies)),
                "stopped": [
                    {"kind": d.kind.value, "slot": d.slot, "p": d.chosen_probability}
                    for d in sel.slots
                    if d.chosen_id == STOP_ID
                ],
                **({"mempo": by_decision.get(sel.id, [])} if labels is not None else {}),
            }
        )
    return {
        "id": ep.id,
        "created": ep.created_at.isoformat(),
        "user": ep.user_id,
        "thread": ep.thread_id,
        "turn": ep.turn,
        "query": ep.query,
        "answer": ep.answer,
        "decisions": decisions,
        "steps": [
            {"kind": st.kind.value, "name": st.name, "status": st.status, "ms": st.latency_ms, "error": st.error}
            for st in ep.steps
        ],
        "feedback": [
            {"kind": f.kind.value, "source": f.source, "late": f.late, "payload": dict(f.payload)} for f in ep.feedback
        ],
        "reward": None if ep.reward is None else _reward_json(ep.reward, final=ep.finalized_at is not None),
    }


def mempo_fields(q: MemoryQuality) -> dict[str, Any]:
    """One scorer's MemPO label of a decision: P(gold | selected memories), P(gold | every
    candidate memory), their difference, the verdict (+1 as good, -1 worse) and when it was scored."""
    return {
        "scorer": q.scorer,
        "p_selected": q.p_selected,
        "p_all": q.p_all,
        "difference": q.difference,
        "reward": q.reward,
        "answer_tokens": q.answer_tokens,
        "scored_at": q.scored_at.isoformat(),
    }


def _reward_json(reward: RewardBreakdown, *, final: bool) -> dict[str, Any]:
    c = reward.components
    return {
        "total": reward.total,
        "version": reward.version,
        "final": final,
        "terms": [
            {"term": name, "value": value, "weight": weight, "contribution": contribution}
            for name, value, weight, contribution in reward_terms(reward)
        ],
        "h_by_kind": {"memory": c.hm, "skill": c.hs, "tool": c.ht},
    }


def probability_shown(sel: Selection, candidate_id: str, kind: CandidateKind) -> float:
    """The probability the decision table shows: of the draw that chose it, else of the first
    draw of its kind."""
    draw = next((d for d in sel.slots if d.chosen_id == candidate_id), None)
    if draw is not None:
        return draw.chosen_probability
    first = next((d for d in sel.slots if d.kind is kind), None)
    return first.probability_of(candidate_id) if first else 0.0


# A candidate's text in the decision table: enough to recognise it, short enough to keep one row.


def reward_terms(reward: RewardBreakdown) -> list[tuple[str, float, float, float]]:
    """Each term of the composite reward: name, value, weight and signed contribution."""
    c = reward.components
    w = reward.weights
    return [
        ("S", c.s, w.ws, w.ws * c.s),
        ("H", c.h, w.wr, w.wr * c.h),
        ("E", c.e, w.we, -w.we * c.e),
        ("C", c.c, w.wc, -w.wc * c.c),
        ("L", c.l, w.wl, -w.wl * c.l),
        ("X", c.x, w.wx, -w.wx * c.x),
        ("U", c.u, w.wu, w.wu * c.u),
    ]
