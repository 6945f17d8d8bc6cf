"""A turn in flight as a JSON document, and back: what a paused turn is kept as in the log, so
another process can go on with the same selection, propensities, steps and episode id.

Floats are written as JSON numbers (Python writes the shortest text that reads back to the same
float, and both backends keep that text), so a resumed turn logs exactly what was drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memabra._errors import InvalidRecordError
from memabra._record_fields import slot_fields, slot_from_fields
from memabra._records import (
    Budget,
    Candidate,
    CandidateKind,
    CandidateStats,
    Feedback,
    RoutingContext,
    ScoredCandidate,
    Selection,
    Step,
)
from memabra._turns import Turn, jsonable

__all__ = ["DOCUMENT_VERSION", "turn_document", "turn_from_document"]

# bumped when the layout changes; a document of another version is refused by name
DOCUMENT_VERSION = 1


def turn_document(turn: Turn, elapsed_ms: float) -> dict[str, Any]:
    """``turn`` as JSON-ready values; ``elapsed_ms`` is the time it has run so far (the pause it is
    kept through is not the turn's latency)."""
    # metadata, arguments and payloads are read-only mappings: plain JSON values for the column
    document: dict[str, Any] = jsonable(
        {
            "version": DOCUMENT_VERSION,
            "id": turn.id,
            "episode_id": turn.episode_id,
            "user_id": turn.user_id,
            "thread_id": turn.thread_id,
            "turn": turn.turn,
            "query": turn.query,
            "system_prompt": turn.system_prompt,
            "tool_names": list(turn.tool_names),
            "elapsed_ms": elapsed_ms,
            "pauses": turn.pauses,
            "selection": None if turn.selection is None else _selection(turn.selection),
            "steps": [_step(s) for s in list(turn.steps)],
            "feedback": [_feedback(f) for f in list(turn.feedback)],
        }
    )
    return document


def turn_from_document(doc: Mapping[str, Any], started: float) -> Turn:
    """The turn ``doc`` holds, its clock set as if it had started at ``started`` (perf counter)."""
    version = doc.get("version")
    if version != DOCUMENT_VERSION:
        raise InvalidRecordError(
            f"paused turn {doc.get('id')!r} was kept in document version {version!r}; this memabra reads "
            f"version {DOCUMENT_VERSION}"
        )
    selection = doc["selection"]
    return Turn(
        id=doc["id"],
        user_id=doc["user_id"],
        thread_id=doc["thread_id"],
        turn=doc["turn"],
        query=doc["query"],
        selection=None if selection is None else _selection_from(selection),
        system_prompt=doc["system_prompt"],
        tool_names=tuple(doc["tool_names"]),
        started=started - doc["elapsed_ms"] / 1000.0,
        steps=[_step_from(s) for s in doc["steps"]],
        feedback=[_feedback_from(f) for f in doc["feedback"]],
        episode_id=doc["episode_id"],
        pauses=doc["pauses"],
        kept_in_log=True,
    )


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _time_from(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _selection(sel: Selection) -> dict[str, Any]:
    ctx = sel.context
    return {
        "context": {
            "query": ctx.query,
            "user_id": ctx.user_id,
            "thread_id": ctx.thread_id,
            "turn": ctx.turn,
            "kinds": [k.value for k in ctx.kinds],
            "max_tokens": ctx.budget.max_tokens,
            "slots": {k.value: n for k, n in ctx.budget.slots.items()},
        },
        "offered": [_scored(sc) for sc in sel.offered],
        "slots": [slot_fields(d) for d in sel.slots],
        "policy": sel.policy,
        "policy_version": sel.policy_version,
        "seed": sel.seed,
        "latency_ms": sel.latency_ms,
        "id": sel.id,
        "created_at": _time(sel.created_at),
    }


def _selection_from(doc: Mapping[str, Any]) -> Selection:
    ctx = doc["context"]
    context = RoutingContext(
        query=ctx["query"],
        user_id=ctx["user_id"],
        thread_id=ctx["thread_id"],
        turn=ctx["turn"],
        kinds=tuple(CandidateKind(k) for k in ctx["kinds"]),
        budget=Budget(max_tokens=ctx["max_tokens"], slots={CandidateKind(k): n for k, n in ctx["slots"].items()}),
    )
    slots = tuple(slot_from_fields(d) for d in doc["slots"])
    created_at = _time_from(doc["created_at"])
    assert created_at is not None
    return Selection(
        context=context,
        offered=tuple(_scored_from(sc) for sc in doc["offered"]),
        slots=slots,
        policy=doc["policy"],
        policy_version=doc["policy_version"],
        seed=doc["seed"],
        latency_ms=doc["latency_ms"],
        id=doc["id"],
        created_at=created_at,
    )


def _scored(sc: ScoredCandidate) -> dict[str, Any]:
    c = sc.candidate
    return {
        "id": c.id,
        "kind": c.kind.value,
        "text": c.text,
        "tokens": c.tokens,
        "metadata": dict(c.metadata),
        "usage": None if c.usage is None else [c.usage.times_chosen, c.usage.times_helped],
        "created_at": _time(c.created_at),
        "features": dict(sc.features),
        "score": sc.score,
        "rank": sc.rank,
    }


def _scored_from(doc: Mapping[str, Any]) -> ScoredCandidate:
    usage = doc["usage"]
    candidate = Candidate(
        doc["id"],
        CandidateKind(doc["kind"]),
        doc["text"],
        doc["tokens"],
        doc["metadata"],
        usage=None if usage is None else CandidateStats(usage[0], usage[1]),
        created_at=_time_from(doc["created_at"]),
    )
    return ScoredCandidate(candidate, doc["features"], doc["score"], doc["rank"])


def _step(step: Step) -> dict[str, Any]:
    return {
        "kind": step.kind.value,
        "name": step.name,
        "seq": step.seq,
        "arguments": dict(step.arguments),
        "result": step.result,
        "status": step.status,
        "error": step.error,
        "latency_ms": step.latency_ms,
        "input_tokens": step.input_tokens,
        "output_tokens": step.output_tokens,
        "started_at": _time(step.started_at),
    }


def _step_from(doc: Mapping[str, Any]) -> Step:
    fields = dict(doc)
    fields["started_at"] = _time_from(doc["started_at"])
    return Step(**fields)


def _feedback(f: Feedback) -> dict[str, Any]:
    return {
        "episode_id": f.episode_id,
        "kind": f.kind.value,
        "source": f.source,
        "payload": dict(f.payload),
        "decision_id": f.decision_id,
        "idempotency_key": f.idempotency_key,
        "received_at": _time(f.received_at),
        "id": f.id,
        "late": f.late,
    }


def _feedback_from(doc: Mapping[str, Any]) -> Feedback:
    fields = dict(doc)
    fields["received_at"] = _time_from(doc["received_at"])
    return Feedback(**fields)
