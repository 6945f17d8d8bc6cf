"""The promotion gate of ``train --from-log`` on the simulator, where every policy's value is exact."""

from __future__ import annotations

import pytest

from memabra.evals.offline import train_from_log
from memabra.evals.simulator import World, WorldConfig, log_simulation, policy_truth
from memabra.router import HybridRouter, LexicalRouter, RandomRouter, Similarity, VWRouter
from memabra.storage import EpisodeLog

pytestmark = pytest.mark.slow


# One slot per decision: the trained learner departs from the logger's top choice on most rounds,
# where the logger gave it only its 5% floor, so its weight is at most 20 and a few thousand
# decisions support it. On the default three slots the same departures compound (weights up to
# 20^3), cascade DR never gathers enough effective samples, and the pseudo-inverse fallback is
# refused because the reward ("any note helped") is not additive over slots: the gate then rightly
# refuses to promote (tests/offline/test_additivity.py).
ROUNDS = 2400


@pytest.mark.timeout(1800)  # three trainings and evaluations on 2,400 decisions: minutes on a busy machine
def test_the_gate_promotes_truly_better_policies_and_refuses_a_truly_worse_one(log: EpisodeLog) -> None:
    similarity = Similarity(encoder=None)
    world = World(config=WorldConfig(slots=1), seed=3)
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
    logger_truth = policy_truth(HybridRouter(similarity=similarity, min_probability=0.05), world, held_out, draws=3)
    reports = {
        name: train_from_log(log, learner=name, learner_args={"seed": 0}, holdout=0.5)
        for name in ("vw", "random", "bm25")
    }
    for report in reports.values():
        assert report.supported, report.reason
    # the truth: each policy's exact expected reward on the held-out rounds, against the logger's.
    # The learned router is better; so is uniform random (the logger's top pick is the decoy);
    # lexical top-1 serves the decoy every time and is worse
    vw = reports["vw"]
    assert vw.saved_version is not None
    truth = {
        "vw": policy_truth(
            VWRouter.restore(log.get_snapshot(vw.saved_version), similarity=similarity), world, held_out
        ),
        "random": policy_truth(RandomRouter(similarity=similarity, seed=0), world, held_out, draws=3),
        "bm25": policy_truth(LexicalRouter(similarity=similarity), world, held_out),
    }
    assert truth["vw"] > truth["random"] > logger_truth > truth["bm25"]
    for name, report in reports.items():
        assert report.promotable is (truth[name] > logger_truth), name
        assert (report.saved_version is not None) is report.promotable, name
        rec = report.evaluation.recommended
        assert rec.ci_low <= truth[name] <= rec.ci_high, (name, rec, truth[name])
