""":class:`~memabra.RoutingSession`'s feedback and learning: a verdict on a logged episode (a
correction's fact going into the user's memory, a retracted memory retired), the in-process
learner's step and its snapshot."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from memabra._errors import InvalidFeedbackError, InvalidRecordError
from memabra._memory import MemoryBackend
from memabra._memory_records import MemoryAction, MemoryStatus
from memabra._records import Feedback, FeedbackKind, FeedbackReceipt

if TYPE_CHECKING:
    from memabra._session import RoutingSession

__all__ = ["FeedbackAndLearning", "retraction_reason"]

logger = logging.getLogger("memabra")


def retraction_reason(episode_id: str) -> str:
    """The reason a memory retracted by feedback on ``episode_id`` carries in its history."""
    return f"retracted by the user on episode {episode_id}"


class FeedbackAndLearning:
    """Mixed into :class:`~memabra.RoutingSession` only."""

    @property
    def _session(self) -> RoutingSession:
        return cast("RoutingSession", self)

    def feedback(
        self,
        episode_id: str,
        *,
        kind: FeedbackKind | str = FeedbackKind.EXPLICIT,
        source: str = "api",
        idempotency_key: str | None = None,
        **payload: Any,
    ) -> FeedbackReceipt:
        session = self._session
        extra: dict[str, Any] = {"idempotency_key": idempotency_key} if idempotency_key else {}
        # the record parses the kind: one that is none of FeedbackKind's is an InvalidFeedbackError
        feedback = Feedback(episode_id, kind, source, payload, **extra)  # type: ignore[arg-type]
        retracted = feedback.signals.explicit.retract_memory
        owner = None
        if retracted is not None:
            # checked before anything is stored: a retraction naming no memory of the episode's
            # user is a caller's mistake, refused whole rather than stored as a correction that
            # retired nothing (the user would see the memory again and think it was forgotten)
            owner = session.log.get_episode(episode_id).user_id
            _retractable(session.memory, owner, retracted, episode_id)
        receipt = session.rewards.post_feedback(feedback)
        correction = payload.get("correction")
        if isinstance(correction, str) and correction.strip() and receipt.status != "duplicate":
            session._after_logging(
                episode_id,
                "storing the fact of its correction",
                lambda: self._remember_correction(episode_id, correction),
            )
        if retracted is not None and owner is not None:
            user_id = owner
            session._after_logging(
                episode_id,
                f"retiring the memory {retracted!r} it retracts",
                lambda: self._retract(episode_id, user_id, retracted, receipt),
            )
        if session.learn_online:
            session._after_logging(episode_id, "the learner's step", self.learn_pending)
        return receipt

    def _remember_correction(self, episode_id: str, correction: str) -> None:
        """A correction's fact goes into the user's memory by the write path a user message takes
        ("I moved to Oslo" retires "I live in Lyon"; "wrong tool" states no fact). After the
        feedback is stored: a failure here costs the fact, never the reward's signal. Late feedback
        still carries the fact, so it is remembered too."""
        session = self._session
        user_id = session.log.get_episode(episode_id).user_id
        session.memory.write_from_message(user_id, correction, session.extractor, episode_id=episode_id)

    def _retract(self, episode_id: str, user_id: str, memory_id: str, receipt: FeedbackReceipt) -> None:
        """Retire the memory the stored feedback retracts, once per episode: a re-sent retraction
        (a retry, a second click) finds it retired by this episode and leaves it, and one restored
        by hand since stays restored. Late feedback retires it too: the user asked to forget it."""
        session = self._session
        if receipt.status == "duplicate":
            # the stored feedback is what stands: an idempotency key reused with another memory id
            # retracted that one (or none), not the id sent now
            stored = session.log.feedback_for(episode_id, include_late=True)
            earlier = next((f for f in stored if f.id == receipt.feedback_id), None)
            if earlier is None or earlier.signals.explicit.retract_memory != memory_id:
                return
        memory = session.memory
        if not _can_retire(memory):
            logger.warning(
                "feedback on episode %s retracts memory %s, but %s cannot retire a memory "
                "(MemoryBackend.retire): it stays current",
                episode_id,
                memory_id,
                type(memory).__name__,
            )
            return
        with memory._writing(user_id):
            if _retracted_by(memory, user_id, memory_id, episode_id):
                return
            try:
                memory.retire(user_id, memory_id, reason=retraction_reason(episode_id), episode_id=episode_id)
            except InvalidRecordError as exc:  # retired or forgotten since the check: nothing to undo
                if not _retracted_by(memory, user_id, memory_id, episode_id):  # not by the same retraction sent twice
                    logger.warning("memory %s retracted on episode %s was not retired: %s", memory_id, episode_id, exc)
                return
        logger.info("memory %s of user %s retired: retracted on episode %s", memory_id, user_id, episode_id)

    def learn_pending(self) -> int:
        """Run the in-process learner (when this process holds the policy's lease): close episodes
        whose feedback window passed and learn every final reward not yet learned, exactly once, in
        commit order. Returns how many rewards were learned."""
        status = self._session.runtime.step()
        return status.learned if status is not None else 0

    def save_snapshot(self) -> str:
        """Commit the learner's model now (with its read position); returns the version serving."""
        return self._session.runtime.commit()


def _retractable(memory: MemoryBackend, user_id: str, memory_id: str, episode_id: str) -> None:
    """Refuse (:class:`InvalidFeedbackError`, naming the id) a retraction of a memory the episode's
    user does not have (unknown, another user's: the same answer, so ids cannot be probed) or that
    is retired already by anything but this episode's own retraction (a re-sent one passes)."""
    try:
        record = memory.get(user_id, memory_id)
    except InvalidRecordError:
        raise InvalidFeedbackError(
            f"feedback 'retract_memory': the episode's user has no memory {memory_id!r:.220}; nothing was stored"
        ) from None
    if record.status is MemoryStatus.RETIRED and not _retracted_by(memory, user_id, memory_id, episode_id):
        by = f" (superseded by {record.superseded_by})" if record.superseded_by else ""
        raise InvalidFeedbackError(
            f"feedback 'retract_memory': memory {memory_id!r} is already retired{by}, so it is no longer "
            "recalled; nothing was stored"
        )


def _retracted_by(memory: MemoryBackend, user_id: str, memory_id: str, episode_id: str) -> bool:
    """Whether feedback on ``episode_id`` retired ``memory_id`` already (its history says so)."""
    reason = retraction_reason(episode_id)
    try:
        history = memory.history(user_id, memory_id)
    except InvalidRecordError:  # forgotten meanwhile
        return False
    return any(c.action is MemoryAction.RETIRED and c.episode_id == episode_id and c.reason == reason for c in history)


def _can_retire(memory: MemoryBackend) -> bool:
    return type(memory).retire is not MemoryBackend.retire
