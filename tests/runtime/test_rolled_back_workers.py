"""A turn whose run the Agent Server rolled back (``multitask_strategy="rollback"``), with the
thread's next run on another worker: two served graphs, each with a session of its own (two
worker processes), sharing one log, one SQLite checkpointer and one store, as the server's workers
do. The server cancels the first run in the worker running it, then deletes that run's
checkpoints; the next run of the thread starts wherever its queue hands it. The cancelled turn was
kept running, read lost an hour later and fired the ``turns`` health check: only the worker that
saw the cancel knew it was rolled back. A turn some checkpoint still names (a plain cancel; a
resume that was rolled back to the pause before it) stays open for the run that goes on with it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.memory import InMemoryStore

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, create_memabra_agent
from memabra._rolled_back import ROLLED_BACK_REASON
from memabra._served_graph import MemabraServedGraph
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
THREAD = "mail"
CONFIG: Any = {"configurable": {"thread_id": THREAD}}
USER = {"user_id": "ann"}
SEARCH = AIMessage("", tool_calls=[{"name": "slow_lookup", "args": {"query": "contract"}, "id": "s1"}])
ROUTED_S = 10.0


@tool
async def slow_lookup(query: str) -> str:
    """Look something up in the slow archive."""
    await asyncio.sleep(5.0 if not _FAST.is_set() else 0.0)
    return f"found {query}"


_FAST = threading.Event()  # set: the archive answers at once (the run that goes on with a turn)


@pytest.fixture(autouse=True)
def _slow_archive() -> None:
    _FAST.clear()


@asynccontextmanager
async def _workers(
    url: str, tmp_path: Path, lexical: Any, replies_a: list[AIMessage], replies_b: list[AIMessage]
) -> AsyncIterator[tuple[MemabraServedGraph, MemabraServedGraph, AsyncSqliteSaver]]:
    """Two workers' copies of the served graph, as the server makes them for each run: one
    checkpointer and one store for all, a log each (over one database: the test's ``log`` reads it)."""
    store = InMemoryStore()
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        with EpisodeLog(url) as log_a, EpisodeLog(url) as log_b:  # one per worker process
            agents = [
                create_memabra_agent(
                    ScriptedChatModel(replies=replies),
                    tools=[slow_lookup],
                    db=own_log,
                    router=HybridRouter(similarity=lexical),
                    budget=ALL_TOOLS,
                )
                for own_log, replies in ((log_a, replies_a), (log_b, replies_b))
            ]
            try:
                a, b = (agent.server_graph.copy(update={"checkpointer": saver, "store": store}) for agent in agents)
                yield a, b, saver
            finally:
                for agent in agents:
                    agent.close()


async def _cancel_in_its_slow_call(graph: MemabraServedGraph, input: Any, **kwargs: Any) -> str:
    """Run ``input`` on ``graph`` until it is inside its slow tool call, then cancel the run (the
    server's cancel, as the worker running it sees it); the turn it ran."""
    before = (await graph.aget_state(CONFIG)).values.get("memabra_turn")

    async def run() -> None:
        async for _ in graph.astream(input, CONFIG, context=USER, **kwargs):
            pass

    task = asyncio.create_task(run())
    turn = None
    for _ in range(int(ROUTED_S / 0.05)):
        await asyncio.sleep(0.05)
        state = await graph.aget_state(CONFIG)
        turn = state.values.get("memabra_turn")
        if turn and (turn != before or input is None) and state.next == ("tools",):
            break
    await asyncio.sleep(0.3)  # into its slow tool call
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert isinstance(turn, str)
    return turn


async def _last_checkpoint(saver: AsyncSqliteSaver) -> str:
    found = await saver.aget_tuple(CONFIG)
    assert found is not None
    return str(found.config["configurable"]["checkpoint_id"])


async def _roll_back_since(saver: AsyncSqliteSaver, checkpoint_id: str) -> None:
    """Delete the thread's checkpoints (and their writes) made after ``checkpoint_id``: the
    cancelled run's, as the server's rollback deletes them (after the run's task ended)."""
    for table in ("checkpoints", "writes"):
        await saver.conn.execute(
            f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_id > ?",  # noqa: S608 - a constant table name
            (THREAD, checkpoint_id),
        )
    await saver.conn.commit()


def _failed_comments(log: EpisodeLog, episode_id: str) -> list[Any]:
    return [
        f.payload.get("comment") for f in log.get_episode(episode_id).feedback if f.payload.get("accepted") is False
    ]


def test_a_rolled_back_turn_is_logged_failed_by_the_worker_that_runs_the_threads_next_run(
    log: EpisodeLog, migrated_url: str, tmp_path: Path, lexical: Any
) -> None:
    async def scenario() -> tuple[str, str, dict[str, Any]]:
        replies_a, replies_b = [AIMessage("Hello!"), SEARCH], [AIMessage("Hello again!")]
        async with _workers(migrated_url, tmp_path, lexical, replies_a, replies_b) as (a, b, saver):
            first = await a.ainvoke({"messages": [HumanMessage("Hello there")]}, CONFIG, context=USER)
            before_rollback = await _last_checkpoint(saver)
            turn = await _cancel_in_its_slow_call(a, {"messages": [HumanMessage("Search the archive")]})
            await _roll_back_since(saver, before_rollback)
            kept = log.suspended_turn(turn)
            assert kept is not None and not kept.paused  # kept running: it would read lost in an hour
            out = await b.ainvoke({"messages": [HumanMessage("Hi again")]}, CONFIG, context=USER)
            return first["memabra_episode_id"], turn, out

    first, turn, out = asyncio.run(scenario())
    assert _failed_comments(log, turn) == [ROLLED_BACK_REASON]
    earlier = log.get_episode(turn)
    assert earlier.selections and all(s.propensity > 0 for s in earlier.selections)
    assert _failed_comments(log, first) == [] and _failed_comments(log, out["memabra_episode_id"]) == []
    assert log.get_episode(out["memabra_episode_id"]).reward is not None
    assert not log.suspended_turns()  # nothing reads lost


def test_a_cancelled_turn_its_checkpoint_still_names_is_left_to_the_worker_that_goes_on_with_it(
    log: EpisodeLog, migrated_url: str, tmp_path: Path, lexical: Any
) -> None:
    """A plain cancel (``runs.cancel``, ``multitask_strategy="interrupt"``): the checkpoints stand;
    a retry on the other worker goes on with the turn and logs it once, not failed (a new message
    there supersedes it, as before: ``tests/runtime/test_served_graph.py``)."""

    async def scenario() -> tuple[str, dict[str, Any]]:
        async with _workers(migrated_url, tmp_path, lexical, [SEARCH], [AIMessage("Found it.")]) as (a, b, _):
            turn = await _cancel_in_its_slow_call(a, {"messages": [HumanMessage("Search the archive")]})
            _FAST.set()
            out = await b.ainvoke(None, CONFIG, context=USER)  # the retry, from the checkpoint
            return turn, out

    turn, out = asyncio.run(scenario())
    assert out["memabra_episode_id"] == turn
    assert _failed_comments(log, turn) == []
    assert [s.name for s in log.get_episode(turn).steps if s.kind.value == "tool"] == ["slow_lookup"]
    assert not log.suspended_turns()


@pytest.mark.parametrize("next_on", ["same worker", "other worker"])
def test_a_resume_rolled_back_to_the_pause_before_it_leaves_the_turn_for_the_next_resume(
    log: EpisodeLog, migrated_url: str, tmp_path: Path, lexical: Any, next_on: str
) -> None:
    """A turn paused at a breakpoint before its model call; its resume is rolled back (a double
    click on "approve") after its model asked for the slow tool: the thread's state is the pause
    again, which names the turn, so the next resume, on either worker, goes on with it and logs it
    once. The checkpoint the cancelled resume made is gone, which alone read as "rolled back"."""

    async def scenario() -> tuple[str, dict[str, Any]]:
        found = AIMessage("Found it.")
        async with _workers(migrated_url, tmp_path, lexical, [SEARCH, found], [found]) as (a, b, saver):
            paused = await a.ainvoke(
                {"messages": [HumanMessage("Search the archive")]}, CONFIG, context=USER, interrupt_before=["agent"]
            )
            at_pause = await _last_checkpoint(saver)
            turn = await _cancel_in_its_slow_call(a, None)
            assert turn == paused["memabra_turn"]
            await _roll_back_since(saver, at_pause)
            _FAST.set()
            out = await (a if next_on == "same worker" else b).ainvoke(None, CONFIG, context=USER)
            return turn, out

    turn, out = asyncio.run(scenario())
    assert out["memabra_episode_id"] == turn
    assert _failed_comments(log, turn) == []
    assert not log.suspended_turns()
