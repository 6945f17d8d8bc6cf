"""The reward model q(S) of a logged decision: what injecting the set S would have earned.

A decision's slate features summarise the chosen candidates' logged feature rows (their mean and
maximum, column by column, zeros for an empty set), how many were chosen, whether none was, and the
tokens they cost as a share of the budget. A scikit-learn gradient-boosted regressor maps them to
the decision's reward (the composite total).

Cross-fitting: each decision belongs to one of ``n_folds`` folds by its position in the log's
time order (round robin, so the same log always gets the same folds and the same estimates); the model
that predicts a decision's slates is fitted on the other folds only, so no decision's own reward
enters the predictions its DR correction uses. The model is fitted on a seeded reservoir sample of
at most :data:`MAX_MODEL_DECISIONS` decisions, so memory stays flat however long the log is, and its
held-out error (out-of-fold RMSE on that sample) is reported next to the constant model's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from memabra._records import STOP_ID, Selection
from memabra.router import FeatureTable

__all__ = [
    "MAX_MODEL_DECISIONS",
    "DecisionTable",
    "RewardModelReport",
    "SlateRewardModel",
]

# enough decisions for a 40-feature boosted model to settle; beyond it the fit costs more than it gains
MAX_MODEL_DECISIONS = 20_000
# below this many decisions per fold a fitted model is noise: the fold mean is used instead
_MIN_FIT_DECISIONS = 20
# one thread: on a few thousand rows OpenMP's start-up costs more than it saves (20x on 2 busy cores)
_THREADS = 1
# a small, fixed booster: a few hundred decisions must not overfit, and fitting must take seconds
_BOOSTER = {
    "max_iter": 100,
    "learning_rate": 0.08,
    "max_leaf_nodes": 15,
    "min_samples_leaf": 10,
    "l2_regularization": 1.0,
}


@dataclass(frozen=True, slots=True)
class DecisionTable:
    """A logged decision's offered feature matrix and token costs, and the rows of its draws."""

    matrix: NDArray[np.float64]
    tokens: NDArray[np.float64]
    budget_tokens: float
    index: dict[str, int]

    @classmethod
    def of(cls, selection: Selection) -> DecisionTable:
        candidates = tuple(sc.candidate for sc in selection.offered)
        table = FeatureTable.from_rows(candidates, [sc.features for sc in selection.offered])
        tokens = np.array([c.tokens for c in candidates], dtype=np.float64)
        budget = selection.context.budget.max_tokens or float(tokens.sum())
        return cls(
            table.matrix,
            tokens,
            float(max(budget, 1)),
            {c.id: i for i, c in enumerate(candidates)},
        )

    @property
    def n_features(self) -> int:
        return 3 + 2 * int(self.matrix.shape[1])

    def slate_features(self, rows: Sequence[int]) -> NDArray[np.float64]:
        """Features of the decision injecting the candidates at ``rows``."""
        features: NDArray[np.float64] = self.extended_features(list(rows), None)[0]
        return features

    def extended_features(self, prefix: list[int], options: Sequence[int | None] | None) -> NDArray[np.float64]:
        """Features of ``prefix`` plus each option (``None``: the prefix itself), one row each."""
        d = self.matrix.shape[1]
        chosen = self.matrix[prefix] if prefix else np.zeros((0, d))
        total = chosen.sum(axis=0)
        top = chosen.max(axis=0) if prefix else np.full(d, -np.inf)
        tokens = float(self.tokens[prefix].sum()) if prefix else 0.0
        picks: Sequence[int | None] = [None] if options is None else options
        out = np.zeros((len(picks), self.n_features))
        for k, option in enumerate(picks):
            if option is None:
                n, mean, high, cost = (
                    len(prefix),
                    total / max(len(prefix), 1),
                    top,
                    tokens,
                )
            else:
                n = len(prefix) + 1
                mean = (total + self.matrix[option]) / n
                high = np.maximum(top, self.matrix[option])
                cost = tokens + float(self.tokens[option])
            out[k, 0] = n
            out[k, 1] = 1.0 if n == 0 else 0.0
            out[k, 2] = cost / self.budget_tokens
            out[k, 3 : 3 + d] = mean
            out[k, 3 + d :] = high if n else 0.0
        return out

    def rows_of(self, ids: Iterable[str]) -> list[int]:
        return [self.index[cid] for cid in ids if cid != STOP_ID]


