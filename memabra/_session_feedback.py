""":class:`~memabra.RoutingSession`'s feedback and learning: a verdict on a logged episode (a
correction's fact going into the user's memory, a retracted memory retired), the in-process
learner's step and its snapshot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from memabra._records import Feedback, FeedbackKind, FeedbackReceipt
from memabra._retraction import retract, retraction_reason

if TYPE_CHECKING:
    from memabra._session import RoutingSession

__all__ = ["FeedbackAndLearning", "retraction_reason"]


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
        receipt = session.rewards.post_feedback(feedback)
        # stored first, whatever the id names: the correction counts even where nothing is retired;
        # retired before the correction's fact is written, which would otherwise supersede the
        # retracted memory ("I live in Oslo" retiring "I live in Hobart") and leave the receipt
        # saying nothing was retracted
        receipt = retract(session.memory, session.log, feedback, receipt)
        correction = payload.get("correction")
        if isinstance(correction, str) and correction.strip() and receipt.status != "duplicate":
            session._after_logging(
                episode_id,
                "storing the fact of its correction",
                lambda: self._remember_correction(episode_id, correction),
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

    def learn_pending(self) -> int:
        """Run the in-process learner (when this process holds the policy's lease): close episodes
        whose feedback window passed and learn every final reward not yet learned, exactly once, in
        commit order. Returns how many rewards were learned."""
        status = self._session.runtime.step()
        return status.learned if status is not None else 0

    def save_snapshot(self) -> str:
        """Commit the learner's model now (with its read position); returns the version serving."""
        return self._session.runtime.commit()
