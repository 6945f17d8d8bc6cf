"""The built-in agent's tool handling: tools run as LangGraph's ToolNode runs them, calls past the
round limit are answered, and a turn whose chat model raises is logged as failed."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections import Counter
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import InjectedState, InjectedStore
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, interrupt

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, ConfigError, InvalidRecordError
from memabra._agent import create_memabra_agent
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

USER = {"user_id": "ann"}
ALL_TOOLS = Budget(max_tokens=2000, slots={CandidateKind.TOOL: 6})


def _agent(log: EpisodeLog, lexical, tools: list, replies: list, **kwargs: Any):  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=replies)
    agent = create_memabra_agent(
        model,
        tools=tools,
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=kwargs.pop("budget", ALL_TOOLS),
        **kwargs,
    )
    return agent, model


def _ask(agent, text: str, thread: str = "t1"):  # type: ignore[no-untyped-def]
    return agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context=USER)


def _calls(*calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls])


def _unanswered(messages: list[BaseMessage]) -> set[str]:
    """Tool call ids no ToolMessage right after their AIMessage answers (what chat APIs refuse)."""
    missing: set[str] = set()
    for i, m in enumerate(messages):
        if isinstance(m, AIMessage) and m.tool_calls:
            answered, j = set(), i + 1
            while j < len(messages) and isinstance(messages[j], ToolMessage):
                answered.add(messages[j].tool_call_id)
                j += 1
            missing |= {c["id"] for c in m.tool_calls} - answered
    return missing


def _tool_steps(ep: Any) -> dict[str, Any]:
    return {s.name: s for s in ep.steps if s.kind.value == "tool"}


# ----------------------------------------------------------------------- the round limit (A1, A6)


def test_calls_past_the_round_limit_are_answered_logged_and_the_thread_stays_valid(
    log: EpisodeLog, tools, lexical
) -> None:  # type: ignore[no-untyped-def]
    loop = _calls(("get_weather", {"city": "Lyon"}, "w1"))
    agent, model = _agent(
        log, lexical, tools, [loop, loop, loop, AIMessage("Sunny.")], max_tool_rounds=2, checkpointer=InMemorySaver()
    )
    out = _ask(agent, "weather in Lyon, keep checking")
    last = out["messages"][-1]
    assert isinstance(last, ToolMessage) and last.status == "error"
    assert last.content == "Error: not run: this turn's limit of 2 tool rounds was reached"
    assert _unanswered(out["messages"]) == set()
    ep = agent.log.get_episode(out["memabra_episode_id"])
    tool_steps = [(s.status, s.error) for s in ep.steps if s.kind.value == "tool"]
    assert tool_steps == [
        ("ok", None),
        ("ok", None),
        ("error", "not run: this turn's limit of 2 tool rounds was reached"),
    ]
    assert ep.answer == ""
    assert ep.reward is not None and ep.reward.components.e == pytest.approx(0.2)

    _ask(agent, "and tomorrow?")  # the checkpointed thread goes to the model again
    sent = model.calls[-1][0]
    assert _unanswered(sent) == set()
    assert Counter(m.tool_call_id for m in sent if isinstance(m, ToolMessage)) == {"w1": 3}


class _BrokenCallModel(ScriptedChatModel):
    """Replies with a tool call whose arguments did not parse (the scripted model keeps only valid ones)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> _BrokenCallModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        from langchain_core.outputs import ChatGeneration, ChatResult

        bad = {"name": "get_weather", "args": "{city:", "id": "b1", "error": "bad JSON", "type": "invalid_tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", invalid_tool_calls=[bad]))])


def test_a_call_whose_arguments_did_not_parse_is_answered(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = create_memabra_agent(
        _BrokenCallModel(), tools=tools, db=log, router=HybridRouter(similarity=lexical), checkpointer=InMemorySaver()
    )
    out = _ask(agent, "weather?")
    assert [m.tool_call_id for m in out["messages"] if isinstance(m, ToolMessage)] == ["b1"]
    ep = agent.log.get_episode(out["memabra_episode_id"])
    assert [s.error for s in ep.steps if s.kind.value == "tool"] == [
        "not run: its arguments could not be parsed (bad JSON)"
    ]


@pytest.mark.parametrize("bad", [-1, True, 1.5, "4"])
def test_max_tool_rounds_must_be_a_non_negative_integer(log: EpisodeLog, tools, lexical, bad: Any) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="max_tool_rounds must be a non-negative integer"):
        _agent(log, lexical, tools, [], max_tool_rounds=bad)
    with pytest.raises(ConfigError, match="tool_search=True needs max_tool_rounds"):
        _agent(log, lexical, tools, [], max_tool_rounds=0, tool_search=True)
    assert log.count_episodes() == 0


