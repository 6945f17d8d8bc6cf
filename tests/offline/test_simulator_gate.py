"""The promotion gate of ``train --from-log`` on the simulator, where every policy's value is exact."""

from __future__ import annotations

import pytest

from memabra.evals.offline import router_from_snapshot, train_from_log
from memabra.evals.simulator import World, log_simulation, policy_truth
from memabra.router import RandomRouter, Similarity, VWRouter
from memabra.storage import EpisodeLog

pytestmark = pytest.mark.slow


def test_the_gate_promotes_a_truly_better_policy_and_refuses_a_truly_worse_one(log: EpisodeLog) -> None:
    similarity = Similarity(encoder=None)
    world = World(seed=3)
    rounds, _ = log_simulation(
        lambda s: VWRouter(seed=s, similarity=similarity, exploration="epsilon", epsilon=0.5), world, 800, log, seed=3
    )
    held_out = rounds[400:]
    better = train_from_log(log, learner="vw", learner_args={"seed": 0}, holdout=0.5)
    worse = train_from_log(log, learner="random", learner_args={"seed": 0}, holdout=0.5)
    # the truth: each policy's exact expected reward on the held-out rounds
    assert better.saved_version is not None, better.reason
    trained = router_from_snapshot(log.get_snapshot(better.saved_version))
    better_truth = policy_truth(trained, world, held_out)
    worse_truth = policy_truth(RandomRouter(similarity=similarity, seed=0), world, held_out, draws=5)
    assert better.supported and better.promotable
    assert better_truth > better.logging_value > worse_truth
    assert not worse.promotable and worse.saved_version is None
