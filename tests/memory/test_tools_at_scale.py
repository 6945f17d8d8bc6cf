"""Tools at scale: a registry larger than the context, where the router leaves needed tools out.

A call to a registry tool the turn was not given is refused and recorded as needed-and-missed (the
model named what it needed); a made-up name is only a failed step. A tool fetched with find_tools
counts as missed even when the turn resumed in another process. Names and schemas no chat API
takes fail when the agent is built, naming the tool."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, ConfigError, create_memabra_agent
from memabra._catalog import as_tools, tool_items
from memabra._tool_search import FIND_TOOLS, FIND_TOOLS_SOURCE, REFUSED_SOURCE, ToolSearch
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

ONE_TOOL = Budget(max_tokens=2000, slots={CandidateKind.MEMORY: 1, CandidateKind.TOOL: 1})
CONFIG: Any = {"configurable": {"thread_id": "scale", "user_id": "ann"}}
_SPECS = {
    "cd": ("Change the current working directory to the specified folder.", ["folder"]),
    "mkdir": ("Create a new directory in the current directory.", ["dir_name"]),
    "rm": ("Remove a file or directory.", ["file_name"]),
    "post_tweet": ("Post a tweet for the authenticated user.", ["content", "tags"]),
    "send_message": ("Send a message to a user.", ["receiver_id", "message"]),
    "place_order": ("Place an order to buy or sell shares.", ["symbol", "amount"]),
    "book_flight": ("Book a flight given the travel information.", ["travel_from", "travel_to"]),
    "fillFuelTank": ("Fill the fuel tank of the vehicle.", ["fuelAmount"]),
    "startEngine": ("Starts the engine of the vehicle.", ["ignitionMode"]),
    "logarithm": ("Compute the logarithm of a number.", ["value", "base"]),
}


def _tool(name: str, description: str, params: list[str]) -> BaseTool:
    schema = {"type": "object", "properties": {p: {"type": "string", "description": p} for p in params}}
    return StructuredTool.from_function(
        func=lambda **kw: f"{name} done", name=name, description=description, args_schema=schema
    )


def registry() -> list[BaseTool]:
    return [_tool(n, d, p) for n, (d, p) in _SPECS.items()]


def _agent(log: EpisodeLog, replies: list[Any], *, tool_search: bool = True, saver: Any = None) -> Any:
    return create_memabra_agent(
        ScriptedChatModel(replies=replies),
        tools=registry(),
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=ONE_TOOL,
        tool_search=tool_search,
        learn=False,
        checkpointer=saver,
    )


def _call(name: str, call_id: str = "c1", **args: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def _left_out(_: list[BaseMessage], bound: list[str]) -> AIMessage:
    """The model calls a registry tool it was not given (it knows the API from elsewhere)."""
    return _call(next(n for n in _SPECS if n not in bound), dir_name="temp")


def _missed(episode: Any, source: str) -> list[list[str]]:
    return [list(f.payload["relevant_ids"]) for f in episode.feedback if f.source == source]


@pytest.mark.parametrize("tool_search", [True, False], ids=["find_tools", "no-find_tools"])
def test_a_left_out_registry_tool_the_model_calls_is_refused_and_recorded_as_missed(
    log: EpisodeLog, tool_search: bool
) -> None:
    agent = _agent(log, [_left_out, AIMessage("done")], tool_search=tool_search)
    out = agent.invoke({"messages": [HumanMessage("Make the temp folder")]}, CONFIG)
    ep = log.get_episode(out["memabra_episode_id"])
    [step] = [s for s in ep.steps if s.kind.value == "tool"]
    assert step.status == "error" and f"tool:{step.name}" not in ep.selections[0].chosen_ids
    assert _missed(ep, REFUSED_SOURCE) == [[f"tool:{step.name}"]]
    assert ep.reward is not None and ep.reward.components.ht is not None and ep.reward.components.ht < 0
    # the refusal tells the model how to get it: by its name
    assert (f"call {FIND_TOOLS} with its name" in (step.error or "")) is tool_search


def test_the_middleware_records_a_left_out_tool_the_model_calls_as_missed(log: EpisodeLog) -> None:
    from langchain.agents import create_agent

    from memabra import MemabraAgent, MemabraMiddleware, build_session

    session = build_session(
        tools=registry(), db=log, budget=ONE_TOOL, router=HybridRouter(similarity=Similarity(encoder=None)), learn=False
    )
    middleware = MemabraMiddleware(session)
    model = ScriptedChatModel(replies=[_left_out, AIMessage("done")])
    agent = MemabraAgent(create_agent(model, tools=registry(), middleware=[middleware]), session)
    out = agent.invoke({"messages": [HumanMessage("Make the temp folder")]}, CONFIG)
    ep = log.get_episode(out["memabra_episode_id"])
    [step] = [s for s in ep.steps if s.kind.value == "tool"]
    assert step.status == "error" and _missed(ep, REFUSED_SOURCE) == [[f"tool:{step.name}"]]


def test_a_made_up_tool_name_is_a_failed_step_not_a_miss(log: EpisodeLog) -> None:
    agent = _agent(log, [_call("make_directory", dir_name="temp"), AIMessage("done")])
    out = agent.invoke({"messages": [HumanMessage("Make the temp folder")]}, CONFIG)
    ep = log.get_episode(out["memabra_episode_id"])
    assert [(s.name, s.status) for s in ep.steps if s.kind.value == "tool"] == [("make_directory", "error")]
    assert not [f for f in ep.feedback if "relevant_ids" in f.payload]
    assert ep.reward is not None and ep.reward.components.e > 0  # the failed call costs the turn


def test_a_tool_fetched_before_a_pause_and_used_in_another_process_is_recorded_as_missed(log: EpisodeLog) -> None:
    """find_tools runs in the first process; the run pauses after it and another process, whose
    registry no longer has ``fillFuelTank``, resumes it and calls the fetched ``startEngine``."""
    saver = InMemorySaver()
    first = _agent(log, [_call(FIND_TOOLS, query="start the engine and fill the fuel tank")], saver=saver)
    paused = first.invoke({"messages": [HumanMessage("Get going")]}, CONFIG, interrupt_after=["tools"])
    assert "\n- startEngine: " in paused["messages"][-1].content
    replies = [_call("startEngine", ignitionMode="START"), _call("fillFuelTank", "c2", fuelAmount="5"), "done"]
    second = create_memabra_agent(
        ScriptedChatModel(replies=[r if isinstance(r, AIMessage) else AIMessage(r) for r in replies]),
        tools=[t for t in registry() if t.name != "fillFuelTank"],  # the registry changed meanwhile
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=ONE_TOOL,
        tool_search=True,
        learn=False,
        checkpointer=saver,
    )
    out = second.invoke(None, CONFIG)
    ep = log.get_episode(out["memabra_episode_id"])
    assert "tool:startEngine" not in ep.selections[0].chosen_ids
    steps = [(s.name, s.status) for s in ep.steps if s.kind.value == "tool"]
    assert steps == [(FIND_TOOLS, "ok"), ("startEngine", "ok"), ("fillFuelTank", "error")]
    # the removed tool is refused, and not asked of the router: it is no longer a candidate
    assert _missed(ep, FIND_TOOLS_SOURCE) == [["tool:startEngine"]] and not _missed(ep, REFUSED_SOURCE)


def test_find_tools_matches_camel_case_names_and_parameters() -> None:
    search = ToolSearch(tool_items(registry()), encoder=None)
    for turn, (query, wanted) in enumerate(
        [("start the vehicle", "startEngine"), ("ignition mode", "startEngine"), ("change directory", "cd")]
    ):
        bound: list[str] = []
        reply = search.search(f"t{turn}", query, (), bound.extend)
        assert bound[0] == wanted, (query, bound)
        assert f"- {wanted}: " in reply and "start Engine" not in reply  # shown as registered


@pytest.mark.parametrize("name", ["file system/mkdir", "mkdir dir", "créer", "<lambda>", "x" * 65])
def test_a_tool_name_chat_apis_refuse_fails_when_the_agent_is_built(name: str) -> None:
    with pytest.raises(ConfigError, match="refused by chat model APIs") as caught:
        as_tools([_tool(name, "Makes a directory.", ["dir_name"])])
    assert repr(name) in str(caught.value)


def test_a_dotted_tool_name_is_kept_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "memabra")
    assert [t.name for t in as_tools([_tool("fs.mkdir", "Makes a directory.", ["dir_name"])])] == ["fs.mkdir"]
    assert "'fs.mkdir'" in caplog.text and "Anthropic" in caplog.text


def test_two_registries_sharing_a_tool_name_is_an_error_naming_it() -> None:
    twitter = _tool("send_message", "Send a direct message on Twitter.", ["user"])
    with pytest.raises(ConfigError, match=r"\['send_message'\] more than once"):
        as_tools([*registry(), twitter])


def test_a_tool_whose_schema_json_cannot_hold_is_an_error_naming_it() -> None:
    schema = {"type": "object", "properties": {"when": {"type": "string", "default": datetime.date(2024, 1, 1)}}}
    bad = StructuredTool.from_function(func=lambda **kw: "ok", name="schedule", description="x", args_schema=schema)
    with pytest.raises(ConfigError, match="tool 'schedule': its parameter schema cannot be written as JSON"):
        tool_items([*registry(), bad])


def test_a_registry_tool_named_find_tools_clashes_with_tool_search() -> None:
    with pytest.raises(ConfigError, match="find_tools"):
        ToolSearch(tool_items([_tool(FIND_TOOLS, "Finds tools.", ["query"])]), encoder=None)
