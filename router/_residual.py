"""Learners that refine the hybrid similarity prior instead of starting from nothing.

The cost of an option (lower is better, cost = -credit) is the prior plus a learned residual::

    c(a) = c0(a) + r(a),   c0(candidate) = -(PRIOR_OFFSET + PRIOR_SCALE * hyb_z),   c0(stop) = 0

A fresh learner has ``r = 0``, so it ranks exactly as the hybrid baseline and, since
``PRIOR_OFFSET > PRIOR_SCALE * |hyb_z|`` for any realistic score, fills every slot: no cold-start
regret by construction. Learning is cost regression (the oracle of SquareCB-style contextual
bandits): ``r`` of the drawn option is fitted to ``-credit - c0``. What the credit module knows
without trying is learned too, at no exploration cost (:mod:`memabra.router._credit`):

* the stop option's credit at every slot where a candidate was drawn (0 once outcomes exist);
* each ``missing`` candidate (needed, left out) at the last slot it could have filled, with the
  credit of a candidate that helped.

Nothing here knows requests: whatever carries over from one request to another is in the
subclass's features (:meth:`_residuals`). The exploration over ``c`` is
:mod:`memabra.router._exploration` (top-M ε-greedy by default).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError, SnapshotError
from memabra._records import STOP_ID, CandidateKind, RewardWeights, RoutingContext, Selection
from memabra.router._base import Router, SlotView
from memabra.router._credit import SlotCredit
from memabra.router._exploration import (
    EXPLORATIONS,
    EpsilonGreedy,
    PriorMixture,
    exploration_floor,
    explore,
    explored_with,
    prior_share,
    top_options,
)
from memabra.router._features import FeatureTable
from memabra.router._howmany import CountModel
from memabra.router._sampling import apply_floor
from memabra.router._similarity import Similarity

__all__ = ["DEFAULT_EPSILON", "DEFAULT_TOP_M", "PRIOR_OFFSET", "PRIOR_SCALE", "ResidualRouter", "cost_range"]

# the optimism of the prior: above what an unused candidate costs (about 0.1-0.3), below what a
# helpful one earns (about 1), so one failure is enough to fall behind the stop option
PRIOR_OFFSET = 0.5
# a z-scored similarity spans a few units: the prior orders candidates without outweighing evidence
PRIOR_SCALE = 0.1
# the stop option's prior cost, appended to the open candidates'
_STOP_PRIOR = np.zeros(1)
# exploration defaults (measured in docs/router.md)
DEFAULT_EPSILON = 0.01
DEFAULT_TOP_M = 4


def cost_range(weights: RewardWeights) -> tuple[float, float]:
    """Bounds of ``-R`` for the composite reward with ``weights``."""
    lowest, highest = weights.total_range()
    return -highest, -lowest


class ResidualRouter(Router):
    """Base of the learners: the prior, exploration and the update loop (see the module
    docstring). Subclasses provide :meth:`_residuals` and :meth:`_fit`.

    exploration
        ``epsilon`` (top-M ε-greedy, the default) or ``greedy`` (no exploration: its logs cannot
        be evaluated offline).
    epsilon
        The most of each slot's mass spent exploring: each member of the explored set gets
        ``epsilon / (2 top_m + 1)``.
    top_m
        How many of the lowest-cost candidates are explored, and as many of the lowest prior cost
        (the hybrid order), besides the stop option.
    """

    learns = True
    explorations: tuple[str, ...] = EXPLORATIONS

    def __init__(
        self,
        *,
        exploration: str = "epsilon",
        epsilon: float = DEFAULT_EPSILON,
        top_m: int = DEFAULT_TOP_M,
        seed: int = 0,
        min_probability: float = 1e-5,
        recall_limit: int | None = 50,
        similarity: Similarity | None = None,
    ) -> None:
        super().__init__(seed=seed, min_probability=min_probability, recall_limit=recall_limit, similarity=similarity)
        self.exploration = exploration
        self.epsilon = epsilon
        self.top_m = top_m

    def _check_params(self) -> None:
        super()._check_params()
        if self.exploration not in self.explorations:
            raise RouterError(f"exploration must be one of {', '.join(self.explorations)}; got {self.exploration!r}")
        if (
            isinstance(self.epsilon, bool)
            or not isinstance(self.epsilon, (int, float))
            or not 0.0 <= self.epsilon <= 1.0
        ):
            raise RouterError(f"epsilon must lie in [0, 1], got {self.epsilon!r}")
        if isinstance(self.top_m, bool) or not isinstance(self.top_m, int) or self.top_m < 1:
            raise RouterError(f"top_m must be a positive integer, got {self.top_m!r}")

    def _init_model(self) -> None:
        self._learned = 0
        self._mixture = PriorMixture()
        # the prior cost of every row of the last table seen: each slot reads its open rows' share
        self._prior_table: FeatureTable | None = None
        self._prior_rows: NDArray[np.float64] = np.zeros(0)
        self._count = CountModel()

    # ------------------------------------------------------------------------- the model
    @abstractmethod
    def _residuals(self, view: SlotView) -> NDArray[np.float64]:
        """Learned residual cost of each option of ``view`` (candidates, then stop)."""

    @abstractmethod
    def _fit(self, view: SlotView, option: int, target: float) -> None:
        """Move the residual of ``option`` (an index among ``view``'s options) towards ``target``."""

    def _begin_update(self) -> None:
        """Called before a selection's fits (subclasses drop caches that read the weights)."""

    # ------------------------------------------------------------------------- deciding
    def _table_prior(self, table: FeatureTable) -> NDArray[np.float64]:
        """``c0`` of every row of ``table``."""
        if self._prior_table is not table:
            # elementwise, so a row's prior is the same number whichever slot reads it
            self._prior_rows = -(PRIOR_OFFSET + PRIOR_SCALE * table.column("hyb_z"))
            self._prior_table = table
        return self._prior_rows

    def _open_prior(self, view: SlotView) -> NDArray[np.float64]:
        """``c0`` of the open candidates."""
        return self._table_prior(view.table)[view.rows]

    def _prior_cost(self, view: SlotView) -> NDArray[np.float64]:
        """``c0`` of the open candidates followed by the stop option's 0."""
        return np.concatenate((self._open_prior(view), _STOP_PRIOR))

    def _costs(self, view: SlotView) -> NDArray[np.float64]:
        return self._prior_and_costs(view)[1]

    def _candidate_costs(self, view: SlotView) -> NDArray[np.float64]:
        """The open candidates' costs without the stop option's (subclasses may skip scoring it)."""
        return self._costs(view)[:-1]

    def _count_residuals(self, view: SlotView) -> NDArray[np.float64]:
        """``r_base`` of ``view``'s options (:mod:`memabra.router._howmany`)."""
        return self._count.predict(view)

    def _residual(self, view: SlotView) -> NDArray[np.float64]:
        """``r`` of ``view``'s options: the subclass's residuals plus the count model's."""
        return np.asarray(self._residuals(view), dtype=np.float64) + self._count_residuals(view)

    def _prior_and_costs(self, view: SlotView) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        residual = self._residual(view)
        if residual.shape != (view.n_options,):
            raise RouterError(f"{type(self).__name__} produced unusable scores for slot {view.slot}: {residual}")
        prior = self._prior_cost(view)
        costs = prior + residual
        # one reduction instead of isfinite + all: a NaN or an infinity anywhere makes the sum
        # non-finite (the prior is finite, so any such cost comes from the residual)
        if not math.isfinite(float(costs.sum())):
            raise RouterError(f"{type(self).__name__} produced unusable scores for slot {view.slot}: {residual}")
        return prior, costs

    def _distribution(self, view: SlotView) -> NDArray[np.float64]:
        return np.array(self._slot_values(view))

    def _slot_values(self, view: SlotView) -> tuple[float, ...]:
        # the mixture is a distribution by construction (its costs were checked finite): the base
        # class's check of a subclass's arbitrary output would only repeat it, at every slot
        minimum = float(self.min_probability)
        mixed = self._explored_mixture(view)
        if isinstance(mixed, np.ndarray):
            return tuple(apply_floor(mixed, minimum).tolist())
        components, posterior = mixed
        return components.mixture_values(posterior, minimum)

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        mixed = self._explored_mixture(view)
        if isinstance(mixed, np.ndarray):
            return mixed
        components, posterior = mixed
        return components.mixture(posterior)

    def _explored_mixture(self, view: SlotView) -> NDArray[np.float64] | tuple[EpsilonGreedy, list[float]]:
        """The slot's exploration components with their posterior weights, or without exploration
        the greedy distribution itself."""
        epsilon = float(self.epsilon)
        top_m = int(self.top_m)
        if self.exploration == "greedy" or epsilon <= 0.0:
            prior, costs = self._prior_and_costs(view)
            return explore(costs, self.exploration, epsilon, top_m, prior=prior)
        costs, prior_top, modes = self._costs_and_references(view, top_m)
        # each reference component explores the same set: only where its mode's mass goes differs
        components = EpsilonGreedy(
            costs.size,
            explored_with(costs, top_m, prior_top),
            exploration_floor(costs.size, top_m, epsilon),
            int(costs.argmin()),
            modes,
        )
        # the references split the prior share: the learner's own share, and so its regret, is
        # what it was with one reference (two full shares failed tests/router/test_simulator.py)
        share = prior_share(self._learned)
        shares = (1.0 - share,) + (share / len(modes),) * len(modes)
        return components, self._mixture.posterior(view, components, shares)

    def _costs_and_references(
        self, view: SlotView, top_m: int
    ) -> tuple[NDArray[np.float64], list[int], tuple[int, int]]:
        """The slot's costs, the ``top_m`` open candidates of lowest prior cost (as options) and
        each reference baseline's choice (:meth:`_reference_modes`)."""
        prior, costs = self._prior_and_costs(view)
        return costs, top_options(prior[:-1], min(top_m, costs.size - 1)), self._reference_modes(view, prior)

    def _reference_modes(self, view: SlotView, prior: NDArray[np.float64]) -> tuple[int, int]:
        """Each reference baseline's choice among ``view``'s options: hybrid top-k's (the lowest
        prior cost; it never stops) and BM25 top-k's (the highest ``lex``, first of equals, as
        :class:`~memabra.router.LexicalRouter` picks)."""
        if len(view.eligible) == 0:
            return (0, 0)
        lexical = view.table.column("lex")[view.rows]
        return int(prior[:-1].argmin()), int(lexical.argmax())

    def _scores(self, context: RoutingContext, table: FeatureTable) -> NDArray[np.float64]:
        """The logged score: each candidate's cost at the first slot of its kind, in the prior's units.

        With every candidate of the kind open and nothing chosen yet, ``c = c0 + r`` gives
        ``score = -(c + PRIOR_OFFSET) / PRIOR_SCALE = hyb_z - r / PRIOR_SCALE``: the hybrid prior
        plus what the learner added (0 for a fresh learner). The slot draws' probabilities stay
        the decision; the score only ranks and explains it (the log, the admin's decision view).
        """
        scores = table.column("hyb_z").copy()
        budget = context.budget
        rows_of: dict[CandidateKind, list[int]] = {}
        for i, candidate in enumerate(table.candidates):
            rows_of.setdefault(candidate.kind, []).append(i)
        slot = 0
        for kind in context.kinds:
            rows = rows_of.get(kind)
            if rows:
                view = SlotView(context, table, kind, slot, 0, tuple(rows), (), budget.max_tokens)
                scores[rows] = -(self._candidate_costs(view) + PRIOR_OFFSET) / PRIOR_SCALE
            slot += budget.slots_for(kind)
        return scores

    # ------------------------------------------------------------------------- learning
    def _update(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        low, high = cost_range(RewardWeights())
        self._begin_update()
        # (view, option) of the last slot each missing candidate was open in
        last_open: dict[str, tuple[SlotView, int]] = {}
        for (view, draw, option_of), credit in zip(self._replay(selection), credits, strict=True):
            stop = len(view.eligible)
            chosen = stop if draw.chosen_id == STOP_ID else option_of[draw.candidate_ids.index(draw.chosen_id)]
            prior = self._prior_cost(view)
            cost = float(np.clip(-credit.credit, low, high))
            self._backfit(view, chosen, cost - float(prior[chosen]))
            if credit.stop_credit is not None and chosen != stop:
                stop_cost = float(np.clip(-credit.stop_credit, low, high))
                self._backfit(view, stop, stop_cost - float(prior[stop]))
            if missing:
                ids = view.table.candidates
                for j, row in enumerate(view.eligible):
                    if ids[row].id in missing:
                        last_open[ids[row].id] = (view, j)
        if missing_credit is not None:
            cost = float(np.clip(-missing_credit, low, high))
            for view, option in last_open.values():
                self._backfit(view, option, cost - float(self._prior_cost(view)[option]))
        self._learned += 1

    def _backfit(self, view: SlotView, option: int, target: float) -> None:
        """The count model's step on the whole target, then the subclass's on what it leaves."""
        self._fit(view, option, self._count.fit(view, option, target))

    def _extra_state(self) -> dict[str, Any]:
        return {"learned": self._learned, "count_model": self._count.state()}

    def _restore_extra_state(self, state: dict[str, Any]) -> None:
        learned = state.get("learned")
        if isinstance(learned, bool) or not isinstance(learned, int) or learned < 0:
            raise SnapshotError(f"{self.name} snapshot state has a bad 'learned' count: {learned!r}")
        self._learned = learned
        self._count.restore(state.get("count_model"))
