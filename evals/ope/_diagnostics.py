"""Importance-weight diagnostics: how far the evaluation policy strays from the logging one."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = ["ImportanceWeightDiagnostics", "WeightTally"]


@dataclass(frozen=True, slots=True)
class ImportanceWeightDiagnostics:
    """Summary of the importance weights w_i = pi_e(a_i|x_i) / pi_b(a_i|x_i).

    - ``effective_sample_size`` = (sum_i w_i)^2 / sum_i w_i^2 (Kish); n when all weights are equal,
      small when a few rounds carry the estimate; 0 when every weight is 0.
    - ``max_weight``, ``mean_weight``: a mean far from 1 hints at wrong propensities.
    - ``zero_weight_share``: share of rounds whose logged action the evaluation policy never takes.
    """

    n_rounds: int
    effective_sample_size: float
    max_weight: float
    mean_weight: float
    zero_weight_share: float

    @classmethod
    def from_weights(cls, weights: NDArray[np.float64]) -> ImportanceWeightDiagnostics:
        tally = WeightTally()
        tally.update(np.asarray(weights, dtype=np.float64))
        return tally.diagnostics()


@dataclass(slots=True)
class WeightTally:
    """Streaming sums behind :class:`ImportanceWeightDiagnostics`."""

    _count: int = field(default=0, init=False)
    _total: float = field(default=0.0, init=False)
    _total_squared: float = field(default=0.0, init=False)
    _max: float = field(default=-math.inf, init=False)  # signed weights (pseudo-inverse) may all be < 0
    _zeros: int = field(default=0, init=False)

    @property
    def count(self) -> int:
        return self._count

    def update(self, weights: NDArray[np.float64]) -> None:
        if weights.size == 0:
            return
        self._count += int(weights.size)
        self._total += float(weights.sum())
        self._total_squared += float(np.einsum("i,i->", weights, weights))  # no BLAS thread pool (see _moments)
        self._max = max(self._max, float(weights.max()))
        self._zeros += int(np.count_nonzero(weights == 0.0))

    def merge(self, other: WeightTally) -> None:
        self._count += other._count
        self._total += other._total
        self._total_squared += other._total_squared
        self._max = max(self._max, other._max)
        self._zeros += other._zeros

    def diagnostics(self) -> ImportanceWeightDiagnostics:
        if self._count == 0:
            raise ValueError("no importance weights were seen; the log is empty")
        ess = self._total**2 / self._total_squared if self._total_squared > 0 else 0.0
        return ImportanceWeightDiagnostics(
            n_rounds=self._count,
            effective_sample_size=ess,
            max_weight=self._max,
            mean_weight=self._total / self._count,
            zero_weight_share=self._zeros / self._count,
        )
