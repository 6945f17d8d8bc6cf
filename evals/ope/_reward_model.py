"""Cross-fitted reward model q_hat(x, a, k) for DM and the DR family.

Rounds are split into K folds; each fold's q_hat comes from a model fitted on the other folds,
so no round's own reward enters its prediction (the cross-fitting that keeps DR's correction
term unbiased given the model). Features per (round, action, position):

- with ``context (n, d)``: the action's encoding e(a) (``action_context[a]`` when given, else a
  one-hot of a), the context x, their interactions x e(a)^T (so a linear learner fits one reward
  slope per action) and, when len_list > 1, a one-hot of the position. The default learner is
  standardised logistic regression (predicted P(r = 1)) when every reward is 0 or 1 and ridge
  regression otherwise: linear, single-threaded and fast; pass any scikit-learn regressor or
  classifier as ``base_model`` for more capacity. A classifier's q_hat is the expected reward
  sum_k P(r = c_k) c_k over its classes c_k (the reward values it saw), so rewards in {0, 1, 2}
  are valued as rewards, not as the probability of one class;
- without ``context``: q_hat(x, a, k) is the out-of-fold mean reward of action a at position k
  (the out-of-fold overall mean for a pair never logged in the other folds). No learner is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._batch import BanditArrays
from memabra.evals.ope._validation import OPEInputError

if TYPE_CHECKING:
    from sklearn.base import BaseEstimator

# scikit-learn (with SciPy, about a second) is imported where a model is fitted, not with the
# package: every command line call imports the estimators, few fit a reward model

__all__ = ["CrossFittedRewardModel"]


@dataclass(frozen=True)
class CrossFittedRewardModel:
    """K-fold cross-fitted q_hat; ``base_model`` is any scikit-learn regressor or classifier
    (cloned per fold; a classifier's prediction is its expected reward over the reward values it
    was fitted on), ``None`` for the default described in the module docstring."""

    base_model: BaseEstimator | None = None
    n_folds: int = 2
    random_state: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.n_folds, bool) or not isinstance(self.n_folds, int) or self.n_folds < 2:
            raise OPEInputError("n_folds", f"n_folds must be an integer >= 2; got {self.n_folds!r}")

    def fit_predict(self, arrays: BanditArrays) -> NDArray[np.float64]:
        """Out-of-fold q_hat for every round, action and position, shape ``(n, n_actions, len_list)``."""
        action, reward, context = arrays.action, arrays.reward, arrays.context
        if action is None or reward is None:
            raise OPEInputError("reward", "a reward model needs the logged action and reward")
        if arrays.n_rounds < self.n_folds:
            raise OPEInputError(
                "reward",
                f"cross-fitting with {self.n_folds} folds needs at least {self.n_folds} rounds; got {arrays.n_rounds}",
            )
        from sklearn.model_selection import KFold

        position = np.zeros(arrays.n_rounds, dtype=np.int64) if arrays.position is None else arrays.position
        cells = (arrays.n_actions, arrays.len_list)
        estimated = np.empty((arrays.n_rounds, *cells))
        encode = _Encoder(arrays.n_actions, arrays.len_list, arrays.action_context)
        folds = KFold(n_splits=self.n_folds, shuffle=True, random_state=self.random_state)
        for train, held_out in folds.split(np.zeros(arrays.n_rounds)):
            if context is None:
                estimated[held_out] = _cell_means(action[train], position[train], reward[train], cells)
                continue
            estimated[held_out] = self._fit_fold(
                encode(context[train], action[train], position[train]), reward[train], encode, context[held_out]
            )
        return estimated

    def _fit_fold(
        self,
        features: NDArray[np.float64],
        reward: NDArray[np.float64],
        encode: _Encoder,
        held_out_context: NDArray[np.float64],
    ) -> NDArray[np.float64]:
        from sklearn.base import clone, is_classifier
        from sklearn.utils.multiclass import type_of_target

        n_held_out = held_out_context.shape[0]
        shape = (n_held_out, encode.n_actions, encode.len_list)
        if np.unique(reward).size == 1:  # nothing to learn, and a classifier would refuse one class
            return np.full(shape, reward[0])
        binary = bool(np.isin(reward, (0.0, 1.0)).all())
        model = clone(self.base_model) if self.base_model is not None else _default_model(binary)
        if is_classifier(model) and type_of_target(reward) == "continuous":
            raise OPEInputError(
                "base_model",
                f"{type(model).__name__} is a classifier, but the rewards are continuous "
                f"({np.unique(reward).size} distinct values, e.g. {float(reward[reward != np.round(reward)][0])!r}); "
                "pass a regressor, or a classifier only for rewards with a few discrete values",
            )
        model.fit(features, reward)
        per_round = encode.n_actions * encode.len_list
        action = np.tile(np.repeat(np.arange(encode.n_actions), encode.len_list), n_held_out)
        slot = np.tile(np.arange(encode.len_list), n_held_out * encode.n_actions)
        grid = encode(np.repeat(held_out_context, per_round, axis=0), action, slot)
        predicted = _expected_reward(model, grid) if is_classifier(model) else model.predict(grid)
        return np.asarray(predicted, dtype=np.float64).reshape(shape)


def _expected_reward(model: BaseEstimator, grid: NDArray[np.float64]) -> NDArray[np.float64]:
    """sum_k P(c_k | row) c_k over the classifier's classes c_k: the expected reward, whatever
    values the rewards take (P(r = 1) is that only for 0/1 rewards)."""
    classes = np.asarray(getattr(model, "classes_", None))
    if classes.ndim != 1 or classes.size == 0 or not np.issubdtype(classes.dtype, np.number):
        raise OPEInputError(
            "base_model",
            f"{type(model).__name__}'s classes_ must be the numeric reward values; got {classes!r}",
        )
    probabilities = np.asarray(model.predict_proba(grid), dtype=np.float64)
    if probabilities.shape != (grid.shape[0], classes.size):
        raise OPEInputError(
            "base_model",
            f"{type(model).__name__}.predict_proba returned shape {probabilities.shape}; "
            f"expected ({grid.shape[0]}, {classes.size}), one column per class",
        )
    return np.asarray(probabilities @ classes.astype(np.float64))


def _default_model(binary: bool) -> BaseEstimator:
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    learner = LogisticRegression(max_iter=5000) if binary else Ridge(alpha=1.0)
    return make_pipeline(StandardScaler(), learner)


@dataclass(frozen=True)
class _Encoder:
    """Row features: e(a), x, x e(a)^T flattened, then a position one-hot (len_list > 1)."""

    n_actions: int
    len_list: int
    action_context: NDArray[np.float64] | None

    def __call__(
        self, context: NDArray[np.float64], action: NDArray[np.int64], position: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        encoded = self.action_context[action] if self.action_context is not None else np.eye(self.n_actions)[action]
        interactions = (context[:, :, None] * encoded[:, None, :]).reshape(context.shape[0], -1)
        parts = [encoded, context, interactions]
        if self.len_list > 1:
            parts.append(np.eye(self.len_list)[position])
        return np.hstack(parts)


def _cell_means(
    action: NDArray[np.int64],
    position: NDArray[np.int64],
    reward: NDArray[np.float64],
    cells: tuple[int, int],
) -> NDArray[np.float64]:
    n_actions, len_list = cells
    cell = action * len_list + position
    totals = np.bincount(cell, weights=reward, minlength=n_actions * len_list)
    counts = np.bincount(cell, minlength=n_actions * len_list)
    means = np.full(n_actions * len_list, float(reward.mean()))
    np.divide(totals, counts, out=means, where=counts > 0)
    return means.reshape(cells)
