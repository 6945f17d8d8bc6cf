"""Feedback ``retract_memory`` ("that's wrong, forget it") retiring the memory it names, by one rule
on every path feedback takes: :meth:`~memabra.RoutingSession.feedback` (and so ``afeedback`` and
:func:`~memabra.feedback_app`), ``memabra feedback`` and the admin's feedback form.

The feedback is stored first and always: the user's correction counts in the reward whatever the
id names. The memory is then retired only where it is the episode user's current memory. An id
that is not (unknown, another user's, retired or superseded since the turn it was offered on)
changes nobody's memories and gets one log line saying why, so a user who pressed "that's wrong"
on an old turn whose memory was replaced meanwhile still has the correction recorded.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.exc import OperationalError

from memabra._errors import InvalidRecordError, MemabraError
from memabra._memory_records import MemoryAction, MemoryStatus

if TYPE_CHECKING:
    from collections.abc import Callable

    from memabra._feedback import RewardService
    from memabra._memory import MemoryBackend
    from memabra._records import Feedback, FeedbackReceipt
    from memabra.storage import EpisodeLog

__all__ = ["Retraction", "attempt", "post_retracting", "post_retraction", "retract", "retraction_reason"]

logger = logging.getLogger("memabra")


def retraction_reason(episode_id: str) -> str:
    """The reason a memory retracted by feedback on ``episode_id`` carries in its history."""
    return f"retracted by the user on episode {episode_id}"


@dataclass(frozen=True, slots=True)
class Retraction:
    """What storing a feedback and retiring what it retracts came to: ``receipt`` (its
    ``retired_memory`` the memory retired, if any) and ``failure``, why retiring failed after the
    feedback was stored (an outage), ``None`` where it did not: a caller telling a person "not
    retired" says whether the id was no current memory or the database failed midway."""

    receipt: FeedbackReceipt
    failure: str | None = None


def post_retracting(service: RewardService, feedback: Feedback, memory: Callable[[], MemoryBackend]) -> FeedbackReceipt:
    """Store ``feedback`` (:meth:`RewardService.post_feedback <memabra._feedback.RewardService.post_feedback>`)
    and :func:`retract` what it retracts in ``memory()``, built only where it retracts one (the
    CLI's and the admin's memories import the router): what the admin's feedback form runs, by the
    rule the agent's own feedback follows."""
    return post_retraction(service, feedback, memory).receipt


def post_retraction(service: RewardService, feedback: Feedback, memory: Callable[[], MemoryBackend]) -> Retraction:
    """:func:`post_retracting`, saying why retiring failed where it did (``memabra feedback``)."""
    receipt = service.post_feedback(feedback)
    if feedback.signals.explicit.retract_memory is None:
        return Retraction(receipt)
    return attempt(memory(), service.log, feedback, receipt)


def retract(memory: MemoryBackend, log: EpisodeLog, feedback: Feedback, receipt: FeedbackReceipt) -> FeedbackReceipt:
    """``receipt`` of stored ``feedback``, with the memory its ``retract_memory`` retired (see the
    module's docstring). Never raises: the feedback is stored already, and raising would have the
    caller send it again (a second correction in the reward); a failure to retire is logged and
    the receipt names no memory."""
    return attempt(memory, log, feedback, receipt).receipt


def attempt(memory: MemoryBackend, log: EpisodeLog, feedback: Feedback, receipt: FeedbackReceipt) -> Retraction:
    """:func:`retract`, with the failure (if any) it logged."""
    memory_id = feedback.signals.explicit.retract_memory
    if memory_id is None:
        return Retraction(receipt)
    try:
        retired = _retract(memory, log, feedback, receipt, memory_id)
    except Exception as exc:  # an outage after the feedback committed: a retry with its key retires it
        expected = isinstance(exc, (MemabraError, OperationalError))  # one line; anything else, its traceback
        logger.log(
            logging.WARNING if expected else logging.ERROR,
            "feedback %s on episode %s is stored, but retiring the memory %r it retracts failed: %s",
            receipt.feedback_id,
            feedback.episode_id,
            memory_id,
            exc,
            exc_info=not expected,
        )
        return Retraction(receipt, failure=f"{type(exc).__name__}: {exc}")
    return Retraction(dataclasses.replace(receipt, retired_memory=retired))


