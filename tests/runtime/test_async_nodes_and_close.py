"""The async surface an application's own code calls: ``MemabraNodes``' async forms from an
``async def`` model node, and ``MemabraAgent.aclose`` / ``async with`` at a server's shutdown,
never run a statement on the event loop's thread (the slow-database seam of
``test_event_loop_stall``: each statement takes ``DELAY_S``, and one made on the loop is named)."""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from runtime.test_event_loop_stall import SlowLog, _router, slow_fixture  # noqa: F401 - the fixture slow, shared

from fakes import ScriptedChatModel
from memabra import MemabraAgent, MemabraNodes, MemabraNodeState, create_memabra_agent
from memabra._agent import build_session
from memabra.storage import EpisodeLog

CONFIG = {"configurable": {"thread_id": "t1"}}
USER = {"user_id": "ann"}


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def _weather_then_answer(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
    if any(m.type == "tool" for m in messages):
        return AIMessage("It is sunny.")
    return AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Lyon"}, "id": "w1"}])


def _process(name: str, log: EpisodeLog, saver: InMemorySaver, seen: list[tuple[str, str, list[str]]]) -> MemabraAgent:
    """Process ``name``'s graph of its own: route -> model (async) <-> tools -> finish, on the shared
    log and checkpointer; ``seen`` gets the process, system prompt and tools of each model call."""
    nodes = MemabraNodes(build_session(tools=[get_weather], db=log, router=_router()))
    model = ScriptedChatModel(replies=[_weather_then_answer])

    async def call_model(state: MemabraNodeState) -> dict[str, Any]:
        system = await nodes.asystem_prompt(state)
        tools = await nodes.atools(state, [get_weather])
        seen.append((name, system, [t.name for t in tools]))
        started = time.perf_counter()
        reply = await model.bind_tools(tools).ainvoke([("system", system or "-"), *state["messages"]])
        await nodes.arecord_model_call(state, reply, (time.perf_counter() - started) * 1000.0)
        return {"messages": [reply]}

    def after_model(state: MemabraNodeState) -> str:
        return "tools" if state["messages"][-1].tool_calls else "finish"

    builder = StateGraph(MemabraNodeState)
    builder.add_node("route", nodes.route)
    builder.add_node("model", call_model)
    builder.add_node("tools", nodes.tool_node([get_weather]))
    builder.add_node("finish", nodes.finish)
    builder.add_edge(START, "route")
    builder.add_edge("route", "model")
    builder.add_conditional_edges("model", after_model, ["tools", "finish"])
    builder.add_edge("tools", "model")
    builder.add_edge("finish", END)
    return MemabraAgent(builder.compile(checkpointer=saver), nodes.session)


def test_an_async_model_node_resumed_in_another_process_reads_the_log_off_the_event_loop(
    log: EpisodeLog, slow: SlowLog
) -> None:
    saver = InMemorySaver()
    seen: list[tuple[str, str, list[str]]] = []
    first, second = _process("first", log, saver, seen), _process("second", log, saver, seen)
    first.session.memory.remember("ann", "I live in Lyon")

    async def work() -> Any:
        paused = await first.ainvoke(
            {"messages": [HumanMessage("weather in Lyon?")]}, CONFIG, context=USER, interrupt_before=["model"]
        )
        assert "memabra_episode_id" not in paused  # stopped before the model: nothing logged yet
        # through the first model call and the tools, to before the second model call
        paused = await first.ainvoke(None, CONFIG, context=USER, interrupt_before=["model"])
        assert [m.type for m in paused["messages"]] == ["human", "ai", "tool"]
        # another process goes on: its model node's first read unpauses the turn from the log
        return await second.ainvoke(None, CONFIG, context=USER)

    try:
        out, worst = slow.measure(work)
        slow.assert_loop_free(worst)
        (_, system, tools), (went_on, *view) = seen
        assert went_on == "second" and view == [system, tools]  # the same decision went on, not routed again
        assert tools == ["get_weather"]
        episode = log.get_episode(out["memabra_episode_id"])
        assert [(s.kind.value, s.name) for s in episode.steps] == [
            ("model", "model"),
            ("tool", "get_weather"),
            ("model", "model"),
        ]
        assert len(episode.selections) == 1
        assert not log.suspended_turns() and log.count_episodes() == 1
    finally:
        first.close()
        second.close()


def test_a_model_call_recorded_async_for_a_paused_turn_is_kept_off_the_event_loop(
    log: EpisodeLog, slow: SlowLog
) -> None:
    # a parallel branch's interrupt paused the turn here: the model call's step goes to its copy in the log
    nodes = MemabraNodes(build_session(tools=[get_weather], db=log, router=_router()))
    turn = nodes.session.begin(user_id="ann", query="weather in Lyon?", thread_id="t1")
    nodes.session.suspend(turn.id)
    state = {"messages": [HumanMessage("weather in Lyon?")], "memabra_turn": turn.id}

    async def work() -> None:
        await nodes.arecord_model_call(state, AIMessage("It is sunny."), 12.0, name="gpt")

    try:
        _, worst = slow.measure(work)
        slow.assert_loop_free(worst)
        (kept,) = log.suspended_turns()
        assert kept.paused and [s["name"] for s in kept.document["steps"]] == ["gpt"]
    finally:
        nodes.session.close()


def test_aclose_and_async_with_close_the_agent_off_the_event_loop_once(log: EpisodeLog, slow: SlowLog) -> None:
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("Hello.")]), tools=[get_weather], db=log, router=_router()
    )
    out = agent.invoke({"messages": [HumanMessage("hello")]}, context=USER)
    agent.feedback(out["memabra_episode_id"], correct=True)  # learned: close has a snapshot to save

    async def work() -> None:
        async with agent as entered:
            assert entered is agent
        await agent.aclose()  # a second close does nothing, as close does

    _, worst = slow.measure(work)
    slow.assert_loop_free(worst)
    assert agent.session.runtime._closed
    agent.close()
