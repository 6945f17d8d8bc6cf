"""A logged world with known ground truth: each question is about one topic and the memory about
that topic is the one that helps; the logging policy chooses at random."""

from __future__ import annotations

from memabra import Budget, Candidate, CandidateKind, Episode, RoutingContext, Selection
from memabra._records import RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.router import Router
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


def log_world(log: EpisodeLog, router: Router, n: int) -> None:
    """Log ``n`` rounds of the world as ``router`` chose them, each with its final reward."""
    episodes = []
    for i in range(n):
        ctx, cands, relevant = world(i)
        sel = router.choose(ctx, cands)
        episodes.append(
            Episode("u1", ctx.query, selections=(sel,), reward=reward_of(sel, relevant), finalized_at=utcnow())
        )
    log.log_episodes(episodes)
