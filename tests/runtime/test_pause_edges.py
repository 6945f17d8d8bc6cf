"""Pauses at the edges: a tool call that ends after a sibling call's interrupt paused the turn, a run
resumed before its turn is logged after an operator abandoned the turn, and an agent paused inside
a subgraph of a graph run as ``MemabraAgent``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, MemabraAgent
from memabra._agent import build_session, create_memabra_agent
from memabra._feedback import RewardService
from memabra._middleware import MemabraMiddleware
from memabra._paused_turns import abandon_paused_turn
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
CONFIG: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
APPROVE = Command(resume={"decisions": [{"type": "approve"}]})


@tool
def look_up(name: str) -> str:
    """Look up someone's address (slow)."""
    time.sleep(0.3)
    return f"{name}@example.com"


@tool
def send_email(to: str) -> str:
    """Send an email to someone, once a person has approved it."""
    return f"sent to {to}" if interrupt({"approve": to}) else "cancelled"


@tool
def send_note(to: str) -> str:
    """Send a note to someone."""
    return f"note to {to}"


def _middleware_agent(log: EpisodeLog, tools: list[Any], replies: list[Any], saver: Any, **hitl: Any) -> MemabraAgent:
    middleware = MemabraMiddleware(build_session(tools=tools, db=log, budget=ALL_TOOLS))
    extra = [HumanInTheLoopMiddleware(interrupt_on=hitl["interrupt_on"])] if hitl else []
    graph = create_agent(
        ScriptedChatModel(replies=replies), tools=tools, middleware=[middleware, *extra], checkpointer=saver
    )
    return MemabraAgent(graph, middleware.session)


def _only_episode(log: EpisodeLog) -> Any:
    (summary,) = log.list_episodes().items
    return log.get_episode(summary.id)


def test_a_call_that_ends_after_its_sibling_paused_the_turn_is_kept_with_it(log: EpisodeLog) -> None:
    """create_agent runs each call as its own task; LangGraph keeps the slow call's answer and does
    not run it again on resume, so the worker that goes on has only the log's copy of its step."""
    saver = InMemorySaver()
    both = AIMessage(
        "",
        tool_calls=[
            {"name": "look_up", "args": {"name": "bob"}, "id": "a"},
            {"name": "send_email", "args": {"to": "bob"}, "id": "b"},
        ],
    )
    paused = _middleware_agent(log, [look_up, send_email], [both], saver).invoke(
        {"messages": [HumanMessage("Find bob's address and email him")]}, CONFIG
    )
    assert paused["__interrupt__"]
    other = _middleware_agent(log, [look_up, send_email], [AIMessage("Done.")], saver)
    done = other.invoke(Command(resume=True), CONFIG)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id
    assert sorted((s.name, s.result) for s in episode.steps if s.kind.value == "tool") == [
        ("look_up", "bob@example.com"),
        ("send_email", "sent to bob"),
    ]


@pytest.mark.parametrize("where", ["same worker", "other worker"])
def test_a_run_resumed_after_its_turn_was_abandoned_ends_without_logging_it_again(
    log: EpisodeLog, lexical, where: str, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """The operator logged the turn as failed (`memabra episodes paused --abandon`); the approval
    comes after all. The run ends with its answer instead of raising at its last node, the decision
    stays logged once, and the run names no episode of its own (not the previous turn's)."""
    saver = InMemorySaver()

    def worker(replies: list[Any]) -> MemabraAgent:
        model = ScriptedChatModel(replies=replies)
        return create_memabra_agent(
            model,
            tools=[send_note],
            db=log,
            router=HybridRouter(similarity=lexical),
            budget=ALL_TOOLS,
            checkpointer=saver,
        )

    first = worker([AIMessage("Hello."), AIMessage("Hello again.")])
    earlier = first.invoke({"messages": [HumanMessage("Hi")]}, CONFIG)["memabra_episode_id"]
    first.invoke({"messages": [HumanMessage("Hi there")]}, CONFIG, interrupt_after=["agent"])
    (kept,) = log.suspended_turns()
    abandoned = abandon_paused_turn(RewardService(log), kept)
    resumer = first if where == "same worker" else worker([])
    done = resumer.invoke(None, CONFIG)
    assert done["messages"][-1].content == "Hello again."
    assert done.get("memabra_episode_id") not in (earlier, abandoned)
    assert sorted(e.id for e in log.list_episodes().items) == sorted([earlier, abandoned])
    assert "abandoned" in caplog.text or "no routing decision" in caplog.text


def test_the_middleware_resumed_after_its_turn_was_abandoned_ends_without_raising(log: EpisodeLog) -> None:
    saver = InMemorySaver()
    ask = {"messages": [HumanMessage("Email bob please")]}
    call = AIMessage("", tool_calls=[{"name": "send_note", "args": {"to": "bob"}, "id": "n1"}])
    first = _middleware_agent(log, [send_note], [call], saver, interrupt_on={"send_note": True})
    assert first.invoke(ask, CONFIG)["__interrupt__"]
    (kept,) = log.suspended_turns()
    abandon_paused_turn(RewardService(log), kept)
    other = _middleware_agent(log, [send_note], [AIMessage("Sent.")], saver, interrupt_on={"send_note": True})
    done = other.invoke(APPROVE, CONFIG)
    assert done["messages"][-1].content == "Sent."
    assert len(log.list_episodes().items) == 2  # the abandoned turn, and the approved calls routed anew


def test_an_agent_paused_inside_a_subgraph_resumes_whole_in_another_worker(log: EpisodeLog) -> None:
    saver = InMemorySaver()
    call = AIMessage("", tool_calls=[{"name": "send_note", "args": {"to": "bob"}, "id": "n1"}])

    def worker(replies: list[Any]) -> MemabraAgent:
        inner = _middleware_agent(log, [send_note], replies, None, interrupt_on={"send_note": True})
        builder = StateGraph(MessagesState)
        builder.add_node("assistant", inner.graph)
        builder.add_edge(START, "assistant")
        builder.add_edge("assistant", END)
        return MemabraAgent(builder.compile(checkpointer=saver), inner.session)

    assert worker([call]).invoke({"messages": [HumanMessage("Note bob please")]}, CONFIG)["__interrupt__"]
    (kept,) = log.suspended_turns()
    done = worker([AIMessage("Sent.")]).invoke(APPROVE, CONFIG)
    assert done["messages"][-1].content == "Sent."
    episode = _only_episode(log)
    assert episode.id == kept.episode_id
    assert [(s.name, s.result) for s in episode.steps] == [
        ("ScriptedChatModel", None),
        ("send_note", "note to bob"),
        ("ScriptedChatModel", None),
    ]
