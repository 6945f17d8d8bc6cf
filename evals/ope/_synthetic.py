"""Synthetic contextual bandits whose true policy value is known, for tests and benchmarks.

Contexts x ~ N(0, I_d). The expected reward of action a at position k is
q(x, a, k) = sigmoid(x . theta_a + b_a - 0.5 k) and rewards are Bernoulli(q). The logging
policy is softmax(beta_b * x . phi_a) with phi unrelated to theta, so it explores without knowing
what pays; the evaluation policy is softmax(beta_e * logit q(x, ., k)), which prefers good actions.
The ground truth V(pi_e) = E_x E_k sum_a pi_e(a|x, k) q(x, a, k) is computed by Monte Carlo over
a large fixed sample of contexts, so its error is far below any estimator's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._batch import BanditArrays
from memabra.evals.ope._slate import SlateBatch

__all__ = ["SyntheticBandit", "SyntheticLog", "SyntheticSlateBandit"]

_TRUTH_CONTEXTS = 400_000
_TRUTH_SEED = 20240229


def _softmax(logits: NDArray[np.float64]) -> NDArray[np.float64]:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities: NDArray[np.float64] = shifted / shifted.sum(axis=-1, keepdims=True)
    return probabilities


@dataclass(frozen=True, slots=True)
class SyntheticLog:
    """A sampled log and the true expected rewards q(x_i, a, k), shape (n, n_actions, len_list)."""

    arrays: BanditArrays
    expected_reward: NDArray[np.float64]


@dataclass(frozen=True)
class SyntheticBandit:
    """The environment; ``random_state`` fixes theta, b and phi, the seed of ``sample`` the log."""

    n_actions: int = 5
    dim_context: int = 3
    len_list: int = 1
    behavior_beta: float = 1.0
    evaluation_beta: float = 2.0
    random_state: int = 0

    def _parameters(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        rng = np.random.default_rng(self.random_state)
        theta = rng.normal(size=(self.dim_context, self.n_actions))
        bias = rng.normal(scale=0.5, size=self.n_actions)
        phi = rng.normal(size=(self.dim_context, self.n_actions))
        return theta, bias, phi

    def _reward_logits(self, context: NDArray[np.float64]) -> NDArray[np.float64]:
        """logit q(x, a, k), shape (n, n_actions, len_list)."""
        theta, bias, _ = self._parameters()
        base = context @ theta + bias
        return base[:, :, None] - 0.5 * np.arange(self.len_list)

    def expected_reward(self, context: NDArray[np.float64]) -> NDArray[np.float64]:
        """q(x, a, k), shape (n, n_actions, len_list)."""
        return 1.0 / (1.0 + np.exp(-self._reward_logits(context)))

    def evaluation_policy(self, context: NDArray[np.float64]) -> NDArray[np.float64]:
        """pi_e(a|x, k), shape (n, n_actions, len_list)."""
        by_position = _softmax(self.evaluation_beta * np.moveaxis(self._reward_logits(context), 1, 2))
        return np.ascontiguousarray(by_position.transpose(0, 2, 1))

    def behavior_policy(self, context: NDArray[np.float64]) -> NDArray[np.float64]:
        """pi_b(a|x), shape (n, n_actions); the same at every position."""
        _, _, phi = self._parameters()
        return _softmax(self.behavior_beta * (context @ phi))

    def sample(self, n_rounds: int, random_state: int) -> SyntheticLog:
        rng = np.random.default_rng(random_state)
        context = rng.normal(size=(n_rounds, self.dim_context))
        behavior = self.behavior_policy(context)
        action = (rng.random((n_rounds, 1)) > behavior.cumsum(axis=1)).sum(axis=1)
        action = np.minimum(action, self.n_actions - 1)
        position = rng.integers(0, self.len_list, size=n_rounds)
        expected = self.expected_reward(context)
        reward = (rng.random(n_rounds) < expected[np.arange(n_rounds), action, position]).astype(np.float64)
        arrays = BanditArrays(
            action_dist=self.evaluation_policy(context),
            action=action,
            reward=reward,
            pscore=behavior[np.arange(n_rounds), action],
            position=position if self.len_list > 1 else None,
            context=context,
        )
        return SyntheticLog(arrays=arrays, expected_reward=expected)

    def policy_value(self) -> float:
        """V(pi_e), positions drawn uniformly as in :meth:`sample`."""
        context = np.random.default_rng(_TRUTH_SEED).normal(size=(_TRUTH_CONTEXTS, self.dim_context))
        expected = self.expected_reward(context)
        return float((self.evaluation_policy(context) * expected).sum(axis=1).mean())


@dataclass(frozen=True)
class SyntheticSlateBandit:
    """Slates of ``len_list`` slots, each filled independently from a per-slot softmax policy.

    Slot l's reward is Bernoulli(q(x, a(l), l)) and depends on slot l's item only, so the
    standard, independent and cascade slate IPS estimators are all unbiased for
    V = E_x sum_l sum_a pi_e(a|x, l) q(x, a, l).
    """

    n_unique_action: int = 4
    len_list: int = 3
    dim_context: int = 2
    behavior_beta: float = 0.5
    evaluation_beta: float = 1.5
    random_state: int = 0

    def _bandit(self) -> SyntheticBandit:
        return SyntheticBandit(
            n_actions=self.n_unique_action,
            dim_context=self.dim_context,
            len_list=self.len_list,
            behavior_beta=self.behavior_beta,
            evaluation_beta=self.evaluation_beta,
            random_state=self.random_state,
        )

    def sample(self, n_slates: int, random_state: int) -> SlateBatch:
        bandit = self._bandit()
        rng = np.random.default_rng(random_state)
        context = rng.normal(size=(n_slates, self.dim_context))
        behavior = np.repeat(bandit.behavior_policy(context)[:, :, None], self.len_list, axis=2)
        evaluation = bandit.evaluation_policy(context)
        cumulative = behavior.cumsum(axis=1)
        draws = rng.random((n_slates, 1, self.len_list))
        action = np.minimum((draws > cumulative).sum(axis=1), self.n_unique_action - 1)  # (n, L)
        slates, slots = np.arange(n_slates)[:, None], np.arange(self.len_list)[None, :]
        expected = bandit.expected_reward(context)
        reward = (rng.random((n_slates, self.len_list)) < expected[slates, action, slots]).astype(np.float64)
        behavior_item = behavior[slates, action, slots]
        evaluation_item = evaluation[slates, action, slots]
        behavior_cascade, evaluation_cascade = behavior_item.cumprod(axis=1), evaluation_item.cumprod(axis=1)
        joint = np.repeat(behavior_cascade[:, -1:], self.len_list, axis=1)
        evaluation_joint = np.repeat(evaluation_cascade[:, -1:], self.len_list, axis=1)
        return SlateBatch(
            slate_id=np.repeat(np.arange(n_slates), self.len_list),
            reward=reward.ravel(),
            position=np.tile(np.arange(self.len_list), n_slates),
            pscore=joint.ravel(),
            evaluation_policy_pscore=evaluation_joint.ravel(),
            pscore_item_position=behavior_item.ravel(),
            evaluation_policy_pscore_item_position=evaluation_item.ravel(),
            pscore_cascade=behavior_cascade.ravel(),
            evaluation_policy_pscore_cascade=evaluation_cascade.ravel(),
        )

    def policy_value(self) -> float:
        bandit = self._bandit()
        context = np.random.default_rng(_TRUTH_SEED).normal(size=(_TRUTH_CONTEXTS // 4, self.dim_context))
        expected = bandit.expected_reward(context)
        return float((bandit.evaluation_policy(context) * expected).sum(axis=(1, 2)).mean())
