"""Chunked accumulation equals the in-memory estimators, whatever the chunking."""

from __future__ import annotations

import numpy as np
import pytest

from memabra.evals import ope

ESTIMATORS = [
    ope.InverseProbabilityWeighting(),
    ope.InverseProbabilityWeighting(lambda_=3.0),
    ope.SelfNormalizedInverseProbabilityWeighting(),
    ope.DirectMethod(),
    ope.DoublyRobust(),
    ope.SelfNormalizedDoublyRobust(),
    ope.SwitchDoublyRobust(lambda_=4.0),
    ope.DoublyRobustWithShrinkage(lambda_=5.0),
]


@pytest.fixture(scope="module")
def arrays() -> ope.BanditArrays:
    log = ope.SyntheticBandit(n_actions=6, len_list=2).sample(3001, random_state=4)
    return log.arrays.with_estimated_rewards(log.expected_reward * 0.9 + 0.05)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: f"{e.estimator_name}")
@pytest.mark.parametrize("batch_size", [1, 64, 1000, 5000])
def test_streaming_equals_in_memory(arrays: ope.BanditArrays, estimator: ope.BanditEstimator, batch_size: int) -> None:
    whole = arrays.round_batch()
    stream = ope.StreamingEstimate(estimator)
    for batch in ope.iter_round_batches(arrays, batch_size):
        stream.update(batch)
    in_memory = estimator.interval_from_batch(whole, alpha=0.1, n_bootstrap_samples=1, random_state=0, method="normal")
    streamed = stream.estimate_interval(alpha=0.1)
    assert stream.n_rounds == arrays.n_rounds
    assert streamed.value == pytest.approx(estimator.policy_value_from_batch(whole), abs=1e-12)
    assert (streamed.ci_low, streamed.ci_high) == pytest.approx((in_memory.ci_low, in_memory.ci_high), abs=1e-12)


def test_merging_shards_equals_one_pass(arrays: ope.BanditArrays) -> None:
    batches = list(ope.iter_round_batches(arrays, 500))
    one_pass = ope.StreamingEstimate(ope.SelfNormalizedDoublyRobust())
    for batch in batches:
        one_pass.update(batch)
    left, right = (
        ope.StreamingEstimate(ope.SelfNormalizedDoublyRobust()),
        ope.StreamingEstimate(ope.SelfNormalizedDoublyRobust()),
    )
    for batch in batches[:3]:
        left.update(batch)
    for batch in batches[3:]:
        right.update(batch)
    merged = left.merge(right)
    expected, actual = one_pass.estimate_interval(), merged.estimate_interval()
    assert (actual.value, actual.ci_low, actual.ci_high) == pytest.approx(
        (expected.value, expected.ci_low, expected.ci_high), abs=1e-12
    )
    with pytest.raises(ValueError, match="cannot merge"):
        merged.merge(ope.StreamingEstimate(ope.DoublyRobust()))


def test_estimate_streaming_runs_several_estimators_in_one_pass(arrays: ope.BanditArrays) -> None:
    consumed = 0

    def batches():  # type: ignore[no-untyped-def]
        nonlocal consumed
        for batch in ope.iter_round_batches(arrays, 700):
            consumed += 1
            yield batch

    results = ope.estimate_streaming(ESTIMATORS[2:5], batches(), alpha=0.05)
    assert consumed == 5
    assert list(results) == ["snipw", "dm", "dr"]
    assert results["dr"].value == pytest.approx(
        ope.DoublyRobust().policy_value_from_batch(arrays.round_batch()), abs=1e-12
    )
    with pytest.raises(ope.OPEInputError, match="estimator names must be distinct"):
        ope.estimate_streaming([ope.DoublyRobust(), ope.DoublyRobust(lambda_=2.0)], [])


