"""Exploration over a slot's costs that keeps the log useful for offline evaluation.

A slot has ``K`` options (the open candidates, then the stop option) with costs ``c`` (lower is
better) and the best option ``a* = argmin c`` (first of equals). The explored set ``S`` is the
``top_m`` candidates of lowest cost, the ``top_m`` candidates of lowest *prior* cost (the hybrid
similarity order, the baseline users compare the learner against) and the stop option, so
``top_m + 1 <= |S| <= 2 top_m + 1``.

* ``epsilon`` (top-M ε-greedy): every option of ``S`` gets the floor ``φ = ε / (2 top_m + 1)`` and
  ``a*`` the rest, ``p(a) = φ [a ∈ S] + (1 - φ |S|) [a = a*]``: ``ε`` is what a full explored set
  costs, and a small one (a pool of three tools) spends only ``φ`` per member, since its floor is
  all offline evaluation needs and every draw beyond it is a turn at risk (on a one-slot turn an
  explored draw is a miss). A logged slot's inverse-propensity weight for any policy whose choice
  lies in ``S`` (the hybrid baseline's always does) is at most ``1 / φ``; options outside ``S`` get
  only the router's ``min_probability`` (applied afterwards by
  :func:`memabra.router._sampling.apply_floor`).
* Decision-level reference share: a whole decision follows a reference baseline's own choices
  with probability ``δ`` (:func:`prior_share`: :data:`PRIOR_SHARE` for a fresh router, decaying
  with the decisions learned to :data:`PRIOR_FLOOR`), split evenly between hybrid top-k's
  selection and BM25 top-k's, the ε-greedy learner otherwise. Each slot's logged distribution is
  this mixture's conditional given the slot's prefix (:class:`PriorMixture`; every reference
  component explores the same set, so the floor holds), the log holds true propensities and each
  baseline's whole selection has probability at least about ``δ / 2``: per-slot exploration alone
  reaches a selection that differs from the learner's in ``d`` slots only with probability about
  ``φ^d``.
* ``greedy``: all mass on ``a*``, no prior share. Its logs cannot evaluate any other policy.

Restricting exploration to the two top-M keeps its cost small: an explored draw takes a candidate
the router itself nearly prefers, or one the prior prefers, not one of a hundred both rule out.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from memabra.router._slots import SlotView

__all__ = [
    "EXPLORATIONS",
    "PRIOR_FLOOR",
    "PRIOR_HORIZON",
    "PRIOR_SHARE",
    "PriorMixture",
    "explore",
    "exploration_floor",
    "prior_share",
]

EXPLORATIONS = ("epsilon", "greedy")
# the share of a fresh router's decisions that follow the prior: enough to log the baseline's
# selection dozens of times in a few hundred decisions (measured in docs/router.md)
PRIOR_SHARE = 0.1
# the share decays as PRIOR_SHARE * PRIOR_HORIZON / (PRIOR_HORIZON + learned decisions): the
# baseline's selection is still logged about 0.1 * 200 * ln(1 + n / 200) times in n decisions (31 in
# 742), while a router that has learned for thousands of decisions gives up 1% of them or less
PRIOR_HORIZON = 200
# ...but never below this: the baseline's whole selection keeps a probability of about 5% on every
# decision, so a log of any length supports it (effective sample size about 5% of the decisions)
# instead of its weights growing into a tail no log observes once the share has decayed (3% left
# the hybrid baseline unsupported on the multi-turn bench file, docs/router.md)
PRIOR_FLOOR = 0.05


def prior_share(learned: int) -> float:
    """The decision-level prior share after ``learned`` learned decisions."""
    return max(PRIOR_FLOOR, PRIOR_SHARE * PRIOR_HORIZON / (PRIOR_HORIZON + learned))


def exploration_floor(n_options: int, top_m: int, epsilon: float) -> float:
    """The probability ``epsilon`` exploration gives each option of the explored set (the best
    option gets the rest), whatever the learner's and the prior's top-M share."""
    return epsilon / (2 * top_m + 1) if n_options > 1 else 1.0


def _top(costs: NDArray[np.float64], m: int) -> NDArray[np.intp]:
    return np.argpartition(costs, m - 1)[:m] if m < costs.size else np.arange(costs.size)


def explore(
    costs: NDArray[np.float64],
    exploration: str,
    epsilon: float,
    top_m: int,
    prior: NDArray[np.float64] | None = None,
    mode: int | None = None,
) -> NDArray[np.float64]:
    """The slot's distribution over ``costs`` (candidates, then the stop option last); ``prior``,
    the same options' prior costs, adds its top-M to the explored set; ``mode`` replaces
    ``argmin costs`` as the option that gets what the floors leave."""
    k = costs.size
    best = int(costs.argmin()) if mode is None else mode
    out = np.zeros(k)
    if exploration == "greedy" or k == 1 or epsilon <= 0.0:
        out[best] = 1.0
        return out
    m = min(top_m, k - 1)
    explored = np.zeros(k, dtype=bool)
    explored[_top(costs[:-1], m)] = True
    if prior is not None:
        explored[_top(prior[:-1], m)] = True
    explored[-1] = True
    floor = exploration_floor(k, top_m, epsilon)
    out[explored] = floor
    out[best] += 1.0 - floor * np.count_nonzero(explored)
    return out


class PriorMixture:
    """Per-slot conditionals of the decision-level mixture ``(1 - Σ δ_r) learner + Σ_r δ_r
    reference_r``, every component ε-greedy over the same explored set: the learner's with the
    lowest-cost option as its mode, each reference's with its own choice (the hybrid baseline's,
    the BM25 baseline's).

    Given the prefix ``h`` of slot ``s``, component ``k``'s posterior weight is
    ``λ_k = δ_k P_k(h) / Σ_j δ_j P_j(h)`` (``P_k``: the component's probability of the draws so
    far) and the slot's distribution ``Σ_k λ_k p_k``: every option of the explored set keeps its
    floor ``φ``. A router calls :meth:`slot` for the slots of one decision in order (choosing and
    teacher-forced replay both do, under the router's lock): slot 0 starts a new decision, and
    the previous draw is read off the view (a longer ``chosen`` means a candidate was drawn, an
    equal one the stop option)."""

    __slots__ = ("_chosen", "_components", "_eligible", "_paths")

    def __init__(self) -> None:
        self._paths: list[float] = []
        self._chosen: tuple[int, ...] = ()
        self._eligible: tuple[int, ...] = ()
        self._components: tuple[NDArray[np.float64], ...] = ()

    def slot(
        self, view: SlotView, components: tuple[NDArray[np.float64], ...], shares: tuple[float, ...]
    ) -> NDArray[np.float64]:
        """The mixture's distribution for ``view``, given each component's (same options, the
        learner's first) and its decision-level share (``shares`` sums to 1)."""
        if view.slot == 0 or len(self._paths) != len(components):
            self._paths = [1.0] * len(components)
        else:
            drawn = (
                self._eligible.index(view.chosen[-1])
                if len(view.chosen) > len(self._chosen) and view.chosen[-1] in self._eligible
                else len(self._eligible)
            )
            self._paths = [path * float(p[drawn]) for path, p in zip(self._paths, self._components, strict=True)]
        weights = [share * path for share, path in zip(shares, self._paths, strict=True)]
        total = sum(weights)
        posterior = [w / total for w in weights] if total > 0.0 else list(shares)
        self._chosen, self._eligible, self._components = view.chosen, view.eligible, components
        out = posterior[0] * components[0]
        for weight, p in zip(posterior[1:], components[1:], strict=True):
            if weight > 0.0:
                out = out + weight * p
        return out