@dataclass(frozen=True, slots=True)
class RewardModelReport:
    """How the reward model was fitted and how well it predicts decisions it did not see."""

    learner: str
    n_folds: int
    n_fit: int
    heldout_rmse: float
    constant_rmse: float

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "learner": self.learner,
            "n_folds": self.n_folds,
            "n_fit": self.n_fit,
            "heldout_rmse": self.heldout_rmse,
            "constant_rmse": self.constant_rmse,
        }


@dataclass
class SlateRewardModel:
    """Cross-fitted q(S); feed decisions with :meth:`observe`, then :meth:`fit`, then :meth:`predict`."""

    n_folds: int = 2
    random_state: int = 0
    _rng: np.random.Generator = field(init=False, repr=False)
    _features: list[NDArray[np.float64]] = field(default_factory=list, init=False, repr=False)
    _rewards: list[float] = field(default_factory=list, init=False, repr=False)
    _folds: list[int] = field(default_factory=list, init=False, repr=False)
    _seen: int = field(default=0, init=False, repr=False)
    _models: list[HistGradientBoostingRegressor | float] = field(default_factory=list, init=False, repr=False)
    _report: RewardModelReport | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.n_folds, bool) or not isinstance(self.n_folds, int) or self.n_folds < 2:
            raise ValueError(f"n_folds must be an integer >= 2; got {self.n_folds!r}")
        self._rng = np.random.default_rng(self.random_state)

    def fold_of(self, position: int) -> int:
        return position % self.n_folds

    def observe(self, selection: Selection, reward: float, table: DecisionTable, position: int) -> None:
        """Offer one logged decision to the reservoir sample the model is fitted on."""
        row = table.slate_features(table.rows_of(selection.chosen_ids))
        self._seen += 1
        if len(self._rewards) < MAX_MODEL_DECISIONS:
            self._features.append(row)
            self._rewards.append(reward)
            self._folds.append(self.fold_of(position))
            return
        slot = int(self._rng.integers(0, self._seen))
        if slot < MAX_MODEL_DECISIONS:
            self._features[slot], self._rewards[slot], self._folds[slot] = (
                row,
                reward,
                self.fold_of(position),
            )

    def fit(self) -> RewardModelReport:
        """Fit one model per fold on the other folds; returns the held-out error."""
        x = np.vstack(self._features) if self._features else np.zeros((0, 1))
        y = np.asarray(self._rewards)
        folds = np.asarray(self._folds)
        predicted = np.empty_like(y)
        self._models = []
        fitted = 0
        for k in range(self.n_folds):
            train = folds != k
            if int(train.sum()) < _MIN_FIT_DECISIONS or np.ptp(y[train]) == 0.0:
                model: HistGradientBoostingRegressor | float = (
                    float(y[train].mean()) if train.any() else float(y.mean())
                )
            else:
                model = HistGradientBoostingRegressor(random_state=self.random_state, **_BOOSTER)
                with threadpool_limits(_THREADS):
                    model.fit(x[train], y[train])
                fitted += 1
            self._models.append(model)
            held = ~train
            if held.any():
                predicted[held] = self._predict_with(model, x[held])
        rmse = float(np.sqrt(np.mean((predicted - y) ** 2))) if y.size else math.nan
        constant = float(y.std()) if y.size else math.nan
        learner = "HistGradientBoostingRegressor on slate features" if fitted else "fold mean reward"
        self._report = RewardModelReport(learner, self.n_folds, int(y.size), rmse, constant)
        return self._report

    def predict(self, position: int, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        """q for slate feature ``rows`` of a decision, by the model that did not see it."""
        if not self._models:
            raise RuntimeError("fit the reward model before predicting")
        return self.predict_fold(self.fold_of(position), rows)

    def predict_fold(self, fold: int, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        """q for ``rows`` of decisions in ``fold``, by the model fitted on the other folds."""
        if not self._models:
            raise RuntimeError("fit the reward model before predicting")
        return self._predict_with(self._models[fold], rows)

    @staticmethod
    def _predict_with(model: HistGradientBoostingRegressor | float, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        if isinstance(model, float):
            return np.full(rows.shape[0], model)
        with threadpool_limits(_THREADS):
            return np.asarray(model.predict(rows), dtype=np.float64)
