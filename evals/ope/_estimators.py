"""Off-policy estimators for single-action (and per-position) bandit logs, as in obp 0.5.7.

Notation: n logged rounds (x_i, a_i, r_i) drawn by a logging policy pi_b, an optional position
k_i, pscore_i = pi_b(a_i|x_i), the importance weight w_i = pi_e(a_i|x_i, k_i) / pscore_i, a
reward model q_hat(x, a, k) and its value under the evaluation policy
q_hat(x_i, pi_e) = sum_a pi_e(a|x_i, k_i) q_hat(x_i, a, k_i). E_n is the mean over rounds.

Every method takes obp's keyword arrays: ``action (n,)``, ``reward (n,)``, ``pscore (n,)``,
``action_dist (n, n_actions, len_list)``, ``position (n,)`` (needed when len_list > 1) and
``estimated_rewards_by_reg_model (n, n_actions, len_list)``; obp's other keyword arguments are
accepted where memabra can honour them and refused by name where it cannot
(:mod:`memabra.evals.ope._obp_arguments`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._base import EstimatorBase, check_lambda
from memabra.evals.ope._batch import BanditArrays, RoundBatch
from memabra.evals.ope._interval import IntervalMethod, PolicyValueInterval
from memabra.evals.ope._obp_arguments import bandit_extras

__all__ = [
    "BanditEstimator",
    "DirectMethod",
    "DoublyRobust",
    "DoublyRobustWithShrinkage",
    "InverseProbabilityWeighting",
    "SelfNormalizedDoublyRobust",
    "SelfNormalizedInverseProbabilityWeighting",
    "SwitchDoublyRobust",
]


@dataclass(frozen=True)
class BanditEstimator(EstimatorBase[RoundBatch]):
    """The obp-style public methods over :class:`RoundBatch` components."""

    needs_reward_model: ClassVar[bool] = True

    def importance_weights(self, batch: RoundBatch) -> NDArray[np.float64] | None:
        return batch.importance_weight()

    def estimate_policy_value(
        self,
        *,
        action_dist: NDArray[np.float64],
        action: NDArray[np.int64] | None = None,
        reward: NDArray[np.float64] | None = None,
        pscore: NDArray[np.float64] | None = None,
        position: NDArray[np.int64] | None = None,
        estimated_rewards_by_reg_model: NDArray[np.float64] | None = None,
        **kwargs: Any,
    ) -> float:
        """The estimated policy value of the evaluation policy ``action_dist``."""
        return self.policy_value_from_batch(
            self._gather(action_dist, action, reward, pscore, position, estimated_rewards_by_reg_model, kwargs)
        )

    def estimate_round_rewards(
        self,
        *,
        action_dist: NDArray[np.float64],
        action: NDArray[np.int64] | None = None,
        reward: NDArray[np.float64] | None = None,
        pscore: NDArray[np.float64] | None = None,
        position: NDArray[np.int64] | None = None,
        estimated_rewards_by_reg_model: NDArray[np.float64] | None = None,
        **kwargs: Any,
    ) -> NDArray[np.float64]:
        """Per-round terms whose mean is the estimate (obp's ``_estimate_round_rewards``)."""
        return self.round_rewards_from_batch(
            self._gather(action_dist, action, reward, pscore, position, estimated_rewards_by_reg_model, kwargs)
        )

    def estimate_interval(
        self,
        *,
        action_dist: NDArray[np.float64],
        action: NDArray[np.int64] | None = None,
        reward: NDArray[np.float64] | None = None,
        pscore: NDArray[np.float64] | None = None,
        position: NDArray[np.int64] | None = None,
        estimated_rewards_by_reg_model: NDArray[np.float64] | None = None,
        alpha: float = 0.05,
        n_bootstrap_samples: int = 10000,
        random_state: int | None = None,
        method: IntervalMethod | str = IntervalMethod.BOOTSTRAP,
        **kwargs: Any,
    ) -> PolicyValueInterval:
        """The estimate with a ``1 - alpha`` interval, by percentile bootstrap over rounds
        (seeded by ``random_state``) or by the normal approximation (delta method)."""
        return self.interval_from_batch(
            self._gather(action_dist, action, reward, pscore, position, estimated_rewards_by_reg_model, kwargs),
            alpha=alpha,
            n_bootstrap_samples=n_bootstrap_samples,
            random_state=random_state,
            method=method,
        )

    def _gather(
        self,
        action_dist: NDArray[np.float64],
        action: NDArray[np.int64] | None,
        reward: NDArray[np.float64] | None,
        pscore: NDArray[np.float64] | None,
        position: NDArray[np.int64] | None,
        estimated_rewards_by_reg_model: NDArray[np.float64] | None,
        extras: dict[str, Any],
    ) -> RoundBatch:
        """Check every array given (q_hat too, even when this estimator ignores it) and cut the
        per-round terms this estimator reads."""
        arrays = BanditArrays(
            action_dist=action_dist,
            action=action,
            reward=reward,
            pscore=pscore,
            position=position,
            estimated_rewards_by_reg_model=estimated_rewards_by_reg_model,
            **bandit_extras(self.estimator_name, extras),
        )
        return arrays.round_batch(with_reward_model=self.needs_reward_model)


def _weight(batch: RoundBatch, name: str) -> NDArray[np.float64]:
    return batch.require_importance_weight(name)


def _residual(batch: RoundBatch, name: str) -> NDArray[np.float64]:
    return batch.require("reward", name) - batch.require("estimated_reward_factual", name)


def _clipped(weight: NDArray[np.float64], lambda_: float) -> NDArray[np.float64]:
    """min(w_i, lambda_); with lambda_ = inf (the default) the weights as they are, sparing a pass."""
    return weight if math.isinf(lambda_) else np.minimum(weight, lambda_)


def _components(n_rounds: int, n_components: int) -> NDArray[np.float64]:
    """An empty ``(m, k)`` component matrix in Fortran order: each component's column is
    contiguous, so the means over rounds are k fast contiguous reductions (over a C-ordered
    ``column_stack`` the same means are several times slower), and columns can be written in place."""
    return np.empty((n_rounds, n_components), order="F")


@dataclass(frozen=True)
class InverseProbabilityWeighting(BanditEstimator):
    """Inverse probability weighting (IPW / IPS), clipped at ``lambda_``.

    V_IPW = E_n[ min(w_i, lambda_) r_i ]; unbiased when lambda_ = inf (the default) and pi_b
    covers pi_e; a finite lambda_ trades bias for variance.
    """

    lambda_: float = math.inf
    estimator_name: str = "ipw"
    needs_reward_model = False

    def __post_init__(self) -> None:
        check_lambda(self.lambda_, type(self).__name__)

    def round_components(self, batch: RoundBatch) -> NDArray[np.float64]:
        weight = _clipped(_weight(batch, self.estimator_name), self.lambda_)
        return (batch.require("reward", self.estimator_name) * weight)[:, None]


@dataclass(frozen=True)
class SelfNormalizedInverseProbabilityWeighting(BanditEstimator):
    """Self-normalised IPW (SNIPW / SNIPS).

    V_SNIPW = E_n[ w_i r_i ] / E_n[ w_i ]; consistent, bounded by the reward range, slightly
    biased. Components z_i = (w_i r_i, w_i); per-round reward w_i r_i / E_n[w].
    """

    estimator_name: str = "snipw"
    n_components = 2
    needs_reward_model = False

    def round_components(self, batch: RoundBatch) -> NDArray[np.float64]:
        weight = _weight(batch, self.estimator_name)
        components = _components(weight.shape[0], 2)
        np.multiply(batch.require("reward", self.estimator_name), weight, out=components[:, 0])
        components[:, 1] = weight
        return components

    def value_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(means[..., 0] / means[..., 1])

    def gradient_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.array([1.0 / means[1], -means[0] / means[1] ** 2])

    def round_rewards_from_components(self, components: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(components[:, 0] / components[:, 1].mean())


@dataclass(frozen=True)
class DirectMethod(BanditEstimator):
    """Direct method (DM): V_DM = E_n[ q_hat(x_i, pi_e) ]; low variance, biased by q_hat's error.

    Reads only ``action_dist`` and ``estimated_rewards_by_reg_model`` (and ``position``).
    """

    estimator_name: str = "dm"

    def round_components(self, batch: RoundBatch) -> NDArray[np.float64]:
        return batch.require("estimated_reward_policy", self.estimator_name)[:, None]


@dataclass(frozen=True)
class DoublyRobust(BanditEstimator):
    """Doubly robust (DR), with the weight clipped at ``lambda_``.

    V_DR = E_n[ q_hat(x_i, pi_e) + min(w_i, lambda_) (r_i - q_hat(x_i, a_i)) ]; unbiased when
    either the weights or q_hat are right (lambda_ = inf).
    """

    lambda_: float = math.inf
    estimator_name: str = "dr"

    def __post_init__(self) -> None:
        check_lambda(self.lambda_, type(self).__name__)

    def round_components(self, batch: RoundBatch) -> NDArray[np.float64]:
        weight = _clipped(_weight(batch, self.estimator_name), self.lambda_)
        return self._terms(batch, weight * _residual(batch, self.estimator_name))

    def _terms(self, batch: RoundBatch, correction: NDArray[np.float64]) -> NDArray[np.float64]:
        return (batch.require("estimated_reward_policy", self.estimator_name) + correction)[:, None]


@dataclass(frozen=True)
class SelfNormalizedDoublyRobust(BanditEstimator):
    """Self-normalised DR (SNDR).

    V_SNDR = E_n[ q_hat(x_i, pi_e) ] + E_n[ w_i (r_i - q_hat(x_i, a_i)) ] / E_n[ w_i ].
    Components z_i = (q_hat(x_i, pi_e), w_i (r_i - q_hat(x_i, a_i)), w_i).
    """

    estimator_name: str = "sndr"
    n_components = 3

    def round_components(self, batch: RoundBatch) -> NDArray[np.float64]:
        weight = _weight(batch, self.estimator_name)
        components = _components(weight.shape[0], 3)
        components[:, 0] = batch.require("estimated_reward_policy", self.estimator_name)
        np.multiply(weight, _residual(batch, self.estimator_name), out=components[:, 1])
        components[:, 2] = weight
        return components

    def value_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(means[..., 0] + means[..., 1] / means[..., 2])

    def gradient_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.array([1.0, 1.0 / means[2], -means[1] / means[2] ** 2])

    def round_rewards_from_components(self, components: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(components[:, 0] + components[:, 1] / components[:, 2].mean())


@dataclass(frozen=True)
class SwitchDoublyRobust(DoublyRobust):
    """Switch-DR: DR where w_i <= lambda_, DM elsewhere.

    V_SwitchDR = E_n[ q_hat(x_i, pi_e) + 1{w_i <= lambda_} w_i (r_i - q_hat(x_i, a_i)) ];
    lambda_ = inf (obp's default) gives DR, lambda_ = 0 gives DM up to the w_i = 0 rounds.
    """

    lambda_: float = math.inf
    estimator_name: str = "switch-dr"

    def round_components(self, batch: RoundBatch) -> NDArray[np.float64]:
        weight = _weight(batch, self.estimator_name)
        kept = np.where(weight <= self.lambda_, weight, 0.0)
        return self._terms(batch, kept * _residual(batch, self.estimator_name))


@dataclass(frozen=True)
class DoublyRobustWithShrinkage(DoublyRobust):
    """DR with optimistic shrinkage (DRos).

    V_DRos = E_n[ q_hat(x_i, pi_e) + w_hat_i (r_i - q_hat(x_i, a_i)) ] with
    w_hat_i = lambda_ w_i / (w_i^2 + lambda_); lambda_ = inf gives DR, lambda_ = 0 (obp's default)
    gives DM. (obp divides 0 by 0 at lambda_ = 0, w_i = 0; the limit there is 0, used here.)
    """

    lambda_: float = 0.0
    estimator_name: str = "dr-os"

    def round_components(self, batch: RoundBatch) -> NDArray[np.float64]:
        weight = _weight(batch, self.estimator_name)
        if math.isinf(self.lambda_):
            shrunk = weight
        elif self.lambda_ == 0.0:
            shrunk = np.zeros_like(weight)
        else:
            shrunk = self.lambda_ * weight / (weight**2 + self.lambda_)
        return self._terms(batch, shrunk * _residual(batch, self.estimator_name))
