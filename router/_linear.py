"""The numpy learner: a linear residual model over hashed features that transfer between requests.

It shares the prior, exploration and update loop of :mod:`memabra.router._residual`. The residual
of a candidate is linear in (:mod:`memabra.router._hashed_features`):

* its identity (a learned bias: a tool nobody needs sinks for every request);
* query token × its identity (which words call for which tool, beyond their text);
* query token × its text tokens (a learned similarity: what it learns about one tool's words
  carries to tools and requests never seen);
* each candidate already chosen in this selection × its identity (co-needed tools: file moves need
  ``cd``, posts need the authentication tool);
* its usage history and token cost (numeric features; its similarity is in the prior);
* the user × its identity and its text tokens (what one user prefers, beyond what all need);
* the slot's position × its similarity rank among the open candidates (a second memory is worth
  less than a first: this, against the stop option, is how the router learns to inject fewer).

The stop option has features of its own, so *how many* is learned from the request: the slot's kind
and position (picks so far), query token × that position, the share of the token budget left and the
best open candidate's similarity.

Weights follow a normalised AdaGrad step on the squared error: per-feature step sizes
``1 / sqrt(sum of squared gradients)``, scaled so one example moves the prediction the fraction
``learning_rate`` of the way to its target (an example with many active features does not
overshoot).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError
from memabra._records import Budget, CandidateKind, RoutingContext, SlotDraw
from memabra.router._base import Router, SlotView
from memabra.router._features import FeatureTable
from memabra.router._linear_design import (
    BITS,
    EMPTY_INDEX,
    MAX_RANK,
    Design,
    Slot,
    decode_weights,
    encode_weights,
    rank_features,
    rank_terms,
    rows_chosen_before,
    slot_key,
    stop_numbers,
)
from memabra.router._residual import DEFAULT_EPSILON, DEFAULT_TOP_M, PRIOR_OFFSET, PRIOR_SCALE, ResidualRouter
from memabra.router._similarity import Similarity

__all__ = ["LinearRouter"]


class LinearRouter(ResidualRouter):
    """Linear residual learner on hashed features (see the module docstring).

    learning_rate
        Share of the error one example removes (in ``(0, 1]``).
    exploration, epsilon, top_m
        As for every learner (:class:`~memabra.router.ResidualRouter`).
    """

    name = "linear"

    # Deliberate repeat (ResidualRouter, LinearRouter, VWRouter): each learner spells out its whole
    # signature, sklearn-style, so help() and parameter introspection show every knob and default.
    def __init__(
        self,
        *,
        learning_rate: float = 0.5,
        exploration: str = "epsilon",
        epsilon: float = DEFAULT_EPSILON,
        top_m: int = DEFAULT_TOP_M,
        seed: int = 0,
        min_probability: float = 1e-5,
        recall_limit: int | None = 50,
        similarity: Similarity | None = None,
    ) -> None:
        super().__init__(
            exploration=exploration,
            epsilon=epsilon,
            top_m=top_m,
            seed=seed,
            min_probability=min_probability,
            recall_limit=recall_limit,
            similarity=similarity,
        )
        self.learning_rate = learning_rate

    def _check_params(self) -> None:
        super()._check_params()
        rate = self.learning_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
            raise RouterError(f"learning_rate must lie in (0, 1], got {rate!r}")

    def _init_model(self) -> None:
        super()._init_model()
        self._weights = np.zeros(1 << BITS)
        self._squared_gradients = np.zeros(1 << BITS)
        self._design: Design | None = None
        # read the weights, so dropped by every fit (_drop_scores), and by a new design
        self._drop_scores()
        self._slot: Slot | None = None
        # each kind's first-slot costs in the decision being drawn (its offer scores), by kind
        self._first_costs: dict[CandidateKind, tuple[FeatureTable, int, NDArray[np.float64]]] | None = None

    # ------------------------------------------------------------------------- features
    def _design_of(self, view: SlotView) -> Design:
        return self._design_for(view.table, view.context)

    def _design_for(self, table: FeatureTable, context: RoutingContext) -> Design:
        design = self._design
        if (
            design is None
            or design.table is not table
            or (design.query, design.user) != (context.query, context.user_id)
        ):
            design = self._design = Design(table, context.query, context.user_id, design)
            self._drop_scores()
        return design

    def _slot_of(self, view: SlotView) -> Slot:
        """The cached parts of ``view``'s rows (the cache holds the view, so its id is not reused)."""
        slot = self._slot
        if slot is not None and slot.view is view:
            return slot
        design = self._design_of(view)
        eligible = view.eligible
        # the kr feature of each open candidate: slot position x its open similarity rank; ranks
        # from MAX_RANK on share one feature, so only the first MAX_RANK open rows are looked for.
        # A slot's open rows are of its kind (a foreign log's may not be: then all rows are walked)
        order, of_kind = design.kind_order(view.kind)
        if not of_kind.issuperset(eligible):
            order = design.order
        top_rows: list[int] = []
        for row in order:
            if row in eligible:
                top_rows.append(row)
                if len(top_rows) == MAX_RANK:
                    break
        # the best open similarity is the first-ranked open row's (the maximum itself, not a sum)
        best = float(design.hybrid[top_rows[0]]) if top_rows else 0.0
        slot = self._slot = Slot(view, design, slot_key(view.kind, view.position), top_rows, best)
        return slot

    def _stop_row(self, view: SlotView) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        slot = self._slot_of(view)
        if slot.stop_index is not None:
            return slot.stop_index, slot.stop_values
        index = slot.design.stop_index(slot.key, view.context)
        values = np.ones(index.size)
        values[-3:] = stop_numbers(view, slot.best)
        slot.stop_index, slot.stop_values = index, values
        return index, values

    def _slot_weights(self, view: SlotView, slot: Slot) -> tuple[list[float], float, float, float, float]:
        """The rank feature's weights of the slot's kind and position, by open rank, and the stop
        row's: its constant features' summed, then its three numbers' (:func:`stop_numbers`); one
        gather per slot kind and position until the next fit."""
        found = self._weights_by_key.get(slot.key)
        if found is None:
            gathered = self._weights[
                np.concatenate((rank_features(slot.key), slot.design.stop_index(slot.key, view.context)))
            ].tolist()
            rank, stop = gathered[: MAX_RANK + 1], gathered[MAX_RANK + 1 :]
            found = self._weights_by_key[slot.key] = (rank, sum(stop[:-3]), stop[-3], stop[-2], stop[-1])
        return found

    def _candidate_row(self, view: SlotView, option: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        design = self._design_of(view)
        row = view.eligible[option]
        pairs = np.concatenate([design.pool.pair_index(c)[[row]] for c in view.chosen]) if view.chosen else EMPTY_INDEX
        slot = self._slot_of(view)
        rank = rank_features(slot.key)[[slot.top.index(option) if option in slot.top else MAX_RANK]]
        return (
            np.concatenate([design.index[row], pairs, rank]),
            np.concatenate([design.values[row], np.ones(pairs.size + 1)]),
        )

    # ------------------------------------------------------------------------- the decision
    def _fill_slots(
        self, context: RoutingContext, table: FeatureTable, budget: Budget, rng: np.random.Generator
    ) -> list[SlotDraw]:
        self._first_costs = {}
        try:
            return super()._fill_slots(context, table, budget, rng)
        except BaseException:
            self._first_costs = None
            raise

    def _prior_and_costs(self, view: SlotView) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return self._prior_cost(view), self._slot_costs(view)

    def _costs_and_references(
        self, view: SlotView, top_m: int
    ) -> tuple[NDArray[np.float64], list[int], tuple[int, int]]:
        """As :class:`ResidualRouter` computes them, the prior's top ``top_m`` and hybrid's pick
        (first of equals, as the hybrid baseline picks) read off the slot's open rows in similarity
        order instead of partitions of the prior."""
        slot = self._slot_of(view)
        if top_m > MAX_RANK or not slot.top:
            return super()._costs_and_references(view, top_m)
        costs = self._slot_costs(view)
        lexical = view.table.column("lex")[view.rows]
        return costs, slot.top[:top_m], (slot.top[0], int(lexical.argmax()))

    def _slot_costs(self, view: SlotView) -> NDArray[np.float64]:
        """The slot's costs, ``prior + linear residual + count residual`` as :class:`ResidualRouter`
        sums them, with the terms shared by every row summed over the table first: per slot a few
        whole-array steps instead of one per term."""
        slot = self._slot_of(view)
        lead, gap_weight, shift, stop = self._count.slot_terms(view, slot.best if slot.top else None)
        lifted = self._lifted.get(lead)
        if lifted is None:
            # the prior and the count model's gap term of every row, for this lead (a kind's slots
            # mostly share one), until the next fit
            lifted = self._lifted[lead] = (
                self._table_prior(view.table) + self._count.gaps(view.table, lead) * gap_weight
            )
        row_costs = self._chosen_scores(slot.design, view.chosen) + lifted
        costs = np.empty(view.n_options)
        head = costs[:-1]
        row_costs.take(view.rows, out=head)
        rank_weights, constant_weight, share_weight, best_weight, open_weight = self._slot_weights(view, slot)
        head += rank_weights[MAX_RANK] + shift
        # item by item: for at most MAX_RANK rows, cheaper than index arrays built from the lists
        for option, row, weight in zip(slot.top, slot.top_rows, rank_weights, strict=False):
            costs[option] = row_costs[row] + (weight + shift)
        # the stop row times the weights, as three products (:meth:`_stop_row` holds the row)
        share, best, open_rows = stop_numbers(view, slot.best)
        costs[-1] = (constant_weight + share_weight * share + best_weight * best + open_weight * open_rows) + stop
        # one reduction instead of isfinite + all: a NaN or an infinity anywhere makes the sum
        # non-finite (the prior is finite, so any such cost comes from the learner)
        if not math.isfinite(float(costs.sum())):
            raise RouterError(f"{type(self).__name__} produced unusable scores for slot {view.slot}: {costs}")
        first = self._first_costs
        if first is not None and view.position == 0:
            # the offer scores are these costs where every candidate of the kind was open: kept so
            # that _decision_scores need not score the kind's first slot a second time
            first[view.kind] = (view.table, len(view.eligible), costs[:-1])
        return costs

    # ------------------------------------------------------------------------- the model
    def _chosen_scores(self, design: Design, chosen: tuple[int, ...]) -> NDArray[np.float64]:
        """Every row's score without its slot's rank feature: the slot-independent features plus
        what the candidates already chosen add (built one pick at a time)."""
        cached = self._scores_by_chosen.get(chosen)
        if cached is not None:
            return cached
        scores: NDArray[np.float64]
        if not chosen:
            scores = np.einsum("ij,ij->i", self._weights[design.index], design.values)
        else:
            self._chosen_scores(design, chosen[:-1])  # fills _pair_sums[chosen[:-1]]
            # the pair terms summed pick by pick and added to the base score last, the order the
            # scores have always been summed in
            pairs = self._weights[design.pool.pair_index(chosen[-1])]
            if len(chosen) > 1:
                pairs += self._pair_sums[chosen[:-1]]
            self._pair_sums[chosen] = pairs
            scores = self._scores_by_chosen[()] + pairs
        self._scores_by_chosen[chosen] = scores
        return scores

    def _open_residuals(self, view: SlotView, out: NDArray[np.float64]) -> None:
        """Write the open candidates' residuals (the stop option's left out) into ``out``."""
        slot = self._slot_of(view)
        scores = self._chosen_scores(slot.design, view.chosen)
        scores.take(view.rows, out=out)
        # the rank feature's weight: one for every open row but the first MAX_RANK by similarity
        rank_weights = self._slot_weights(view, slot)[0]
        out += rank_weights[MAX_RANK]
        # item by item: for at most MAX_RANK rows, cheaper than index arrays built from the lists
        for option, row, weight in zip(slot.top, slot.top_rows, rank_weights, strict=False):
            out[option] = scores[row] + weight

    def _residuals(self, view: SlotView) -> NDArray[np.float64]:
        """The linear residual of each option, term by term: what :meth:`_prior_and_costs` sums
        over the whole table first (tests hold the two to the same numbers)."""
        out = np.empty(view.n_options)
        self._open_residuals(view, out[:-1])
        index, values = self._stop_row(view)
        out[-1] = float(self._weights[index] @ values)
        return out

    def _scores(self, context: RoutingContext, table: FeatureTable) -> NDArray[np.float64]:
        """Each candidate's score at the first slot of its kind with nothing chosen before it."""
        return self._first_slot_scores(context, table, {}, {})

    def _decision_scores(
        self, context: RoutingContext, table: FeatureTable, draws: Sequence[SlotDraw]
    ) -> NDArray[np.float64]:
        """Each candidate's score at the first slot of its kind *in this decision*: the picks of the
        kinds filled before it add their pair terms there, as they did to the draw (without them a
        skill's logged score contradicted the skill slot's own distribution). A kind whose first
        slot had all its candidates open reuses that slot's costs."""
        first, self._first_costs = self._first_costs or {}, None
        design = self._design_for(table, context)
        known: dict[CandidateKind, NDArray[np.float64]] = {}
        for kind in context.kinds:
            slot = first.get(kind)
            if slot is not None and slot[0] is table and slot[1] == len(design.kind_order(kind)[0]):
                known[kind] = slot[2]
        if all(kind in known or not design.kind_order(kind)[0] for kind in context.kinds):
            # every kind's first slot had all its candidates open (the usual decision): nothing to score
            scores = table.column("hyb_z").copy()
            for kind, costs in known.items():
                scores[sorted(design.kind_order(kind)[0])] = -(costs + PRIOR_OFFSET) / PRIOR_SCALE
            return scores
        return self._first_slot_scores(context, table, rows_chosen_before(context, table, draws), known)

    def _first_slot_scores(
        self,
        context: RoutingContext,
        table: FeatureTable,
        before: Mapping[CandidateKind, tuple[int, ...]],
        known: Mapping[CandidateKind, NDArray[np.float64]],
    ) -> NDArray[np.float64]:
        """:meth:`ResidualRouter._scores` (each candidate's cost at the first slot of its kind, in the
        prior's units, every candidate of the kind open) for every kind in one pass, with ``before``
        the rows chosen ahead of each kind's first slot (none where absent) and ``known`` the costs
        of the kinds already scored (in table order)."""
        design = self._design_for(table, context)
        hybrid = table.column("hyb_z")
        residuals = np.zeros(hybrid.size)
        counts = np.zeros(hybrid.size)
        scored = np.zeros(hybrid.size, dtype=bool)
        reused: list[tuple[list[int], NDArray[np.float64]]] = []
        for kind in context.kinds:
            order = design.kind_order(kind)[0]
            if not order:
                continue
            rows = sorted(order)
            costs_of_kind = known.get(kind)
            if costs_of_kind is not None:
                reused.append((rows, costs_of_kind))
                continue
            base = self._chosen_scores(design, before.get(kind, ()))
            view = SlotView(context, table, kind, 0, 0, tuple(rows), (), context.budget.max_tokens)
            counts[rows] = self._count.predict(view, float(hybrid[order[0]]))[:-1]
            rank_weights = self._weights[rank_features(slot_key(kind, 0))].tolist()
            residuals[rows] = base[rows] + rank_terms(rank_weights, order, rows)
            scored[rows] = True
        costs = (self._table_prior(table) + residuals) + counts
        scores: NDArray[np.float64] = np.where(scored, -(costs + PRIOR_OFFSET) / PRIOR_SCALE, hybrid)
        for rows, costs_of_kind in reused:
            scores[rows] = -(costs_of_kind + PRIOR_OFFSET) / PRIOR_SCALE
        return scores

    def _drop_scores(self) -> None:
        self._scores_by_chosen: dict[tuple[int, ...], NDArray[np.float64]] = {}
        self._pair_sums: dict[tuple[int, ...], NDArray[np.float64]] = {}
        self._lifted: dict[float, NDArray[np.float64]] = {}
        self._weights_by_key: dict[str, tuple[list[float], float, float, float, float]] = {}

    def _begin_update(self) -> None:
        self._drop_scores()

    def _fit(self, view: SlotView, option: int, target: float) -> None:
        if option < len(view.eligible):
            index, values = self._candidate_row(view, option)
        else:
            index, values = self._stop_row(view)
        self._drop_scores()
        keep = values != 0.0
        index, inverse = np.unique(index[keep], return_inverse=True)
        if index.size == 0:
            return
        value = np.bincount(inverse, weights=values[keep], minlength=index.size)
        error = float(self._weights[index] @ value) - target
        self._squared_gradients[index] += (error * value) ** 2
        direction = value / np.sqrt(self._squared_gradients[index] + 1e-12)
        reach = float(direction @ value)
        if reach <= 0.0:
            return
        self._weights[index] -= float(self.learning_rate) * error * direction / reach

    # ------------------------------------------------------------------------- snapshots
    def _model_bytes(self) -> bytes:
        return encode_weights(self._weights, self._squared_gradients)

    def _copy_model_from(self, source: Router) -> None:
        if not isinstance(source, LinearRouter):
            raise TypeError(f"a linear router copies a linear router's model, not {type(source).__name__}'s")
        self._weights = source._weights.copy()
        self._squared_gradients = source._squared_gradients.copy()
        self._design = None
        self._drop_scores()

    def _load_model(self, payload: bytes) -> None:
        index, weights, squared_gradients = decode_weights(payload, self._weights.size)
        self._weights[index] = weights
        self._squared_gradients[index] = squared_gradients
        self._design = None
        self._drop_scores()
