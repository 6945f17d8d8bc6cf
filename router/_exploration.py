"""Exploration over a slot's costs that keeps the log useful for offline evaluation.

A slot has ``K`` options (the open candidates, then the stop option) with costs ``c`` (lower is
better) and the best option ``a* = argmin c`` (first of equals). The explored set ``S`` is the
``top_m`` candidates of lowest cost plus the stop option.

* ``epsilon`` (top-M ε-greedy): ``p(a) = (1 - ε) [a = a*] + ε / |S| [a ∈ S]``. Every option of ``S``
  keeps at least the floor ``ε / |S|``, so a logged slot's inverse-propensity weight for any policy
  whose choice lies in ``S`` is at most ``|S| / ε``; options outside ``S`` get only the router's
  ``min_probability`` (applied afterwards by :func:`memabra.router._sampling.apply_floor`).
* ``greedy``: all mass on ``a*``. Its logs cannot evaluate any other policy.

Restricting exploration to the top-M keeps its cost small: an explored draw takes a candidate the
router itself nearly prefers, not one of a hundred it has already ruled out.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["EXPLORATIONS", "explore", "exploration_floor"]

EXPLORATIONS = ("epsilon", "greedy")


def exploration_floor(n_options: int, top_m: int, epsilon: float) -> float:
    """The least probability ``epsilon`` exploration gives each option of the explored set."""
    size = min(top_m, n_options - 1) + 1
    return epsilon / size if n_options > 1 else 1.0


def explore(costs: NDArray[np.float64], exploration: str, epsilon: float, top_m: int) -> NDArray[np.float64]:
    """The slot's distribution over ``costs`` (candidates, then the stop option last)."""
    k = costs.size
    best = int(costs.argmin())
    out = np.zeros(k)
    if exploration == "greedy" or k == 1 or epsilon <= 0.0:
        out[best] = 1.0
        return out
    candidates = k - 1
    m = min(top_m, candidates)
    explored = np.argpartition(costs[:-1], m - 1)[:m] if m < candidates else np.arange(candidates)
    share = epsilon / (m + 1)
    out[explored] = share
    out[-1] = share
    out[best] += 1.0 - epsilon
    return out
