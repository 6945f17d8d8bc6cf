"""Per-slot credit: how a composite reward is attributed to the slots of a selection.

Let ``R`` be the episode's composite reward (``RewardBreakdown.total``, or the float given) and
``w`` its weights (the spec's defaults when a float is given). Learners receive one credit per
drawn slot, in slot order.

* No local outcomes (``outcomes`` is ``None``): every slot, the stop option included, is credited
  ``R`` -- the slate is judged as a whole, as in conditional contextual bandits.
* With local outcomes ``o_c`` in ``[0, 1]`` (1: the candidate was used / helped, 0: injected but
  unused), attribution is marginal, with the stop option as the zero point (it adds nothing and
  costs nothing):

  - a candidate with an outcome gets ``o_c * R+ - (1 - o_c) * kappa_c``, where ``R+ = max(R, w.ws)``
    (a candidate that helped is needed for success even when the episode failed because something
    else was missing, so it is credited at least what success is worth), and
    ``kappa_c = w.wr * unused_penalty + w.wx * tokens_c / B`` is what an unused candidate costs
    under the composite reward: it dilutes retrieval hit quality H (``unused_penalty`` of one
    hit, a router hyperparameter) and spends its share of the context-cost term X
    (``B`` = the context budget in tokens, or the offered pool's total tokens without a limit);
  - a candidate without an outcome gets ``R``;
  - a stop draw gets 0 when some candidate of the same kind in the selection has an outcome, and
    ``R`` otherwise (then nothing local is known and stopping shares the slate's fate).

Because the stop option's credit is known without trying it whenever outcomes exist, learners may
also learn it at every slot (full information for that one option).

A candidate the turn needed but the selection left out (``missing``: the agent's failed call names
it) is credited ``R+`` as well (:func:`needed_credit`), at the last slot it could have filled.

So the learner prefers adding a candidate to stopping exactly when its predicted probability of
helping, ``P``, satisfies ``P * R_hit > (1 - P) * kappa``: it fills fewer slots once it is sure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memabra._errors import RouterError
from memabra._records import STOP_ID, RewardBreakdown, RewardWeights, Selection
from memabra.router._sampling import finite_reward

__all__ = [
    "SlotCredit",
    "check_missing",
    "check_outcomes",
    "credit_learning",
    "needed_credit",
    "reward_total",
    "slot_credits",
]


def reward_total(reward: RewardBreakdown | float) -> tuple[float, RewardWeights]:
    """The total and the weights of ``reward`` (default weights for a bare number)."""
    if isinstance(reward, RewardBreakdown):
        return finite_reward(reward.total, "reward total"), reward.weights
    return finite_reward(reward, "reward"), RewardWeights()


def check_outcomes(selection: Selection, outcomes: Mapping[str, float]) -> dict[str, float]:
    """``outcomes`` as floats, after checking each names a chosen candidate and lies in [0, 1]."""
    chosen = set(selection.chosen_ids)
    checked: dict[str, float] = {}
    for candidate_id, value in outcomes.items():
        if candidate_id not in chosen:
            raise RouterError(
                f"outcomes name {candidate_id!r}, which selection {selection.id} did not choose "
                f"(chosen: {sorted(chosen)})"
            )
        number = finite_reward(value, f"outcome of {candidate_id!r}")
        if not 0.0 <= number <= 1.0:
            raise RouterError(f"outcome of {candidate_id!r} must lie in [0, 1], got {number!r}")
        checked[candidate_id] = number
    return checked


def needed_credit(reward: RewardBreakdown | float) -> float:
    """``R+ = max(R, w.ws)``: the credit of a candidate that helped, or was needed and missing."""
    total, weights = reward_total(reward)
    return max(total, weights.ws)


def check_missing(selection: Selection, missing: Sequence[str]) -> tuple[str, ...]:
    """The ``missing`` ids that ``selection`` offered, deduplicated in order, after checking it is a
    sequence of ids none of which was chosen."""
    if isinstance(missing, (str, bytes)) or not isinstance(missing, Sequence):
        raise RouterError(f"missing must be a sequence of candidate ids, got {type(missing).__name__}")
    chosen = set(selection.chosen_ids)
    offered = {sc.candidate.id for sc in selection.offered}
    out: list[str] = []
    for candidate_id in missing:
        if not isinstance(candidate_id, str):
            raise RouterError(f"missing must hold candidate ids (str), got {type(candidate_id).__name__}")
        if candidate_id in chosen:
            raise RouterError(f"missing names {candidate_id!r}, which selection {selection.id} chose")
        if candidate_id in offered and candidate_id not in out:
            out.append(candidate_id)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SlotCredit:
    """The credit of a drawn slot, and what stopping at that slot would have earned when that is
    known without having tried it (0 under marginal attribution), else ``None``. ``local`` says
    the credit comes from the slot's own outcome rather than the whole slate's reward."""

    credit: float
    stop_credit: float | None
    local: bool = False


def slot_credits(
    selection: Selection,
    reward: RewardBreakdown | float,
    outcomes: Mapping[str, float] | None,
    unused_penalty: float,
) -> tuple[SlotCredit, ...]:
    """One credit per ``selection.slots`` entry (see the module docstring for the rule)."""
    total, weights = reward_total(reward)
    if outcomes is None:
        return tuple(SlotCredit(total, None) for _ in selection.slots)
    local = check_outcomes(selection, outcomes)
    budget_tokens = selection.context.budget.max_tokens or sum(sc.candidate.tokens for sc in selection.offered)
    budget_tokens = max(budget_tokens, 1)
    by_id = {sc.candidate.id: sc.candidate for sc in selection.offered}
    kinds_with_outcome = {by_id[cid].kind for cid in local}
    credits: list[SlotCredit] = []
    for draw in selection.slots:
        stop_credit = 0.0 if draw.kind in kinds_with_outcome else None
        if draw.chosen_id == STOP_ID:
            credits.append(
                SlotCredit(total if stop_credit is None else stop_credit, stop_credit, stop_credit is not None)
            )
            continue
        outcome = local.get(draw.chosen_id)
        if outcome is None:
            credits.append(SlotCredit(total, stop_credit))
            continue
        kappa = weights.wr * unused_penalty + weights.wx * by_id[draw.chosen_id].tokens / budget_tokens
        credits.append(SlotCredit(outcome * max(total, weights.ws) - (1.0 - outcome) * kappa, stop_credit, True))
    return tuple(credits)


def credit_learning(
    selection: Selection,
    reward: RewardBreakdown | float,
    outcomes: Mapping[str, float] | None,
    local_credit: bool,
    missing: Sequence[str],
    unused_penalty: float,
) -> tuple[tuple[SlotCredit, ...], float | None, tuple[str, ...]]:
    """What one learning step of a router needs, checked before anything is learned: the slot
    credits, the credit of a missing candidate (``None`` when none is missing) and the missing ids."""
    checked = None if outcomes is None else check_outcomes(selection, outcomes)
    needed = check_missing(selection, missing)
    credits = slot_credits(selection, reward, checked if local_credit else None, unused_penalty)
    return credits, needed_credit(reward) if needed else None, needed
