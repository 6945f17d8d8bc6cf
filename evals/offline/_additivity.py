"""Does the log's reward add up over slots? The assumption the pseudo-inverse estimator needs.

PI (Swaminathan et al. 2017) is unbiased when ``E[R | S] = sum_s phi_s(a_s)``. The log can test the
part of that which runs through the picks' own outcomes: each chosen candidate is known to have
been used or not (the episode's ``used_ids``). Two linear models of the decision's reward are
cross-fitted on the same folds:

* additive: a constant per slate length, the token share, the number of used picks, the picks'
  feature sums; any such model adds up over the picks;
* free: the same plus a one-hot of the number of used picks, so "any pick helped" or "all of them
  did" costs it nothing.

With ``d_i = (R_i - q_add(S_i))^2 - (R_i - q_free(S_i))^2`` on held-out decisions, the reward is
called non-additive when the lower end of the interval of ``mean(d)`` (95% by default) exceeds
:data:`NON_ADDITIVE_SHARE` of the reward's variance, and PI is then not recommended
(:mod:`memabra.evals.offline._evaluate`). Outcomes make the test sharp where a model of the slate's
features alone is not: on the simulator the boosted slate model predicts held-out rewards worse
than an additive one (300 decisions of noisy help draws), while its reward is "any note helped".
A log with no decision that picked two or more candidates with known outcomes passes (one pick is
additive by construction), as does one too small to fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from memabra._records import Selection
from memabra.evals.offline._slate_model import DecisionTable
from memabra.evals.offline._support import finite_or_none

__all__ = ["NON_ADDITIVE_SHARE", "AdditivityCheck", "AdditivityReport"]

# the share of the reward's variance the non-additive part must surely explain before PI is refused:
# below it PI's bias is a few hundredths of the reward's spread at most (docs/ope.md)
NON_ADDITIVE_SHARE = 0.01
# slate lengths and used-pick counts with a coefficient of their own (longer share the last):
# memabra's budgets allow a handful of slots per kind
_COUNTS = 8
# ridge penalty on standardised features: keeps collinear counts stable on a few hundred decisions
_RIDGE = 1.0
# below this many decisions with known outcomes per fold the test cannot reject anything
_MIN_DECISIONS = 40
# a bounded sample, as for the reward model: the test's power saturates long before
_MAX_DECISIONS = 20_000


@dataclass(frozen=True, slots=True)
class AdditivityReport:
    """The test's result: both models' held-out errors and the interval of their paired gap."""

    n_decisions: int
    additive_rmse: float
    free_rmse: float
    gap_low: float
    gap_high: float
    reward_variance: float

    @property
    def additive(self) -> bool:
        """False only when the log shows the reward is not additive over its picks."""
        return not self.gap_low > NON_ADDITIVE_SHARE * self.reward_variance

    def as_dict(self) -> dict[str, Any]:
        return {
            "n_decisions": self.n_decisions,
            "additive_rmse": finite_or_none(self.additive_rmse),
            "free_rmse": finite_or_none(self.free_rmse),
            "gap_low": finite_or_none(self.gap_low),
            "gap_high": finite_or_none(self.gap_high),
            "additive": self.additive,
        }

    def reason(self) -> str:
        return (
            "assumes a reward additive over slots, and this log's is not: with the picks' "
            f"used outcomes, an additive model's held-out RMSE is {self.additive_rmse:.3f} against "
            f"{self.free_rmse:.3f} for one that counts used picks freely"
        )


@dataclass
class AdditivityCheck:
    """Feed decisions with :meth:`observe` (``position``: the log order, for the folds), then :meth:`fit`."""

    n_folds: int = 2
    random_state: int = 0
    _rng: np.random.Generator = field(init=False, repr=False)
    _seen: int = field(default=0, init=False, repr=False)
    _rows: list[NDArray[np.float64]] = field(default_factory=list, init=False, repr=False)
    _rewards: list[float] = field(default_factory=list, init=False, repr=False)
    _folds: list[int] = field(default_factory=list, init=False, repr=False)
    _multi: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.random_state)

    def observe(
        self,
        selection: Selection,
        reward: float,
        table: DecisionTable,
        used_ids: frozenset[str] | None,
        position: int,
    ) -> None:
        if used_ids is None:
            return
        chosen = selection.chosen_ids
        rows = table.rows_of(chosen)
        used = sum(cid in used_ids for cid in chosen)
        d = table.matrix.shape[1]
        row = np.zeros(2 * _COUNTS + 2 + d)
        row[min(len(rows), _COUNTS - 1)] = 1.0
        row[_COUNTS] = float(table.tokens[rows].sum()) / table.budget_tokens if rows else 0.0
        row[_COUNTS + 1] = used
        row[_COUNTS + 2 : _COUNTS + 2 + d] = table.matrix[rows].sum(axis=0) if rows else 0.0
        row[_COUNTS + 2 + d + min(used, _COUNTS - 1)] = 1.0
        self._multi += len(rows) > 1
        # a seeded reservoir sample, so a long log is sampled evenly over its time
        self._seen += 1
        if len(self._rewards) < _MAX_DECISIONS:
            self._rows.append(row)
            self._rewards.append(reward)
            self._folds.append(position % self.n_folds)
            return
        slot = int(self._rng.integers(0, self._seen))
        if slot < _MAX_DECISIONS:
            self._rows[slot], self._rewards[slot], self._folds[slot] = row, reward, position % self.n_folds

    def fit(self, alpha: float = 0.05) -> AdditivityReport | None:
        """The test's result at level ``alpha``, or None when the log cannot test anything (see
        the module docstring)."""
        n = len(self._rewards)
        if self._multi == 0 or n < _MIN_DECISIONS * self.n_folds:
            return None
        x, y, folds = np.vstack(self._rows), np.asarray(self._rewards), np.asarray(self._folds)
        additive_columns = x.shape[1] - _COUNTS
        held = {"additive": np.empty_like(y), "free": np.empty_like(y)}
        for k in range(self.n_folds):
            train = folds != k
            if int(train.sum()) < _MIN_DECISIONS or int((~train).sum()) == 0:
                return None
            for name, columns in (("additive", slice(0, additive_columns)), ("free", slice(None))):
                model = make_pipeline(StandardScaler(), Ridge(alpha=_RIDGE))
                model.fit(x[train][:, columns], y[train])
                held[name][~train] = model.predict(x[~train][:, columns])
        gap = (y - held["additive"]) ** 2 - (y - held["free"]) ** 2
        half = NormalDist().inv_cdf(1 - alpha / 2) * float(gap.std(ddof=1)) / math.sqrt(n)
        mean = float(gap.mean())
        return AdditivityReport(
            n_decisions=n,
            additive_rmse=float(np.sqrt(np.mean((y - held["additive"]) ** 2))),
            free_rmse=float(np.sqrt(np.mean((y - held["free"]) ** 2))),
            gap_low=mean - half,
            gap_high=mean + half,
            reward_variance=float(y.var()),
        )
