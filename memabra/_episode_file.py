"""An episode document read back: the file ``memabra episodes show --json`` wrote, or the admin
view's "Download JSON" served, as the :class:`~memabra.Episode` it was made of, so a colleague
can debug or replay a turn from the file alone: record it in a scratch log as it was logged,
reward and finality included (``memabra.storage.open_log("sqlite:///scratch.db").log_episode(episode)``;
``open_log`` creates a new SQLite file with its schema, while ``RewardService.record`` would score the
reward afresh and leave it provisional) and open it there with ``memabra episodes show`` or the admin
view, or route its decision's context again.

What the episode does not hold is not restored: MemPO labels (kept beside the log), the whole of a
value the document cut (its ``cut`` list names them; the value read back is the cut one), and the
bodies its chosen skills and tools injected (the document's ``injected``; the scratch log, whose
registry never held them, shows them as not kept).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memabra._episode_document import EPISODE_FORMAT
from memabra._errors import InvalidRecordError
from memabra._record_fields import slot_from_fields
from memabra._records import (
    Budget,
    Candidate,
    CandidateKind,
    CandidateStats,
    Episode,
    Feedback,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    RoutingContext,
    ScoredCandidate,
    Selection,
    Step,
    StepKind,
)

__all__ = ["episode_from_document"]


def episode_from_document(doc: Mapping[str, Any]) -> Episode:
    """The episode ``doc`` (an :func:`~memabra._episode_document.episode_document`, as parsed
    JSON) holds. A document of another format, or one missing a key, is refused by name."""
    found = doc.get("format") if isinstance(doc, Mapping) else None
    if found != EPISODE_FORMAT:
        raise InvalidRecordError(
            f"not an episode document: its format is {found!r}, this memabra reads {EPISODE_FORMAT!r} "
            "(what `memabra episodes show ID --json FILE` writes and the admin's Download JSON serves)"
        )
    try:
        return _episode(doc)
    except InvalidRecordError:
        raise
    except KeyError as exc:
        raise InvalidRecordError(f"episode document {doc.get('id')!r} has no {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidRecordError(f"episode document {doc.get('id')!r} does not read as an episode: {exc}") from None


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _at(value: str) -> datetime:
    if not isinstance(value, str):
        raise InvalidRecordError(f"expected an ISO 8601 time, got {value!r}")
    return datetime.fromisoformat(value)


def _episode(doc: Mapping[str, Any]) -> Episode:
    user, thread, turn, query = doc["user"], doc["thread"], doc["turn"], doc["query"]
    reward = doc["reward"]
    used = doc["used_ids"]
    return Episode(
        user_id=user,
        query=query,
        selections=tuple(_selection(d, user, thread, turn, query) for d in doc["decisions"]),
        steps=tuple(_step(s) for s in doc["steps"]),
        answer=doc["answer"],
        thread_id=thread,
        turn=turn,
        id=doc["id"],
        created_at=_at(doc["created"]),
        reward=None if reward is None else _reward(reward),
        finalized_at=_time(doc["finalized_at"]),
        feedback=tuple(_feedback(f, doc["id"]) for f in doc["feedback"]),
        used_ids=None if used is None else frozenset(used),
        metadata=doc["metadata"],
    )


def _selection(d: Mapping[str, Any], user: str, thread: str | None, turn: int, query: str) -> Selection:
    ctx = d["context"]
    context = RoutingContext(
        query=query,
        user_id=user,
        thread_id=thread,
        turn=turn,
        kinds=tuple(CandidateKind(k) for k in ctx["kinds"]),
        budget=Budget(max_tokens=ctx["max_tokens"], slots={CandidateKind(k): n for k, n in ctx["slots"].items()}),
    )
    slots = tuple(slot_from_fields(s) for s in d["slots"])
    return Selection(
        context=context,
        offered=tuple(_scored(c) for c in d["candidates"]),
        slots=slots,
        policy=d["policy"],
        policy_version=d["policy_version"],
        seed=d["seed"],
        latency_ms=d["latency_ms"],
        id=d["id"],
        created_at=_at(d["created_at"]),
    )


def _scored(c: Mapping[str, Any]) -> ScoredCandidate:
    usage = c["usage"]
    candidate = Candidate(
        c["id"],
        CandidateKind(c["kind"]),
        c["text"],
        c["tokens"],
        c["metadata"],
        usage=None if usage is None else CandidateStats(usage["times_chosen"], usage["times_helped"]),
        created_at=_time(c["created_at"]),
    )
    return ScoredCandidate(candidate, c["features"], c["score"], c["rank"])


def _step(s: Mapping[str, Any]) -> Step:
    return Step(
        StepKind(s["kind"]),
        s["name"],
        seq=s["seq"],
        arguments=s["arguments"],
        result=s["result"],
        status=s["status"],
        error=s["error"],
        latency_ms=s["ms"],
        input_tokens=s["input_tokens"],
        output_tokens=s["output_tokens"],
        started_at=_at(s["started_at"]),
    )


def _feedback(f: Mapping[str, Any], episode_id: str) -> Feedback:
    return Feedback(
        episode_id,
        f["kind"],
        f["source"],
        f["payload"],
        decision_id=f["decision_id"],
        idempotency_key=f["idempotency_key"],
        received_at=_at(f["received_at"]),
        id=f["id"],
        late=f["late"],
    )


def _reward(r: Mapping[str, Any]) -> RewardBreakdown:
    return RewardBreakdown(
        RewardComponents(**r["components"]), RewardWeights(**r["weights"]), r["version"], r["decision_id"]
    )
