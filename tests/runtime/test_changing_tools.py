"""Tools that come from MCP servers (langchain-mcp-adapters gives ``StructuredTool`` objects whose
``args_schema`` is the server's JSON schema and which have only a coroutine) and change while the
agent runs: a tool without arguments, a huge schema, a sync run of an async-only tool, and a paused
run resumed by an agent rebuilt while a server is down. docs/configuration.md, "Tools that change
at run time", says what each case does."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from pydantic import BaseModel, Field

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, ConfigError
from memabra._agent import create_memabra_agent
from memabra._catalog import tool_items
from memabra._tool_search import REFUSED_SOURCE
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

TOOLS_ONLY = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 0, CandidateKind.SKILL: 0, CandidateKind.TOOL: 5})
ANN = {"configurable": {"user_id": "ann"}}


def _mcp_tool(name: str, description: str, schema: dict[str, Any], reply: str = "ok") -> StructuredTool:
    """A tool as langchain-mcp-adapters builds it: the server's inputSchema as args_schema, a
    coroutine only, content and artifact."""

    async def call(**arguments: Any) -> tuple[str, None]:
        return reply, None

    return StructuredTool(
        name=name, description=description, args_schema=schema, coroutine=call, response_format="content_and_artifact"
    )


def _call(name: str, args: dict[str, Any], call_id: str = "c1") -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def _agent(log: EpisodeLog, lexical: Similarity, tools: list[Any], replies: list[Any], **kwargs: Any) -> Any:
    kwargs.setdefault("budget", TOOLS_ONLY)
    model = ScriptedChatModel(replies=replies)
    agent = create_memabra_agent(model, tools=tools, db=log, router=HybridRouter(similarity=lexical), **kwargs)
    return agent, model


# ------------------------------------------------------------------ a tool without arguments


@pytest.mark.parametrize("schema", [{"type": "object"}, {"type": "object", "properties": {}}])
def test_an_mcp_tool_without_arguments_is_routed_bound_and_run(
    log: EpisodeLog, lexical: Similarity, schema: dict[str, Any]
) -> None:
    """``{"type": "object"}`` with no properties (a TypeScript MCP server's tool without arguments)
    refused the whole agent with "its parameter schema cannot be built ('properties')"."""
    list_repos = _mcp_tool("list_repos", "List the user's repositories.", schema, reply="memabra, notes")
    agent, model = _agent(log, lexical, [list_repos], [_call("list_repos", {}), AIMessage("You have two.")])
    (item,) = tool_items([list_repos])
    assert item.text == "list_repos: List the user's repositories. Parameters: none"
    assert json.loads(item.body)["function"]["parameters"] == schema  # sent to the model as the server gave it
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("list my repositories")]}, ANN))
    assert model.calls[0][1] == ["list_repos"]
    assert out["messages"][-1].content == "You have two."
    ep = log.get_episode(out["memabra_episode_id"])
    assert [(s.name, s.status, s.result) for s in ep.steps if s.kind.value == "tool"] == [
        ("list_repos", "ok", "memabra, notes")
    ]


def test_a_schema_that_is_not_an_object_is_still_refused_naming_the_tool() -> None:
    broken = _mcp_tool("broken", "A tool whose server sent no schema.", {})
    with pytest.raises(ConfigError, match="tool 'broken': its parameter schema cannot be built"):
        tool_items([broken])


# ------------------------------------------------------------------ huge schemas


class _Issue(BaseModel):
    title: str = Field(description="The issue's title, one line. " * 10)
    body: str = Field(description="The issue's body, in Markdown. " * 10)
    labels: list[str] = Field(description="Labels the repository already has. " * 10)


class _CreateIssue(BaseModel):
    repo: str = Field(description="owner/name")
    issue: _Issue


def _huge_schema(fields: int) -> dict[str, Any]:
    """An MCP server's schema whose bulk is in ``$defs`` (a GitHub-like issue with many fields)."""
    issue = {f"field_{i}": {"type": "string", "description": f"custom field {i} " * 20} for i in range(fields)}
    return {
        "type": "object",
        "properties": {"repo": {"type": "string", "description": "owner/name"}, "issue": {"$ref": "#/$defs/Issue"}},
        "required": ["repo", "issue"],
        "$defs": {"Issue": {"type": "object", "properties": issue}},
    }


def test_a_schema_s_definitions_are_counted_in_the_tool_s_tokens() -> None:
    """The parameters of both tools below are two names, one a ``$ref``: the definitions they
    point to, sent to the model whole, were counted as nothing (27 tokens for a 75,000-character
    spec), so the budget let a tool of about 19,000 tokens into a 2,000-token context."""
    mcp = _mcp_tool("create_issue", "Create an issue.", _huge_schema(300))
    nested = StructuredTool.from_function(
        lambda repo, issue: "ok", name="create_issue_py", description="Create an issue.", args_schema=_CreateIssue
    )
    for tool in (mcp, nested):
        (item,) = tool_items([tool])
        assert item.tokens >= len(item.body) // 5, (tool.name, item.tokens, len(item.body))


def test_a_flat_tool_s_count_is_unchanged() -> None:
    """Only definitions are added: a tool without them costs what it did (no logged count moves)."""
    flat = _mcp_tool(
        "get_weather",
        "Current weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string", "description": "a city"}}, "required": ["city"]},
    )
    (item,) = tool_items([flat])
    # approx_tokens("Current weather for a city.") + len('{"city": {"description": "a city", "type": "string"}}') // 4
    assert item.tokens == 6 + 13


