"""SlotView and the slot-filling loop's parts: input checks, slot draws, teacher-forced replay, offer ranks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError
from memabra._records import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
)
from memabra.router._features import FeatureTable
from memabra.router._sampling import draw_index
from memabra.router._trusted_records import trusted_draw, trusted_offers

__all__ = ["SlotView", "fill_slots", "replay_slots", "scored_offers", "validate_choice"]


@dataclass(frozen=True, slots=True)
class SlotView:
    """Everything a slot decision may depend on.

    ``eligible`` indexes ``table`` (the offered candidates); the options of the slot are those
    candidates in that order followed by the stop option. ``chosen`` lists the candidates picked in
    earlier slots (any kind), in slot order; ``position`` counts earlier picks of this slot's kind.
    """

    context: RoutingContext
    table: FeatureTable
    kind: CandidateKind
    slot: int
    position: int
    eligible: tuple[int, ...]
    chosen: tuple[int, ...]
    remaining_tokens: int | None
    _rows: NDArray[np.intp] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def n_options(self) -> int:
        return len(self.eligible) + 1

    @property
    def rows(self) -> NDArray[np.intp]:
        """``eligible`` as a read-only index array, built once: a learner indexes several columns
        by it per slot, and converting the tuple costs more than the indexing itself."""
        rows = self._rows
        if rows is None:
            rows = np.array(self.eligible, dtype=np.intp)
            rows.flags.writeable = False
            object.__setattr__(self, "_rows", rows)
        return rows

    def option_ids(self) -> tuple[str, ...]:
        return tuple(self.table.candidates[i].id for i in self.eligible) + (STOP_ID,)


def _validate_candidates(candidates: Sequence[Candidate]) -> tuple[Candidate, ...]:
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise RouterError(f"candidates must be a sequence of Candidate, got {type(candidates).__name__}")
    if len(candidates) == 0:
        raise RouterError("candidates is empty: a router needs at least one candidate to choose from")
    seen: set[str] = set()
    dupes: set[str] = set()
    for item in candidates:
        if not isinstance(item, Candidate):
            raise RouterError(f"candidates must hold Candidate records, got {type(item).__name__}")
        if item.id in seen:
            dupes.add(item.id)
        seen.add(item.id)
    if dupes:
        raise RouterError(f"duplicate candidate ids: {sorted(dupes)}")
    return tuple(candidates)


def _validate_budget(budget: object) -> Budget:
    if not isinstance(budget, Budget):
        raise RouterError(f"budget must be a memabra.Budget, got {type(budget).__name__}")
    for kind, count in budget.slots.items():
        if count < 0:  # Budget validates this too; kept for subclasses that bypass it
            raise RouterError(f"budget.slots[{kind.value!r}] is negative ({count})")
    return budget


def validate_choice(
    context: RoutingContext,
    candidates: Sequence[Candidate],
    budget: Budget | None,
    features: FeatureTable | None,
) -> tuple[RoutingContext, Budget, tuple[Candidate, ...]]:
    """Check :meth:`Router.choose`'s arguments; the context (carrying the budget), budget and pool."""
    if not isinstance(context, RoutingContext):
        raise RouterError(f"context must be a RoutingContext, got {type(context).__name__}")
    budget = _validate_budget(context.budget if budget is None else budget)
    pool = _validate_candidates(candidates)
    if features is not None:
        if not isinstance(features, FeatureTable):
            raise RouterError(f"features must be a FeatureTable, got {type(features).__name__}")
        if tuple(c.id for c in features.candidates) != tuple(c.id for c in pool):
            raise RouterError("features do not line up with candidates (ids differ in content or order)")
    elif not pool:
        raise RouterError("candidates is empty")
    if context.budget != budget:
        context = replace(context, budget=budget)
    return context, budget, pool