def test_zero_tool_rounds_makes_an_agent_that_runs_no_tools(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, model = _agent(
        log,
        lexical,
        tools,
        [_calls(("get_weather", {"city": "Oslo"}, "z1")), AIMessage("x")],
        max_tool_rounds=0,
        budget=Budget(max_tokens=400),
    )
    agent.session.memory.remember("ann", "I live in Oslo")
    out = _ask(agent, "weather in Oslo?")
    assert model.calls[0][1] == []  # nothing bound
    ep = agent.log.get_episode(out["memabra_episode_id"])
    assert {sc.candidate.kind for sc in ep.selections[0].offered} == {CandidateKind.MEMORY}
    assert [(s.name, s.error) for s in ep.steps if s.kind.value == "tool"] == [
        ("get_weather", "not run: this turn's limit of 0 tool rounds was reached")
    ]
    assert _unanswered(out["messages"]) == set()


# ----------------------------------------------------------------------- tools as ToolNode runs them (A2, A5)


@tool
def save_note(text: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Save a note for the user."""
    return f"saved {text} as {tool_call_id}"


@tool
def count_messages(state: Annotated[dict, InjectedState]) -> str:  # type: ignore[type-arg]
    """Count the messages so far in the conversation."""
    return f"{len(state['messages'])} messages, turn {state['memabra_turn'][:4]}"


@tool
def remember_colour(colour: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Remember the user's favourite colour."""
    store.put(("notes",), "colour", {"colour": colour})
    return "stored"


@tool
def forecast(city: str) -> str:
    """Weather forecast for a city."""
    raise ToolException("forecast backend unavailable")


forecast.handle_tool_error = True


@tool(response_format="content_and_artifact")
def search_docs(q: str) -> tuple[str, dict[str, list[int]]]:
    """Search the documentation."""
    return "found 2 docs", {"ids": [1, 2]}


@tool
def lookup_nothing(key: str) -> None:
    """Look up a key that has no value."""
    return None


@tool
def city_stats(city: str) -> dict[str, Any]:
    """Statistics for a city."""
    return {"city": "Zürich", "rain_mm": math.nan, "sun": math.inf}


KINDS = [save_note, count_messages, remember_colour, forecast, search_docs]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_standard_langgraph_tools_work_and_are_logged_by_their_outcome(log: EpisodeLog, lexical, mode: str) -> None:  # type: ignore[no-untyped-def]
    calls = _calls(
        ("save_note", {"text": "milk"}, "n1"),
        ("count_messages", {}, "m1"),
        ("remember_colour", {"colour": "green"}, "c1"),
        ("forecast", {"city": "Oslo"}, "f1"),
        ("search_docs", {"q": "x"}, "s1"),
    )
    store = InMemoryStore()
    agent, _ = _agent(log, lexical, KINDS, [calls, AIMessage("done")], store=store)
    text = {"messages": [HumanMessage("note, count, colour, forecast and docs")]}
    if mode == "sync":
        out = agent.invoke(text, context=USER)
    else:
        out = asyncio.run(agent.ainvoke(text, context=USER))
    replies = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert replies["n1"].content == "saved milk as n1"
    assert replies["m1"].content.startswith("2 messages, turn ")
    assert replies["c1"].content == "stored" and store.get(("notes",), "colour").value == {"colour": "green"}  # type: ignore[union-attr]
    assert replies["f1"].status == "error" and replies["f1"].content == "forecast backend unavailable"
    assert replies["s1"].artifact == {"ids": [1, 2]}
    ep = agent.log.get_episode(out["memabra_episode_id"])
    steps = _tool_steps(ep)
    assert {n: s.status for n, s in steps.items()} == {
        "save_note": "ok",
        "count_messages": "ok",
        "remember_colour": "ok",
        "forecast": "error",
        "search_docs": "ok",
    }
    assert steps["forecast"].error == "forecast backend unavailable" and steps["forecast"].result is None
    assert steps["save_note"].arguments == {"text": "milk"}  # the injected id is not a model argument
    assert ep.reward is not None and ep.reward.components.e == pytest.approx(0.2)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tool_output_is_sent_as_toolnode_sends_it_and_logged_as_standard_json(
    log: EpisodeLog, lexical, mode: str
) -> None:  # type: ignore[no-untyped-def]
    calls = _calls(("lookup_nothing", {"key": "k"}, "l1"), ("city_stats", {"city": "Zürich"}, "z1"))
    agent, _ = _agent(log, lexical, [lookup_nothing, city_stats], [calls, AIMessage("done")])
    text = {"messages": [HumanMessage("look up k and the Zürich stats")]}
    out = agent.invoke(text, context=USER) if mode == "sync" else asyncio.run(agent.ainvoke(text, context=USER))
    replies = {m.tool_call_id: m.content for m in out["messages"] if isinstance(m, ToolMessage)}
    assert replies["l1"] == "null"  # json.dumps(None), as ToolNode sends it
    assert replies["z1"] == '{"city": "Zürich", "rain_mm": NaN, "sun": Infinity}'
    steps = _tool_steps(agent.log.get_episode(out["memabra_episode_id"]))

    def strict(constant: str) -> None:
        raise AssertionError(f"non-standard JSON constant {constant} in the log")

    assert json.loads(steps["city_stats"].result, parse_constant=strict) == {
        "city": "Zürich",
        "rain_mm": "nan",
        "sun": "inf",
    }
    assert steps["lookup_nothing"].result == "null"


def test_an_interrupt_in_a_tool_pauses_the_turn_and_the_resume_finishes_it(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    @tool
    def book_table(time: str) -> str:
        """Book a restaurant table once the user confirms."""
        answer = interrupt(f"book for {time}?")
        return f"booked: {answer}"

    agent, _ = _agent(
        log,
        lexical,
        [book_table],
        [_calls(("book_table", {"time": "8pm"}, "b1")), AIMessage("Booked.")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "i1"}}
    paused = agent.invoke({"messages": [HumanMessage("book a table at 8pm")]}, config, context=USER)
    assert "__interrupt__" in paused and log.count_episodes() == 0
    out = agent.invoke(Command(resume="yes"), config, context=USER)
    steps = _tool_steps(agent.log.get_episode(out["memabra_episode_id"]))
    assert steps["book_table"].status == "ok" and steps["book_table"].result == "booked: yes"


# ----------------------------------------------------------------------- a chat model that raises (A4)


def _raises(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
    raise RuntimeError("provider 500")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_raising_chat_model_still_raises_and_its_turn_is_logged_as_failed(
    log: EpisodeLog, tools, lexical, mode: str
) -> None:  # type: ignore[no-untyped-def]
    agent, _ = _agent(log, lexical, tools, [_raises, AIMessage("Sunny.")], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "f1"}}
    text = {"messages": [HumanMessage("I live in Lyon. What's the weather?")]}
    with pytest.raises(RuntimeError, match="provider 500"):
        if mode == "sync":
            agent.invoke(text, config, context=USER)
        else:
            asyncio.run(agent.ainvoke(text, config, context=USER))
    (summary,) = log.list_episodes().items
    ep = log.get_episode(summary.id)
    assert ep.selections and ep.selections[0].propensity > 0  # the decision is kept for offline evaluation
    assert [(s.kind.value, s.status, s.error) for s in ep.steps] == [("model", "error", "RuntimeError: provider 500")]
    assert ep.answer == ""
    assert ep.reward is not None and ep.reward.components.s == 0.0
    assert [m.text for m in agent.session.memory.items("ann")] == ["I live in Lyon"]
    with pytest.raises(InvalidRecordError, match="no turn in flight"):  # closed, not left in flight
        agent.session.get_turn(agent.get_state(config).values["memabra_turn"])
    later = _ask(agent, "What's the weather?", thread="f1")
    assert later["messages"][-1].content == "Sunny."


def test_when_the_failed_turn_cannot_be_logged_it_is_dropped_with_a_warning(
    log: EpisodeLog, tools, lexical, caplog, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    agent, _ = _agent(log, lexical, tools, [_raises], checkpointer=InMemorySaver())

    def down(episode: Any) -> None:
        raise OSError("database down")

    monkeypatch.setattr(agent.session.rewards, "record", down)
    config = {"configurable": {"thread_id": "d1"}}
    with caplog.at_level(logging.WARNING, logger="memabra"), pytest.raises(RuntimeError, match="provider 500"):
        agent.invoke({"messages": [HumanMessage("weather?")]}, config, context=USER)
    assert "could not log the failed turn" in caplog.text
    assert log.count_episodes() == 0
    with pytest.raises(InvalidRecordError, match="no turn in flight"):
        agent.session.get_turn(agent.get_state(config).values["memabra_turn"])
