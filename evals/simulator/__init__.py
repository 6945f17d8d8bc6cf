"""A simulated population with known ground truth (user preferences similarity misses, drift,
costly decoys) and an exact oracle, for learning tests and benchmark figures."""

from __future__ import annotations

from memabra.evals.simulator._logged import log_simulation, policy_truth
from memabra.evals.simulator._run import SimulationResult, simulate
from memabra.evals.simulator._world import SimRound, World, WorldConfig, expected_reward, oracle_value

__all__ = [
    "SimRound",
    "SimulationResult",
    "World",
    "WorldConfig",
    "expected_reward",
    "log_simulation",
    "oracle_value",
    "policy_truth",
    "simulate",
]
