"""A turn whose run stopped before it was logged (a chat UI's "stop": the stream closed mid-run;
a person asked for approval who sends a new message instead of an answer) and whose thread then
gets a new message can never go on: LangGraph runs the new input from ``START``, dropping the
pending nodes and any pending interrupt, and the new turn takes the state's ``memabra_turn``. The
earlier turn is logged at once as failed, superseded, with its decision, rather than kept to read
lost an hour later and fire the ``turns`` health check. A retry (input ``None``) still goes on with
it; a turn running here alongside the new one, or one a run without a checkpointer names, is left
alone. The built-in agent, ``MemabraMiddleware`` under ``create_agent`` and ``MemabraNodes`` in a
graph of one's own, sync and async, in the process that ran the turn or another one."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import aclosing
from datetime import timedelta
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from sqlalchemy import event

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, MemabraAgent, create_memabra_agent
from memabra._agent import build_session
from memabra._graph_steps import FAILED_TURN_SOURCE
from memabra._middleware import MemabraMiddleware, MemabraNodes, MemabraNodeState
from memabra._records import utcnow
from memabra._superseded import SUPERSEDED_REASON
from memabra.storage import RUNNING_TURN_LIMIT, EpisodeFilter, EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
CONFIG: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
ASK = "Email bob please"
KINDS = ["agent", "middleware", "nodes"]
RELEASE_S = 30.0  # a slow tool's wait for the test to let it finish

_gate = threading.Event()
_inside = threading.Event()


@tool
def send_email(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}"


@tool
def slow_lookup(query: str) -> str:
    """Look something up in the slow archive."""
    _inside.set()
    _gate.wait(RELEASE_S)
    return f"found {query}"


TOOLS = [send_email, slow_lookup]
_CALLS = {"email": ("send_email", {"to": "bob"}), "archive": ("slow_lookup", {"query": "contract"})}


def _reply(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"Done: {last.content}")
    asked = str(last.content).lower() if isinstance(last, HumanMessage) else ""
    for word, (name, args) in _CALLS.items():
        if word in asked and name in bound:
            return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{name}"}])
    return AIMessage("ok")


def _nodes_graph(log: EpisodeLog, saver: Any) -> MemabraAgent:
    nodes = MemabraNodes(build_session(tools=TOOLS, db=log, budget=ALL_TOOLS))
    model = ScriptedChatModel(replies=[_reply])

    def model_node(state: MemabraNodeState) -> dict[str, Any]:
        started = time.perf_counter()
        reply = model.bind_tools(nodes.tools(state, TOOLS)).invoke(state["messages"])
        nodes.record_model_call(state, reply, (time.perf_counter() - started) * 1000.0)
        return {"messages": [reply]}

    builder = StateGraph(MemabraNodeState)
    builder.add_node("route", nodes.route)
    builder.add_node("model", model_node)
    builder.add_node("tools", nodes.tool_node(TOOLS))
    builder.add_node("finish", nodes.finish)
    builder.add_edge(START, "route")
    builder.add_edge("route", "model")
    builder.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else "finish")
    builder.add_edge("tools", "model")
    builder.add_edge("finish", END)
    return MemabraAgent(builder.compile(checkpointer=saver), nodes.session)


def _worker(kind: str, log: EpisodeLog, saver: Any, *, approvals: bool = False) -> MemabraAgent:
    """A worker process's agent: its own session over the shared log and checkpointer."""
    if kind == "agent":
        return create_memabra_agent(
            ScriptedChatModel(replies=[_reply]), tools=TOOLS, db=log, budget=ALL_TOOLS, checkpointer=saver
        )
    if kind == "nodes":
        return _nodes_graph(log, saver)
    middleware = MemabraMiddleware(build_session(tools=TOOLS, db=log, budget=ALL_TOOLS))
    hitl = [HumanInTheLoopMiddleware(interrupt_on={"send_email": True})] if approvals else []
    graph = create_agent(
        ScriptedChatModel(replies=[_reply]), tools=TOOLS, middleware=[middleware, *hitl], checkpointer=saver
    )
    return MemabraAgent(graph, middleware.session)