def _retract(
    memory: MemoryBackend, log: EpisodeLog, feedback: Feedback, receipt: FeedbackReceipt, memory_id: str
) -> str | None:
    episode_id = feedback.episode_id
    if receipt.status == "duplicate":
        # the stored feedback is what stands: an idempotency key reused with another memory id
        # retracted that one (or none), not the id sent now
        stored = log.feedback_for(episode_id, include_late=True)
        earlier = next((f for f in stored if f.id == receipt.feedback_id), None)
        if earlier is None or earlier.signals.explicit.retract_memory != memory_id:
            return None
    user_id = log.get_episode(episode_id).user_id
    if type(memory).retire is _base_retire():
        logger.warning(
            "feedback on episode %s retracts memory %s, but %s cannot retire a memory "
            "(MemoryBackend.retire): it stays current",
            episode_id,
            memory_id,
            type(memory).__name__,
        )
        return None
    # one turn with the user's other writers: a retry racing its first send retires once
    with memory._writing(user_id):
        return _retire_current(memory, user_id, memory_id, episode_id)


def _retire_current(memory: MemoryBackend, user_id: str, memory_id: str, episode_id: str) -> str | None:
    try:
        record = memory.get(user_id, memory_id)
    except InvalidRecordError:
        # unknown and another user's alike: nothing of anyone's is read or changed
        logger.info(
            "feedback on episode %s retracts %r, which is no memory of user %s: stored as a correction, "
            "nothing retired",
            episode_id,
            memory_id,
            user_id,
        )
        return None
    if record.status is MemoryStatus.RETIRED:
        if _retired_by(memory, user_id, memory_id, episode_id):
            return memory_id  # a retry (or a second click) of the retraction that retired it
        by = f"superseded by {record.superseded_by}" if record.superseded_by else "retired"
        logger.info(
            "feedback on episode %s retracts memory %s of user %s, %s since: stored as a correction, nothing retired",
            episode_id,
            memory_id,
            user_id,
            by,
        )
        return None
    if _retracted_on(memory, user_id, memory_id, episode_id):
        # retired by this episode's retraction and restored by hand since: the restore stands
        logger.info(
            "memory %s of user %s was restored after its retraction on episode %s: left current",
            memory_id,
            user_id,
            episode_id,
        )
        return None
    try:
        memory.retire(user_id, memory_id, reason=retraction_reason(episode_id), episode_id=episode_id)
    except InvalidRecordError as exc:  # retired or forgotten by another process since the read
        if _retired_by(memory, user_id, memory_id, episode_id):
            return memory_id
        logger.info("memory %s retracted on episode %s was not retired: %s", memory_id, episode_id, exc)
        return None
    logger.info("memory %s of user %s retired: retracted on episode %s", memory_id, user_id, episode_id)
    return memory_id


def _retracted_on(memory: MemoryBackend, user_id: str, memory_id: str, episode_id: str) -> bool:
    """Whether feedback on ``episode_id`` ever retired ``memory_id`` (its history says so)."""
    reason = retraction_reason(episode_id)
    try:
        history = memory.history(user_id, memory_id)
    except InvalidRecordError:  # forgotten meanwhile
        return False
    return any(c.action is MemoryAction.RETIRED and c.episode_id == episode_id and c.reason == reason for c in history)


def _retired_by(memory: MemoryBackend, user_id: str, memory_id: str, episode_id: str) -> bool:
    """Whether ``memory_id`` is retired now by feedback on ``episode_id`` (its last retirement)."""
    try:
        history = memory.history(user_id, memory_id)
    except InvalidRecordError:
        return False
    last = next((c for c in reversed(history) if c.action is MemoryAction.RETIRED), None)
    return last is not None and last.episode_id == episode_id and last.reason == retraction_reason(episode_id)


def _base_retire() -> object:
    from memabra._memory import MemoryBackend  # the CLI imports this module at start-up: kept light

    return MemoryBackend.retire
