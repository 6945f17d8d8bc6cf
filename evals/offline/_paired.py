"""Paired differences between policies evaluated on the same logged decisions.

Two targets' estimates on one log are not independent: on every decision where both would have
made the same selection their per-decision terms are equal, so the variance of their difference is
far below the sum of their variances, and two intervals that overlap can still say which policy is
better. For per-decision terms ``a_i`` and ``b_i`` (each a plain-mean estimator's terms: cascade DR's
``q_0 + sum_s W_1:s-1 Q_s + W (R - q(S_L))``, PI's ``P R``, or the logged reward ``R_i`` for the
logging policy itself) the difference ``d_i = a_i - b_i`` has the estimate ``mean(d)`` with the
normal interval ``mean(d) +- z_(1-alpha/2) sd(d) / sqrt(n)``.

The moments are kept as running sums and cross-products of every column, so memory is flat in the
number of decisions and any two columns can be compared once the pass is over (the estimator and
replay each target's recommendation uses are chosen only then).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope import IntervalMethod, PolicyValueInterval

__all__ = ["PairedMoments", "widen"]


@dataclass(slots=True)
class PairedMoments:
    """Running count, column sums and cross-products of per-decision terms, ``n_columns`` wide."""

    n_columns: int
    _count: int = field(default=0, init=False)
    _sums: NDArray[np.float64] = field(init=False, repr=False)
    _products: NDArray[np.float64] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._sums = np.zeros(self.n_columns)
        self._products = np.zeros((self.n_columns, self.n_columns))

    def update(self, columns: NDArray[np.float64]) -> None:
        """Fold in one chunk of decisions, ``columns`` of shape ``(n_decisions, n_columns)``."""
        if columns.shape[1] != self.n_columns:
            raise ValueError(f"columns must have {self.n_columns} columns; got shape {columns.shape}")
        self._count += int(columns.shape[0])
        self._sums += columns.sum(axis=0)
        # einsum, not BLAS: a small product should not wake OpenBLAS's threads once per chunk (as
        # evals/ope/_moments.py measured, each wake stalls several ms on busy cores)
        self._products += np.einsum("ij,ik->jk", columns, columns)

    def difference(self, a: int, b: int, alpha: float) -> PolicyValueInterval:
        """Column ``a`` minus column ``b``, with its paired ``1 - alpha`` normal interval."""
        n = self._count
        if n == 0:
            return PolicyValueInterval(math.nan, math.nan, math.nan, alpha, IntervalMethod.NORMAL)
        mean = float(self._sums[a] - self._sums[b]) / n
        squares = float(self._products[a, a] + self._products[b, b] - 2.0 * self._products[a, b])
        if n < 2:
            return PolicyValueInterval(mean, -math.inf, math.inf, alpha, IntervalMethod.NORMAL)
        variance = max(squares - n * mean * mean, 0.0) / (n - 1)
        half = NormalDist().inv_cdf(1.0 - alpha / 2.0) * math.sqrt(variance / n)
        return PolicyValueInterval(mean, mean - half, mean + half, alpha, IntervalMethod.NORMAL)


def widen(difference: PolicyValueInterval, spread: float) -> PolicyValueInterval:
    """``difference`` with its interval widened by ``spread`` on both sides (the bias the two
    targets' unreached shares allow, :mod:`memabra.evals.offline._support`)."""
    if spread <= 0.0:
        return difference
    return replace(difference, ci_low=difference.ci_low - spread, ci_high=difference.ci_high + spread)
