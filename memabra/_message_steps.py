"""Steps a retried turn takes back from its run's messages: the log's copy of a turn is written
when it is routed and at each pause, not at every step, so the steps a process made before it died
are in the run's checkpointed messages only. Its own module, as it reads LangChain messages: the
CLI imports the turn table and must not load LangChain at start-up."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from memabra._graph_io import content_text, token_usage
from memabra._log_caps import cut_text
from memabra._records import Episode, Step, StepKind
from memabra._turns import Turn, model_step, tool_step
from memabra.storage import clean_text

__all__ = ["ended_in", "missing_steps", "take_back_steps"]

logger = logging.getLogger("memabra")


def take_back_steps(t: Turn, messages: Sequence[Any]) -> None:
    """Add to ``t``, a turn taken back from the log's copy, the steps its run's ``messages`` show
    and the copy lacks (made after the copy was written, by a process that then died): at no write."""
    recovered = missing_steps(t.steps, messages)
    if recovered:
        t.steps.extend(recovered)
        logger.info("turn %s: %d step(s) taken back from its run's messages", t.id, len(recovered))


def missing_steps(kept: Sequence[Step], messages: Sequence[Any]) -> list[Step]:
    """The steps the turn's messages (those after its user message, as the run's checkpoint holds
    them) show and ``kept`` lacks: a retry from the checkpoint of a run whose process died goes on
    with the copy written when the turn was routed (or last paused), while the replies and tool
    results of the steps made since are in the checkpointed messages. Each reply is a model call,
    each ToolMessage a tool call (an error one failed); ``kept`` holds the first of each kind (tool
    calls: of each name), in order. Their latency is not in the messages: 0."""
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not humans:
        return []
    model_name = next((s.name for s in kept if s.kind is StepKind.MODEL), None)
    calls: dict[str, Mapping[str, Any]] = {}
    shown: list[Step] = []
    for m in messages[humans[-1] + 1 :]:
        if isinstance(m, AIMessage):
            calls.update({str(c["id"]): c for c in m.tool_calls})
            meta = m.response_metadata or {}
            name = model_name or meta.get("model_name") or meta.get("model") or "model"
            shown.append(model_step(str(name), 0.0, *token_usage(m)))
        elif isinstance(m, ToolMessage):
            call = calls.get(m.tool_call_id, {})
            args = call.get("args")
            text = content_text(m.content)
            failed = m.status == "error"
            error = text.removeprefix("Error: ") if failed else None  # as record_raised and refuse log it
            shown.append(
                tool_step(
                    str(m.name or call.get("name") or ""),
                    args if isinstance(args, Mapping) else {},
                    result=None if failed else text,
                    status="error" if failed else "ok",
                    error=error,
                    latency_ms=0.0,
                )
            )
    seen = Counter((s.kind, s.name if s.kind is StepKind.TOOL else "") for s in kept)
    missing: list[Step] = []
    for step in shown:
        key = (step.kind, step.name if step.kind is StepKind.TOOL else "")
        if seen[key]:
            seen[key] -= 1
        else:
            missing.append(step)
    return missing


def ended_in(episode: Episode, messages: Sequence[Any]) -> bool:
    """Whether ``messages``, a run's, hold the reply that ended ``episode``, a decision logged for
    the turn of their last user message: whether the run is that decision's own, gone on after its
    logging node (a retry of a run killed after it logged), rather than a fork of the thread from
    before its answer (a "Regenerate": :func:`~memabra._graph_steps.current_turn`), which the log's
    other decisions of the turn are too. Its answer (as the log keeps it) is the text of a reply
    since the user's message; a turn logged without one (its last calls cut off) holds as many
    replies as the episode logged model calls."""
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not humans:
        return True  # nothing tells the turn's branches apart
    replies = [m for m in messages[humans[-1] + 1 :] if isinstance(m, AIMessage)]
    if episode.answer:
        return any(clean_text(cut_text(content_text(m.content)) or "") == episode.answer for m in replies)
    return len(replies) >= sum(s.kind is StepKind.MODEL for s in episode.steps)
