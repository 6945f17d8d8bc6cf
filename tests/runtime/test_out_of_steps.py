"""A run of an application's own graph (``MemabraNodes``, or ``create_agent`` with the
middleware) that meets its ``recursion_limit`` mid-turn raises ``GraphRecursionError``;
``MemabraAgent`` logs the run's turn as failed instead of leaving it running, to read lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
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


def test_a_run_without_a_thread_id_keeps_its_turn_running(log: EpisodeLog) -> None:
    """Nothing tells this run's turn from another's: it is left as any run that raised leaves it."""
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    graph = create_agent(_looping(10), tools=[get_weather], middleware=[MemabraMiddleware(session)])
    with pytest.raises(GraphRecursionError):
        MemabraAgent(graph, session).invoke(
            {"messages": [HumanMessage("weather in Lyon?")]}, {"recursion_limit": 6}, context=USER
        )
    assert log.count_episodes() == 0 and len(log.suspended_turns()) == 1
