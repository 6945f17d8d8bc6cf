"""Running routers through the simulated world and scoring them against the oracle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from memabra._records import (
    Budget,
    CandidateKind,
    CandidateStats,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    RoutingContext,
)
from memabra.evals.simulator._world import SimRound, World, expected_reward, oracle_value
from memabra.router import Router

__all__ = ["SimulationResult", "simulate"]


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """Per-round expected rewards of a router and of the oracle on the same rounds."""

    expected: NDArray[np.float64]
    oracle: NDArray[np.float64]
    tokens: NDArray[np.float64]

    def window(self, start: int, stop: int) -> tuple[float, float]:
        """Mean expected reward of the router and of the oracle over rounds ``[start, stop)``."""
        return float(self.expected[start:stop].mean()), float(self.oracle[start:stop].mean())


def _realised_reward(
    round_: SimRound, chosen: Sequence[str], outcomes: dict[str, float], max_tokens: int
) -> RewardBreakdown:
    hits = sum(outcomes.values())
    tokens = sum(c.tokens for c in round_.candidates if c.id in set(chosen))
    components = RewardComponents(
        s=1.0 if hits else 0.0,
        hm=(hits / len(chosen)) if hits else -1.0,
        x=min(1.0, tokens / max_tokens),
    )
    return RewardBreakdown(components, RewardWeights())


def simulate(
    factory: Callable[[int], Router],
    world: World,
    n_rounds: int,
    *,
    seed: int = 0,
    learn: bool = True,
    rounds: Sequence[SimRound] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimulationResult:
    """Play ``n_rounds`` of ``world`` with a fresh router: it chooses, the realised outcomes and the
    composite reward are fed back, and the exact expected reward of each selection is recorded."""
    cfg = world.config
    played = list(rounds) if rounds is not None else world.rounds(n_rounds)
    router = factory(seed)
    budget = Budget(max_tokens=cfg.max_tokens, slots={CandidateKind.MEMORY: cfg.slots})
    chosen_counts: dict[str, int] = {}
    helped_counts: dict[str, int] = {}
    expected = np.zeros(len(played))
    oracle = np.zeros(len(played))
    tokens = np.zeros(len(played))
    for i, round_ in enumerate(played):
        pool = [
            replace(
                c,
                metadata={"source": "sim"},
                usage=CandidateStats(chosen_counts.get(c.id, 0), helped_counts.get(c.id, 0)),
            )
            for c in round_.candidates
        ]
        context = RoutingContext(
            query=round_.query, user_id=round_.user_id, kinds=(CandidateKind.MEMORY,), budget=budget
        )
        selection = router.choose(context, pool)
        chosen = selection.chosen_ids
        expected[i] = expected_reward(round_, chosen, cfg.max_tokens)
        oracle[i] = oracle_value(round_, cfg.slots, cfg.max_tokens)[0]
        tokens[i] = selection.tokens_injected
        if learn:
            outcomes = round_.helpful(chosen)
            router.learn(selection, _realised_reward(round_, chosen, outcomes, cfg.max_tokens), outcomes)
            for cid, helped in outcomes.items():
                chosen_counts[cid] = chosen_counts.get(cid, 0) + 1
                helped_counts[cid] = helped_counts.get(cid, 0) + int(helped)
        if progress is not None:
            progress(i + 1, len(played))
    return SimulationResult(expected, oracle, tokens)
