"""A stream that ended early tells a reader that stopped at an interrupt from one that went away
by the thread's checkpoint: an interrupt saved there (``HumanInTheLoopMiddleware``'s approval
request, in the graph or a subgraph) means someone is asked, and the turn is kept paused; none
means the reader (an HTTP client that disconnected) left mid-run, and the turn is kept running, so
that it reads lost after ``RUNNING_TURN_LIMIT`` if nobody retries it. A static breakpoint saves no
interrupt: a graph that has one keeps the turn paused, as a run stopped at it is. A batch that
raised is read the same way, run by run. A retry of a turn kept running whose first step asks for
approval (before memabra's nodes run again, so no process picks the turn up) has its copy
rewritten as paused, so it is never taken for lost while a person is asked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import aclosing
from datetime import timedelta
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, MemabraAgent
from memabra._agent import build_session
from memabra._feedback import RewardService
from memabra._middleware import MemabraMiddleware
from memabra._paused_turns import abandon_paused_turn
from memabra._records import utcnow
from memabra._turn_document import turn_from_document
from memabra.storage import RUNNING_TURN_LIMIT, EpisodeLog, SuspendedTurn
from memabra.storage._status import log_status

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
CONFIG: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
ASK = {"messages": [HumanMessage("Email bob please")]}
APPROVE = Command(resume={"decisions": [{"type": "approve"}]})
HOWS = ["stream", "astream", "astream_events"]


@tool
def send_email(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}"


def _email(to: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": to}, "id": f"call-{to}"}])


def _agent(
    log: EpisodeLog,
    replies: list[Any],
    saver: InMemorySaver,
    *,
    approvals: bool = True,
    extra: list[Any] | None = None,
    subgraph: bool = False,
) -> MemabraAgent:
    middleware = MemabraMiddleware(build_session(tools=[send_email], db=log, budget=ALL_TOOLS))
    hitl = [HumanInTheLoopMiddleware(interrupt_on={"send_email": True})] if approvals else []
    inner = create_agent(
        ScriptedChatModel(replies=replies),
        tools=[send_email],
        middleware=[middleware, *hitl, *(extra or [])],
        checkpointer=None if subgraph else saver,
    )
    if not subgraph:
        return MemabraAgent(inner, middleware.session)
    builder = StateGraph(MessagesState)
    builder.add_node("assistant", inner)
    builder.add_edge(START, "assistant")
    builder.add_edge("assistant", END)
    return MemabraAgent(builder.compile(checkpointer=saver), middleware.session)


def _at_interrupt(item: Any) -> bool:
    chunk = item[-1] if isinstance(item, tuple) else item  # (namespace, chunk) with subgraphs=True
    if isinstance(chunk, dict) and "event" in chunk:  # astream_events
        chunk = chunk.get("data", {}).get("chunk")
    return isinstance(chunk, dict) and "__interrupt__" in chunk


def _after_model(item: Any) -> bool:
    """The model asked to send the email; its approval is not asked for yet."""
    chunk = item[-1] if isinstance(item, tuple) else item
    if isinstance(chunk, dict) and "event" in chunk:
        return chunk["event"] == "on_chat_model_end"
    return isinstance(chunk, dict) and "model" in chunk


def _read(agent: MemabraAgent, payload: Any, how: str, stop: Callable[[Any], bool], **kwargs: Any) -> None:
    """Read the run until ``stop``, then stop reading: the stream is closed with the run unfinished."""
    if how == "stream":
        for chunk in agent.stream(payload, CONFIG, stream_mode="updates", **kwargs):
            if stop(chunk):
                break
        return

    async def read() -> None:
        if how == "astream":
            async with aclosing(agent.astream(payload, CONFIG, stream_mode="updates", **kwargs)) as chunks:
                async for chunk in chunks:
                    if stop(chunk):
                        break
        else:
            async with aclosing(agent.astream_events(payload, CONFIG, version="v2", **kwargs)) as events:
                async for event in events:
                    if stop(event):
                        break

    asyncio.run(read())


def _kept(log: EpisodeLog) -> SuspendedTurn:
    (kept,) = log.suspended_turns()
    return kept


def _an_hour_on(log: EpisodeLog) -> tuple[int, int]:
    """(lost, paused) as ``memabra status`` counts them once RUNNING_TURN_LIMIT has passed."""
    state = log_status(log.engine, utcnow() + RUNNING_TURN_LIMIT + timedelta(minutes=1))
    return state.lost_turns, state.paused_turns


@pytest.mark.parametrize("how", HOWS)
def test_a_reader_that_stops_at_the_approval_request_leaves_the_turn_paused(log: EpisodeLog, how: str) -> None:
    _read(_agent(log, [_email("bob")], InMemorySaver()), ASK, how, _at_interrupt)
    assert _kept(log).paused
    assert _an_hour_on(log) == (0, 1)  # waiting on a person: never lost


@pytest.mark.parametrize("how", HOWS)
def test_a_reader_gone_before_any_interrupt_leaves_the_turn_running_and_lost_in_time(log: EpisodeLog, how: str) -> None:
    saver = InMemorySaver()
    _read(_agent(log, [_email("bob")], saver), ASK, how, _after_model)
    kept = _kept(log)
    assert not kept.paused  # nobody was asked anything
    assert _an_hour_on(log) == (1, 0)
    # a retry goes on with the same turn, up to the approval request, and the approval logs it
    assert _agent(log, [_email("bob")], saver).invoke(None, CONFIG)["__interrupt__"]
    assert _kept(log).turn_id == kept.turn_id
    done = _agent(log, [AIMessage("Sent it.")], saver).invoke(APPROVE, CONFIG)
    assert done["memabra_episode_id"] == kept.episode_id and not log.suspended_turns()


def test_a_generator_closed_by_hand_mid_run_leaves_the_turn_running(log: EpisodeLog) -> None:
    chunks = _agent(log, [_email("bob")], InMemorySaver()).stream(ASK, CONFIG, stream_mode="updates")
    while not _after_model(next(chunks)):
        pass
    chunks.close()
    assert not _kept(log).paused


@pytest.mark.parametrize("how", ["stream", "astream"])
@pytest.mark.parametrize("stop", [_at_interrupt, _after_model], ids=["at-interrupt", "left-early"])
def test_an_agent_inside_a_subgraph_is_read_from_the_subgraphs_state(log: EpisodeLog, how: str, stop: Any) -> None:
    """The subgraph's task goes on after its reader left, up to the approval request: the
    request is in the subgraph's state only (the parent's task was cancelled), and it is found."""
    agent = _agent(log, [_email("bob")], InMemorySaver(), subgraph=True)
    _read(agent, {"messages": [HumanMessage("Email bob please")]}, how, stop, subgraphs=True)
    assert _kept(log).paused


@pytest.mark.parametrize("how", HOWS)
def test_a_reader_that_stops_at_a_static_breakpoint_leaves_the_turn_paused(log: EpisodeLog, how: str) -> None:
    """A breakpoint saves no interrupt: with one set, an early stop keeps the turn paused."""
    agent = _agent(log, [_email("bob")], InMemorySaver(), approvals=False)
    _read(agent, ASK, how, _at_interrupt, interrupt_before=["tools"])
    assert _kept(log).paused


class _Guardrail(AgentMiddleware):  # type: ignore[type-arg]
    """Times out on the reply for carol."""

    def after_model(self, state: Any, runtime: Any) -> None:
        if "carol" in str(state["messages"][0].content):
            raise TimeoutError("guardrail service timed out")


@pytest.mark.parametrize("how", ["batch", "abatch"])
def test_a_batch_that_raised_keeps_each_run_as_it_stopped(log: EpisodeLog, how: str) -> None:
    """Bob's run is still on its way to the approval when carol's raises: langchain's ``abatch``
    raised then and left bob's run going in the background, judged running (lost in an hour)."""

    def reply(messages: Any, bound: Any) -> AIMessage:
        if "carol" in str(messages[-1].content):
            return _email("carol")
        time.sleep(0.5)  # a slower model call: bob's run pauses well after carol's raised
        return _email("bob")

    agent = _agent(log, [reply, reply], InMemorySaver(), extra=[_Guardrail()])
    inputs = [{"messages": [HumanMessage(f"Email {who} please")]} for who in ("bob", "carol")]
    configs: Any = [{"configurable": {"thread_id": who, "user_id": "ann"}} for who in ("bob", "carol")]
    with pytest.raises(TimeoutError):
        if how == "batch":
            agent.batch(inputs, configs)
        else:
            asyncio.run(agent.abatch(inputs, configs))
    kept = {k.thread_id: k.paused for k in log.suspended_turns()}
    assert kept == {"bob": True, "carol": False}  # bob's approval is asked for; carol's run raised


