"""Turning a learner's slot distribution into a logged draw: validation, the probability floor,
and a seeded draw.

The floor mixes the distribution with the uniform one, ``p' = (1 - K m) p + m`` over the ``K``
options of the slot, so every option keeps at least ``m`` and inverse-propensity weights of any
logged choice stay below ``1 / m``. When ``K m >= 1`` the floor is the uniform distribution.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError

if TYPE_CHECKING:
    from memabra.router._base import Router
    from memabra.router._slots import SlotView

__all__ = ["apply_floor", "check_distribution", "draw_index", "finite_reward", "floored_distribution"]


def check_distribution(probabilities: NDArray[np.float64], who: str) -> NDArray[np.float64]:
    """Return ``probabilities`` as float64 after checking they are finite, non-negative and sum to 1
    (within 1e-6); tiny negatives from floating point are clipped and the vector renormalised."""
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise RouterError(f"{who} returned a distribution of shape {p.shape}")
    total = float(p.sum())
    if abs(total - 1.0) <= 1e-6 and float(p.min()) >= 0.0:  # finite too: a NaN or inf sum fails the test
        return p / total
    if not np.all(np.isfinite(p)):
        raise RouterError(f"{who} returned a non-finite probability: {p.tolist()}")
    if np.any(p < -1e-9):
        raise RouterError(f"{who} returned a negative probability: {p.tolist()}")
    p = np.clip(p, 0.0, None)
    total = float(p.sum())
    if abs(total - 1.0) > 1e-6:
        raise RouterError(f"{who} returned probabilities summing to {total!r}, not 1")
    return p / total


def floored_distribution(router: Router, view: SlotView) -> NDArray[np.float64]:
    """``router``'s distribution over ``view``'s options, checked (:func:`check_distribution`, one
    probability per option, the feature table left as it was) and floored (:func:`apply_floor`): the
    body of :meth:`Router._distribution`."""
    name = type(router).__name__
    try:
        raw = router._slot_distribution(view)
    except ValueError as exc:
        if "read-only" not in str(exc):
            raise
        raise RouterError(
            f"{name}._slot_distribution wrote into the slot's feature table ({exc}): a router "
            "must not change its input; copy a column before changing it (view.table.column(name).copy())"
        ) from exc
    probabilities = check_distribution(raw, f"{name} slot {view.slot}")
    if probabilities.size != view.n_options:
        raise RouterError(f"{name} returned {probabilities.size} probabilities for {view.n_options} options")
    return apply_floor(probabilities, float(router.min_probability))


def apply_floor(probabilities: NDArray[np.float64], min_probability: float) -> NDArray[np.float64]:
    """Mix with uniform so that every option has probability at least ``min_probability``."""
    k = probabilities.size
    if min_probability <= 0.0:
        return probabilities
    if min_probability * k >= 1.0:
        return np.full(k, 1.0 / k)
    mixed = (1.0 - k * min_probability) * probabilities + min_probability
    floored: NDArray[np.float64] = mixed / mixed.sum()
    return floored


def draw_index(probabilities: NDArray[np.float64] | Sequence[float], rng: np.random.Generator) -> int:
    """Inverse-CDF draw; never returns an option of probability zero.

    The CDF is summed left to right in Python floats, exactly as ``np.cumsum`` does, and searched
    with ``bisect_right`` (``searchsorted(side="right")``): on a slot's few dozen options this is
    several times cheaper than the two numpy calls and draws the same index.
    """
    values = probabilities.tolist() if isinstance(probabilities, np.ndarray) else probabilities
    u = float(rng.random())
    cumulative = list(accumulate(values))
    index = min(bisect_right(cumulative, u * cumulative[-1]), len(values) - 1)
    while values[index] <= 0.0:  # u landed on a zero-width step at the end of the CDF
        index -= 1
    return index


def finite_reward(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise RouterError(f"{what} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise RouterError(f"{what} is not finite ({number!r})")
    return number
