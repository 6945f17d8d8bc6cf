"""Edges of keeping a turn in the log from the moment it is routed (``test_lost_turns`` kills real
processes; here a process "dies" in-process: a ``BaseException`` no hook catches ends the run where
a SIGKILL would, the checkpointer keeps what it had written, and the retry is made by a new session
over the same log and checkpointer, which is all a new process would share with the dead one).

Covered: the async entry points; a death during a tool call (after the model's call: the checkpoint
written before the tools step); a death
after the episode was logged and before the checkpoint was written; two retries of one thread; a
turn paused, resumed elsewhere and then lost; a turn retried long after its process died; a turn
abandoned while it ran and then paused; two cron hosts abandoning the same lost turns."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from typer.testing import CliRunner

from factories import route_model_finish

CONFIG: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
ASK = {"messages": [HumanMessage("Email bob please")]}
CALL = AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": "bob"}, "id": "c1"}])


class Killed(BaseException):
    """What a SIGKILL does to the run: nothing of memabra's sees it go (the dying run is driven
    through the compiled graph, so no ``finally`` of :class:`MemabraAgent` runs either)."""


def _die(*_: Any, **__: Any) -> Any:
    raise Killed


@tool
def send_email(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}"


@tool("send_email")
def send_email_approved(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}" if interrupt("send it?") == "yes" else "not sent"


def _session(log: Any, lexical: Any, sending: Any) -> Any:
    from memabra import Budget, CandidateKind
    from memabra._agent import build_session
    from memabra.router import HybridRouter

    budget = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
    return build_session(tools=[sending], db=log, budget=budget, router=HybridRouter(similarity=lexical))


def _builtin(log: Any, lexical: Any, replies: list[Any], saver: Any, sending: Any = send_email) -> Any:
    """A new process's ``create_memabra_agent``: its own session, the shared log and checkpointer."""
    from fakes import ScriptedChatModel
    from memabra import Budget, CandidateKind
    from memabra._agent import create_memabra_agent
    from memabra.router import HybridRouter

    budget = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
    model = ScriptedChatModel(replies=replies)
    return create_memabra_agent(
        model, tools=[sending], db=log, router=HybridRouter(similarity=lexical), budget=budget, checkpointer=saver
    )


def _middleware(log: Any, lexical: Any, replies: list[Any], saver: Any, sending: Any = send_email) -> Any:
    """A new process's ``create_agent`` with :class:`MemabraMiddleware`."""
    from langchain.agents import create_agent

    from fakes import ScriptedChatModel
    from memabra import MemabraAgent
    from memabra._middleware import MemabraMiddleware

    middleware = MemabraMiddleware(_session(log, lexical, sending))
    graph = create_agent(
        ScriptedChatModel(replies=replies), tools=[sending], middleware=[middleware], checkpointer=saver
    )
    return MemabraAgent(graph, middleware.session)


def _nodes(log: Any, lexical: Any, replies: list[Any], saver: Any) -> Any:
    """A new process's graph of its own built with :class:`MemabraNodes`."""

    from fakes import ScriptedChatModel
    from memabra import MemabraAgent
    from memabra._middleware import MemabraNodes, MemabraNodeState

    nodes = MemabraNodes(_session(log, lexical, send_email))
    model = ScriptedChatModel(replies=replies)

    async def call_model(state: MemabraNodeState) -> dict[str, Any]:
        bound = model.bind_tools(nodes.tools(state, [send_email]))
        reply = await bound.ainvoke([("system", nodes.system_prompt(state) or "-"), *state["messages"]])
        nodes.record_model_call(state, reply, 1.0)
        return {"messages": [reply]}

    builder = route_model_finish(MemabraNodeState, nodes, call_model)
    return MemabraAgent(builder.compile(checkpointer=saver), nodes.session)


def _kept(log: Any) -> Any:
    assert not log.list_episodes().items
    (kept,) = log.suspended_turns()
    assert not kept.paused and kept.document["selection"] is not None
    return kept


