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
own context: :mod:`memabra._run_turns`) is still running here; else by the thread's next run, on
whichever worker that is. The server deletes the checkpoints after the cancelled run's task
ended, so the worker that ran it leaves a note for the thread's next run: the turn, the
checkpoint that named it and the copy of it the log kept, in the graph's store (the server gives
every run its store, one for all workers). Each run reads its thread's note (one read by key,
made beside the run, so the run answers no later for it; deleted once read) and, as it ends, logs
the turn as failed where that checkpoint is gone, no checkpoint of the thread names the turn (a
resume rolled back to the pause before it names it again), and the log still keeps that copy,
running (a run that went on with the turn rewrote it; a new message logged it as superseded). Where the
checkpoint stands (the run was interrupted, or cancelled by its client) nothing is logged: the
route step supersedes the turn, or a retry goes on with it. A graph run with no store keeps the
note in this process, so only a next run here finds it. Best effort: a warning, never a failure
of the run."""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from memabra._errors import InvalidRecordError
from memabra._graph_io import run_thread_id
from memabra._graph_steps import close_failed_turn
from memabra._run_ends import paused_turn
from memabra._run_turns import RunTurns
from memabra._session import RoutingSession, Turn

__all__ = [
    "NOTES_NAMESPACE",
    "ROLLED_BACK_REASON",
    "aclose_rolled_back",
    "anote_cancelled",
    "asettle_run",
    "atake_note",
]

logger = logging.getLogger("memabra")

ROLLED_BACK_REASON = "rolled_back: its run was cancelled and no checkpoint of the thread names the turn"
"""The comment of the ``accepted: false`` feedback a rolled-back turn is logged with."""

NOTES_NAMESPACE = ("memabra", "cancelled_turns")
"""Where in the graph's store a cancelled run's note waits for its thread's next run (keyed by
thread id; deleted as that run reads it)."""

# Threads noted per session without a store: a cancelled run whose thread never runs again is
# forgotten past this.
_MAX_NOTED = 1024


@dataclass(frozen=True, slots=True)
class _Note:
    """A cancelled run's turn, stopped here: the checkpoint that named it as the run was cancelled,
    and when the log's copy of it was written (``None``: no copy was written here)."""

    turn_id: str
    checkpoint_id: str
    copy_at: datetime | None

    def value(self) -> dict[str, Any]:
        at = None if self.copy_at is None else self.copy_at.isoformat()
        return {"turn_id": self.turn_id, "checkpoint_id": self.checkpoint_id, "copy_at": at}

    @staticmethod
    def of(value: Any) -> _Note | None:
        """The note a store item holds; ``None`` for one no memabra wrote (warned)."""
        try:
            at = value["copy_at"]
            return _Note(
                str(value["turn_id"]), str(value["checkpoint_id"]), None if at is None else datetime.fromisoformat(at)
            )
        except (KeyError, TypeError, ValueError):
            logger.warning("ignoring a note of a cancelled run that memabra did not write: %r", value)
            return None


