"""Turns an interrupt paused: kept in the log while paused, so that whichever process resumes the
run goes on with the same turn (:class:`PausedTurns`); and, when an operator gives up on one nobody
resumed, logged as a failed episode, never dropped (:func:`abandon_paused_turn`). An offline
evaluation that lost its unfinished decisions would be biased the way one that lost failing turns
would be, so the decision stays in the log with what was done before the pause and
``accepted: false`` (S = 0, until someone's verdict says otherwise)."""

from __future__ import annotations

import logging
import threading
import time

from memabra._errors import InvalidRecordError, UnknownEpisodeError
from memabra._feedback import RewardService
from memabra._records import Feedback, FeedbackKind, utcnow
from memabra._turn_document import turn_document, turn_from_document
from memabra._turns import Turn, TurnTable
from memabra.storage import EpisodeLog, SuspendedTurn

__all__ = ["ABANDONED_SOURCE", "PausedTurns", "abandon_paused_turn"]

logger = logging.getLogger("memabra")

ABANDONED_SOURCE = "memabra.abandoned_pause"
"""The feedback source of the ``accepted: false`` an abandoned turn is logged with."""


def abandon_paused_turn(rewards: RewardService, kept: SuspendedTurn) -> str:
    """Log ``kept`` as a failed episode (its row goes in the same transaction) and return the
    episode id. A turn resumed and logged meanwhile is refused by the log (its id is taken)."""
    turn = turn_from_document(kept.document, time.perf_counter())
    failed = Feedback(turn.episode_id, FeedbackKind.PROGRAMMATIC, ABANDONED_SOURCE, {"accepted": False})
    turn.feedback.append(failed)
    metadata = {"latency_ms": kept.document["elapsed_ms"], "abandoned_at": utcnow().isoformat()}
    # the turn's own time, not the operator's: its feedback window has long passed
    episode = turn.episode(
        None, metadata, created_at=turn.selection.created_at if turn.selection else kept.suspended_at
    )
    rewards.record(episode)
    logger.info("paused turn %s abandoned: logged as failed episode %s", kept.turn_id, turn.episode_id)
    return turn.episode_id


class PausedTurns:
    """A session's turns as interrupts pause them: written to the log at each pause, read back by
    whichever process resumes the run. ``lock`` also guards routing a resumed turn afresh: two
    parallel tool calls of one resumed run must not route it twice."""

    def __init__(self, log: EpisodeLog, turns: TurnTable) -> None:
        self._log = log
        self._turns = turns
        self.lock = threading.Lock()

    def suspend(self, turn_id: str, *, steps_only: bool = False) -> None:
        """Keep the turn in the log while an interrupt pauses it, so that any process, this one
        after a restart included, can go on with it. Writing it is best effort: the interrupt must
        still reach LangGraph, and this process can still resume the turn.

        Called again for a turn already paused, it writes the turn's copy again, with the steps
        recorded since: a sibling interrupt in the same step, or a call that ended after the
        interrupt paused the turn (LangGraph keeps its answer and does not run it again);
        ``steps_only`` writes only such a copy, never pausing a running turn. The write is made
        holding :attr:`lock`, so a later copy is never overwritten by an earlier one."""
        with self.lock:
            try:
                t = self._turns.get(turn_id)
            except InvalidRecordError:
                return
            if t.paused_at is None:
                if steps_only:
                    return
                t.paused_at = time.perf_counter()
                t.pauses += 1
            kept = SuspendedTurn(
                t.id,
                t.episode_id,
                t.user_id,
                t.thread_id,
                utcnow(),
                turn_document(t, (t.paused_at - t.started) * 1000.0),
            )
            try:
                self._log.suspend_turn(kept)
            except Exception:  # noqa: BLE001 - the interrupt is what the caller is raising
                logger.warning(
                    "could not keep paused turn %s in the log: only this process can resume it", turn_id, exc_info=True
                )

    def unpause(self, t: Turn) -> Turn | None:
        """``t``, paused here, going on: the log's copy where another process paused it since
        (it holds that process's steps), else ``t`` with its clock moved past the pause; ``None``
        (and ``t`` forgotten) where its episode was logged meanwhile (finished by another worker,
        or abandoned by ``memabra episodes paused --abandon``): the run needs a new turn."""
        with self.lock:
            if t.paused_at is None:
                return t
            kept = self._log.suspended_turn(t.id)
            if kept is not None and kept.document.get("pauses", 0) > t.pauses:
                newer = turn_from_document(kept.document, time.perf_counter())
                self._turns.add(newer)
                return newer
            if kept is None and self._logged(t.episode_id):
                self._turns.discard(t.id)
                return None
            t.started += time.perf_counter() - t.paused_at
            t.paused_at = None
            return t

    def from_log(self, turn_id: str) -> Turn | None:
        """The turn an interrupt paused in another process (or before a restart), now in flight
        here; ``None`` when the log keeps none. Call with :attr:`lock` held."""
        kept = self._log.suspended_turn(turn_id)
        if kept is None:
            return None
        t = turn_from_document(kept.document, time.perf_counter())
        self._turns.add(t)
        logger.info("turn %s resumed from the log, where an interrupt paused it", turn_id)
        return t

    def _logged(self, episode_id: str) -> bool:
        try:
            self._log.resolve_episode_id(episode_id)
        except UnknownEpisodeError:
            return False
        return True
