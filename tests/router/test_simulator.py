"""Seeded learning tests on the simulator with known ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from memabra.evals.simulator import World, WorldConfig, expected_reward, oracle_value, simulate
from memabra.router import HybridRouter, LinearRouter, RandomRouter, Similarity, VWRouter

SIM = Similarity()  # lexical only: fast, and similarity is not what the simulator rewards


def test_ground_truth_and_oracle() -> None:
    world = World(WorldConfig(drift_at=50), seed=4)
    rounds = world.rounds(120)
    first = rounds[0]
    value, best = oracle_value(first, slots=3, max_tokens=600)
    preferred = [c.id for c, p in zip(first.candidates, first.help_probability, strict=True) if p == pytest.approx(0.9)]
    assert best == tuple(preferred) and len(best) == 1
    assert value == pytest.approx(0.9 + 0.35 * (0.9 - 0.1) - 0.2 * 40 / 600)
    assert expected_reward(first, (), 600) == pytest.approx(-0.35)
    decoy = next(c.id for c in first.candidates if c.id.startswith("decoy"))
    assert expected_reward(first, (decoy,), 600) < expected_reward(first, (), 600)
    # drift: some users prefer another style after round 50
    assert any(world.preference(u, 0) != world.preference(u, 60) for u in range(world.config.n_users))
    # the same seed gives the same rounds, draws included
    again = World(WorldConfig(drift_at=50), seed=4).rounds(120)
    assert [r.query for r in again] == [r.query for r in rounds]
    np.testing.assert_array_equal(again[7].draws, rounds[7].draws)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_learners_beat_random_and_similarity(seed: int) -> None:
    world = World(seed=seed)
    rounds = world.rounds(600)
    tail = slice(400, 600)

    def score(factory: object) -> float:
        result = simulate(factory, world, len(rounds), rounds=rounds, seed=seed)  # type: ignore[arg-type]
        return float(result.expected[tail].mean())

    hybrid = score(lambda s: HybridRouter(seed=s, similarity=SIM))
    random = score(lambda s: RandomRouter(seed=s, similarity=SIM))
    for factory in (lambda s: VWRouter(seed=s, similarity=SIM), lambda s: LinearRouter(seed=s, similarity=SIM)):
        learned = score(factory)
        assert learned > hybrid + 0.3, (learned, hybrid)
        assert learned > random + 0.6, (learned, random)


@pytest.mark.slow
def test_vw_reaches_ninety_percent_of_the_oracle_within_2000_rounds() -> None:
    world = World(seed=0)
    result = simulate(lambda s: VWRouter(seed=s, similarity=SIM), world, 2000)
    learned, oracle = result.window(1500, 2000)
    hybrid = simulate(lambda s: HybridRouter(seed=s, similarity=SIM), world, 2000).window(1500, 2000)[0]
    assert learned >= 0.9 * oracle
    assert learned >= 1.2 * hybrid