def test_a_tool_bigger_than_the_budget_is_warned_of_and_never_bound(
    log: EpisodeLog, lexical: Similarity, caplog: pytest.LogCaptureFixture
) -> None:
    create_issue = _mcp_tool("create_issue", "Create an issue in a repository.", _huge_schema(300))
    add_comment = _mcp_tool(
        "add_comment",
        "Add a comment to an issue in a repository.",
        {"type": "object", "properties": {"issue": {"type": "integer"}, "text": {"type": "string"}}},
    )
    with caplog.at_level(logging.WARNING, logger="memabra"):
        agent, model = _agent(
            log,
            lexical,
            [create_issue, add_comment],
            [AIMessage("Which repository?")],
            budget=Budget(max_tokens=2000, slots={CandidateKind.TOOL: 3}),
        )
    (warning,) = [r.getMessage() for r in caplog.records if "create_issue" in r.getMessage()]
    assert "more than Budget.max_tokens=2000" in warning and "can never choose it" in warning
    assert "add_comment" not in caplog.text
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("create an issue in a repository")]}, ANN))
    assert model.calls[0][1] == ["add_comment"]  # never the 19,000-token spec in a 2,000-token budget
    (selection,) = log.get_episode(out["memabra_episode_id"]).selections
    assert selection.tokens_injected <= 2000


# ------------------------------------------------------------------ async-only tools run sync


def test_a_sync_run_of_an_async_only_tool_raises_clearly_and_goes_on_with_ainvoke(
    log: EpisodeLog, lexical: Similarity
) -> None:
    """``invoke`` on an agent with MCP tools: each call failed with "StructuredTool does not support
    sync invocation", logged as the tool's error (a reward penalty, the router learning to avoid a
    working tool) while the run went on as if the tool were broken."""
    search = _mcp_tool(
        "search_mail",
        "Search the mail archive.",
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        reply="3 mails from bob",
    )
    agent, _ = _agent(
        log,
        lexical,
        [search],
        [_call("search_mail", {"query": "bob"}), AIMessage("3 mails.")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"user_id": "ann", "thread_id": "t1"}}
    with pytest.raises(ConfigError, match="'search_mail' has only an async implementation.*ainvoke"):
        agent.invoke({"messages": [HumanMessage("any mail from bob?")]}, config)
    assert not log.list_episodes().items  # no episode logged with a failed call the tool never made
    out = asyncio.run(agent.ainvoke(None, config))  # the retry from the checkpoint
    assert out["messages"][-1].content == "3 mails."
    ep = log.get_episode(out["memabra_episode_id"])
    assert [(s.name, s.status, s.result) for s in ep.steps if s.kind.value == "tool"] == [
        ("search_mail", "ok", "3 mails from bob")
    ]


# ------------------------------------------------------------------ a server down while a run is paused


def _send(to: str) -> str:
    """Send an email to someone, once a person has approved it."""
    return f"sent to {to}" if interrupt({"approve": to}) else "cancelled"


def _search(query: str) -> str:
    """Search the mail archive for messages matching a query."""
    return "3 mails"


def test_a_paused_run_resumed_by_an_agent_rebuilt_without_a_chosen_tool(log: EpisodeLog, lexical: Similarity) -> None:
    """The turn chose search_mail; its server is down when the run resumes in an agent rebuilt
    without it. The turn goes on under its logged decision: the missing tool is not bound, a call
    to it is refused (not run, not taken for a tool the router missed), and feedback on the
    episode is kept though no agent has the tool."""
    send_email = StructuredTool.from_function(_send, name="send_email")
    search_mail = StructuredTool.from_function(_search, name="search_mail")
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
    first, _ = _agent(
        log, lexical, [send_email, search_mail], [_call("send_email", {"to": "bob"}, "e1")], checkpointer=saver
    )
    paused = first.invoke({"messages": [HumanMessage("Email bob, and search my mail for his address")]}, config)
    assert paused["__interrupt__"]
    replies = [_call("search_mail", {"query": "bob"}, "s1"), AIMessage("Sent it.")]
    rebuilt, model = _agent(log, lexical, [send_email], replies, checkpointer=saver)
    out = rebuilt.invoke(Command(resume=True), config)
    assert out["messages"][-1].content == "Sent it."
    assert [bound for _, bound in model.calls] == [["send_email"], ["send_email"]]
    ep = log.get_episode(out["memabra_episode_id"])
    assert set(ep.selections[0].chosen_ids) == {"tool:send_email", "tool:search_mail"}  # as decided
    assert [(s.name, s.status) for s in ep.steps if s.kind.value == "tool"] == [
        ("send_email", "ok"),
        ("search_mail", "error"),
    ]
    assert not any(f.source == REFUSED_SOURCE for f in ep.feedback)
    rebuilt.feedback(ep.id, accepted=True)
    assert any(f.payload.get("accepted") is True for f in log.get_episode(ep.id).feedback)