# The retry's modes: a stream read to its end (its ``__interrupt__`` chunk in ``updates`` mode, none
# in ``values`` mode or in events: the checkpoint says) or closed at that chunk, ``invoke`` /
# ``ainvoke`` (the output's).
RETRIES = ["stream", "stream-closed", "stream-values", "astream", "astream_events", "invoke", "ainvoke"]


def _run(agent: MemabraAgent, payload: Any, how: str) -> None:
    """Run ``payload`` through ``how`` to the run's end."""
    if how == "invoke":
        assert agent.invoke(payload, CONFIG)["__interrupt__"]
    elif how == "ainvoke":
        assert asyncio.run(agent.ainvoke(payload, CONFIG))["__interrupt__"]
    elif how == "stream-values":
        assert list(agent.stream(payload, CONFIG, stream_mode="values"))
    elif how == "stream-closed":
        _read(agent, payload, "stream", _at_interrupt)
    else:
        _read(agent, payload, how, lambda _: False)


def _lost_by_cron(log: EpisodeLog) -> list[SuspendedTurn]:
    """What ``memabra episodes paused --lost --abandon`` would log as failed after the hour."""
    return log.suspended_turns(lost_at=utcnow() + RUNNING_TURN_LIMIT + timedelta(minutes=1))


@pytest.mark.parametrize("where", ["here", "elsewhere"])
@pytest.mark.parametrize("how", RETRIES)
def test_a_retry_that_asks_for_approval_first_keeps_the_turn_paused(log: EpisodeLog, how: str, where: str) -> None:
    """The reader left after the model's reply (the copy is kept running); the client reconnects and
    the retry's first step is the approval request, before memabra's nodes run: the turn is picked
    up by no process, and its copy must not read lost while a person is asked."""
    saver = InMemorySaver()
    first = _agent(log, [_email("bob"), AIMessage("Sent it.")], saver)
    _read(first, ASK, "stream", _after_model)
    kept = _kept(log)
    assert not kept.paused
    retry = first if where == "here" else _agent(log, [AIMessage("Sent it.")], saver)
    _run(retry, None, how)
    again = _kept(log)
    assert again.paused and again.turn_id == kept.turn_id
    assert again.document == kept.document  # the same turn: its decision and its model call
    assert _an_hour_on(log) == (0, 1) and not _lost_by_cron(log)
    # the approval (through whichever worker the retry reached) logs the turn once, as decided first
    done = retry.invoke(APPROVE, CONFIG)
    assert done["memabra_episode_id"] == kept.episode_id and not log.suspended_turns()
    assert log.count_episodes() == 1
    (decision,) = log.get_episode(kept.episode_id).selections
    routed = turn_from_document(kept.document, 0.0).selection
    assert routed is not None and (decision.id, decision.chosen_ids) == (routed.id, routed.chosen_ids)


