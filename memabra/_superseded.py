"""A turn a new message superseded: logged as failed as the next turn of its thread is routed.

A run stopped before its turn was logged (a chat UI's "stop" button: ``runs.cancel``, a cancelled
``astream``; the first run of the Agent Server's ``multitask_strategy`` ``"interrupt"`` /
``"rollback"``; a run that raised) keeps its turn in the log, running, for a retry from the
checkpoint (input ``None``) to go on with. When the user sends a new message on the thread
instead, LangGraph runs that input from ``START``: the pending nodes are dropped, and so is a
pending interrupt (a turn paused while a person was asked, who sent a message instead of an answer;
``tests/runtime/test_superseded_turns.py`` holds it), and the route step writes the new turn over
the state's ``memabra_turn``, so no run of the thread can go on with the earlier one. Left kept, it
would read lost an hour later and fire the ``turns`` health check on the normal "stop generating,
ask again" flow. So it is logged at once as failed, with its decision and propensities (an offline
evaluation that dropped it would be biased), by :func:`~memabra._graph_steps.close_failed_turn`
with :data:`SUPERSEDED_REASON` as the feedback's comment.

Only where the thread's checkpointed state names the turn (a run with a checkpointer): without
one, two replicas may serve one thread id at once, and nothing says the other turn is dead. Never
a turn running in this process now (concurrent runs on one thread). Best effort: a warning, never
a failure of the new turn."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from memabra._errors import InvalidRecordError
from memabra._graph_io import run_thread_id
from memabra._graph_steps import close_failed_turn, state_field
from memabra._session import RoutingSession, Turn

__all__ = ["SUPERSEDED_REASON", "close_superseded"]

logger = logging.getLogger("memabra")

SUPERSEDED_REASON = "superseded: a new message on the thread before the turn finished"
"""The comment of the ``accepted: false`` feedback a superseded turn is logged with; its first
word is the cause to filter on, as ``failure_reason`` writes the others."""

# The run's checkpointer in a node's config, as LangGraph passes it (its CONFIG_KEY_CHECKPOINTER,
# which it exports only from a private module): unset or None for a graph run without one.
_CHECKPOINTER_KEY = "__pregel_checkpointer"


def close_superseded(
    session: RoutingSession, state: Any, messages: Sequence[AnyMessage], config: RunnableConfig | None
) -> str | None:
    """Log the turn ``state`` names as failed, superseded, where it was never logged and the run
    routing a new turn on ``messages`` (the state's, the new input's last) cannot go on with it;
    the episode id, or ``None`` (nothing to log, or logging failed: warned). Called by each route
    step (the built-in agent's, :class:`~memabra.MemabraMiddleware`'s ``before_agent``,
    :class:`~memabra.MemabraNodes`' ``route``) before it routes: sync, off the event loop in an
    async run (LangGraph runs a sync node in its executor; ``abefore_agent`` on a worker thread).

    The usual route reads nothing: a turn its logging node logged left its own id as the state's
    ``memabra_episode_id`` (a first decision's episode id is its turn's). Otherwise one read of the
    log's copy; a turn with none (logged as failed, or routed with nothing to choose) is left."""
    earlier = state_field(state, "memabra_turn")
    if not isinstance(earlier, str) or not earlier or state_field(state, "memabra_episode_id") == earlier:
        return None
    thread_id = run_thread_id(config)
    if thread_id is None or not ((config or {}).get("configurable") or {}).get(_CHECKPOINTER_KEY):
        return None
    try:
        return _close(session, earlier, thread_id, _before_last_human(messages))
    except Exception:  # noqa: BLE001 - best effort: the new turn must route whatever the log does
        logger.warning(
            "could not log turn %s, superseded by a new message on thread %s, as failed: it stays kept, and reads"
            " lost in an hour",
            earlier,
            thread_id,
            exc_info=True,
        )
        return None


def _close(session: RoutingSession, earlier: str, thread_id: str, messages: Sequence[AnyMessage]) -> str | None:
    try:
        turn: Turn | None = session.get_turn(earlier)
    except InvalidRecordError:
        turn = None
    if turn is not None and (turn.paused_at is None or turn.logged):
        return None  # a run on the thread here now, alongside this one; or one its logging node logged
    if turn is None:
        if session.log.suspended_turn(earlier) is None:  # logged meanwhile, or nothing was routed
            return None
        turn = session.kept_turn(earlier, messages)  # with the steps its messages show the copy lacks
        if turn is None:
            return None
        if turn.logged:  # logged since the read above: one decision, one episode
            session.abandon(earlier)
            return None
    turn.resume_clock()
    episode_id = close_failed_turn(session, earlier, reason=SUPERSEDED_REASON)
    if episode_id is not None:
        logger.info(
            "turn %s was superseded by a new message on thread %s: logged as failed episode %s",
            earlier,
            thread_id,
            episode_id,
        )
    return episode_id


def _before_last_human(messages: Sequence[AnyMessage]) -> Sequence[AnyMessage]:
    """The messages before the new input's user message: the earlier turn's end at the last."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=len(messages))
    return messages[:last]
