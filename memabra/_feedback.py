"""Feedback, delayed rewards and the learning queue, on top of the episode log.

An episode is logged with a provisional reward computed from what is known at once (steps,
tool errors, latency, tokens). Feedback that arrives inside the feedback window (default 10
minutes) is stored and the provisional reward recomputed. When the window closes (or feedback
says ``final``) the reward becomes final, and only final rewards reach the router, each exactly
once (:meth:`RewardService.claim_learning`). Feedback after that is stored and marked late, for
review, and never learned from. The same idempotency key posted twice is a no-op.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from datetime import datetime

from memabra._errors import ConfigError, InvalidFeedbackError, MemabraError
from memabra._records import Episode, Feedback, FeedbackReceipt, LearningItem, RewardBreakdown, RewardWeights, utcnow
from memabra._reward import CompositeReward, RewardConfig, rescored
from memabra._signals import FEEDBACK_KEYS
from memabra.storage import EpisodeLog, Retotalled, SuspendedTurn

__all__ = ["RewardService", "recompute_rewards", "retotal_rewards", "same_feedback"]

logger = logging.getLogger("memabra")

# Episodes one learner step closes at most: a backlog (a learner down for a day) is worked off over
# several steps, so an in-process learner never holds up the turn that runs it for long.
FINALIZE_BATCH = 1000

# Due episode ids read per query while finalising.
_DUE_PAGE = 500

# The range the built-in learners clip each reward's cost to: the spec's weights' (router/_residual.py,
# router/_vw.py), whatever weights the log is scored under.
_LEARNED_RANGE = RewardWeights().total_range()

# What this process has warned about, so that a log of mixed weightings costs one WARNING per pair
# (and a weighting beyond the learners' range one per weighting), not one per reward.
_warned: set[tuple[RewardWeights, ...]] = set()
_warned_lock = threading.Lock()


def _first_time(key: tuple[RewardWeights, ...]) -> bool:
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
        return True


def _warn_beyond_learned_range(weights: RewardWeights) -> None:
    low, high = weights.total_range()
    if (low < _LEARNED_RANGE[0] or high > _LEARNED_RANGE[1]) and _first_time((weights,)):
        logger.warning(
            "reward weights %s give totals in [%.2f, %.2f], beyond [%.2f, %.2f], the spec's weights' range, to "
            "which the built-in learners clip every reward they learn: totals outside it are learned as its ends",
            weights.as_dict(),
            low,
            high,
            *_LEARNED_RANGE,
        )


class RewardService:
    def __init__(self, log: EpisodeLog, config: RewardConfig | None = None) -> None:
        self.log = log
        self.reward = CompositeReward(config)
        # Episodes whose rescore failed on bad stored data: not tried again by this process (a
        # restart tries them once more), so a poisoned row costs one logged error, not one per step.
        self._unscoreable: set[str] = set()
        log.feedback_window = self.reward.config.feedback_window
        _warn_beyond_learned_range(self.reward.config.weights)

    @property
    def config(self) -> RewardConfig:
        return self.reward.config

    def record(
        self, episode: Episode, *, final: bool = False, replacing: SuspendedTurn | None = None
    ) -> RewardBreakdown:
        """Log an episode with its provisional (or, with ``final``, final) reward in one transaction.
        ``replacing``: the copy of its turn the caller read; see :meth:`EpisodeLog.log_episode`
        (:class:`~memabra.storage.TurnWentOnError` where a process went on with the turn since)."""
        scored = self.scored(episode, final=final)
        self.log.log_episode(scored, replacing=replacing)
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

    def finalize_due(self, now: datetime | None = None, *, limit: int | None = FINALIZE_BATCH) -> int:
        """Close episodes whose feedback window has passed, oldest window first: at most ``limit``
        (``None``: all of them). Returns how many were closed.

        An episode that cannot be scored (a feedback row stored before payloads were validated,
        say) is logged once and left open, and later calls step over it, so any number of them
        never holds up the others (``memabra status`` counts what stays open)."""
        closed = 0
        seen: set[str] = set()
        after: str | None = None
        while limit is None or closed < limit:
            page = self.log.due_episode_ids(now, limit=_DUE_PAGE, after=after)
            fresh = [episode_id for episode_id in page if episode_id not in seen]
            if not fresh:
                break
            seen.update(fresh)
            for episode_id in fresh:
                if episode_id in self._unscoreable:
                    continue
                if self._close(episode_id):
                    closed += 1
                    if limit is not None and closed >= limit:
                        break
            if len(page) < _DUE_PAGE:
                break
            after = page[-1]
        return closed

    def _close(self, episode_id: str) -> bool:
        try:
            return self.log.rescore(episode_id, self._score, final=True)
        except MemabraError as exc:
            self._unscoreable.add(episode_id)
            logger.error("episode %s could not be finalised and stays open: %s", episode_id, exc)
            return False

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
        memory_scorer: str | None = None,
    ) -> int:
        """See :func:`recompute_rewards`."""
        return recompute_rewards(
            self.log,
            weights,
            since=since,
            version=version,
            use_memory_scores=use_memory_scores,
            memory_scorer=memory_scorer,
        )

    def _score(self, episode: Episode) -> RewardBreakdown:
        scored = self.reward.score(episode, episode.feedback)
        stored = episode.reward
        if stored is not None and stored.weights != scored.weights and _first_time((stored.weights, scored.weights)):
            # Every writer re-totals the whole reward under its own weights, so this one is now under
            # ours; the warning is for the others still being written under theirs.
            logger.warning(
                "episode %s's reward was totalled under weights %s (by a process configured otherwise, or by "
                "`memabra rewards recompute`), and this process scores it under %s: the log now holds rewards "
                "of both weightings, which a learner learns as one scale. Run every process that writes to this "
                'log with the same reward configuration (docs/configuration.md, "Changing the reward weights")',
                episode.id,
                stored.weights.as_dict(),
                scored.weights.as_dict(),
            )
        return scored


def recompute_rewards(
    log: EpisodeLog,
    weights: RewardWeights,
    *,
    since: datetime | None = None,
    version: str | None = None,
    use_memory_scores: bool = False,
    memory_scorer: str | None = None,
) -> int:
    """Re-total every stored reward under ``weights`` from its stored components; returns how many
    were updated. See :func:`retotal_rewards`."""
    return retotal_rewards(
        log, weights, since=since, version=version, use_memory_scores=use_memory_scores, memory_scorer=memory_scorer
    ).rewards


def retotal_rewards(
    log: EpisodeLog,
    weights: RewardWeights,
    *,
    since: datetime | None = None,
    version: str | None = None,
    use_memory_scores: bool = False,
    memory_scorer: str | None = None,
) -> Retotalled:
    """Re-total every stored reward under ``weights`` from its stored components. Nothing is
    re-run: the components are the record. ``use_memory_scores`` replaces Hm with the MemPO label
    (+1 / -1) of the episode's decisions wherever one is stored (``labelled`` counts those).

    The log is worked through a page of episodes per transaction, each page locked against
    feedback arriving meanwhile, so memory holds one page and every stored total agrees with its
    components. A run that stops midway leaves the pages it finished re-totalled and the rest as
    they were (each reward records the weights it was totalled under); running it again finishes.

    Labels of one scorer only: ``memory_scorer`` names it; left out, the log must hold one scorer's
    labels, else a :class:`ConfigError` names the scorers (two models' labels, mixed, would make
    Hm say what neither model said)."""
    scorer = _one_scorer(log, memory_scorer) if use_memory_scores else None

    def rescore(stored: RewardBreakdown, memory_label: float | None) -> RewardBreakdown:
        return rescored(stored, weights, memory_label=memory_label)

    return log.retotal_rewards(rescore, since=since, version=version, labels=use_memory_scores, scorer=scorer)


def _one_scorer(log: EpisodeLog, named: str | None) -> str | None:
    """The scorer whose MemPO labels a re-total takes: ``named`` when it stored labels, else the
    only one that did (None when none did)."""
    stored = log.memory_label_scorers()
    listed = ", ".join(f"{name} ({count} decisions)" for name, count in stored.items())
    if named is not None:
        if named not in stored:
            raise ConfigError(
                f"no MemPO labels are stored under scorer {named!r}"
                + (f"; the log holds labels of {listed}" if stored else "; the log holds none")
            )
        return named
    if len(stored) > 1:
        raise ConfigError(
            f"MemPO labels of {len(stored)} scorers are stored ({listed}): name the one to take Hm from "
            "(memory_scorer; --mempo-scorer on the command line), so no reward mixes two models' labels"
        )
    return next(iter(stored), None)


def same_feedback(earlier: Feedback, now: Feedback) -> bool:
    """Whether ``now``, sent under an idempotency key already stored with ``earlier``, repeats it
    (a retry) rather than saying something else: the log answers ``duplicate`` either way and keeps
    the first, so a caller that sent other values must be told they were not recorded."""

    def canonical(feedback: Feedback) -> str:
        return json.dumps(dict(feedback.payload), sort_keys=True, default=str)

    return earlier.decision_id == now.decision_id and canonical(earlier) == canonical(now)
