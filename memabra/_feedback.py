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
from datetime import datetime

from memabra._records import Episode, Feedback, FeedbackReceipt, LearningItem, RewardBreakdown, utcnow
from memabra._reward import CompositeReward, RewardConfig, validate_payload
from memabra.storage import EpisodeLog

__all__ = ["RewardService"]

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
        breakdown = self.reward.score(episode, episode.feedback)
        closed_at = utcnow() if final else None
        to_log = Episode(
            user_id=episode.user_id,
            query=episode.query,
            selections=episode.selections,
            steps=episode.steps,
            answer=episode.answer,
            thread_id=episode.thread_id,
            turn=episode.turn,
            id=episode.id,
            created_at=episode.created_at,
            reward=breakdown,
            finalized_at=closed_at,
            feedback=episode.feedback,
            used_ids=episode.used_ids,
            metadata=episode.metadata,
        )
        self.log.log_episode(to_log)
        return breakdown

    def post_feedback(self, feedback: Feedback) -> FeedbackReceipt:
        """Store feedback and fold it into the episode's reward while the window is open."""
        validate_payload(feedback.payload)
        receipt = self.log.add_feedback(feedback)
        if receipt.status == "stored":
            self._rescore(feedback.episode_id, final=bool(feedback.payload.get("final")))
        elif receipt.status == "late":
            logger.info("late feedback %s for episode %s stored, not learned", receipt.feedback_id, feedback.episode_id)
        return receipt

    def finalize_due(self, now: datetime | None = None) -> int:
        """Close every episode whose feedback window has passed; returns how many were closed."""
        closed = 0
        for episode_id in self.log.due_episode_ids(now):
            if self._rescore(episode_id, final=True):
                closed += 1
        return closed

    def finalize(self, episode_id: str) -> bool:
        return self._rescore(episode_id, final=True)

    def claim_learning(self, limit: int = 1000) -> list[LearningItem]:
        return self.log.claim_learning(limit=limit)

    def _rescore(self, episode_id: str, *, final: bool) -> bool:
        episode = self.log.get_episode(episode_id)
        breakdown = self.reward.score(episode, episode.feedback)
        return self.log.put_reward(episode_id, breakdown, final=final)
