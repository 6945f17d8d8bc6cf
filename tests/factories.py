"""Builders of valid records for tests that don't need a real router."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
    Step,
    StepKind,
)
from memabra.storage import FinalReward, LearnerStore


def candidates(
    prefix: str = "m", n: int = 5, kind: CandidateKind = CandidateKind.MEMORY, tokens: int = 10
) -> list[Candidate]:
    return [
        Candidate(f"{prefix}{i}", kind, f"{kind.value} text {prefix}{i}", tokens, {"source": "test"}) for i in range(n)
    ]


def uniform_selection(
    user_id: str,
    offered: Sequence[Candidate],
    chosen: Sequence[str],
    *,
    query: str = "what is my name?",
    budget: Budget | None = None,
    stop: bool = True,
) -> Selection:
    """Fill slots one at a time with a uniform distribution over the remaining candidates of the
    same kind plus STOP; ends with a STOP draw when ``stop`` is set."""
    ctx = RoutingContext(
        query=query, user_id=user_id, kinds=tuple(dict.fromkeys(c.kind for c in offered)), budget=budget or Budget()
    )
    scored = tuple(ScoredCandidate(c, {"sim": 1.0 / (i + 1)}, 1.0 / (i + 1), i) for i, c in enumerate(offered))
    draws = []
    remaining = [c.id for c in offered]
    kind = offered[0].kind
    for slot, cid in enumerate(list(chosen) + ([STOP_ID] if stop else [])):
        ids = tuple(remaining) + (STOP_ID,)
        p = 1.0 / len(ids)
        draws.append(SlotDraw(slot, kind, ids, tuple([p] * len(ids)), cid, p))
        if cid != STOP_ID:
            remaining.remove(cid)
    return Selection(ctx, scored, tuple(draws), policy="uniform", policy_version="test-1", seed=7, latency_ms=1.5)


def episode(user_id: str = "u1", n: int = 5, chosen: Sequence[str] = ("m0", "m2"), **kwargs) -> Episode:  # type: ignore[no-untyped-def]
    cands = candidates(n=n)
    sel = uniform_selection(user_id, cands, chosen)
    steps = kwargs.pop(
        "steps", (Step(StepKind.MODEL, "fake-model", input_tokens=100, output_tokens=20, latency_ms=30.0),)
    )
    return Episode(
        user_id=user_id, query=sel.context.query, selections=(sel,), steps=tuple(steps), answer="Ann", **kwargs
    )


def readable_final_rewards(store: LearnerStore, *, at_least: int = 1, timeout_s: float = 30.0) -> list[FinalReward]:
    """``store.read_final()`` once it returns ``at_least`` rewards. On PostgreSQL a learner reads a
    reward only once every transaction older than its commit has ended, server-wide: another test
    holding one open on the shared server makes a first read come back short for a moment."""
    deadline = time.monotonic() + timeout_s
    while len(finals := store.read_final()) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(finals) >= at_least, f"{len(finals)} final reward(s) readable after {timeout_s:.0f} s, not {at_least}"
    return finals


def route_model_finish(state_schema: Any, nodes: Any, model_node: Any) -> Any:
    """The smallest graph of one's own around :class:`~memabra.MemabraNodes`:
    ``route -> model -> finish``, uncompiled (the caller picks the checkpointer and interrupts)."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(state_schema)
    builder.add_node("route", nodes.route)
    builder.add_node("model", model_node)
    builder.add_node("finish", nodes.finish)
    builder.add_edge(START, "route")
    builder.add_edge("route", "model")
    builder.add_edge("model", "finish")
    builder.add_edge("finish", END)
    return builder