def _asked_tool(chunk: Any) -> bool:
    """An ``updates`` chunk holding the model's reply that asks for a tool (not run yet)."""
    for update in chunk.values() if isinstance(chunk, dict) else ():
        messages = update.get("messages", []) if isinstance(update, dict) else []
        if any(isinstance(m, AIMessage) and m.tool_calls for m in messages):
            return True
    return False


def _stopped(agent: MemabraAgent, how: str) -> str:
    """A run the user stopped once the model asked for a tool (the stream closed mid-run); its turn."""
    payload = {"messages": [HumanMessage(ASK)]}
    if how == "sync":
        for chunk in agent.stream(payload, CONFIG, stream_mode="updates"):
            if _asked_tool(chunk):
                break
    else:

        async def read() -> None:
            async with aclosing(agent.astream(payload, CONFIG, stream_mode="updates")) as chunks:
                async for chunk in chunks:
                    if _asked_tool(chunk):
                        break

        asyncio.run(read())
    turn: str = agent.get_state(CONFIG).values["memabra_turn"]
    return turn


def _send(agent: MemabraAgent, text: str, how: str) -> Any:
    payload = {"messages": [HumanMessage(text)]}
    return agent.invoke(payload, CONFIG) if how == "sync" else asyncio.run(agent.ainvoke(payload, CONFIG))


def _episodes(log: EpisodeLog) -> dict[str, Any]:
    return {s.id: log.get_episode(s.id) for s in log.list_episodes(EpisodeFilter(thread_id="mail")).items}


def _failed(episode: Any) -> list[Any]:
    return [f for f in episode.feedback if f.source == FAILED_TURN_SOURCE]


def _nothing_reads_lost(log: EpisodeLog) -> None:
    assert not log.suspended_turns(lost_at=utcnow() + RUNNING_TURN_LIMIT + timedelta(minutes=1))
    assert not log.suspended_turns()


def _superseded(log: EpisodeLog, kept: Any) -> Any:
    """The earlier turn's episode: logged as failed, superseded, with the decision it was routed."""
    episode = _episodes(log)[kept.episode_id]
    (failed,) = _failed(episode)
    assert failed.payload == {"accepted": False, "comment": SUPERSEDED_REASON}
    assert episode.query == ASK and episode.selections and all(s.propensity > 0 for s in episode.selections)
    assert episode.selections[0].seed == kept.document["selection"]["seed"]
    assert [s.kind.value for s in episode.steps][:1] == ["model"]
    return episode


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("where", ["same process", "another process"])
def test_a_stopped_turn_is_logged_failed_once_when_a_new_message_arrives(
    log: EpisodeLog, kind: str, how: str, where: str
) -> None:
    saver = InMemorySaver()
    first = _worker(kind, log, saver)
    earlier = _stopped(first, how)
    kept = log.suspended_turn(earlier)
    assert kept is not None and not kept.paused  # nobody waits on it: a retry could still go on
    second = first if where == "same process" else _worker(kind, log, saver)
    out = _send(second, "Hello there", how)
    _superseded(log, kept)
    new = _episodes(log)[out["memabra_episode_id"]]
    assert new.query == "Hello there" and not _failed(new)
    _nothing_reads_lost(log)
    _send(second, "Thanks", how)  # the next turn finds its predecessor logged: nothing read, nothing again
    episodes = _episodes(log)
    assert len(episodes) == 3 and sum(len(_failed(e)) for e in episodes.values()) == 1


