"""Turns the runtime logs as failed (a model call that raised, a tool that raised, a run out of
its recursion_limit) are listed by their cause, as the runtime itself wrote it: the listing's
filter and its badge read the comment ``failure_reason`` writes, not a copy of its format."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.errors import GraphRecursionError
from runtime.conftest import get_weather
from runtime.test_nodes_tool_node import _calls

from fakes import ScriptedChatModel
from memabra import MemabraAgent
from memabra._agent import build_session
from memabra._middleware import MemabraMiddleware
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeFilter, EpisodeLog

USER = {"user_id": "ann"}


def _reply(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
    asked = str(messages[0].content)
    if "provider" in asked:
        raise RuntimeError("provider down")
    if "loop" in asked:
        return _calls(("get_weather", {"city": "Lyon"}))
    if "blank" in asked and len(messages) == 1:
        return _calls(("get_weather", {"city": " "}))  # the tool raises on a blank city
    return AIMessage("done")


def test_turns_the_runtime_logs_failed_are_listed_by_their_cause(log: EpisodeLog) -> None:
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    model = ScriptedChatModel(replies=[_reply] * 50)
    agent = MemabraAgent(create_agent(model, tools=[get_weather], middleware=[MemabraMiddleware(session)]), session)

    def ask(text: str, thread: str, **config: Any) -> None:
        agent.invoke(
            {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}, **config}, context=USER
        )

    with pytest.raises(RuntimeError):
        ask("is the provider up?", "model")
    with pytest.raises(GraphRecursionError):
        ask("loop on the weather", "steps", recursion_limit=6)
    with pytest.raises(ValueError, match="city is required"):
        ask("weather in blank?", "tool")
    ask("weather in Lyon?", "fine")

    def listed(flt: EpisodeFilter) -> list[tuple[str, str | None]]:
        return [(e.query, e.failure_cause) for e in log.list_episodes(flt).items]

    assert listed(EpisodeFilter(failure_cause="model_error")) == [("is the provider up?", "model_error")]
    assert listed(EpisodeFilter(failure_cause="recursion_limit")) == [("loop on the weather", "recursion_limit")]
    assert listed(EpisodeFilter(failure_cause="tool_error")) == [("weather in blank?", "tool_error")]
    assert listed(EpisodeFilter(failure_cause="superseded")) == []
    assert len(listed(EpisodeFilter(failed=True))) == 3
    assert listed(EpisodeFilter(failed=False)) == [("weather in Lyon?", None)]
