"""A turn whose run the Agent Server rolled back (``multitask_strategy="rollback"``: a new run on a
busy thread cancels the running one and deletes its run and checkpoints), for
:class:`~memabra._served_graph.MemabraServedGraph`.

The cancelled run keeps its turn, running, for a retry from its checkpoint to go on with
(:mod:`memabra._kept_runs`), where its thread's state names the turn. After a rollback none does:
the next run starts from the checkpoint before, so no run can go on with the turn, and the route
step's check for a superseded turn (:mod:`memabra._superseded`) does not see it either, as the
state names the turn before. Left kept, it would read lost an hour later (``memabra status``:
"their process died mid-turn"), fire the ``turns`` health check, and get its reward only when an
operator abandoned it. So it is logged as failed, with its decision and propensities and
:data:`ROLLED_BACK_REASON` as the comment: as its run is cancelled, where the server deleted the
run's checkpoints first (the in-memory runtime does, eagerly) and the turn the run routed (in its
own context: :mod:`memabra._run_turns`) is still running here; else by the thread's next run in
this process, as it starts, where the checkpoint that named it is gone by then. Where that
checkpoint stands (the run was interrupted, or cancelled by its client), nothing is logged: the
route step supersedes the turn, or a retry goes on with it. A next run on another worker finds
no note: the turn is kept, as before. Best effort: a warning, never a failure of the run."""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import OrderedDict
from typing import Any

from langchain_core.runnables import RunnableConfig

from memabra._errors import InvalidRecordError
from memabra._graph_io import run_thread_id
from memabra._graph_steps import close_failed_turn
from memabra._run_ends import paused_turn
from memabra._run_turns import RunTurns
from memabra._session import RoutingSession

__all__ = ["ROLLED_BACK_REASON", "aclose_rolled_back", "anote_cancelled"]

logger = logging.getLogger("memabra")

ROLLED_BACK_REASON = "rolled_back: its run was cancelled and no checkpoint of the thread names the turn"
"""The comment of the ``accepted: false`` feedback a rolled-back turn is logged with."""

# Threads noted per session: a cancelled run whose thread never runs again is forgotten past this.
_MAX_NOTED = 1024

# session -> thread id -> (turn id, id of the checkpoint that named it when its run was cancelled)
_NOTED: weakref.WeakKeyDictionary[RoutingSession, OrderedDict[str, tuple[str, str]]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _thread_config(graph: Any, config: RunnableConfig | None) -> tuple[str, RunnableConfig] | None:
    thread_id = run_thread_id(config)
    if thread_id is None or not getattr(graph, "checkpointer", None):
        return None
    return thread_id, {"configurable": {"thread_id": thread_id}}


def _stopped_here(session: RoutingSession, turn_id: str) -> bool:
    try:
        t = session.get_turn(turn_id)
    except InvalidRecordError:
        return False
    return t.paused_at is not None and not t.logged


async def anote_cancelled(
    graph: Any, session: RoutingSession, config: RunnableConfig | None, routed: RunTurns
) -> str | None:
    """After a cancelled run's turn was kept: log as failed a turn it routed (``routed``) that is
    still running here where the thread's state no longer names it (the server deleted the run's
    checkpoints as it cancelled it: no run can go on with the turn), its episode id; else note the
    turn the state names, stopped here, with the checkpoint that names it."""
    where = _thread_config(graph, config)
    if where is None:
        return None
    thread_id, state_config = where
    try:
        snapshot = await graph.aget_state(state_config, subgraphs=True)
    except Exception:  # noqa: BLE001 - best effort: the turn is kept, as before
        logger.warning("could not read the state of a cancelled run of thread %s", thread_id, exc_info=True)
        return None
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    named = values.get("memabra_turn")
    named = named if isinstance(named, str) else paused_turn(snapshot, None)
    # a turn any checkpoint of the thread names (the graph's, or a subgraph's: memabra agents run as
    # nodes of a bigger graph) is not an orphan, however many the run routed: a retry goes on with it
    kept = _named_turns(snapshot) | ({named} if isinstance(named, str) else set())
    orphans = [t for t in routed.ids if t not in kept and _running_here(session, t, thread_id)]
    if len(orphans) == 1 and not routed.full:
        return await asyncio.to_thread(_close, session, orphans[0], thread_id)
    checkpoint_id = ((snapshot.config or {}).get("configurable") or {}).get("checkpoint_id")
    if not isinstance(named, str) or not checkpoint_id or not _stopped_here(session, named):
        return None
    with _LOCK:
        noted = _NOTED.setdefault(session, OrderedDict())
        noted[thread_id] = (named, str(checkpoint_id))
        noted.move_to_end(thread_id)
        while len(noted) > _MAX_NOTED:
            noted.popitem(last=False)
    return None


def _named_turns(snapshot: Any) -> set[str]:
    """Every turn the state names: the graph's own and each subgraph's, its checkpoint standing."""
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    turn = values.get("memabra_turn")
    named = {turn} if isinstance(turn, str) else set()
    for task in getattr(snapshot, "tasks", None) or ():
        nested = getattr(task, "state", None)
        if nested is not None and hasattr(nested, "next"):  # a subgraph's snapshot, not a config
            named |= _named_turns(nested)
    return named


def _running_here(session: RoutingSession, turn_id: str, thread_id: str) -> bool:
    try:
        t = session.get_turn(turn_id)
    except InvalidRecordError:
        return False
    return t.paused_at is None and not t.logged and t.thread_id == thread_id


async def aclose_rolled_back(graph: Any, session: RoutingSession, config: RunnableConfig | None) -> str | None:
    """As a run of a thread starts: log the turn its cancelled run left as failed where the
    checkpoint that named it is gone (rolled back); its episode id, or ``None``."""
    where = _thread_config(graph, config)
    if where is None:
        return None
    thread_id, _ = where
    with _LOCK:
        noted = _NOTED.get(session)
        found = noted.pop(thread_id, None) if noted else None
    if found is None:
        return None
    turn_id, checkpoint_id = found
    at = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    try:
        if await graph.checkpointer.aget_tuple(at) is not None or not _stopped_here(session, turn_id):
            return None  # it stands: superseded by the route step, or a retry goes on with it
        return await asyncio.to_thread(_close, session, turn_id, thread_id)
    except Exception:  # noqa: BLE001 - best effort: the new run must go on whatever the log does
        logger.warning(
            "could not log turn %s, rolled back, as failed: it reads lost in an hour", turn_id, exc_info=True
        )
        return None


def _close(session: RoutingSession, turn_id: str, thread_id: str) -> str | None:
    session.get_turn(turn_id).resume_clock()  # the time since its run was cancelled is not its latency
    episode_id = close_failed_turn(session, turn_id, reason=ROLLED_BACK_REASON)
    if episode_id is not None:
        logger.info(
            "turn %s was rolled back by a new run on thread %s: logged as failed episode %s",
            turn_id,
            thread_id,
            episode_id,
        )
    return episode_id
