"""``MemabraMiddleware`` (langchain's ``create_agent``) and an async-only tool (as
langchain-mcp-adapters builds MCP tools) run by a sync ``invoke``: before, each call failed with
"StructuredTool does not support sync invocation", logged as the tool's error (a reward penalty,
the router learning to avoid a tool that works). Now a ``ConfigError`` says to use ``ainvoke``
before the call, nothing is logged for it, and the run goes on from its checkpoint with ``ainvoke``,
as with memabra's own agent (tests/runtime/test_changing_tools.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, ConfigError
from memabra._agent import build_session
from memabra._middleware import MemabraMiddleware
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog


def _mcp_tool() -> StructuredTool:
    async def call(**arguments: Any) -> tuple[str, None]:
        return "3 mails from bob", None

    schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    return StructuredTool(
        name="search_mail",
        description="Search the mail archive.",
        args_schema=schema,
        coroutine=call,
        response_format="content_and_artifact",
    )


def test_a_sync_run_of_an_async_only_tool_raises_clearly_and_goes_on_with_ainvoke(
    log: EpisodeLog, lexical: Similarity
) -> None:
    search = _mcp_tool()
    budget = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 0, CandidateKind.SKILL: 0, CandidateKind.TOOL: 5})
    session = build_session(tools=[search], db=log, router=HybridRouter(similarity=lexical), budget=budget)
    call = AIMessage("", tool_calls=[{"name": "search_mail", "args": {"query": "bob"}, "id": "c1"}])
    model = ScriptedChatModel(replies=[call, AIMessage("3 mails.")])
    agent = create_agent(model, tools=[search], middleware=[MemabraMiddleware(session)], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    context = {"user_id": "ann"}

    with pytest.raises(ConfigError, match="'search_mail' has only an async implementation.*ainvoke"):
        agent.invoke({"messages": [HumanMessage("any mail from bob?")]}, config, context=context)
    assert not log.list_episodes().items  # no episode logged with a failed call the tool never made

    out = asyncio.run(agent.ainvoke(None, config, context=context))  # the retry from the checkpoint
    assert out["messages"][-1].content == "3 mails."
    ep = log.get_episode(out["memabra_episode_id"])
    assert [(s.name, s.status, s.result) for s in ep.steps if s.kind.value == "tool"] == [
        ("search_mail", "ok", "3 mails from bob")
    ]
