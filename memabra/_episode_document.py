"""An episode as one JSON document: what ``memabra episodes show --json`` writes and the admin
view's "Download JSON" serves, so a reviewer and a script read the same thing, and a file attached
to a ticket holds the whole turn (:func:`episode_document`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from memabra._document_cuts import Cuts
from memabra._record_fields import slot_fields
from memabra._records import (
    STOP_ID,
    Candidate,
    CandidateKind,
    Episode,
    MemoryQuality,
    RewardBreakdown,
    ScoredCandidate,
    Selection,
    Step,
    utcnow,
)
from memabra.storage._failures import FAILED_TURN_SOURCE, failure_cause
from memabra.storage._injected_bodies import BODY_DIGEST_KEY

__all__ = [
    "EPISODE_FORMAT",
    "NOT_KEPT",
    "candidate_fields",
    "document_text",
    "episode_document",
    "injected_fields",
    "kept_body",
    "mempo_fields",
    "probability_shown",
    "reward_terms",
    "utc_time",
]

EPISODE_FORMAT = "memabra.episode/1"
"""The document's ``format``: bumped when a key changes meaning or goes; keys are only added."""

NOT_KEPT = {
    "not_logged": "not kept: logged before memabra kept injected bodies (schema revision 0017), by an "
    "older release, or for an item registered without skill_items()/tool_items(), so the log names no "
    "body; the registry's row is today's, not necessarily this one",
    "missing": "not kept: the log names this body's digest but holds no body under it (an episode recorded "
    "from an episode document or export into another log, whose registry never held the body; else deleted "
    "by hand?)",
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


def episode_document(
    ep: Episode, bodies: Mapping[str, str] | None = None, *, labels: Sequence[MemoryQuality] | None = None
) -> dict[str, Any]:
    """The episode as one self-describing JSON document (``"format": "memabra.episode/1"``): what
    ``memabra episodes show --json`` writes and the admin view's "Download JSON" serves, enough to
    debug the turn, or load it back (:func:`memabra._episode_file.episode_from_document`), from the
    file alone.

    Every decision with its context (kinds, budget), every candidate offered (in the order
    offered), chosen or not, with its features, metadata and probability, each slot's whole
    distribution, and what its chosen skills and tools injected (:func:`injected_fields`, from
    ``bodies`` as ``EpisodeLog.injected_bodies`` reads them; ``None``: marked not read); the steps
    with their arguments, results and errors; the feedback; the reward with its terms, components and
    weights; whether the turn failed and why. Times are ISO 8601 in UTC. A long result, error,
    answer or arguments is cut as the log cuts them (:mod:`memabra._document_cuts`), each cut
    named in ``cut``. With ``labels`` (``EpisodeLog.all_memory_scores`` of its decisions), each
    decision also holds ``mempo``: its MemPO labels, every scorer's (``[]``: none); without, the
    key is left out."""
    by_decision: dict[str, list[dict[str, Any]]] = {}
    for q in labels or ():
        by_decision.setdefault(q.decision_id, []).append(mempo_fields(q))
    cuts = Cuts()
    decisions = [
        {
            **_decision(sel, bodies),
            **({"mempo": by_decision.get(sel.id, [])} if labels is not None else {}),
        }
        for sel in ep.selections
    ]
    failed = next((f for f in ep.feedback if f.source == FAILED_TURN_SOURCE), None)
    document = {
        "format": EPISODE_FORMAT,
        "exported_at": utc_time(utcnow()),
        "id": ep.id,
        "created": utc_time(ep.created_at),
        "finalized_at": utc_time(ep.finalized_at),
        "user": ep.user_id,
        "thread": ep.thread_id,
        "turn": ep.turn,
        "query": ep.query,
        "answer": cuts.text(ep.answer, "answer"),
        "used_ids": None if ep.used_ids is None else sorted(ep.used_ids),
        "metadata": dict(ep.metadata),
        "failed": failed is not None,
        "failure_cause": None if failed is None else failure_cause(failed.payload.get("comment")),
        "decisions": decisions,
        "steps": [_step(i, st, cuts) for i, st in enumerate(ep.steps)],
        "feedback": [
            {
                "id": f.id,
                "kind": f.kind.value,
                "source": f.source,
                "decision_id": f.decision_id,
                "idempotency_key": f.idempotency_key,
                "received_at": utc_time(f.received_at),
                "late": f.late,
                "payload": dict(f.payload),
            }
            for f in ep.feedback
        ],
        "reward": None if ep.reward is None else _reward_json(ep.reward, final=ep.finalized_at is not None),
        "cut": cuts.entries,
    }
    plain: dict[str, Any] = _plain(document)
    return plain


def document_text(document: Mapping[str, Any]) -> str:
    """``document`` as the admin's download serves it: UTF-8 JSON, indented (``--json`` writes
    the same values, ASCII-escaped)."""
    return json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False) + "\n"


