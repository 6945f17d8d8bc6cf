"""Runs that go on from a checkpoint where the process serving them never saw them start: resumed
after an interrupt in another worker (or before a restart), or retried after the model raised. And
the rest of a compiled graph's API on the built-in agent, and a raising model behind the middleware."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind
from memabra._agent import build_session, create_memabra_agent
from memabra._middleware import MemabraMiddleware
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

USER = {"user_id": "ann"}
ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})


@tool
def send_email(to: str) -> str:
    """Send an email to someone, once a person has approved it."""
    return f"sent to {to}" if interrupt({"approve": to}) else "cancelled"


def _email_call() -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": "bob"}, "id": "e1"}])


def _worker(log: EpisodeLog, lexical, tools: list, replies: list, saver: InMemorySaver):  # type: ignore[no-untyped-def]
    """One serving process: its own agent (and so its own turns in flight) on the shared log and checkpointer."""
    model = ScriptedChatModel(replies=replies)
    return create_memabra_agent(
        model, tools=tools, db=log, router=HybridRouter(similarity=lexical), budget=ALL_TOOLS, checkpointer=saver
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_interrupted_in_one_worker_resumes_in_another(log: EpisodeLog, lexical, mode: str) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
    first = _worker(log, lexical, [send_email], [_email_call()], saver)
    paused = first.invoke({"messages": [HumanMessage("Email bob please")]}, config)
    assert paused["__interrupt__"]
    other = _worker(log, lexical, [send_email], [AIMessage("Sent it.")], saver)
    if mode == "sync":
        out = other.invoke(Command(resume=True), config)
    else:
        out = asyncio.run(other.ainvoke(Command(resume=True), config))
    assert out["messages"][-1].content == "Sent it."
    (summary,) = log.list_episodes().items
    ep = log.get_episode(out["memabra_episode_id"])
    assert summary.id == ep.id
    # one episode holds the whole turn: the first worker's model call and routing decision, the
    # approved call and the reply
    assert [(s.kind.value, s.name, s.status, s.result) for s in ep.steps] == [
        ("model", "ScriptedChatModel", "ok", None),
        ("tool", "send_email", "ok", "sent to bob"),
        ("model", "ScriptedChatModel", "ok", None),
    ]
    assert ep.selections and ep.selections[0].propensity > 0 and ep.user_id == "ann" and ep.thread_id == "mail"
    assert "tool:send_email" in ep.selections[0].chosen_ids
    assert log.suspended_turn(paused["memabra_turn"]) is None  # logged, so no longer kept as paused


def _raises(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
    raise RuntimeError("provider 500")


def test_a_run_whose_model_raised_can_be_retried_from_its_checkpoint(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = _worker(log, lexical, tools, [_raises, AIMessage("Sunny.")], InMemorySaver())
    config = {"configurable": {"thread_id": "r1"}}
    with pytest.raises(RuntimeError, match="provider 500"):
        agent.invoke({"messages": [HumanMessage("What's the weather?")]}, config, context=USER)
    assert agent.get_state(config).next == ("agent",)
    out = agent.invoke(None, config, context=USER)  # LangGraph's retry: go on from the failed node
    assert out["messages"][-1].content == "Sunny."
    failed, retried = sorted(log.list_episodes().items, key=lambda e: e.id != out["memabra_episode_id"])[::-1]
    assert retried.id == out["memabra_episode_id"] and failed.id != retried.id
    assert [s.status for s in log.get_episode(failed.id).steps] == ["error"]
    assert [s.status for s in log.get_episode(retried.id).steps] == ["ok"]


def test_the_agent_offers_the_rest_of_the_compiled_graph_s_api(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = _worker(log, lexical, tools, [AIMessage("Hi.")], InMemorySaver())
    config: Any = {"configurable": {"thread_id": "api", "user_id": "ann"}}

    async def events() -> list[str]:
        return [e["event"] async for e in agent.astream_events({"messages": [HumanMessage("hello")]}, config)]

    assert "on_chat_model_end" in asyncio.run(events())
    assert len(list(agent.get_state_history(config))) > 1
    (out,) = agent.batch([{"messages": [HumanMessage("hi")]}], [{"configurable": {"thread_id": "b", "user_id": "bob"}}])
    assert log.get_episode(out["memabra_episode_id"]).user_id == "bob"
    agent.update_state(config, {"messages": [HumanMessage("edited")]})
    assert asyncio.run(agent.aget_state(config)).values["messages"][-1].content == "edited"
    with pytest.raises(AttributeError):
        agent.no_such_method  # noqa: B018


def test_a_raising_model_behind_the_middleware_logs_the_turn_as_failed(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    session = build_session(tools=tools, db=log, router=HybridRouter(similarity=lexical))
    middleware = MemabraMiddleware(session)
    model = ScriptedChatModel(replies=[_raises, AIMessage("Sunny.")])
    agent = create_agent(model, tools=tools, middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "m1"}}
    with pytest.raises(RuntimeError, match="provider 500"):
        agent.invoke({"messages": [HumanMessage("I live in Lyon. Weather?")]}, config, context=USER)
    (summary,) = log.list_episodes().items
    ep = log.get_episode(summary.id)
    assert [(s.kind.value, s.status, s.error) for s in ep.steps] == [("model", "error", "RuntimeError: provider 500")]
    assert ep.reward is not None and ep.reward.components.s == 0.0
    assert [m.text for m in session.memory.items("ann")] == ["I live in Lyon"]
    out = agent.invoke(None, config, context=USER)  # retried from the checkpoint: a new turn
    assert out["messages"][-1].content == "Sunny." and out["memabra_episode_id"] != summary.id
    assert [s.status for s in log.get_episode(out["memabra_episode_id"]).steps] == ["ok"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_middleware_run_interrupted_in_one_worker_resumes_in_another(log: EpisodeLog, lexical, mode: str) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "mail", "user_id": "ann"}}

    def worker(replies: list) -> tuple[Any, MemabraMiddleware]:  # type: ignore[type-arg]
        middleware = MemabraMiddleware(build_session(tools=[send_email], db=log, budget=ALL_TOOLS))
        model = ScriptedChatModel(replies=replies)
        return create_agent(model, tools=[send_email], middleware=[middleware], checkpointer=saver), middleware

    first, _ = worker([_email_call()])
    other, middleware = worker([AIMessage("Sent it.")])
    if mode == "sync":
        assert first.invoke({"messages": [HumanMessage("Email bob please")]}, config)["__interrupt__"]
        out = other.invoke(Command(resume=True), config)
    else:
        assert asyncio.run(first.ainvoke({"messages": [HumanMessage("Email bob please")]}, config))["__interrupt__"]
        out = asyncio.run(other.ainvoke(Command(resume=True), config))
    ep = log.get_episode(out["memabra_episode_id"])
    assert [(s.kind.value, s.name, s.status, s.result) for s in ep.steps] == [
        ("model", "ScriptedChatModel", "ok", None),
        ("tool", "send_email", "ok", "sent to bob"),
        ("model", "ScriptedChatModel", "ok", None),
    ]
    assert len(log.list_episodes().items) == 1
    assert not middleware.session._turns._turns  # finished, not left in flight