# session -> thread id -> note, for a graph run with no store
_NOTED: weakref.WeakKeyDictionary[RoutingSession, OrderedDict[str, _Note]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _thread_config(graph: Any, config: RunnableConfig | None) -> tuple[str, RunnableConfig] | None:
    thread_id = run_thread_id(config)
    if thread_id is None or not getattr(graph, "checkpointer", None):
        return None
    return thread_id, {"configurable": {"thread_id": thread_id}}


def _store(graph: Any) -> BaseStore | None:
    store = getattr(graph, "store", None)
    return store if isinstance(store, BaseStore) else None


async def _put_note(graph: Any, session: RoutingSession, thread_id: str, note: _Note) -> None:
    store = _store(graph)
    if store is not None:
        # never embedded: a store with a search index would otherwise call its embedding model
        await store.aput(NOTES_NAMESPACE, thread_id, note.value(), index=False)
        return
    with _LOCK:
        noted = _NOTED.setdefault(session, OrderedDict())
        noted[thread_id] = note
        noted.move_to_end(thread_id)
        while len(noted) > _MAX_NOTED:
            noted.popitem(last=False)


async def _take_note(graph: Any, session: RoutingSession, thread_id: str) -> _Note | None:
    """The note a cancelled run of the thread left, now deleted: one read of the store (by key)."""
    store = _store(graph)
    if store is None:
        with _LOCK:
            noted = _NOTED.get(session)
            return noted.pop(thread_id, None) if noted else None
    item = await store.aget(NOTES_NAMESPACE, thread_id)
    if item is None:
        return None
    await store.adelete(NOTES_NAMESPACE, thread_id)
    return _Note.of(item.value)


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
    turn the state names, stopped here, with the checkpoint that names it, for the thread's next run."""
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
    copy = session.get_turn(named).copy
    note = _Note(named, str(checkpoint_id), None if copy is None else copy.suspended_at)
    try:
        await _put_note(graph, session, thread_id, note)
    except Exception:  # noqa: BLE001 - best effort, as above
        logger.warning(
            "could not leave a note of turn %s, cancelled, for thread %s's next run: were its run rolled back, the"
            " turn reads lost in an hour",
            named,
            thread_id,
            exc_info=True,
        )
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


async def atake_note(graph: Any, session: RoutingSession, config: RunnableConfig | None) -> _Note | None:
    """The note a cancelled run of the run's thread left (on any worker), deleted as it is read:
    one read of the store by key (where the graph has one), made beside the run (it starts as
    the run does and is settled as it ends, :func:`asettle_run`), so it adds nothing to the time
    the run takes to answer. ``None``: none, or it could not be read (warned)."""
    where = _thread_config(graph, config)
    if where is None:
        return None
    try:
        return await _take_note(graph, session, where[0])
    except Exception:  # noqa: BLE001 - best effort: the run must go on whatever the store does
        logger.warning(
            "could not read the note a cancelled run of thread %s may have left: were its turn rolled back, it reads"
            " lost in an hour",
            where[0],
            exc_info=True,
        )
        return None


async def asettle_run(
    graph: Any,
    session: RoutingSession,
    config: RunnableConfig | None,
    noted: Awaitable[_Note | None],
    cancelled: RunTurns | None,
) -> None:
    """As a served run ends, however it ends: log as failed the turn an earlier cancelled run of
    its thread left where it was rolled back (``noted``: :func:`atake_note`'s read); then, where
    this run was cancelled (``cancelled``: the turns it routed), settle or note its own turn
    (:func:`anote_cancelled`). In that order: the read deletes the earlier note, and must not
    delete this run's."""
    note = await noted
    if note is not None:
        await aclose_rolled_back(graph, session, config, note)
    if cancelled is not None:
        await anote_cancelled(graph, session, config, cancelled)


async def aclose_rolled_back(
    graph: Any, session: RoutingSession, config: RunnableConfig | None, note: _Note
) -> str | None:
    """Log ``note``'s turn as failed where the checkpoint that named it is gone (rolled back),
    none names it now, and the log keeps the copy noted, running (nobody went on with it: a retry
    or a resume rewrites the copy, a new message logs it as superseded); its episode id, or
    ``None``. Reads the checkpointer (and the log, where that checkpoint is gone)."""
    where = _thread_config(graph, config)
    if where is None:
        return None
    thread_id, state_config = where
    try:
        at = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": note.checkpoint_id}}
        if await graph.checkpointer.aget_tuple(at) is not None:
            return None  # it stands: superseded by the route step, or a retry goes on with it
        # gone, but another checkpoint may name the turn: a resume rolled back to its pause
        if note.turn_id in _named_turns(await graph.aget_state(state_config, subgraphs=True)):
            return None
        return await asyncio.to_thread(_close_noted, session, note, thread_id)
    except Exception:  # noqa: BLE001 - best effort: the run's own outcome is what its caller gets
        logger.warning(
            "could not log turn %s, rolled back on thread %s, as failed: it reads lost in an hour",
            note.turn_id,
            thread_id,
            exc_info=True,
        )
        return None


def _close_noted(session: RoutingSession, note: _Note, thread_id: str) -> str | None:
    """Log ``note``'s turn as failed where the log keeps the copy noted, running: not where its
    episode was logged, a person is asked, or a process went on with it since (a newer copy)."""
    kept = session.log.suspended_turn(note.turn_id)
    try:
        here: Turn | None = session.get_turn(note.turn_id)
    except InvalidRecordError:
        here = None
    if here is not None and (here.paused_at is None or here.logged):
        return None  # a run here goes on with it now, or logged it
    if kept is None:
        if here is None or here.kept_in_log:
            return None  # logged meanwhile (a turn never kept and not here has nothing to log)
    elif kept.paused or (note.copy_at is not None and kept.suspended_at != note.copy_at):
        return None
    if here is None:
        t = session.kept_turn(note.turn_id)  # the worker that ran it is another: the log's copy
        if t is None:
            return None
        if t.logged:  # logged since the read above: one decision, one episode
            session.abandon(note.turn_id)
            return None
    return _close(session, note.turn_id, thread_id)


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
