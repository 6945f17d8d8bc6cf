"""The same loop behind langchain's create_agent, through MemabraMiddleware, and as plain nodes."""

from __future__ import annotations

import asyncio
import time

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage

from factories import route_model_finish
from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind
from memabra._agent import build_session
from memabra._middleware import MemabraMiddleware, MemabraNodes, MemabraNodeState
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog


def test_create_agent_with_middleware_is_routed_and_logged_the_same_way(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    session = build_session(tools=tools, db=log, router=HybridRouter(similarity=lexical), budget=Budget(max_tokens=400))
    session.memory.remember("ann", "I live in Lyon")
    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[{"name": "get_forecast", "args": {"city": ""}, "id": "c1"}]),
            AIMessage("Could not fetch it for Lyon."),
        ]
    )
    agent = create_agent(model, tools=tools, system_prompt="Be brief.", middleware=[MemabraMiddleware(session)])
    out = agent.invoke(
        {"messages": [HumanMessage("What is the weather forecast where I live?")]}, context={"user_id": "ann"}
    )
    ep = session.log.get_episode(out["memabra_episode_id"])
    sel = ep.selections[0]
    assert {c.kind for c in (sc.candidate for sc in sel.offered)} == {CandidateKind.MEMORY, CandidateKind.TOOL}
    assert [(s.kind.value, s.status) for s in ep.steps] == [("model", "ok"), ("tool", "error"), ("model", "ok")]
    assert ep.reward is not None and ep.reward.components.e > 0
    system, bound = model.calls[0][0][0].content, model.calls[0][1]
    assert system.startswith("Be brief.") and "I live in Lyon" in system
    assert set(bound) == {c.metadata["name"] for c in sel.chosen if c.kind is CandidateKind.TOOL}

    later = asyncio.run(agent.ainvoke({"messages": [HumanMessage("And tomorrow?")]}, context={"user_id": "ann"}))
    assert session.log.get_episode(later["memabra_episode_id"]).steps


def test_nodes_add_routing_to_any_state_graph(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    session = build_session(tools=tools, db=log, router=HybridRouter(similarity=lexical))
    session.memory.remember("ann", "My name is Ann")
    nodes = MemabraNodes(session)
    seen: dict[str, object] = {}

    def model_node(state: MemabraNodeState) -> dict:  # type: ignore[type-arg]
        seen["system"] = nodes.system_prompt(state)
        seen["tools"] = [t.name for t in nodes.tools(state, tools)]
        started = time.perf_counter()
        reply = AIMessage("Hello Ann", usage_metadata={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5})
        nodes.record_model_call(state, reply, (time.perf_counter() - started) * 1000)
        return {"messages": [reply]}

    builder = route_model_finish(MemabraNodeState, nodes, model_node)
    out = builder.compile().invoke({"messages": [HumanMessage("what is my name")]}, context={"user_id": "ann"})
    ep = session.log.get_episode(out["memabra_episode_id"])
    assert "My name is Ann" in str(seen["system"])
    assert ep.steps[0].input_tokens == 3


def test_a_raising_tool_is_logged_with_its_episode(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    """create_agent lets the exception end the run; the failed call and the episode are logged first."""
    import pytest

    session = build_session(tools=tools, db=log, router=HybridRouter(similarity=lexical), budget=Budget(max_tokens=400))
    model = ScriptedChatModel(
        replies=[AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": ""}, "id": "c1"}])]
    )
    agent = create_agent(model, tools=tools, middleware=[MemabraMiddleware(session)])
    with pytest.raises(ValueError, match="city is required"):
        agent.invoke({"messages": [HumanMessage("What is the weather?")]}, context={"user_id": "ann"})
    (summary,) = session.log.list_episodes().items
    ep = session.log.get_episode(summary.id)
    assert [(s.kind.value, s.name, s.status) for s in ep.steps] == [
        ("model", "ScriptedChatModel", "ok"),
        ("tool", "get_weather", "error"),
    ]
    assert "ValueError: city is required" in (ep.steps[1].error or "")
    assert ep.reward is not None and ep.reward.components.e > 0
    assert ep.reward.components.s == 0.0  # a turn ended by an exception is a failed turn


def test_a_tool_the_turn_was_not_given_is_refused_not_run(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    """The middleware hides unrouted tools from the model; a call to one anyway is refused as the
    built-in agent refuses it (sync and async), never run and logged as ok."""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        ran.append(city)
        return "rain"

    no_tools = Budget(max_tokens=400, slots={CandidateKind.MEMORY: 2})
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=lexical), budget=no_tools)
    call = AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "c3"}])
    model = ScriptedChatModel(replies=[call, AIMessage("ok"), call, AIMessage("ok")])
    agent = create_agent(model, tools=[get_weather], middleware=[MemabraMiddleware(session)])
    text = {"messages": [HumanMessage("umbrella in Oslo?")]}
    for out in (
        agent.invoke(text, context={"user_id": "ann"}),
        asyncio.run(agent.ainvoke(text, context={"user_id": "ann"})),
    ):
        assert model.calls[-2][1] == []  # hidden from the model
        (reply,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert reply.status == "error" and reply.content == "Error: tool 'get_weather' is not available in this turn"
        ep = session.log.get_episode(out["memabra_episode_id"])
        assert [(s.name, s.status, s.result, s.error) for s in ep.steps if s.kind.value == "tool"] == [
            ("get_weather", "error", None, "tool 'get_weather' is not available in this turn")
        ]
    assert ran == []
