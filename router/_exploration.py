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
  only the router's ``min_probability`` (mixed in as
  :func:`memabra.router._sampling.apply_floor` mixes it, by :meth:`EpsilonGreedy.mixture_values`).
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

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from memabra.router._slots import SlotView

__all__ = [
    "EXPLORATIONS",
    "PRIOR_FLOOR",
    "PRIOR_HORIZON",
    "PRIOR_SHARE",
    "EpsilonGreedy",
    "PriorMixture",
    "explore",
    "explored_set",
    "explored_with",
    "exploration_floor",
    "prior_share",
    "top_options",
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


def top_options(costs: NDArray[np.float64], m: int) -> list[int]:
    """The ``m`` options of lowest ``costs`` (all of them when there are no more)."""
    # the method, not np.argpartition: the same indices without the wrapper's dispatch
    return costs.argpartition(m - 1)[:m].tolist() if m < costs.size else list(range(costs.size))


def explored_set(costs: NDArray[np.float64], top_m: int, prior: NDArray[np.float64] | None = None) -> set[int]:
    """``S``: the ``top_m`` options of lowest cost and of lowest prior cost (the stop option
    excluded from both), and the stop option."""
    k = costs.size
    m = min(top_m, k - 1)
    return explored_with(costs, top_m, top_options(prior[:-1], m) if prior is not None else ())


def explored_with(costs: NDArray[np.float64], top_m: int, prior_top: Iterable[int]) -> set[int]:
    """:func:`explored_set` with the prior's ``top_m`` options given (a learner that keeps its
    open candidates in similarity order has them without a partition)."""
    k = costs.size
    explored = set(top_options(costs[:-1], min(top_m, k - 1)))
    explored.update(prior_top)
    explored.add(k - 1)
    return explored


class EpsilonGreedy:
    """ε-greedy components over one explored set ``S``: each gives the floor ``φ`` to the options
    of ``S`` and 0 to the others, except at its own few options (its mode's mass), kept in
    ``exceptions``, one dict per component. The first component's mode is ``best``; each
    reference's is ``modes[r]`` and it moves the first component's greedy mass there.

    Held this way, a slot's mixture is a few float operations instead of one array per component;
    every exceptional probability is computed by the same operations, in the same order, as the
    array updates it stands for (``own[best] += ...``, ``reference[best] -= greedy_mass``, ...),
    so the numbers are the same to the last bit."""

    __slots__ = ("exceptions", "explored", "floor", "options", "size")

    def __init__(self, size: int, explored: set[int], floor: float, best: int, modes: tuple[int, ...] = ()) -> None:
        self.size = size
        self.explored = explored
        self.floor = floor
        own_best = (floor if best in explored else 0.0) + (1.0 - floor * len(explored))
        greedy_mass = own_best - floor
        self.exceptions: list[dict[int, float]] = [{best: own_best}]
        for mode in modes:
            if mode == best:
                self.exceptions.append({best: (own_best - greedy_mass) + greedy_mass})
            else:
                mode_floor = floor if mode in explored else 0.0
                self.exceptions.append({best: own_best - greedy_mass, mode: mode_floor + greedy_mass})
        # the options some component does not give its default (the floor in S, 0 outside)
        self.options = {best, *modes}

    def probability(self, component: int, option: int) -> float:
        """Component ``component``'s probability of ``option``."""
        value = self.exceptions[component].get(option)
        if value is not None:
            return value
        return self.floor if option in self.explored else 0.0

    def mixture(self, weights: list[float]) -> NDArray[np.float64]:
        """``Σ_k weights[k] p_k`` summed component by component (components of weight 0 after the
        first skipped)."""
        return np.array(self.mixture_values(weights, 0.0))

    def mixture_values(self, weights: list[float], min_probability: float) -> tuple[float, ...]:
        """:meth:`mixture` mixed with uniform so that every option has at least ``min_probability``
        (``(1 - K m) p + m``, as :func:`~memabra.router._sampling.apply_floor` mixes), as Python
        floats: what a slot draws from. Not renormalised: the mixture sums to 1 up to rounding, and
        so does this."""
        size = self.size
        if min_probability * size >= 1.0:
            return (1.0 / size,) * size
        floor = self.floor
        explored = self.explored
        first = self.exceptions[0]
        own = weights[0]
        terms = [(exceptions, w) for exceptions, w in zip(self.exceptions[1:], weights[1:], strict=True) if w > 0.0]
        common = own * floor
        for _, w in terms:
            common = common + w * floor
        scale = 1.0 - size * min_probability
        out = [min_probability] * size
        # item by item: for a set of at most 2 top_m + 1 options, cheaper than arrays
        explored_value = scale * common + min_probability
        for option in explored:
            out[option] = explored_value
        for option in self.options:
            default = floor if option in explored else 0.0
            value = own * first.get(option, default)
            for exceptions, w in terms:
                value = value + w * exceptions.get(option, default)
            out[option] = scale * value + min_probability
        return tuple(out)


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
    if exploration == "greedy" or k == 1 or epsilon <= 0.0:
        out = np.zeros(k)
        out[best] = 1.0
        return out
    floor = exploration_floor(k, top_m, epsilon)
    return EpsilonGreedy(k, explored_set(costs, top_m, prior), floor, best).mixture([1.0])


class PriorMixture:
    """Per-slot conditionals of the decision-level mixture ``(1 - Σ δ_r) learner + Σ_r δ_r
    reference_r``, every component ε-greedy over the same explored set (:class:`EpsilonGreedy`):
    the learner's with the lowest-cost option as its mode, each reference's with its own choice
    (the hybrid baseline's, the BM25 baseline's).

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
        self._components: EpsilonGreedy | None = None

    def slot(self, view: SlotView, components: EpsilonGreedy, shares: tuple[float, ...]) -> NDArray[np.float64]:
        """The mixture's distribution for ``view``, given its components (the learner's first) and
        each one's decision-level share (``shares`` sums to 1)."""
        return components.mixture(self.posterior(view, components, shares))

    def posterior(self, view: SlotView, components: EpsilonGreedy, shares: tuple[float, ...]) -> list[float]:
        """Each component's posterior weight ``λ_k`` at ``view`` (see the class docstring)."""
        previous = self._components
        paths = self._paths
        if view.slot == 0 or previous is None or len(paths) != len(shares):
            paths = [1.0] * len(shares)
        else:
            chosen, eligible = view.chosen, self._eligible
            drawn = (
                eligible.index(chosen[-1])
                if len(chosen) > len(self._chosen) and chosen[-1] in eligible
                else len(eligible)
            )
            # EpsilonGreedy.probability of each component, inlined (a call per component per slot)
            default = previous.floor if drawn in previous.explored else 0.0
            paths = [
                path * exceptions.get(drawn, default)
                for path, exceptions in zip(paths, previous.exceptions, strict=True)
            ]
        self._paths = paths
        weights = [share * path for share, path in zip(shares, paths, strict=True)]
        total = sum(weights)
        posterior = [w / total for w in weights] if total > 0.0 else list(shares)
        self._chosen, self._eligible, self._components = view.chosen, view.eligible, components
        return posterior
