"""A turn's routing decisions in the log, by episode id: its first, then one for each time it was
routed afresh (closed unfinished and retried, or forked: a chat UI's "Regenerate" of its answer).
Read by :class:`~memabra._paused_turns.PausedTurns` where a run goes on with a turn neither in
flight here nor kept. Imported by the CLI: LangChain is read only where a run's messages are."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from memabra._errors import UnknownEpisodeError
from memabra._records import Episode
from memabra.storage import EpisodeLog

__all__ = ["ABANDONED_SOURCE", "FAILED_TURN_SOURCE", "decision_id", "logged_decisions"]

ABANDONED_SOURCE = "memabra.abandoned_pause"
"""The feedback source of the ``accepted: false`` an abandoned turn is logged with."""

FAILED_TURN_SOURCE = "memabra.failed_turn"
"""The feedback source of the ``accepted: false`` a turn ended by an exception is logged with."""

# A turn's decisions after the first: one routed afresh for each time the turn was closed
# unfinished (failed, abandoned) and its run retried. Past this many, a fresh id (never reached).
_MAX_DECISIONS = 100
# Reads of a turn's copy while resuming it, each write refused as another process wrote meanwhile.
_READS = 3
_DECISIONS = uuid.UUID("6d656d61-6272-6100-8000-000000000001")


def decision_id(turn_id: str, n: int) -> str:
    """The episode id of turn ``turn_id``'s ``n``-th routing decision: the turn id itself for the
    first, derived from it for those routed afresh. Any process computes the same ids, so the log's
    key on episode ids says whether a turn's decision was logged: the run that goes on after its
    logging node (a ``Command(goto=...)`` beside a pending node, a retry of a run killed after it
    logged) finds it there and logs nothing again, instead of routing a second decision."""
    return turn_id if n == 0 else uuid.uuid5(_DECISIONS, f"{turn_id}/{n}").hex


def _closed_unfinished(episode: Episode) -> bool:
    """Logged by an exception or an operator, not by its run's logging node: a retry may route the
    turn afresh (a new decision, a new episode)."""
    return any(f.source in (FAILED_TURN_SOURCE, ABANDONED_SOURCE) for f in episode.feedback)


def logged_decisions(
    log: EpisodeLog, turn_id: str, *, settled: bool = True, messages: Sequence[Any] | None = None
) -> tuple[Episode | None, str]:
    """The decision of turn ``turn_id`` its run's logging node logged (``None``: none, or
    ``settled`` false), and the episode id the turn's next decision would take.

    Without ``messages``, the first such decision. With the run's ``messages``, the one whose
    answer they hold (:func:`~memabra._message_steps.ended_in`; the latest, where several do):
    a turn regenerated has a decision per branch of its thread, and the run going on after a
    logging node (a retry of a run killed after it logged) is that branch's, whichever decision
    the log holds first. None where they hold no logged answer: a fork from before every answer,
    routed afresh under the next id."""
    found: Episode | None = None
    for n in range(_MAX_DECISIONS):
        episode_id = decision_id(turn_id, n)
        try:
            episode = log.get_episode(episode_id)
        except UnknownEpisodeError:
            return found, episode_id
        if not settled or _closed_unfinished(episode):
            continue
        if messages is None:
            return episode, episode_id
        from memabra._message_steps import ended_in  # LangChain: never at the CLI's start-up

        if ended_in(episode, messages):
            found = episode
    return found, uuid.uuid4().hex