def scored_offers(table: FeatureTable, scores: NDArray[np.float64]) -> tuple[ScoredCandidate, ...]:
    """The offered candidates with their (checked, finite) scores and per-kind ranks."""
    values = scores.tolist()
    negated = [-v for v in values]
    rows_of: dict[CandidateKind, list[int]] = {}
    for i, candidate in enumerate(table.candidates):
        rows_of.setdefault(candidate.kind, []).append(i)
    ranks = [0] * len(values)
    for rows in rows_of.values():
        # sorted is stable, as the argsort(kind="stable") it replaces: equal scores keep table
        # order; a few dozen Python floats sort faster than numpy sets the arrays up
        for rank, i in enumerate(sorted(rows, key=negated.__getitem__)):
            ranks[i] = rank
    # a FeatureTable's read-only rows hold its matrix's (finite) numbers; scores are checked above
    if all(type(row) is MappingProxyType for row in table.rows):
        return trusted_offers(table.candidates, table.rows, values, ranks)
    return tuple(
        ScoredCandidate(c, row, score, rank)
        for c, row, score, rank in zip(table.candidates, table.rows, values, ranks, strict=True)
    )


def fill_slots(
    context: RoutingContext,
    table: FeatureTable,
    budget: Budget,
    rng: np.random.Generator,
    distribution: Callable[[SlotView], tuple[float, ...]],
) -> list[SlotDraw]:
    """Draw slot after slot from ``table`` within ``budget``, each from ``distribution(view)``, a
    checked distribution over the view's options as floats (:meth:`Router._slot_values`)."""
    draws: list[SlotDraw] = []
    chosen: list[int] = []
    remaining = budget.max_tokens
    ids = [c.id for c in table.candidates]
    tokens = [c.tokens for c in table.candidates]
    for kind in context.kinds:
        # the open rows of the kind within the budget, their option ids and their largest cost, carried
        # from slot to slot (a pick leaves them; a smaller budget filters them only when the largest no
        # longer fits) instead of rebuilt from the table at every slot
        eligible = tuple(i for i, c in enumerate(table.candidates) if c.kind is kind)
        option_ids = (*[ids[i] for i in eligible], STOP_ID)
        largest = max((tokens[i] for i in eligible), default=0)
        for position in range(budget.slots_for(kind)):
            if remaining is not None and largest > remaining:
                eligible = tuple(i for i in eligible if tokens[i] <= remaining)
                option_ids = (*[ids[i] for i in eligible], STOP_ID)
                largest = max((tokens[i] for i in eligible), default=0)
            if not eligible:
                break
            view = SlotView(context, table, kind, len(draws), position, eligible, tuple(chosen), remaining)
            values = distribution(view)
            pick = draw_index(values, rng)
            # the distribution was checked by the router's _distribution and draw_index never picks
            # an option of probability 0: the record's own checks would only repeat that
            draws.append(trusted_draw(len(draws), kind, option_ids, values, pick))
            if pick == len(eligible):
                break
            row = eligible[pick]
            chosen.append(row)
            eligible = eligible[:pick] + eligible[pick + 1 :]
            option_ids = option_ids[:pick] + option_ids[pick + 1 :]
            if remaining is not None:
                remaining -= tokens[row]
    return draws


def replay_slots(selection: Selection) -> Iterator[tuple[SlotView, SlotDraw, tuple[int, ...]]]:
    """Rebuild each slot's view of a logged selection with the logged choices forced.

    Yields the view, the logged draw and, for each of the draw's ``candidate_ids``, its index
    among the view's options (the stop option is ``len(view.eligible)``).
    """
    if not isinstance(selection, Selection):
        raise RouterError(f"expected a Selection, got {type(selection).__name__}")
    candidates = tuple(sc.candidate for sc in selection.offered)
    table = FeatureTable.from_rows(candidates, [sc.features for sc in selection.offered])
    index = {c.id: i for i, c in enumerate(candidates)}
    chosen: list[int] = []
    remaining = selection.context.budget.max_tokens
    for draw in selection.slots:
        eligible: list[int] = []
        for cid in draw.candidate_ids:
            if cid == STOP_ID:
                continue
            if cid not in index:
                raise RouterError(f"selection {selection.id} slot {draw.slot} offers {cid!r}, which is not in offered")
            eligible.append(index[cid])
        position = sum(1 for i in chosen if candidates[i].kind is draw.kind)
        view = SlotView(
            selection.context, table, draw.kind, draw.slot, position, tuple(eligible), tuple(chosen), remaining
        )
        option_of = tuple(len(eligible) if cid == STOP_ID else eligible.index(index[cid]) for cid in draw.candidate_ids)
        yield view, draw, option_of
        if draw.chosen_id != STOP_ID:
            chosen.append(index[draw.chosen_id])
            if remaining is not None:
                remaining -= candidates[index[draw.chosen_id]].tokens
