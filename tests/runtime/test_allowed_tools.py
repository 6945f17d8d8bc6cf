"""A run's ``allowed_tools`` (its context's, or :meth:`RoutingSession.begin`'s keyword): only the
allowed tools are offered to the router, so the logged decision's offered set is what the run
could use; memories are routed as before. Every entry point honours it (the built-in agent,
:class:`MemabraMiddleware`, :class:`MemabraNodes`, sync and async), so does ``find_tools``, and
so does a turn routed afresh in another worker. A name the agent has no tool of is refused before
anything is routed or logged; a disallowed tool the model calls anyway is refused, not run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, InvalidRecordError, MemabraAgent
from memabra._agent import MemabraContext, build_session, create_memabra_agent
from memabra._middleware import MemabraMiddleware, MemabraNodes, MemabraNodeState
from memabra._records import new_id
from memabra._session import RoutingSession
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
CONFIG: Any = {"configurable": {"thread_id": "desk"}}
ASK = {"messages": [HumanMessage("What is the weather where I live?")]}
EVERY = {"get_weather", "convert_units", "refund_order"}
SUPPORT = ["get_weather", "refund_order"]
ENTRIES = ["agent", "middleware", "nodes"]


def _tools(ran: list[str]) -> list[BaseTool]:
    """The agent's tools; each records its runs in ``ran``."""

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append("get_weather")
        return f"sunny in {city}"

    @tool
    def convert_units(value: float, unit: str) -> str:
        """Convert a quantity between metric and imperial units."""
        ran.append("convert_units")
        return f"{value} {unit}"

    @tool
    def refund_order(order_id: str) -> str:
        """Refund a customer's order."""
        ran.append("refund_order")
        return f"refunded {order_id}"

    return [get_weather, convert_units, refund_order]


def _session(log: EpisodeLog, lexical: Any, tools: list[BaseTool]) -> RoutingSession:
    return build_session(tools=tools, db=log, budget=ALL_TOOLS, router=HybridRouter(similarity=lexical))


def _build(entry: str, log: EpisodeLog, lexical: Any, tools: list[BaseTool], model: Any, saver: Any = None) -> Any:
    """A :class:`MemabraAgent` over one entry point: the built-in agent, ``create_agent`` with the
    middleware, or a graph of one's own with :class:`MemabraNodes` and its ``tool_node``."""
    if entry == "agent":
        return create_memabra_agent(
            model, tools=tools, db=log, router=HybridRouter(similarity=lexical), budget=ALL_TOOLS, checkpointer=saver
        )
    session = _session(log, lexical, tools)
    if entry == "middleware":
        graph = create_agent(model, tools=tools, middleware=[MemabraMiddleware(session)], checkpointer=saver)
        return MemabraAgent(graph, session)
    nodes = MemabraNodes(session)

    def call(state: MemabraNodeState) -> dict[str, Any]:
        reply = model.bind_tools(nodes.tools(state, tools)).invoke(state["messages"])
        nodes.record_model_call(state, reply, 1.0)
        return {"messages": [reply]}

    async def acall(state: MemabraNodeState) -> dict[str, Any]:
        reply = await model.bind_tools(await nodes.atools(state, tools)).ainvoke(state["messages"])
        await nodes.arecord_model_call(state, reply, 1.0)
        return {"messages": [reply]}

    builder = StateGraph(MemabraNodeState)
    builder.add_node("route", nodes.route)
    builder.add_node("model", RunnableLambda(call, afunc=acall, name="model"))
    builder.add_node("tools", nodes.tool_node(tools))
    builder.add_node("finish", nodes.finish)
    builder.add_edge(START, "route")
    builder.add_edge("route", "model")
    builder.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else "finish")
    builder.add_edge("tools", "model")
    builder.add_edge("finish", END)
    return MemabraAgent(builder.compile(checkpointer=saver), session)


def _run(agent: Any, payload: Any, how: str, context: Any, **kwargs: Any) -> Any:
    if how == "invoke":
        return agent.invoke(payload, CONFIG, context=context, **kwargs)
    return asyncio.run(agent.ainvoke(payload, CONFIG, context=context, **kwargs))


def _offered(log: EpisodeLog, episode_id: str) -> tuple[set[str], set[CandidateKind]]:
    """The tools the logged decision offered the router, and the kinds of all it offered."""
    (selection,) = log.get_episode(episode_id).selections
    candidates = [sc.candidate for sc in selection.offered]
    tools = {c.id.removeprefix("tool:") for c in candidates if c.kind is CandidateKind.TOOL}
    return tools, {c.kind for c in candidates}


def _bound(model: ScriptedChatModel) -> set[str]:
    return {name for _, names in model.calls for name in names}


