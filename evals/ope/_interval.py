"""Confidence intervals for a policy value: percentile bootstrap and delta-method normal."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._moments import RunningMoments
from memabra.evals.ope._validation import OPEInputError

__all__ = [
    "IntervalMethod",
    "PolicyValueInterval",
    "bootstrap_interval",
    "check_alpha",
    "check_interval_arguments",
    "normal_interval",
    "parse_interval_method",
]

# resampled index matrices are built this many entries at a time, so memory stays bounded
_BOOTSTRAP_CELLS = 1 << 22

ValueFromMeans = Callable[[NDArray[np.float64]], NDArray[np.float64]]
"""Maps component means, shape (..., k), to policy values, shape (...)."""


class IntervalMethod(StrEnum):
    BOOTSTRAP = "bootstrap"
    NORMAL = "normal"


@dataclass(frozen=True, slots=True)
class PolicyValueInterval:
    """A point estimate with a two-sided ``1 - alpha`` confidence interval."""

    value: float
    ci_low: float
    ci_high: float
    alpha: float
    method: IntervalMethod


def parse_interval_method(method: IntervalMethod | str) -> IntervalMethod:
    try:
        return IntervalMethod(method)
    except ValueError:
        raise OPEInputError("method", f"method must be 'bootstrap' or 'normal'; got {method!r}") from None


def check_alpha(alpha: float) -> None:
    if isinstance(alpha, bool) or not (isinstance(alpha, float | int) and 0.0 < alpha < 1.0):
        raise OPEInputError("alpha", f"alpha must be in (0, 1); got {alpha!r}")


def check_interval_arguments(alpha: float, n_bootstrap_samples: int) -> None:
    check_alpha(alpha)
    if isinstance(n_bootstrap_samples, bool) or not (isinstance(n_bootstrap_samples, int) and n_bootstrap_samples >= 1):
        raise OPEInputError(
            "n_bootstrap_samples", f"n_bootstrap_samples must be a positive integer; got {n_bootstrap_samples!r}"
        )


def bootstrap_interval(
    components: NDArray[np.float64],
    value_from_means: ValueFromMeans,
    *,
    alpha: float,
    n_bootstrap_samples: int,
    random_state: int | None,
) -> PolicyValueInterval:
    """Percentile bootstrap over rounds.

    Rounds are resampled with replacement and the whole estimator (ratio included, for the
    self-normalised ones) is recomputed on each resample; the interval is the alpha/2 and
    1 - alpha/2 percentiles of those values.
    """
    n_rounds = components.shape[0]
    if n_rounds < 2:
        raise OPEInputError("reward", f"an interval needs at least 2 rounds; got {n_rounds}")
    # each draw gathers whole rounds, which is faster with a round's components side by side (the
    # estimators hand them over column by column, for fast means)
    components = np.ascontiguousarray(components)
    rng = np.random.default_rng(random_state)
    per_draw = max(1, _BOOTSTRAP_CELLS // n_rounds)
    values = np.empty(n_bootstrap_samples)
    for start in range(0, n_bootstrap_samples, per_draw):
        stop = min(start + per_draw, n_bootstrap_samples)
        index = rng.integers(0, n_rounds, size=(stop - start, n_rounds))
        values[start:stop] = value_from_means(components[index].mean(axis=1))
    low, high = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    point = float(value_from_means(components.mean(axis=0)))
    return PolicyValueInterval(point, float(low), float(high), float(alpha), IntervalMethod.BOOTSTRAP)


def normal_interval(
    moments: RunningMoments,
    value_from_means: ValueFromMeans,
    gradient_from_means: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    *,
    alpha: float,
) -> PolicyValueInterval:
    """value +/- z_{1-alpha/2} * sqrt(g' S g / n), with g the gradient of the estimator in the
    component means and S their sample covariance (the delta method; exact CLT for linear ones)."""
    if moments.count < 2:
        raise OPEInputError("reward", f"an interval needs at least 2 rounds; got {moments.count}")
    means = moments.mean
    gradient = gradient_from_means(means)
    variance = float(gradient @ moments.covariance() @ gradient) / moments.count
    half_width = NormalDist().inv_cdf(1 - alpha / 2) * math.sqrt(max(variance, 0.0))
    point = float(value_from_means(means))
    return PolicyValueInterval(point, point - half_width, point + half_width, float(alpha), IntervalMethod.NORMAL)
