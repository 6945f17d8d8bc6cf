"""A run that raised ``GraphRecursionError``, for :class:`~memabra.MemabraAgent`: it ran out of
steps mid-turn (a graph of one's own with :class:`~memabra.MemabraNodes`, or ``create_agent`` with
:class:`~memabra.MemabraMiddleware`; only the built-in agent stops in time, at ``finish``).

Its turn is logged as failed, as a turn whose model or tool raised is, rather than kept running
for a retry that would not help: retried with the same ``recursion_limit`` it runs out again, and
a retry with a higher one routes the turn afresh under the same id
(:func:`~memabra._graph_steps.current_turn`). Only a turn known to be the run's own is closed:
the one the thread's checkpoint names, else, without a checkpointer, the one turn still running
here that the run routed or took up in its own context (:mod:`memabra._run_turns`) and, where the
run has a thread id, that began on its thread while the run ran. A run with no thread id is the
usual stateless call (``agent.invoke(messages)``): no retry can go on with its turn, which would
otherwise read lost in an hour and wait on an operator for its reward (each run of a
``MemabraAgent`` batch starts in a context of its own, so is told apart the same way). Where
nothing tells (a run that routed several turns, or runs started in one context) the turn is kept
running, as for any run that raised: closing a guess could log another run's turn as failed mid-run."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from memabra._errors import InvalidRecordError
from memabra._graph_io import run_thread_id
from memabra._graph_steps import close_failed_turn, error_text, failure_reason
from memabra._run_ends import paused_turn
from memabra._run_turns import RunTurns, watch_run_turns
from memabra._session import RoutingSession

__all__ = ["RunStart", "aclose_out_of_steps", "close_out_of_steps", "running_before"]

logger = logging.getLogger("memabra")

_UNREAD = "could not read the state of a run out of steps: its turn is kept running (a retry goes on with it)"


def _checkpointed(graph: Any, config: RunnableConfig | None) -> RunnableConfig | None:
    """The run's thread's latest checkpoint, where the graph keeps one."""
    thread_id = run_thread_id(config)
    if thread_id is None or not getattr(graph, "checkpointer", None):
        return None
    return {"configurable": {"thread_id": thread_id}}


@dataclass(frozen=True, slots=True)
class RunStart:
    """What a run without a checkpointer knew as it started (both ``None`` with one: its checkpoint
    will name the turn). ``before``: its thread's turns running here then (``None``: no thread id);
    ``routed``: the turns it routed or took up since, in its context."""

    before: frozenset[str] | None = None
    routed: RunTurns | None = None


def running_before(graph: Any, session: RoutingSession, config: RunnableConfig | None) -> RunStart:
    """Called as a run starts, in the context its graph runs in."""
    if getattr(graph, "checkpointer", None):
        return RunStart()
    thread_id = run_thread_id(config)
    before = None if thread_id is None else session.running_turns(thread_id)
    return RunStart(before, watch_run_turns())


def _running_here(session: RoutingSession, turn_id: str, thread_id: str | None) -> bool:
    try:
        t = session.get_turn(turn_id)
    except InvalidRecordError:
        return False
    return t.paused_at is None and not t.logged and t.thread_id == thread_id


def _run_turn(session: RoutingSession, config: RunnableConfig | None, start: RunStart, snapshot: Any) -> str | None:
    thread_id = run_thread_id(config)
    if snapshot is not None:
        return paused_turn(snapshot, session.running_turns(thread_id) if thread_id is not None else None)
    mine: set[str] | None = None
    if thread_id is not None and start.before is not None:
        mine = set(session.running_turns(thread_id) - start.before)
    routed = start.routed
    if routed is not None and routed.ids and not routed.full:
        noted = {t for t in routed.ids if _running_here(session, t, thread_id)}
        mine = noted if mine is None else mine & noted
    if mine and len(mine) > 1:
        logger.warning("a run of thread %s ran out of steps beside others: its turn is kept running", thread_id)
    return next(iter(mine)) if mine and len(mine) == 1 else None


def _closed(session: RoutingSession, turn_id: str, exc: BaseException) -> None:
    # the reason is its feedback's, so a reviewer of the failed episode sees why, not only this log
    reason = failure_reason("recursion_limit", error_text(exc))
    if close_failed_turn(session, turn_id, reason=reason) is not None:
        logger.warning("turn %s ran out of its run's recursion_limit: logged as a failed turn", turn_id)


# close_out_of_steps and aclose_out_of_steps differ only in how the state is read and the turn
# written (a deliberate repeat: an async checkpointer has no sync reads). Neither raises: the
# caller re-raises the run's GraphRecursionError.
def close_out_of_steps(
    graph: Any,
    session: RoutingSession,
    config: RunnableConfig | None,
    start: RunStart,
    exc: BaseException,
) -> None:
    """Log the turn of a run that raised ``GraphRecursionError`` (``exc``) as failed, where it is known."""
    snapshot = None
    state_config = _checkpointed(graph, config)
    if state_config is not None:
        try:
            snapshot = graph.get_state(state_config, subgraphs=True)
        except Exception:  # noqa: BLE001 - the caller keeps the turn running
            logger.warning(_UNREAD, exc_info=True)
            return
    turn_id = _run_turn(session, config, start, snapshot)
    if turn_id is not None:
        _closed(session, turn_id, exc)


async def aclose_out_of_steps(
    graph: Any,
    session: RoutingSession,
    config: RunnableConfig | None,
    start: RunStart,
    exc: BaseException,
) -> None:
    snapshot = None
    state_config = _checkpointed(graph, config)
    if state_config is not None:
        try:
            snapshot = await graph.aget_state(state_config, subgraphs=True)
        except Exception:  # noqa: BLE001 - as in close_out_of_steps
            logger.warning(_UNREAD, exc_info=True)
            return
    turn_id = _run_turn(session, config, start, snapshot)
    if turn_id is not None:  # a database write: off the event loop
        await asyncio.to_thread(_closed, session, turn_id, exc)