def _one_episode(log: Any, kept: Any) -> Any:
    from memabra._turn_document import turn_from_document

    (summary,) = log.list_episodes().items
    episode = log.get_episode(summary.id)
    routed = turn_from_document(kept.document, 0.0).selection
    assert episode.id == kept.episode_id
    (selection,) = episode.selections
    assert selection.slots == routed.slots and selection.seed == routed.seed
    assert not log.suspended_turns() and log.status().lost_turns == 0
    return episode


def _steps(episode: Any) -> list[tuple[str, str]]:
    return [(s.kind.value, s.name) for s in episode.steps]


# ------------------------------------------------------------------------------ the async paths


@pytest.mark.parametrize("build", [_builtin, _middleware, _nodes], ids=["agent", "middleware", "nodes"])
def test_an_async_run_killed_mid_model_call_is_retried_async_with_its_decision(
    log: Any, lexical: Any, build: Any
) -> None:
    saver = InMemorySaver()

    async def die() -> None:
        dying = build(log, lexical, [AIMessage("Sent it.")], saver)
        dying.session.record_model_call = _die  # the process dies as the model's reply comes back
        with pytest.raises(Killed):
            await dying.graph.ainvoke(ASK, CONFIG, durability="sync")

    asyncio.run(die())
    kept = _kept(log)

    async def retry() -> list[Any]:
        return [c async for c in build(log, lexical, [AIMessage("Sent it.")], saver).astream(None, CONFIG)]

    chunks = asyncio.run(retry())
    assert chunks
    episode = _one_episode(log, kept)
    assert episode.answer == "Sent it." and [k for k, _ in _steps(episode)] == ["model"]


# ------------------------------------------------------------------ killed during a tool call


@pytest.mark.parametrize("build", [_builtin, _middleware], ids=["agent", "middleware"])
def test_a_run_killed_in_a_tool_call_is_retried_with_the_routed_tools_and_one_episode(
    log: Any, lexical: Any, build: Any
) -> None:
    saver = InMemorySaver()
    # the checkpoint the process leaves when it dies in a tool: the model's step, the tools' not
    build(log, lexical, [CALL], saver).graph.invoke(ASK, CONFIG, durability="sync", interrupt_before=["tools"])
    kept = _kept(log)
    assert "send_email" in kept.document["tool_names"]
    bound: list[list[str]] = []

    def answer(messages: Any, tools: Any) -> AIMessage:
        bound.append(tools)
        return AIMessage("Sent it.")

    out = build(log, lexical, [answer], saver).invoke(None, CONFIG, durability="sync")
    episode = _one_episode(log, kept)
    assert out["memabra_episode_id"] == episode.id and episode.answer == "Sent it."
    assert bound == [["send_email"]]  # the routed tools, as the dead process bound them
    # the tool ran once (in the retry) and the answer's model call is counted once; the first
    # model call's step, made by the dead process, is read back from its reply in the checkpoint
    # (which names no model, so the step is called "model")
    assert _steps(episode) == [("model", "model"), ("tool", "send_email"), ("model", "ScriptedChatModel")]


# ------------------------------------------- killed after logging, before the checkpoint


@pytest.mark.parametrize("build", [_builtin, _middleware], ids=["agent", "middleware"])
def test_a_run_killed_after_its_episode_was_logged_is_not_logged_twice_by_its_retry(
    log: Any, lexical: Any, build: Any, caplog: pytest.LogCaptureFixture
) -> None:
    saver = InMemorySaver()
    dying = build(log, lexical, [AIMessage("Sent it.")], saver)
    finish = dying.session.finish

    def logged_then_killed(turn_id: str, answer: str) -> str:
        finish(turn_id, answer)
        raise Killed

    dying.session.finish = logged_then_killed
    with pytest.raises(Killed):
        dying.invoke(ASK, CONFIG, durability="sync")
    (summary,) = log.list_episodes().items
    caplog.set_level(logging.WARNING, "memabra")
    out = build(log, lexical, [AIMessage("Sent it again.")], saver).invoke(None, CONFIG, durability="sync")
    assert [e.id for e in log.list_episodes().items] == [summary.id] and not log.suspended_turns()
    assert out["memabra_episode_id"] == summary.id  # the retry names the episode its turn was logged as
    assert "not logged again" in caplog.text


