"""What every estimator shares: the component protocol and the obp-style public methods.

An estimator maps a batch of rounds to a matrix of k per-round components z_i and says how the
policy value follows from their means, V = f(mean_i z_i), and what f's gradient is. From those
three pieces come the point estimate, obp's per-round rewards, the bootstrap interval (resample
rounds, recompute f), the normal interval (delta method) and the streaming accumulation.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._interval import (
    IntervalMethod,
    PolicyValueInterval,
    bootstrap_interval,
    check_interval_arguments,
    normal_interval,
    parse_interval_method,
)
from memabra.evals.ope._moments import RunningMoments
from memabra.evals.ope._validation import OPEInputError

__all__ = ["ComponentEstimator", "EstimatorBase", "check_lambda"]

BatchT = TypeVar("BatchT")
BatchT_contra = TypeVar("BatchT_contra", contravariant=True)


class ComponentEstimator(Protocol[BatchT_contra]):
    """The streaming protocol: what :class:`~memabra.evals.ope.StreamingEstimate` calls."""

    @property
    def estimator_name(self) -> str: ...

    @property
    def n_components(self) -> int: ...

    def round_components(self, batch: BatchT_contra) -> NDArray[np.float64]: ...

    def value_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]: ...

    def gradient_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]: ...

    def importance_weights(self, batch: BatchT_contra) -> NDArray[np.float64] | None: ...


def check_lambda(value: float, owner: str) -> None:
    """lambda_ must be a number >= 0 (inf allowed, NaN not)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value < 0:
        raise OPEInputError("lambda_", f"{owner}.lambda_ must be a number >= 0 (inf allowed); got {value!r}")


@dataclass(frozen=True)
class EstimatorBase(ABC, Generic[BatchT]):
    """Linear estimators (one component, V = mean_i z_i) need only ``round_components``."""

    @property
    def n_components(self) -> int:
        """Components per round (estimators with more set it as a class attribute or property)."""
        return 1

    @property
    @abstractmethod
    def estimator_name(self) -> str: ...

    @abstractmethod
    def round_components(self, batch: BatchT) -> NDArray[np.float64]:
        """Per-round components, shape ``(m, n_components)``."""

    def value_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        """V from component means; vectorised over leading axes (bootstrap draws)."""
        return np.asarray(means[..., 0])

    def gradient_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.ones(1)

    def round_rewards_from_components(self, components: NDArray[np.float64]) -> NDArray[np.float64]:
        """obp's per-round rewards: terms whose plain mean is the estimate."""
        return np.asarray(components[:, 0])

    def importance_weights(self, batch: BatchT) -> NDArray[np.float64] | None:
        """The raw importance weights behind the estimate, for diagnostics."""
        return None

    # subclasses' obp-style methods turn keyword arrays into a batch and call these

    def policy_value_from_batch(self, batch: BatchT) -> float:
        """The estimate on an already-built batch."""
        components = self._nonempty_components(batch)
        return float(self._checked_value(components.mean(axis=0)))

    def round_rewards_from_batch(self, batch: BatchT) -> NDArray[np.float64]:
        """obp's per-round rewards on an already-built batch."""
        components = self._nonempty_components(batch)
        self._checked_value(components.mean(axis=0))
        return self.round_rewards_from_components(components)

    def interval_from_batch(
        self,
        batch: BatchT,
        *,
        alpha: float,
        n_bootstrap_samples: int,
        random_state: int | None,
        method: IntervalMethod | str,
    ) -> PolicyValueInterval:
        """The estimate and its interval on an already-built batch."""
        check_interval_arguments(alpha, n_bootstrap_samples)
        method = parse_interval_method(method)
        components = self._nonempty_components(batch)
        full_value = float(self._checked_value(components.mean(axis=0)))
        if method is IntervalMethod.NORMAL:
            moments = RunningMoments(self.n_components)
            moments.update(components)
            return normal_interval(moments, self.value_from_means, self.gradient_from_means, alpha=alpha)

        def resampled_value(means: NDArray[np.float64]) -> NDArray[np.float64]:
            # a resample may hold only zero weights, where a self-normalised estimate is 0/0; such
            # a draw says nothing about the spread, so it counts as the full-sample value
            with np.errstate(divide="ignore", invalid="ignore"):
                values = self.value_from_means(means)
            return np.where(np.isfinite(values), values, full_value)

        return bootstrap_interval(
            components,
            resampled_value,
            alpha=alpha,
            n_bootstrap_samples=n_bootstrap_samples,
            random_state=random_state,
        )

    def _nonempty_components(self, batch: BatchT) -> NDArray[np.float64]:
        """The batch's components; an empty batch has no estimate (its mean would be 0/0)."""
        components = self.round_components(batch)
        if components.shape[0] == 0:
            raise OPEInputError("reward", f"the log is empty: {self.estimator_name} got a batch of 0 rounds")
        return components

    def _checked_value(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        with np.errstate(divide="ignore", invalid="ignore"):
            value = self.value_from_means(means)
        if not np.isfinite(value):
            raise OPEInputError(
                "action_dist",
                f"{self.estimator_name} is undefined on this log: every importance weight is 0 "
                "(the evaluation policy never takes a logged action)",
            )
        return value
