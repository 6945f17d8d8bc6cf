"""Running means and covariances of per-round components, mergeable across chunks.

Every estimator is a smooth function f of the means of k per-round components (k = 1 for the
linear ones, 2 or 3 for the self-normalised ones). Keeping the count, the mean vector and the
centred cross-product matrix of those components is enough for the point estimate and for a
delta-method normal interval, in memory that does not grow with the number of rounds.
Chunks are merged with Chan et al.'s pairwise update, which stays accurate where raw sums of
squares would cancel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = ["RunningMoments"]


@dataclass(slots=True)
class RunningMoments:
    """Count, mean and centred cross-products of k-dimensional observations."""

    n_components: int
    _count: int = field(default=0, init=False)
    _mean: NDArray[np.float64] = field(init=False)
    _cross: NDArray[np.float64] = field(init=False)

    def __post_init__(self) -> None:
        self._mean = np.zeros(self.n_components)
        self._cross = np.zeros((self.n_components, self.n_components))

    @property
    def count(self) -> int:
        return self._count

    @property
    def mean(self) -> NDArray[np.float64]:
        return self._mean.copy()

    def covariance(self) -> NDArray[np.float64]:
        """The sample covariance (divisor n - 1); needs at least two observations."""
        if self._count < 2:
            raise ValueError(f"a covariance needs at least 2 rounds; have {self._count}")
        return self._cross / (self._count - 1)

    def update(self, components: NDArray[np.float64]) -> None:
        """Fold in a chunk of observations, shape ``(m, n_components)``."""
        count = components.shape[0]
        if count == 0:
            return
        mean = components.mean(axis=0)
        centred = components - mean
        # einsum, not centred.T @ centred: with k <= 3 one thread does it in well under a
        # millisecond, while BLAS wakes its thread pool for every chunk, which stalls for
        # milliseconds whenever the cores are busy
        self._merge(count, mean, np.einsum("ij,ik->jk", centred, centred))

    def merge(self, other: RunningMoments) -> None:
        """Fold in another accumulator's observations."""
        if other.n_components != self.n_components:
            raise ValueError(f"cannot merge moments of {other.n_components} components into {self.n_components}")
        if other._count:
            self._merge(other._count, other._mean, other._cross)

    def _merge(self, count: int, mean: NDArray[np.float64], cross: NDArray[np.float64]) -> None:
        total = self._count + count
        delta = mean - self._mean
        self._cross = self._cross + cross + np.outer(delta, delta) * (self._count * count / total)
        self._mean = self._mean + delta * (count / total)
        self._count = total