def _plain(value: Any) -> Any:
    """Plain JSON values: read-only mappings (free-form metadata and payloads may nest them) as
    objects, tuples as arrays."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def utc_time(value: datetime | None) -> str | None:
    """``value`` as ISO 8601 in UTC (``+00:00``); ``None`` stays ``None``."""
    return None if value is None else value.astimezone(UTC).isoformat()


def _decision(sel: Selection, bodies: Mapping[str, str] | None) -> dict[str, Any]:
    chosen_slot = {d.chosen_id: d for d in sel.slots}
    candidates = []
    # in the order the router offered them, as the log holds them: sorted (by kind and rank, as
    # the decision table shows them), a decision read back (episode_from_document) was another one
    for sc in sel.offered:
        draw = chosen_slot.get(sc.candidate.id)
        c = sc.candidate
        candidates.append(
            {
                **candidate_fields(sc),
                "p": probability_shown(sel, c.id, c.kind),
                "slot": draw.slot if draw else None,
                "chosen": draw is not None,
                "features": dict(sc.features),
                "metadata": dict(c.metadata),
                "usage": None
                if c.usage is None
                else {"times_chosen": c.usage.times_chosen, "times_helped": c.usage.times_helped},
                "created_at": utc_time(c.created_at),
            }
        )
    ctx = sel.context
    return {
        "id": sel.id,
        "created_at": utc_time(sel.created_at),
        "policy": sel.policy,
        "policy_version": sel.policy_version,
        "seed": sel.seed,
        "latency_ms": sel.latency_ms,
        "propensity": sel.propensity,
        "context": {
            "kinds": [k.value for k in ctx.kinds],
            "max_tokens": ctx.budget.max_tokens,
            "slots": {k.value: n for k, n in ctx.budget.slots.items()},
        },
        "candidates": candidates,
        "slots": [slot_fields(d) for d in sel.slots],
        "injected": injected_fields(sel, None if bodies is None else kept_body(bodies)),
        "stopped": [
            {"kind": d.kind.value, "slot": d.slot, "p": d.chosen_probability}
            for d in sel.slots
            if d.chosen_id == STOP_ID
        ],
    }


def _step(i: int, st: Step, cuts: Cuts) -> dict[str, Any]:
    return {
        "seq": st.seq,
        "kind": st.kind.value,
        "name": st.name,
        "status": st.status,
        "started_at": utc_time(st.started_at),
        "ms": st.latency_ms,
        "input_tokens": st.input_tokens,
        "output_tokens": st.output_tokens,
        "arguments": cuts.arguments(st.arguments, f"steps[{i}].arguments"),
        "result": cuts.text(st.result, f"steps[{i}].result"),
        "error": cuts.text(st.error, f"steps[{i}].error"),
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
        "scored_at": utc_time(q.scored_at),
    }


def _reward_json(reward: RewardBreakdown, *, final: bool) -> dict[str, Any]:
    c = reward.components
    return {
        "total": reward.total,
        "version": reward.version,
        "final": final,
        "decision_id": reward.decision_id,
        "components": c.as_dict(),
        "weights": reward.weights.as_dict(),
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
