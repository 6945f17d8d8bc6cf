"""A run of an application's own graph (``MemabraNodes``, or ``create_agent`` with the
middleware) that meets its ``recursion_limit`` mid-turn raises ``GraphRecursionError``;
``MemabraAgent`` logs the run's turn as failed instead of leaving it running, to read lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from runtime.conftest import get_weather
from runtime.test_nodes_tool_node import PydanticState, _calls, _graph

from fakes import ScriptedChatModel
from memabra import MemabraAgent, MemabraNodes
from memabra._agent import build_session
from memabra._graph_steps import FAILED_TURN_SOURCE
from memabra._middleware import MemabraMiddleware
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

USER = {"user_id": "ann"}


def _looping(n: int) -> ScriptedChatModel:
    return ScriptedChatModel(replies=[_calls(("get_weather", {"city": "Lyon"})) for _ in range(n)] + [AIMessage("ok")])


def _assert_logged_failed(log: EpisodeLog, agent: MemabraAgent, thread_id: str) -> str:
    (summary,) = log.list_episodes().items
    episode = log.get_episode(summary.id)
    (failed,) = [f for f in episode.feedback if f.source == FAILED_TURN_SOURCE]
    # why it failed is in the episode, not only in a warning logged at the time
    assert failed.payload["accepted"] is False
    assert str(failed.payload["comment"]).startswith("recursion_limit: GraphRecursionError: Recursion limit of")
    assert episode.reward is not None and episode.reward.components.s == 0.0
    assert episode.selections  # its decision kept for offline evaluation
    assert not agent.session.running_turns(thread_id) and not log.suspended_turns()
    return episode.id


def test_a_nodes_graph_out_of_steps_logs_its_turn_failed_and_a_retry_routes_anew(log: EpisodeLog) -> None:
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    nodes = MemabraNodes(session)
    graph = _graph(nodes, _looping(4), [get_weather], PydanticState, checkpointer=InMemorySaver())
    agent = MemabraAgent(graph, session)
    config: dict[str, Any] = {"configurable": {"thread_id": "loop"}, "recursion_limit": 5}
    with pytest.raises(GraphRecursionError):
        agent.invoke({"messages": [HumanMessage("weather in Lyon?")]}, config, context=USER)
    failed = _assert_logged_failed(log, agent, "loop")
    assert [s.kind.value for s in log.get_episode(failed).steps] == ["model", "tool", "model", "tool"]

    # a retry from the checkpoint with room to finish: a new decision, logged as its own episode
    out = agent.invoke(None, {**config, "recursion_limit": 50}, context=USER)
    assert out["memabra_episode_id"] != failed and log.count_episodes() == 2


def test_create_agent_with_the_middleware_streamed_async_without_a_checkpointer(log: EpisodeLog) -> None:
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    graph = create_agent(_looping(10), tools=[get_weather], middleware=[MemabraMiddleware(session)])
    agent = MemabraAgent(graph, session)
    config: dict[str, Any] = {"configurable": {"thread_id": "plain"}, "recursion_limit": 6}

    async def run() -> None:
        async for _ in agent.astream({"messages": [HumanMessage("weather in Lyon?")]}, config, context=USER):
            pass

    with pytest.raises(GraphRecursionError):
        asyncio.run(run())
    _assert_logged_failed(log, agent, "plain")


def test_a_run_without_a_thread_id_logs_its_turn_failed(log: EpisodeLog) -> None:
    """The usual stateless call: no retry can go on with its turn, which was kept running, read
    lost in an hour (``memabra status``: "their process died mid-turn") and got its reward only
    when an operator abandoned it. The run's own context tells its turn."""
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    graph = create_agent(_looping(10), tools=[get_weather], middleware=[MemabraMiddleware(session)])
    agent = MemabraAgent(graph, session)
    with pytest.raises(GraphRecursionError):
        agent.invoke({"messages": [HumanMessage("weather in Lyon?")]}, {"recursion_limit": 6}, context=USER)
    (summary,) = log.list_episodes().items
    episode = log.get_episode(summary.id)
    (failed,) = [f for f in episode.feedback if f.source == FAILED_TURN_SOURCE]
    assert str(failed.payload["comment"]).startswith("recursion_limit: GraphRecursionError")
    assert episode.selections and episode.thread_id is None
    assert not log.suspended_turns()


@tool
async def slow_weather(city: str) -> str:
    """Current weather for a city, from a slow service."""
    await asyncio.sleep(2.0 if city == "Paris" else 0.3)
    return f"sunny in {city}"


def _loops_or_answers(messages: list[Any], bound: list[str]) -> AIMessage:
    """Loops on Lyon's weather where the user says "loop"; else one (slower) call, then an answer."""
    asked = next(str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage))
    if "loop" in asked:
        return _calls(("slow_weather", {"city": "Lyon"}))
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("sunny")
    return _calls(("slow_weather", {"city": "Paris"}))


@pytest.mark.parametrize("thread_id", [None, "shared"])
def test_concurrent_runs_without_a_checkpointer_close_only_the_one_out_of_steps(
    log: EpisodeLog, thread_id: str | None
) -> None:
    """A server's concurrent stateless calls (or several runs of one thread id, no checkpointer):
    the run out of steps logs its own turn as failed, never the one still running beside it."""
    session = build_session(
        tools=[get_weather, slow_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None))
    )
    model = ScriptedChatModel(replies=[_loops_or_answers])
    graph = create_agent(model, tools=[get_weather, slow_weather], middleware=[MemabraMiddleware(session)])
    agent = MemabraAgent(graph, session)
    configurable = {} if thread_id is None else {"configurable": {"thread_id": thread_id}}

    async def run(text: str, limit: int) -> Any:
        config: Any = {**configurable, "recursion_limit": limit}
        return await agent.ainvoke({"messages": [HumanMessage(text)]}, config, context=USER)

    async def both() -> list[Any]:
        looping = asyncio.create_task(run("loop on Lyon", 6))
        await asyncio.sleep(0.1)  # routed, in its first call: the other begins while it runs, and outlives it
        return list(await asyncio.gather(looping, run("weather in Paris?", 50), return_exceptions=True))

    looped, answered = asyncio.run(both())
    assert isinstance(looped, GraphRecursionError), looped
    episodes = {e.id: log.get_episode(e.id) for e in log.list_episodes().items}
    assert len(episodes) == 2 and answered["memabra_episode_id"] in episodes
    ok = episodes.pop(answered["memabra_episode_id"])
    (failed_episode,) = episodes.values()
    assert not [f for f in ok.feedback if f.source == FAILED_TURN_SOURCE]
    (failed,) = [f for f in failed_episode.feedback if f.source == FAILED_TURN_SOURCE]
    assert str(failed.payload["comment"]).startswith("recursion_limit: GraphRecursionError")
    assert failed_episode.query == "loop on Lyon" and not log.suspended_turns()