# ------------------------------------------------------------------ what is offered and bound


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    ("allowed", "offered"), [(SUPPORT, set(SUPPORT)), (None, EVERY), ([], set())], ids=["some", "all", "none"]
)
def test_a_run_offers_the_router_and_binds_only_its_allowed_tools(
    log: EpisodeLog, lexical: Any, entry: str, how: str, allowed: list[str] | None, offered: set[str]
) -> None:
    model = ScriptedChatModel(replies=[AIMessage("Sunny in Lyon.")])
    agent = _build(entry, log, lexical, _tools([]), model)
    agent.session.memory.remember("ann", "I live in Lyon")
    context: dict[str, Any] = {"user_id": "ann"} if allowed is None else {"user_id": "ann", "allowed_tools": allowed}
    out = _run(agent, ASK, how, context)
    tools, kinds = _offered(log, out["memabra_episode_id"])
    assert tools == offered
    assert CandidateKind.MEMORY in kinds  # memories are routed whatever the run's tools
    assert _bound(model) <= offered


def test_the_built_in_agents_context_dataclass_carries_allowed_tools(log: EpisodeLog, lexical: Any) -> None:
    model = ScriptedChatModel(replies=[AIMessage("Sunny.")])
    agent = _build("agent", log, lexical, _tools([]), model)
    out = agent.invoke(ASK, CONFIG, context=MemabraContext(user_id="ann", allowed_tools=("get_weather",)))
    assert _offered(log, out["memabra_episode_id"])[0] == {"get_weather"}


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_tool_name_the_agent_lacks_is_refused_before_anything_is_routed(
    log: EpisodeLog, lexical: Any, entry: str, how: str
) -> None:
    model = ScriptedChatModel(replies=[AIMessage("Sunny.")])
    agent = _build(entry, log, lexical, _tools([]), model)
    with pytest.raises(InvalidRecordError, match="'get_wether'") as refused:
        _run(agent, ASK, how, {"user_id": "ann", "allowed_tools": ["get_wether", "refund_order"]})
    assert "refund_order" not in str(refused.value).split("(")[0]  # only the unknown name is named
    assert not model.calls and not log.list_episodes().items and not log.suspended_turns()