# ------------------------------------------------------------ two retries of one thread at once


def test_two_processes_retrying_one_lost_thread_at_once_log_one_episode(log: Any, lexical: Any, caplog: Any) -> None:
    saver = InMemorySaver()
    with pytest.raises(Killed):
        _middleware(log, lexical, [_die], saver).graph.invoke(ASK, CONFIG, durability="sync")
    kept = _kept(log)
    other: list[Any] = []

    def meanwhile(messages: Any, tools: Any) -> AIMessage:
        # the second retry starts and finishes while the first is at its model call
        other.append(_middleware(log, lexical, [AIMessage("Sent (B).")], saver).invoke(None, CONFIG))
        return AIMessage("Sent (A).")

    caplog.set_level(logging.WARNING, "memabra")
    first = _middleware(log, lexical, [meanwhile], saver).invoke(None, CONFIG)
    episode = _one_episode(log, kept)
    assert first["memabra_episode_id"] == other[0]["memabra_episode_id"] == episode.id
    assert episode.answer == "Sent (B)." and "not logged again" in caplog.text


# ------------------------------------------------------- a retry long after the process died


def test_a_turn_retried_after_it_was_taken_for_lost_runs_as_running_again(
    log: Any, lexical: Any, migrated_url: str
) -> None:
    from sqlalchemy import text

    from memabra.storage import make_engine

    saver = InMemorySaver()
    with pytest.raises(Killed):
        _builtin(log, lexical, [_die], saver).graph.invoke(ASK, CONFIG, durability="sync")
    kept = _kept(log)
    engine = make_engine(migrated_url)
    with engine.begin() as conn:  # the client retries two hours later (a queue's retry, a user's reload)
        conn.execute(
            text("UPDATE suspended_turns SET suspended_at = :at"), {"at": kept.suspended_at - timedelta(hours=2)}
        )
    engine.dispose()
    assert log.status().lost_turns == 1
    seen: list[tuple[int, bool]] = []

    def answer(messages: Any, tools: Any) -> AIMessage:
        (now,) = log.suspended_turns()
        seen.append((log.status().lost_turns, now.paused))
        return AIMessage("Sent it.")

    _builtin(log, lexical, [answer], saver).invoke(None, CONFIG, durability="sync")
    # while the retry ran, the turn was running, not lost: a --lost --abandon cron would have
    # logged it as failed under the retry's feet
    assert seen == [(0, False)]
    _one_episode(log, kept)


# ---------------------------------------------- paused, resumed in another process, then lost


@pytest.mark.parametrize("build", [_builtin, _middleware], ids=["agent", "middleware"])
def test_a_paused_turn_resumed_elsewhere_is_kept_as_running_and_is_lost_when_that_process_dies(
    log: Any, lexical: Any, build: Any
) -> None:
    saver = InMemorySaver()
    build(log, lexical, [CALL], saver, send_email_approved).invoke(ASK, CONFIG, durability="sync")
    (paused,) = log.suspended_turns()
    assert paused.paused
    resumed = build(log, lexical, [_die], saver, send_email_approved)
    with pytest.raises(Killed):
        resumed.graph.invoke(Command(resume="yes"), CONFIG, durability="sync")
    (left,) = log.suspended_turns()
    # the turn ran past its pause when its process died: it waits on nobody, and is lost in time
    assert not left.paused and left.suspended_at > paused.suspended_at
    assert left.stale(left.suspended_at + timedelta(hours=2))


# ----------------------------------------------- abandoned while it ran, then paused


