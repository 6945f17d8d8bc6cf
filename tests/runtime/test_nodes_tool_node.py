"""``MemabraNodes.tool_node``: an application's own graph runs its tools the way the built-in
agent does, each call checked against the turn's routed tools and logged (a TypedDict or a pydantic
state, sync or async, parallel calls, an interrupt inside a tool)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import tools_condition
from langgraph.types import Command, interrupt
from pydantic import BaseModel, Field
from runtime.conftest import get_weather

from fakes import ScriptedChatModel
from memabra import MemabraAgent, MemabraNodes, MemabraNodeState
from memabra._agent import build_session
from memabra._session import RoutingSession
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

USER = {"user_id": "ann"}
REFUSED = "tool 'refund' is not available in this turn"


@tool
def refund(order: str) -> str:
    """Refund an order's payment."""
    raise AssertionError("a tool the router left out must not run")


class PydanticState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)
    memabra_turn: str | None = None
    memabra_episode_id: str | None = None


def _session(log: EpisodeLog, tools: list[Any]) -> RoutingSession:
    # refund is not in the session's registry: the router never gives it to a turn
    return build_session(tools=tools, db=log, router=HybridRouter(similarity=Similarity(encoder=None)))


def _graph(nodes: MemabraNodes, model: ScriptedChatModel, tools: list[Any], state: type, **compile: Any) -> Any:
    """The graph an application writes: its model node, its tools node, memabra's route and finish."""

    def call_model(state: Any) -> dict[str, Any]:
        messages = state["messages"] if isinstance(state, dict) else state.messages
        bound = model.bind_tools(nodes.tools(state, tools))
        started = time.perf_counter()
        reply = bound.invoke([SystemMessage(nodes.system_prompt(state)), *messages])
        nodes.record_model_call(state, reply, (time.perf_counter() - started) * 1000.0)
        return {"messages": [reply]}

    builder = StateGraph(state)
    builder.add_node("route", nodes.route)
    builder.add_node("model", call_model)
    builder.add_node("tools", nodes.tool_node(tools))
    builder.add_node("finish", nodes.finish)
    builder.add_edge(START, "route")
    builder.add_edge("route", "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: "finish"})
    builder.add_edge("tools", "model")
    builder.add_edge("finish", END)
    return builder.compile(**compile)


def _calls(*calls: tuple[str, dict[str, str]]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"c{i}"} for i, (n, a) in enumerate(calls)])


def _tool_steps(log: EpisodeLog, episode_id: str) -> list[tuple[str, str, str | None]]:
    episode = log.get_episode(episode_id)
    return sorted((s.name, s.status, s.error) for s in episode.steps if s.kind.value == "tool")


def test_parallel_calls_are_logged_and_a_tool_the_turn_was_not_given_is_refused(log: EpisodeLog) -> None:
    session = _session(log, [get_weather])
    nodes = MemabraNodes(session)
    model = ScriptedChatModel(
        replies=[
            _calls(("get_weather", {"city": "Lyon"}), ("get_weather", {"city": ""}), ("refund", {"order": "1"})),
            AIMessage("Sunny in Lyon"),
        ]
    )
    graph = _graph(nodes, model, [get_weather, refund], MemabraNodeState)
    out = graph.invoke({"messages": [HumanMessage("weather in Lyon?")]}, context=USER)
    episode = log.get_episode(out["memabra_episode_id"])
    assert _tool_steps(log, episode.id) == [
        ("get_weather", "error", "ValueError: city is required"),  # raised: shown to the model, logged failed
        ("get_weather", "ok", None),
        ("refund", "error", REFUSED),
    ]
    assert all(s.latency_ms is not None for s in episode.steps)
    answers = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert answers["c2"].status == "error" and answers["c2"].content == f"Error: {REFUSED}"
    # the model named a tool it needed and the router left out
    assert any("tool:refund" in (f.payload.get("relevant_ids") or ()) for f in log.feedback_for(episode.id))
    assert episode.reward is not None and episode.reward.components.e > 0


def test_a_pydantic_state_run_async_logs_each_call(log: EpisodeLog) -> None:
    session = _session(log, [get_weather])
    nodes = MemabraNodes(session)
    model = ScriptedChatModel(
        replies=[_calls(("get_weather", {"city": "Lyon"}), ("refund", {"order": "1"})), AIMessage("Sunny")]
    )
    graph = _graph(nodes, model, [get_weather, refund], PydanticState)
    out = asyncio.run(graph.ainvoke({"messages": [HumanMessage("weather in Lyon?")]}, context=USER))
    assert _tool_steps(log, out["memabra_episode_id"]) == [("get_weather", "ok", None), ("refund", "error", REFUSED)]


def test_an_interrupt_inside_a_tool_keeps_the_turn_for_the_resumed_run(log: EpisodeLog) -> None:
    @tool
    def book_table(place: str) -> str:
        """Book a table at a restaurant, once a person approves."""
        answer = interrupt(f"book {place}?")
        return f"booked {place}" if answer == "yes" else "not booked"

    session = _session(log, [book_table])
    nodes = MemabraNodes(session)
    model = ScriptedChatModel(replies=[_calls(("book_table", {"place": "Chez Max"})), AIMessage("Booked.")])
    agent = MemabraAgent(_graph(nodes, model, [book_table], PydanticState, checkpointer=InMemorySaver()), session)
    config = {"configurable": {"thread_id": "book"}}
    first = agent.invoke({"messages": [HumanMessage("book a table at Chez Max")]}, config, context=USER)
    assert first["__interrupt__"] and log.count_episodes() == 0
    (turn_id,) = {agent.get_state(config).values["memabra_turn"]}
    routed = session.get_turn(turn_id).selection
    out = agent.invoke(Command(resume="yes"), config, context=USER)
    episode = log.get_episode(out["memabra_episode_id"])
    assert episode.selections == (routed,)  # the same decision, not routed again
    assert [(s.name, s.status, s.result) for s in episode.steps if s.kind.value == "tool"] == [
        ("book_table", "ok", "booked Chez Max")
    ]
    assert log.count_episodes() == 1
