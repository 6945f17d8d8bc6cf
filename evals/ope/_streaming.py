"""Estimates accumulated chunk by chunk, in memory that does not grow with the number of rounds.

Feed :class:`~memabra.evals.ope.RoundBatch` chunks (or :class:`~memabra.evals.ope.SlateBatch`
chunks holding whole slates) to :meth:`StreamingEstimate.update`, e.g. straight from a database
cursor. Each estimator keeps only the count, mean vector and cross-products of its few per-round
components, so the point estimate equals the in-memory one (to rounding) and the interval is the
normal (delta-method) one; a bootstrap would need every round kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._base import ComponentEstimator
from memabra.evals.ope._diagnostics import ImportanceWeightDiagnostics, WeightTally
from memabra.evals.ope._interval import PolicyValueInterval, check_alpha, normal_interval
from memabra.evals.ope._moments import RunningMoments
from memabra.evals.ope._validation import OPEInputError

__all__ = ["StreamingEstimate", "estimate_streaming"]

BatchT = TypeVar("BatchT")


class StreamingEstimate(Generic[BatchT]):
    """One estimator's running state over a stream of batches.

    >>> stream = StreamingEstimate(DoublyRobust())      # doctest: +SKIP
    >>> for batch in batches: stream.update(batch)      # doctest: +SKIP
    >>> stream.estimate_interval(alpha=0.05)            # doctest: +SKIP
    """

    def __init__(self, estimator: ComponentEstimator[BatchT]) -> None:
        self.estimator = estimator
        self._moments = RunningMoments(estimator.n_components)
        self._weights = WeightTally()

    @property
    def n_rounds(self) -> int:
        """Rounds (slates, for slate estimators) seen so far."""
        return self._moments.count

    def update(self, batch: BatchT) -> StreamingEstimate[BatchT]:
        """Fold in one batch; returns ``self`` so updates chain."""
        self._moments.update(self.estimator.round_components(batch))
        weights = self.estimator.importance_weights(batch)
        if weights is not None:
            self._weights.update(weights)
        return self

    def merge(self, other: StreamingEstimate[BatchT]) -> StreamingEstimate[BatchT]:
        """Fold in the state of ``other`` (e.g. a shard computed elsewhere) for the same estimator."""
        if other.estimator != self.estimator:
            raise ValueError(f"cannot merge {other.estimator!r} into {self.estimator!r}")
        self._moments.merge(other._moments)
        self._weights.merge(other._weights)
        return self

    def estimate_policy_value(self) -> float:
        self._require_rounds()
        return float(self._value(self._moments.mean))

    def estimate_interval(self, alpha: float = 0.05) -> PolicyValueInterval:
        """The estimate with a normal-approximation ``1 - alpha`` interval."""
        check_alpha(alpha)
        self._require_rounds()
        self._value(self._moments.mean)
        return normal_interval(
            self._moments, self.estimator.value_from_means, self.estimator.gradient_from_means, alpha=alpha
        )

    def diagnostics(self) -> ImportanceWeightDiagnostics | None:
        """Importance-weight diagnostics, or ``None`` when the batches carried no propensities."""
        return self._weights.diagnostics() if self._weights.count else None

    def _require_rounds(self) -> None:
        if self._moments.count == 0:
            raise OPEInputError("reward", f"the log is empty: {self.estimator.estimator_name} saw 0 rounds")

    def _value(self, means: NDArray[np.float64]) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(self.estimator.value_from_means(means))
        if not math.isfinite(value):
            raise OPEInputError(
                "evaluation_policy_pscore",
                f"{self.estimator.estimator_name} is undefined on this log: every importance weight is 0",
            )
        return value


def estimate_streaming(
    estimators: Sequence[ComponentEstimator[BatchT]],
    batches: Iterable[BatchT],
    *,
    alpha: float = 0.05,
) -> dict[str, PolicyValueInterval]:
    """Run several estimators over one pass of ``batches``; intervals by normal approximation."""
    names = [estimator.estimator_name for estimator in estimators]
    if len(set(names)) != len(names):
        raise OPEInputError("estimator_name", f"estimator names must be distinct to key the results; got {names}")
    streams = [StreamingEstimate(estimator) for estimator in estimators]
    for batch in batches:
        for stream in streams:
            stream.update(batch)
    return {stream.estimator.estimator_name: stream.estimate_interval(alpha) for stream in streams}
