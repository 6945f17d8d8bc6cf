"""Seeded statistical checks on a simulator whose true policy value is known."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from memabra.evals import ope

N_SEEDS = 200
N_ROUNDS = 1000
# a logging policy close enough to the evaluation one that 1000 rounds make intervals reliable
BANDIT = ope.SyntheticBandit(n_actions=5, dim_context=3, behavior_beta=0.5, evaluation_beta=2.0)


@cache
def _truth() -> float:
    return BANDIT.policy_value()


@cache
def _logs() -> tuple[tuple[ope.BanditArrays, np.ndarray], ...]:
    """Per seed: the log and a decent reward model (the truth blurred by seeded noise)."""
    logs = []
    for seed in range(N_SEEDS):
        log = BANDIT.sample(N_ROUNDS, random_state=seed)
        noise = np.random.default_rng(10_000 + seed).normal(0.0, 0.1, size=log.expected_reward.shape)
        logs.append((log.arrays, np.clip(log.expected_reward + noise, 0.0, 1.0)))
    return tuple(logs)


def _estimates(estimator: ope.BanditEstimator) -> np.ndarray:
    return np.array(
        [
            estimator.policy_value_from_batch(arrays.with_estimated_rewards(q_hat).round_batch())
            for arrays, q_hat in _logs()
        ]
    )


def test_the_simulator_truth_matches_rolling_out_the_evaluation_policy() -> None:
    rng = np.random.default_rng(5)
    context = rng.normal(size=(200_000, BANDIT.dim_context))
    policy = BANDIT.evaluation_policy(context)[:, :, 0]
    action = (rng.random((context.shape[0], 1)) > policy.cumsum(axis=1)).sum(axis=1).clip(max=BANDIT.n_actions - 1)
    reward = rng.random(context.shape[0]) < BANDIT.expected_reward(context)[np.arange(context.shape[0]), action, 0]
    standard_error = reward.std() / np.sqrt(reward.size)
    assert abs(reward.mean() - _truth()) < 4 * standard_error


@pytest.mark.parametrize("estimator", [ope.InverseProbabilityWeighting(), ope.DoublyRobust()], ids=["ipw", "dr"])
def test_ipw_and_dr_are_unbiased(estimator: ope.BanditEstimator) -> None:
    estimates = _estimates(estimator)
    standard_error = estimates.std(ddof=1) / np.sqrt(N_SEEDS)
    assert abs(estimates.mean() - _truth()) < 4 * standard_error
    assert abs(estimates.mean() - _truth()) < 0.02


def test_dm_with_a_blurred_model_is_biased_where_dr_is_not() -> None:
    # the clipped noise pulls q_hat towards the middle: DM inherits that bias, DR corrects it
    dm, dr = _estimates(ope.DirectMethod()), _estimates(ope.DoublyRobust())
    assert abs(dm.mean() - _truth()) > 4 * dm.std(ddof=1) / np.sqrt(N_SEEDS)
    assert abs(dr.mean() - _truth()) < abs(dm.mean() - _truth())


def test_dr_has_lower_variance_than_ipw_with_a_decent_reward_model() -> None:
    ipw, dr = _estimates(ope.InverseProbabilityWeighting()), _estimates(ope.DoublyRobust())
    assert dr.var(ddof=1) < 0.5 * ipw.var(ddof=1)


def test_self_normalised_and_switch_estimators_land_near_the_truth() -> None:
    for estimator in (
        ope.SelfNormalizedInverseProbabilityWeighting(),
        ope.SelfNormalizedDoublyRobust(),
        ope.SwitchDoublyRobust(lambda_=10.0),
        ope.DoublyRobustWithShrinkage(lambda_=10.0),
    ):
        assert abs(_estimates(estimator).mean() - _truth()) < 0.02, estimator.estimator_name


@pytest.mark.parametrize("method", ["normal", "bootstrap"])
@pytest.mark.parametrize(
    "estimator",
    [ope.InverseProbabilityWeighting(), ope.SelfNormalizedInverseProbabilityWeighting(), ope.DoublyRobust()],
    ids=["ipw", "snipw", "dr"],
)
def test_95_percent_intervals_cover_the_truth_in_at_least_90_percent_of_200_seeds(
    estimator: ope.BanditEstimator, method: str
) -> None:
    covered = 0
    for seed, (arrays, q_hat) in enumerate(_logs()):
        interval = estimator.interval_from_batch(
            arrays.with_estimated_rewards(q_hat).round_batch(),
            alpha=0.05,
            n_bootstrap_samples=200,
            random_state=seed,
            method=method,
        )
        covered += interval.ci_low <= _truth() <= interval.ci_high
    assert covered >= 0.9 * N_SEEDS


def test_streamed_normal_intervals_cover_the_truth_too() -> None:
    covered = 0
    for arrays, q_hat in _logs():
        stream = ope.StreamingEstimate(ope.SelfNormalizedDoublyRobust())
        for batch in ope.iter_round_batches(arrays.with_estimated_rewards(q_hat), batch_size=128):
            stream.update(batch)
        interval = stream.estimate_interval(alpha=0.05)
        covered += interval.ci_low <= _truth() <= interval.ci_high
    assert covered >= 0.9 * N_SEEDS


def test_dr_with_a_cross_fitted_model_is_close_to_the_truth() -> None:
    log = BANDIT.sample(4000, random_state=1)
    q_hat = ope.CrossFittedRewardModel(n_folds=2, random_state=0).fit_predict(log.arrays)
    interval = ope.DoublyRobust().estimate_interval(
        action=log.arrays.action,
        reward=log.arrays.reward,
        pscore=log.arrays.pscore,
        action_dist=log.arrays.action_dist,
        estimated_rewards_by_reg_model=q_hat,
        method="normal",
    )
    assert interval.ci_low - 0.01 <= _truth() <= interval.ci_high + 0.01


@pytest.mark.parametrize(
    "estimator",
    [ope.SlateStandardIPS(), ope.SlateIndependentIPS(), ope.SlateRewardInteractionIPS()],
    ids=["sips", "iips", "rips"],
)
def test_slate_estimators_are_unbiased_when_slot_rewards_are_independent(estimator: ope.SlateEstimator) -> None:
    simulator = ope.SyntheticSlateBandit()
    estimates = np.array(
        [estimator.policy_value_from_batch(simulator.sample(500, random_state=seed)) for seed in range(100)]
    )
    standard_error = estimates.std(ddof=1) / np.sqrt(estimates.size)
    assert abs(estimates.mean() - simulator.policy_value()) < 4 * standard_error


def test_per_slot_ips_has_lower_variance_than_joint_slate_ips() -> None:
    simulator = ope.SyntheticSlateBandit()
    batches = [simulator.sample(300, random_state=seed) for seed in range(60)]
    joint = np.array([ope.SlateStandardIPS().policy_value_from_batch(batch) for batch in batches])
    per_slot = np.array([ope.SlateIndependentIPS().policy_value_from_batch(batch) for batch in batches])
    assert per_slot.var() < joint.var()