def test_a_turn_abandoned_while_it_ran_leaves_no_copy_when_it_pauses_after(log: Any, lexical: Any) -> None:
    from memabra._feedback import RewardService
    from memabra._paused_turns import abandon_paused_turn

    abandoned: list[str] = []

    def abandon_then_call(messages: Any, tools: Any) -> AIMessage:
        (kept,) = log.suspended_turns()
        abandoned.append(abandon_paused_turn(RewardService(log), kept))
        return CALL

    saver = InMemorySaver()
    agent = _builtin(log, lexical, [abandon_then_call, AIMessage("Sent it.")], saver, send_email_approved)
    agent.invoke(ASK, CONFIG)
    # the pause must not write back a copy of a turn the log already holds as an episode: it
    # would be listed as unfinished for ever, and every --abandon of it would fail
    assert not log.suspended_turns()
    # resumed, the run goes on as a new turn (as one resumed after its pause was abandoned does)
    out = agent.invoke(Command(resume="yes"), CONFIG)
    assert out["memabra_episode_id"] != abandoned[0] and not log.suspended_turns()
    assert sorted(e.id for e in log.list_episodes().items) == sorted([*abandoned, out["memabra_episode_id"]])


# ----------------------------------------------------- two cron hosts abandoning lost turns


def test_two_hosts_abandoning_the_same_lost_turns_log_each_once_and_both_succeed(
    log: Any, lexical: Any, migrated_url: str, tmp_path: Any, monkeypatch: Any
) -> None:
    import json

    from sqlalchemy import text

    from memabra._cli import _paused, app
    from memabra._feedback import RewardService
    from memabra.storage import make_engine

    saver = InMemorySaver()
    for thread in ("a", "b"):
        config = {"configurable": {"thread_id": thread, "user_id": "ann"}}
        with pytest.raises(Killed):
            _builtin(log, lexical, [_die], saver).graph.invoke(ASK, config, durability="sync")
    first, second = log.suspended_turns()
    engine = make_engine(migrated_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE suspended_turns SET suspended_at = :at"), {"at": first.suspended_at - timedelta(hours=2)}
        )
    engine.dispose()
    real = _paused.abandon_paused_turn

    def other_host_first(rewards: Any, kept: Any, **who: Any) -> str:
        if kept.turn_id == first.turn_id:  # the other cron host logged this one a moment earlier
            real(RewardService(log), kept, actor="cli:other-host")
        return real(rewards, kept, **who)

    monkeypatch.setattr(_paused, "abandon_paused_turn", other_host_first)
    out = tmp_path / "lost.json"
    done = CliRunner().invoke(
        app, ["episodes", "paused", "--db", migrated_url, "--lost", "--abandon", "--json", str(out)]
    )
    assert done.exit_code == 0, done.output
    listed = {t["turn_id"]: t["logged_as"] for t in json.loads(out.read_text())["paused"]}
    assert listed == {first.turn_id: first.episode_id, second.turn_id: second.episode_id}
    assert sorted(e.id for e in log.list_episodes().items) == sorted([first.episode_id, second.episode_id])
    assert not log.suspended_turns()


# ------------------------------------------------ a run cancelled under MemabraAgent (client gone)


def test_a_run_cancelled_mid_turn_is_kept_as_running_so_it_is_lost_not_paused(log: Any, lexical: Any) -> None:
    """An async server cancels the request when its client goes away: the run stops with nodes
    still to run, but no interrupt paused it and nobody waits to resume it. Its copy must read as
    running (so it is lost in time, and ``--lost --abandon`` logs it), not as waiting on a person."""
    import threading
    import time

    saver = InMemorySaver()
    calling = threading.Event()

    def slow(messages: Any, tools: Any) -> AIMessage:
        calling.set()
        time.sleep(0.5)
        return AIMessage("Sent it.")

    async def cancelled() -> None:
        agent = _middleware(log, lexical, [slow], saver)
        run = asyncio.create_task(agent.ainvoke(ASK, CONFIG, durability="sync"))
        await asyncio.to_thread(calling.wait)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(cancelled())
    (kept,) = log.suspended_turns()
    assert not kept.paused and kept.stale(kept.suspended_at + timedelta(hours=2))
    assert log.status().paused_turns == 0
