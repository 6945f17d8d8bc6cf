"""A logged world with known ground truth: each question is about one topic and the memory about
that topic is the one that helps; the logging policy chooses at random."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from memabra import Budget, Candidate, CandidateKind, Episode, RoutingContext, Selection
from memabra._records import RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.router import Router, SlotView
from memabra.storage import EpisodeLog

TOPICS = ["coffee", "weather", "dinner", "dog", "work", "music"]
BUDGET = Budget(max_tokens=100, slots={CandidateKind.MEMORY: 2})


def world(i: int) -> tuple[RoutingContext, list[Candidate], str]:
    topic = TOPICS[i % len(TOPICS)]
    cands = [Candidate(f"m-{t}", CandidateKind.MEMORY, f"note about {t} things", 10) for t in TOPICS]
    return (
        RoutingContext(f"question about {topic}", "u1", kinds=(CandidateKind.MEMORY,), budget=BUDGET),
        cands,
        f"m-{topic}",
    )


def reward_of(selection: Selection, relevant: str) -> RewardBreakdown:
    hit = relevant in selection.chosen_ids
    hm = 1.0 if hit else (-1.0 if selection.chosen_ids else 0.0)
    return RewardBreakdown(
        RewardComponents(s=1.0 if hit else 0.0, hm=hm, x=min(1.0, selection.tokens_injected / 100)), RewardWeights()
    )


def true_value(router: Router, n: int) -> float:
    total = 0.0
    for i in range(n):
        ctx, cands, relevant = world(i)
        total += reward_of(router.choose(ctx, cands), relevant).total
    return total / n


def additive_reward_of(selection: Selection, relevant: str) -> RewardBreakdown:
    """A reward that adds up over the picks: a hit per relevant pick, a charge per token."""
    hits = sum(cid == relevant for cid in selection.chosen_ids)
    return RewardBreakdown(
        RewardComponents(hm=float(hits), x=min(1.0, selection.tokens_injected / 100)), RewardWeights()
    )


def log_world(
    log: EpisodeLog,
    router: Router,
    n: int,
    *,
    reward: Callable[[Selection, str], RewardBreakdown] = reward_of,
    with_used: bool = False,
) -> None:
    """Log ``n`` rounds of the world as ``router`` chose them, each with its final reward (and, with
    ``with_used``, the relevant memory as the episode's used candidate when it was chosen)."""
    episodes = []
    for i in range(n):
        ctx, cands, relevant = world(i)
        sel = router.choose(ctx, cands)
        used = frozenset(sel.chosen_ids) & {relevant} if with_used else None
        episodes.append(
            Episode(
                "u1", ctx.query, selections=(sel,), reward=reward(sel, relevant), finalized_at=utcnow(), used_ids=used
            )
        )
    log.log_episodes(episodes)


class Stopper(Router):
    """Every option positive: the stop option ``stop``, the rest shared evenly."""

    name = "stopper"

    def __init__(self, stop: float = 0.5, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.stop = stop

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        if view.n_options == 1:
            return np.ones(1)
        out = np.full(view.n_options, (1.0 - self.stop) / (view.n_options - 1))
        out[-1] = self.stop
        return out