@pytest.mark.parametrize("where", ["same process", "another process"])
def test_a_turn_paused_for_approval_is_superseded_by_a_new_message_instead_of_an_answer(
    log: EpisodeLog, where: str
) -> None:
    saver = InMemorySaver()
    first = _worker("middleware", log, saver, approvals=True)
    asked = first.invoke({"messages": [HumanMessage(ASK)]}, CONFIG)
    assert asked["__interrupt__"]
    kept = log.suspended_turn(asked["memabra_turn"])
    assert kept is not None and kept.paused
    second = first if where == "same process" else _worker("middleware", log, saver, approvals=True)
    out = second.invoke({"messages": [HumanMessage("Hello there")]}, CONFIG)
    # LangGraph dropped the pending approval: the thread waits on nothing now
    assert not second.get_state(CONFIG).interrupts and out["messages"][-1].content == "ok"
    _superseded(log, kept)
    _nothing_reads_lost(log)


@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_from_the_checkpoint_still_goes_on_with_the_stopped_turn(log: EpisodeLog, kind: str) -> None:
    saver = InMemorySaver()
    agent = _worker(kind, log, saver)
    earlier = _stopped(agent, "sync")
    out = agent.invoke(None, CONFIG)
    (episode,) = _episodes(log).values()
    assert episode.id == out["memabra_episode_id"] == earlier and not _failed(episode)
    assert [s.kind.value for s in episode.steps] == ["model", "tool", "model"]
    _nothing_reads_lost(log)


def test_a_turn_running_here_alongside_the_new_one_is_left_to_finish(log: EpisodeLog) -> None:
    saver = InMemorySaver()
    agent = _worker("agent", log, saver)
    _gate.clear()
    _inside.clear()
    done: dict[str, Any] = {}
    slow = threading.Thread(
        target=lambda: done.update(agent.invoke({"messages": [HumanMessage("Search the archive")]}, CONFIG))
    )
    slow.start()
    try:
        assert _inside.wait(RELEASE_S)
        running = agent.get_state(CONFIG).values["memabra_turn"]
        out = agent.invoke({"messages": [HumanMessage("Hello there")]}, CONFIG)  # the same thread, meanwhile
        assert log.suspended_turn(running) is not None  # still running: not taken for superseded
    finally:
        _gate.set()
        slow.join(RELEASE_S)
    episodes = _episodes(log)
    assert set(episodes) == {running, out["memabra_episode_id"]} and done["memabra_episode_id"] == running
    assert not any(_failed(e) for e in episodes.values())
    _nothing_reads_lost(log)


def test_without_a_checkpointer_a_turn_the_state_names_is_left_alone(log: EpisodeLog) -> None:
    # two replicas may serve one thread id at once: nothing says the other one's turn is dead
    agent = create_memabra_agent(ScriptedChatModel(replies=[_reply]), tools=TOOLS, db=log, budget=ALL_TOOLS)
    for chunk in agent.stream({"messages": [HumanMessage(ASK)]}, CONFIG, stream_mode="updates"):
        if _asked_tool(chunk):
            break
    (kept,) = log.suspended_turns()
    other = create_memabra_agent(ScriptedChatModel(replies=[_reply]), tools=TOOLS, db=log, budget=ALL_TOOLS)
    out = other.invoke({"messages": [HumanMessage("Hello there")], "memabra_turn": kept.turn_id}, CONFIG)
    assert list(_episodes(log)) == [out["memabra_episode_id"]]
    assert log.suspended_turn(kept.turn_id) == kept


@pytest.mark.parametrize("kind", KINDS)
def test_an_async_run_logs_the_superseded_turn_off_the_event_loop(log: EpisodeLog, kind: str) -> None:
    saver = InMemorySaver()
    agent = _worker(kind, log, saver)
    kept = log.suspended_turn(_stopped(agent, "async"))
    on_loop: list[str] = []
    loop_thread: list[int] = []

    def statement(*args: Any) -> None:
        if threading.get_ident() in loop_thread:
            on_loop.append(str(args[2])[:80])

    async def send() -> Any:
        loop_thread.append(threading.get_ident())
        return await agent.ainvoke({"messages": [HumanMessage("Hello there")]}, CONFIG)

    event.listen(log.engine, "before_cursor_execute", statement)
    try:
        asyncio.run(send())
    finally:
        event.remove(log.engine, "before_cursor_execute", statement)
    _superseded(log, kept)
    assert not on_loop, on_loop