# ------------------------------------------------------------------ a disallowed tool called anyway


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_disallowed_tool_the_model_calls_anyway_is_refused_not_run(
    log: EpisodeLog, lexical: Any, entry: str, how: str
) -> None:
    ran: list[str] = []
    refund = AIMessage("", tool_calls=[{"name": "refund_order", "args": {"order_id": "o-1"}, "id": "r1"}])
    model = ScriptedChatModel(replies=[refund, AIMessage("I cannot refund that.")])
    agent = _build(entry, log, lexical, _tools(ran), model)
    out = _run(agent, ASK, how, {"user_id": "ann", "allowed_tools": ["get_weather"]})
    assert ran == []
    (answer,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error" and "not available" in str(answer.content)
    episode = log.get_episode(out["memabra_episode_id"])
    assert [(s.name, s.status) for s in episode.steps if s.kind.value == "tool"] == [("refund_order", "error")]
    # the router was never offered it: the call is no miss of the router's to learn from
    assert not any("relevant_ids" in f.payload for f in episode.feedback)


# ------------------------------------------------------------------ find_tools


def _find(query: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "find_tools", "args": {"query": query}, "id": "f1"}])


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize(("allowed", "found"), [(["get_weather"], False), (None, True)], ids=["allowed", "all"])
def test_find_tools_finds_no_tool_the_run_may_not_use(
    log: EpisodeLog, lexical: Any, how: str, allowed: list[str] | None, found: bool
) -> None:
    model = ScriptedChatModel(replies=[_find("refund_order"), AIMessage("Done.")])
    agent = create_memabra_agent(
        model,
        tools=_tools([]),
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 1}),
        tool_search=True,
    )
    context: dict[str, Any] = {"user_id": "ann", "allowed_tools": allowed} if allowed else {"user_id": "ann"}
    out = _run(agent, {"messages": [HumanMessage("What is the weather in Lyon?")]}, how, context)
    (answer,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    # routed, or fetched and bound for the next call: either way the model gets it only when allowed
    assert ("refund_order" in _bound(model)) is found
    if not found:
        assert answer.content == "No further tools match."
    assert _offered(log, out["memabra_episode_id"])[0] == (EVERY if found else {"get_weather"})


def test_a_run_allowed_no_tools_is_not_given_find_tools(log: EpisodeLog, lexical: Any) -> None:
    model = ScriptedChatModel(replies=[AIMessage("Sunny.")])
    agent = create_memabra_agent(
        model, tools=_tools([]), db=log, router=HybridRouter(similarity=lexical), budget=ALL_TOOLS, tool_search=True
    )
    agent.invoke(ASK, CONFIG, context={"user_id": "ann", "allowed_tools": []})
    assert _bound(model) == set()


# ------------------------------------------------------------------ the session's API


@pytest.mark.parametrize("how", ["begin", "abegin"])
def test_begin_offers_only_the_allowed_tools(log: EpisodeLog, lexical: Any, how: str) -> None:
    session = _session(log, lexical, _tools([]))
    session.memory.remember("ann", "I live in Lyon")
    kwargs: dict[str, Any] = {"user_id": "ann", "query": "weather in Lyon", "allowed_tools": ["convert_units"]}
    t = session.begin(**kwargs) if how == "begin" else asyncio.run(session.abegin(**kwargs))
    assert t.selection is not None
    offered = {sc.candidate.id for sc in t.selection.offered if sc.candidate.kind is CandidateKind.TOOL}
    assert offered == {"tool:convert_units"} and set(t.tool_names) <= {"convert_units"}
    episode_id = session.finish(t.id, "Sunny.")
    assert _offered(log, episode_id)[0] == {"convert_units"}


@pytest.mark.parametrize("bad", ["get_weather", 7, [""], [None]])
def test_allowed_tools_that_are_not_a_list_of_names_are_refused(log: EpisodeLog, lexical: Any, bad: Any) -> None:
    session = _session(log, lexical, _tools([]))
    with pytest.raises(InvalidRecordError, match="allowed_tools"):
        session.begin(user_id="ann", query="weather", allowed_tools=bad)
    assert not log.suspended_turns()


@pytest.mark.parametrize("how", ["resume", "aresume"])
def test_a_turn_routed_afresh_keeps_the_restriction_and_binds_no_disallowed_pending_call(
    log: EpisodeLog, lexical: Any, how: str
) -> None:
    session = _session(log, lexical, _tools([]))
    kwargs: dict[str, Any] = {
        "user_id": "ann",
        "query": "weather in Lyon",
        "bind": ["get_weather", "refund_order"],
        "allowed_tools": ["get_weather"],
    }
    turn_id = new_id()  # a turn no process holds and the log neither keeps nor logged
    t = session.resume(turn_id, **kwargs) if how == "resume" else asyncio.run(session.aresume(turn_id, **kwargs))
    assert t.selection is not None
    assert {sc.candidate.id for sc in t.selection.offered if sc.candidate.kind is CandidateKind.TOOL} == {
        "tool:get_weather"
    }
    assert "get_weather" in t.tool_names and "refund_order" not in t.tool_names


# ------------------------------------------------------------------ routed afresh in another worker


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_paused_turn_lost_and_routed_afresh_elsewhere_keeps_the_runs_restriction(
    log: EpisodeLog, lexical: Any, entry: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first worker pauses before its tools and its turn's copy never reaches the log (as
    where its process died first); the worker that resumes the run routes the turn again, under
    the restriction it reads from the run's context, and the pending call to a tool the run may
    not use is refused rather than bound."""
    saver = InMemorySaver()
    context = {"user_id": "ann", "allowed_tools": ["get_weather"]}
    calls = AIMessage(
        "",
        tool_calls=[
            {"name": "get_weather", "args": {"city": "Lyon"}, "id": "w1"},
            {"name": "refund_order", "args": {"order_id": "o-1"}, "id": "r1"},
        ],
    )
    first = _build(entry, log, lexical, _tools([]), ScriptedChatModel(replies=[calls]), saver)
    monkeypatch.setattr(first.session._paused, "keep_running", lambda t: None)  # the log never gets its copy
    first.graph.invoke(ASK, CONFIG, context=context, interrupt_before=["tools"])
    assert not log.suspended_turns() and not log.list_episodes().items
    ran: list[str] = []
    other = _build(entry, log, lexical, _tools(ran), ScriptedChatModel(replies=[AIMessage("Sunny in Lyon.")]), saver)
    out = _run(other, None, how, context)
    assert _offered(log, out["memabra_episode_id"])[0] == {"get_weather"}
    assert ran == ["get_weather"]
    steps = log.get_episode(out["memabra_episode_id"]).steps
    assert ("refund_order", "error") in [(s.name, s.status) for s in steps]


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_run_resumed_under_a_narrower_context_runs_no_tool_it_no_longer_allows(
    log: EpisodeLog, lexical: Any, entry: str
) -> None:
    """The turn goes on whole with its decision (routed when every tool was allowed), but a call is
    checked against the context the run goes on with."""
    saver = InMemorySaver()
    ran: list[str] = []
    refund = AIMessage("", tool_calls=[{"name": "refund_order", "args": {"order_id": "o-1"}, "id": "r1"}])
    agent = _build(entry, log, lexical, _tools(ran), ScriptedChatModel(replies=[refund, AIMessage("No.")]), saver)
    agent.invoke(
        {"messages": [HumanMessage("Refund order o-1")]}, CONFIG, context={"user_id": "ann"}, interrupt_before=["tools"]
    )
    out = agent.invoke(None, CONFIG, context={"user_id": "ann", "allowed_tools": ["get_weather"]})
    assert ran == []
    steps = log.get_episode(out["memabra_episode_id"]).steps
    assert [(s.name, s.status) for s in steps if s.kind.value == "tool"] == [("refund_order", "error")]
