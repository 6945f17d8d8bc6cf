"""Keeping the turn of a run that ended with nodes still to run, for whichever worker goes on
with it (:class:`~memabra.MemabraAgent` calls these as each run ends, however it ends).

:func:`keep_paused` and :func:`akeep_paused` differ only in how the state is read and the turn
written (a deliberate repeat: an async checkpointer has no sync reads). Neither raises: the run's
own outcome (its result, or its exception) is what the caller gets.
``waiting``: True, the run stopped by itself (an interrupt or a breakpoint waits on someone);
False, it raised (nobody waits); ``None``, it ended early (:func:`waits_on_someone` reads which from
the state already read). ``breakpoints``: the call's keyword arguments, for its breakpoints.
``interrupted``: the run stopped at an interrupt, read where no turn of its thread runs here
(:func:`_keep_asked`); false for the usual run, which reads nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from memabra._graph_io import run_thread_id
from memabra._paused_turns import pause_running_copy
from memabra._run_ends import asked_turn, paused_turn, waits_on_someone
from memabra._session import RoutingSession

__all__ = ["akeep_paused", "keep_paused"]

logger = logging.getLogger("memabra")

_NONE: Mapping[str, Any] = {}  # a call with no keyword arguments

_UNREAD = (
    "could not read the run's state to see whether it paused: only this process can resume its turn with the"
    " steps made so far"
)
_UNREAD_ASKED = (
    "could not read the state of a run that stopped at an interrupt: a turn kept running that it asks a person"
    " about reads lost in an hour"
)


def keep_paused(
    graph: Any,
    session: RoutingSession,
    config: RunnableConfig | None,
    *,
    waiting: bool | None = True,
    breakpoints: Mapping[str, Any] = _NONE,
    interrupted: bool = False,
) -> None:
    where = _unfinished(graph, session, config)
    if where is None:
        if interrupted:
            _keep_asked(graph, session, config)
        return
    state_config, running = where
    try:
        snapshot = graph.get_state(state_config, subgraphs=True)
    except Exception:  # noqa: BLE001 - only this process can resume the run now
        logger.warning(_UNREAD, exc_info=True)
        return
    turn_id = paused_turn(snapshot, running)
    if turn_id is not None:
        waiting = waits_on_someone(graph, snapshot, breakpoints) if waiting is None else waiting
        session.suspend(turn_id, waiting=waiting)
        logger.info("turn %s stopped between nodes: kept in the log", turn_id)


async def akeep_paused(
    graph: Any,
    session: RoutingSession,
    config: RunnableConfig | None,
    *,
    waiting: bool | None = True,
    breakpoints: Mapping[str, Any] = _NONE,
    interrupted: bool = False,
) -> None:
    where = _unfinished(graph, session, config)
    # Shielded: a server that cancels the request (the client went away) cancels it again at
    # each await of its cleanup; the turn is kept all the same.
    if where is not None:
        await asyncio.shield(_akeep(graph, session, *where, waiting, breakpoints))
    elif interrupted:
        await asyncio.shield(_akeep_asked(graph, session, config))


async def _akeep(
    graph: Any,
    session: RoutingSession,
    state_config: RunnableConfig,
    running: frozenset[str],
    waiting: bool | None,
    breakpoints: Mapping[str, Any],
) -> None:
    try:
        snapshot = await graph.aget_state(state_config, subgraphs=True)
    except Exception:  # noqa: BLE001 - as in keep_paused
        logger.warning(_UNREAD, exc_info=True)
        return
    turn_id = paused_turn(snapshot, running)
    if turn_id is not None:
        waiting = waits_on_someone(graph, snapshot, breakpoints) if waiting is None else waiting
        # a database write: off the event loop
        await asyncio.to_thread(functools.partial(session.suspend, turn_id, waiting=waiting))
        logger.info("turn %s stopped between nodes: kept in the log", turn_id)


def _unfinished(
    graph: Any, session: RoutingSession, config: RunnableConfig | None
) -> tuple[RunnableConfig, frozenset[str]] | None:
    """The thread's latest checkpoint and its turns still running here, where the run could
    have ended paused; ``None`` for the usual run, which logged its turn (no state is read)."""
    state_config = _latest(graph, config)
    if state_config is None:
        return None
    running = session.running_turns(state_config["configurable"]["thread_id"])
    return (state_config, running) if running else None


def _latest(graph: Any, config: RunnableConfig | None) -> RunnableConfig | None:
    """The run's thread's latest checkpoint (not one the caller forked from); ``None`` without one."""
    thread_id = run_thread_id(config)
    if thread_id is None or not getattr(graph, "checkpointer", None):
        return None
    return {"configurable": {"thread_id": thread_id}}


# ``_keep_asked`` and ``_akeep_asked`` (as ``keep_paused`` and ``_akeep``, a deliberate repeat):
# a run stopped at an interrupt with no turn of its thread running here. A turn its state names
# may still be kept running in the log: its stream's reader left mid-run, or its process died,
# and this run (a retry) asked for approval before memabra's nodes or hooks ran again, so no
# process picked the turn up. A person is asked now: its copy is rewritten as paused, never lost.
def _keep_asked(graph: Any, session: RoutingSession, config: RunnableConfig | None) -> None:
    state_config = _latest(graph, config)
    if state_config is None:
        return
    try:
        snapshot = graph.get_state(state_config, subgraphs=True)
    except Exception:  # noqa: BLE001 - as in keep_paused
        logger.warning(_UNREAD_ASKED, exc_info=True)
        return
    turn_id = asked_turn(snapshot)
    if turn_id is not None:
        pause_running_copy(session.log, turn_id)


async def _akeep_asked(graph: Any, session: RoutingSession, config: RunnableConfig | None) -> None:
    state_config = _latest(graph, config)
    if state_config is None:
        return
    try:
        snapshot = await graph.aget_state(state_config, subgraphs=True)
    except Exception:  # noqa: BLE001 - as in keep_paused
        logger.warning(_UNREAD_ASKED, exc_info=True)
        return
    turn_id = asked_turn(snapshot)
    if turn_id is not None:  # a database read, and maybe a write: off the event loop
        await asyncio.to_thread(pause_running_copy, session.log, turn_id)
