"""Feedback, delayed rewards and the learning queue, on top of the episode log.

An episode is logged with a provisional reward computed from what is known at once (steps,
tool errors, latency, tokens). Feedback that arrives inside the feedback window (default 10
minutes) is stored and the provisional reward recomputed. When the window closes (or feedback
says ``final``) the reward becomes final, and only final rewards reach the router, each exactly
once (:meth:`RewardService.claim_learning`). Feedback after that is stored and marked late, for
review, and never learned from. The same idempotency key posted twice is a no-op.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from memabra._errors import InvalidFeedbackError, MemabraError
from memabra._records import Episode, Feedback, FeedbackReceipt, LearningItem, RewardBreakdown, RewardWeights, utcnow
from memabra._reward import CompositeReward, RewardConfig, rescored
from memabra._signals import FEEDBACK_KEYS
from memabra.storage import EpisodeLog

__all__ = ["RewardService", "recompute_rewards"]

logger = logging.getLogger("memabra")


class RewardService:
    def __init__(self, log: EpisodeLog, config: RewardConfig | None = None) -> None:
        self.log = log
        self.reward = CompositeReward(config)
        log.feedback_window = self.reward.config.feedback_window

    @property
    def config(self) -> RewardConfig:
        return self.reward.config

    def record(self, episode: Episode, *, final: bool = False) -> RewardBreakdown:
        """Log an episode with its provisional (or, with ``final``, final) reward in one transaction."""
        scored = self.scored(episode, final=final)
        self.log.log_episode(scored)
        assert scored.reward is not None
        return scored.reward

    def scored(self, episode: Episode, *, final: bool = False) -> Episode:
        """The episode with its provisional (or final) reward, ready for ``log.log_episodes``."""
        return replace(
            episode, reward=self.reward.score(episode, episode.feedback), finalized_at=utcnow() if final else None
        )

    def post_feedback(self, feedback: Feedback) -> FeedbackReceipt:
        """Store feedback and fold it into the episode's reward, in one transaction, while the
        window is open (``Feedback`` validated its payload when it was built). Feedback with no
        signal in it raises :class:`~memabra._errors.InvalidFeedbackError` and nothing is stored
        (an empty call is a caller's mistake, not a verdict on the episode)."""
        if not feedback.signals.as_payload():
            raise InvalidFeedbackError(
                f"feedback on episode {feedback.episode_id!r} carries no signal; give at least one of "
                f"{', '.join(sorted(FEEDBACK_KEYS))}"
            )
        receipt = self.log.add_feedback(feedback, self._score, final=feedback.signals.final)
        if receipt.status == "late":
            logger.info("late feedback %s for episode %s stored, not learned", receipt.feedback_id, feedback.episode_id)
        return receipt

    def finalize_due(self, now: datetime | None = None) -> int:
        """Close every episode whose feedback window has passed; returns how many were closed.

        An episode that cannot be scored (a feedback row stored before payloads were validated,
        say) is logged and left open; the others are still closed."""
        closed = 0
        for episode_id in self.log.due_episode_ids(now):
            try:
                if self.log.rescore(episode_id, self._score, final=True):
                    closed += 1
            except MemabraError as exc:
                logger.error("episode %s could not be finalised and stays open: %s", episode_id, exc)
        return closed

    def finalize(self, episode_id: str) -> bool:
        return self.log.rescore(episode_id, self._score, final=True)

    def claim_learning(self, limit: int = 1000) -> list[LearningItem]:
        return self.log.claim_learning(limit=limit)

    def recompute_rewards(
        self,
        weights: RewardWeights,
        *,
        since: datetime | None = None,
        version: str | None = None,
        use_memory_scores: bool = False,
    ) -> int:
        """See :func:`recompute_rewards`."""
        return recompute_rewards(self.log, weights, since=since, version=version, use_memory_scores=use_memory_scores)

    def _score(self, episode: Episode) -> RewardBreakdown:
        return self.reward.score(episode, episode.feedback)


def recompute_rewards(
    log: EpisodeLog,
    weights: RewardWeights,
    *,
    since: datetime | None = None,
    version: str | None = None,
    use_memory_scores: bool = False,
) -> int:
    """Re-total every stored reward under ``weights`` from its stored components; returns how many
    were updated. Nothing is re-run: the components are the record. ``use_memory_scores`` replaces
    Hm with the MemPO label (+1 / -1) of the episode's decision wherever one is stored."""
    labels = log.memory_labels() if use_memory_scores else {}
    updates = {
        episode_id: rescored(stored, weights, memory_label=labels.get(episode_id))
        for episode_id, stored in log.stored_rewards(since=since)
    }
    return log.write_rewards(updates, weights, version=version)
