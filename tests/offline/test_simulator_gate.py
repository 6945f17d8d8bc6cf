"""The promotion gate of ``train --from-log`` on the simulator, where every policy's value is exact."""

from __future__ import annotations

import pytest

from memabra.evals.offline import train_from_log
from memabra.evals.simulator import World, log_simulation, policy_truth
from memabra.router import HybridRouter, RandomRouter, Similarity, VWRouter
from memabra.storage import EpisodeLog

pytestmark = pytest.mark.slow


# The trained learner departs from the logger's top choice on most slots (about 80% of first slots),
# where the logger gave it only its 5% floor. Its cascade weight over three slots (up to 20^3) never
# gathers enough effective samples, so the recommendation falls back to PI-DR, whose additive weight
# carries a variance of about sum(1/p - 1) ~ 40 per decision: 600 held-out decisions leave its mean
# weight's interval about +-0.5 wide, too loose for the support verdict, and the verdict rightly
# refuses. 2,400 held-out decisions support it (mean weights ~1, no bias in the replay).
ROUNDS = 4800


@pytest.mark.timeout(1800)  # two trainings and evaluations on 2,400 decisions: minutes on a busy machine
def test_the_gate_promotes_a_truly_better_policy_and_refuses_a_truly_worse_one(log: EpisodeLog) -> None:
    similarity = Similarity(encoder=None)
    world = World(seed=3)
    # the logger: similarity top-k with a 5% floor, which keeps serving the topic's long decoy
    rounds, _ = log_simulation(
        lambda s: HybridRouter(seed=s, similarity=similarity, min_probability=0.05),
        world,
        ROUNDS,
        log,
        seed=3,
        learn=False,
    )
    held_out = rounds[ROUNDS // 2 :]
    better = train_from_log(log, learner="vw", learner_args={"seed": 0}, holdout=0.5)
    worse = train_from_log(log, learner="random", learner_args={"seed": 0}, holdout=0.5)
    assert better.supported, better.reason
    assert better.promotable and better.saved_version is not None
    assert not worse.promotable and worse.saved_version is None
    # the truth: each policy's exact expected reward on the held-out rounds, against the logger's
    logger_truth = policy_truth(HybridRouter(similarity=similarity, min_probability=0.05), world, held_out, draws=3)
    better_truth = policy_truth(
        VWRouter.restore(log.get_snapshot(better.saved_version), similarity=similarity), world, held_out
    )
    worse_truth = policy_truth(RandomRouter(similarity=similarity, seed=0), world, held_out, draws=3)
    assert better_truth > logger_truth > worse_truth