def test_a_retry_of_a_turn_abandoned_meanwhile_writes_no_copy(log: EpisodeLog) -> None:
    """The cron logged the lost turn as failed before the client came back: the retry's approval
    request finds no copy to rewrite, and none is written for the logged episode."""
    saver = InMemorySaver()
    _read(_agent(log, [_email("bob")], saver), ASK, "stream", _after_model)
    abandoned = abandon_paused_turn(RewardService(log), _kept(log))
    _run(_agent(log, [], saver), None, "invoke")
    assert not log.suspended_turns() and [e.id for e in log.list_episodes().items] == [abandoned]


@pytest.mark.parametrize("how", ["stream", "invoke"])
def test_a_run_that_logs_its_turn_reads_no_state(log: EpisodeLog, how: str) -> None:
    """Only a run that stops at an interrupt (or, with no turn of its thread running here, one that
    goes on from a checkpoint in a stream whose modes cannot show one) reads the thread's state."""
    agent = _agent(log, [_email("bob"), AIMessage("Sent it.")], InMemorySaver())
    reads: list[Any] = []
    get_state, aget_state = agent.graph.get_state, agent.graph.aget_state
    agent.graph.get_state = lambda *a, **k: reads.append(a) or get_state(*a, **k)
    agent.graph.aget_state = lambda *a, **k: reads.append(a) or aget_state(*a, **k)
    assert agent.invoke(ASK, CONFIG)["__interrupt__"]
    assert _kept(log).paused
    reads.clear()
    if how == "invoke":
        assert agent.invoke(APPROVE, CONFIG)["memabra_episode_id"]
    else:
        _read(agent, APPROVE, "stream", lambda _: False)
    assert not log.suspended_turns() and log.count_episodes() == 1
    assert reads == []
