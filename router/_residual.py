"""Learners that refine the hybrid similarity prior instead of starting from nothing.

The cost of an option (VW's convention: lower is better, cost = -credit) is the prior plus a learned
residual::

    c(a) = c0(a) + r(a),   c0(candidate) = -(prior_offset + prior_scale * hyb_z),   c0(stop) = 0

A fresh learner has ``r = 0``, so it ranks exactly as the hybrid baseline and, with
``prior_offset > prior_scale * |hyb_z|`` for any realistic score, never stops early: no cold-start
regret by construction. Learning fits ``r`` to ``-credit - c0`` of the option that was drawn, weighted
by the inverse of its logged probability; the stop option's credit, known without trying it when
outcomes exist (:mod:`memabra.router._credit`), is also learned at every slot (``anchor_stop``).

Two margins keep noisy early evidence from overriding the prior (a conservative, baseline-anchored
improvement in the spirit of safe policy improvement): to reorder candidates, learned evidence must
beat the prior's own pick (the best open hybrid score) by ``prior_margin`` -- a head start the pick
keeps only while its own learned cost still beats stopping; to stop, no open candidate may look
better than stopping by ``stop_margin`` or more.

How many to fill is decided by evidence that the request is already served. After the first pick of
a kind, the router may stop only once an earlier pick of that kind is *known good*: it helped this
same request before (``helped_here``, below), or its cost, when it was chosen, was below
``-(prior_offset + evidence_margin)`` with a negative residual, i.e. the learner's own evidence (not
the prior's score alone) rated it better than the prior rates any untried candidate by
``evidence_margin``. Until then later slots are filled as the prior would fill them (a fresh router
injects exactly the hybrid top-k, however far its leader stands out). Once a pick is known good the
prior's optimism is withdrawn for the rest of the kind (``prior_offset`` is added back to every open
candidate), so a further candidate is injected only when its own learned value beats stopping. This
is what lets the router inject one memory for a request it has learned, without stopping early on
requests it knows nothing about: on the memory bench file, stopping on the learner's generalised
confidence alone (no ``evidence_margin`` rule) lost first-pass hits, and a margin of 0.6 left the
learner unable to reach it within five passes.

Recurring requests. The router remembers, per request (user and query,
:mod:`memabra.router._request_memory`), which candidates it injected with a local outcome and which
of them helped; the counts are features (``failed_here``, ``helped_here``) and three rules use them:

* a candidate that failed this request and never helped it gets no optimism (``c0`` without
  ``prior_offset``): the prior is optimistic about untried candidates, and for this request it has
  been tried;
* the prior's pick, which gets the ``prior_margin`` head start, is the best open candidate that
  helped this request, else the best that did not fail it, else the best;
* a pick that helped this request is known good, and learning skips it: picked because the memory
  knew it, it teaches the learner nothing about other requests, and learning it again and again made
  the generic features (the leader's rank, a memory's usage counts) take the credit, so that requests
  never seen were served one memory too early.

Measured on the memory bench file (3 passes, seeds 0-2): without the memory the one question hybrid's
top 5 misses (its memory at rank 8) stayed missed, because later slots follow the hybrid order until
a pick is known good; with it the second pass tries ranks 6-10 for that question, the last pass hits
all 30 questions, and injects 20% (VW) or 20-23% (numpy) of the hybrid top-5's tokens (VW: 31-37%
without it). Requests never seen are served as hybrid serves them (the VW router's unseen half
equals hybrid's on every bench file for seeds 0-2, and on the memory file over 6 passes too; before
the third rule it lost 1-3 of 15 memory questions at 3 passes).

Exploration over the resulting costs (``K`` options, best ``a*``):

* ``epsilon``: ``(1 - epsilon)`` on ``a*``, ``epsilon / K`` on every option;
* ``squarecb``: ``p(a) = 1 / (K + gamma_t (c(a) - c(a*)))`` for ``a != a*``, the rest on ``a*``, with
  ``gamma_t = gamma_scale * (t + 1) ** gamma_exponent`` after ``t`` learned selections;
* ``softmax``: ``p(a) ∝ exp(-softmax_lambda * c(a))``;
* ``greedy``: all mass on ``a*``.

A slot whose credit is its own outcome (a memory that was used, or injected and unused) is direct
evidence about that option; a slot credited with the slate's reward shares it with every other pick.
Direct evidence is learned with ``local_weight`` times the importance (8 by default): at 4 the
memory bench file's third pass still injected 68-80% of the hybrid top-5's tokens, at 8 it injected
31-37% (seeds 0-2); at 16 the unseen half lost hits. The runtime's slate-level credit is unaffected.

Defaults, measured on the development files (``memabra bench``, 5 passes) and the simulator:
``greedy`` with a ``1e-5`` probability floor. Learning needs little exploration here because a wrong
pick's cost rises after its failure until the next candidate overtakes it, and the optimistic prior
(``prior_offset`` above what most candidates earn) makes untried candidates look better than tried,
useless ones. Every explored draw costs a hit on these files: ``epsilon=0.01`` lost 2-3 first-pass
hits per tool file, SquareCB (``gamma_scale=1000``) 2 on the 30-tool registry. ``prior_margin=0.2``
kept every first pass equal to the hybrid baseline's (0.05 lost a hit on the memory file); with the
weighted direct evidence the VW router needs 0.4 (0.2 and 0.3 lost a first-pass hit on the 30-tool
registry, though 0.2 did better in the demo: +0.709 against +0.645 over 500 episodes, because the
users' drift is relearned sooner); ``unused_penalty=0.3`` (a router parameter,
:mod:`memabra.router._credit`) is what makes injecting an unused memory cost more than stopping.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError, SnapshotError
from memabra._records import COMPONENT_RANGES, STOP_ID, RewardWeights, RoutingContext, Selection
from memabra.router._base import Router, SlotView
from memabra.router._credit import SlotCredit
from memabra.router._features import CandidateStats, FeatureTable
from memabra.router._request_memory import RequestMemory
from memabra.router._similarity import Similarity

__all__ = ["OFFSET_EXPLORATIONS", "ResidualRouter", "cost_range"]

OFFSET_EXPLORATIONS = ("epsilon", "squarecb", "softmax", "greedy")


def cost_range(weights: RewardWeights) -> tuple[float, float]:
    """Bounds of ``-R`` for the composite reward with ``weights`` (from the components' ranges)."""
    lo = {k: v[0] for k, v in COMPONENT_RANGES.items()}
    hi = {k: v[1] for k, v in COMPONENT_RANGES.items()}
    best = weights.ws * hi["s"] + weights.wr * hi["hm"] + weights.wu * hi["u"]
    worst = (
        weights.ws * lo["s"]
        + weights.wr * lo["hm"]
        - weights.we * hi["e"]
        - weights.wc * hi["c"]
        - weights.wl * hi["l"]
        - weights.wx * hi["x"]
    )
    return -best, -worst


class ResidualRouter(Router):
    """Base of the learners: prior offset, margins, exploration and the update loop (see the module
    docstring). Subclasses provide :meth:`_residuals` and :meth:`_fit`."""

    learns = True
    explorations: tuple[str, ...] = OFFSET_EXPLORATIONS

    def __init__(
        self,
        *,
        exploration: str = "greedy",
        epsilon: float = 0.01,
        gamma_scale: float = 1000.0,
        gamma_exponent: float = 0.5,
        softmax_lambda: float = 10.0,
        prior: bool = True,
        prior_offset: float = 0.5,
        prior_scale: float = 0.1,
        prior_margin: float = 0.2,
        stop_margin: float = 0.0,
        anchor_stop: bool = True,
        evidence_margin: float = 0.4,
        local_weight: float = 8.0,
        seed: int = 0,
        min_probability: float = 1e-5,
        recall_limit: int | None = 50,
        similarity: Similarity | None = None,
        unused_penalty: float = 0.3,
        max_pending: int = 100_000,
        request_memory: int = 10_000,
    ) -> None:
        super().__init__(
            seed=seed,
            min_probability=min_probability,
            recall_limit=recall_limit,
            similarity=similarity,
            unused_penalty=unused_penalty,
            max_pending=max_pending,
        )
        self.exploration = exploration
        self.epsilon = epsilon
        self.gamma_scale = gamma_scale
        self.gamma_exponent = gamma_exponent
        self.softmax_lambda = softmax_lambda
        self.prior = prior
        self.prior_offset = prior_offset
        self.prior_scale = prior_scale
        self.prior_margin = prior_margin
        self.stop_margin = stop_margin
        self.anchor_stop = anchor_stop
        self.evidence_margin = evidence_margin
        self.local_weight = local_weight
        self.request_memory = request_memory

    def _check_params(self) -> None:
        super()._check_params()
        if self.exploration not in self.explorations:
            raise RouterError(f"exploration must be one of {', '.join(self.explorations)}; got {self.exploration!r}")
        if not isinstance(self.epsilon, (int, float)) or not 0.0 <= self.epsilon <= 1.0:
            raise RouterError(f"epsilon must lie in [0, 1], got {self.epsilon!r}")
        if isinstance(self.request_memory, bool) or not isinstance(self.request_memory, int) or self.request_memory < 0:
            raise RouterError(f"request_memory must be a non-negative integer, got {self.request_memory!r}")
        if isinstance(self.local_weight, bool) or not isinstance(self.local_weight, (int, float)) or not self.local_weight >= 1.0:
            raise RouterError(f"local_weight must be a number of at least 1, got {self.local_weight!r}")
        for name in ("gamma_scale", "softmax_lambda"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0.0:
                raise RouterError(f"{name} must be positive, got {value!r}")
        if not isinstance(self.stop_margin, (int, float)) or not np.isfinite(self.stop_margin):
            raise RouterError(f"stop_margin must be a finite number, got {self.stop_margin!r}")
        for name in ("prior_offset", "prior_scale", "prior_margin", "evidence_margin", "gamma_exponent"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0.0:
                raise RouterError(f"{name} must be a finite non-negative number, got {value!r}")

    def _init_model(self) -> None:
        self._learned = 0
        self._decided: tuple[object, list[tuple[tuple[int, ...], NDArray[np.float64], NDArray[np.float64]]]] | None = None
        self._marks_cache: tuple[object, NDArray[np.bool_] | None, NDArray[np.bool_] | None] | None = None
        self._requests = RequestMemory(self.request_memory)

    def _request_stats(self, context: RoutingContext) -> Mapping[str, CandidateStats] | None:
        return self._requests.stats(context)

    def _remember_outcomes(self, selection: Selection, outcomes: Mapping[str, float] | None) -> None:
        self._requests.record(selection, outcomes)

    # ------------------------------------------------------------------------- the model
    @abstractmethod
    def _residuals(self, view: SlotView) -> NDArray[np.float64]:
        """Learned residual cost of each option of ``view`` (candidates, then stop)."""

    @abstractmethod
    def _fit(self, view: SlotView, option: int, target: float, probability: float) -> None:
        """Move the residual of ``option`` towards ``target``; the option was drawn with
        ``probability`` (learners weight the example by its inverse)."""

    # ------------------------------------------------------------------------- deciding
    def _request_marks(self, table: FeatureTable) -> tuple[NDArray[np.bool_] | None, NDArray[np.bool_] | None]:
        """Which rows of ``table`` failed this request and never helped it, and which helped it
        (``None`` where none did, the usual case)."""
        cache = self._marks_cache
        if cache is None or cache[0] is not table:
            helped = table.column("helped_here") > 0.0
            failed = (table.column("failed_here") > 0.0) & ~helped
            cache = self._marks_cache = (table, failed if failed.any() else None, helped if helped.any() else None)
        return cache[1], cache[2]

    def _remembered(self, view: SlotView) -> tuple[NDArray[np.bool_] | None, NDArray[np.bool_] | None]:
        """:meth:`_request_marks` of the open candidates (``None`` where none is marked)."""
        failed, helped = self._request_marks(view.table)
        if failed is None and helped is None:
            return None, None
        rows = list(view.eligible)
        failed_open = None if failed is None else failed[rows]
        helped_open = None if helped is None or not helped[rows].any() else helped[rows]
        return failed_open, helped_open

    def _prior_cost(self, view: SlotView, hybrid: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """``c0`` of the open candidates followed by the stop option's 0 (``hybrid``: their
        ``hyb_z``, when the caller has it). Candidates that failed this request get no optimism."""
        costs = np.zeros(view.n_options)
        if self.prior:
            if hybrid is None:
                hybrid = view.table.column("hyb_z")[list(view.eligible)]
            costs[:-1] = -(self.prior_offset + self.prior_scale * hybrid)
            failed, _ = self._remembered(view)
            if failed is not None:
                costs[:-1][failed] += self.prior_offset
        return costs

    def _checked_residuals(self, view: SlotView) -> NDArray[np.float64]:
        residual = np.asarray(self._residuals(view), dtype=np.float64)
        if residual.shape != (view.n_options,) or not np.isfinite(residual).all():
            raise RouterError(f"{type(self).__name__} produced unusable scores for slot {view.slot}: {residual}")
        return residual

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        if not self.prior:
            return self._explore(self._checked_residuals(view))
        hybrid = view.table.column("hyb_z")[list(view.eligible)]
        residual = self._checked_residuals(view)
        prior = self._prior_cost(view, hybrid)
        known_good = self._earlier_pick_known_good(view)
        self._remember_slot(view, prior, residual)
        costs = prior + residual
        failed, helped = self._remembered(view)
        if known_good:
            # the request is served: further candidates need evidence of their own
            costs[:-1] += self.prior_offset
            if failed is not None:
                costs[:-1][failed] -= self.prior_offset  # they never had the optimism
        # stopping after a pick is earned by believing that pick serves the request
        may_stop = known_good or view.position == 0
        return self._explore(self._with_margins(costs, hybrid, may_stop, failed, helped))

    def _remember_slot(self, view: SlotView, prior: NDArray[np.float64], residual: NDArray[np.float64]) -> None:
        # a selection's slots are decided (and replayed) in order over one table: later slots ask
        # what the learner thought of the earlier picks when it made them (neither array is
        # modified after this)
        memo = self._decided
        if memo is None or memo[0] is not view.table or view.slot == 0:
            memo = (view.table, [])
            self._decided = memo
        memo[1].append((view.eligible, prior, residual))

    def _earlier_pick_known_good(self, view: SlotView) -> bool:
        if view.position == 0:
            return False
        candidates = view.table.candidates
        same_kind = [i for i in view.chosen if candidates[i].kind is view.kind]
        _, helped = self._request_marks(view.table)
        if helped is not None and helped[same_kind].any():
            return True  # it served this very request before
        memo = self._decided
        if memo is None or memo[0] is not view.table:
            return False
        threshold = -(self.prior_offset + self.evidence_margin)
        picks = set(same_kind)
        for eligible, prior, residual in reversed(memo[1]):  # a pick's last slot is where it was picked
            for j, row in enumerate(eligible):
                if row in picks:
                    picks.discard(row)
                    # only the learner's own evidence makes a pick known good, never the prior's score alone
                    if residual[j] < 0.0 and prior[j] + residual[j] < threshold:
                        return True
            if not picks:
                break
        return False

    def _with_margins(
        self,
        costs: NDArray[np.float64],
        hybrid: NDArray[np.float64],
        may_stop: bool = True,
        failed: NDArray[np.bool_] | None = None,
        helped: NDArray[np.bool_] | None = None,
    ) -> NDArray[np.float64]:
        """``costs`` adjusted in place by the two margins (see the module docstring). The prior's
        pick is the best open candidate that helped this request (``helped``), else the best that
        did not fail it (``failed``), else the best."""
        stop_cost = float(costs[-1])
        stop = may_stop and float(costs[:-1].min()) >= stop_cost + self.stop_margin
        if helped is not None:
            prior_pick = int(np.where(helped, hybrid, -np.inf).argmax())
        elif failed is not None and not failed.all():
            prior_pick = int(np.where(failed, -np.inf, hybrid).argmax())
        else:
            prior_pick = int(hybrid.argmax())
        if costs[prior_pick] <= stop_cost or not may_stop:  # a head start while it beats stopping
            costs[prior_pick] -= self.prior_margin
        best_candidate = float(costs[:-1].min())
        # the stop decision is already made above; pin stop below or above every candidate
        costs[-1] = best_candidate - 1.0 if stop else max(stop_cost, best_candidate + 1.0)
        return costs

    def _explore(self, costs: NDArray[np.float64]) -> NDArray[np.float64]:
        k = costs.size
        best = int(costs.argmin())  # first of equals, as the baselines break ties
        if self.exploration == "greedy" or k == 1:
            out = np.zeros(k)
            out[best] = 1.0
            return out
        if self.exploration == "epsilon":
            out = np.full(k, self.epsilon / k)
            out[best] += 1.0 - self.epsilon
            return out
        if self.exploration == "softmax":
            weights = np.exp(-self.softmax_lambda * (costs - costs[best]))
            return weights / weights.sum()
        gamma = self.gamma_scale * (self._learned + 1) ** self.gamma_exponent
        out = 1.0 / (k + gamma * (costs - costs[best]))
        out[best] = 0.0
        out[best] = 1.0 - out.sum()
        return out

    # ------------------------------------------------------------------------- learning
    def _update(self, selection: Selection, credits: tuple[SlotCredit, ...]) -> None:
        low, high = cost_range(RewardWeights())
        for (view, draw, option_of), credit in zip(self._replay(selection), credits, strict=True):
            stop = len(view.eligible)
            chosen = stop if draw.chosen_id == STOP_ID else option_of[draw.candidate_ids.index(draw.chosen_id)]
            if chosen != stop and view.table.column("helped_here")[view.eligible[chosen]] > 0.0:
                # picked because it served this very request before: the request memory knows
                # this already, and learning it again would credit the generic features with it
                continue
            prior = self._prior_cost(view)
            cost = float(np.clip(-credit.credit, low, high))
            # direct evidence about the drawn option weighs more than its share of a slate's reward
            weight = self.local_weight if credit.local else 1.0
            self._fit(view, chosen, cost - float(prior[chosen]), draw.chosen_probability / weight)
            if self.anchor_stop and credit.stop_credit is not None and chosen != stop:
                stop_cost = float(np.clip(-credit.stop_credit, low, high))
                self._fit(view, stop, stop_cost - float(prior[stop]), 1.0 / self.local_weight)
        self._learned += 1

    def _extra_state(self) -> dict[str, Any]:
        return {"learned": self._learned, "requests": self._requests.state()}

    def _restore_extra_state(self, state: dict[str, Any]) -> None:
        learned = state.get("learned")
        if isinstance(learned, bool) or not isinstance(learned, int) or learned < 0:
            raise SnapshotError(f"{self.name} snapshot state has a bad 'learned' count: {learned!r}")
        self._learned = learned
        self._requests.restore(state.get("requests", []))  # absent from older snapshots
