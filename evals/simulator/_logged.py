"""The simulator as a logged world: a logging router's decisions written to an episode log, and the
exact value of any target policy on the same rounds, so offline estimates can be scored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from memabra._records import Budget, CandidateKind, Episode, RoutingContext, utcnow
from memabra.evals._log_order import DecisionClock
from memabra.evals.simulator._run import _realised_reward
from memabra.evals.simulator._world import SimRound, World, expected_reward
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["log_simulation", "policy_truth"]


def _context(world: World, round_: SimRound) -> RoutingContext:
    cfg = world.config
    budget = Budget(max_tokens=cfg.max_tokens, slots={CandidateKind.MEMORY: cfg.slots})
    return RoutingContext(query=round_.query, user_id=round_.user_id, kinds=(CandidateKind.MEMORY,), budget=budget)


def log_simulation(
    factory: Callable[[int], Router], world: World, n_rounds: int, log: EpisodeLog, *, seed: int = 0, learn: bool = True
) -> tuple[list[SimRound], Router]:
    """Play ``n_rounds`` with a fresh logging router (learning online unless ``learn`` is false),
    writing each decision with its realised composite reward and used notes; returns the rounds
    and the logging router as it ended."""
    cfg = world.config
    played = world.rounds(n_rounds)
    router = factory(seed)
    episodes = []
    clock = DecisionClock()  # the log's time order is the order of the decisions
    for round_ in played:
        pool = [replace(c, metadata={"source": "sim"}) for c in round_.candidates]
        selection = router.choose(_context(world, round_), pool)
        outcomes = round_.helpful(selection.chosen_ids)
        reward = _realised_reward(round_, selection.chosen_ids, outcomes, cfg.max_tokens)
        if learn:
            router.learn(selection, reward, outcomes)
        used = frozenset(cid for cid, helped in outcomes.items() if helped)
        logged = clock(selection)
        episodes.append(
            Episode(
                round_.user_id,
                round_.query,
                selections=(logged,),
                reward=reward,
                finalized_at=utcnow(),
                used_ids=used,
            )
        )
    log.log_episodes(episodes)
    return played, router


def policy_truth(router: Router, world: World, rounds: Sequence[SimRound], *, draws: int = 1) -> float:
    """The target's exact mean expected reward over ``rounds`` (its own choices, without learning;
    ``draws`` choices per round for a stochastic target)."""
    values = []
    for round_ in rounds:
        pool = [replace(c, metadata={"source": "sim"}) for c in round_.candidates]
        for _ in range(draws):
            chosen = router.choose(_context(world, round_), pool).chosen_ids
            values.append(expected_reward(round_, chosen, world.config.max_tokens))
    return float(np.mean(values))