def test_batches_built_from_log_rows_need_no_full_arrays() -> None:
    # what a database cursor yields: one row per decision with the evaluation policy's probability
    # of the logged action and the two reward-model terms, never the (n, n_actions) matrices
    rng = np.random.default_rng(0)
    stream = ope.StreamingEstimate(ope.DoublyRobust())
    rows = []
    for _ in range(10):
        batch = ope.RoundBatch(
            reward=rng.binomial(1, 0.5, 100).astype(float),
            pscore=rng.uniform(0.2, 1.0, 100),
            evaluation_policy_pscore=rng.uniform(0.0, 1.0, 100),
            estimated_reward_factual=rng.uniform(0.0, 1.0, 100),
            estimated_reward_policy=rng.uniform(0.0, 1.0, 100),
        )
        stream.update(batch)
        rows.append(batch)
    reward, pscore, pi_e, factual, policy = (
        np.concatenate([getattr(b, f) for b in rows])
        for f in ("reward", "pscore", "evaluation_policy_pscore", "estimated_reward_factual", "estimated_reward_policy")
    )
    assert stream.estimate_policy_value() == pytest.approx(
        np.mean(policy + pi_e / pscore * (reward - factual)), abs=1e-12
    )
    diagnostics = stream.diagnostics()
    assert diagnostics is not None and diagnostics.n_rounds == 1000
    assert diagnostics.max_weight == pytest.approx((pi_e / pscore).max())


def test_slates_stream_slate_by_slate() -> None:
    simulator = ope.SyntheticSlateBandit()
    whole = simulator.sample(400, random_state=2)
    stream = ope.StreamingEstimate(ope.SlateRewardInteractionIPS())
    for start in range(0, whole.n_rows, 3 * 50):  # 50 whole slates of 3 slots per chunk
        stream.update(
            ope.SlateBatch(
                **{
                    name: None if getattr(whole, name) is None else getattr(whole, name)[start : start + 150]
                    for name in ope.SlateBatch.__dataclass_fields__
                }
            )
        )
    assert stream.n_rounds == 400
    assert stream.estimate_policy_value() == pytest.approx(
        ope.SlateRewardInteractionIPS().policy_value_from_batch(whole), abs=1e-12
    )


def test_memory_stays_flat_in_the_number_of_rounds() -> None:
    import tracemalloc

    def peak(n_batches: int) -> int:
        rng = np.random.default_rng(0)
        stream = ope.StreamingEstimate(ope.SelfNormalizedInverseProbabilityWeighting())
        tracemalloc.start()
        for _ in range(n_batches):
            stream.update(
                ope.RoundBatch(
                    reward=rng.random(2000), pscore=np.full(2000, 0.5), evaluation_policy_pscore=rng.random(2000)
                )
            )
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    assert peak(100) < 1.5 * peak(5)


def test_several_estimators_in_one_pass_keep_memory_flat() -> None:
    import tracemalloc

    def batches(n_batches: int):  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(0)
        for _ in range(n_batches):  # what a database cursor yields, chunk by chunk
            yield ope.RoundBatch(
                reward=rng.random(2000),
                pscore=np.full(2000, 0.5),
                evaluation_policy_pscore=rng.random(2000),
                estimated_reward_factual=rng.random(2000),
                estimated_reward_policy=rng.random(2000),
            )

    def peak(n_batches: int) -> int:
        estimators = [
            ope.InverseProbabilityWeighting(),
            ope.SelfNormalizedInverseProbabilityWeighting(),
            ope.DoublyRobust(),
        ]
        tracemalloc.start()
        results = ope.estimate_streaming(estimators, batches(n_batches))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert list(results) == ["ipw", "snipw", "dr"]
        return top

    assert peak(100) < 1.5 * peak(5)


def test_a_batch_computes_its_importance_weights_once_and_shares_them_read_only(arrays: ope.BanditArrays) -> None:
    batch = arrays.round_batch()
    weights = batch.importance_weight()
    assert weights is not None and batch.importance_weight() is weights
    assert not weights.flags.writeable
    assert ope.InverseProbabilityWeighting().importance_weights(batch) is weights


def test_slate_intervals_resample_whole_slates() -> None:
    batch = ope.SyntheticSlateBandit().sample(300, random_state=1)
    arrays = {name: getattr(batch, name) for name in ope.SlateBatch.__dataclass_fields__}
    for estimator in (ope.SlateStandardIPS(), ope.SlateIndependentIPS(), ope.SlateRewardInteractionIPS()):
        per_slate = estimator.estimate_round_rewards(**arrays)
        assert per_slate.shape == (300,)
        for method in ("bootstrap", "normal"):
            interval = estimator.estimate_interval(**arrays, n_bootstrap_samples=300, random_state=0, method=method)
            assert interval.value == pytest.approx(per_slate.mean())
            assert interval.ci_low < interval.value < interval.ci_high
