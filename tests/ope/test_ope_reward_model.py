"""Cross-fitted reward models: shapes, out-of-fold predictions, the no-context fallback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsRegressor

from memabra.evals import ope


def test_predictions_cover_every_action_and_position_and_track_the_truth() -> None:
    log = ope.SyntheticBandit(n_actions=4, len_list=2).sample(3000, random_state=0)
    q_hat = ope.CrossFittedRewardModel(n_folds=3).fit_predict(log.arrays)
    assert q_hat.shape == (3000, 4, 2)
    assert ((q_hat >= 0) & (q_hat <= 1)).all()
    assert np.abs(q_hat - log.expected_reward).mean() < 0.06


def test_predictions_are_out_of_fold() -> None:
    # a memorising learner would give each round its own reward back; cross-fitting must not
    rng = np.random.default_rng(0)
    n = 400
    arrays = ope.BanditArrays(
        action_dist=np.full((n, 2, 1), 0.5),
        action=rng.integers(0, 2, n),
        reward=rng.normal(size=n),
        pscore=np.full(n, 0.5),
        context=np.arange(n, dtype=float)[:, None],  # a unique id per round
    )
    q_hat = ope.CrossFittedRewardModel(base_model=KNeighborsRegressor(n_neighbors=1), n_folds=2).fit_predict(arrays)
    factual = q_hat[np.arange(n), arrays.action, 0]
    assert not np.allclose(factual, arrays.reward)


def test_without_context_the_model_is_the_out_of_fold_cell_mean() -> None:
    n = 6
    arrays = ope.BanditArrays(
        action_dist=np.full((n, 2, 1), 0.5),
        action=np.array([0, 0, 0, 1, 1, 1]),
        reward=np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0]),
        pscore=np.full(n, 0.5),
    )
    q_hat = ope.CrossFittedRewardModel(n_folds=n).fit_predict(arrays)  # leave-one-out
    assert q_hat[0, 0, 0] == pytest.approx(0.5)  # the other two rounds of action 0: 0 and 1
    assert q_hat[1, 0, 0] == pytest.approx(1.0)
    assert q_hat[5, 1, 0] == pytest.approx(0.0)


def test_a_custom_regressor_and_seeded_folds_are_reproducible() -> None:
    log = ope.SyntheticBandit().sample(500, random_state=1)
    model = ope.CrossFittedRewardModel(base_model=Ridge(alpha=0.1), n_folds=2, random_state=3)
    np.testing.assert_array_equal(model.fit_predict(log.arrays), model.fit_predict(log.arrays))


def test_action_context_replaces_the_one_hot() -> None:
    log = ope.SyntheticBandit(n_actions=3).sample(600, random_state=2)
    arrays = ope.BanditArrays(
        action_dist=log.arrays.action_dist,
        action=log.arrays.action,
        reward=log.arrays.reward,
        pscore=log.arrays.pscore,
        context=log.arrays.context,
        action_context=np.eye(3) * 2.0,
    )
    assert ope.CrossFittedRewardModel().fit_predict(arrays).shape == (600, 3, 1)


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ope.OPEInputError, match="n_folds must be an integer >= 2"):
        ope.CrossFittedRewardModel(n_folds=1)
    arrays = ope.BanditArrays(
        action_dist=np.full((1, 2, 1), 0.5), action=np.array([0]), reward=np.array([1.0]), pscore=np.array([0.5])
    )
    with pytest.raises(ope.OPEInputError, match="needs at least 2 rounds"):
        ope.CrossFittedRewardModel().fit_predict(arrays)


def _three_valued(n: int = 400) -> ope.BanditArrays:
    rng = np.random.default_rng(0)
    return ope.BanditArrays(
        action_dist=np.full((n, 3, 1), 1 / 3),
        action=rng.integers(0, 3, n),
        reward=rng.choice([0.0, 1.0, 2.0], size=n, p=[0.1, 0.2, 0.7]),
        pscore=np.full(n, 1 / 3),
        context=rng.normal(size=(n, 2)),
    )


def test_a_classifier_predicts_the_expected_reward_over_its_classes() -> None:
    # rewards in {0, 1, 2}: P(r = 1) (column 1 of predict_proba) is not the reward; the expected
    # value over the classes is, and DM with a classifier must agree with the default regressor
    arrays = _three_valued()
    truth = float(arrays.reward.mean())  # about 1.6; the context carries no signal
    dm = ope.DirectMethod()
    for model in (None, LogisticRegression(max_iter=1000)):
        q_hat = ope.CrossFittedRewardModel(base_model=model).fit_predict(arrays)
        value = dm.estimate_policy_value(action_dist=arrays.action_dist, estimated_rewards_by_reg_model=q_hat)
        assert value == pytest.approx(truth, abs=0.05), type(model).__name__
        if model is not None:  # an expectation over the classes stays within them
            assert ((q_hat >= 0.0) & (q_hat <= 2.0)).all()


def test_a_binary_classifier_still_predicts_the_probability_of_reward_one() -> None:
    log = ope.SyntheticBandit(n_actions=3).sample(600, random_state=4)
    q_hat = ope.CrossFittedRewardModel(base_model=LogisticRegression(max_iter=1000)).fit_predict(log.arrays)
    assert ((q_hat >= 0) & (q_hat <= 1)).all()
    assert np.abs(q_hat - log.expected_reward).mean() < 0.1


def test_a_classifier_on_continuous_rewards_or_without_numeric_classes_is_refused() -> None:
    arrays = _three_valued()
    continuous = ope.BanditArrays(
        action_dist=arrays.action_dist,
        action=arrays.action,
        reward=arrays.reward + 0.25 * np.random.default_rng(1).random(arrays.n_rounds),
        pscore=arrays.pscore,
        context=arrays.context,
    )
    with pytest.raises(
        ope.OPEInputError, match="LogisticRegression is a classifier, but the rewards are continuous"
    ) as caught:
        ope.CrossFittedRewardModel(base_model=LogisticRegression()).fit_predict(continuous)
    assert caught.value.field == "base_model"

    class Labelled(LogisticRegression):  # type: ignore[misc]
        """A classifier that reports its classes as labels, not reward values."""

        def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Labelled:
            super().fit(X, y, sample_weight)
            self.classes_ = np.array([f"r{c:g}" for c in self.classes_])
            return self

    with pytest.raises(ope.OPEInputError, match="classes_ must be the numeric reward values"):
        ope.CrossFittedRewardModel(base_model=Labelled()).fit_predict(arrays)
